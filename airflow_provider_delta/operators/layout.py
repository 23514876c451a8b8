"""Layout and rollback from Airflow: OPTIMIZE (compaction, Z-order, clustering) and RESTORE.

Each operator is one call into the core (``log.restore``, ``log.optimize``) or, for big tables, the Spark
layer (``spark.optimize``), which plan the same way; the operators only pass templated arguments and the
task context, log progress and push the ``delta_commit`` record behind the "Delta table" link. See
docs/maintenance.md.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from airflow_provider_delta.operators.maintenance import _int_or_none, _TableOperator
from airflow_provider_delta.ui.links import record_commit

if TYPE_CHECKING:
    from airflow.sdk import Context


def _flag(value: bool | str) -> bool:
    return value if isinstance(value, bool) else str(value).strip().lower() in ("true", "1", "yes")


class DeltaRestoreOperator(_TableOperator):
    """Restore a table to an earlier version, or to the version current at a timestamp, in one new commit
    (Delta's RESTORE: the files of that version come back, later ones are removed, its metadata returns;
    the protocol is never downgraded). Nothing is deleted: every version stays readable by time travel.

    Returns Delta Spark's RESTORE metrics as a dict (``numRestoredFiles``, ``numRemovedFiles``,
    ``restoredFilesSize``, ``removedFilesSize``, ``numOfFilesAfterRestore``, ``tableSizeAfterRestore``)
    with ``version`` (the commit) and ``restored_version``.

    :param table_uri: the table root. Templated.
    :param version: the version to restore to. Templated.
    :param timestamp: or the latest version committed at or before this time (ISO-8601, UTC when without
        offset, or ms since the epoch). Templated.
    :param enforce_retention_duration: refuse a target older than ``delta.deletedFileRetentionDuration``
        (VACUUM may have deleted its files), as Delta Spark does.
    :param ignore_missing_files: restore even when files the target needs are gone from storage.
    :param delta_conn_id: connection for the table's storage (``None``: no credentials).

    A target that is not an earlier version, or whose files are gone, fails the task by name
    (``RestoreTargetError``, ``RestoreMissingFilesError`` listing the files) and commits nothing. A concurrent
    change to the table fails it too (``ConcurrentModificationError``): retrying restores over it.
    """

    template_fields: Sequence[str] = ("table_uri", "version", "timestamp")

    def __init__(
        self,
        *,
        table_uri: str,
        version: int | str | None = None,
        timestamp: str | int | None = None,
        enforce_retention_duration: bool = True,
        ignore_missing_files: bool = False,
        delta_conn_id: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(table_uri=table_uri, delta_conn_id=delta_conn_id, **kwargs)
        self.version = version
        self.timestamp = timestamp
        self.enforce_retention_duration = enforce_retention_duration
        self.ignore_missing_files = ignore_missing_files

    def execute(self, context: Context) -> dict[str, Any]:
        version = _int_or_none(self.version)
        timestamp = None if self.timestamp in (None, "", "None") else self.timestamp
        if isinstance(timestamp, str) and timestamp.strip().lstrip("-").isdigit():
            timestamp = int(timestamp)
        table = self._table()
        result = table.restore(
            version, timestamp,
            enforce_retention_duration=_flag(self.enforce_retention_duration),
            ignore_missing_files=_flag(self.ignore_missing_files),
        )  # fmt: skip
        record_commit(context, self.table_uri, result.version, delta_conn_id=self.delta_conn_id,
                      files_added=result.num_restored_files, operation="RESTORE")  # fmt: skip
        self.log.info(
            "restored %s to version %d as version %d: %d file(s) restored (%d bytes), %d removed (%d bytes); "
            "%d file(s) now", self.table_uri, result.restored_version, result.version,
            result.num_restored_files, result.restored_files_size, result.num_removed_files,
            result.removed_files_size, result.num_of_files_after_restore,
        )  # fmt: skip
        return {"version": result.version, "restored_version": result.restored_version, **result.metrics()}


class ProgressLog:
    """Log an operation's progress at a steady cadence: at most every ``interval`` seconds, and the last
    report always (a long OPTIMIZE reports files planned, bins done, bytes written and an ETA)."""

    def __init__(self, log: Any, interval: float) -> None:
        self.log, self.interval = log, max(0.0, float(interval))
        self._last = float("-inf")

    def __call__(self, text: str, *, final: bool = False) -> None:
        now = time.monotonic()
        if final or now - self._last >= self.interval:
            self._last = now
            self.log.info("%s", text)
