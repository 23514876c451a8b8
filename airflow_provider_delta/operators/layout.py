"""Layout and rollback from Airflow: OPTIMIZE (compaction, Z-order, clustering) and RESTORE.

Each operator is one call into the core (``log.restore``, ``log.optimize``) or, for big tables, the Spark
layer (``spark.optimize``), which plan the same way; the operators only pass templated arguments and the
task context, log progress and push the ``delta_commit`` record behind the "Delta table" link. See
docs/maintenance.md.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseHook

from airflow_provider_delta.extras import require
from airflow_provider_delta.hooks.secrets import redact_errors
from airflow_provider_delta.log.maintenance.optimize import describe
from airflow_provider_delta.operators.base import DeltaBaseOperator, int_or_none
from airflow_provider_delta.operators.spark import spark_settings
from airflow_provider_delta.ui.links import record_commit

if TYPE_CHECKING:
    from airflow.sdk import Context

    from airflow_provider_delta.log import DeltaTable
    from airflow_provider_delta.log.maintenance.optimize_commit import OptimizeMetrics

ENGINES = ("auto", "pyarrow", "spark")
# "auto": tables up to this many bytes of live files are optimized with pyarrow in the task; bigger ones on
# Spark. A task compacts a few GiB in minutes; beyond that a cluster's executors read and write in parallel.
DEFAULT_SPARK_THRESHOLD_BYTES = 8 * 1024**3


def _flag(value: bool | str) -> bool:
    return value if isinstance(value, bool) else str(value).strip().lower() in ("true", "1", "yes")


class DeltaRestoreOperator(DeltaBaseOperator):
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

    @redact_errors
    def execute(self, context: Context) -> dict[str, Any]:
        version = int_or_none(self.version)
        timestamp = None if self.timestamp in (None, "", "None") else self.timestamp
        if isinstance(timestamp, str) and timestamp.strip().lstrip("-").isdigit():
            timestamp = int(timestamp)
        table = self.delta_table()
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


class DeltaOptimizeOperator(DeltaBaseOperator):
    """OPTIMIZE a table as Delta Spark does: compact small files into files of the target size, or Z-order
    them by ``zorder_by`` (a clustered table is clustered by its own columns). Rows, row ids, statistics
    and column mapping are kept; the commit (``dataChange=false``) never conflicts with concurrent appends.

    Two engines run the same plan (``log.optimize_plan``): ``pyarrow`` in the task (``log.optimize``) for
    small tables, ``spark`` (``spark.optimize``: executors read and write, the task commits) for big ones;
    ``auto`` picks pyarrow when the table's live files hold at most ``spark_threshold_bytes``. Progress
    (files planned, bins done, bytes written, an ETA) is logged every ``progress_interval`` seconds.

    Returns Delta Spark's OPTIMIZE metrics as a dict (``numFilesAdded``, ``numFilesRemoved``,
    ``filesAdded``, ``filesRemoved``, ``partitionsOptimized``, ``numBins``, ``numBatches``, ...) with
    ``versions`` (the commits, none when there was nothing to do) and ``engine``.

    :param table_uri: the table root. Templated.
    :param zorder_by: Z-order by these data columns (a list, or JSON text of one). Templated.
    :param partition_filter: only these partitions: deltalake-style DNF tuples over partition columns,
        e.g. ``[("day", "=", "{{ ds }}")]`` (or JSON text of such a list). Templated.
    :param engine: ``auto``, ``pyarrow`` or ``spark``. Templated.
    :param spark_threshold_bytes: the size up to which ``auto`` chooses pyarrow.
    :param min_file_size: files below this are compacted (default: ``delta.targetFileSize``, else 1 GiB).
    :param max_file_size: the size of the files written (default: ``delta.targetFileSize``, else 1 GiB).
    :param batch_size: commit bins in batches of about this many input bytes, one commit each (a huge table
        then keeps the progress a later failure would otherwise lose).
    :param master: Spark master URL for the ``spark`` engine (``local[2]`` by default).
    :param spark_conn_id: an Airflow ``spark`` connection (master URL, conf) instead of ``master``.
    :param spark_conf: Spark settings, over the connection's.
    :param progress_interval: seconds between progress lines in the task log.
    :param delta_conn_id: connection for the table's storage (``None``: no credentials).

    Bad arguments fail the task by name before anything is written (``ZOrderColumnError`` for an unknown
    or partition column, ``PartitionFilterError`` for a filter on a data column). A concurrent DELETE of a
    file being compacted fails it with ``ConcurrentDeleteReadError``: a retry plans again.
    """

    template_fields: Sequence[str] = ("table_uri", "zorder_by", "partition_filter", "engine")

    def __init__(
        self,
        *,
        table_uri: str,
        zorder_by: Sequence[str] | str = (),
        partition_filter: Any = None,
        engine: str = "auto",
        spark_threshold_bytes: int = DEFAULT_SPARK_THRESHOLD_BYTES,
        min_file_size: int | None = None,
        max_file_size: int | None = None,
        batch_size: int | None = None,
        master: str = "local[2]",
        spark_conn_id: str | None = None,
        spark_conf: Mapping[str, Any] | None = None,
        progress_interval: float = 30.0,
        delta_conn_id: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(table_uri=table_uri, delta_conn_id=delta_conn_id, **kwargs)
        if engine not in ENGINES and "{{" not in str(engine):
            raise ValueError(f"engine must be one of {ENGINES}, not {engine!r}")
        self.zorder_by = zorder_by
        self.partition_filter = partition_filter
        self.engine = engine
        self.spark_threshold_bytes = spark_threshold_bytes
        self.min_file_size = min_file_size
        self.max_file_size = max_file_size
        self.batch_size = batch_size
        self.master = master
        self.spark_conn_id = spark_conn_id
        self.spark_conf = dict(spark_conf or {})
        self.progress_interval = progress_interval

    @redact_errors
    def execute(self, context: Context) -> dict[str, Any]:
        table = self.delta_table()
        engine = self._engine(table)
        progress = ProgressLog(self.log, self.progress_interval)
        options: dict[str, Any] = {
            "zorder_by": _listed(self.zorder_by, "zorder_by"),
            "partition_filter": _listed(self.partition_filter, "partition_filter") or None,
            "min_file_size": self.min_file_size, "max_file_size": self.max_file_size,
            "batch_size": self.batch_size,
            "progress": lambda report: progress(describe(report), final=bool(report.get("final"))),
        }  # fmt: skip
        metrics = self._run_spark(options) if engine == "spark" else table.optimize(**options)
        version = metrics.versions[-1] if metrics.versions else table.version()
        record_commit(context, self.table_uri, version, delta_conn_id=self.delta_conn_id,
                      files_added=metrics.num_files_added, operation="OPTIMIZE")  # fmt: skip
        self.log.info("OPTIMIZE of %s with %s: %d file(s) rewritten as %d, version(s) %s", self.table_uri,
                      engine, metrics.num_files_removed, metrics.num_files_added,
                      metrics.versions)  # fmt: skip
        return {**metrics.to_dict(), "engine": engine}

    def _engine(self, table: DeltaTable) -> str:
        engine = str(self.engine).strip().lower()
        if engine not in ENGINES:
            raise ValueError(f"engine must be one of {ENGINES}, not {self.engine!r}")
        if engine != "auto":
            return engine
        size = table.snapshot().table_size_bytes  # from the version checksum when there is one
        chosen = "pyarrow" if size <= self.spark_threshold_bytes else "spark"
        self.log.info("engine auto: %s holds %d bytes of live files (threshold %d): %s", self.table_uri, size,
                      self.spark_threshold_bytes, chosen)  # fmt: skip
        return chosen

    def _run_spark(self, options: dict[str, Any]) -> OptimizeMetrics:
        require("pyspark")
        from pyspark.sql import SparkSession

        from airflow_provider_delta.spark.optimize import optimize
        from airflow_provider_delta.spark.session import spark_session

        master, conf = self.master, dict(self.spark_conf)
        if self.spark_conn_id:
            master, conn_conf = spark_settings(BaseHook.get_connection(self.spark_conn_id))
            conf = {**conn_conf, **conf}
        storage_options = self.table_storage_options()
        existing = SparkSession.getActiveSession()
        self.log.info("Spark session on %s", master)
        spark = spark_session(master, conf)
        try:
            return optimize(spark, self.table_uri, storage_options=storage_options, **options)
        finally:
            if existing is None:  # only stop a session this task started
                spark.stop()


def _listed(value: Any, name: str) -> list[Any]:
    """A list argument, or JSON text of one (what a rendered template gives)."""
    if value in (None, "", "None"):
        return []
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:  # ``x, y``: column names
            if name == "zorder_by":
                value = [part.strip() for part in value.split(",") if part.strip()]
    if not isinstance(value, list | tuple):
        raise ValueError(f"{name} must be a list (or JSON text of one), not {value!r}")
    return [_triples(v) for v in value] if name == "partition_filter" else list(value)


def _triples(value: Any) -> Any:
    """JSON lists back into the filter's ``(column, op, value)`` tuples, conjunctions kept as lists."""
    if isinstance(value, list | tuple) and len(value) == 3 and isinstance(value[0], str):
        return tuple(value)
    return [_triples(v) for v in value] if isinstance(value, list | tuple) else value
