"""Our Spark writer and reader on identity, row-tracking and variant tables (our own Spark only; Delta
Spark reads and writes the same tables in tests/oracle/test_features_agree.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest

from airflow_provider_delta.log import DeltaTable, UnsupportedFeatureError
from airflow_provider_delta.log.base.errors import IdentityColumnError
from airflow_provider_delta.log.features.identity import identity_columns
from airflow_provider_delta.spark import read, write


def identity_schema(explicit: bool = False) -> pa.Schema:
    md = {"delta.identity.start": "100", "delta.identity.step": "-2",
          "delta.identity.allowExplicitInsert": json.dumps(explicit)}  # fmt: skip
    return pa.schema([pa.field("id", pa.int64(), metadata=md), ("k", pa.int32())])


def test_identity_values_are_generated_unique_and_the_mark_moves(spark, tmp_path: Path):
    uri = str(tmp_path / "t")
    t = DeltaTable.create(uri, identity_schema(), configuration={"delta.enableRowTracking": "true"})
    for batch in (range(0, 7), range(7, 10)):
        write(spark.createDataFrame([(i,) for i in batch], "k int").repartition(3), uri)
    rows = read(spark, uri).collect()
    ids = sorted(r["id"] for r in rows)
    assert len(set(ids)) == 10 and all(v <= 100 and (100 - v) % 2 == 0 for v in ids)
    mark = identity_columns(t.snapshot().metadata.schema)[0].high_water_mark
    assert mark == min(ids)  # negative step: the mark is the smallest value handed out
    with pytest.raises(IdentityColumnError, match="GENERATED ALWAYS"):
        write(spark.createDataFrame([(1, 1)], "id long, k int"), uri)
    assert t.version() == 2


def test_explicit_identity_values_where_allowed(spark, tmp_path: Path):
    uri = str(tmp_path / "t")
    t = DeltaTable.create(uri, identity_schema(explicit=True))
    write(spark.createDataFrame([(5, 1)], "id long, k int"), uri)
    write(spark.createDataFrame([(2,)], "k int"), uri)
    (explicit, _), (generated, _) = sorted((r["id"], r["k"]) for r in read(spark, uri).collect())
    assert explicit == 5 and generated in (100, 98)  # the start, or one step on: partitions interleave
    # Only the generated value moved the mark; the explicit 5 did not.
    assert identity_columns(t.snapshot().metadata.schema)[0].high_water_mark == generated


def test_row_ids_and_commit_versions_through_the_reader(spark, tmp_path: Path):
    uri = str(tmp_path / "t")
    tracked = {"delta.enableRowTracking": "true"}
    t = DeltaTable.create(uri, pa.schema([("k", pa.int32())]), configuration=tracked)
    write(spark.createDataFrame([(i,) for i in range(4)], "k int").coalesce(1), uri)
    write(spark.createDataFrame([(i,) for i in range(4, 6)], "k int").coalesce(1), uri)
    df = read(spark, uri, metadata=["row_id", "row_commit_version", "row_index"])
    got = sorted((r["k"], r["_metadata"]["row_id"], r["_metadata"]["row_commit_version"])
                 for r in df.collect())  # fmt: skip
    assert got == [(0, 0, 1), (1, 1, 1), (2, 2, 1), (3, 3, 1), (4, 4, 2), (5, 5, 2)]
    plain = DeltaTable.create(str(tmp_path / "plain"), pa.schema([("k", pa.int32())]))
    with pytest.raises(UnsupportedFeatureError, match="does not enable row tracking"):
        read(spark, plain.uri, metadata=["row_id"])
    assert t.version() == 2


def test_variant_round_trip(spark, tmp_path: Path):
    uri = str(tmp_path / "t")
    df = spark.sql("""SELECT id AS k, parse_json(format_string('{"a":%d,"b":[1,"x",null],"c":{"d":1.5}}', id))
                      AS v FROM range(3) UNION ALL SELECT 9, CAST(NULL AS VARIANT)""")
    write(df, uri)
    snap = DeltaTable(uri).snapshot()
    assert "variantType" in snap.protocol.reader_features
    back = read(spark, uri).selectExpr("k", "to_json(v) AS j").orderBy("k").collect()
    assert [(r["k"], r["j"]) for r in back] == [
        *[(i, f'{{"a":{i},"b":[1,"x",null],"c":{{"d":1.5}}}}') for i in range(3)], (9, None)]
    stats = [json.loads(s) for s in snap.files.column("stats").to_pylist()]
    assert sum(s["nullCount"]["v"] for s in stats) == 1
    assert all("v" not in s["minValues"] and "v" not in s["maxValues"] for s in stats)
