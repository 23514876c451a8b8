"""Deletion vectors written by our core (``Transaction.delete_rows``) on tables Delta Spark made, read by
Delta Spark; then Delta Spark goes on deleting and we read its result. One Delta Spark session.

Delta Spark creates the tables as a managed platform would: deletion vectors on through the session default
``spark.databricks.delta.properties.defaults.enableDeletionVectors``, one plain and one with column mapping,
and deletes rows itself first, so some files already carry its vectors. Our core then appends a file,
deletes rows by row index (inline vectors, stored ones sharing a file, vectors merged with Delta Spark's,
a file emptied to a plain remove, a file removed whole), checkpoints, and deletes more rows of checkpointed
files. After every commit Delta Spark's ``SELECT`` returns exactly the rows we meant to keep. Then Delta
Spark DELETEs and UPDATEs rows of our files, and our reading of its vectors (and delta-kernel-rs's) gives
its rows. Last, each engine loses a race on one file to the other and raises the conflict the other would.
"""

from __future__ import annotations

import json
from pathlib import Path

import fsspec
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from delta_kernel_rust_sharing_wrapper import PythonInterface, ScanBuilder, Table
from oracle_client import Oracle

from airflow_provider_delta.log import ConcurrentAppendError, ConcurrentDeleteReadError, DeltaTable
from airflow_provider_delta.log.features.properties import column_mapping_mode_of as column_mapping_mode
from airflow_provider_delta.log.files.deletion_vectors import deleted_rows
from airflow_provider_delta.log.schema.schema import physical_name

LOCAL = fsspec.filesystem("file")
SEED = 1313
DEFAULTS = {"spark.databricks.delta.properties.defaults.enableDeletionVectors": "true"}


@pytest.fixture(scope="module")
def spark(oracle: Oracle) -> Oracle:
    oracle.call("conf", DEFAULTS)
    return oracle


def _create(spark: Oracle, uri: str, column_mapping: bool) -> None:
    props = " TBLPROPERTIES ('delta.columnMapping.mode' = 'name')" if column_mapping else ""
    spark.call("sql", f"CREATE TABLE delta.`{uri}` (id BIGINT, s STRING, p STRING) USING delta "
                      f"PARTITIONED BY (p){props}")  # fmt: skip
    # Four files per partition: one INSERT each, ids in blocks of 1000 (block b: ids b*1000 .. b*1000+n-1).
    for block, (part, n) in enumerate([("a", 50), ("a", 3000), ("a", 200), ("b", 40), ("b", 70_000),
                                       ("b", 10), ("a", 500), ("b", 5)]):  # fmt: skip
        lo = block * 100_000
        spark.call("sql", f"INSERT INTO delta.`{uri}` SELECT id, concat('s', id), '{part}' "
                          f"FROM range({lo}, {lo + n}, 1, 1)")  # fmt: skip
    # Delta Spark's own vectors on some files first.
    spark.call("sql", f"DELETE FROM delta.`{uri}` WHERE id % 10 = 3 AND id < 300000")


def _ids_by_file(table: DeltaTable) -> dict[str, np.ndarray]:
    """Every live file's ids in row order (a row's index is its position in the Parquet file)."""
    snap = table.snapshot()
    field = next(f for f in snap.metadata.schema["fields"] if f["name"] == "id")
    column = physical_name(field, column_mapping_mode(snap.metadata.configuration))
    root = Path(table.store.root)
    return {p: pq.read_table(root / p, columns=[column]).column(0).to_numpy() for p in snap.file_paths()}


def _our_live_ids(table: DeltaTable) -> list[int]:
    """The ids our core says are live: each file's rows less those its vector deletes."""
    ids = _ids_by_file(table)
    out = []
    for f in table.snapshot().files.to_pylist():
        keep = np.ones(len(ids[f["path"]]), bool)
        if f["deletionVector"] is not None:
            keep[deleted_rows(f["deletionVector"], table.store.root, LOCAL, data_file=f["path"])] = False
        out += ids[f["path"]][keep].tolist()
    return sorted(out)


def _spark_ids(spark: Oracle, uri: str) -> list[int]:
    return sorted(json.loads(r)["id"] for r in spark.call("rows", uri))


def _kernel_ids(uri: str) -> list[int]:
    url = Path(uri).resolve().as_uri() + "/"
    engine = PythonInterface(url)
    table = ScanBuilder(Table(url).snapshot(engine)).build().execute(engine).read_all()
    return sorted(table.column("id").to_pylist())


def _rows_of(ids: dict[str, np.ndarray], path: str, wanted: np.ndarray) -> np.ndarray:
    """The row indexes of ``path`` that hold the ids in ``wanted``."""
    return np.flatnonzero(np.isin(ids[path], wanted))


@pytest.mark.parametrize("column_mapping", [False, True], ids=["plain", "column-mapping"])
def test_delta_spark_reads_the_rows_our_deletes_keep(spark: Oracle, tmp_path: Path, column_mapping: bool):
    rng = np.random.default_rng(SEED)
    print(f"seed {SEED}")
    uri = str(tmp_path / "t")
    _create(spark, uri, column_mapping)
    table = DeltaTable(uri)
    assert "deletionVectors" in (table.snapshot().protocol.writer_features or ())
    expected = set(_spark_ids(spark, uri))
    assert _our_live_ids(table) == sorted(expected)
    ids = _ids_by_file(table)
    with_dv = {f["path"] for f in table.snapshot().files.to_pylist() if f["deletionVector"]}
    assert len(with_dv) == 3  # Delta Spark's DELETE gave the files of ids below 300000 vectors

    # Our append: a file written by pyarrow (physical names under column mapping), committed by the core.
    snap = table.snapshot()
    fields = {f["name"]: physical_name(f, column_mapping_mode(snap.metadata.configuration))
              for f in snap.metadata.schema["fields"]}  # fmt: skip
    new = pa.table({fields["id"]: np.arange(900_000, 900_100), fields["s"]: [f"ours{i}" for i in range(100)]})
    (Path(uri) / "ours").mkdir()
    pq.write_table(new, Path(uri) / "ours/appended.parquet")
    part = fields["p"]
    table.transaction().add_files(table.add_file("ours/appended.parquet", {part: "a"})).commit()
    expected |= set(range(900_000, 900_100))
    assert _spark_ids(spark, uri) == sorted(expected)

    # Deletes by row index: small (inline) on our file and on a file with Delta Spark's vector (merged),
    # large (stored, two vectors in one file), and every live row of a small file (a plain remove).
    ids = _ids_by_file(table)
    by_size = sorted(ids, key=lambda p: len(ids[p]))
    big, mid = by_size[-1], by_size[-2]
    small_with_dv = next(p for p in by_size if p in with_dv)
    emptied = next(p for p in by_size if p not in with_dv and p != "ours/appended.parquet")
    doomed = {
        "ours/appended.parquet": np.array([900_001, 900_050]),
        small_with_dv: ids[small_with_dv][:2],
        big: rng.choice(ids[big], 20_000, replace=False),
        mid: ids[mid][::3],
        emptied: ids[emptied],
    }
    rows = {p: _rows_of(ids, p, wanted) for p, wanted in doomed.items()}
    table.transaction().delete_rows(rows).commit("DELETE", {"predicate": ["by row index"]})
    for wanted in doomed.values():
        expected -= set(wanted.tolist())
    live = {f["path"]: f for f in table.snapshot().files.to_pylist()}
    assert emptied not in live
    assert live["ours/appended.parquet"]["deletionVector"]["storageType"] == "i"
    assert live[big]["deletionVector"]["storageType"] == live[mid]["deletionVector"]["storageType"] == "u"
    assert live[big]["deletionVector"]["pathOrInlineDv"] == live[mid]["deletionVector"]["pathOrInlineDv"]
    assert _spark_ids(spark, uri) == sorted(expected)

    # A file removed whole by path, then our checkpoint, then deletes on checkpointed files with vectors.
    gone = next(p for p in by_size if p in live and p not in doomed)
    table.transaction().remove_files(gone).commit("DELETE")
    expected -= set(ids[gone].tolist())
    table.checkpoint()
    more = {big: rng.choice(ids[big], 5000, replace=False), "ours/appended.parquet": np.array([900_099])}
    table.transaction().delete_rows({p: _rows_of(ids, p, w) for p, w in more.items()}).commit("DELETE")
    for wanted in more.values():
        expected -= set(wanted.tolist())
    spark.call("clear_cache")
    assert _spark_ids(spark, uri) == sorted(expected)
    assert _our_live_ids(table) == _kernel_ids(uri) == sorted(expected)

    # Delta Spark goes on: its DELETE merges rows into our vectors, its UPDATE rewrites rows of our file.
    spark.call("sql", f"DELETE FROM delta.`{uri}` WHERE id % 7 = 0")
    spark.call("sql", f"UPDATE delta.`{uri}` SET id = id + 1000000 WHERE id >= 900000 AND id < 900010")
    expected = {i for i in expected if i % 7}
    expected = {i + 1_000_000 if 900_000 <= i < 900_010 else i for i in expected}
    assert _spark_ids(spark, uri) == sorted(expected)
    assert _our_live_ids(table) == _kernel_ids(uri) == sorted(expected)


def test_each_engine_loses_a_race_on_one_file_as_the_other_would(spark: Oracle, tmp_path: Path):
    """A vector update is a remove and an add of the file: the loser's conflict is what it read decides,
    by the same rules in both engines (Delta Spark's ConflictChecker: appends, then deletes read, then
    deletes deleted)."""
    uri = str(tmp_path / "race")
    _create(spark, uri, column_mapping=False)
    table = DeltaTable(uri)
    ids = _ids_by_file(table)
    target = max((p for p in ids if p.startswith("p=a/")), key=lambda p: len(ids[p]))

    def spark_deletes(n: int) -> None:
        spark.call("sql", f"DELETE FROM delta.`{uri}` WHERE id = {int(ids[target][n])}")

    # Having read the file's partition: the winner's re-add of the file is data added there.
    ours = table.transaction().read_partitions({"p": "a"}).remove_files(target)
    spark_deletes(5)
    with pytest.raises(ConcurrentAppendError):
        ours.commit("DELETE")
    handle = spark.call("begin", uri, read="p = 'a'", remove=[target])
    table.transaction().delete_rows({target: [6]}).commit("DELETE")
    assert spark.call("commit", handle).get("error") == "ConcurrentAppendException"
    # Having read only the file (ours: delete_rows reads what it changes): the winner removed it.
    ours = table.transaction().delete_rows({target: [0, 1]})
    spark_deletes(7)
    with pytest.raises(ConcurrentDeleteReadError, match="was removed"):
        ours.commit("DELETE")
    # Delta Spark removing the file without reading it: both removed it.
    handle = spark.call("begin", uri, remove=[target])
    table.transaction().delete_rows({target: [8]}).commit("DELETE")
    assert spark.call("commit", handle).get("error") == "ConcurrentDeleteDeleteException"
    spark.call("clear_cache")
    deleted = {int(ids[target][n]) for n in (5, 6, 7, 8)}
    assert deleted <= set(ids[target].tolist()) and not deleted & set(_spark_ids(spark, uri))
    assert _spark_ids(spark, uri) == _our_live_ids(table)
