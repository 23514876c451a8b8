"""DELETE in the task, on Arrow, as Delta Spark's ``DeleteCommand``: ``DeltaTable(uri).delete("day <
'2020-01-01'")``.

- No condition, or one that reads partition columns only: the files it selects are removed whole, without
  reading them (a metadata-only delete; the change data feed infers their rows as deleted).
- Otherwise the files skipping keeps are read, only the condition's columns, to find the matching rows:
  with deletion vectors the rows are marked (no data file is written, and no change data: readers infer it
  from the vectors, as for Delta Spark's DELETE); without, each touched file is rewritten without them
  (rows keep their row ids) and, when the change data feed is on, the deleted rows are written as
  ``delete`` change data.

Rows where the condition is NULL are kept, as SQL's DELETE keeps them. One commit (none when no row
matches), exactly once with ``app_id``/``app_version``.
"""

from __future__ import annotations

import time
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from ..actions.actions import AddFile
from ..expressions.evaluate import predicate_mask
from .arrow_rows import (
    RowsWriter,
    candidate_files,
    change_rows,
    check_columns,
    condition_of,
    files_named,
    files_where,
    hit_mask,
    only_partitions,
    referenced,
    rewrite_each,
    target_batches,
)
from .row_change_commit import (
    DELETE_METRICS,
    INDEX,
    PATH,
    Changes,
    commit,
    num_records,
    rewrite_metrics,
    row_indexes,
)
from .target import RowChangeResult, already_committed, open_target


def delete(
    table: Any, predicate: Any = None, *, app_id: str | None = None, app_version: int | None = None
) -> RowChangeResult:
    """Delete the rows of ``table`` (a TableContext) where ``predicate`` (SQL text, a
    ``pyarrow.compute.Expression`` or DNF tuples) is true; every row without one."""
    target = open_target(table, "DELETE")
    if (done := already_committed(target, app_id, app_version)) is not None:
        return done
    expr, text = condition_of(predicate)
    check_columns(expr, target.columns, "DELETE's condition", target.where)
    files = candidate_files(target, expr)
    params = {"predicate": [text] if text is not None else []}
    changes = Changes(read_files=files.column("path").to_pylist())
    metrics = dict.fromkeys(DELETE_METRICS, 0)
    scan_started = time.monotonic()
    if expr is None or only_partitions(target, expr):
        if expr is not None:
            files = files_where(target, files, expr)
        changes.removes = AddFile.from_table(files)
        metrics.update(numRemovedFiles=len(changes.removes), numDeletedRows=num_records(changes.removes),
                       numRemovedBytes=sum(a.size for a in changes.removes), scanTimeMs=0,
                       rewriteTimeMs=0)  # fmt: skip
    else:
        assert expr is not None
        found = [rows.filter(predicate_mask(expr, rows)).select([PATH, INDEX])
                 for rows in target_batches(target, files, referenced(target, [expr]))]  # fmt: skip
        hits = row_indexes(pa.concat_tables(found)) if found else {}
        metrics["scanTimeMs"] = int((time.monotonic() - scan_started) * 1000)
        metrics["numDeletedRows"] = sum(len(i) for i in hits.values())
        if target.deletion_vectors:
            changes.deletes = hits
            metrics["rewriteTimeMs"] = 0  # the vectors are written by the commit: in executionTimeMs
        elif hits:
            rewrite_started = time.monotonic()
            touched = files_named(files, hits)

            def rewrite(rows: pa.Table, writer: RowsWriter) -> list[pa.Table]:
                mask = hit_mask(rows, hits)
                writer.write(rows.filter(pc.invert(mask)))
                return [change_rows(target, rows.filter(mask), "delete")] if target.change_data else []

            changes.adds, changes.change_data = rewrite_each(target, touched, rewrite)
            changes.removes = AddFile.from_table(touched)
            metrics.update(rewrite_metrics(changes, 0, rewrite_started))
    if not (changes.removes or changes.deletes):
        return RowChangeResult(None, metrics)  # Delta Spark commits nothing when no row matches
    return commit(target, changes, text if expr is not None else None, params, metrics, app_id, app_version)
