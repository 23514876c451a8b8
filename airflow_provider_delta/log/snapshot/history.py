"""Commit history and time travel by timestamp.

Timestamps follow Delta Spark: the in-commit timestamp where the table enables them, else the commit
file's modification time, adjusted so they never go backwards (each at least 1 ms after the previous).
A timestamp picks the latest commit at or before it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from ..actions.actions import check_commit_info
from ..base.errors import CorruptLogError, TableNotFoundError, VersionNotFoundError
from ..files.commit_json import action_lines
from ..files.segment import commit_name, commit_version, reconstructable_commits
from ..files.storage import FileMeta, LogStore


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
    path = store.log_file(name)
    for lineno, obj in action_lines(data, path, naming=(b'"commitInfo"',)):
        info = obj.get("commitInfo")
        if isinstance(info, dict):
            try:
                check_commit_info(info)
            except ValueError as exc:
                raise CorruptLogError(f"invalid commitInfo: {exc}", path=path, line=lineno) from None
            return info
    return None


def list_commits(store: LogStore) -> list[FileMeta]:
    """The table's commits still in the log, oldest first: those at versions a reader can reconstruct
    (``reconstructable_commits``: an orphan a stale writer left below a gap is no version of the table)."""
    commits = reconstructable_commits(store.list_log(0))
    if not commits:
        raise TableNotFoundError(
            f"no Delta table at {store.uri}: {store.log_path} has no commit that can be read"
        )
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


def locate_app_transaction(store: LogStore, app_id: str, at_version: int) -> int:
    """The version whose commit recorded the current ``txn`` of ``app_id``, scanning back from
    ``at_version``; the oldest remaining version (a checkpoint's) when that commit was cleaned up."""
    needle = json.dumps(app_id).encode()
    version = at_version
    while version >= 0:
        batch = list(range(version, max(-1, version - 32), -1))
        try:
            datas = store.read_log_files(commit_name(v) for v in batch)
        except FileNotFoundError:
            datas = []
            for v in batch:
                try:
                    datas.append(store.read_log_file(commit_name(v)))
                except FileNotFoundError:
                    return v + 1
        for v, data in zip(batch, datas, strict=False):
            if b'"txn"' in data and needle in data and _has_txn(data, app_id):
                return v
        version = batch[-1] - 1
    return at_version


def _has_txn(data: bytes, app_id: str) -> bool:
    for line in data.split(b"\n"):
        if b'"txn"' in line:
            try:
                body = json.loads(line).get("txn")
            except (ValueError, AttributeError):
                continue
            if isinstance(body, dict) and body.get("appId") == app_id:
                return True
    return False


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MS = timedelta(milliseconds=1)


def timestamp_ms(value: int | float | str | datetime) -> int:
    """A time-travel timestamp as ms since the epoch: ms, an aware datetime, or an ISO-8601 string (UTC
    when it carries no offset)."""
    if isinstance(value, datetime):
        if value.tzinfo is None:
            raise ValueError("timestamp datetime must be timezone-aware (e.g. pendulum or tz=UTC)")
        return (value - _EPOCH) // _MS  # exact: float seconds * 1000 can land a millisecond short
    if isinstance(value, int | float):
        return int(value)
    parsed = datetime.fromisoformat(str(value).strip().replace("Z", "+00:00"))
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    return (parsed - _EPOCH) // _MS


_MAX_RELISTS = 10


def read_history(store: LogStore, ict_from: int | None, limit: int | None = None) -> list[HistoryEntry]:
    """Commits newest first, with the timestamp time travel uses for each. A commit deleted by log cleanup
    between the listing and the read makes it list again (bounded), as snapshot loading does."""
    for attempt in range(_MAX_RELISTS + 1):
        commits = list_commits(store)
        timeline = CommitTimeline(store, commits, ict_from)
        indices = list(range(len(commits) - 1, -1, -1))[:limit]
        try:
            datas = store.read_log_files(commits[i].name for i in indices)
            out = []
            for i, data in zip(indices, datas, strict=True):
                version = commit_version(commits[i].name)
                assert version is not None
                info = read_commit_info(store, version, data) or {}
                out.append(HistoryEntry(version, timeline.timestamp_at(i), info.get("operation"), info))
            return out
        except FileNotFoundError:
            if attempt == _MAX_RELISTS:
                raise
    raise AssertionError("unreachable")


def version_at_timestamp(
    store: LogStore, ict_from: int | None, timestamp: int | float | str | datetime
) -> int:
    """The latest version committed at or before ``timestamp`` ("price is right")."""
    ts = timestamp_ms(timestamp)
    for attempt in range(_MAX_RELISTS + 1):
        try:
            return CommitTimeline(store, list_commits(store), ict_from).version_at(ts)
        except FileNotFoundError:
            if attempt == _MAX_RELISTS:
                raise
    raise AssertionError("unreachable")
