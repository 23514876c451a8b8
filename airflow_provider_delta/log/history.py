"""Commit history and time travel by timestamp.

Timestamps follow Delta Spark: the in-commit timestamp where the table enables them, else the commit
file's modification time, adjusted so they never go backwards (each at least 1 ms after the previous).
A timestamp picks the latest commit at or before it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from .actions import check_commit_info
from .errors import CorruptLogError, TableNotFoundError, VersionNotFoundError
from .segment import commit_name, commit_version
from .storage import FileMeta, LogStore


@dataclass(frozen=True)
class HistoryEntry:
    """One commit as ``history()`` reports it."""

    version: int
    timestamp: int
    operation: str | None
    commit_info: dict[str, Any]

    def to_dict(self) -> dict[str, Any]:
        return {**self.commit_info, "version": self.version, "timestamp": self.timestamp}


def read_commit_info(store: LogStore, version: int, data: bytes | None = None) -> dict[str, Any] | None:
    """The ``commitInfo`` of one commit (in-commit timestamps require it to be the first action)."""
    name = commit_name(version)
    if data is None:
        data = store.read_log_file(name)
    for lineno, line in enumerate(data.split(b"\n"), start=1):
        if b'"commitInfo"' not in line:
            continue
        path = store.log_file(name)
        try:
            obj = json.loads(line)
        except (ValueError, RecursionError) as exc:  # UnicodeDecodeError is a ValueError
            raise CorruptLogError(f"malformed JSON: {exc}", path=path, line=lineno) from None
        info = obj.get("commitInfo") if isinstance(obj, dict) else None
        if isinstance(info, dict):
            try:
                check_commit_info(info)
            except ValueError as exc:
                raise CorruptLogError(f"invalid commitInfo: {exc}", path=path, line=lineno) from None
            return info
    return None


def list_commits(store: LogStore) -> list[FileMeta]:
    commits = [f for f in store.list_log(0) if commit_version(f.name) is not None]
    if not commits:
        raise TableNotFoundError(f"no Delta table at {store.uri}: {store.log_path} has no commits")
    return commits


class CommitTimeline:
    """Timestamps of every commit still in the log, computed lazily where they need a read."""

    def __init__(self, store: LogStore, commits: list[FileMeta], ict_from: int | None) -> None:
        self.store = store
        self.versions = [commit_version(f.name) for f in commits]
        self.commits = commits
        self.ict_from = ict_from
        self._adjusted: list[int] = []
        previous = None
        for f in commits:
            ts = f.modification_time if previous is None else max(f.modification_time, previous + 1)
            self._adjusted.append(ts)
            previous = ts
        self._ict_cache: dict[int, int] = {}

    def timestamp_at(self, index: int) -> int:
        version = self.versions[index]
        if self.ict_from is not None and version >= self.ict_from:
            if version not in self._ict_cache:
                info = read_commit_info(self.store, version) or {}
                ict = info.get("inCommitTimestamp")
                if ict is None:
                    raise CorruptLogError(
                        f"commit {version} has no inCommitTimestamp although the table enables them",
                        path=self.store.log_file(commit_name(version)),
                    )
                self._ict_cache[version] = int(ict)
            return self._ict_cache[version]
        return self._adjusted[index]

    def version_at(self, timestamp_ms: int) -> int:
        """Latest version whose timestamp is <= ``timestamp_ms`` ("price is right").

        Binary search, as timestamps are monotone within each region; with in-commit timestamps enabled
        part-way, the enablement commit splits the log and the search stays on one side of it.
        """
        lo, hi = 0, len(self.versions) - 1
        if self.ict_from is not None and self.ict_from in self.versions:
            split = self.versions.index(self.ict_from)
            if split > 0 and self.timestamp_at(split) <= timestamp_ms:
                lo = split
            elif split > 0:
                hi = split - 1
        if self.timestamp_at(lo) > timestamp_ms:
            if lo > 0:
                return self.versions[lo - 1]
            raise VersionNotFoundError(
                f"timestamp {timestamp_ms} is before the earliest available commit "
                f"(version {self.versions[0]} at {self.timestamp_at(0)})",
                earliest=self.versions[0],
                latest=self.versions[-1],
            )
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if self.timestamp_at(mid) <= timestamp_ms:
                lo = mid
            else:
                hi = mid - 1
        return self.versions[lo]
