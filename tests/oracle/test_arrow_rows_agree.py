"""The Arrow scan and writer against Delta Spark, live: one Delta Spark session for the whole module.

- We read what Delta Spark writes: the randomised scenarios of ``oracle_scenarios`` (deletion vectors inline
  and on disk, column mapping by name and by id, type widening, timestamp_ntz, partitions with nulls and
  special characters, row tracking, identity and generated columns, checkpoints classic/multi-part/V2, log
  cleanup) are read by our scan at every version, whole, projected and filtered, and must equal Delta
  Spark's rows; on the row-tracking table, ``_metadata.row_id`` and ``row_commit_version`` too.
- Delta Spark reads what we write: tables our writer made (every partition type with nulls and escaped
  characters, column mapping, timestamp_ntz, schema merge, replaceWhere, generated columns) read row for row
  by Delta Spark and by delta-rs; then Delta Spark goes on writing to them (INSERT, UPDATE, DELETE with
  deletion vectors) and we read its result.
- Rules: seeded candidate rows inserted one by one with Delta Spark; our Arrow writer refuses each row Delta
  Spark refuses, naming the same rule, and writes the others (as tests/oracle/test_constraints_agree.py does
  for the Spark writer).

Our rows are compared in Spark's JSON of each row: we write them to a Parquet file that the oracle's Spark
turns into ``to_json(struct(*))``, the form ``server.rows`` gives Delta Spark's rows in.
"""

from __future__ import annotations

import datetime as dt
import os
import random
import uuid
from decimal import Decimal
from pathlib import Path
from typing import Any

import deltalake
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from oracle_client import OracleError
from oracle_compare import Mismatches
from oracle_scenarios import PROFILES, Scenario, seeds
from test_constraints_agree import CONSTRAINTS, _candidates, _create, _rule_named

from airflow_provider_delta.log import DeltaError, DeltaTable, write
from airflow_provider_delta.log.errors import ConstraintViolationError

EXPORT_CONF = {"spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS"}


def delta_spark_table(oracle, query: str, scratch: Path) -> pa.Table | None:
    """Delta Spark's rows of ``query`` as Arrow (written to Parquet by Spark, one job), or None when it
    fails."""
    folder = scratch / f"export-{uuid.uuid4().hex}"
    try:
        oracle.call("conf", EXPORT_CONF)
        oracle.call("sql", f"INSERT OVERWRITE DIRECTORY '{folder}' USING parquet {query}")
    except OracleError:
        return None
    files = sorted(folder.glob("*.parquet"))
    return pa.concat_tables([pq.read_table(f) for f in files]) if files else None


def _value(v: Any) -> Any:
    if isinstance(v, dt.datetime):
        return ("ts", v.timestamp()) if v.tzinfo else ("ntz", v.isoformat())
    if isinstance(v, Decimal):
        return ("dec", str(v.normalize()))
    if isinstance(v, dict):
        return tuple((k, _value(x)) for k, x in v.items())
    if isinstance(v, list):
        return tuple(_value(x) for x in v)
    return v


def rows_of(table: pa.Table) -> list[tuple]:
    """Order-free, type-width-free rows: what two readers of one version must agree on."""
    return sorted((tuple(_value(r[c]) for c in table.column_names) for r in table.to_pylist()), key=repr)


def _ours(fn):
    try:
        return fn()
    except DeltaError as exc:
        return exc


def _compare(m: Mismatches, where: str, theirs: pa.Table | list | None, ours) -> None:
    if isinstance(ours, Exception):
        if theirs is not None:
            m.add(f"{where}: Delta Spark reads it, our scan raises {type(ours).__name__}: {str(ours)[:300]}")
        return
    if theirs is None:
        if ours.num_rows:  # Spark writes no file for no rows: an empty result is "no table" here
            m.add(f"{where}: our scan reads {ours.num_rows} rows, Delta Spark fails or returns none")
        return
    expected = theirs if isinstance(theirs, list) else rows_of(theirs)
    if not isinstance(theirs, list) and theirs.column_names != ours.column_names:
        m.add(f"{where}: columns differ: Delta Spark {theirs.column_names}, ours {ours.column_names}")
        return
    mine = rows_of(ours)
    if mine != expected:
        m.add(
            f"{where}: {len(expected)} vs {len(mine)} rows; only Delta Spark "
            f"{[r for r in expected if r not in mine][:3]}; "
            f"only ours {[r for r in mine if r not in expected][:3]}"
        )


# Profiles 0 and 1 hold every reader feature (see the module docstring); DELTA_ORACLE_SEEDS runs others.
SEEDS = seeds() if os.environ.get("DELTA_ORACLE_SEEDS") else [0, 1]


@pytest.mark.parametrize("seed", SEEDS, ids=lambda s: f"seed{s}")
def test_our_scan_reads_every_version_delta_spark_writes(seed: int, oracle, tmp_path: Path) -> None:
    scenario = Scenario(seed, str(tmp_path / "table"))
    m = Mismatches(f"{scenario} (Arrow scan)")
    path, table = scenario.path, DeltaTable(scenario.path)
    compared: set[int] = set()

    def compare(v: int, where: str) -> None:
        theirs = delta_spark_table(oracle, f"SELECT * FROM delta.`{path}` VERSION AS OF {v}", tmp_path)
        _compare(m, f"{where} v{v}", theirs, _ours(lambda: table.scan(version=v).to_table()))
        # Projected and filtered: Delta Spark's rows of the version, filtered here (k is never null).
        rows = [] if theirs is None else theirs.select(["k", "v"]).to_pylist()
        expected = sorted(((r["k"], r["v"]) for r in rows if r["k"] % 3 == 1 or r["k"] > 7), key=repr)
        ours = _ours(lambda: table.scan(["k", "v"], "k % 3 = 1 OR k > 7", version=v).to_table())
        _compare(m, f"{where} v{v} filtered", None if theirs is None else expected, ours)
        compared.add(v)

    # Every version as it is made (VACUUM and log cleanup later take older ones away), then time travel
    # to every version still readable at the end.
    for step, op, _ in scenario.steps(oracle):
        compare(scenario.version, f"step {step} ({op})")
    readable = [v for v in range(max(scenario.floor, scenario.vacuumed), scenario.version + 1)]
    for v in [v for v in readable if v not in compared] + scenario.rng.sample(
        readable, min(2, len(readable))
    ):
        compare(v, "time travel")
    versions = len(compared)
    part = scenario._col("part")
    if scenario.shape.partitioned and part is not None:
        query = f"SELECT * FROM delta.`{path}` WHERE `{part.name}` IN ('a', 'x y') OR `{part.name}` IS NULL"
        arrow = table.scan(filter=[[(part.name, "in", ["a", "x y"])], [(part.name, "=", None)]])
        _compare(m, "partition filter", delta_spark_table(oracle, query, tmp_path), _ours(arrow.to_table))
    if scenario.shape.row_tracking:
        query = (
            f"SELECT k, _metadata.row_id AS row_id, _metadata.row_commit_version AS row_commit_version "
            f"FROM delta.`{path}`"
        )
        scan = table.scan(["k"], metadata=["row_id", "row_commit_version"]).to_table()
        meta = scan["_metadata"].combine_chunks()
        flat = pa.table(
            {
                "k": scan["k"],
                "row_id": meta.field("row_id"),
                "row_commit_version": meta.field("row_commit_version"),
            }
        )
        _compare(m, "row tracking", delta_spark_table(oracle, query, tmp_path), flat)
    print(
        f"seed {seed} (profile {seed % len(PROFILES)}): {versions} versions compared, "
        f"{len(m.found)} mismatch(es)"
    )
    if m.found:
        print("\n".join(scenario.log))
    m.check()


def _our_table(rng: random.Random, n: int) -> pa.Table:
    strings = ["a", "x y", "p=q", "é%", "a/b", "#{}", None]
    pick = lambda values: [rng.choice(values) for _ in range(n)]  # noqa: E731
    return pa.table(
        {
            "k": pa.array(range(n), pa.int32()),
            "s": pick(strings),
            "d": pa.array(pick([dt.date(2024, 1, 1), dt.date(1999, 12, 31), None]), pa.date32()),
            "ts": pa.array(
                pick([dt.datetime(2024, 1, 1, 12, 30, 0, 123456, tzinfo=dt.UTC), None]),
                pa.timestamp("us", "UTC"),
            ),
            "ntz": pa.array(pick([dt.datetime(2024, 2, 29, 23, 59, 59), None]), pa.timestamp("us")),
            "amt": pa.array(pick([Decimal("12.34"), Decimal("-0.5"), None]), pa.decimal128(10, 2)),
            "info": pa.array(
                pick([{"x": 1, "y": "p"}, None]), pa.struct([("x", pa.int64()), ("y", pa.string())])
            ),
            "tags": pa.array(pick([["a", "b"], [], None]), pa.list_(pa.string())),
        }
    )


@pytest.mark.parametrize("layout", ["partitioned", "column-mapping"])
def test_delta_spark_and_delta_rs_read_what_we_write_and_delta_spark_goes_on(layout, oracle, tmp_path):
    rng = random.Random(31)
    print(f"seed 31, {layout}")
    uri = str(tmp_path / layout)
    m = Mismatches(f"tables we write ({layout})")
    data = _our_table(rng, 40)
    if layout == "partitioned":
        # Two partition columns: strings Spark escapes in folder names, dates, nulls.
        write(uri, data, partition_by=["s", "d"])
        replacing = data.filter(pc.fill_null(pc.equal(data["s"], "a"), True)).slice(0, 5)
        write(uri, replacing, mode="overwrite", replace_where="s = 'a' OR s IS NULL")
    else:
        write(
            uri,
            data,
            partition_by=["s"],
            configuration={"delta.columnMapping.mode": "name", "delta.enableDeletionVectors": "true"},
        )
    write(
        uri, pa.table({"k": pa.array([100], pa.int32()), "s": ["new"], "extra": [1.5]}), schema_mode="merge"
    )
    table = DeltaTable(uri)
    ours = table.to_pyarrow_table()
    everything = f"SELECT * FROM delta.`{uri}`"
    _compare(m, "Delta Spark reads ours", delta_spark_table(oracle, everything, tmp_path), ours)
    theirs = deltalake.QueryBuilder().register("t", deltalake.DeltaTable(uri)).execute("SELECT * FROM t")
    _compare(m, "delta-rs reads ours", pa.table(theirs).select(ours.column_names), ours)
    # Delta Spark goes on writing (with deletion vectors where enabled); we read what it made.
    for query in (
        f"INSERT INTO delta.`{uri}` (k, s, extra) VALUES (200, 'x y', 2.5), (201, NULL, NULL)",
        f"UPDATE delta.`{uri}` SET extra = 9.0 WHERE k % 4 = 0",
        f"DELETE FROM delta.`{uri}` WHERE k % 5 = 0",
    ):
        oracle.call("sql", query)
        after = _ours(lambda: DeltaTable(uri).to_pyarrow_table())
        _compare(m, query.split()[0], delta_spark_table(oracle, everything, tmp_path), after)
    m.check()


@pytest.mark.parametrize("seed", [11])
def test_our_arrow_writer_rejects_exactly_what_delta_spark_rejects(seed, oracle, tmp_path):
    rng = random.Random(seed)
    print(f"seed {seed}")
    m = Mismatches(f"Arrow writer constraints, seed {seed}")
    theirs, ours = str(tmp_path / "delta"), str(tmp_path / "ours")
    _create(oracle, theirs)
    _create(oracle, ours)
    rows = _candidates(rng, 32)
    inserts = [
        f"INSERT INTO delta.`{theirs}` ({', '.join(r)}) VALUES ({', '.join(r.values())})" for r in rows
    ]
    verdicts = oracle.call("sql_each", inserts, "row")
    typed = {
        "id": pa.int32(),
        "v": pa.int32(),
        "s": pa.string(),
        "ts": pa.timestamp("us", "UTC"),
        "g": pa.int32(),
        "day": pa.date32(),
        "part": pa.string(),
    }
    accepted: dict[tuple[str, ...], list[dict]] = {}
    for row, verdict in zip(rows, verdicts, strict=True):
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
            write(ours, pa.Table.from_pylist([values], pa.schema([(c, typed[c]) for c in values])))
            m.add(f"Delta Spark rejects {row} ({named}); our Arrow writer wrote it")
        except ConstraintViolationError as exc:
            if named not in exc.violations:
                m.add(f"{row}: Delta Spark names {named}; ours {sorted(exc.violations)}")
        if DeltaTable(ours).version() != before:
            m.add(f"{row}: a refused write committed")
    for group in accepted.values():
        write(ours, pa.Table.from_pylist(group, pa.schema([(c, typed[c]) for c in group[0]])))
    m.diff("final tables", "rows", oracle.call("rows", theirs), oracle.call("rows", ours))
    print(
        f"{len(rows)} rows, {sum(not v['ok'] for v in verdicts)} rejected by Delta Spark, "
        f"{len(m.found)} mismatch(es); constraints {sorted(CONSTRAINTS)}"
    )
    m.check()


def _python_row(row: dict[str, str]) -> dict:
    """A candidate row's SQL literals as Python values."""
    out = {}
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
