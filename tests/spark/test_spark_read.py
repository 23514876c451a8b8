"""The Spark reader: tables deltalake and Delta Spark wrote, read row for row into Spark.

Golden tables with deletion vectors and column mapping are compared with their ``expected/`` data (or the
Rust kernel's scan where there is none); deltalake-written tables with deltalake's own read, at every
version. Synthetic inline and absolute-path deletion vectors cover the storage types no golden table has.
"""

from __future__ import annotations

import datetime as dt
import json
import uuid
from pathlib import Path

import deltalake
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from spark_helpers import GOLDEN, bitmap_array, dv_file, kernel_rows, rows, z85_encode

from airflow_provider_delta.log import AddFile, DeltaTable, add_file_from_parquet
from airflow_provider_delta.spark import read


def _expected(name: str) -> pa.Table:
    folder = GOLDEN / name / "expected"
    files = sorted((folder / "latest" / "table_content").glob("*.parquet")) or sorted(
        folder.glob("*.parquet")
    )
    return pa.concat_tables([pq.read_table(f) for f in files])


@pytest.mark.parametrize(
    "name",
    [
        "dat/deletion_vectors",  # dv storage "u"
        "delta-golden/dv-with-columnmapping",  # DVs + column mapping (name) + partitions
        "delta-golden/log-replay-dv-key-cases",  # the same file with successive DVs
        "delta-golden/table-with-columnmapping-mode-id",  # resolved by Parquet field id
        "delta-golden/table-with-columnmapping-mode-name",
        "dat/multi_partitioned",
        "dat/partitioned_with_null",
        "dat/with_schema_change",  # columns missing from older files read as null
        "dat/all_primitive_types",
    ],
)
def test_golden_tables_match_their_expected_rows(spark, golden_copy, name):
    root = golden_copy(name)
    got = read(spark, str(root)).toArrow()
    expected = _expected(name)
    assert rows(got) == rows(expected, got.column_names)


def test_deletion_vectors_match_the_kernel(spark, golden_copy):
    root = golden_copy("delta-kernel-rs/table-with-dv-small")
    got = read(spark, str(root))
    assert rows(got) == rows(kernel_rows(root), got.columns)
    assert sorted(r[0] for r in rows(got)) == [1, 2, 3, 4, 5, 6, 7, 8]  # rows 0 and 9 are deleted


def _dv_table(tmp_path: Path) -> tuple[str, AddFile]:
    uri = str(tmp_path / "dv")
    DeltaTable.create(
        uri, pa.schema([("id", pa.int64())]), configuration={"delta.enableDeletionVectors": "true"}
    )
    pq.write_table(pa.table({"id": pa.array(range(10), pa.int64())}), tmp_path / "dv" / "data.parquet",
                   row_group_size=4)  # fmt: skip
    table = DeltaTable(uri)
    add = add_file_from_parquet(table, "data.parquet")
    table.transaction().add_files([add]).commit()
    return uri, add


@pytest.mark.parametrize("storage", ["i", "p", "u-prefixed"])
def test_inline_absolute_and_prefixed_deletion_vectors(spark, tmp_path, storage):
    uri, add = _dv_table(tmp_path)
    bitmap = bitmap_array([0, 4, 5, 9], kind="run")
    dv = {"storageType": storage[0], "offset": 1, "sizeInBytes": len(bitmap), "cardinality": 4}
    if storage == "i":
        dv = {**dv, "pathOrInlineDv": z85_encode(bitmap), "offset": None}
    elif storage == "p":
        (tmp_path / "elsewhere.bin").write_bytes(dv_file(bitmap))
        dv["pathOrInlineDv"] = (tmp_path / "elsewhere.bin").as_uri()
    else:
        uid = uuid.uuid4()
        (tmp_path / "dv" / "ab").mkdir()
        (tmp_path / "dv" / "ab" / f"deletion_vector_{uid}.bin").write_bytes(dv_file(bitmap))
        dv["pathOrInlineDv"] = "ab" + z85_encode(uid.bytes)
    table = DeltaTable(uri)
    stats = json.dumps({**json.loads(add.stats), "tightBounds": False})  # bounds may be of deleted rows
    with_dv = AddFile(add.path, add.size, {}, add.modification_time, True, stats, deletion_vector=dv)
    table.transaction().remove_files([add]).add_files([with_dv]).commit("DELETE")
    # Rows 0, 4, 5 and 9 span the file's three row groups.
    assert rows(read(spark, uri)) == [(i,) for i in (1, 2, 3, 6, 7, 8)]
    if storage != "p":
        assert rows(kernel_rows(tmp_path / "dv")) == [(i,) for i in (1, 2, 3, 6, 7, 8)]
    assert rows(read(spark, uri, version=1)) == [(i,) for i in range(10)]


def test_deltalake_written_tables_at_every_version(spark, tmp_path):
    uri = str(tmp_path / "dl")
    stamps = pa.array([dt.datetime(2024, 1, 1, tzinfo=dt.UTC)] * 3, pa.timestamp("us", "UTC"))
    first = pa.table({"id": pa.array([1, 2, 3], pa.int64()), "day": ["a", "b", None], "ts": stamps})
    deltalake.write_deltalake(uri, first, partition_by=["day"])
    deltalake.write_deltalake(uri, first.slice(0, 1), mode="append")
    second = first.append_column("extra", pa.array([1.5, None, 2.5]))
    deltalake.write_deltalake(uri, second, mode="append", schema_mode="merge")
    deltalake.write_deltalake(uri, second.slice(1), mode="overwrite")
    for version in range(4):
        theirs = deltalake.DeltaTable(uri, version=version).to_pyarrow_table()
        ours = read(spark, uri, version=version)
        assert rows(ours) == rows(theirs, ours.columns), f"version {version}"
    # Version 1's timestamp as the protocol defines it without in-commit timestamps: its commit file's
    # modification time. (deltalake's history() gives commitInfo.timestamp, taken before the file is
    # written: on a busy machine it can fall before version 1 exists, i.e. at version 0.)
    stamp = (Path(uri) / "_delta_log" / f"{1:020d}.json").stat().st_mtime_ns // 1_000_000
    at_one = deltalake.DeltaTable(uri, version=1).to_pyarrow_table()
    assert rows(read(spark, uri, timestamp=stamp)) == rows(at_one, ["id", "day", "ts"])


def test_empty_table_has_the_schema(spark, tmp_path):
    uri = str(tmp_path / "empty")
    DeltaTable.create(uri, pa.schema([("id", pa.int64()), ("name", pa.string())]), partition_by=["name"])
    df = read(spark, uri)
    assert df.columns == ["id", "name"] and df.count() == 0
