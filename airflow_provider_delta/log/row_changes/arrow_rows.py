"""The Arrow engine's rows of a row-level change: the target's rows read with their place in their file, the
files a condition can touch, values assigned as the table stores them, and rows written back.

As Delta Spark's commands: the live files are pruned by partition values and statistics for the condition
(the scan's skipping); the rest are read with each row's file and row index (what a deletion vector marks)
and, on tables that track rows, its row id and commit version, so that rows written again keep them
("Row Tracking"). Rows are written through the one write planner (``rewrite_plan``: physical names,
partition folders, statistics, the table's rules on every row).
"""

from __future__ import annotations

import dataclasses
import os
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..actions.actions import AddFile
from ..base.arrow_utils import from_numpy, from_strings, string_scalar
from ..base.errors import IdentityColumnError, SchemaMismatchError
from ..commits.change_data import CHANGE_TYPE
from ..expressions.evaluate import cast, evaluate, predicate_mask
from ..expressions.expressions import ColumnNotFoundError, Expr, Opaque, as_expr
from ..expressions.sql_parser import UnsupportedExpressionError, parse
from ..expressions.table_rules import compile_expression
from ..features.identity import IdentityColumn, IdentityValues, identity_columns
from ..scans.scan import Scan
from ..schema.partition_values import typed_partition_values
from ..schema.physical_columns import logical_type
from ..writes.write_plan import rewrite_plan
from ..writes.write_rows import DEFAULT_TARGET_FILE_SIZE, PartitionedFiles
from .row_change_commit import INDEX, PATH
from .target import Target

ROW_ID = "__delta_row_id"  # on tables that track rows: the row's id and commit version ("Row Tracking")
ROW_VERSION = "__delta_row_commit_version"
_PLACE = ("file_path", "row_index")
_TRACKED = ("row_id", "row_commit_version")


def without_views(table: pa.Table) -> pa.Table:
    """``table`` with view types (Polars hands over ``string_view``) as their plain forms, which every
    compute kernel a MERGE needs (take, join) accepts."""
    schema = pa.schema([f.with_type(_plain(f.type)) for f in table.schema], metadata=table.schema.metadata)
    return table if schema == table.schema else table.cast(schema)


def _plain(kind: pa.DataType) -> pa.DataType:
    if pa.types.is_string_view(kind):
        return pa.string()
    if pa.types.is_binary_view(kind):
        return pa.binary()
    if pa.types.is_list_view(kind) or pa.types.is_list(kind):
        return pa.list_(kind.value_field.with_type(_plain(kind.value_type)))
    if pa.types.is_large_list_view(kind):
        return pa.large_list(kind.value_field.with_type(_plain(kind.value_type)))
    if pa.types.is_struct(kind):
        return pa.struct([f.with_type(_plain(f.type)) for f in kind])
    if pa.types.is_map(kind):
        return pa.map_(kind.key_field.with_type(_plain(kind.key_type)),
                       kind.item_field.with_type(_plain(kind.item_type)))  # fmt: skip
    return kind


def condition_of(condition: Any) -> tuple[Expr | None, str | None]:
    """A condition as a tree and as the text commitInfo records: SQL text (Spark SQL's semantics), a
    ``pyarrow.compute.Expression`` or DNF tuples; None for every row."""
    if condition is None:
        return None, None
    expr = parse(condition) if isinstance(condition, str) else as_expr(condition)
    if isinstance(expr, Opaque):
        raise ValueError(f"the condition {condition} cannot be evaluated by the core: {expr.what}")
    return expr, condition if isinstance(condition, str) else str(expr)


def check_columns(expr: Expr | None, columns: Sequence[str], what: str, where: str) -> None:
    """Every column ``expr`` names is one of ``columns`` (case-insensitive): otherwise
    :class:`ColumnNotFoundError` naming it, before anything is read."""
    known = {c.lower() for c in columns}
    for path in expr.columns() if expr is not None else ():
        if path[0].lower() not in known:
            raise ColumnNotFoundError(
                f"{what} names column {'.'.join(path)!r}, which {where} lacks (columns: {', '.join(columns)})"
            )


def candidate_files(target: Target, expr: Expr | None) -> pa.Table:
    """The live files that may hold rows where ``expr`` holds (every live file without one)."""
    if expr is None:
        return target.snap.files
    return Scan(target.snap, columns=target.columns[:1], filter=expr).files


def only_partitions(target: Target, expr: Expr | None) -> bool:
    """Whether ``expr`` reads partition columns only: its files then match whole or not at all."""
    if expr is None:
        return False
    partitions = {c.lower() for c in target.snap.partition_columns}
    names = [path[0].lower() for path in expr.columns()]
    return bool(names) and all(n in partitions for n in names)


def files_where(target: Target, files: pa.Table, expr: Expr) -> pa.Table:
    """The files whose typed partition values satisfy ``expr`` (partition columns only), exactly."""
    if files.num_rows == 0:
        return files
    mode = target.snap.table_configuration.column_mapping_mode
    return files.filter(predicate_mask(expr, typed_partition_values(target.snap.metadata, files, mode)))


def files_named(files: pa.Table, paths: Any) -> pa.Table:
    """The rows of ``files`` with one of ``paths`` (Arrow built without pandas: a small DELETE in a fresh
    task would otherwise pay a second for importing it)."""
    return pc.filter(files, pc.is_in(files.column("path"), value_set=from_strings(sorted(set(paths)))))


def target_batches(
    target: Target, files: pa.Table, columns: Sequence[str] | None = None, read_ahead: int | None = None
) -> Iterator[pa.Table]:
    """The live rows of ``files``, file by file: the table's ``columns`` (all by default) by logical name,
    then ``PATH`` and ``INDEX``, and on tables that track rows ``ROW_ID`` and ``ROW_VERSION``. Rows that
    deletion vectors delete already are not there."""
    if files.num_rows == 0:
        return
    meta = (*_PLACE, *(_TRACKED if target.kept else ()))
    scan = Scan(target.snap, columns=list(columns) if columns else None, files=files, metadata=meta,
                read_ahead=read_ahead)  # fmt: skip
    names = [PATH, INDEX, *((ROW_ID, ROW_VERSION) if target.kept else ())]
    for batch in scan.to_batches():
        place = batch.column(batch.num_columns - 1)
        rows = pa.Table.from_batches([batch]).drop_columns(["_metadata"])
        for name, field in zip(names, meta, strict=True):
            rows = rows.append_column(name, place.field(field))
        yield rows


def referenced(target: Target, exprs: Sequence[Expr | None]) -> list[str]:
    """The table's columns that ``exprs`` name (qualified names count by their last part too): the narrow
    read that finds rows, before the touched files are read whole."""
    words = {p.lower() for e in exprs if e is not None for path in e.columns() for p in path}
    return [c for c in target.columns if c.lower() in words]


def assigned(
    value: pa.ChunkedArray | pa.Array,
    field: Mapping[str, Any],
    where: str,
    old: pa.ChunkedArray | None = None,
    *,
    evolving: bool = False,
) -> pa.ChunkedArray:
    """A value as column ``field`` stores it: a primitive cast as Spark's store assignment does (an
    overflow is an error, not a wrapped value); a struct matched field by field by name, as Delta Spark
    assigns structs: a field the column lacks is refused by name (``merge_schema`` adds it first); a field
    the value lacks is refused too, unless the schema is ``evolving`` (``merge_schema``), when it keeps its
    ``old`` value (an update) or is null (an insert). Arrays and maps of structs are checked for fields the
    column lacks and otherwise matched by the writer."""
    kind = field["type"]
    target = logical_type(kind)
    if not isinstance(kind, str):
        where = f"{where}: column {field['name']!r}"
        _check_fields(value.type, kind, where, field["name"], missing_allowed=evolving)
        if isinstance(kind, dict) and kind.get("type") == "struct" and old is not None:
            value = _with_old_fields(pa.chunked_array([value]) if isinstance(value, pa.Array) else value,
                                     kind, old)  # fmt: skip
        return value if isinstance(value, pa.ChunkedArray) else pa.chunked_array([value])
    if value.type == target:
        return value if isinstance(value, pa.ChunkedArray) else pa.chunked_array([value])
    try:
        out = cast(value, kind, target=target)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, UnsupportedExpressionError) as exc:
        raise SchemaMismatchError(f"{where}: a {value.type} value cannot be stored in column "
                                  f"{field['name']!r} of type {kind}: {exc}") from None  # fmt: skip
    return out if isinstance(out, pa.ChunkedArray) else pa.chunked_array([out])


def _check_fields(kind: pa.DataType, delta: Any, where: str, path: str, *, missing_allowed: bool) -> None:
    """Refuse a value whose structs (at any depth) have a field the column's type lacks (writing it would
    drop the field's values) or, unless ``missing_allowed``, lack one of its fields: Delta Spark refuses
    both without schema evolution."""
    if not isinstance(delta, dict):
        return
    if delta.get("type") == "struct" and pa.types.is_struct(kind):
        fields = {f["name"].lower(): f for f in delta["fields"]}
        for child in kind:
            known = fields.get(child.name.lower())
            if known is None:
                raise SchemaMismatchError(
                    f"{where}: the value has field {path}.{child.name}, which the column lacks (pass "
                    "merge_schema=True to add it)"
                )
            _check_fields(child.type, known["type"], where, f"{path}.{child.name}",
                          missing_allowed=missing_allowed)  # fmt: skip
        given = {child.name.lower() for child in kind}
        lacking = [f["name"] for f in delta["fields"] if f["name"].lower() not in given]
        if lacking and not missing_allowed:
            raise SchemaMismatchError(
                f"{where}: the value lacks field(s) {[f'{path}.{n}' for n in lacking]} of the column (pass "
                "merge_schema=True to keep them on update and null them on insert)"
            )
    elif delta.get("type") == "array" and (pa.types.is_list(kind) or pa.types.is_large_list(kind)):
        _check_fields(kind.value_type, delta["elementType"], where, f"{path}.element",
                      missing_allowed=missing_allowed)  # fmt: skip
    elif delta.get("type") == "map" and pa.types.is_map(kind):
        _check_fields(kind.item_type, delta["valueType"], where, f"{path}.value",
                      missing_allowed=missing_allowed)  # fmt: skip


def _with_old_fields(value: pa.ChunkedArray, delta: dict, old: pa.ChunkedArray) -> pa.ChunkedArray:
    """A struct value with the fields it lacks taken from the ``old`` value of the same rows (where the
    new struct is null, it stays null), at any depth of structs."""
    new, before = value.combine_chunks(), old.combine_chunks()
    if not pa.types.is_struct(new.type) or not pa.types.is_struct(before.type):
        return value
    given = {f.name.lower(): i for i, f in enumerate(new.type)}
    had = {f.name.lower(): i for i, f in enumerate(before.type)}
    if all(f["name"].lower() in given for f in delta["fields"]) and len(given) == len(delta["fields"]):
        return value  # nothing to fill: the struct is assigned as it is, NULL included
    children, names = [], []
    for f in delta["fields"]:
        key = f["name"].lower()
        if key in given:
            child = new.field(given[key])
            if isinstance(f["type"], dict) and f["type"].get("type") == "struct" and key in had:
                child = _with_old_fields(pa.chunked_array([child]), f["type"], pa.chunked_array(
                    [before.field(had[key])])).combine_chunks()  # fmt: skip
        elif key in had:
            child = before.field(had[key])
        else:
            child = pa.nulls(len(new), logical_type(f["type"]))
        children.append(child)
        names.append(f["name"])
    if not children:
        return value
    # Delta Spark builds the struct field by field (the source's where it has them, the target's where it
    # lacks them), so a NULL source struct becomes one of NULL fields and the target's kept ones.
    out = pa.StructArray.from_arrays(children, names=names)
    return pa.chunked_array([out])


def assignments(target: Target, given: Mapping[str, Any], what: str) -> dict[str, Expr]:
    """``{column: value}`` (SQL text, or a ``pyarrow.compute.Expression``) as trees by the table's own
    column names: an unknown column, or an identity column (its values come from the table), is refused
    by name."""
    by_lower = {c.lower(): c for c in target.columns}
    unknown = [name for name in given if name.lower() not in by_lower]
    if unknown:
        raise ColumnNotFoundError(f"{what} cannot set {unknown}: not columns of {target.where} "
                                  f"(columns: {', '.join(target.columns)})")  # fmt: skip
    check_assigned_once(given, what)
    out = {}
    for name, value in given.items():
        column = by_lower[name.lower()]
        expr = parse(value) if isinstance(value, str) else as_expr(value)
        if expr is None or isinstance(expr, Opaque):
            raise ValueError(f"{what}: the value of {column!r} ({value!r}) cannot be evaluated by the core")
        out[column] = expr
    for column in identity_columns(target.metadata.schema):
        if column.name in out:  # "Identity Columns": values come from the table; Delta Spark refuses too
            raise IdentityColumnError(f"{target.where}: {column.name!r} is an identity column, which {what} "
                                      "cannot set", column=column.name)  # fmt: skip
    return out


def check_assigned_once(given: Mapping[str, Any], what: str) -> None:
    """A column set twice in one clause (names match case-insensitively, as Spark resolves them) is
    refused, as Delta Spark refuses it: which value wins would be arbitrary."""
    seen: dict[str, str] = {}
    for name in given:
        if name.lower() in seen:
            raise ValueError(f"{what} assigns column {name!r} twice ({seen[name.lower()]!r} and {name!r})")
        seen[name.lower()] = name


def new_rows(
    target: Target, rows: pa.Table, values: Mapping[str, Expr], scope: pa.Table, what: str
) -> pa.Table:
    """``rows`` (the table's columns, plus place and tracking) with ``values`` evaluated over ``scope``
    (the rows as the expressions see them: ``rows`` itself, or a MERGE's target and source), and the
    generated columns the assignment leaves out computed again from the new values, as Delta Spark's
    UPDATE and MERGE do ("Generated Columns")."""
    fields = {f["name"]: f for f in target.metadata.schema["fields"]}
    out = rows
    for name, expr in values.items():
        old = rows.column(name) if name in rows.column_names else None
        value = assigned(evaluate(expr, scope), fields[name], f"{what} of {target.where}", old,
                         evolving=target.schema_evolution)  # fmt: skip
        out = _replaced(out, name, value)
    for name, text in target.configuration.generated_columns.items():
        if name not in values:
            computed = evaluate(compile_expression(text, f"generated column {name}"), out)
            out = _replaced(out, name, assigned(computed, fields[name], f"{what} of {target.where}"))
    return out


def _replaced(rows: pa.Table, name: str, value: pa.ChunkedArray) -> pa.Table:
    if name in rows.column_names:
        return rows.set_column(rows.column_names.index(name), name, value)
    return rows.append_column(name, value)


def change_rows(target: Target, rows: pa.Table, kind: str) -> pa.Table:
    """Rows as change data: the table's columns and ``_change_type``. New rows should be given as the
    writer wrote them (``RowsWriter.write``), so that generated and identity values are there."""
    fields = {f["name"]: f for f in target.metadata.schema["fields"]}
    arrays = [rows.column(c) if c in rows.column_names else
              pa.nulls(rows.num_rows, logical_type(fields[c]["type"])) for c in target.columns]  # fmt: skip
    out = pa.table(arrays, names=list(target.columns))
    return out.append_column(CHANGE_TYPE, pa.repeat(string_scalar(kind), rows.num_rows))


def project(target: Target, rows: pa.Table) -> pa.Table:
    """Rows as the writer takes them: the table's columns it has, and tracking under the materialized
    column names (nulls for rows that get fresh ids and versions)."""
    out = rows.select([c for c in target.columns if c in rows.column_names])
    if target.kept:
        for tracked, name in zip((ROW_ID, ROW_VERSION), target.kept, strict=True):
            if tracked in rows.column_names:
                value = rows.column(tracked)
            else:
                value = pa.nulls(rows.num_rows, pa.int64())
            out = out.append_column(name, value)
    return out


class RowsWriter:
    """New data files of a row-level change, written under the table's configuration (``rewrite_plan``),
    every rule checked on every row; identity columns the rows leave out are generated (MERGE inserts)."""

    def __init__(self, target: Target, identity: Sequence[IdentityColumn] = (), threads: int | None = None
                 ) -> None:  # fmt: skip
        plan = rewrite_plan(target.configuration, target.where, hidden_columns=target.kept or ())
        if identity:
            plan = dataclasses.replace(plan, identity=tuple(identity))
        self.target = target
        self.identity = IdentityValues(identity) if identity else None
        size = target.configuration.target_file_size or DEFAULT_TARGET_FILE_SIZE
        self.files = PartitionedFiles(target.table.store, plan, size, self.identity, threads)
        self.rows = 0

    def write(self, rows: pa.Table) -> pa.Table:
        """Write ``rows``; the rows as written (the table's columns, generated and identity values filled
        in): what change data records of them."""
        if not rows.num_rows:
            return rows.select([c for c in self.target.columns if c in rows.column_names])
        self.rows += rows.num_rows
        return self.files.write(project(self.target, rows))

    def close(self) -> list[AddFile]:
        return self.files.close()

    def delete(self) -> None:
        self.files.delete()

    @property
    def high_water_marks(self) -> dict[str, int]:
        return dict(self.identity.high_water_marks) if self.identity is not None else {}


# A file rewritten per worker: reading, filtering and Parquet encoding release the GIL, so files rewritten
# side by side use every core (Delta Spark rewrites each touched file in a task of its own too).
REWRITE_WORKERS = max(2, min(8, os.cpu_count() or 1))


def rewrite_each(
    target: Target,
    files: pa.Table,
    rewrite: Callable[[pa.Table, RowsWriter], list[pa.Table]],
    workers: int = REWRITE_WORKERS,
) -> tuple[list[AddFile], list[pa.Table]]:
    """Rewrite ``files`` one by one, ``workers`` at a time: each file's live rows (``target_batches``) go
    to ``rewrite`` with a writer of that file's own, which writes what stays and returns change data. The
    adds of every new file and the change data; on any failure every file written is deleted."""
    writers: list[RowsWriter] = []
    lock = threading.Lock()

    def one(index: int) -> tuple[list[AddFile], list[pa.Table]]:
        writer = RowsWriter(target, threads=1)
        with lock:
            writers.append(writer)
        changed: list[pa.Table] = []
        for rows in target_batches(target, files.slice(index, 1), read_ahead=1):
            changed += rewrite(rows, writer)
        return writer.close(), changed

    try:
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="delta-rewrite") as pool:
            done = list(pool.map(one, range(files.num_rows)))
    except BaseException:
        for writer in writers:
            writer.delete()
        raise
    return [a for adds, _ in done for a in adds], [t for _, tables in done for t in tables]


def hit_mask(rows: pa.Table, hits: Mapping[str, Sequence[int]]) -> pa.ChunkedArray:
    """Which of ``rows`` (one file's, with ``PATH`` and ``INDEX``) are among the row indexes ``hits``
    found for their file: the first pass's answer, not the condition evaluated again."""
    if rows.num_rows == 0:
        return pa.chunked_array([pa.array([], pa.bool_())])
    found = hits.get(rows.column(PATH)[0].as_py(), ())
    return pc.is_in(rows.column(INDEX), value_set=from_numpy(np.asarray(found, np.int64)))

