"""``DeltaTable``: the entry point of the core. A handle on a table's location, not a cached state.

Every ``snapshot()`` reads the log afresh (cheaply: ``_last_checkpoint`` first, then a listing from
there), so a long-lived handle in a sensor or a hook never serves a stale version.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from .history import CommitTimeline, HistoryEntry, list_commits, read_commit_info
from .properties import ict_enablement_version
from .segment import commit_version
from .snapshot import Snapshot, load_snapshot
from .storage import LogStore


def _timestamp_ms(value: int | float | str | datetime) -> int:
    """Accept ms since the epoch, an aware datetime, or an ISO-8601 string (UTC when no offset)."""
    if isinstance(value, datetime):
        if value.tzinfo is None:
            raise ValueError("timestamp datetime must be timezone-aware (e.g. pendulum or tz=UTC)")
        return int(value.timestamp() * 1000)
    if isinstance(value, int | float):
        return int(value)
    text = str(value).strip().replace("Z", "+00:00")
    parsed = datetime.fromisoformat(text)
    if parsed.tzinfo is None:
        from datetime import UTC

        parsed = parsed.replace(tzinfo=UTC)
    return int(parsed.timestamp() * 1000)


class DeltaTable:
    """A Delta table at ``uri`` (local path, ``file://``, ``memory://``, ``s3://`` ...).

    :param uri: the table root, the folder that holds ``_delta_log``.
    :param storage_options: fsspec options for the backend (credentials, endpoint); never logged.
    """

    def __init__(self, uri: str, storage_options: dict[str, Any] | None = None) -> None:
        self.store = LogStore(uri, storage_options)

    @property
    def uri(self) -> str:
        return self.store.uri

    def __repr__(self) -> str:
        return f"DeltaTable({self.uri!r})"

    def snapshot(
        self, version: int | None = None, timestamp: int | float | str | datetime | None = None
    ) -> Snapshot:
        """The latest snapshot, or the one at ``version``, or the latest at or before ``timestamp``."""
        if version is not None and timestamp is not None:
            raise ValueError("pass version or timestamp, not both")
        if timestamp is not None:
            version = self.version_at(timestamp)
        return load_snapshot(self.store, version)

    def version(self) -> int:
        """The latest version (reads the log)."""
        return self.snapshot().version

    def version_at(self, timestamp: int | float | str | datetime) -> int:
        """The latest version committed at or before ``timestamp``."""
        ts = _timestamp_ms(timestamp)
        latest = self.snapshot()
        commits = list_commits(self.store)
        timeline = CommitTimeline(self.store, commits, ict_enablement_version(latest.metadata.configuration))
        return timeline.version_at(ts)

    def history(self, limit: int | None = None) -> list[HistoryEntry]:
        """Commits newest first, with the timestamp time travel uses for each."""
        latest = self.snapshot()
        commits = list_commits(self.store)
        timeline = CommitTimeline(self.store, commits, ict_enablement_version(latest.metadata.configuration))
        indices = list(range(len(commits) - 1, -1, -1))
        if limit is not None:
            indices = indices[:limit]
        datas = self.store.read_log_files(commits[i].name for i in indices)
        out = []
        for i, data in zip(indices, datas, strict=True):
            version = commit_version(commits[i].name)
            assert version is not None
            info = read_commit_info(self.store, version, data) or {}
            out.append(HistoryEntry(version, timeline.timestamp_at(i), info.get("operation"), info))
        return out
