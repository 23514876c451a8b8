"""DELETE on Spark, as Delta Spark's ``DeleteCommand``: ``delete(spark, uri, "date < '2020-01-01'")``.

- No condition, or one that reads partition columns only: the files it selects are removed whole, without
  reading them (a metadata-only delete; the change data feed infers their rows as deleted).
- Otherwise the files skipping keeps are scanned for matching rows (``_metadata.file_path``/``row_index``):
  with deletion vectors the rows are marked (no change data is written: readers infer it from the vectors,
  as for Delta Spark's DELETE); without, each touched file is rewritten without them and, when the change
  data feed is on, the deleted rows are written as ``delete`` change data.

Rows where the condition is NULL are kept, as SQL's DELETE keeps them.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from airflow_provider_delta.log import AddFile
from airflow_provider_delta.log.row_changes.row_change_commit import DELETE_METRICS, rewrite_metrics

from .row_changes import (
    INDEX,
    PATH,
    Changes,
    RowChangeResult,
    already_committed,
    analysed,
    candidate_files,
    change_rows,
    commit,
    condition_text,
    files_named,
    files_where,
    num_records,
    only_partitions,
    referenced,
    row_indexes,
    target_rows,
    write_rows,
)
from .target import open_target

if TYPE_CHECKING:
    from pyspark.sql import Column, SparkSession


def delete(
    spark: SparkSession,
    table_uri: str,
    condition: str | Column | None = None,
    *,
    app_id: str | None = None,
    app_version: int | None = None,
    storage_options: dict[str, Any] | None = None,
) -> RowChangeResult:
    """Delete the rows of the table at ``table_uri`` where ``condition`` (Spark SQL text or a Column) is
    true; every row without one. One commit (none when no row matches); Delta Spark's DELETE metrics."""
    from pyspark.sql import functions as F

    target = open_target(table_uri, storage_options, "DELETE")
    if (done := already_committed(target, app_id, app_version)) is not None:
        return done
    text = condition_text(condition)
    files, expr = candidate_files(target.snap, text)
    scan_started = time.monotonic()
    # The condition's columns only: the rows it matches are found, not copied (a rewrite reads them again).
    rows = target_rows(spark, target, files, referenced(target.columns, [text]) if text else None)
    cond = analysed(rows, {"condition": condition}, target.where)["condition"] if condition is not None \
        else F.lit(True)  # fmt: skip
    params = {"predicate": [text] if text is not None else []}
    changes = Changes(read_files=files.column("path").to_pylist())
    metrics = dict.fromkeys(DELETE_METRICS, 0)
    if condition is None or only_partitions(target.snap, expr):
        if condition is not None:
            files = files_where(spark, target, files, cond)
        changes.removes = AddFile.from_table(files)
        metrics.update(numRemovedFiles=len(changes.removes), numDeletedRows=num_records(changes.removes),
                       numRemovedBytes=sum(a.size for a in changes.removes), scanTimeMs=0,
                       rewriteTimeMs=0)  # fmt: skip
    else:
        matched = F.coalesce(cond, F.lit(False))
        hits = row_indexes(rows.where(matched).select(PATH, INDEX).toArrow())
        metrics["scanTimeMs"] = int((time.monotonic() - scan_started) * 1000)
        metrics["numDeletedRows"] = sum(len(i) for i in hits.values())
        if target.deletion_vectors:
            changes.deletes = hits
            metrics["rewriteTimeMs"] = 0  # the vectors are written by the commit: in executionTimeMs
        elif hits:
            rewrite_started = time.monotonic()
            touched = files_named(files, hits)
            old = target_rows(spark, target, touched)
            changes.adds = write_rows(target, old.where(~matched).drop(PATH, INDEX))  # ids kept, if tracked
            changes.removes = AddFile.from_table(touched)
            if target.change_data:
                changes.change_data.append(change_rows(target, old.where(matched), "delete"))
            metrics.update(rewrite_metrics(changes, 0, rewrite_started))
    if not (changes.removes or changes.deletes):
        return RowChangeResult(None, metrics)  # Delta Spark commits nothing when no row matches
    return commit(target, changes, text, params, metrics, app_id, app_version)
