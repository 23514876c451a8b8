"""Committing OPTIMIZE: one batch of rewritten bins as one commit, with Delta Spark's conflict rules.

Both engines end here: the pyarrow path in the task, and the Spark driver once executors wrote the files.
The commit removes the bins' files and adds the new ones, all with ``dataChange=false`` (the rows are the
same, only their files change), so it is checked with SnapshotIsolation: concurrent appends never fail it.

A concurrent commit that removed one of the files being rewritten (a DELETE, an UPDATE, a new deletion
vector, another OPTIMIZE) makes it fail with ``ConcurrentDeleteReadError``, as in Delta Spark: committing
would bring back rows that were deleted. Any other conflict (a metadata or protocol change) is retried on
the latest snapshot as long as every rewritten file, with the same deletion vector, is still live and the
partitioning has not changed (Delta Spark's ``commitAndRetry``); a caller that retries after a failure
plans again from the latest snapshot.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from ..actions.actions import AddFile
from ..base.errors import ConcurrentModificationError
from ..commits.transaction import CommitResult, Transaction
from ..snapshot.replay import reconciliation_keys
from ..snapshot.table_context import TableContext
from .optimize_plan import CLUSTERING_PROVIDER, ZCUBE_ID, ZCUBE_ZORDER_BY, Bin, OptimizePlan

log = logging.getLogger(__name__)
MAX_REPLANS = 10  # commits on a newer snapshot after metadata or protocol changes, before giving up


@dataclass(frozen=True)
class FileSizeStats:
    """Sizes of a set of files as Delta Spark's OPTIMIZE reports them (``filesAdded``, ``filesRemoved``)."""

    min: int = 0
    max: int = 0
    avg: float = 0.0
    total_files: int = 0
    total_size: int = 0

    @classmethod
    def of(cls, sizes: Sequence[int]) -> FileSizeStats:
        if not sizes:
            return cls()
        return cls(min(sizes), max(sizes), sum(sizes) / len(sizes), len(sizes), sum(sizes))

    def to_dict(self) -> dict[str, Any]:
        return {"min": self.min, "max": self.max, "avg": self.avg, "totalFiles": self.total_files,
                "totalSize": self.total_size}  # fmt: skip


@dataclass
class OptimizeMetrics:
    """What an OPTIMIZE did, in Delta Spark's terms (its ``OptimizeMetrics``), and the versions it made."""

    num_files_added: int = 0
    num_files_removed: int = 0
    files_added: FileSizeStats = field(default_factory=FileSizeStats)
    files_removed: FileSizeStats = field(default_factory=FileSizeStats)
    partitions_optimized: int = 0
    num_bins: int = 0
    num_batches: int = 0
    total_considered_files: int = 0
    total_files_skipped: int = 0
    num_deletion_vectors_removed: int = 0
    num_deletion_vector_rows_removed: int = 0
    zorder_stats: dict[str, Any] | None = None
    clustering_columns: tuple[str, ...] = ()
    versions: list[int] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "numFilesAdded": self.num_files_added, "numFilesRemoved": self.num_files_removed,
            "filesAdded": self.files_added.to_dict(), "filesRemoved": self.files_removed.to_dict(),
            "partitionsOptimized": self.partitions_optimized, "numBins": self.num_bins,
            "numBatches": self.num_batches, "totalConsideredFiles": self.total_considered_files,
            "totalFilesSkipped": self.total_files_skipped, "versions": list(self.versions),
        }  # fmt: skip
        if self.zorder_stats is not None:
            out["zOrderStats"] = self.zorder_stats
        if self.num_deletion_vectors_removed:
            out["deletionVectorStats"] = {
                "numDeletionVectorsRemoved": self.num_deletion_vectors_removed,
                "numDeletionVectorRowsRemoved": self.num_deletion_vector_rows_removed,
            }
        return out


def parameters(plan: OptimizePlan) -> dict[str, Any]:
    """``operationParameters`` of Delta Spark's OPTIMIZE: the predicate, Z-order or clustering columns."""
    clustering = plan.mode == "clustering"
    params: dict[str, Any] = {
        "predicate": json.dumps(list(plan.predicate)),
        "zOrderBy": json.dumps([] if clustering else list(plan.columns)),
        "clusterBy": json.dumps(list(plan.columns) if clustering else []),
        "auto": False,
    }
    if clustering:
        params["isFull"] = False
    return params


def finished_adds(plan: OptimizePlan, bin_: Bin, adds: Sequence[AddFile]) -> list[AddFile]:
    """The adds of a rewritten bin as OPTIMIZE commits them: ``dataChange=false``; when clustering,
    tagged with the bin's cube and the clustering provider (``ZCubeInfo``)."""
    out = []
    for add in adds:
        add = dataclasses.replace(add, data_change=False)
        if plan.mode == "clustering":
            tags = {**(add.tags or {}), ZCUBE_ID: bin_.cube or "",
                    ZCUBE_ZORDER_BY: json.dumps(list(plan.columns), separators=(",", ":"))}  # fmt: skip
            add = dataclasses.replace(add, tags=tags, clustering_provider=CLUSTERING_PROVIDER)
        out.append(add)
    return out


def _sizes_metrics(adds: Sequence[AddFile], removed: pa.Table) -> dict[str, int]:
    """``operationMetrics`` as Delta Spark's OPTIMIZE writes them (percentiles from the sorted sizes)."""
    sizes = sorted(a.size for a in adds)
    n = len(sizes)
    pick = (lambda i: sizes[i]) if n else (lambda i: 0)
    return {
        "numRemovedFiles": removed.num_rows, "numRemovedBytes": _total(removed.column("size")),
        "p25FileSize": pick(n // 4), "numDeletionVectorsRemoved": _deletion_vectors(removed)[0],
        "minFileSize": pick(0), "p75FileSize": pick(n * 3 // 4), "p50FileSize": pick(n // 2),
        "numAddedBytes": sum(sizes), "numAddedFiles": n, "maxFileSize": pick(n - 1),
    }  # fmt: skip


def _total(values: pa.ChunkedArray | pa.Array) -> int:
    return int(pc.sum(values).as_py() or 0)


def _deletion_vectors(files: pa.Table) -> tuple[int, int]:
    """How many of ``files`` (rows of ``Snapshot.files``) carry a deletion vector, and the rows those hide."""
    if "deletionVector" not in files.column_names or files.num_rows == 0:
        return 0, 0
    dv = files.column("deletionVector")
    count = int(pc.sum(pc.is_valid(dv).cast(pa.int64())).as_py() or 0)
    return count, _total(pc.struct_field(dv, "cardinality"))


def commit_batch(
    table: TableContext, plan: OptimizePlan, written: Sequence[tuple[Bin, Sequence[AddFile]]]
) -> CommitResult | None:
    """Commit rewritten bins (each with the adds its job wrote) as one OPTIMIZE commit; ``None`` when no
    file was written (nothing to commit, as Delta Spark skips a batch without adds)."""
    adds = [a for bin_, files in written for a in finished_adds(plan, bin_, files)]
    if not adds:
        return None
    rewritten = rewritten_files(plan, written)
    metrics = _sizes_metrics(adds, rewritten)
    snapshot = plan.snapshot
    for attempt in range(MAX_REPLANS + 1):
        txn = Transaction(table, snapshot)
        # Removes built by the transaction from the live adds (deletion vectors included), stamped now.
        txn.add_files(adds).remove_files(rewritten, data_change=False)
        try:
            return txn.commit("OPTIMIZE", parameters(plan), operation_metrics=metrics)
        except ConcurrentModificationError as exc:
            latest = table.snapshot()
            if attempt == MAX_REPLANS or not still_live(rewritten, latest.files) or (
                list(latest.partition_columns) != list(plan.snapshot.partition_columns)
            ):
                raise
            log.info("OPTIMIZE of %s: %s; every rewritten file is still live, committing on version %d",
                     table.uri, exc, latest.version)  # fmt: skip
            snapshot = latest
    raise AssertionError("unreachable")


def still_live(rewritten: pa.Table, live: pa.Table) -> bool:
    """Whether every rewritten file is still in the table with the same deletion vector."""
    if rewritten.num_rows == 0:
        return True
    return bool(pc.all(pc.is_in(reconciliation_keys(rewritten), value_set=reconciliation_keys(live))).as_py())


def rewritten_files(plan: OptimizePlan, written: Sequence[tuple[Bin, Sequence[AddFile]]]) -> pa.Table:
    """The files the bins rewrote, as rows of ``Snapshot.files``."""
    if not written:
        return plan.snapshot.files.slice(0, 0)
    return pa.concat_tables([b.files for b, _ in written])


BatchResult = tuple[list[AddFile], pa.Table, int | None]  # (adds, rewritten files, committed version)


def summarize(plan: OptimizePlan, results: Sequence[BatchResult]) -> OptimizeMetrics:
    """The metrics of a whole OPTIMIZE from each batch's (adds, rewritten files, committed version)."""
    added = [a.size for adds, _, _ in results for a in adds]
    removed = [files for _, files, _ in results if files.num_rows]
    removed_sizes = [s for files in removed for s in files.column("size").to_pylist()]
    dvs = [_deletion_vectors(files) for files in removed]
    metrics = OptimizeMetrics(
        num_files_added=len(added), num_files_removed=len(removed_sizes),
        files_added=FileSizeStats.of(added), files_removed=FileSizeStats.of(removed_sizes),
        partitions_optimized=len({json.dumps(b.partition_values, sort_keys=True) for b in plan.bins}),
        num_bins=len(plan.bins), num_batches=len(results), total_considered_files=plan.considered_files,
        total_files_skipped=plan.considered_files - len(removed_sizes),
        num_deletion_vectors_removed=sum(n for n, _ in dvs),
        num_deletion_vector_rows_removed=sum(rows for _, rows in dvs),
        clustering_columns=plan.columns if plan.mode == "clustering" else (),
        versions=[v for *_, v in results if v is not None],
    )  # fmt: skip
    if plan.mode == "zorder":
        inputs = {"num": len(removed_sizes), "size": sum(removed_sizes)}
        metrics.zorder_stats = {
            "strategyName": "all", "inputCubeFiles": {"num": 0, "size": 0}, "inputOtherFiles": inputs,
            "inputNumCubes": 0, "mergedFiles": inputs, "numOutputCubes": metrics.partitions_optimized,
        }  # fmt: skip
    return metrics
