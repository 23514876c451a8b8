"""Which target files a MERGE must read: those whose statistics admit the source's range of merge keys.

A target row can only be matched on ``target.k = source.s`` if ``k`` lies between the smallest and largest
``s`` of the source (``=`` never matches NULL), so files whose ``k`` bounds fall outside that range hold
no matched row (Delta Spark reaches the same files with dynamic file pruning). This only holds when no
clause acts on target rows the source does not match (``WHEN NOT MATCHED BY SOURCE`` needs every row), and
only for keys of the same type on both sides (a comparison with an implicit cast could match values the
range would exclude), so anything else reads every live file.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import pyarrow as pa

from airflow_provider_delta.log.expressions import Call, Column, Expr, conjunction, literal
from airflow_provider_delta.log.scan import Scan
from airflow_provider_delta.log.sql_parser import UnsupportedExpressionError, parse

from .schema import spark_schema_of

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from .row_changes import Target

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
    if not keys:
        return files
    from pyspark.sql import functions as F

    bounds = source.agg(*[f(F.col(f"`{s}`")) for _, s in keys for f in (F.min, F.max)]).first()
    terms: list[Expr] = []
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
