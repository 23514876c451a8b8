"""What a MERGE reads of the target: the files whose statistics admit the source's range of merge keys,
only the columns its join needs, and a join Spark does not broadcast the target into.

A target row can only be matched on ``target.k = source.s`` if ``k`` lies between the smallest and largest
``s`` of the source (``=`` never matches NULL), so files whose ``k`` bounds fall outside that range hold
no matched row (Delta Spark reaches the same files with dynamic file pruning). This only holds when no
clause acts on target rows the source does not match (``WHEN NOT MATCHED BY SOURCE`` needs every row), and
only for keys of the same type on both sides (a comparison with an implicit cast could match values the
range would exclude), so anything else reads every live file.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from airflow_provider_delta.log.expressions.expressions import Call, Column, Expr, conjunction, literal
from airflow_provider_delta.log.expressions.sql_parser import UnsupportedExpressionError, parse
from airflow_provider_delta.log.row_changes.merge_clauses import target_only_condition
from airflow_provider_delta.log.scans.scan import Scan

from .merge_evolution import named_assignments
from .row_changes import referenced
from .schema import spark_schema_of

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from .merge_clause import Clause
    from .target import Target

_INFLATION = 4  # rows in memory take several times their compressed Parquet bytes
_RANGED = ("ByteType", "ShortType", "IntegerType", "LongType", "StringType", "DateType", "DecimalType")


def merge_files(target: Target, source: DataFrame, on: str | None, t_alias: str, s_alias: str,
                every_row: bool) -> pa.Table:  # fmt: skip
    """The live files the MERGE reads: pruned by the source's key ranges where that is sound."""
    files = target.snap.files
    if every_row or on is None or files.num_rows == 0:
        return files
    try:
        expr = parse(on)
    except UnsupportedExpressionError:
        return files
    keys = _same_typed(target, source, list(_equi_keys(expr, t_alias.lower(), s_alias.lower())))
    # The ON condition's target-only terms (``target.p = 'b'``) rule files out whatever the source holds.
    only = target_only_condition(on, t_alias)
    terms: list[Expr] = [only] if only is not None else []
    if not keys:
        return Scan(target.snap, filter=only).files if only is not None else files
    from pyspark.sql import functions as F

    bounds = source.agg(*[f(F.col(f"`{s}`")) for _, s in keys for f in (F.min, F.max)]).first()
    for i, (t, _) in enumerate(keys):
        low, high = bounds[2 * i], bounds[2 * i + 1]
        if low is None:  # only NULL keys in the source: nothing matches on this key
            return files.slice(0, 0)
        terms += [Call(">=", (Column((t,)), literal(low))), Call("<=", (Column((t,)), literal(high)))]
    return Scan(target.snap, filter=conjunction(terms)).files


def _equi_keys(expr: Expr, t_alias: str, s_alias: str) -> Iterator[tuple[str, str]]:
    """(target column, source column) of each ``target.a = source.b`` conjunct of the merge condition."""
    if isinstance(expr, Call) and expr.op == "and":
        for arg in expr.args:
            yield from _equi_keys(arg, t_alias, s_alias)
        return
    if not (isinstance(expr, Call) and expr.op == "=" and all(isinstance(a, Column) for a in expr.args)):
        return
    a, b = expr.args
    assert isinstance(a, Column) and isinstance(b, Column)
    if len(a.path) == 2 and a.path[0].lower() == s_alias:
        a, b = b, a
    if len(a.path) == 2 == len(b.path) and a.path[0].lower() == t_alias and b.path[0].lower() == s_alias:
        yield a.path[1], b.path[1]


def _same_typed(target: Target, source: DataFrame, keys: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """The keys whose target and source columns exist with one type that has an order skipping uses."""
    target_types = {f.name.lower(): f.dataType for f in spark_schema_of(target.snap.metadata.schema).fields}
    source_types = {f.name.lower(): f.dataType for f in source.schema.fields}
    out = []
    for t, s in keys:
        t_type, s_type = target_types.get(t.lower()), source_types.get(s.lower())
        if t_type is not None and t_type == s_type and type(t_type).__name__ in _RANGED:
            out.append((t, s))
    return out


def join_columns(target: Target, on: Any, clauses: list[Clause], source_columns: list[str], s_alias: str,
                 merge_schema: bool) -> list[str] | None:  # fmt: skip
    """The table columns the MERGE's join must read (None: all of them): those its condition, clause
    conditions and values name, and those an update clause leaves as they are or assigns a struct to (the
    fields the source's struct lacks keep their values). Spark cannot prune the
    columns of our ``mapInArrow`` read, and reading every column of every candidate row costs most of a
    MERGE; a copy-on-write MERGE reads the touched files whole again to copy them. Names are found as SQL
    identifiers in the text (a word that only looks like a column reads one column too many, never too
    few); Columns rather than text, and change data (the preimage of every column), read everything."""
    values = [v for c in clauses for v in (c.assignments or {}).values()]
    named = referenced(target.columns, [on, *[c.condition for c in clauses], *values])
    if target.change_data or named is None:
        return None
    source_by_lower = {c.lower(): c for c in source_columns}
    # A struct an update assigns keeps the fields the source's struct lacks (``merge_structs``).
    nested = {f["name"] for f in target.metadata.schema["fields"] if isinstance(f["type"], dict)}
    kept: set[str] = set()
    for clause in clauses:
        if clause.action == "update":
            assigned = named_assignments(target, clause, source_by_lower, s_alias, merge_schema)
            kept.update(c for c in target.columns if c not in assigned or c in nested)
    return [c for c in target.columns if c in named or c in kept]


def semi_joined(spark: Any, rows: DataFrame, source: DataFrame, on: Any, t_alias: str) -> DataFrame:
    """The target rows some source row matches, when the source is small enough to broadcast (else
    ``rows``): a MERGE without a NOT MATCHED BY SOURCE clause never acts on the others, and the outer join
    that follows then shuffles only these instead of every row of the candidate files (Delta Spark finds
    its touched files with such a join first)."""
    from pyspark.sql import functions as F

    try:  # Spark's own estimate of the source (classic sessions; Spark Connect has no JVM handle)
        size = int(str(source._jdf.queryExecution().optimizedPlan().stats().sizeInBytes()))
    except Exception:
        return rows
    limit = byte_size(spark.conf.get("spark.sql.autoBroadcastJoinThreshold", None) or "10MB")
    if not 0 <= size <= limit:
        return rows
    return rows.join(F.broadcast(source), on, "left_semi").alias(t_alias)


def not_broadcast(spark: Any, rows: DataFrame, files: Any) -> DataFrame:
    """The target's rows, hinted to a sort-merge join when their files are too big to broadcast.

    Spark sizes the target from the plan that reads it (``mapInArrow`` over the small list of files), so it
    takes even a table of millions of rows for a small one and broadcasts it, which runs the driver out of
    memory; the files' sizes are what it would broadcast."""
    limit = byte_size(spark.conf.get("spark.sql.autoBroadcastJoinThreshold", None) or "10MB")
    size = int(sum(files.column("size").to_pylist())) if files.num_rows else 0
    return rows if 0 <= size * _INFLATION <= limit else rows.hint("merge")


def byte_size(text: str) -> int:
    """Spark's byte-size setting (``10485760``, ``10MB``, ``-1``) as bytes."""
    match = re.fullmatch(r"\s*(-?\d+)\s*([kmgtp]?)i?b?\s*", text.lower())
    if match is None:
        return -1
    number, unit = int(match[1]), match[2]
    return number * 1024 ** ("kmgtp".index(unit) + 1) if unit else number
