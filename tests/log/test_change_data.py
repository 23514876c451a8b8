"""Change data written by the core (``Transaction.add_change_data``): where the files go and what they hold
(as Delta Spark lays them out, with and without column mapping), the ``cdc`` actions committed, that deletes
by deletion vector, whole-file removes and appends write none (as Delta Spark's DELETE and INSERT), and
change data refused by name, before any file is written. Delta Spark's ``table_changes`` reading ours is in
tests/oracle/test_change_data_agree.py.
"""

from __future__ import annotations

import json
from pathlib import Path
from urllib.parse import unquote

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from airflow_provider_delta.log import DeltaTable, InvalidCommitError, UnsupportedFeatureError

SCHEMA = pa.schema([("id", pa.int64()), ("st", pa.struct([("x", pa.int32())])), ("p", pa.string())])
CDF = {"delta.enableChangeDataFeed": "true", "delta.enableDeletionVectors": "true"}


def _changes(ids: list[int], kinds: list[str], parts: list[str | None]) -> pa.Table:
    return pa.table({"id": ids, "st": [{"x": i} for i in ids], "p": parts, "_change_type": kinds})


def _lines(root: Path, version: int) -> list[dict]:
    return [json.loads(x) for x in (root / "_delta_log" / f"{version:020d}.json").read_text().splitlines()]


def _files(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()}


def test_change_data_files_are_laid_out_as_delta_spark_does(tmp_path: Path):
    root = tmp_path / "t"
    t = DeltaTable.create(str(root), SCHEMA, partition_by=["p"], configuration=CDF)
    rows = _changes([1, 2, 2, 3], ["delete", "update_preimage", "update_postimage", "insert"],
                    ["a", "b/c=d", "b/c=d", None])  # fmt: skip
    t.transaction().add_change_data(rows).commit("UPDATE")
    cdc = [x["cdc"] for x in _lines(root, 1) if "cdc" in x]
    assert [c["partitionValues"] for c in cdc] == [{"p": "a"}, {"p": "b/c=d"}, {"p": None}]
    folders = [unquote(c["path"]).rsplit("/", 1)[0] for c in cdc]  # the log holds paths as URIs
    assert folders == [
        "_change_data/p=a",
        "_change_data/p=b%2Fc%3Dd",
        "_change_data/p=__HIVE_DEFAULT_PARTITION__",
    ]
    for i, c in enumerate(cdc):
        name = c["path"].rsplit("/", 1)[1]
        assert name.startswith(f"cdc-{i:05d}-") and name.endswith(".c000.zstd.parquet")
        assert c["dataChange"] is False and c["size"] == (root / unquote(c["path"])).stat().st_size
    data = pq.read_table(root / "_change_data/p=b%2Fc%3Dd" / cdc[1]["path"].rsplit("/", 1)[1])
    assert data.column_names == ["id", "st", "p", "_change_type"]
    assert data.to_pylist() == [
        {"id": 2, "st": {"x": 2}, "p": "b/c=d", "_change_type": "update_preimage"},
        {"id": 2, "st": {"x": 2}, "p": "b/c=d", "_change_type": "update_postimage"},
    ]
    # Change data is not table data: the snapshot holds no file of it.
    assert t.snapshot().num_files == 0


def test_under_column_mapping_files_get_physical_names_and_random_prefixes(tmp_path: Path):
    root = tmp_path / "t"
    config = {**CDF, "delta.columnMapping.mode": "id"}
    t = DeltaTable.create(str(root), SCHEMA, partition_by=["p"], configuration=config)
    t.transaction().add_change_data(_changes([7], ["delete"], ["a"])).commit("DELETE")
    (cdc,) = [x["cdc"] for x in _lines(root, 1) if "cdc" in x]
    fields = {f["name"]: f["metadata"] for f in t.snapshot().metadata.schema["fields"]}
    physical = {n: md["delta.columnMapping.physicalName"] for n, md in fields.items()}
    assert cdc["partitionValues"] == {physical["p"]: "a"}
    prefix, name = cdc["path"].split("/")
    assert len(prefix) == 2 and prefix.isalnum() and name.startswith("cdc-00000-")
    schema = pq.read_schema(root / cdc["path"])
    assert schema.names == [physical["id"], physical["st"], physical["p"], "_change_type"]
    assert (
        schema.field(physical["id"]).metadata[b"PARQUET:field_id"]
        == str(fields["id"]["delta.columnMapping.id"]).encode()
    )
    nested = schema.field(physical["st"]).type.field(0)
    assert nested.name.startswith("col-") and b"PARQUET:field_id" in nested.metadata


def test_core_deletes_and_appends_write_no_change_data(tmp_path: Path):
    """Delta Spark infers their changes (DELETE by vector or whole file, INSERT): no cdc action."""
    root = tmp_path / "t"
    t = DeltaTable.create(str(root), SCHEMA, partition_by=["p"], configuration=CDF)
    (root / "p=a").mkdir()
    pq.write_table(pa.table({"id": np.arange(10), "st": [{"x": 0}] * 10}), root / "p=a/f.parquet")
    pq.write_table(pa.table({"id": np.arange(3), "st": [{"x": 0}] * 3}), root / "p=a/g.parquet")
    t.transaction().add_files(
        [t.add_file("p=a/f.parquet", {"p": "a"}), t.add_file("p=a/g.parquet", {"p": "a"})]
    ).commit()
    t.transaction().delete_rows({"p=a/f.parquet": [1]}).remove_files("p=a/g.parquet").commit("DELETE")
    assert not any("cdc" in x for v in (1, 2) for x in _lines(root, v))
    assert not (root / "_change_data").exists()


def test_bad_change_data_is_refused_by_name_before_a_file_is_written(tmp_path: Path):
    root = tmp_path / "t"
    t = DeltaTable.create(str(root), SCHEMA, partition_by=["p"], configuration=CDF)
    before = _files(root)
    good = _changes([1], ["delete"], ["a"])
    cases = [
        (good.drop(["st"]), InvalidCommitError, r"missing \['st'\]"),
        (good.append_column("extra", pa.array([1])), InvalidCommitError, r"not in the table \['extra'\]"),
        (good.drop(["_change_type"]), InvalidCommitError, r"missing \['_change_type'\]"),
        (_changes([1, 2], ["delete", "upsert"], ["a", "a"]), InvalidCommitError, "not .'upsert'."),
        (good.set_column(3, "_change_type", pa.nulls(1, pa.string())), InvalidCommitError, r"\['null'\]"),
        (good.set_column(0, "id", pa.array(["x"])), InvalidCommitError, "column 'id'"),
        ({"id": [1]}, TypeError, "pyarrow Table"),
    ]
    for rows, error, message in cases:
        txn = t.transaction()
        with pytest.raises(error, match=message):
            txn.add_change_data(rows)
        assert txn.cdc_files == []
    plain = DeltaTable.create(str(tmp_path / "plain"), SCHEMA, partition_by=["p"])
    with pytest.raises(UnsupportedFeatureError, match="delta.enableChangeDataFeed"):
        plain.transaction().add_change_data(good)
    assert _files(root) == before and t.version() == 0
    # Upper-case column names match, as Spark matches them; a RecordBatch is taken too.
    renamed = good.rename_columns(["ID", "St", "P", "_change_type"]).to_batches()[0]
    t.transaction().add_change_data(renamed).commit("DELETE")
    (cdc,) = [x["cdc"] for x in _lines(root, 1) if "cdc" in x]
    assert pq.read_table(root / cdc["path"]).column_names == ["id", "st", "p", "_change_type"]


@pytest.mark.s3
def test_deletes_and_change_data_on_s3(s3_server, s3_bucket):
    """Vectors and change data on an object store (no folders to create; conditional puts for the log)."""
    uri = f"s3://{s3_bucket}/t"
    t = DeltaTable.create(uri, SCHEMA, partition_by=["p"], configuration=CDF,
                          storage_options=s3_server.storage_options)  # fmt: skip
    fs = t.store.fs
    buffer = pa.BufferOutputStream()
    pq.write_table(pa.table({"id": np.arange(500), "st": [{"x": 1}] * 500}), buffer)
    fs.pipe_file(f"{s3_bucket}/t/p=a/f.parquet", buffer.getvalue().to_pybytes())
    t.transaction().add_files(t.add_file("p=a/f.parquet", {"p": "a"})).commit()
    txn = t.transaction().delete_rows({"p=a/f.parquet": [0, *range(100, 300)]})
    txn.add_change_data(_changes([0], ["delete"], ["a"])).commit("DELETE")
    keys = [k.removeprefix(f"{s3_bucket}/t/") for k in fs.find(f"{s3_bucket}/t")]
    assert any(k.startswith("deletion_vector_") for k in keys)
    assert any(k.startswith("_change_data/p=a/cdc-00000-") for k in keys)
    (f,) = t.snapshot().files.to_pylist()
    assert f["deletionVector"]["cardinality"] == 201 and f["deletionVector"]["storageType"] == "u"
