"""OPTIMIZE with pyarrow in the task: the shared plan (``optimize_plan``) run bin by bin, then committed.

For the many small tables a Spark cluster would be overkill for; big tables go through ``spark.optimize``,
which runs the same plan on executors. Per bin, as Delta Spark's ``OptimizeExecutor``:

- the bin's logical rows are read with the one scan (``Scan`` over the bin's files: deletion vectors
  applied, column mapping resolved, types widened), a few files at a time, never the whole bin at once;
- compaction: the rows are appended to one file (a new one only past ``max_file_size``);
- Z-order and clustering: a first pass samples the curve columns (about ``SAMPLE_ROWS`` rows) for range
  boundaries and the cuts between files (``space_filling_curves``); a second pass sends each row to the
  file of its stretch of the curve, so each file holds one contiguous range of keys;
- on tables that enable row tracking, each row keeps its row id and row commit version: they are read
  as ``_metadata.row_id`` / ``row_commit_version`` and written into the materialized columns the table's
  configuration names ("Row Tracking", as Delta Spark's OPTIMIZE preserves them).

Files are written by the Arrow writer's ``DataFileWriter`` (statistics from the footer, physical names);
each batch of bins is committed by ``optimize_commit`` (``dataChange=false``, Delta Spark's metrics and
conflict rules). A batch that fails, or whose commit is refused, has its files deleted; files of batches
committed before stay, committed.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..actions.actions import AddFile, stats_num_records
from ..base.errors import CommitOutcomeUnknownError
from ..features.row_tracking import materialized_columns as tracked_columns
from ..scans.scan import Scan, gathered
from ..schema.physical_columns import to_physical
from ..snapshot.snapshot import Snapshot
from ..snapshot.table_context import TableContext
from ..writes.data_files import ROW_GROUP_BYTES, DataFileWriter
from ..writes.write_plan import rewrite_plan
from .optimize_commit import BatchResult, OptimizeMetrics, commit_batch, rewritten_files, summarize
from .optimize_plan import Bin, OptimizePlan, plan_optimize
from .space_filling_curves import curve_keys, cut_keys, part_ids, range_boundaries

log = logging.getLogger(__name__)
SAMPLE_ROWS = 100_000  # rows of the curve columns sampled per bin for range boundaries and file cuts
SAMPLE_SEED = 17
ROW_TRACKING_FIELDS = ("row_id", "row_commit_version")
# Files of a bin read at once on an object store, where each read mostly waits for its request; on a
# local disk the scan decides (one thread for small files, whose reads are Python work under the GIL).
REMOTE_READ_AHEAD = 16
_CHUNK_ROWS = 128 * 1024  # logical rows gathered before they are converted and written
_CHUNK_BYTES = 32 * 1024 * 1024
_PENDING_LIMIT = 64 * 1024 * 1024  # bytes all of a bin's open files may buffer together
Progress = Callable[[dict[str, Any]], None]


def optimize(
    table: TableContext,
    *,
    partition_filter: Any = None,
    zorder_by: Sequence[str] = (),
    min_file_size: int | None = None,
    max_file_size: int | None = None,
    max_deleted_rows_ratio: float | None = None,
    batch_size: int | None = None,
    read_ahead: int | None = None,
    progress: Progress | None = None,
) -> OptimizeMetrics:
    """OPTIMIZE ``table`` with pyarrow in this process: compact small files, or Z-order by ``zorder_by``
    (a clustered table is clustered by its own columns). Bad arguments raise ``OptimizeError`` or a
    subclass (``ZOrderColumnError``, ``PartitionFilterError``) before anything is written.

    :param partition_filter: only these partitions, deltalake-style DNF tuples over partition columns.
    :param zorder_by: Z-order by these data columns (they need statistics).
    :param min_file_size: files below this are compacted (default ``delta.targetFileSize``, else 1 GiB).
    :param max_file_size: the size of the files written (default ``delta.targetFileSize``, else 1 GiB).
    :param batch_size: commit bins in batches of about this many input bytes (one commit each).
    :param read_ahead: files read at once (default 16 on object stores; on local disks the scan's
        default: 4, or 1 when the files are small).
    :param progress: called with a dict (files and bytes planned, bins done, bytes read and written,
        commits, elapsed and ETA seconds) as the work goes on, and once more at the end (``final``).
    """
    snapshot = table.snapshot()
    plan = plan_optimize(
        snapshot, partition_filter=partition_filter, zorder_by=zorder_by, min_file_size=min_file_size,
        max_file_size=max_file_size, max_deleted_rows_ratio=max_deleted_rows_ratio, batch_size=batch_size,
    )  # fmt: skip
    kept = materialized_columns(snapshot)
    if read_ahead is None and table.store.protocol not in ("file", "local"):
        read_ahead = REMOTE_READ_AHEAD
    tracker = ProgressTracker(plan, progress, engine="pyarrow")
    results: list[BatchResult] = []
    for batch in plan.batches:
        written: list[tuple[Bin, list[AddFile]]] = []
        try:
            for i in batch:
                bin_ = plan.bins[i]
                adds = rewrite_bin(table, plan, bin_, kept, read_ahead, tracker)
                written.append((bin_, adds))
                tracker.bin_done(bin_, sum(a.size for a in adds))
            result = commit_batch(table, plan, written)
        except CommitOutcomeUnknownError:
            raise  # the commit may be in the table: its files must stay
        except BaseException:
            delete_files(table, [a for _, adds in written for a in adds])
            raise
        removed = rewritten_files(plan, written)
        version = None if result is None else result.version
        results.append(([a for _, adds in written for a in adds], removed, version))
        tracker.committed(version)
    tracker.report(final=True)
    metrics = summarize(plan, results)
    log.info("OPTIMIZE of %s with pyarrow: %d file(s) rewritten as %d in %d bin(s), version(s) %s",
             table.uri, metrics.num_files_removed, metrics.num_files_added, metrics.num_bins,
             metrics.versions)  # fmt: skip
    return metrics


def materialized_columns(snapshot: Snapshot) -> tuple[str, str] | None:
    """The file columns rewritten rows keep their row ids and commit versions in (``row_tracking``)."""
    return tracked_columns(snapshot.protocol, snapshot.metadata,
                           f"table {snapshot.store.uri}", "OPTIMIZE")  # fmt: skip


# -- one bin --------------------------------------------------------------------------------------------
def rewrite_bin(
    table: TableContext, plan: OptimizePlan, bin_: Bin, kept: tuple[str, str] | None, read_ahead: int | None,
    tracker: ProgressTracker | None = None,
) -> list[AddFile]:  # fmt: skip
    """Write the rows of one bin as new files; their adds (not committed). On a failure, what the bin
    wrote is deleted before the error goes on."""
    snapshot = plan.snapshot
    metadata = ROW_TRACKING_FIELDS if kept else ()
    cuts = boundaries = None
    parts = bin_.outputs(plan.max_file_size, plan.mode)
    if plan.mode != "compaction" and parts > 1:
        boundaries, cuts = _sample_cuts(snapshot, plan, bin_, read_ahead)
    writer = _BinWriter(table, plan, bin_, kept, parts if cuts is not None else 1)
    try:
        scan = Scan(snapshot, metadata=metadata, files=bin_.files, read_ahead=read_ahead)
        for chunk in gathered(scan.to_batches(), _CHUNK_ROWS, _CHUNK_BYTES):
            ids = None
            if cuts is not None and boundaries is not None:
                values = [_column(chunk, c) for c in plan.columns]
                keys = curve_keys(values, boundaries, plan.curve or "zorder", plan.num_ranges)
                ids = part_ids(keys, cuts)
            writer.write(chunk, ids)
            if tracker is not None:
                tracker.wrote(writer.written_bytes())
        return writer.close()
    except BaseException:
        writer.delete()
        raise


def _sample_cuts(
    snapshot: Snapshot, plan: OptimizePlan, bin_: Bin, read_ahead: int | None
) -> tuple[list[np.ndarray], np.ndarray]:
    """Boundaries and cuts from a seeded sample of the bin's curve columns (the first of two passes: only
    those columns are read, and only the sample is kept)."""
    top = list(dict.fromkeys(c.split(".")[0] for c in plan.columns))
    records = bin_records(bin_.files)
    fraction = 1.0 if records <= SAMPLE_ROWS else SAMPLE_ROWS / records
    rng = np.random.default_rng(SAMPLE_SEED)
    scan = Scan(snapshot, top, files=bin_.files, read_ahead=read_ahead)
    picked: list[pa.RecordBatch] = []
    for batch in scan.to_batches():
        keep = rng.random(batch.num_rows) < fraction
        picked.append(batch if fraction >= 1.0 else batch.filter(pa.array(keep)))
    sample = pa.Table.from_batches(picked, schema=scan.schema)
    values = [_column(sample, c) for c in plan.columns]
    return cuts_from_sample(values, plan, bin_)


def cuts_from_sample(
    values: Sequence[pa.Array | pa.ChunkedArray], plan: OptimizePlan, bin_: Bin
) -> tuple[list[np.ndarray], np.ndarray]:
    """Range boundaries of each curve column and the keys where the bin's files start, from a sample of
    its rows; both engines cut files here (Spark samples on executors, pyarrow in the task)."""
    boundaries = [range_boundaries(v, plan.num_ranges) for v in values]
    keys = curve_keys(values, boundaries, plan.curve or "zorder", plan.num_ranges)
    ordered = keys.take(pc.sort_indices(keys))
    return boundaries, cut_keys(ordered, bin_.outputs(plan.max_file_size, plan.mode))


def bin_records(files: pa.Table) -> int:
    """Rows of a bin's files from their statistics (a file without them counts as ``SAMPLE_ROWS``)."""
    total = 0
    for stats in files.column("stats").to_pylist():
        total += (stats_num_records(stats) or 0) if stats else SAMPLE_ROWS
    return total


def _column(rows: pa.Table | pa.RecordBatch, name: str) -> Any:
    """A (dotted, nested) logical column."""
    first, *rest = name.split(".")
    value: Any = rows.column(rows.schema.get_field_index(first))
    for part in rest:
        value = pc.struct_field(value, part)
    return value


class _BinWriter:
    """The files one bin becomes, in its partition's folder: ``parts`` files (one per stretch of the
    curve), each opened at its first row; compaction rolls over to a new file past ``max_file_size``."""

    def __init__(
        self, table: TableContext, plan: OptimizePlan, bin_: Bin, kept: tuple[str, str] | None, parts: int
    ) -> None:
        # "Row Tracking": materialized ids and versions are written after the table's columns.
        config = plan.snapshot.table_configuration
        write = rewrite_plan(config, f"table {table.uri}", hidden_columns=kept or ())
        self.layout = write.layout
        self.data_columns = list(self.layout.data_columns)
        self.physical, self.kept = self.layout.physical, kept
        self.folder = self.layout.partition_dir(bin_.partition_values)
        self.table, self.bin, self.plan, self.parts = table, bin_, plan, parts
        self.row_group_bytes = max(1 << 20, min(ROW_GROUP_BYTES, plan.max_file_size, _PENDING_LIMIT // parts))
        self.open: dict[int, DataFileWriter] = {}
        self.adds: list[AddFile] = []
        self.made: list[str] = []

    def write(self, rows: pa.Table, ids: np.ndarray | None) -> None:
        physical = self._physical(rows)
        if ids is None:
            self._append(0, physical)
            return
        order = np.argsort(ids, kind="stable")
        ids = ids[order]
        physical = physical.take(pa.array(order))
        starts = np.flatnonzero(np.r_[True, ids[1:] != ids[:-1]])
        ends = np.r_[starts[1:], len(ids)]
        for start, end in zip(starts.tolist(), ends.tolist(), strict=True):
            self._append(int(ids[start]), physical.slice(start, end - start))

    def _physical(self, rows: pa.Table) -> pa.Table:
        arrays = [to_physical(rows.column(c), self.physical.field(i).type)
                  for i, c in enumerate(self.data_columns)]  # fmt: skip
        if self.kept:
            meta = rows.column("_metadata").combine_chunks()
            arrays += [meta.field("row_id"), meta.field("row_commit_version")]
        return pa.Table.from_arrays(arrays, schema=self.physical)

    def _append(self, part: int, physical: pa.Table) -> None:
        writer = self.open.get(part)
        if writer is None:
            name = self.layout.file_name(part)
            rel = f"{self.folder}/{name}" if self.folder else name
            self.made.append(rel)
            store = self.table.store
            writer = DataFileWriter(store.fs, store.root, rel, dict(self.bin.partition_values), self.layout,
                                    self.row_group_bytes)  # fmt: skip
            self.open[part] = writer
        writer.write(physical)
        if self.parts == 1 and writer.written_bytes >= self.plan.max_file_size:
            self.adds.append(writer.close())  # compaction past the target size: the next rows start a file
            del self.open[part]

    def written_bytes(self) -> int:
        return sum(a.size for a in self.adds) + sum(w.written_bytes for w in self.open.values())

    def close(self) -> list[AddFile]:
        for part in sorted(self.open):
            self.adds.append(self.open.pop(part).close())
        return self.adds

    def delete(self) -> None:
        for writer in self.open.values():
            writer.abort()
        self.open.clear()
        delete_files(self.table, self.made)


def delete_files(table: TableContext, files: Sequence[AddFile | str]) -> None:
    """Files an OPTIMIZE wrote but did not commit: nothing references them, so they go at once."""
    for f in files:
        with contextlib.suppress(FileNotFoundError):
            table.store.fs.rm(table.store.table_file(f if isinstance(f, str) else f.path))


class ProgressTracker:
    """An OPTIMIZE's progress for a ``progress`` callback: files and bytes planned, bins done, bytes read
    and written, commits, elapsed time and an ETA (from the share of planned bytes read so far)."""

    def __init__(self, plan: OptimizePlan, progress: Progress | None, *, engine: str) -> None:
        self.plan, self.progress, self.engine = plan, progress, engine
        self.started = time.monotonic()
        self.bins_done = self.bytes_read = self.bytes_written = self.commits = 0
        self._bin_bytes = 0  # bytes written by the bin under way
        self.report()

    def wrote(self, bin_bytes: int) -> None:
        self._bin_bytes = bin_bytes
        self.report()

    def bin_done(self, bin_: Bin, written: int | None = None) -> None:
        self.bins_done += 1
        self.bytes_read += bin_.size
        self.bytes_written += self._bin_bytes if written is None else written
        self._bin_bytes = 0
        self.report()

    def committed(self, version: int | None) -> None:
        self.commits += version is not None
        self.report()

    def report(self, *, final: bool = False, **extra: Any) -> None:
        if self.progress is None:
            return
        elapsed = time.monotonic() - self.started
        total = self.plan.num_bytes
        eta = elapsed * (total - self.bytes_read) / self.bytes_read if self.bytes_read else None
        self.progress({
            "engine": self.engine, "files_planned": self.plan.num_files, "bytes_planned": total,
            "bins_total": len(self.plan.bins), "bins_done": self.bins_done, "bytes_read": self.bytes_read,
            "bytes_written": self.bytes_written + self._bin_bytes, "commits": self.commits,
            "elapsed_s": elapsed, "eta_s": 0.0 if final else eta, "final": final, **extra,
        })  # fmt: skip


def describe(progress: dict[str, Any]) -> str:
    """One progress report as a line a person can follow (the operator's log, ``deltalog optimize``)."""
    eta = progress.get("eta_s")
    when = "done" if progress.get("final") else "ETA ?" if eta is None else f"ETA {eta:,.0f}s"
    return (f"OPTIMIZE ({progress['engine']}): {progress['files_planned']:,} file(s) planned "
            f"({progress['bytes_planned']:,} bytes), bins {progress['bins_done']}/{progress['bins_total']}, "
            f"{progress['bytes_read']:,} bytes read, {progress['bytes_written']:,} written, "
            f"{progress['commits']} commit(s), {progress['elapsed_s']:,.1f}s, {when}")  # fmt: skip
