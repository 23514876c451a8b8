"""``spark.read_changes``: executors read a range's changes as the core's Arrow change read does (appends,
deletes by deletion vector, a whole file removed, an UPDATE with change data), row for row."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from airflow_provider_delta.log import DeltaTable
from airflow_provider_delta.log.base.errors import ChangeRangeError, IncompatibleSchemaChangeError
from airflow_provider_delta.spark import read_changes

CDF = {"delta.enableChangeDataFeed": "true", "delta.enableDeletionVectors": "true"}
SCHEMA = pa.schema([("id", pa.int64()), ("s", pa.string()), ("p", pa.string())])


def _rows(ids, p="a", s=None):
    return pa.table({"id": pa.array(ids, pa.int64()), "s": [s or f"s{i}" for i in ids], "p": [p] * len(ids)})


def _key(r: dict) -> tuple:
    ts = r["_commit_timestamp"]  # Spark's is naive, in the session's time zone (UTC in the tests)
    return (r["_commit_version"], r["_change_type"], r["id"], r["s"], r["p"], ts.replace(tzinfo=None))


def test_spark_change_read_equals_the_core_one(spark, tmp_path: Path):
    root = tmp_path / "t"
    t = DeltaTable.create(str(root), SCHEMA, partition_by=["p"], configuration=CDF)
    t.write(_rows([1, 2, 3]))
    t.write(_rows([4, 5], p="b"))
    (f,) = [r["path"] for r in t.snapshot().files.to_pylist() if r["path"].startswith("p=a")]
    t.transaction().delete_rows({f: [1]}).commit("DELETE")
    t.transaction().delete_rows({f: [0]}).commit("DELETE")
    (g,) = [r["path"] for r in t.snapshot().files.to_pylist() if r["path"].startswith("p=b")]
    t.transaction().remove_files(g).commit("DELETE")
    (root / "p=a").mkdir(exist_ok=True)
    pq.write_table(_rows([3], s="up").select(["id", "s"]), root / "p=a" / "up.parquet")
    images = pa.concat_tables([_rows([3]), _rows([3], s="up")]).append_column(
        "_change_type", pa.array(["update_preimage", "update_postimage"]))
    t.transaction().delete_rows({f: [2]}).add_files(t.add_file("p=a/up.parquet", {"p": "a"})) \
        .add_change_data(images).commit("UPDATE")  # fmt: skip
    ours = sorted(_key(r) for r in t.changes(1).to_table().to_pylist())
    theirs = sorted(_key(r.asDict()) for r in read_changes(spark, str(root), 1).collect())
    assert theirs == ours and len(ours) == 11
    few = read_changes(spark, str(root), 3, 4, columns=["id"])
    assert few.columns == ["id", "_change_type", "_commit_version", "_commit_timestamp"]
    assert sorted(r.id for r in few.collect()) == [1, 2]
    with pytest.raises(ChangeRangeError):
        read_changes(spark, str(root), 4, 2)


def test_spark_change_read_follows_an_added_column_and_refuses_a_rename(spark, tmp_path: Path):
    config = {**CDF, "delta.columnMapping.mode": "name"}
    t = DeltaTable.create(str(tmp_path / "t"), SCHEMA, configuration=config)
    t.write(_rows([1]))  # v1
    t.write(_rows([2]).append_column("n", pa.array([20], pa.int64())), schema_mode="merge")  # v2
    got = sorted((r.id, r.n) for r in read_changes(spark, t.uri, 1).collect())
    assert got == [(1, None), (2, 20)]
    md = t.snapshot().metadata
    schema = md.schema
    next(f for f in schema["fields"] if f["name"] == "s")["name"] = "label"  # v3: RENAME COLUMN s TO label
    altered = dataclasses.replace(md, schema_string=json.dumps(schema))
    t.transaction().update_metadata(altered).commit("ALTER TABLE")
    with pytest.raises(IncompatibleSchemaChangeError, match="version 3: column 's' was renamed to 'label'"):
        read_changes(spark, t.uri, 1)  # refused on the driver, before a task runs
    renamed_at = t.history(1)[0].timestamp  # ms since the epoch: from the rename on, in the new names
    assert read_changes(spark, t.uri, starting_timestamp=renamed_at).columns[:3] == ["id", "label", "p"]
