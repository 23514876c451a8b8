"""UPDATE in the task, on Arrow, as Delta Spark's ``UpdateCommand``: ``DeltaTable(uri).update({"status":
"'late'"}, "due < current_date()")``.

The files skipping keeps for the condition are read, only the columns the condition and the new values
name, to find the matching rows; then the touched files are read whole and either

- deletion vectors (tables with ``delta.enableDeletionVectors=true``) mark the updated rows deleted and
  only the updated rows are written, or
- each touched file is rewritten with the new values in its matching rows and removed.

New values are cast as Spark's store assignment casts them, generated columns the UPDATE leaves out are
computed again, the table's rules are checked on every row written, and updated rows keep their row ids
(with a new commit version) on tables that track rows. With the change data feed on, ``update_preimage``
and ``update_postimage`` rows are written. Rows where the condition is NULL are not updated. One commit
(none when no row matches), exactly once with ``app_id``/``app_version``.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from ..actions.actions import AddFile
from ..expressions.evaluate import predicate_mask
from .arrow_rows import (
    ROW_VERSION,
    RowsWriter,
    assignments,
    candidate_files,
    change_rows,
    check_columns,
    condition_of,
    files_named,
    hit_mask,
    new_rows,
    referenced,
    rewrite_each,
    target_batches,
)
from .row_change_commit import (
    INDEX,
    PATH,
    UPDATE_METRICS,
    Changes,
    commit,
    rewrite_metrics,
    row_indexes,
)
from .target import RowChangeResult, already_committed, open_target


def update(
    table: Any,
    set: Mapping[str, Any],
    predicate: Any = None,
    *,
    app_id: str | None = None,
    app_version: int | None = None,
) -> RowChangeResult:
    """Set columns (``{column: SQL expression text or pyarrow.compute.Expression}``) of the rows of
    ``table`` (a TableContext) where ``predicate`` is true (every row without one)."""
    target = open_target(table, "UPDATE")
    if (done := already_committed(target, app_id, app_version)) is not None:
        return done
    if not set:
        raise ValueError("update() needs at least one column to set")
    values = assignments(target, set, "UPDATE")
    expr, text = condition_of(predicate)
    check_columns(expr, target.columns, "UPDATE's condition", target.where)
    for column, value in values.items():
        check_columns(value, target.columns, f"UPDATE's value of {column!r}", target.where)
    files = candidate_files(target, expr)
    started = time.monotonic()
    params = {"predicate": text} if text is not None else {}
    metrics = dict.fromkeys(UPDATE_METRICS, 0)

    def matched(rows: pa.Table) -> pa.ChunkedArray:
        if expr is None:
            return pa.chunked_array([pa.repeat(pa.scalar(True), rows.num_rows)], pa.bool_())
        return predicate_mask(expr, rows)

    found = [rows.filter(matched(rows)).select([PATH, INDEX])
             for rows in target_batches(target, files, referenced(target, [expr]))]  # fmt: skip
    hits = row_indexes(pa.concat_tables(found)) if found else {}
    metrics["scanTimeMs"] = int((time.monotonic() - started) * 1000)
    metrics["numUpdatedRows"] = sum(len(i) for i in hits.values())
    if not hits:
        return RowChangeResult(None, metrics)  # Delta Spark commits nothing when no row matches
    changes = Changes(read_files=files.column("path").to_pylist())
    rewrite_started = time.monotonic()
    touched = files_named(files, hits)

    def rewrite(rows: pa.Table, writer: RowsWriter) -> list[pa.Table]:
        mask = hit_mask(rows, hits)
        old = rows.filter(mask)
        new = new_rows(target, old, values, old, "UPDATE")
        if target.kept:  # an updated row keeps its id and takes the commit's version
            new = new.set_column(new.column_names.index(ROW_VERSION), ROW_VERSION,
                                 pa.nulls(new.num_rows, pa.int64()))  # fmt: skip
        written = writer.write(new)
        if not target.deletion_vectors:
            writer.write(rows.filter(pc.invert(mask)))  # copy-on-write: the file's other rows
        if not target.change_data:
            return []
        return [change_rows(target, old, "update_preimage"), change_rows(target, written, "update_postimage")]

    changes.adds, changes.change_data = rewrite_each(target, touched, rewrite)
    if target.deletion_vectors:
        changes.deletes = hits
    else:
        changes.removes = AddFile.from_table(touched)
    metrics.update(rewrite_metrics(changes, metrics["numUpdatedRows"], rewrite_started))
    return commit(target, changes, text if expr is not None else None, params, metrics, app_id, app_version,
                  dv_metric_names={"numDeletedRows": None})  # fmt: skip
