"""``DeltaTable``: the entry point of the core. A handle on a table's location, not a cached state.

Every ``snapshot()`` reads the log afresh (cheaply: ``_last_checkpoint`` first, then a listing from
there), so a long-lived handle in a sensor or a hook never serves a stale version.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import TYPE_CHECKING, Any

from .history import CommitTimeline, HistoryEntry, list_commits, read_commit_info
from .properties import ict_enablement_version
from .segment import commit_name, commit_version
from .snapshot import Snapshot, load_snapshot, update_snapshot
from .storage import LogStore

if TYPE_CHECKING:
    import fsspec
    import pyarrow as pa

    from .last_checkpoint import LastCheckpoint
    from .scan import Scan
    from .transaction import CommitResult, Transaction
    from .vacuum import VacuumReport


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
    :param filesystem: a ready fsspec filesystem (e.g. from an Airflow connection) instead of options.
    """

    def __init__(
        self,
        uri: str,
        storage_options: dict[str, Any] | None = None,
        *,
        filesystem: fsspec.AbstractFileSystem | None = None,
    ) -> None:
        self.store = LogStore(uri, storage_options, filesystem)
        self._latest: Snapshot | None = None

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
        cached = self._latest
        if version is None:
            # A handle that has read the table before reads only the commits since (Delta's "update").
            snap = update_snapshot(cached) if cached is not None else load_snapshot(self.store)
            self._latest = snap
            return snap
        if cached is not None and cached.version == version:
            return cached
        if cached is not None and cached.version < version:
            # Usually the version just committed (an automatic checkpoint): catch up incrementally.
            latest = update_snapshot(cached)
            self._latest = latest
            if latest.version == version:
                return latest
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

    # -- writing ----------------------------------------------------------------------------------------
    @classmethod
    def create(
        cls,
        uri: str,
        schema: pa.Schema | dict[str, Any],
        partition_by: list[str] | None = None,
        configuration: dict[str, str] | None = None,
        storage_options: dict[str, Any] | None = None,
        *,
        name: str | None = None,
        description: str | None = None,
        allow_unsafe_storage: bool = False,
        filesystem: fsspec.AbstractFileSystem | None = None,
    ) -> DeltaTable:
        """Create a table: version 0 with the lowest protocol its features need (see ``creation``)."""
        from .creation import initial_actions
        from .transaction import Transaction

        table = cls(uri, storage_options, filesystem=filesystem)
        protocol, metadata = initial_actions(
            schema, partition_by or [], configuration or {}, name, description
        )
        txn = Transaction(table, None, allow_unsafe_storage=allow_unsafe_storage)
        txn.update_protocol(protocol).update_metadata(metadata)
        txn.commit(
            "CREATE TABLE",
            {
                "partitionBy": json.dumps(list(metadata.partition_columns)),
                "description": description,
                "isManaged": "false",
                "properties": json.dumps(metadata.configuration),
            },
        )
        return table

    def transaction(self, isolation: str | None = None, *, allow_unsafe_storage: bool = False) -> Transaction:
        """A transaction that starts from the latest snapshot; ``isolation`` overrides the table's
        ``delta.isolationLevel`` (see ``Transaction``)."""
        from .transaction import Transaction

        return Transaction(
            self, self.snapshot(), isolation=isolation, allow_unsafe_storage=allow_unsafe_storage
        )

    # -- rows -----------------------------------------------------------------------------------------
    def scan(
        self,
        columns: list[str] | None = None,
        filter: Any = None,
        *,
        version: int | None = None,
        timestamp: int | float | str | datetime | None = None,
        **options: Any,
    ) -> Scan:
        """The rows of a version (latest by default) as a :class:`~.scan.Scan`: ``to_table()``,
        ``to_reader()`` (streamed in bounded memory), ``to_batches()``."""
        from .scan import Scan

        return Scan(self.snapshot(version, timestamp), columns, filter, **options)

    def to_pyarrow_table(
        self, columns: list[str] | None = None, filter: Any = None, **options: Any
    ) -> pa.Table:
        """The rows as one ``pyarrow.Table`` (see :meth:`scan`)."""
        return self.scan(columns, filter, **options).to_table()

    def write(self, data: Any, **options: Any) -> CommitResult:
        """Write rows as one commit (see :func:`.write_rows.write_rows`)."""
        from .write_rows import write_rows

        return write_rows(self, data, **options)

    # -- maintenance ------------------------------------------------------------------------------------
    def checkpoint(self, version: int | None = None, parts: int | None = None) -> LastCheckpoint:
        """Write a checkpoint of ``version`` (latest by default); see ``checkpoint.write_checkpoint``."""
        from .checkpoint import write_checkpoint

        return write_checkpoint(self, version, parts)

    def vacuum(
        self,
        retention_hours: float | None = None,
        dry_run: bool = True,
        enforce_retention_duration: bool = True,
        **options: Any,
    ) -> VacuumReport:
        """Delete unreferenced data files older than the retention, as Delta Spark's VACUUM."""
        from .vacuum import vacuum

        return vacuum(self, retention_hours, dry_run, enforce_retention_duration, **options)

    def cleanup_expired_logs(self, **options: Any) -> list[str]:
        """Delete log files older than ``delta.logRetentionDuration`` that no retained version needs."""
        from .cleanup import cleanup_expired_logs

        return cleanup_expired_logs(self, **options)

    def locate_app_transaction(self, app_id: str, at_version: int) -> int:
        """The version whose commit recorded the current ``txn`` of ``app_id`` (scanning back from
        ``at_version``); the checkpoint's version when the commit itself was cleaned up."""
        needle = json.dumps(app_id).encode()
        version = at_version
        while version >= 0:
            batch = list(range(version, max(-1, version - 32), -1))
            try:
                datas = self.store.read_log_files(commit_name(v) for v in batch)
            except FileNotFoundError:
                datas = []
                for v in batch:
                    try:
                        datas.append(self.store.read_log_file(commit_name(v)))
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
            body = json.loads(line).get("txn")
            if isinstance(body, dict) and body.get("appId") == app_id:
                return True
    return False


def write(
    uri: str, data: Any, *, storage_options: dict[str, Any] | None = None, **options: Any
) -> CommitResult:
    """Write rows (a pyarrow Table or RecordBatchReader, pandas, Polars...) to the table at ``uri`` as one
    commit, creating it on the first write; see :func:`.write_rows.write_rows` for the options."""
    return DeltaTable(uri, storage_options).write(data, **options)


def read_table(uri: str, columns: list[str] | None = None, filter: Any = None, *,
               storage_options: dict[str, Any] | None = None, **options: Any) -> pa.Table:  # fmt: skip
    """The rows of the table at ``uri`` (``version=``/``timestamp=`` for time travel) as a pyarrow Table."""
    return DeltaTable(uri, storage_options).scan(columns, filter, **options).to_table()
