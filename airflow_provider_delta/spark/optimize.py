"""OPTIMIZE on Spark: the core plans (``log.optimize_plan``), executors read and write, the driver commits.

For big tables. The plan is the one the pyarrow path runs; per bin, as Delta Spark's ``OptimizeExecutor``:

- compaction: the bin's rows (read by executors, deletion vectors applied, column mapping resolved) go into
  one partition and are written as one file (``repartition(1)`` when the bin has many files, so reading
  them stays parallel; ``coalesce(1)`` otherwise);
- Z-order and clustering: executors compute each row's curve key with the core's
  ``space_filling_curves`` from range boundaries the driver took from a sample of the bin's Z-order
  columns, and the file it goes to from the cuts between files chosen on that sample (where the curve's
  blocks begin); rows are range-partitioned by file into ``size / max_file_size`` partitions.

On tables that enable row tracking, each row's ``_metadata.row_id`` and ``row_commit_version`` are read
with it and written into the materialized columns the table names, so rewritten rows keep them ("Row
Tracking"), as Delta Spark's OPTIMIZE does and as the pyarrow path does.

Files are written by the Spark writer's own path (``write.write_table_files``: Spark's Parquet writer for
local tables, pyarrow on executors otherwise). Bins run as concurrent Spark jobs (``max_threads``, Delta
Spark's ``optimize.maxThreads``); each batch of bins is committed by the driver through the core
(``optimize_commit``). A batch that fails, or whose commit is refused, has its files deleted.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from airflow_provider_delta.log import AddFile, CommitOutcomeUnknownError, DeltaTable
from airflow_provider_delta.log.maintenance.optimize import (
    ROW_TRACKING_FIELDS,
    SAMPLE_ROWS,
    SAMPLE_SEED,
    Progress,
    ProgressTracker,
    bin_records,
    cuts_from_sample,
    delete_files,
    materialized_columns,
)
from airflow_provider_delta.log.maintenance.optimize_commit import (
    BatchResult,
    OptimizeMetrics,
    commit_batch,
    rewritten_files,
    summarize,
)
from airflow_provider_delta.log.maintenance.optimize_plan import Bin, OptimizePlan, plan_optimize
from airflow_provider_delta.log.maintenance.space_filling_curves import curve_keys, part_ids
from airflow_provider_delta.log.scans.scan_file import ReadSpec
from airflow_provider_delta.log.writes.write_plan import rewrite_plan

from .read import TASK_COLUMNS, read_slices, scan_files, task_frame, with_metadata_schema
from .schema import spark_schema_of
from .session import default_parallelism
from .write import write_table_files

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger(__name__)
DEFAULT_MAX_THREADS = 15  # spark.databricks.delta.optimize.maxThreads
_KEY = "__delta_optimize_file"


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
        delete_files(table, [a for _, adds in written for a in adds])
        raise
    removed = rewritten_files(plan, written)
    return [a for _, adds in written for a in adds], removed, None if result is None else result.version


def write_bins(
    spark: SparkSession, table: DeltaTable, plan: OptimizePlan, bins: list[Bin],
    storage_options: dict[str, Any], max_threads: int = DEFAULT_MAX_THREADS, tracker: _Tracker | None = None,
) -> list[tuple[Bin, list[AddFile]]]:  # fmt: skip
    """Write the rows of ``bins`` as new files (not committed): each bin its own Spark job, up to
    ``max_threads`` at a time; on a failure, every file the batch wrote is deleted."""
    kept = materialized_columns(plan.snapshot)  # "Row Tracking": rewritten rows keep their ids and versions
    written: list[tuple[Bin, list[AddFile]]] = []
    lock = threading.Lock()

    def run(bin_: Bin) -> None:
        adds = _run_bin(spark, table, plan, bin_, kept, storage_options)
        with lock:
            written.append((bin_, adds))
        if tracker is not None:
            tracker.bin_done(bin_, sum(a.size for a in adds))

    try:
        with ThreadPoolExecutor(max(1, min(max_threads, len(bins)))) as pool:
            list(pool.map(run, bins))
    except BaseException:
        delete_files(table, [a for _, adds in written for a in adds])
        raise
    order = {id(b): i for i, b in enumerate(bins)}
    return sorted(written, key=lambda pair: order[id(pair[0])])


def _run_bin(
    spark: SparkSession, table: DeltaTable, plan: OptimizePlan, bin_: Bin, kept: tuple[str, str] | None,
    storage_options: dict[str, Any],
) -> list[AddFile]:  # fmt: skip
    snap = plan.snapshot
    rows = bin_rows(spark, table.uri, plan, bin_.files, storage_options, kept)
    if plan.mode == "compaction":
        many = bin_.files.num_rows > 2 * default_parallelism(spark)
        rows = rows.repartition(1) if many else rows.coalesce(1)
    else:
        rows = clustered(spark, rows, plan, bin_)
    write_plan = rewrite_plan(snap.table_configuration, f"table {table.uri}", hidden_columns=kept or ())
    return write_table_files(rows, write_plan, table, storage_options)


def bin_rows(
    spark: SparkSession, table_uri: str, plan: OptimizePlan, files: pa.Table, storage_options: dict[str, Any],
    kept: tuple[str, str] | None = None,
) -> DataFrame:  # fmt: skip
    """The logical rows of ``files`` as a DataFrame, read by executors as ``read`` reads a table (deletion
    vectors applied, column mapping resolved, partition values from the log), a few files per task.

    With ``kept`` (row tracking's materialized columns), each row's ``_metadata.row_id`` and
    ``row_commit_version`` follow the table's columns under those names, to be written into the files."""
    from pyspark.sql import functions as F
    from pyspark.sql.pandas.types import to_arrow_schema

    snap = plan.snapshot
    md = snap.metadata
    metadata = ROW_TRACKING_FIELDS if kept else ()
    spark_schema = with_metadata_schema(spark_schema_of(md.schema), snap, metadata)
    names = tuple(f["name"] for f in md.schema["fields"])
    config = snap.table_configuration
    spec = ReadSpec(
        schema=md.schema, mode=config.column_mapping_mode,
        partition_columns=tuple(md.partition_columns), columns=names, read_columns=names, metadata=metadata,
        row_id_column=config.materialized_row_id_column,
        row_version_column=config.materialized_row_commit_version_column,
        storage_options=dict(storage_options),
    )  # fmt: skip
    output = to_arrow_schema(spark_schema, timezone="UTC")
    tasks = files.select(TASK_COLUMNS)
    slices = read_slices(files, default_parallelism(spark))
    frame = task_frame(spark, tasks, slices)

    def scan(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        return scan_files(batches, table_uri, spec, output)

    rows = frame.mapInArrow(scan, spark_schema)
    if not kept:
        return rows
    return rows.select(*[F.col(_quoted(n)) for n in names], F.col("_metadata.row_id").alias(kept[0]),
                       F.col("_metadata.row_commit_version").alias(kept[1]))  # fmt: skip


def clustered(spark: SparkSession, rows: DataFrame, plan: OptimizePlan, bin_: Bin) -> DataFrame:
    """``rows`` in ``size / max_file_size`` partitions of consecutive keys along the plan's curve.

    The driver takes range boundaries and the cuts between files (``cut_keys``) from a sample of the bin;
    executors compute every row's key and file with the core's curves; rows are then partitioned by that
    file number exactly, so each Spark partition holds one file's rows (a range partitioner would sample
    the numbers and could merge two files whose sizes differ)."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import IntegerType, StructField, StructType

    columns, curve, num_ranges = list(plan.columns), plan.curve or "zorder", plan.num_ranges
    boundaries, cuts = sample_cuts(rows, columns, bin_, plan)
    files = len(cuts) + 1
    surrogate = np.array(hash_surrogates(spark, files), dtype=np.int32)
    keyed_schema = StructType([*rows.schema.fields, StructField(_KEY, IntegerType(), False)])

    def keys(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            key = curve_keys([_column(batch, c) for c in columns], boundaries, curve, num_ranges)
            ids = pa.array(surrogate[part_ids(key, cuts)], pa.int32())
            yield pa.RecordBatch.from_arrays([*batch.columns, ids], names=[*batch.schema.names, _KEY])

    keyed = rows.mapInArrow(keys, keyed_schema)
    return keyed.repartition(files, F.col(_KEY)).drop(_KEY)


def hash_surrogates(spark: SparkSession, n: int) -> list[int]:
    """For each file number ``i < n``, an int that Spark's hash partitioning into ``n`` partitions sends
    to partition ``i`` (``pmod(hash(x), n)``, the Murmur3 hash ``repartition`` uses), found among the first
    ``64 n`` ints: every residue is there but with a probability of about ``n e^-64``."""
    from pyspark.sql import functions as F

    if n <= 1:
        return [0] * max(n, 1)
    found = (spark.range(0, 64 * n).select(F.col("id").cast("int").alias("x"))
             .select("x", F.expr(f"pmod(hash(x), {n})").alias("p")).groupBy("p").agg(F.min("x").alias("x"))
             .collect())  # fmt: skip
    by_partition = {int(r["p"]): int(r["x"]) for r in found}
    missing = [i for i in range(n) if i not in by_partition]
    if missing:
        raise RuntimeError(f"no int below {64 * n} hashes to partition(s) {missing[:5]} of {n}")
    return [by_partition[i] for i in range(n)]


def sample_cuts(
    rows: DataFrame, columns: list[str], bin_: Bin, plan: OptimizePlan
) -> tuple[list[Any], Any]:
    """Range boundaries of each column and the keys where files start, from a sample of about
    ``SAMPLE_ROWS`` rows of the bin (its size known from the files' statistics: no count first)."""
    from pyspark.sql import functions as F

    records = bin_records(bin_.files)
    fraction = 1.0 if records <= SAMPLE_ROWS else SAMPLE_ROWS / records
    picked = rows.select(*[F.col(_quoted(c)).alias(f"c{i}") for i, c in enumerate(columns)])
    sample = (picked if fraction >= 1.0 else picked.sample(fraction=fraction, seed=SAMPLE_SEED)).toArrow()
    return cuts_from_sample([sample.column(f"c{i}") for i in range(len(columns))], plan, bin_)


def _quoted(name: str) -> str:
    return ".".join(f"`{part}`" for part in name.split("."))


def _column(batch: pa.RecordBatch, name: str) -> pa.Array:
    """A (dotted, nested) column of a batch of logical rows."""
    first, *rest = name.split(".")
    value: Any = batch.column(batch.schema.get_field_index(first))
    for part in rest:
        value = value.field(part)
    return value


class _Tracker(ProgressTracker):
    """The core's progress reports, plus the running stage's tasks polled from Spark's status tracker
    every few seconds (a bin's Spark job can run long between two bins done)."""

    POLL_S = 5.0

    def __init__(self, spark: SparkSession, plan: OptimizePlan, progress: Progress | None) -> None:
        super().__init__(plan, progress, engine="spark")
        self.spark = spark
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> _Tracker:
        if self.progress is not None and self.plan.bins:
            self._thread = threading.Thread(target=self._poll, name="optimize-progress", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self.report(final=exc[0] is None)

    def _poll(self) -> None:
        while not self._stop.wait(self.POLL_S):
            self.report(stage_tasks=_stage_tasks(self.spark))


def _stage_tasks(spark: SparkSession) -> tuple[int, int] | None:
    """(completed, total) tasks of the active stages, or None (no SparkContext under Spark Connect)."""
    try:
        status = spark.sparkContext.statusTracker()
        stages = [status.getStageInfo(s) for s in status.getActiveStageIds()]
    except Exception:  # Spark Connect: no SparkContext on the client
        return None
    stages = [s for s in stages if s is not None]
    return sum(s.numCompletedTasks for s in stages), sum(s.numTasks for s in stages)
