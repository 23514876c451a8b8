"""``DeltaTable``: the entry point of the core, a facade over the operations.

A handle on a table's location (a ``TableContext``), not a cached state: every ``snapshot()`` reads the
log afresh (cheaply: ``_last_checkpoint`` first, then a listing from there, or only the commits since the
handle last looked), so a long-lived handle in a sensor or a hook never serves a stale version. The
operations it offers live one floor down, each in its own module, and never import this one.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from datetime import datetime
from typing import Any

import fsspec
import pyarrow as pa

from .actions.actions import AddFile
from .base.arguments import bool_arg, int_arg, str_arg, str_map_arg
from .changes.changes import Bound, Changes, read_changes
from .commits.transaction import CommitResult, Transaction
from .features.configuration import TableConfiguration
from .features.creation import initial_actions
from .files.last_checkpoint import LastCheckpoint
from .files.storage import LogStore
from .files.version_checksum import VersionChecksum
from .maintenance.cleanup import cleanup_expired_logs
from .maintenance.log_compaction import write_log_compaction
from .maintenance.optimize import optimize
from .maintenance.optimize_commit import OptimizeMetrics
from .maintenance.restore import RestoreResult, restore
from .maintenance.vacuum import VacuumReport, vacuum
from .row_changes.delete import delete as delete_rows
from .row_changes.merge import MergeBuilder
from .row_changes.target import RowChangeResult
from .row_changes.update import update as update_rows
from .scans.scan import Scan
from .snapshot.checkpoint import write_checkpoint
from .snapshot.history import HistoryEntry, locate_app_transaction, read_history, version_at_timestamp
from .snapshot.snapshot import Snapshot, validate_checksum
from .snapshot.table_context import TableContext
from .uniform.conversion import convert_after_commit, convert_to_iceberg
from .uniform.status import IcebergStatus, iceberg_status
from .writes.data_files import add_file_from_parquet
from .writes.write_rows import write_rows


class DeltaTable(TableContext):
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
        if not isinstance(uri, str | os.PathLike):
            raise TypeError(f"uri must be a string or path, not {type(uri).__name__} {uri!r}")
        if storage_options is not None and not isinstance(storage_options, Mapping):
            raise TypeError(f"storage_options must be a mapping, not {type(storage_options).__name__}")
        if filesystem is not None and not isinstance(filesystem, fsspec.AbstractFileSystem):
            raise TypeError(f"filesystem must be an fsspec filesystem, not {type(filesystem).__name__}")
        super().__init__(LogStore(os.fspath(uri), dict(storage_options or {}), filesystem))

    def __repr__(self) -> str:
        return f"DeltaTable({self.uri!r})"

    # -- reading ----------------------------------------------------------------------------------------
    def snapshot(
        self, version: int | None = None, timestamp: int | float | str | datetime | None = None
    ) -> Snapshot:
        """The latest snapshot, or the one at ``version``, or the latest at or before ``timestamp``."""
        int_arg(version, "version", optional=True)  # a negative one is a version not found
        if version is not None and timestamp is not None:
            raise ValueError("pass version or timestamp, not both")
        if timestamp is not None:
            version = self.version_at(timestamp)
        return super().snapshot(version)

    def version(self) -> int:
        """The latest version (reads the log)."""
        return self.snapshot().version

    def version_at(self, timestamp: int | float | str | datetime) -> int:
        """The latest version committed at or before ``timestamp``."""
        return version_at_timestamp(self.store, self._ict_from(), timestamp)

    def history(self, limit: int | None = None) -> list[HistoryEntry]:
        """Commits newest first, with the timestamp time travel uses for each."""
        return read_history(self.store, self._ict_from(), int_arg(limit, "limit", minimum=0, optional=True))

    def _ict_from(self) -> int | None:
        return self.snapshot().table_configuration.in_commit_timestamps_from

    def validate_checksum(self, version: int | None = None) -> VersionChecksum:
        """Check the version checksum (``NNN.crc``) of ``version`` (latest by default) against the state
        its log replays to ("State Validation"): the checksum when they agree, else ``ChecksumError``
        naming the file and the fields that differ (also when the version has no checksum). Reads the
        whole file list: a check to run on purpose, not on every read."""
        return validate_checksum(self.snapshot(int_arg(version, "version", minimum=0, optional=True)))

    def locate_app_transaction(self, app_id: str, at_version: int) -> int:
        """The version whose commit recorded the current ``txn`` of ``app_id`` (scanning back from
        ``at_version``); the checkpoint's version when the commit itself was cleaned up."""
        return locate_app_transaction(self.store, app_id, at_version)

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
        table = cls(uri, storage_options, filesystem=filesystem)
        protocol, metadata = initial_actions(schema, partition_by, configuration, name, description)
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
        return Transaction(
            self, self.snapshot(), isolation=isolation, allow_unsafe_storage=allow_unsafe_storage
        )

    def add_file(
        self,
        path: str,
        partition_values: dict[str, str | None] | None = None,
        *,
        data_change: bool = True,
        tags: dict[str, str] | None = None,
    ) -> AddFile:
        """The ``add`` action of a Parquet file already written under the root, stats from its footer
        (``data_files.add_file_from_parquet``; pass a snapshot there when building many)."""
        str_arg(path, "path", empty=False)
        values = str_map_arg(partition_values, "partition_values", null_values=True)
        tags = str_map_arg(tags, "tags") if tags is not None else None
        data_change = bool_arg(data_change, "data_change")
        return add_file_from_parquet(self, path, values, data_change=data_change, tags=tags)

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
        return Scan(self.snapshot(version, timestamp), columns, filter, **options)

    def changes(
        self,
        start: Bound | None = None,
        end: Bound | None = None,
        *,
        starting_timestamp: int | float | str | datetime | None = None,
        ending_timestamp: int | float | str | datetime | None = None,
        **options: Any,
    ) -> Changes:
        """What versions ``start``..``end`` changed (``end``: the latest by default), from their commits
        alone: per version ``versions[i]`` (timestamp, operation, adds, removes, cdc as Arrow), and the
        changed rows with ``_change_type``, ``_commit_version``, ``_commit_timestamp`` as Delta Spark's
        ``table_changes`` reads them (``to_table()``, ``to_reader()``). A bound is a version (an int) or a
        timestamp (aware ``datetime`` or ISO-8601 text); ``starting_timestamp`` / ``ending_timestamp``
        take any timestamp ``snapshot(timestamp=)`` takes, ms since the epoch too, in place of ``start`` /
        ``end``. See ``changes.read_changes`` (``columns=``, ``filter=``)."""
        return read_changes(self.store, start, end, starting_timestamp=starting_timestamp,
                            ending_timestamp=ending_timestamp, **options)  # fmt: skip

    def to_pyarrow_table(
        self, columns: list[str] | None = None, filter: Any = None, **options: Any
    ) -> pa.Table:
        """The rows as one ``pyarrow.Table`` (see :meth:`scan`)."""
        return self.scan(columns, filter, **options).to_table()

    def write(self, data: Any, **options: Any) -> CommitResult:
        """Write rows as one commit (see :func:`.write_rows.write_rows`)."""
        return write_rows(self, data, **options)

    # -- row-level changes ------------------------------------------------------------------------------
    def delete(self, predicate: Any = None, **options: Any) -> RowChangeResult:
        """Delete the rows where ``predicate`` (SQL text, a ``pyarrow.compute.Expression`` or DNF tuples)
        holds, every row without one, in this process, as Delta Spark's DELETE (deletion vectors where the
        table enables them); ``app_id``/``app_version`` make it exactly once. See ``row_changes.delete``."""
        return delete_rows(self, predicate, **options)

    def update(self, set: Mapping[str, Any], predicate: Any = None, **options: Any) -> RowChangeResult:
        """Set columns (``{column: SQL expression}``) of the rows where ``predicate`` holds, in this
        process, as Delta Spark's UPDATE. See ``row_changes.update``."""
        return update_rows(self, set, predicate, **options)

    def merge(self, source: Any, on: str, **options: Any) -> MergeBuilder:
        """Start a MERGE of ``source`` (Arrow, pandas, Polars, a ``RecordBatchReader``) into this table
        ``on`` a condition of ``target`` and ``source`` columns; add ``when_...`` clauses, then
        ``execute()``, as Delta Spark's and deltalake's MERGE builders. See ``row_changes.merge``."""
        return MergeBuilder(self, source, on, **options)

    # -- maintenance ------------------------------------------------------------------------------------
    def checkpoint(self, version: int | None = None, parts: int | None = None) -> LastCheckpoint:
        """Write a checkpoint of ``version`` (latest by default); see ``checkpoint.write_checkpoint``."""
        return write_checkpoint(self, version, parts)

    def vacuum(
        self,
        retention_hours: float | None = None,
        dry_run: bool = True,
        enforce_retention_duration: bool = True,
        **options: Any,
    ) -> VacuumReport:
        """Delete unreferenced data files older than the retention, as Delta Spark's VACUUM."""
        return vacuum(self, retention_hours, dry_run, enforce_retention_duration, **options)

    def optimize(self, **options: Any) -> OptimizeMetrics:
        """Compact small files, or Z-order them (``zorder_by=[...]``), with pyarrow in this process, as
        Delta Spark's OPTIMIZE: rows, row ids and statistics kept, ``dataChange=false``; see
        ``optimize.optimize`` for the options (``partition_filter``, ``max_file_size``, ``progress``...)."""
        return optimize(self, **options)

    def restore(
        self,
        version: int | None = None,
        timestamp: int | float | str | datetime | None = None,
        **options: Any,
    ) -> RestoreResult:
        """Bring the table back to ``version`` (or the one at ``timestamp``) in a new commit, as Delta
        Spark's RESTORE; see ``restore.restore``."""
        return restore(self, version, timestamp, **options)

    def cleanup_expired_logs(self, **options: Any) -> list[str]:
        """Delete log files older than ``delta.logRetentionDuration`` that no retained version needs."""
        return cleanup_expired_logs(self, **options)

    # -- UniForm ----------------------------------------------------------------------------------------
    def convert_to_iceberg(self) -> IcebergStatus:
        """Write UniForm's Iceberg metadata for the latest version, catching up from the last version
        converted (commits do this themselves when ``delta.universalFormat.enabledFormats`` names iceberg;
        this catches up after one failed); see ``uniform.conversion``. Returns the status."""
        return convert_to_iceberg(self)

    def iceberg_status(self) -> IcebergStatus:
        """How far UniForm's Iceberg metadata lags behind the latest version (``uniform.status``)."""
        return iceberg_status(self)

    def after_commit(self, version: int, config: TableConfiguration | None) -> None:
        """The post-commit hook of every transaction on this table: UniForm's conversion of ``version``
        (a failure is logged, never raised)."""
        convert_after_commit(self, version, config)

    def compact_log(self, start: int | None = None, end: int | None = None) -> str | None:
        """Write a log compaction file of commits ``start`` to ``end`` (by default every commit since the
        newest checkpoint), so that readers read one file for them ("Log Compaction Files"); its name, or
        ``None`` when there was nothing worth compacting or it exists."""
        return write_log_compaction(self, start, end)


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
