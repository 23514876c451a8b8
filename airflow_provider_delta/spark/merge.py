"""MERGE on Spark, as Delta Spark's ``MergeIntoCommand``, with a builder a Delta Spark user recognises::

    merge(changes_df, uri, on="target.id = source.id")
        .when_matched_update(set={"name": "source.name"})
        .when_not_matched_insert_all()
        .execute()

Semantics as Delta Spark's: clauses of each kind are tried in the order given and the first whose condition
holds acts (a row no clause takes is left as it is, or not inserted); every clause of a kind but the last
needs a condition; a target row matched by several source rows is refused (:class:`MergeCardinalityError`)
unless the only matched clause is an unconditional delete; the target is ``target`` and the source
``source`` in conditions and values (``target_alias``/``source_alias``); NULL-safe keys only with ``<=>``.

Execution: the target's files that may hold matched rows (``merge_pruning``: by the source's key ranges)
are read with each row's file and row index, and joined with the source (inner, right or
full outer join as the clauses need), each joined row gets the clause that acts on it and its output values;
then, as for UPDATE, either deletion vectors mark the updated and deleted target rows and only updated and
inserted rows are written, or every touched file is rewritten (copying its untouched rows) and removed.
With the change data feed on, every change is written as change data (``insert``, ``update_preimage``,
``update_postimage``, ``delete``), as Delta Spark's MERGE does. One commit through the core.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from airflow_provider_delta.log import AddFile
from airflow_provider_delta.log.base.errors import MergeCardinalityError
from airflow_provider_delta.log.features.identity import IdentityColumn, high_water_marks
from airflow_provider_delta.log.row_changes.merge_clauses import (
    MATCHED,
    MERGE_DV_METRICS,
    NOT_MATCHED,
    NOT_MATCHED_BY_SOURCE,
    check_clauses,
    merge_metrics,
    merge_params,
    target_only_condition,
)

from .constraints import generated_columns, quote
from .merge_clause import Clause
from .merge_evolution import evolve, generated_identity, named_assignments
from .merge_pruning import join_columns, merge_files, not_broadcast, semi_joined
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
    change_rows,
    commit,
    condition_text,
    files_named,
    num_records,
    regenerated,
    row_indexes,
    target_rows,
    tracking,
    write_rows,
)
from .schema import spark_schema_of
from .target import Target, open_target
from .write import file_footer, identity_values_sql

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

_CLAUSE, _KIND, _T, _S = "__merge_clause", "__merge_kind", "__merge_target", "__merge_source"


def merge(
    source: DataFrame,
    table_uri: str,
    on: str | Column,
    *,
    source_alias: str = "source",
    target_alias: str = "target",
    app_id: str | None = None,
    app_version: int | None = None,
    storage_options: dict[str, Any] | None = None,
    merge_schema: bool = False,
) -> MergeBuilder:
    """A MERGE of ``source`` into the table at ``table_uri`` matching rows where ``on`` holds; add clauses,
    then ``execute()``. ``merge_schema`` evolves the table's schema as Delta Spark's
    ``withSchemaEvolution()`` does (``merge_evolution``)."""
    return MergeBuilder(source, table_uri, on, source_alias, target_alias, app_id, app_version,
                        storage_options, merge_schema)  # fmt: skip


class MergeBuilder:
    """Collects WHEN clauses in order; ``execute()`` runs the MERGE as one commit."""

    def __init__(
        self, source: DataFrame, table_uri: str, on: str | Column, source_alias: str, target_alias: str,
        app_id: str | None, app_version: int | None, storage_options: dict[str, Any] | None,
        merge_schema: bool = False,
    ) -> None:  # fmt: skip
        self.source, self.table_uri, self.on, self.merge_schema = source, table_uri, on, merge_schema
        self.source_alias, self.target_alias = source_alias, target_alias
        self.app_id, self.app_version, self.storage_options = app_id, app_version, storage_options
        self.clauses: list[Clause] = []
        self.generated: dict[int, list[IdentityColumn]] = {}  # per insert clause: identity columns it fills

    def _add(self, clause: Clause) -> MergeBuilder:
        self.clauses.append(clause)
        return self

    def when_matched_update(self, set: Mapping[str, str | Column], condition: str | Column | None = None
                            ) -> MergeBuilder:  # fmt: skip
        return self._add(Clause(MATCHED, "update", condition, dict(set)))

    def when_matched_update_all(self, condition: str | Column | None = None) -> MergeBuilder:
        return self._add(Clause(MATCHED, "update", condition, None))

    def when_matched_delete(self, condition: str | Column | None = None) -> MergeBuilder:
        return self._add(Clause(MATCHED, "delete", condition))

    def when_not_matched_insert(self, values: Mapping[str, str | Column],
                                condition: str | Column | None = None) -> MergeBuilder:  # fmt: skip
        return self._add(Clause(NOT_MATCHED, "insert", condition, dict(values)))

    def when_not_matched_insert_all(self, condition: str | Column | None = None) -> MergeBuilder:
        return self._add(Clause(NOT_MATCHED, "insert", condition, None))

    def when_not_matched_by_source_update(self, set: Mapping[str, str | Column],
                                          condition: str | Column | None = None) -> MergeBuilder:  # fmt: skip
        return self._add(Clause(NOT_MATCHED_BY_SOURCE, "update", condition, dict(set)))

    def when_not_matched_by_source_delete(self, condition: str | Column | None = None) -> MergeBuilder:
        return self._add(Clause(NOT_MATCHED_BY_SOURCE, "delete", condition))

    def execute(self) -> RowChangeResult:
        """Run the MERGE: one commit (none when it changes no row); Delta Spark's MERGE metrics."""
        target = open_target(self.table_uri, self.storage_options, "MERGE")
        if (done := already_committed(target, self.app_id, self.app_version)) is not None:
            return done
        check_clauses(self.clauses)
        return _run(self, target)


def _run(builder: MergeBuilder, target: Target) -> RowChangeResult:
    from pyspark.sql import functions as F

    started = time.monotonic()
    clauses, s_alias, t_alias = builder.clauses, builder.source_alias, builder.target_alias
    whens = {c.when for c in clauses}
    on_text = builder.on if isinstance(builder.on, str) else None
    files = merge_files(target, builder.source, on_text, t_alias, s_alias, NOT_MATCHED_BY_SOURCE in whens)
    source = builder.source.withColumn(_S, F.lit(True)).alias(s_alias)
    spark = builder.source.sparkSession
    if builder.merge_schema:
        probe = target_rows(spark, target, files).alias(t_alias).crossJoin(source)
        evolve(target, probe, clauses, builder.source, s_alias)
    read = join_columns(target, builder.on, builder.clauses, builder.source.columns, builder.source_alias,
                        builder.merge_schema)  # fmt: skip
    rows = target_rows(spark, target, files, read).withColumn(_T, F.lit(True)).alias(t_alias)
    how = "full" if NOT_MATCHED_BY_SOURCE in whens else "right" if NOT_MATCHED in whens else "inner"
    on = analysed(rows.crossJoin(source), {"merge condition": builder.on}, target.where)["merge condition"]
    matched = semi_joined(spark, rows, source, on, t_alias) if how != "full" else rows
    joined = not_broadcast(spark, matched, files).join(source, on, how)
    plan = _plan(target, joined, builder, t_alias, s_alias).persist()
    try:
        return _execute(builder, target, plan, files, started)
    finally:
        plan.unpersist()


def _plan(target: Target, joined: DataFrame, builder: MergeBuilder, t_alias: str, s_alias: str) -> DataFrame:
    """Per joined row: the clause acting on it (index, or null), its kind, the target's values
    (``__t<i>``) and the output values (``__o<i>``); identity values generated for inserts."""
    from pyspark.sql import functions as F

    clauses, source_columns = builder.clauses, builder.source.columns
    names = target.columns
    types = {f.name: f.dataType for f in spark_schema_of(target.metadata.schema).fields}
    is_t, is_s = F.col(f"{t_alias}.{_T}").isNotNull(), F.col(f"{s_alias}.{_S}").isNotNull()
    case = {MATCHED: is_t & is_s, NOT_MATCHED: ~is_t, NOT_MATCHED_BY_SOURCE: ~is_s}
    source_by_lower = {c.lower(): c for c in source_columns}
    expressions: dict[str, Any] = {}
    generated: dict[int, list[IdentityColumn]] = {}
    assigned_by: list[set[str]] = []
    for i, c in enumerate(clauses):
        if c.condition is not None:
            expressions[f"condition of clause {i + 1} ({c.when} {c.action})"] = c.condition
        assigned = named_assignments(target, c, source_by_lower, s_alias, builder.merge_schema)
        assigned_by.append(set(assigned))
        for name, value in assigned.items():
            expressions[f"value of {name} in clause {i + 1} ({c.when} {c.action})"] = value
        if columns := generated_identity(target, c, assigned):
            generated[i] = columns
    builder.generated = generated
    resolved = analysed(joined, expressions, f"the MERGE into {target.where}")
    clause = F.lit(None).cast("int")
    kind = F.lit(None).cast("string")
    for i in reversed(range(len(clauses))):
        c = clauses[i]
        cond = case[c.when]
        if c.condition is not None:
            holds = resolved[f"condition of clause {i + 1} ({c.when} {c.action})"]
            cond = cond & F.coalesce(holds, F.lit(False))
        clause = F.when(cond, F.lit(i)).otherwise(clause)
    for i, c in enumerate(clauses):
        kind = F.when(clause == i, F.lit(c.action)).otherwise(kind)
    outputs = []
    partitions = joined.rdd.getNumPartitions() if generated else 0
    for j, name in enumerate(names):
        value = F.col(f"{t_alias}.`{name}`")
        for i, c in enumerate(clauses):
            key = f"value of {name} in clause {i + 1} ({c.when} {c.action})"
            identity = next((col for col in generated.get(i, []) if col.name == name), None)
            if key in resolved:
                # Structs by field name, as Delta Spark assigns them; an update keeps fields it lacks.
                before = F.col(f"{t_alias}.`{name}`") if c.action == "update" else None
                given = assigned_value(joined, resolved[key], types[name], before, builder.merge_schema,
                                       f"MERGE into {target.where}: {key}")  # fmt: skip
                value = F.when(clause == i, given).otherwise(value)
            elif identity is not None:  # "Identity Columns": generated as the Spark writer does
                generate = F.expr(identity_values_sql(identity, partitions))
                value = F.when(clause == i, generate).otherwise(value)
            elif c.action == "insert":
                value = F.when(clause == i, F.lit(None).cast(types[name])).otherwise(value)
        outputs.append(value.alias(f"__o{j}"))
    olds = [F.col(f"{t_alias}.`{name}`").alias(f"__t{j}") for j, name in enumerate(names)]
    ids = tracking(target, F.col(f"{t_alias}.{ROW_ID}"), F.col(f"{t_alias}.{ROW_VERSION}"))
    plan = joined.select(F.col(f"{t_alias}.{PATH}").alias(PATH), F.col(f"{t_alias}.{INDEX}").alias(INDEX),
                         is_t.alias(_T), is_s.alias(_S), clause.alias(_CLAUSE), kind.alias(_KIND),
                         *olds, *outputs, *ids)  # fmt: skip
    return _generation(plan, target, clauses, assigned_by)


def _generation(plan: DataFrame, target: Target, clauses: list[Clause], assigned_by: list[set[str]]
                ) -> DataFrame:  # fmt: skip
    """The plan with each generated column computed from the values its row gets, for the update and
    insert clauses that do not set it (Delta Spark's MERGE resolves them so; see ``regenerated``)."""
    from pyspark.sql import functions as F

    names = target.columns
    where = {}
    for name in generated_columns(target.metadata.schema):
        writers = [i for i, c in enumerate(clauses) if c.action != "delete" and name not in assigned_by[i]]
        if writers:
            where[name] = F.col(_CLAUSE).isin(writers)
    if not where:
        return plan
    values = regenerated(plan.withColumns({name: F.col(f"__o{j}") for j, name in enumerate(names)}),
                         target, where)  # fmt: skip
    position = {name: j for j, name in enumerate(names)}
    return values.withColumns({f"__o{position[g]}": F.col(quote(g)) for g in where}).drop(*names)


def _execute(builder: MergeBuilder, target: Target, plan: DataFrame, files: Any, started: float
             ) -> RowChangeResult:  # fmt: skip
    from pyspark.sql import functions as F

    clauses = builder.clauses
    matched_actions = [c for c in clauses if c.when == MATCHED]
    only_delete = len(matched_actions) == 1 and matched_actions[0].action == "delete" \
        and matched_actions[0].condition is None  # fmt: skip
    if matched_actions and not only_delete:
        twice = (plan.where(F.col(_T) & F.col(_S) & F.col(_CLAUSE).isNotNull())
                 .groupBy(PATH, INDEX).count().where("count > 1").limit(1).collect())  # fmt: skip
        if twice:
            raise MergeCardinalityError(
                f"MERGE into {target.where}: a target row (row {twice[0][INDEX]} of {twice[0][PATH]}) is "
                f"matched by {twice[0]['count']} source rows: which one updates or deletes it is undefined. "
                "Deduplicate the source on the merge keys; nothing was written"
            )
    # Target rows counted once each (an unconditional delete may match one several times); inserts by row.
    targets = F.count_distinct(F.col(PATH), F.col(INDEX)).alias("targets")
    tallies = plan.groupBy(_CLAUSE).agg(F.count(F.lit(1)).alias("rows"), targets).collect()
    counts = {r[_CLAUSE]: r for r in tallies}
    per_clause = [(counts[i]["rows"] if c.action == "insert" else counts[i]["targets"]) if i in counts else 0
                  for i, c in enumerate(clauses)]  # fmt: skip
    counted = time.monotonic()
    metrics = merge_metrics(clauses, per_clause, builder.source.count())
    # Delta Spark materializes the source first (so it cannot change between its two passes); ours is
    # read by the joins as given, and this is the time taken to count it.
    metrics["materializeSourceTimeMs"] = int((time.monotonic() - counted) * 1000)
    metrics["scanTimeMs"] = int((time.monotonic() - started) * 1000)
    touched_rows = plan.where(F.col(_KIND).isin("update", "delete"))
    hits = row_indexes(touched_rows.select(PATH, INDEX).toArrow())
    updated = plan.where(F.col(_KIND) == "update")
    inserted = plan.where(F.col(_KIND) == "insert")
    deleted = plan.where(F.col(_KIND) == "delete")
    # Delta Spark's copy-on-write MERGE with a NOT MATCHED BY SOURCE clause takes every file it read as
    # touched (its full outer join marks them all), so it rewrites them even when no row changes: ours does
    # the same, so that both commit the same files and conflict with the same concurrent removes.
    every_file = not target.deletion_vectors and any(c.when == NOT_MATCHED_BY_SOURCE for c in clauses)
    if not hits and not per_clause_inserts(clauses, per_clause) and not (every_file and files.num_rows):
        return RowChangeResult(None, metrics)
    changes = Changes(read_files=files.column("path").to_pylist())
    rewrite_started = time.monotonic()
    n = len(target.columns)
    out = [F.col(f"__o{j}").alias(name) for j, name in enumerate(target.columns)]
    old = [F.col(f"__t{j}").alias(name) for j, name in enumerate(target.columns)]
    # Updated rows keep their row ids (inserted ones have none: null target side) and take the commit's
    # version; copied rows keep both ("Row Tracking").
    ids = tracking(target, F.col(ROW_ID), None)
    if target.deletion_vectors:
        changes.deletes = hits
        written = plan.where(F.col(_KIND).isin("update", "insert")).select(*out, *ids)
    else:
        touched = files if every_file else files_named(files, hits)
        changes.removes = AddFile.from_table(touched)
        new = inserted.select(*out, *ids)
        written = _rewritten(builder, target, touched, touched_rows, n).unionByName(new)
    changes.adds = write_rows(target, written)
    changes.identity_marks = _identity_marks(builder, target, changes.adds)
    if target.change_data:
        changes.change_data += [
            change_rows(target, inserted.select(*out), "insert"),
            change_rows(target, updated.select(*old), "update_preimage"),
            change_rows(target, updated.select(*out), "update_postimage"),
            change_rows(target, deleted.dropDuplicates([PATH, INDEX]).select(*old), "delete"),
        ]
    output_rows = num_records(changes.adds)
    metrics.update(
        numTargetFilesAdded=len(changes.adds), numTargetFilesRemoved=len(changes.removes),
        numTargetBytesAdded=sum(a.size for a in changes.adds),
        numTargetBytesRemoved=sum(a.size for a in changes.removes), numOutputRows=output_rows,
        numTargetRowsCopied=output_rows - metrics["numTargetRowsUpdated"] - metrics["numTargetRowsInserted"],
        rewriteTimeMs=int((time.monotonic() - rewrite_started) * 1000),
    )  # fmt: skip
    params = merge_params(condition_text(builder.on) or "", builder.clauses, condition_text)
    # The read predicate, as Delta Spark records it: the ON condition's target-only terms (none: the table).
    read = target_only_condition(builder.on, builder.target_alias)
    return commit(target, changes, read, params, metrics, builder.app_id, builder.app_version,
                  dv_metric_names=MERGE_DV_METRICS, cdc_metric="numTargetChangeFilesAdded")  # fmt: skip


def _identity_marks(builder: MergeBuilder, target: Target, adds: list[AddFile]) -> dict[str, int]:
    """The furthest value each identity column an insert clause generates holds in the files this MERGE
    wrote (their statistics, else their footers), as Delta Spark tracks it while writing
    (``DeltaIdentityColumnStatsTracker``: every row written, copied and explicit values included; the
    commit rounds it onto the column's steps). Taken from the files, not from a second pass over the
    plan: a plan recomputed after an executor was lost could generate other values than those written."""
    columns = {col.name: col for cols in builder.generated.values() for col in cols}
    if not columns:
        return {}
    return high_water_marks(list(columns.values()), adds, lambda add: file_footer(target.table, add))


def per_clause_inserts(clauses: list[Clause], per_clause: list[int]) -> int:
    return sum(n for c, n in zip(clauses, per_clause, strict=True) if c.action == "insert")


def _rewritten(builder: MergeBuilder, target: Target, touched: Any, touched_rows: DataFrame, n: int
               ) -> DataFrame:  # fmt: skip
    """Copy-on-write: every row of the touched files, updated rows with their new values, deleted rows
    dropped (joined back to the plan by file and row index)."""
    from pyspark.sql import functions as F

    acts = touched_rows.select(F.col(PATH).alias("__p"), F.col(INDEX).alias("__i"), _KIND,
                               *[F.col(f"__o{j}") for j in range(n)])  # fmt: skip
    rows = target_rows(builder.source.sparkSession, target, touched)
    both = rows.join(acts, (rows[PATH] == acts["__p"]) & (rows[INDEX] == acts["__i"]), "left")
    both = both.where(F.col(_KIND).isNull() | (F.col(_KIND) == "update"))
    version = F.when(F.col(_KIND).isNull(), F.col(ROW_VERSION)) if target.kept else None
    return both.select(*[F.when(F.col(_KIND) == "update", F.col(f"__o{j}")).otherwise(F.col(f"`{name}`"))
                         .alias(name) for j, name in enumerate(target.columns)],
                       *tracking(target, F.col(ROW_ID), version))  # fmt: skip
