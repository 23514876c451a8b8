"""UPDATE on Spark, as Delta Spark's ``UpdateCommand``: ``update(spark, uri, {"s": "'x'"}, "id < 10")``.

The files skipping keeps for the condition are scanned for matching rows (``_metadata``); then

- with deletion vectors: the matching rows are marked deleted in their files and their new versions are
  written as new files (nothing else is copied);
- without: each touched file is rewritten whole, matching rows with their new values, the others copied.

With the change data feed on, the old and new versions of the updated rows are written as
``update_preimage`` / ``update_postimage`` change data (readers cannot infer those). New values are cast to
the column's type (an impossible cast fails before anything is written) and checked against the table's
rules (invariants, CHECK constraints, generated columns, NOT NULL). A generated column the UPDATE does not
set is computed again from the new values, as Delta Spark does.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from airflow_provider_delta.log import AddFile
from airflow_provider_delta.log.base.errors import IdentityColumnError
from airflow_provider_delta.log.expressions.expressions import ColumnNotFoundError
from airflow_provider_delta.log.features.identity import identity_columns
from airflow_provider_delta.log.row_changes.row_change_commit import UPDATE_METRICS, rewrite_metrics

from .merge_structs import assigned_value
from .row_changes import (
    INDEX,
    PATH,
    ROW_ID,
    ROW_VERSION,
    Changes,
    RowChangeResult,
    already_committed,
    analysed,
    candidate_files,
    change_rows,
    commit,
    condition_text,
    files_named,
    not_set,
    referenced,
    regenerated,
    row_indexes,
    target_rows,
    tracking,
    write_rows,
)
from .schema import spark_schema_of
from .target import Target, open_target

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

_MATCHED = "__delta_matched"  # a rewritten row the UPDATE changes


def update(
    spark: SparkSession,
    table_uri: str,
    set: Mapping[str, str | Column],
    condition: str | Column | None = None,
    *,
    app_id: str | None = None,
    app_version: int | None = None,
    storage_options: dict[str, Any] | None = None,
) -> RowChangeResult:
    """Set columns (``{column: Spark SQL expression or Column}``) of the rows where ``condition`` is true
    (every row without one). One commit (none when no row matches); Delta Spark's UPDATE metrics."""
    from pyspark.sql import functions as F

    target = open_target(table_uri, storage_options, "UPDATE")
    if (done := already_committed(target, app_id, app_version)) is not None:
        return done
    if not set:
        raise ValueError("update() needs at least one column to set")
    text = condition_text(condition)
    files, _ = candidate_files(target.snap, text)
    started = time.monotonic()
    named = referenced(target.columns, [condition, *set.values()])  # only find the rows here
    rows = target_rows(spark, target, files, named)
    given = {"condition": condition} if condition is not None else {}
    cond = analysed(rows, given, target.where).get("condition", F.lit(True))
    matched = F.coalesce(cond, F.lit(False))
    new = new_values(target, rows, set)
    params = {"predicate": text} if text is not None else {}
    metrics = dict.fromkeys(UPDATE_METRICS, 0)
    hits = row_indexes(rows.where(matched).select(PATH, INDEX).toArrow())
    metrics["scanTimeMs"] = int((time.monotonic() - started) * 1000)
    metrics["numUpdatedRows"] = sum(len(i) for i in hits.values())
    if not hits:
        return RowChangeResult(None, metrics)  # Delta Spark commits nothing when no row matches
    changes = Changes(read_files=files.column("path").to_pylist())
    rewrite_started = time.monotonic()
    touched = files_named(files, hits)
    old = target_rows(spark, target, touched)
    updated = old.where(matched).select(*new, *tracking(target, F.col(ROW_ID), None))
    computed = not_set(target, set)  # generated columns the UPDATE leaves to their expressions
    updated = regenerated(updated, target, dict.fromkeys(computed))
    if target.deletion_vectors:
        changes.deletes = hits
        changes.adds = write_rows(target, updated)
    else:
        version = F.when(~matched, F.col(ROW_VERSION)) if target.kept else None
        chosen = old.select(*_choose(target, matched, new), matched.alias(_MATCHED),
                            *tracking(target, F.col(ROW_ID), version))  # fmt: skip
        rewritten = regenerated(chosen, target, dict.fromkeys(computed, F.col(_MATCHED))).drop(_MATCHED)
        changes.adds = write_rows(target, rewritten)
        changes.removes = AddFile.from_table(touched)
    if target.change_data:
        changes.change_data.append(change_rows(target, old.where(matched), "update_preimage"))
        changes.change_data.append(change_rows(target, updated, "update_postimage"))
    metrics.update(rewrite_metrics(changes, metrics["numUpdatedRows"], rewrite_started))
    return commit(target, changes, text, params, metrics, app_id, app_version,
                  dv_metric_names={"numDeletedRows": None})  # fmt: skip


def new_values(target: Target, rows: DataFrame, assignments: Mapping[str, str | Column]) -> list[Column]:
    """Every table column, in order, as its new value: the assigned expression cast to the column's type
    (checked by Spark's analyser now), or the column as it is."""
    from pyspark.sql import functions as F

    by_lower = {c.lower(): c for c in target.columns}
    unknown = [name for name in assignments if name.lower() not in by_lower]
    if unknown:
        raise ColumnNotFoundError(f"cannot set {unknown}: not columns of {target.where} "
                                  f"(columns: {', '.join(target.columns)})")  # fmt: skip
    types = {f.name: f.dataType for f in spark_schema_of(target.snap.metadata.schema).fields}
    given = {by_lower[name.lower()]: value for name, value in assignments.items()}
    for column in identity_columns(target.snap.metadata.schema):
        if column.name in given:  # "Identity Columns": values come from the table; Delta Spark refuses too
            raise IdentityColumnError(f"{target.where}: {column.name!r} is an identity column, which UPDATE "
                                      "cannot set", column=column.name)  # fmt: skip
    resolved = analysed(rows, {f"value of {name}": value for name, value in given.items()}, target.where)
    out = []
    for name in target.columns:
        if name in given:
            # structs by field name, as Delta Spark assigns them
            value = assigned_value(rows, resolved[f"value of {name}"], types[name], F.col(f"`{name}`"),
                                   False, f"UPDATE of {target.where}: column {name}")  # fmt: skip
            out.append(value.alias(name))
        else:
            out.append(F.col(f"`{name}`"))
    return out


def _choose(target: Target, matched: Column, new: list[Column]) -> list[Column]:
    """Each column as the new value on matching rows, the old elsewhere: a copy-on-write rewrite."""
    from pyspark.sql import functions as F

    return [F.when(matched, value).otherwise(F.col(f"`{name}`")).alias(name)
            for name, value in zip(target.columns, new, strict=True)]  # fmt: skip
