"""MERGE in the task, on Arrow, as Delta Spark's ``MergeIntoCommand``, with the builder a Delta Spark or
deltalake user knows::

    DeltaTable(uri).merge(changes, on="target.id = source.id")
        .when_matched_update(set={"name": "source.name"})
        .when_not_matched_insert_all()
        .execute()

Semantics as Delta Spark's: clauses of each kind are tried in the order given and the first whose condition
holds acts (a row no clause takes is left as it is, or not inserted); every clause of a kind but the last
needs a condition; a target row matched by several source rows is refused (:class:`MergeCardinalityError`,
naming the row and its key) unless the only matched clause is an unconditional delete; NULL keys never
match; the target is ``target`` and the source ``source`` in conditions and values (``target_alias``,
``source_alias``), and a name only one side has may go unqualified.

Execution: the ON condition's equalities between a target and a source column are the join keys (at least
one is needed), the rest is evaluated on the joined rows. The source is read into memory once (Delta Spark
materializes it too). The target's live files are pruned by the source's key ranges (and, for a partition
key, its values) and by the ON condition's target-only terms, unless a NOT MATCHED BY SOURCE clause needs
every row; then

1. the candidate files are read, only the columns the conditions name, file by file, and joined with the
   source: each target row gets the clause that acts on it, and each source row whether it matched;
2. the files with changed rows are read whole: updated rows get their new values (cast as the table
   stores them, generated columns computed again), and either deletion vectors mark updated and deleted
   rows and only updated rows are written, or each touched file is rewritten with its untouched rows;
3. unmatched source rows are inserted by the NOT MATCHED clauses (identity columns generated).

Row ids are kept on tables that track rows; change data is written on change-data-feed tables
(``insert``, ``update_preimage``, ``update_postimage``, ``delete``). One commit, whose read set is the files
read and the pruning condition, so MERGEs into disjoint partitions both commit.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ..actions.actions import AddFile
from ..base.arrow_utils import empty_table
from ..base.errors import (
    IdentityColumnError,
    InvalidConditionError,
    MergeCardinalityError,
)
from ..expressions.evaluate import evaluate, predicate_mask
from ..expressions.expressions import (
    Call,
    Column,
    ColumnNotFoundError,
    Expr,
    Literal,
    Opaque,
    as_expr,
    conjunction,
)
from ..expressions.expressions import literal as literal_of
from ..expressions.skipping import FileStatistics
from ..expressions.sql_parser import parse
from ..features.identity import high_water_marks, identity_columns
from ..scans.scan import Scan
from ..schema.physical_columns import logical_type
from ..schema.schema import delta_schema_to_arrow, physical_name
from ..schema.stats import typed_file_stats
from .arrow_rows import (
    ROW_VERSION,
    RowsWriter,
    change_rows,
    check_assigned_once,
    files_named,
    new_rows,
    target_batches,
)
from .merge_clauses import (
    MATCHED,
    MERGE_DV_METRICS,
    NOT_MATCHED,
    NOT_MATCHED_BY_SOURCE,
    Clause,
    check_clauses,
    condition_text,
    merge_metrics,
    merge_params,
    unqualified,
)
from .merge_evolution import evolve
from .merge_source import MergeSource
from .row_change_commit import INDEX, PATH, Changes, commit, num_records, row_indexes
from .target import RowChangeResult, Target, already_committed, open_target

_POS, _TROW, _SROW, _CLAUSE = "__merge_pos", "__merge_target_row", "__merge_source_row", "__merge_clause"
_PARTITION_VALUES_MAX = 1000  # a partition key's source values pruned by IN up to this many
_ORDERED = (pa.types.is_integer, pa.types.is_floating, pa.types.is_decimal, pa.types.is_string,
            pa.types.is_date, pa.types.is_timestamp)  # fmt: skip


class MergeBuilder:
    """Collects WHEN clauses in order; ``execute()`` runs the MERGE as one commit."""

    def __init__(
        self,
        table: Any,
        source: Any,
        on: Any,
        *,
        source_alias: str = "source",
        target_alias: str = "target",
        merge_schema: bool = False,
        app_id: str | None = None,
        app_version: int | None = None,
    ) -> None:
        if source_alias.lower() == target_alias.lower():
            raise ValueError(f"source_alias and target_alias must differ, both are {source_alias!r}")
        self.table, self.source, self.on, self.merge_schema = table, source, on, merge_schema
        self.source_alias, self.target_alias = source_alias, target_alias
        self.app_id, self.app_version = app_id, app_version
        self.clauses: list[Clause] = []

    def _add(self, clause: Clause) -> MergeBuilder:
        self.clauses.append(clause)
        return self

    def when_matched_update(self, set: Mapping[str, Any], condition: Any = None) -> MergeBuilder:
        return self._add(Clause(MATCHED, "update", condition, dict(set)))

    def when_matched_update_all(self, condition: Any = None) -> MergeBuilder:
        return self._add(Clause(MATCHED, "update", condition, None))

    def when_matched_delete(self, condition: Any = None) -> MergeBuilder:
        return self._add(Clause(MATCHED, "delete", condition))

    def when_not_matched_insert(self, values: Mapping[str, Any], condition: Any = None) -> MergeBuilder:
        return self._add(Clause(NOT_MATCHED, "insert", condition, dict(values)))

    def when_not_matched_insert_all(self, condition: Any = None) -> MergeBuilder:
        return self._add(Clause(NOT_MATCHED, "insert", condition, None))

    def when_not_matched_by_source_update(
        self, set: Mapping[str, Any], condition: Any = None
    ) -> MergeBuilder:
        return self._add(Clause(NOT_MATCHED_BY_SOURCE, "update", condition, dict(set)))

    def when_not_matched_by_source_delete(self, condition: Any = None) -> MergeBuilder:
        return self._add(Clause(NOT_MATCHED_BY_SOURCE, "delete", condition))

    def execute(self) -> RowChangeResult:
        """Run the MERGE: one commit (none when it changes no row); Delta Spark's MERGE metrics."""
        check_clauses(self.clauses)
        target = open_target(self.table, "MERGE")
        if (done := already_committed(target, self.app_id, self.app_version)) is not None:
            return done
        run = _Merge(self, target)
        try:
            return run.run()
        finally:
            run.full.close()


def _expr(value: Any, what: str) -> Expr:
    expr = parse(value) if isinstance(value, str) else as_expr(value)
    if expr is None or isinstance(expr, Opaque):
        message = f"{what} {value!r} cannot be evaluated by the core"
        raise InvalidConditionError(message, expression=str(value))
    return expr


@dataclass
class _Plan:
    """A clause as trees: its condition and its values by the table's column names."""

    clause: Clause
    condition: Expr | None
    values: dict[str, Expr]


class _Merge:
    """One run of a MERGE on Arrow (see the module's docstring)."""

    def __init__(self, builder: MergeBuilder, target: Target) -> None:
        self.builder, self.target = builder, target
        self.t_alias, self.s_alias = builder.target_alias, builder.source_alias
        needed = _words(builder.on, [c.condition for c in builder.clauses])
        started = time.monotonic()
        self.full = MergeSource(builder.source, needed)
        self.materialized_ms = int((time.monotonic() - started) * 1000)
        self.source = self.full.narrow  # the columns matching reads; whole rows come from ``full``
        self.target_names = {c.lower(): c for c in target.columns}
        self.source_names = {c.lower(): c for c in self.full.column_names}
        if builder.merge_schema:
            target.schema_evolution = True
            evolve(target, builder.clauses, self.full.schema, self.s_alias, self._value_type)
            self.target_names = {c.lower(): c for c in target.columns}
        self.on = _expr(builder.on, "the MERGE condition")
        self._check_names(self.on, "the MERGE condition")
        self.keys, self.residual, self.target_only = self._split(self.on)
        if not self.keys:
            raise InvalidConditionError(
                f"the MERGE condition {builder.on!r} has no equality between a {self.t_alias} column and a "
                f"{self.s_alias} column: the in-task MERGE joins on such keys (add one, e.g. "
                f"{self.t_alias}.id = {self.s_alias}.id, or run this MERGE on Spark)",
                expression=str(builder.on),
            )  # fmt: skip
        self.plans = [self._plan(c) for c in builder.clauses]
        self.every_row = any(c.when == NOT_MATCHED_BY_SOURCE for c in builder.clauses)

    # -- set-up ---------------------------------------------------------------------------------------
    def _value_type(self, value: Any) -> pa.DataType:
        """The Arrow type of an assigned value, from evaluating it over no rows of both sides."""
        target_rows = empty_table(delta_schema_to_arrow(self.target.snap.metadata.schema))
        scope = self._scope(target_rows, empty_table(self.full.schema))
        return evaluate(_expr(value, "an assigned value"), scope).type

    def _side(self, column: Column) -> tuple[str, str] | None:
        """(side, column name) of a column reference: qualified by an alias, or a name only one side has."""
        path = column.path
        if len(path) == 2:
            qualifier, name = path[0].lower(), path[1].lower()
            if qualifier == self.t_alias.lower() and name in self.target_names:
                return "t", self.target_names[name]
            if qualifier == self.s_alias.lower() and name in self.source_names:
                return "s", self.source_names[name]
        if len(path) == 1:
            name = path[0].lower()
            in_t, in_s = name in self.target_names, name in self.source_names
            if in_t and not in_s:
                return "t", self.target_names[name]
            if in_s and not in_t:
                return "s", self.source_names[name]
        return None

    def _check_names(self, expr: Expr, what: str) -> None:
        """Every column ``expr`` names resolves to one side: a misspelt or ambiguous name is refused by
        name before anything is read."""
        for path in expr.columns():
            if self._side(Column(path[:2])) is not None or self._side(Column(path[:1])) is not None:
                continue
            name = path[0].lower()
            if name in self.target_names and name in self.source_names:
                raise ColumnNotFoundError(f"{what} names {path[0]!r}, which both {self.t_alias} and "
                                          f"{self.s_alias} have: qualify it, e.g. {self.s_alias}.{path[0]}")
            raise ColumnNotFoundError(
                f"{what} names {'.'.join(path)!r}, a column of neither {self.t_alias} "
                f"({', '.join(self.target_names.values())}) nor {self.s_alias} "
                f"({', '.join(self.source_names.values())})"
            )

    def _split(self, on: Expr) -> tuple[list[tuple[str, str]], list[Expr], list[Expr]]:
        """The ON condition's conjuncts: (target, source) equality keys, the rest, and the rest's terms
        that read target columns only (unqualified, for file skipping)."""
        terms: list[Expr] = []

        def flatten(e: Expr) -> None:
            if isinstance(e, Call) and e.op == "and":
                for a in e.args:
                    flatten(a)
            else:
                terms.append(e)

        flatten(on)
        keys, residual, target_only = [], [], []
        for term in terms:
            if isinstance(term, Call) and term.op == "=" and all(isinstance(a, Column) for a in term.args):
                a, b = (self._side(x) for x in term.args)  # type: ignore[arg-type]
                if a and b and {a[0], b[0]} == {"t", "s"}:
                    keys.append((a[1], b[1]) if a[0] == "t" else (b[1], a[1]))
                    continue
            residual.append(term)
            sides = [self._side(Column(p)) for p in term.columns()]
            if sides and all(s is not None and s[0] == "t" for s in sides):
                target_only.append(unqualified(term, self._side))
        return keys, residual, target_only

    def _plan(self, clause: Clause) -> _Plan:
        target = self.target
        cond = None if clause.condition is None else _expr(clause.condition, f"the {clause.when} condition")
        if clause.action == "delete":
            return _Plan(clause, cond, {})
        if clause.assignments is None:  # ``*``: every table column from the source's same name
            missing = [c for c in target.columns if c.lower() not in self.source_names]
            missing = [c for c in missing if not (clause.action == "insert" and _generated(target, c))]
            if missing and not self.builder.merge_schema:
                raise ColumnNotFoundError(
                    f"{clause.action} all: the source lacks column(s) {missing} of {target.where} (pass "
                    "merge_schema=True to keep them, or name the columns to set)"
                )
            values: dict[str, Expr] = {
                c: Column((self.s_alias, self.source_names[c.lower()]))
                for c in target.columns if c.lower() in self.source_names
            }  # fmt: skip
        else:
            check_assigned_once(clause.assignments, f"the {clause.when} {clause.action} clause")
            unknown = [n for n in clause.assignments if n.lower() not in self.target_names]
            if unknown:
                raise ColumnNotFoundError(f"cannot {clause.action} {unknown}: not columns of {target.where} "
                                          f"(columns: {', '.join(target.columns)})")  # fmt: skip
            values = {self.target_names[n.lower()]: _expr(v, f"the value of {n!r}")
                      for n, v in clause.assignments.items()}  # fmt: skip
        for column in identity_columns(target.metadata.schema):
            if column.name not in values:
                continue
            if clause.action == "update":
                raise _identity_error(target, column.name, "a MERGE cannot update it")
            if not column.allow_explicit_insert:
                raise _identity_error(target, column.name, "GENERATED ALWAYS: an insert cannot give values")
        return _Plan(clause, cond, values)

    # -- the run --------------------------------------------------------------------------------------
    def run(self) -> RowChangeResult:
        target, builder = self.target, self.builder
        files, read_predicate = self._files()
        started = time.monotonic()
        acts, source_matched, per_clause = self._find(files)
        metrics: dict[str, int] = {}
        metrics["materializeSourceTimeMs"] = self.materialized_ms
        metrics["scanTimeMs"] = int((time.monotonic() - started) * 1000)
        inserts, insert_clauses = self._inserts(source_matched)
        for i, n in zip(*np.unique(insert_clauses, return_counts=True), strict=True):
            per_clause[int(i)] = int(n)
        metrics.update(merge_metrics(builder.clauses, per_clause, self.source.num_rows))
        every_file = not target.deletion_vectors and self.every_row  # as Delta Spark's full outer join
        inserted = len(inserts)
        if acts.num_rows == 0 and not inserted and not (every_file and files.num_rows):
            return RowChangeResult(None, metrics)
        changes = Changes(read_files=files.column("path").to_pylist())
        rewrite_started = time.monotonic()
        # Inserted rows share the rewritten rows' files, unless identity values are generated for them
        # (the rewritten rows carry theirs, which a generating writer would replace).
        generated = self._generated_identity()
        rewriter = RowsWriter(target)
        inserter = RowsWriter(target, generated) if generated else rewriter
        try:
            touched = files if every_file else files_named(files, acts.column(PATH).to_pylist())
            self._rewrite(touched, acts, rewriter, changes)
            self._insert(inserts, insert_clauses, inserter, changes)
            changes.adds = rewriter.close() + (inserter.close() if inserter is not rewriter else [])
        except BaseException:
            rewriter.delete()
            inserter.delete()
            raise
        if generated:
            # As Delta Spark's stats tracker: the furthest value in any file this MERGE wrote (copied and
            # explicit values too), not only the values it generated.
            marks = high_water_marks(generated, changes.adds, lambda add: _footer(target, add))
            changes.identity_marks = {**inserter.high_water_marks, **marks}
        if target.deletion_vectors:
            changes.deletes = row_indexes(acts.select([PATH, INDEX]))
        else:
            changes.removes = AddFile.from_table(touched)
        output_rows = num_records(changes.adds)
        metrics.update(
            numTargetFilesAdded=len(changes.adds), numTargetFilesRemoved=len(changes.removes),
            numTargetBytesAdded=sum(a.size for a in changes.adds),
            numTargetBytesRemoved=sum(a.size for a in changes.removes), numOutputRows=output_rows,
            numTargetRowsCopied=output_rows - metrics["numTargetRowsUpdated"] - inserted,
            rewriteTimeMs=int((time.monotonic() - rewrite_started) * 1000),
        )  # fmt: skip
        params = merge_params(condition_text(builder.on) or "", builder.clauses, condition_text)
        return commit(target, changes, read_predicate, params, metrics, builder.app_id, builder.app_version,
                      dv_metric_names=MERGE_DV_METRICS, cdc_metric="numTargetChangeFilesAdded")  # fmt: skip

    def _files(self) -> tuple[pa.Table, Expr | None]:
        """The live files the MERGE reads, and the condition its read set records (None: every row):
        pruned by the source's key ranges and partition values and the ON condition's target-only terms,
        unless a NOT MATCHED BY SOURCE clause needs every row."""
        snap = self.target.snap
        if self.every_row:
            return snap.files, None
        terms: list[Expr] = list(self.target_only)
        partitions = {c.lower() for c in snap.partition_columns}
        for t, s in self.keys:
            values = self._key_values(t, s)
            if values is None:
                continue
            if len(values) == 0 or values.null_count == len(values):
                return snap.files.slice(0, 0), Literal(False, pa.bool_())  # only NULL keys: nothing matches
            distinct = pc.unique(values.drop_null())
            if t.lower() in partitions and len(distinct) <= _PARTITION_VALUES_MAX:
                items = tuple(literal_of(v) for v in distinct.to_pylist())
                terms.append(Call("in", (Column((t,)), *items)))
            elif any(is_kind(values.type) for is_kind in _ORDERED):
                bounds = pc.min_max(values)
                low, high = (literal_of(bounds[b].as_py(), values.type) for b in ("min", "max"))
                terms += [Call(">=", (Column((t,)), low)), Call("<=", (Column((t,)), high))]
        if not terms:
            return snap.files, None
        condition = conjunction(terms)
        files = Scan(snap, columns=self.target.columns[:1], filter=condition).files
        for t, s in self.keys:
            if t.lower() not in partitions:
                files = self._holding_keys(files, t, s)
        return files, condition

    def _holding_keys(self, files: pa.Table, t: str, s: str) -> pa.Table:
        """The files whose statistics range of key ``t`` holds at least one of the source's keys, not
        only the source's overall range: a day's changes spread over a few files of a big table read
        those files. Integer and date keys only, whose statistics are exact (timestamps are truncated to
        milliseconds and strings to a prefix); a file without statistics is kept."""
        values = self._key_values(t, s)
        if values is None or files.num_rows == 0 or "stats" not in files.column_names:
            return files
        if not (pa.types.is_integer(values.type) or pa.types.is_date32(values.type)):
            return files
        as_int = pa.int32() if pa.types.is_date32(values.type) else values.type
        keys = np.unique(values.drop_null().cast(as_int).to_numpy().astype(np.int64))
        config = self.target.snap.table_configuration
        physical = {f["name"].lower(): physical_name(f, config.column_mapping_mode)
                    for f in config.metadata.schema["fields"]}  # fmt: skip
        facts = FileStatistics(files.num_rows, pa.table({}), typed_file_stats(config.stats_schema, files),
                               physical)  # fmt: skip
        low, high = facts.stat("minValues", (t,)), facts.stat("maxValues", (t,))
        if low is None or high is None or low.type != values.type or high.type != values.type:
            return files
        info = np.iinfo(np.int64)
        lo = pc.fill_null(low.cast(as_int).cast(pa.int64()), info.min).to_numpy()
        hi = pc.fill_null(high.cast(as_int).cast(pa.int64()), info.max).to_numpy()
        held = np.searchsorted(keys, hi, side="right") - np.searchsorted(keys, lo, side="left")
        return files.filter(pa.array(held > 0))

    def _key_values(self, t: str, s: str) -> pa.Array | None:
        """The source's values of a key in the target column's type (None when they do not cast)."""
        field = next(f for f in self.target.snap.metadata.schema["fields"] if f["name"] == t)
        if not isinstance(field["type"], str):
            return None
        values = self.source.column(s).combine_chunks()
        target_type = self._target_type(t)
        if values.type == target_type:
            return values
        try:
            return pc.cast(values, target_type)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            return None

    def _target_type(self, name: str) -> pa.DataType:
        field = next(f for f in self.target.metadata.schema["fields"] if f["name"] == name)
        return logical_type(field["type"])

    def _find(self, files: pa.Table) -> tuple[pa.Table, np.ndarray, list[int]]:
        """Pass 1: the target rows a clause acts on (file, row index, clause, source row), whether each
        source row matched, and the target rows each clause took."""
        clauses = self.builder.clauses
        matched_plans = [(i, p) for i, p in enumerate(self.plans) if p.clause.when == MATCHED]
        by_source = [(i, p) for i, p in enumerate(self.plans) if p.clause.when == NOT_MATCHED_BY_SOURCE]
        only_delete = len(matched_plans) == 1 and matched_plans[0][1].clause.action == "delete" \
            and matched_plans[0][1].condition is None  # fmt: skip
        needed = [e for p in self.plans for e in (p.condition, *p.values.values()) if e is not None]
        columns = _names(self.target, [self.on, *needed], self._side)
        source_matched = np.zeros(self.source.num_rows, dtype=bool)
        per_clause = [0] * len(clauses)
        acts: list[pa.Table] = []
        for rows in target_batches(self.target, files, columns or [t for t, _ in self.keys]):
            trow, srow = self._pairs(rows)
            if matched_plans and not only_delete and len(trow):
                self._check_cardinality(rows, trow)
            source_matched[srow] = True
            if matched_plans and len(trow):
                if only_delete:
                    trow, first = np.unique(trow, return_index=True)
                    srow = srow[first]
                scope = self._scope(rows.take(pa.array(trow)), self.source.take(pa.array(srow)))
                chosen = _choose(matched_plans, scope)
                acts.append(self._acts(rows, trow, srow, chosen, per_clause))
            if by_source:
                unmatched = np.setdiff1d(np.arange(rows.num_rows), trow, assume_unique=False)
                scope = self._scope(rows.take(pa.array(unmatched)), None)
                chosen = _choose(by_source, scope)
                acts.append(self._acts(rows, unmatched, np.full(len(unmatched), -1), chosen, per_clause))
        empty = pa.table({PATH: pa.array([], pa.string()), INDEX: pa.array([], pa.int64()),
                          _CLAUSE: pa.array([], pa.int64()), _SROW: pa.array([], pa.int64())})  # fmt: skip
        return (pa.concat_tables([empty, *acts]) if acts else empty), source_matched, per_clause

    def _pairs(self, rows: pa.Table) -> tuple[np.ndarray, np.ndarray]:
        """(target row, source row) pairs where the ON condition holds: a hash join on the keys (NULL
        keys never match), then the condition's other terms on the pairs."""
        left = {f"k{j}": rows.column(t) for j, (t, _) in enumerate(self.keys)}
        right = {}
        for j, (t, s) in enumerate(self.keys):
            values = self.source.column(s)
            kind = rows.schema.field(t).type
            if self.target.evolved and kind != (wider := self._target_type(t)):
                left[f"k{j}"] = rows.column(t).cast(wider)  # a widened key: compared in its new type
                kind = wider
            if values.type != kind:
                try:
                    values = pc.cast(values, kind)
                except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
                    raise InvalidConditionError(
                        f"the MERGE keys {self.t_alias}.{t} ({kind}) and {self.s_alias}.{s} ({values.type}) "
                        f"cannot be compared: {exc}", expression=str(self.builder.on),
                    ) from None  # fmt: skip
            right[f"k{j}"] = values
        left[_TROW] = pa.array(np.arange(rows.num_rows))
        right[_SROW] = pa.array(np.arange(self.source.num_rows))
        keys = [f"k{j}" for j in range(len(self.keys))]
        joined = pa.table(left).join(pa.table(right), keys, join_type="inner", use_threads=False)
        trow = joined.column(_TROW).to_numpy()
        srow = joined.column(_SROW).to_numpy()
        if self.residual and len(trow):
            order = np.lexsort((srow, trow))
            trow, srow = trow[order], srow[order]
            scope = self._scope(rows.take(pa.array(trow)), self.source.take(pa.array(srow)))
            holds = predicate_mask(conjunction(self.residual), scope).to_numpy(zero_copy_only=False)
            trow, srow = trow[holds], srow[holds]
        order = np.lexsort((srow, trow))
        return trow[order], srow[order]

    def _check_cardinality(self, rows: pa.Table, trow: np.ndarray) -> None:
        """A target row matched by two source rows, with an update or conditional delete to apply: which
        source row wins is undefined, so the MERGE is refused naming the row and its key."""
        repeated = trow[1:][trow[1:] == trow[:-1]]
        if not len(repeated):
            return
        row = int(repeated[0])
        count = int((trow == row).sum())
        key = {t: rows.column(t)[row].as_py() for t, _ in self.keys}
        raise MergeCardinalityError(
            f"MERGE into {self.target.where}: the target row with key {key} (row {rows.column(INDEX)[row]} "
            f"of {rows.column(PATH)[row]}) is matched by {count} source rows: which one updates or deletes "
            "it is undefined. Deduplicate the source on the merge keys; nothing was written"
        )

    def _scope(self, t_rows: pa.Table | None, s_rows: pa.Table | None) -> pa.Table:
        """Rows as conditions and values see them: ``target`` and ``source`` structs by their aliases,
        and each name only one side has, unqualified."""
        columns: dict[str, Any] = {}
        aliases = {self.t_alias.lower(), self.s_alias.lower()}
        sides = [(self.t_alias, t_rows, self.target.columns),
                 (self.s_alias, s_rows, self.full.column_names)]  # fmt: skip
        for alias, rows, names in sides:
            if rows is None:
                continue
            present = [n for n in names if n in rows.column_names]
            arrays = [rows.column(n).combine_chunks() for n in present]
            if arrays:
                columns[alias] = pa.StructArray.from_arrays(arrays, names=present)
            other = self.source_names if alias == self.t_alias else self.target_names
            for name, array in zip(present, arrays, strict=True):
                if name.lower() not in other and name.lower() not in aliases:
                    columns[name] = array
        n = (t_rows if t_rows is not None else s_rows).num_rows  # type: ignore[union-attr]
        return pa.table(columns) if columns else pa.table({"__empty": pa.nulls(n)})

    def _acts(self, rows: pa.Table, trow: np.ndarray, srow: np.ndarray, chosen: np.ndarray,
              per_clause: list[int]) -> pa.Table:  # fmt: skip
        """The target rows a clause took, counted once each per clause."""
        acting = chosen >= 0
        trow, srow, chosen = trow[acting], srow[acting], chosen[acting]
        for i, n in zip(*np.unique(chosen, return_counts=True), strict=True):
            per_clause[int(i)] += int(n)
        taken = pa.array(trow)
        return pa.table({PATH: rows.column(PATH).take(taken), INDEX: rows.column(INDEX).take(taken),
                         _CLAUSE: pa.array(chosen, pa.int64()),
                         _SROW: pa.array(srow, pa.int64())})  # fmt: skip

    def _inserts(self, source_matched: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The unmatched source rows a NOT MATCHED clause inserts (ascending) and the clause of each,
        decided on the columns in memory."""
        plans = [(i, p) for i, p in enumerate(self.plans) if p.clause.when == NOT_MATCHED]
        none = np.empty(0, np.int64)
        if not plans:
            return none, none
        unmatched = np.flatnonzero(~source_matched)
        chosen = _choose(plans, self._scope(None, self.source.take(pa.array(unmatched))))
        taken = chosen >= 0
        return unmatched[taken], chosen[taken]

    def _insert(self, rows: np.ndarray, clauses: np.ndarray, writer: RowsWriter, changes: Changes) -> None:
        """Pass 3: the inserted rows' values from the whole source rows, a part of the source at a time."""
        for at, whole in self.full.chunks(rows):
            which = clauses[np.searchsorted(rows, at)]
            scope = self._scope(None, whole)
            for i in np.unique(which).tolist():
                part = scope.filter(pa.array(which == i))
                new = new_rows(self.target, _rows(part.num_rows), self.plans[i].values, part, "MERGE")
                written = writer.write(new)
                if self.target.change_data:
                    changes.change_data.append(change_rows(self.target, written, "insert"))

    def _generated_identity(self) -> list[Any]:
        """The identity columns an insert clause leaves to the table to generate."""
        given = {c for p in self.plans if p.clause.action == "insert" for c in p.values}
        inserts = any(p.clause.action == "insert" for p in self.plans)
        return [c for c in identity_columns(self.target.metadata.schema) if inserts and c.name not in given]

    def _rewrite(self, touched: pa.Table, acts: pa.Table, writer: RowsWriter, changes: Changes) -> None:
        """Pass 2: the touched files read whole; updated rows written with their new values, deleted rows
        dropped, and (copy-on-write) the other rows copied."""
        target = self.target
        if touched.num_rows == 0:
            return
        for rows in target_batches(target, touched):
            rows = rows.append_column(_POS, pa.array(np.arange(rows.num_rows)))
            found = rows.select([PATH, INDEX, _POS]).join(acts, [PATH, INDEX], join_type="inner",
                                                          use_threads=False)  # fmt: skip
            pos = found.column(_POS).to_numpy()
            clause = found.column(_CLAUSE).to_numpy()
            srow = found.column(_SROW).to_numpy()
            changed = np.zeros(rows.num_rows, dtype=bool)
            changed[pos] = True
            for i, plan in enumerate(self.plans):
                if plan.clause.action not in ("update", "delete") or not (clause == i).any():
                    continue
                at = pos[clause == i]
                old = rows.take(pa.array(at))
                if plan.clause.action == "delete":
                    if target.change_data:
                        changes.change_data.append(change_rows(target, old, "delete"))
                    continue
                sources = srow[clause == i]
                src = self.full.take(sources) if (sources >= 0).all() else None
                scope = self._scope(old, src)
                new = new_rows(target, old, plan.values, scope, "MERGE")
                if target.kept:  # an updated row keeps its id and takes the commit's version
                    new = new.set_column(new.column_names.index(ROW_VERSION), ROW_VERSION,
                                         pa.nulls(new.num_rows, pa.int64()))  # fmt: skip
                written = writer.write(new.drop_columns([_POS]))
                if target.change_data:
                    changes.change_data.append(change_rows(target, old, "update_preimage"))
                    changes.change_data.append(change_rows(target, written, "update_postimage"))
            if not target.deletion_vectors:
                writer.write(rows.filter(pa.array(~changed)).drop_columns([_POS]))


def _words(on: Any, conditions: Sequence[Any]) -> set[str] | None:
    """Every name the ON condition and the clause conditions use, lower-case (qualifiers too): the source
    columns matching reads. None (every column) when one is not SQL text."""
    out: set[str] = set()
    for text in (on, *conditions):
        if text is None:
            continue
        expr = _expr(text, "a MERGE condition")
        out.update(part.lower() for path in expr.columns() for part in path)
    return out


def _choose(plans: Sequence[tuple[int, _Plan]], scope: pa.Table) -> np.ndarray:
    """Per row, the first clause (by its index) whose condition holds; -1 where none does."""
    out = np.full(scope.num_rows, -1, dtype=np.int64)
    undecided = np.ones(scope.num_rows, dtype=bool)
    for i, plan in plans:
        if plan.condition is None:
            holds = np.ones(scope.num_rows, dtype=bool)
        else:
            holds = predicate_mask(plan.condition, scope).to_numpy(zero_copy_only=False)
        take = undecided & holds
        out[take] = i
        undecided &= ~take
    return out


def _names(target: Target, exprs: Sequence[Expr | None], side: Any) -> list[str]:
    """The target columns ``exprs`` read."""
    out = []
    for expr in exprs:
        for path in expr.columns() if expr is not None else ():
            found = side(Column(path[:2])) or side(Column(path[:1]))
            if found and found[0] == "t" and found[1] not in out:
                out.append(found[1])
    return [c for c in target.columns if c in out]


def _generated(target: Target, column: str) -> bool:
    return column in target.configuration.generated_columns or any(
        c.name == column for c in identity_columns(target.metadata.schema)
    )


def _rows(n: int) -> pa.Table:
    """``n`` rows without a table column yet (new rows get theirs assigned)."""
    return pa.table({"__merge_rows": pa.nulls(n)})


def _identity_error(target: Target, column: str, why: str) -> Exception:
    return IdentityColumnError(f"{target.where}: {column!r} is an identity column; {why} (Delta Spark "
                               "refuses it too)", column=column)  # fmt: skip


def _footer(target: Target, add: AddFile) -> pq.FileMetaData:
    """A written file's Parquet footer (for an identity column the statistics do not index)."""
    store = target.table.store
    with store.fs.open(store.table_file(add.path), "rb") as fh:
        return pq.ParquetFile(fh).metadata
