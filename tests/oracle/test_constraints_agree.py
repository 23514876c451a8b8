"""CHECK constraints, NOT NULL and generated columns defined through Delta Spark: our Spark writer and our
Arrow writer reject exactly the rows Delta Spark rejects, and compute the generated values Delta Spark
computes.

Seeded candidate rows (nulls, boundaries, wrong generated values) are inserted one by one with Delta Spark,
which accepts or rejects each (once for the module: the verdicts are the costly part); each of our writers
must then refuse each rejected row on its own, naming the rule Delta Spark named, and write all the
accepted rows in one go. Both tables then hold the same rows.
"""

from __future__ import annotations

import datetime as dt
import random
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pytest
from oracle_compare import Mismatches, compare_step

from airflow_provider_delta.log import DeltaTable
from airflow_provider_delta.log import write as write_rows
from airflow_provider_delta.spark import ConstraintViolationError, write

DDL = """(id INT NOT NULL, v INT, s STRING, ts TIMESTAMP,
          g INT GENERATED ALWAYS AS (v * 2),
          day DATE GENERATED ALWAYS AS (CAST(ts AS DATE)),
          part STRING) USING delta PARTITIONED BY (part)"""
CONSTRAINTS = {
    "v_range": "v BETWEEN 0 AND 100",
    "short_s": "s IS NULL OR length(s) < 4",
    "hi_only_big": "v < 50 OR part = 'hi'",
}
SPARK_DDL = "id int, v int, s string, ts timestamp, g int, day date, part string"


def _create(oracle, uri: str) -> None:
    oracle.call("sql", f"CREATE TABLE delta.`{uri}` {DDL}")
    for name, expr in CONSTRAINTS.items():
        oracle.call("sql", f"ALTER TABLE delta.`{uri}` ADD CONSTRAINT {name} CHECK ({expr})")


def _candidates(rng: random.Random, n: int) -> list[dict]:
    """Rows as SQL literals per column: about half valid (boundaries included), the others broken in one
    way each. Without ``g``/``day`` Delta Spark and we compute them; with them, they are checked."""
    rows = []
    for i in range(n):
        v = rng.choice([0, 1, 25, 49])
        ts = rng.choice([None, "2024-02-29 23:59:59", "2024-03-01 00:00:00", "1999-12-31 12:00:00"])
        part = rng.choice(["'lo'", "'hi'", "NULL"])
        if part == "'hi'" and rng.random() < 0.5:
            v = rng.choice([50, 99, 100])  # only partition hi may hold v >= 50
        row = {"id": str(i), "v": str(v), "s": rng.choice(["NULL", "'a'", "'abc'", "''", "'é'"]),
               "ts": "NULL" if ts is None else f"TIMESTAMP'{ts}'", "part": part}  # fmt: skip
        explicit = rng.random() < 0.5
        if explicit:
            row["g"] = str(v * 2)
            row["day"] = "NULL" if ts is None else f"DATE'{ts[:10]}'"
        if rng.random() < 0.5:
            broken = rng.choice(["v null", "v low", "v high", "v big in lo", "s long", "id null"]
                                + ["g wrong", "g null", "day wrong"] * explicit)  # fmt: skip
            row.update({
                "v null": {"v": "NULL"},
                "v low": {"v": "-1"},
                "v high": {"v": "101", "part": "'hi'"},
                "v big in lo": {"v": "60", "part": "'lo'"},
                "s long": {"s": "'abcd'"},
                "id null": {"id": "NULL"},
                "g wrong": {"g": str(v * 2 + 1)},
                "g null": {"g": "NULL"},
                "day wrong": {"day": "DATE'2000-01-01'"},
            }[broken])  # fmt: skip
            if explicit and broken.startswith("v"):  # the generated value follows v: one rule broken
                row["g"] = "NULL" if row["v"] == "NULL" else str(int(row["v"]) * 2)
        rows.append(row)
    return rows


def _rule_named(message: str) -> str | None:
    """The rule a Delta Spark violation names, in our writer's words (``ConstraintViolationError``)."""
    for name in CONSTRAINTS:
        if f"CHECK constraint {name} " in message:
            return f"CHECK constraint {name}"
    if "NOT NULL constraint violated for column: id" in message:
        return "NOT NULL id"
    for col in ("g", "day"):
        if f"Generated Column ({col} <=>" in message or f"generated column {col}" in message.lower():
            return f"generated column {col}"
    return None


SEED = 11


@dataclass
class Verdicts:
    """Delta Spark's table after the candidate inserts, the candidates, and each insert's outcome."""

    theirs: str
    rows: list[dict[str, str]]
    outcomes: list[dict[str, Any]]


@pytest.fixture(scope="module")
def verdicts(oracle, tmp_path_factory: pytest.TempPathFactory) -> Verdicts:
    print(f"seed {SEED}")
    theirs = str(tmp_path_factory.mktemp("constraints") / "delta")
    _create(oracle, theirs)
    rows = _candidates(random.Random(SEED), 32)
    inserts = [
        f"INSERT INTO delta.`{theirs}` ({', '.join(r)}) VALUES ({', '.join(r.values())})" for r in rows
    ]
    return Verdicts(theirs, rows, oracle.call("sql_each", inserts, "row"))


def test_our_writer_rejects_exactly_what_delta_spark_rejects(verdicts, oracle, spark, tmp_path):
    m = Mismatches(f"constraints, seed {SEED}")
    ours = str(tmp_path / "ours")
    _create(oracle, ours)
    accepted: dict[tuple[str, ...], list[str]] = {}
    for row, verdict in zip(verdicts.rows, verdicts.outcomes, strict=True):
        select = "SELECT " + ", ".join(f"{value} AS {col}" for col, value in row.items())
        if verdict["ok"]:
            accepted.setdefault(tuple(row), []).append(select)
            continue
        named = _rule_named(verdict["message"])
        if named is None:
            m.add(f"Delta Spark rejected {row} for an unexpected reason: {verdict['message']}")
            continue
        try:
            write(_typed(spark, select), ours)
            m.add(f"Delta Spark rejects {row} ({named}); our writer wrote it")
        except ConstraintViolationError as exc:
            if named not in exc.violations:
                m.add(f"{row}: Delta Spark names {named}; ours {sorted(exc.violations)}")
    for selects in accepted.values():  # one write per column set (with or without generated columns)
        write(_typed(spark, " UNION ALL ".join(selects)), ours)
    m.diff("final tables", "rows", oracle.call("rows", verdicts.theirs), oracle.call("rows", ours))
    compare_step(m, oracle, spark, ours, oracle.call("snapshot", ours)["version"], "our writes")
    rejected = sum(not v["ok"] for v in verdicts.outcomes)
    print(f"constraints: {len(verdicts.rows)} rows, {rejected} rejected by Delta Spark, {len(m.found)} "
          "mismatch(es)")  # fmt: skip
    m.check()


ARROW_TYPES = {
    "id": pa.int32(),
    "v": pa.int32(),
    "s": pa.string(),
    "ts": pa.timestamp("us", "UTC"),
    "g": pa.int32(),
    "day": pa.date32(),
    "part": pa.string(),
}


def _arrow(rows: list[dict]) -> pa.Table:
    return pa.Table.from_pylist(rows, pa.schema([(c, ARROW_TYPES[c]) for c in rows[0]]))


def test_our_arrow_writer_rejects_exactly_what_delta_spark_rejects(verdicts, oracle, tmp_path):
    m = Mismatches(f"Arrow writer constraints, seed {SEED}")
    ours = str(tmp_path / "ours")
    _create(oracle, ours)
    accepted: dict[tuple[str, ...], list[dict]] = {}
    for row, verdict in zip(verdicts.rows, verdicts.outcomes, strict=True):
        values = _python_row(row)
        if verdict["ok"]:
            accepted.setdefault(tuple(row), []).append(values)
            continue
        named = _rule_named(verdict["message"])
        if named is None:
            m.add(f"Delta Spark rejected {row} for an unexpected reason: {verdict['message'][:200]}")
            continue
        before = DeltaTable(ours).version()
        try:
            write_rows(ours, _arrow([values]))
            m.add(f"Delta Spark rejects {row} ({named}); our Arrow writer wrote it")
        except ConstraintViolationError as exc:
            if named not in exc.violations:
                m.add(f"{row}: Delta Spark names {named}; ours {sorted(exc.violations)}")
        if DeltaTable(ours).version() != before:
            m.add(f"{row}: a refused write committed")
    for group in accepted.values():
        write_rows(ours, _arrow(group))
    m.diff("final tables", "rows", oracle.call("rows", verdicts.theirs), oracle.call("rows", ours))
    m.check()


def _python_row(row: dict[str, str]) -> dict:
    """A candidate row's SQL literals as Python values."""
    out: dict[str, Any] = {}
    for col, text in row.items():
        if text == "NULL":
            out[col] = None
        elif text.startswith("TIMESTAMP'"):
            out[col] = dt.datetime.fromisoformat(text[10:-1]).replace(tzinfo=dt.UTC)
        elif text.startswith("DATE'"):
            out[col] = dt.date.fromisoformat(text[5:-1])
        elif text.startswith("'"):
            out[col] = text[1:-1]
        else:
            out[col] = int(text)
    return out


def _typed(spark, select: str):
    """The rows of ``select`` with the table's types (nulls typed), only the columns it names."""
    df = spark.sql(select)
    types = dict(col.split(" ") for col in SPARK_DDL.split(", "))
    return df.selectExpr(*[f"CAST({c} AS {types[c]}) AS {c}" for c in df.columns])


def test_a_struct_fields_not_null_is_checked_as_delta_spark_checks_it(oracle, spark, tmp_path):
    """NOT NULL on a struct's field: Delta Spark reads it through the struct, so a null struct breaks it
    too (delta-io/delta#860). Both our writers must accept and refuse the rows it accepts and refuses."""
    m = Mismatches("nested NOT NULL")
    ddl = "(id INT, s STRUCT<a: INT NOT NULL, b: STRING>) USING delta"
    candidates = {"valid": (1, {"a": 1, "b": "x"}), "field null": (2, {"a": None, "b": "y"}),
                  "struct null": (3, None)}  # fmt: skip
    theirs = str(tmp_path / "theirs")
    oracle.call("sql", f"CREATE TABLE delta.`{theirs}` {ddl}")
    literal = {"valid": "named_struct('a', 1, 'b', 'x')", "field null": "named_struct('a', NULL, 'b', 'y')",
               "struct null": "NULL"}  # fmt: skip
    inserts = [f"INSERT INTO delta.`{theirs}` VALUES ({candidates[k][0]}, {literal[k]})" for k in candidates]
    outcomes = dict(zip(candidates, oracle.call("sql_each", inserts, "row"), strict=True))
    kind = pa.struct([pa.field("a", pa.int32()), pa.field("b", pa.string())])
    for writer in ("spark", "arrow"):
        ours = str(tmp_path / writer)
        oracle.call("sql", f"CREATE TABLE delta.`{ours}` {ddl}")
        for name, (i, s) in candidates.items():
            data = pa.table({"id": pa.array([i], pa.int32()), "s": pa.array([s], kind)})
            try:
                if writer == "spark":
                    write(spark.createDataFrame([(i, s)], "id int, s struct<a:int,b:string>"), ours)
                else:
                    write_rows(ours, data)
                wrote = True
            except ConstraintViolationError as exc:
                wrote = False
                if "NOT NULL s.a" not in exc.violations:
                    m.add(f"{writer} writer, {name}: refused for {sorted(exc.violations)}")
            if wrote != outcomes[name]["ok"]:
                verdict = "accepts" if outcomes[name]["ok"] else "rejects"
                done = "wrote" if wrote else "refused"
                m.add(f"{writer} writer, {name}: Delta Spark {verdict} it, ours {done} it")
        m.diff(f"{writer} writer's table", "rows", oracle.call("rows", theirs), oracle.call("rows", ours))
    m.check()
