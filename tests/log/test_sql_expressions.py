"""The Spark SQL subset table rules and filters use: parsed into one tree, evaluated over Arrow with Spark's
semantics (three-valued logic, IN with nulls, null-safe equality, integer division as doubles, ANSI errors),
and anything outside the subset refused by name. Agreement with Delta Spark on real CHECK constraints and
generated columns is in tests/oracle/test_arrow_rows_agree.py.
"""

from __future__ import annotations

import datetime as dt

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from airflow_provider_delta.log.expressions.evaluate import ExpressionEvaluationError, evaluate
from airflow_provider_delta.log.expressions.expressions import (
    Call,
    Column,
    ColumnNotFoundError,
    from_arrow,
    from_dnf,
)
from airflow_provider_delta.log.expressions.sql_parser import UnsupportedExpressionError, parse

ROWS = pa.table({
    "v": pa.array([0, 50, 101, None], pa.int32()),
    "s": ["a", "abcd", None, "é"],
    "part": ["lo", "hi", "hi", None],
    "ts": pa.array([dt.datetime(2024, 2, 29, 23, 59, 59), None, dt.datetime(2024, 3, 1),
                    dt.datetime(1999, 12, 31, 12)], pa.timestamp("us", "UTC")),
    "info": pa.array([{"x": 1}, {"x": None}, None, {"x": 4}], pa.struct([("x", pa.int64())])),
})  # fmt: skip

CASES = [
    ("v BETWEEN 0 AND 100", [True, True, False, None]),
    ("NOT v BETWEEN 0 AND 100", [False, False, True, None]),
    ("s IS NULL OR length(s) < 4", [True, False, True, True]),
    ("v < 50 OR part = 'hi'", [True, True, True, None]),
    ("v IN (0, 101)", [True, False, True, None]),
    ("v IN (0, NULL)", [True, None, None, None]),
    ("v NOT IN (0, 101)", [False, True, False, None]),
    ("v <=> NULL", [False, False, False, True]),
    ("v * 2", [0, 100, 202, None]),
    ("v / 2", [0.0, 25.0, 50.5, None]),
    ("v % 3", [0, 2, 2, None]),
    ("-v + 1", [1, -49, -100, None]),
    ("CAST(ts AS DATE)", [dt.date(2024, 2, 29), None, dt.date(2024, 3, 1), dt.date(1999, 12, 31)]),
    ("ts > DATE'2000-01-01'", [True, None, True, False]),
    ("ts >= '2024-03-01'", [False, None, True, False]),
    ("year(ts) = 2024 AND month(ts) = 2", [True, None, False, False]),
    ("part LIKE 'h%'", [False, True, True, None]),
    ("s NOT LIKE '_bc%'", [True, False, None, True]),
    ("coalesce(v, 7)", [0, 50, 101, 7]),
    (
        "CASE WHEN v > 10 THEN 'big' WHEN v IS NULL THEN 'none' ELSE 'small' END",
        ["small", "big", "big", "none"],
    ),
    ("upper(s) || '!'", ["A!", "ABCD!", None, "É!"]),
    ("substring(s, 2, 2)", ["", "bc", None, ""]),
    ("info.x > 2", [False, None, None, True]),
    ("`part` = 'lo' AND TRUE", [True, False, False, None]),
    ("if(v > 10, 1, 0)", [0, 1, 1, 0]),
    ("greatest(v, 60)", [60, 60, 101, 60]),
    ("abs(v - 60)", [60, 10, 41, None]),
    ("CAST('12' AS INT) + v", [12, 62, 113, None]),
    ("v IS DISTINCT FROM 50", [True, False, True, True]),
]


@pytest.mark.parametrize(("sql", "expected"), CASES, ids=[c[0] for c in CASES])
def test_spark_semantics(sql, expected):
    assert evaluate(parse(sql), ROWS).to_pylist() == expected


@pytest.mark.parametrize(
    ("sql", "construct"),
    [
        ("s RLIKE '^a'", "RLIKE"),
        ("date_format(ts, 'yyyy')", "date_format"),
        ("v IN (SELECT 1)", "subqueries"),
        ("ts + INTERVAL 1 DAY", "INTERVAL"),
        ("CAST(v AS ARRAY<INT>)", "CAST to ARRAY"),
        ("v DIV 2", "DIV"),
        ("CAST(ts AS STRING) = 'x'", "CAST of timestamp"),
    ],
)
def test_what_is_outside_the_subset_is_refused_by_name(sql, construct):
    with pytest.raises(UnsupportedExpressionError, match=construct):
        evaluate(parse(sql), ROWS)


def test_errors_spark_raises_are_raised():
    with pytest.raises(ExpressionEvaluationError, match="division by zero"):
        evaluate(parse("v / (v - 50)"), ROWS)
    with pytest.raises(ExpressionEvaluationError, match="overflow"):
        evaluate(parse("v * 2147483647"), ROWS)
    with pytest.raises(ColumnNotFoundError, match="'nope'"):
        evaluate(parse("nope = 1"), ROWS)


def test_filters_in_every_form_become_one_tree():
    expr = from_arrow((pc.field("v") > 3) & pc.field("part").isin(["hi"]) | ~pc.field("s").is_null())
    comparison, isin = expr.args[0].args
    assert comparison == Call(">", (Column(("v",)), comparison.args[1])) and comparison.args[1].value == 3
    assert isin.op == "in" and isin.args[0] == Column(("part",))
    assert [a.value for a in isin.args[1:]] == ["hi"]
    assert expr.args[1] == Call("not", (Call("is_null", (Column(("s",)),)),))
    assert evaluate(expr, ROWS).to_pylist() == [True, True, True, True]
    dnf = from_dnf([[("v", ">", 3), ("part", "in", ["hi"])], [("s", "!=", None)]])
    assert evaluate(dnf, ROWS).to_pylist() == [True, True, True, True]
    assert evaluate(parse("v > 3 AND part IN ('hi') OR s IS NOT NULL"), ROWS).to_pylist() == [True] * 4
