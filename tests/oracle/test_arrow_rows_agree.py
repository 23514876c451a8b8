"""Our Arrow writer against Delta Spark, live.

- Delta Spark reads what we write: tables our writer made (every partition type with nulls and escaped
  characters, column mapping, timestamp_ntz, schema merge (of a nested field too), structs given by field name
  in another order, replaceWhere, generated columns) read row for row
  by Delta Spark and by delta-rs; then Delta Spark goes on writing to them (INSERT, UPDATE, DELETE with
  deletion vectors) and we read its result.

Elsewhere: our Arrow *scan* reads every version of the seeded Delta Spark workloads in
``test_we_read_delta_spark.py`` (beside our Spark reader, on the same tables), and the writer's constraint
rules are checked against Delta Spark's verdicts in ``test_constraints_agree.py`` (beside the Spark writer's).
"""

from __future__ import annotations

import datetime as dt
import random
from decimal import Decimal

import deltalake
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from oracle_arrow import compare_rows_of, delta_spark_table, ours_or_error
from oracle_compare import Mismatches

from airflow_provider_delta.log import DeltaTable, write

EXPORT_CONF = {"spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS"}


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
    # A struct's fields in another order, in another case, one missing; then a new nested field merged.
    write(uri, pa.table({"k": pa.array([101], pa.int32()), "info": [{"y": "q", "x": 2}]}))
    write(uri, pa.table({"k": pa.array([102], pa.int32()), "info": [{"Y": "r"}]}))
    merged = pa.table({"k": pa.array([103], pa.int32()), "info": [{"z": True, "x": 3}]})
    write(uri, merged, schema_mode="merge")
    table = DeltaTable(uri)
    ours = table.to_pyarrow_table()
    everything = f"SELECT * FROM delta.`{uri}`"
    compare_rows_of(m, "Delta Spark reads ours", delta_spark_table(oracle, everything, tmp_path), ours)
    theirs = deltalake.QueryBuilder().register("t", deltalake.DeltaTable(uri)).execute("SELECT * FROM t")
    compare_rows_of(m, "delta-rs reads ours", pa.table(theirs).select(ours.column_names), ours)
    # Delta Spark goes on writing (with deletion vectors where enabled); we read what it made.
    for query in (
        f"INSERT INTO delta.`{uri}` (k, s, extra) VALUES (200, 'x y', 2.5), (201, NULL, NULL)",
        f"UPDATE delta.`{uri}` SET extra = 9.0 WHERE k % 4 = 0",
        f"DELETE FROM delta.`{uri}` WHERE k % 5 = 0",
    ):
        oracle.call("sql", query)
        after = ours_or_error(lambda: DeltaTable(uri).to_pyarrow_table())
        compare_rows_of(m, query.split()[0], delta_spark_table(oracle, everything, tmp_path), after)
    m.check()
