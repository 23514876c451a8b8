"""Row groups of a checkpoint a filtered scan can skip unread, by the Parquet statistics of the checkpoint's
parsed partition values ("Checkpoint Schema": ``add.partitionValues_parsed``).

A filtered scan streams the checkpoint and keeps the files its filter may match; a row group whose
``partitionValues_parsed`` statistics rule the filter out holds no such file, so it is not read at all
(delta-kernel-rs pushes the same predicate into its checkpoint reads). The row group's minimum, maximum
and null count of each partition column stand in for a file's statistics, and the scan's own skipping
(``skipping.files_matching``) decides: the same rules, so a row group is skipped only when no file in it
could be kept. Checkpoints without parsed partition values (``delta.checkpoint.writeStatsAsStruct=false``,
or written as JSON) are read whole.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from ..expressions.expressions import Expr
from ..expressions.skipping import FileStatistics, files_matching
from ..features.configuration import TableConfiguration
from ..schema.physical_columns import logical_type
from ..schema.schema import physical_name

_PARSED = "add.partitionValues_parsed"
_PATH = "add.path"


class CheckpointRowGroups:
    """Chooses the row groups of a checkpoint file to read for ``expr``; counts the files skipped."""

    def __init__(self, expr: Expr, config: TableConfiguration) -> None:
        partitions = set(config.metadata.partition_columns)
        by_lower = {f["name"].lower(): f for f in config.schema["fields"] if f["name"] in partitions}
        used = {p[0].lower() for p in expr.columns() if len(p) == 1}
        self.expr = expr
        self.columns = {  # logical name -> (physical leaf path, Arrow type)
            by_lower[name]["name"]: (
                f"{_PARSED}.{physical_name(by_lower[name], config.column_mapping_mode)}",
                logical_type(by_lower[name]["type"]),
            )
            for name in used if name in by_lower and isinstance(by_lower[name]["type"], str)
        }  # fmt: skip
        self.skipped_files = 0

    def __call__(self, pf: pq.ParquetFile) -> list[int] | None:
        """The row groups to read (``None``: all)."""
        md = pf.metadata
        leaves = {md.schema.column(i).path: i for i in range(md.num_columns)}
        wanted = {name: (leaves[leaf], kind) for name, (leaf, kind) in self.columns.items() if leaf in leaves}
        if not wanted or md.num_row_groups < 2:
            return None
        groups = [md.row_group(g) for g in range(md.num_row_groups)]
        lows, highs, nulls = {}, {}, {}
        for name, (i, kind) in wanted.items():
            try:
                lows[name], highs[name], nulls[name] = _bounds([g.column(i).statistics for g in groups], kind)
            except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError):
                continue  # statistics this reader cannot type: the column decides nothing
        if not lows:
            return None
        names = list(lows)
        rows = pa.array([g.num_rows for g in groups], pa.int64())
        stats = pa.StructArray.from_arrays(
            [rows, *(pa.StructArray.from_arrays([part[n] for n in names], names=names)
                     for part in (lows, highs, nulls))],
            names=["numRecords", "minValues", "maxValues", "nullCount"],
        )  # fmt: skip
        facts = FileStatistics(len(groups), pa.table({}), stats, {n.lower(): n for n in names})
        keep = files_matching(self.expr, facts).to_pylist()
        path = leaves.get(_PATH)
        for g, kept in zip(groups, keep, strict=True):
            if not kept:
                self.skipped_files += _adds(g, path)
        return [g for g, kept in enumerate(keep) if kept]


def _bounds(stats: list[Any], kind: pa.DataType) -> tuple[pa.Array, pa.Array, pa.Array]:
    """Per row group: minimum, maximum (null where unknown) and null count of one column."""
    known = [s is not None and s.has_min_max for s in stats]
    lows = pa.array([s.min if k else None for s, k in zip(stats, known, strict=True)], kind)
    highs = pa.array([s.max if k else None for s, k in zip(stats, known, strict=True)], kind)
    counts = [s.null_count if s is not None and s.has_null_count else None for s in stats]
    return lows, highs, pa.array(counts, pa.int64())


def _adds(group: Any, path: int | None) -> int:
    """The adds in a row group (rows whose ``add.path`` is set), or its rows when that is unknown."""
    stats = group.column(path).statistics if path is not None else None
    if stats is None or not stats.has_null_count:
        return group.num_rows
    return group.num_rows - stats.null_count
