"""Our Arrow scan against Delta Spark's rows: Delta Spark exports a query's rows to Parquet (one job) and
both sides are compared as order-free, type-width-free rows.

Shared by the scenario test (``test_we_read_delta_spark``: every version of every seeded workload, read by
our scan too) and the tests of our Arrow writer (``test_arrow_rows_agree``).
"""

from __future__ import annotations

import datetime as dt
import uuid
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from oracle_client import OracleError
from oracle_compare import Mismatches
from oracle_scenarios import Scenario

from airflow_provider_delta.log import DeltaError, DeltaTable

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


def ours_or_error(fn):
    try:
        return fn()
    except DeltaError as exc:
        return exc


def compare_rows_of(m: Mismatches, where: str, theirs: pa.Table | list | None, ours) -> None:
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


def compare_scan(m: Mismatches, oracle, path: str, v: int, where: str, scratch: Path) -> None:
    """Version ``v`` read by our scan whole, then projected and filtered, against Delta Spark's rows."""
    table = DeltaTable(path)
    theirs = delta_spark_table(oracle, f"SELECT * FROM delta.`{path}` VERSION AS OF {v}", scratch)
    whole = ours_or_error(lambda: table.scan(version=v).to_table())
    compare_rows_of(m, f"{where} v{v} (Arrow scan)", theirs, whole)
    # Projected and filtered: Delta Spark's rows of the version, filtered here (k is never null).
    rows = [] if theirs is None else theirs.select(["k", "v"]).to_pylist()
    expected = sorted(((r["k"], r["v"]) for r in rows if r["k"] % 3 == 1 or r["k"] > 7), key=repr)
    ours = ours_or_error(lambda: table.scan(["k", "v"], "k % 3 = 1 OR k > 7", version=v).to_table())
    compare_rows_of(m, f"{where} v{v} (Arrow scan, filtered)", None if theirs is None else expected, ours)


def compare_scan_extras(m: Mismatches, oracle, scenario: Scenario, scratch: Path) -> None:
    """The latest version through a partition filter (DNF with a null), and ``_metadata`` row ids on a
    row-tracking table, read by our scan against Delta Spark."""
    path, table = scenario.path, DeltaTable(scenario.path)
    part = scenario._col("part")
    if scenario.shape.partitioned and part is not None:
        query = f"SELECT * FROM delta.`{path}` WHERE `{part.name}` IN ('a', 'x y') OR `{part.name}` IS NULL"
        arrow = table.scan(filter=[[(part.name, "in", ["a", "x y"])], [(part.name, "=", None)]])
        compare_rows_of(m, "partition filter (Arrow scan)", delta_spark_table(oracle, query, scratch),
                        ours_or_error(arrow.to_table))  # fmt: skip
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
        compare_rows_of(m, "row tracking (Arrow scan)", delta_spark_table(oracle, query, scratch), flat)
