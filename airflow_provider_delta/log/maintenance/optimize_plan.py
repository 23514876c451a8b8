"""Planning OPTIMIZE: which files to rewrite, grouped into bins (one job each) and batches (one commit each).

Shared by both engines: pyarrow in the task (``optimize``) and Spark executors (``spark.optimize``) run the
same plan; only where the rows of a bin are read and written differs. As Delta Spark's
``OptimizeExecutor`` and ``OptimizeTableStrategy``:

- **compaction**: per partition, files smaller than ``min_file_size`` or whose deletion vectors hide more
  than ``max_deleted_rows_ratio`` of their rows, sorted by size and packed greedily into bins of at most
  ``max_file_size`` bytes; a bin of one file is left alone (rewriting it gains nothing);
- **Z-order**: every file of each selected partition in one bin, written as ``size / max_file_size``
  files range-partitioned by the Z-values of the columns (``space_filling_curves``);
- **liquid clustering** (tables with the ``clustering`` feature): the columns come from the
  ``delta.clustering`` domain; files not yet clustered, and those of ZCubes smaller than the minimum cube
  size, are packed into cubes and written along a Hilbert curve, each file tagged with its cube.

Defaults: ``min_file_size`` and ``max_file_size`` are the table's ``delta.targetFileSize`` when set, else
Delta Spark's ``spark.databricks.delta.optimize.minFileSize`` / ``maxFileSize`` (1 GiB);
``max_deleted_rows_ratio`` 0.05. With ``batch_size`` (Delta Spark's ``optimize.batchSize``) bins are
grouped into batches of about that many input bytes, each committed on its own: a huge table then
makes progress that a failure later does not lose.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..base.arrow_utils import TRUE, from_numpy, int64_scalar, scalar, to_numpy
from ..base.errors import OptimizeError, PartitionFilterError, ZOrderColumnError
from ..schema.partition_values import typed_partition_values
from ..schema.schema import physical_name
from ..schema.stats import typed_file_stats
from ..snapshot.snapshot import Snapshot
from .space_filling_curves import DEFAULT_NUM_RANGES

GIB = 1024**3
DEFAULT_MIN_FILE_SIZE = GIB  # spark.databricks.delta.optimize.minFileSize
DEFAULT_MAX_FILE_SIZE = GIB  # spark.databricks.delta.optimize.maxFileSize
DEFAULT_MAX_DELETED_ROWS_RATIO = 0.05  # spark.databricks.delta.optimize.maxDeletedRowsRatio
MIN_CUBE_SIZE = 100 * DEFAULT_MAX_FILE_SIZE  # optimize.clustering.mergeStrategy.minCubeSize.threshold
TARGET_CUBE_SIZE = MIN_CUBE_SIZE * 3 // 2  # ...minCubeSize.targetCubeSize
CLUSTERING_DOMAIN = "delta.clustering"
CLUSTERING_PROVIDER = "liquid"
ZCUBE_ID = "ZCUBE_ID"
ZCUBE_ZORDER_BY = "ZCUBE_ZORDER_BY"
_UNORDERED = ("struct", "array", "map", "variant")


@dataclass(frozen=True)
class Bin:
    """Files of one partition rewritten by one job: ``files`` are rows of ``Snapshot.files``."""

    partition_values: dict[str, str | None]
    files: pa.Table
    cube: str | None = None  # the ZCube id its files get, when clustering

    @property
    def size(self) -> int:
        return int(pc.sum(self.files.column("size")).as_py() or 0)

    def outputs(self, max_file_size: int, mode: str) -> int:
        """How many files the bin is written as: one when compacting, else about size / max_file_size."""
        return 1 if mode == "compaction" else max(1, self.size // max(1, max_file_size))


@dataclass(frozen=True)
class OptimizePlan:
    """What an OPTIMIZE will do to ``snapshot``; empty ``bins`` means nothing to do."""

    snapshot: Snapshot
    mode: str  # "compaction", "zorder" or "clustering"
    columns: tuple[str, ...]  # Z-order or clustering columns (logical names)
    min_file_size: int
    max_file_size: int
    bins: tuple[Bin, ...]
    batches: tuple[tuple[int, ...], ...]  # indexes into ``bins``, one commit each
    considered_files: int
    predicate: tuple[str, ...] = ()
    num_ranges: int = DEFAULT_NUM_RANGES
    parameters: dict[str, Any] = field(default_factory=dict)

    @property
    def curve(self) -> str | None:
        return {"zorder": "zorder", "clustering": "hilbert"}.get(self.mode)

    @property
    def num_files(self) -> int:
        return sum(b.files.num_rows for b in self.bins)

    @property
    def num_bytes(self) -> int:
        return sum(b.size for b in self.bins)


def plan_optimize(
    snapshot: Snapshot,
    *,
    partition_filter: Any = None,
    zorder_by: Sequence[str] = (),
    min_file_size: int | None = None,
    max_file_size: int | None = None,
    max_deleted_rows_ratio: float | None = None,
    batch_size: int | None = None,
    num_ranges: int = DEFAULT_NUM_RANGES,
) -> OptimizePlan:
    """Plan an OPTIMIZE of ``snapshot``; bad arguments raise ``OptimizeError`` (or a subclass) by name.

    :param partition_filter: only these partitions: deltalake-style DNF tuples over partition columns,
        e.g. ``[("day", "=", "2024-05-01")]``; naming another column raises ``PartitionFilterError``.
    :param zorder_by: Z-order by these columns (not partition columns; they need statistics).
    """
    where = f"table {snapshot.store.uri}"
    config = snapshot.table_configuration
    config.check_write(where)
    try:
        target = config.target_file_size
    except ValueError as exc:
        raise OptimizeError(f"{where}: {exc}") from None
    min_size = _non_negative("min_file_size", min_file_size, target or DEFAULT_MIN_FILE_SIZE)
    max_size = _non_negative("max_file_size", max_file_size, target or DEFAULT_MAX_FILE_SIZE)
    ratio = DEFAULT_MAX_DELETED_ROWS_RATIO if max_deleted_rows_ratio is None else max_deleted_rows_ratio
    if not 0 <= ratio <= 1:
        raise OptimizeError(f"max_deleted_rows_ratio must be in [0, 1], not {ratio}")
    if batch_size is not None and batch_size <= 0:
        raise OptimizeError(f"batch_size must be positive, not {batch_size}")
    clustered = config.clustered
    columns = tuple(clustering_columns(snapshot)) if clustered else ()
    if clustered and partition_filter:
        raise OptimizeError(f"{where} is clustered: OPTIMIZE of a clustered table takes no partition filter")
    if clustered and zorder_by:
        raise OptimizeError(f"{where} is clustered by {list(columns)}: it cannot be Z-ordered as well")
    if zorder_by:
        columns = tuple(check_zorder_columns(snapshot, zorder_by))
    mode = "clustering" if columns and clustered else "zorder" if columns else "compaction"
    files, predicate = filter_partitions(snapshot, partition_filter)
    considered = files.num_rows
    if mode == "compaction":
        files = files.filter(_needs_compaction(snapshot, files, min_size, ratio))
    bins = _bins(snapshot, files, mode, max_size, columns)
    return OptimizePlan(
        snapshot=snapshot, mode=mode, columns=columns, min_file_size=min_size, max_file_size=max_size,
        bins=tuple(bins), batches=_batches(bins, batch_size), considered_files=considered,
        predicate=predicate, num_ranges=num_ranges,
    )  # fmt: skip


def _non_negative(name: str, value: int | None, default: int) -> int:
    if value is None:
        return default
    if int(value) < 0:
        raise OptimizeError(f"{name} must be at least 0, not {value}")
    return int(value)


# -- columns ------------------------------------------------------------------------------------------------
def _resolve(snapshot: Snapshot, name: str) -> list[dict]:
    """The schema fields along a (dotted, case-insensitive) column name, or ``[]`` when there is none."""
    fields, found = snapshot.metadata.schema["fields"], []
    for part in name.split("."):
        match = next((f for f in fields if f["name"].lower() == part.lower()), None)
        if match is None:
            return []
        found.append(match)
        child = match["type"]
        fields = child["fields"] if isinstance(child, dict) and child.get("type") == "struct" else []
    return found


def check_zorder_columns(snapshot: Snapshot, columns: Sequence[str]) -> list[str]:
    """Z-order columns as the schema spells them; each must exist, not be a partition column, have an
    order, and have statistics (Delta Spark's ``validateZorderByColumns``)."""
    md = snapshot.metadata
    partitions = {c.lower() for c in md.partition_columns}
    mode = snapshot.table_configuration.column_mapping_mode
    indexed = snapshot.table_configuration.stats_schema
    out = []
    for name in columns:
        path = _resolve(snapshot, name)
        if not path:
            raise ZOrderColumnError(f"Z-order column {name!r} is not in the schema of table "
                                    f"{snapshot.store.uri}", column=name)  # fmt: skip
        if len(path) == 1 and path[0]["name"].lower() in partitions:
            raise ZOrderColumnError(f"{name!r} is a partition column: every file already holds one value "
                                    "of it, so Z-ordering by it cannot help; use a data column", column=name)
        kind = path[-1]["type"]
        if isinstance(kind, dict) and kind.get("type") in _UNORDERED or kind in _UNORDERED:
            raise ZOrderColumnError(f"Z-order column {name!r} has type {json.dumps(kind)[:60]}, which has no "
                                    "order", column=name)  # fmt: skip
        stats: Any = indexed.field("nullCount").type
        for f in path:
            i = stats.get_field_index(physical_name(f, mode))
            if i < 0:
                raise ZOrderColumnError(
                    f"Z-order column {name!r} has no statistics (it is beyond "
                    "delta.dataSkippingNumIndexedCols or not in delta.dataSkippingStatsColumns), so files "
                    "cannot be skipped by it",
                    column=name,
                )
            stats = stats.field(i).type
        out.append(".".join(f["name"] for f in path))
    if len({c.lower() for c in out}) != len(out):
        raise ZOrderColumnError(f"Z-order columns {list(columns)} name a column twice", column=out[0])
    return out


def clustering_columns(snapshot: Snapshot) -> list[str]:
    """The logical names of a clustered table's columns, from the ``delta.clustering`` domain (which lists
    physical name parts)."""
    domain = snapshot.domain_metadata.get(CLUSTERING_DOMAIN)
    if domain is None or domain.removed:
        return []
    try:
        parts = json.loads(domain.configuration or "{}").get("clusteringColumns") or []
    except (ValueError, AttributeError):
        where = f"table {snapshot.store.uri}"
        raise OptimizeError(f"{where}: the {CLUSTERING_DOMAIN} domain is not JSON") from None
    mode = snapshot.table_configuration.column_mapping_mode
    names = []
    for physical in parts:
        fields, logical = snapshot.metadata.schema["fields"], []
        for part in physical:
            match = next((f for f in fields if physical_name(f, mode).lower() == str(part).lower()), None)
            if match is None:
                raise OptimizeError(f"table {snapshot.store.uri}: clustering column {physical} is not in the "
                                    "schema")  # fmt: skip
            logical.append(match["name"])
            child = match["type"]
            fields = child["fields"] if isinstance(child, dict) and child.get("type") == "struct" else []
        names.append(".".join(logical))
    return names


# -- files --------------------------------------------------------------------------------------------------
_OPS = {"=": pc.equal, "==": pc.equal, "!=": pc.not_equal, "<": pc.less, "<=": pc.less_equal,
        ">": pc.greater, ">=": pc.greater_equal}  # fmt: skip


def filter_partitions(snapshot: Snapshot, partition_filter: Any) -> tuple[pa.Table, tuple[str, ...]]:
    """The live files in the partitions the filter selects, and the filter as commitInfo records it."""
    files = snapshot.files
    if not partition_filter:
        return files, ()
    conjunctions = partition_filter if isinstance(partition_filter[0], list) else [partition_filter]
    partitions = {c.lower(): c for c in snapshot.partition_columns}
    others = sorted({t[0] for conj in conjunctions for t in conj if str(t[0]).lower() not in partitions})
    if others:
        raise PartitionFilterError(
            f"OPTIMIZE's filter may name only partition columns of table {snapshot.store.uri} "
            f"({snapshot.partition_columns}), not {others}", columns=tuple(others),
        )  # fmt: skip
    typed = typed_partition_values(snapshot.metadata, files, snapshot.table_configuration.column_mapping_mode)
    mask = from_numpy(np.zeros(files.num_rows, dtype=bool))
    texts = []
    for conj in conjunctions:
        hit = from_numpy(np.ones(files.num_rows, dtype=bool))
        parts = []
        for column, op, value in conj:
            values = typed.column(partitions[column.lower()])
            if op in ("in", "not in"):
                test = pc.is_in(values, value_set=pa.array(list(value)).cast(values.type))
                test = pc.invert(test) if op == "not in" else test
            elif op in _OPS:
                test = _OPS[op](values, pa.scalar(value).cast(values.type))
            else:
                raise PartitionFilterError(f"unknown operator {op!r} in OPTIMIZE's filter")
            hit = pc.and_kleene(hit, pc.fill_null(test, False))
            parts.append(f"{partitions[column.lower()]} {op} {value!r}")
        mask = pc.or_kleene(mask, hit)
        texts.append(" AND ".join(parts))
    return files.filter(mask), tuple(texts)


def _needs_compaction(snapshot: Snapshot, files: pa.Table, min_size: int, ratio: float) -> pa.Array:
    """Files below the minimum size, or whose deletion vectors hide too many rows (always, when their
    statistics do not say how many rows they have)."""
    small = pc.less(files.column("size"), int64_scalar(min_size))
    if files.num_rows == 0:
        return small
    deleted = pc.struct_field(files.column("deletionVector"), "cardinality")
    has_dv = pc.is_valid(deleted)
    if not pc.any(has_dv).as_py():
        return small
    stats = typed_file_stats(snapshot.table_configuration.stats_schema, files)
    records = pc.struct_field(stats, "numRecords")
    share = pc.divide(pc.cast(deleted, pa.float64()), pc.cast(records, pa.float64()))
    heavy = pc.or_kleene(pc.is_null(records), pc.greater(share, scalar(float(ratio), pa.float64())))
    return pc.or_kleene(small, pc.and_kleene(has_dv, pc.fill_null(heavy, TRUE)))


def _bins(
    snapshot: Snapshot, files: pa.Table, mode: str, max_size: int, columns: tuple[str, ...]
) -> list[Bin]:
    bins: list[Bin] = []
    for values, group in _by_partition(snapshot, files):
        if mode == "clustering":
            group = _clustering_candidates(group, columns)
            limit = max(TARGET_CUBE_SIZE, MIN_CUBE_SIZE)
        else:
            group = group.take(pc.sort_indices(group, [("size", "ascending")]))
            limit = max_size if mode == "compaction" else None
        for rows in _pack(to_numpy(group.column("size")), limit):
            if len(rows) > 1 or mode != "compaction":
                cube = str(uuid.uuid4()) if mode == "clustering" else None
                bins.append(Bin(values, group.take(from_numpy(np.array(rows, dtype=np.int64))), cube))
    return bins


def _by_partition(snapshot: Snapshot, files: pa.Table) -> list[tuple[dict[str, str | None], pa.Table]]:
    """Files grouped by their typed partition values (so spellings of one value are one partition),
    partitions in the order of their values."""
    if files.num_rows == 0:
        return []
    if not snapshot.partition_columns:
        return [({}, files)]
    typed = typed_partition_values(snapshot.metadata, files, snapshot.table_configuration.column_mapping_mode)
    keyed = typed.append_column("__row", from_numpy(np.arange(files.num_rows, dtype=np.int64)))
    names = list(typed.column_names)
    groups = keyed.group_by(names, use_threads=False).aggregate([("__row", "list")])
    groups = groups.sort_by([(n, "ascending") for n in names])
    out = []
    for rows in groups.column("__row_list").to_pylist():
        part = files.take(from_numpy(np.array(rows, dtype=np.int64)))
        out.append((_as_dict(part.column("partitionValues")[0].as_py()), part))
    return out


def _as_dict(value: Any) -> dict[str, str | None]:
    return dict(value) if value else {}


def _pack(sizes: np.ndarray, limit: int | None) -> list[list[int]]:
    """Greedy bins over files in order: a file that would take a bin past ``limit`` starts the next one
    (Delta Spark's ``groupFilesIntoBins``); no limit is one bin. A loop over sizes: inherently sequential."""
    if limit is None:
        return [list(range(len(sizes)))] if len(sizes) else []
    bins: list[list[int]] = []
    current: list[int] = []
    total = 0
    for i, size in enumerate(sizes.tolist()):
        if current and total + size > limit:
            bins.append(current)
            current, total = [], 0
        current.append(i)
        total += size
    if current:
        bins.append(current)
    return bins


def _tag(files: pa.Table, key: str) -> pa.Array:
    tags = files.column("tags")
    return pc.map_lookup(tags, key, "first") if files.num_rows else pa.array([], pa.string())


def _clustering_candidates(files: pa.Table, columns: tuple[str, ...]) -> pa.Table:
    """Delta Spark's choice of files for incremental clustering: unclustered files and files of cubes
    (clustered by the same columns) smaller than the minimum cube size, sorted by cube; nothing when all
    that is left is a single cube."""
    cube = pc.fill_null(_tag(files, ZCUBE_ID), "")
    files = files.append_column("__cube", cube).sort_by([("__cube", "ascending")])
    provider = files.column("clusteringProvider")
    same_provider = pc.fill_null(pc.equal(provider, CLUSTERING_PROVIDER), True)
    zorder_by = _tag(files, ZCUBE_ZORDER_BY)
    same_columns = pc.fill_null(pc.equal(zorder_by, json.dumps(list(columns), separators=(",", ":"))), True)
    files = files.filter(pc.and_(same_provider, same_columns))
    cubes = files.column("__cube").to_pylist()
    sizes = files.column("size").to_pylist()
    totals: dict[str, int] = {}
    for c, s in zip(cubes, sizes, strict=True):
        totals[c] = totals.get(c, 0) + s
    keep = [c == "" or totals[c] < MIN_CUBE_SIZE for c in cubes]
    files = files.filter(pa.array(keep, pa.bool_()))
    kept = set(files.column("__cube").to_pylist())
    if len(kept) == 1 and "" not in kept:  # a single cube alone: already clustered as well as it gets
        files = files.slice(0, 0)
    return files.drop_columns(["__cube"])


def _batches(bins: list[Bin], batch_size: int | None) -> tuple[tuple[int, ...], ...]:
    """Bins in commits: all in one, or packed by input size into batches of about ``batch_size`` bytes
    (Delta Spark's ``BinPackingUtils.binPackBySize``: bins by size, smallest first)."""
    if not bins:
        return ()
    if batch_size is None:
        return (tuple(range(len(bins))),)
    order = sorted(range(len(bins)), key=lambda i: bins[i].size)
    batches: list[tuple[int, ...]] = []
    current: list[int] = []
    total = 0
    for i in order:
        size = bins[i].size
        if current and (total >= batch_size or total + size > batch_size):
            batches.append(tuple(current))
            current, total = [], 0
        current.append(i)
        total += size
    if current:
        batches.append(tuple(current))
    return tuple(batches)
