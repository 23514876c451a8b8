"""``spark.read_changes``: executors read a range's changes as the core's Arrow change read does (appends,
deletes by deletion vector, a whole file removed, an UPDATE with change data), row for row."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from airflow_provider_delta.log import DeltaTable
from airflow_provider_delta.log.errors import ChangeRangeError
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
