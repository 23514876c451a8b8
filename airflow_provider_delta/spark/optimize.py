"""OPTIMIZE on Spark: the core plans (``log.optimize_plan``), executors read and write, the driver commits.

For big tables. The plan is the one the pyarrow path runs; per bin, as Delta Spark's ``OptimizeExecutor``:

- compaction: the bin's rows (read by executors, deletion vectors applied, column mapping resolved) go into
  one partition and are written as one file (``repartition(1)`` when the bin has many files, so reading
  them stays parallel; ``coalesce(1)`` otherwise);
- Z-order and clustering: executors compute each row's curve key with the core's
  ``space_filling_curves`` from range boundaries the driver took from a sample of the bin's Z-order
  columns, and the file it goes to from the cuts between files chosen on that sample (where the curve's
  blocks begin); rows are range-partitioned by file into ``size / max_file_size`` partitions.

Files are written by the Spark writer's own path (``write.write_table_files``: Spark's Parquet writer for
local tables, pyarrow on executors otherwise). Bins run as concurrent Spark jobs (``max_threads``, Delta
Spark's ``optimize.maxThreads``); each batch of bins is committed by the driver through the core
(``optimize_commit``). A batch that fails, or whose commit is refused, has its files deleted.
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc

from airflow_provider_delta.log import AddFile, CommitOutcomeUnknownError, DeltaTable
from airflow_provider_delta.log.errors import UnsupportedFeatureError
from airflow_provider_delta.log.optimize_commit import BatchResult, OptimizeMetrics, commit_batch, summarize
from airflow_provider_delta.log.optimize_plan import Bin, OptimizePlan, plan_optimize
from airflow_provider_delta.log.row_tracking import is_enabled
from airflow_provider_delta.log.scan_file import ReadSpec
from airflow_provider_delta.log.schema import column_mapping_mode
from airflow_provider_delta.log.space_filling_curves import curve_keys, cut_keys, part_ids, range_boundaries

from .data_files import WritePlan
from .read import scan_files
from .schema import spark_schema_of
from .session import default_parallelism
from .write import write_table_files

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger(__name__)
DEFAULT_MAX_THREADS = 15  # spark.databricks.delta.optimize.maxThreads
SAMPLE_ROWS = 100_000  # rows of the Z-order columns sampled per bin for range boundaries
_KEY = "__delta_optimize_file"
_TASK_COLUMNS = ["path", "partitionValues", "deletionVector"]
Progress = Callable[[dict[str, Any]], None]


def optimize(
    spark: SparkSession,
    table_uri: str,
    *,
    partition_filter: Any = None,
    zorder_by: Sequence[str] = (),
    min_file_size: int | None = None,
    max_file_size: int | None = None,
    max_deleted_rows_ratio: float | None = None,
    batch_size: int | None = None,
    storage_options: dict[str, Any] | None = None,
    max_threads: int = DEFAULT_MAX_THREADS,
    progress: Progress | None = None,
) -> OptimizeMetrics:
    """OPTIMIZE the table at ``table_uri`` on ``spark``: compact small files, or Z-order by ``zorder_by``
    (clustered tables are clustered by their own columns). Arguments as ``DeltaTable.optimize``; returns
    Delta Spark's metrics and the versions committed (none when there was nothing to do)."""
    table = DeltaTable(table_uri, storage_options)
    snapshot = table.snapshot()
    if is_enabled(snapshot.protocol, snapshot.metadata):
        # "Row Tracking": rewritten rows must keep their row ids and commit versions, which takes writing
        # them into the materialized columns; until the rewrite does, refuse rather than renumber rows.
        raise UnsupportedFeatureError(
            f"table {table_uri} tracks row ids (delta.enableRowTracking): OPTIMIZE would give its rows new "
            "ids, so it is refused; Delta Spark's OPTIMIZE keeps them", features=("rowTracking",),
        )  # fmt: skip
    plan = plan_optimize(
        snapshot, partition_filter=partition_filter, zorder_by=zorder_by, min_file_size=min_file_size,
        max_file_size=max_file_size, max_deleted_rows_ratio=max_deleted_rows_ratio, batch_size=batch_size,
    )  # fmt: skip
    tracker = _Tracker(spark, plan, progress)
    results: list[BatchResult] = []
    with tracker:
        for batch in plan.batches:
            bins = [plan.bins[i] for i in batch]
            written = write_bins(spark, table, plan, bins, dict(storage_options or {}), max_threads, tracker)
            results.append(_commit(table, plan, written))
            tracker.committed(results[-1][2])
    metrics = summarize(plan, results)
    log.info("OPTIMIZE of %s on Spark: %d file(s) rewritten as %d in %d bin(s), version(s) %s",
             table_uri, metrics.num_files_removed, metrics.num_files_added, metrics.num_bins,
             metrics.versions)  # fmt: skip
    return metrics


def _commit(table: DeltaTable, plan: OptimizePlan, written: list[tuple[Bin, list[AddFile]]]) -> BatchResult:
    try:
        result = commit_batch(table, plan, written)
    except CommitOutcomeUnknownError:
        raise  # the commit may be in the table: its files must stay
    except BaseException:
        _delete(table, [a for _, adds in written for a in adds])
        raise
    removed = [AddFile.from_dict(r) for bin_, _ in written for r in bin_.files.to_pylist()]
    return [a for _, adds in written for a in adds], removed, None if result is None else result.version


def write_bins(
    spark: SparkSession, table: DeltaTable, plan: OptimizePlan, bins: list[Bin],
    storage_options: dict[str, Any], max_threads: int = DEFAULT_MAX_THREADS, tracker: _Tracker | None = None,
) -> list[tuple[Bin, list[AddFile]]]:  # fmt: skip
    """Write the rows of ``bins`` as new files (not committed): each bin its own Spark job, up to
    ``max_threads`` at a time; on a failure, every file the batch wrote is deleted."""
    written: list[tuple[Bin, list[AddFile]]] = []
    lock = threading.Lock()

    def run(bin_: Bin) -> None:
        adds = _run_bin(spark, table, plan, bin_, storage_options)
        with lock:
            written.append((bin_, adds))
        if tracker is not None:
            tracker.bin_done(bin_, adds)

    try:
        with ThreadPoolExecutor(max(1, min(max_threads, len(bins)))) as pool:
            list(pool.map(run, bins))
    except BaseException:
        _delete(table, [a for _, adds in written for a in adds])
        raise
    order = {id(b): i for i, b in enumerate(bins)}
    return sorted(written, key=lambda pair: order[id(pair[0])])


def _run_bin(
    spark: SparkSession, table: DeltaTable, plan: OptimizePlan, bin_: Bin, storage_options: dict[str, Any]
) -> list[AddFile]:
    snap = plan.snapshot
    rows = bin_rows(spark, table.uri, plan, bin_.files, storage_options)
    if plan.mode == "compaction":
        many = bin_.files.num_rows > 2 * default_parallelism(spark)
        rows = rows.repartition(1) if many else rows.coalesce(1)
    else:
        rows = clustered(spark, rows, plan, bin_)
    md = snap.metadata
    write_plan = WritePlan(rows, md.schema, dict(md.configuration), tuple(md.partition_columns))
    return write_table_files(write_plan, table, storage_options)


def bin_rows(
    spark: SparkSession, table_uri: str, plan: OptimizePlan, files: pa.Table, storage_options: dict[str, Any]
) -> DataFrame:
    """The logical rows of ``files`` as a DataFrame, read by executors as ``read`` reads a table (deletion
    vectors applied, column mapping resolved, partition values from the log), a few files per task."""
    from pyspark.sql.pandas.types import to_arrow_schema

    md = plan.snapshot.metadata
    spark_schema = spark_schema_of(md.schema)
    names = tuple(f["name"] for f in md.schema["fields"])
    spec = ReadSpec(
        schema=md.schema, mode=column_mapping_mode(md.configuration),
        partition_columns=tuple(md.partition_columns), columns=names, read_columns=names,
        storage_options=dict(storage_options),
    )  # fmt: skip
    output = to_arrow_schema(spark_schema, timezone="UTC")
    tasks = files.select(_TASK_COLUMNS)
    slices = max(1, min(tasks.num_rows, 4 * default_parallelism(spark)))
    frame = spark.createDataFrame(tasks).repartition(slices)

    def scan(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        return scan_files(batches, table_uri, spec, output)

    return frame.mapInArrow(scan, spark_schema)


def clustered(spark: SparkSession, rows: DataFrame, plan: OptimizePlan, bin_: Bin) -> DataFrame:
    """``rows`` in ``size / max_file_size`` partitions of consecutive keys along the plan's curve.

    The driver takes range boundaries and the cuts between files (``cut_keys``) from a sample of the bin;
    executors compute every row's key and file with the core's curves; rows are then range-partitioned by
    that file number, so each Spark partition holds one file's rows."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import IntegerType, StructField, StructType

    columns, curve, num_ranges = list(plan.columns), plan.curve or "zorder", plan.num_ranges
    boundaries, cuts = sample_cuts(rows, columns, bin_, plan)
    keyed_schema = StructType([*rows.schema.fields, StructField(_KEY, IntegerType(), False)])

    def keys(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            key = curve_keys([_column(batch, c) for c in columns], boundaries, curve, num_ranges)
            ids = pa.array(part_ids(key, cuts), pa.int32())
            yield pa.RecordBatch.from_arrays([*batch.columns, ids], names=[*batch.schema.names, _KEY])

    keyed = rows.mapInArrow(keys, keyed_schema)
    return keyed.repartitionByRange(len(cuts) + 1, F.col(_KEY)).drop(_KEY)


def sample_cuts(
    rows: DataFrame, columns: list[str], bin_: Bin, plan: OptimizePlan
) -> tuple[list[Any], Any]:
    """Range boundaries of each column and the keys where files start, from a sample of about
    ``SAMPLE_ROWS`` rows of the bin (its size known from the files' statistics: no count first)."""
    from pyspark.sql import functions as F

    records = _records(bin_.files)
    fraction = 1.0 if records <= SAMPLE_ROWS else SAMPLE_ROWS / records
    picked = rows.select(*[F.col(_quoted(c)).alias(f"c{i}") for i, c in enumerate(columns)])
    sample = (picked if fraction >= 1.0 else picked.sample(fraction=fraction, seed=17)).toArrow()
    values = [sample.column(f"c{i}") for i in range(len(columns))]
    boundaries = [range_boundaries(v, plan.num_ranges) for v in values]
    keys = curve_keys(values, boundaries, plan.curve or "zorder", plan.num_ranges)
    cuts = cut_keys(keys.take(pc.sort_indices(keys)), bin_.outputs(plan.max_file_size, plan.mode))
    return boundaries, cuts


def _records(files: pa.Table) -> int:
    total = 0
    for stats in files.column("stats").to_pylist():
        total += int(json.loads(stats).get("numRecords", 0)) if stats else SAMPLE_ROWS
    return total


def _quoted(name: str) -> str:
    return ".".join(f"`{part}`" for part in name.split("."))


def _column(batch: pa.RecordBatch, name: str) -> pa.Array:
    """A (dotted, nested) column of a batch of logical rows."""
    first, *rest = name.split(".")
    value: Any = batch.column(batch.schema.get_field_index(first))
    for part in rest:
        value = value.field(part)
    return value


def _delete(table: DeltaTable, adds: list[AddFile]) -> None:
    """Files an OPTIMIZE wrote but did not commit: nothing references them, so they go at once."""
    for add in adds:
        with contextlib.suppress(FileNotFoundError):
            table.store.fs.rm(table.store.table_file(add.path))


class _Tracker:
    """Progress of a Spark OPTIMIZE for ``progress``: files and bytes planned, bins done, bytes written,
    commits, and the running stage's tasks (polled from Spark's status tracker every few seconds)."""

    POLL_S = 5.0

    def __init__(self, spark: SparkSession, plan: OptimizePlan, progress: Progress | None) -> None:
        self.spark, self.plan, self.progress = spark, plan, progress
        self.started = time.monotonic()
        self.bins_done = self.bytes_read = self.bytes_written = self.commits = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> _Tracker:
        self._report()
        if self.progress is not None and self.plan.bins:
            self._thread = threading.Thread(target=self._poll, name="optimize-progress", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self._report(final=True)

    def bin_done(self, bin_: Bin, adds: list[AddFile]) -> None:
        self.bins_done += 1
        self.bytes_read += bin_.size
        self.bytes_written += sum(a.size for a in adds)
        self._report()

    def committed(self, version: int | None) -> None:
        self.commits += version is not None
        self._report()

    def _poll(self) -> None:
        while not self._stop.wait(self.POLL_S):
            self._report(tasks=_stage_tasks(self.spark))

    def _report(self, *, final: bool = False, tasks: tuple[int, int] | None = None) -> None:
        if self.progress is None:
            return
        elapsed = time.monotonic() - self.started
        total = self.plan.num_bytes
        eta = elapsed * (total - self.bytes_read) / self.bytes_read if self.bytes_read else None
        self.progress({
            "engine": "spark", "files_planned": self.plan.num_files, "bytes_planned": total,
            "bins_total": len(self.plan.bins), "bins_done": self.bins_done, "bytes_read": self.bytes_read,
            "bytes_written": self.bytes_written, "commits": self.commits, "elapsed_s": elapsed,
            "eta_s": eta, "stage_tasks": tasks, "final": final,
        })  # fmt: skip


def _stage_tasks(spark: SparkSession) -> tuple[int, int] | None:
    """(completed, total) tasks of the active stages, or None (no SparkContext under Spark Connect)."""
    try:
        status = spark.sparkContext.statusTracker()
        stages = [status.getStageInfo(s) for s in status.getActiveStageIds()]
    except Exception:  # Spark Connect: no SparkContext on the client
        return None
    stages = [s for s in stages if s is not None]
    return sum(s.numCompletedTasks for s in stages), sum(s.numTasks for s in stages)
