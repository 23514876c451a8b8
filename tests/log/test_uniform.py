"""UniForm: after each of our commits to a table whose ``delta.universalFormat.enabledFormats`` names iceberg,
the Iceberg metadata of that version is under ``metadata/``, and Iceberg readers (pyiceberg and DuckDB's
iceberg extension, both real) read exactly the Delta snapshot's rows from the newest metadata file, and the
Delta version's rows from each snapshot that records it (``delta-version``).

The test tables come from one helper (``_uniform_table``): IcebergCompatV2 tables (column mapping, array
elements and map keys and values numbered, partition values in the data files) with UniForm on, which needs
IcebergCompat (as Delta Spark). Faults are real files in the way, never mocks.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import logging
import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pyarrow as pa
import pytest
from iceberg_readers import (
    duckdb_connection,
    duckdb_rows,
    pyiceberg_rows,
    snapshots_by_delta_version,
    sorted_rows,
)

from airflow_provider_delta.log import DeltaTable, IcebergStatus, UniformError, convert_to_iceberg
from airflow_provider_delta.log.actions.actions import Protocol
from airflow_provider_delta.log.base.errors import IcebergCompatError
from airflow_provider_delta.log.cli.main import main as deltalog

UNIFORM = {"delta.enableIcebergCompatV2": "true", "delta.universalFormat.enabledFormats": "iceberg"}

SCHEMA = pa.schema([
    ("id", pa.int64()), ("name", pa.string()), ("score", pa.float64()), ("day", pa.date32()),
    ("ts", pa.timestamp("us", tz="UTC")), ("small", pa.int16()),
    ("nested", pa.struct([("a", pa.int32()), ("b", pa.string())])), ("part", pa.string()),
])  # fmt: skip


def _uniform_table(
    uri: str | Path,
    schema: pa.Schema = SCHEMA,
    partition_by: list[str] | None = None,
    *,
    configuration: dict[str, str] | None = None,
    **options: object,
) -> DeltaTable:
    """A UniForm table: IcebergCompatV2 (column mapping ``name``, nested ids, partition values in the files)
    and iceberg among the universal formats. Every table of this module is made here."""
    config = {**UNIFORM, **(configuration or {})}
    return DeltaTable.create(str(uri), schema, partition_by, config, **options)  # type: ignore[arg-type]


def _rows(start: int, n: int, *, extra: bool = False) -> pa.Table:
    ids = list(range(start, start + n))
    base = dt.datetime(2024, 5, 1, tzinfo=dt.UTC)
    data = {
        "id": ids,
        "name": [None if i % 5 == 0 else f"name-{i}" for i in ids],
        "score": [i * 1.5 for i in ids],
        "day": [dt.date(2024, 1, 1) + dt.timedelta(days=i % 3) for i in ids],
        "ts": [base + dt.timedelta(hours=i, microseconds=i * 7) for i in ids],
        "small": [i % 100 for i in ids],
        "nested": [None if i % 4 == 0 else {"a": i, "b": f"b{i}"} for i in ids],
        "part": [f"p{i % 2}" for i in ids],
    }
    schema = SCHEMA
    if extra:
        data["extra"] = [i * 10 for i in ids]
        schema = SCHEMA.append(pa.field("extra", pa.int64()))
    return pa.table(data, schema=schema)


@pytest.fixture(scope="module")
def duck():
    con = duckdb_connection()
    yield con
    con.close()


def _assert_readers_agree(table: DeltaTable, duck) -> IcebergStatus:
    """pyiceberg and DuckDB read the newest metadata file as the Delta table's latest rows."""
    status = table.iceberg_status()
    assert status.enabled and status.lag == 0 and status.last_error is None, status
    assert status.converted_version == status.table_version == table.version()
    expected = sorted_rows(table.to_pyarrow_table())
    assert sorted_rows(pyiceberg_rows(status.metadata_file)) == expected
    assert sorted_rows(duckdb_rows(duck, status.metadata_file)) == expected
    return status


def _assert_time_travel(table: DeltaTable, duck, at_least: int) -> dict[int, int]:
    """Each snapshot that records a Delta version reads as the Delta table at that version."""
    metadata_file = table.iceberg_status().metadata_file
    by_version = snapshots_by_delta_version(metadata_file)
    assert len(by_version) >= at_least, by_version
    for version, snapshot_id in by_version.items():
        expected = sorted_rows(table.to_pyarrow_table(version=version))
        assert sorted_rows(pyiceberg_rows(metadata_file, snapshot_id)) == expected, version
        assert sorted_rows(duckdb_rows(duck, metadata_file, snapshot_id)) == expected, version
    return by_version


# -- every kind of commit ----------------------------------------------------------------------------------
@pytest.mark.parametrize("partition_by", [None, ["part"]], ids=["unpartitioned", "partitioned"])
def test_each_commit_is_readable_as_iceberg(tmp_path, duck, partition_by):
    uri = str(tmp_path / "t")
    table = _uniform_table(uri, partition_by=partition_by)
    _assert_readers_agree(table, duck)  # the empty table of version 0
    steps = [
        lambda: table.write(_rows(0, 6)),
        lambda: table.write(_rows(6, 4)),
        lambda: table.write(_rows(100, 5), mode="overwrite"),
        lambda: table.write(_rows(200, 3, extra=True), schema_mode="merge"),
        lambda: table.delete("id < 102"),
        lambda: table.update({"name": "'renamed'", "score": "score + 1"}, "id = 103 OR id = 201"),
        lambda: (
            table.merge(_rows(201, 4, extra=True), on="target.id = source.id")
            .when_matched_update_all()
            .when_not_matched_insert_all()
            .execute()
        ),
        lambda: table.optimize(),
    ]
    for step in steps:
        step()
        _assert_readers_agree(table, duck)
    assert table.version() == 8
    operations = {}
    metadata = json.loads(Path(tmp_path / "t" / "metadata" / "version-hint.text").read_text())
    doc = json.loads((tmp_path / "t" / "metadata" / f"v{metadata}.metadata.json").read_text())
    for snap in doc["snapshots"]:
        operations[int(snap["summary"]["delta-version"])] = snap["summary"]["operation"]
    # Delta Spark's choice per commit: appends, an overwrite, copy-on-write deletes and updates, a replace.
    assert operations[1] == operations[2] == operations[4] == "append"
    assert operations[3] == operations[6] == operations[7] == "overwrite"
    assert operations[5] in ("delete", "overwrite")  # a whole file deleted, or rewritten without its rows
    assert operations[8] == "replace"
    assert len(doc["schemas"]) == 2  # the column added at version 4 is a new Iceberg schema, same ids
    _assert_time_travel(table, duck, at_least=9)


def test_partition_values_of_every_type_and_null(tmp_path, duck):
    schema = pa.schema([("v", pa.int64()), ("d", pa.date32()), ("n", pa.int32()), ("b", pa.bool_()),
                        ("t", pa.timestamp("us", tz="UTC")), ("s", pa.string())])  # fmt: skip
    table = _uniform_table(tmp_path / "t", schema, ["d", "n", "b", "t", "s"])
    ts = dt.datetime(2024, 3, 1, 12, 30, 15, 123456, tzinfo=dt.UTC)
    rows = pa.table({"v": [1, 2, 3], "d": [dt.date(2024, 1, 2), None, dt.date(1969, 12, 31)],
                     "n": [7, -1, None], "b": [True, None, False], "t": [ts, None, ts],
                     "s": ["a b/c=d", None, ""]}, schema=schema)  # fmt: skip
    table.write(rows)
    _assert_readers_agree(table, duck)


def test_data_files_carry_counts_and_trustworthy_bounds(tmp_path, duck):
    """Record counts and null counts from Delta's statistics; bounds only where they bound: a timestamp's
    maximum widened to the end of its millisecond, no maximum for a long string. DuckDB skips files by
    these bounds, and still finds every row a filter selects."""
    from pyiceberg.conversions import from_bytes
    from pyiceberg.table import StaticTable

    table = _uniform_table(tmp_path / "t")
    long_name = "x" * 40
    rows = _rows(0, 4).set_column(1, "name", pa.array(["a", long_name, None, "b"]))
    table.write(rows)
    status = table.iceberg_status()
    iceberg = StaticTable.from_metadata(status.metadata_file)
    [task] = list(iceberg.scan().plan_files())
    data_file = task.file
    assert data_file.record_count == 4
    field = {f.name: f for f in iceberg.schema().fields}
    name_id, ts_id, id_id = field["name"].field_id, field["ts"].field_id, field["id"].field_id
    assert data_file.null_value_counts[name_id] == 1
    assert from_bytes(field["id"].field_type, data_file.lower_bounds[id_id]) == 0
    assert from_bytes(field["id"].field_type, data_file.upper_bounds[id_id]) == 3
    assert name_id not in data_file.upper_bounds  # the longest name is 40 characters: Delta keeps a prefix
    assert from_bytes(field["name"].field_type, data_file.lower_bounds[name_id]) == "a"
    true_max = max(rows.column("ts").cast(pa.int64()).to_pylist())
    upper = from_bytes(field["ts"].field_type, data_file.upper_bounds[ts_id])
    # Our writer rounds the maximum up to its millisecond, Delta Spark truncates it: the bound covers both.
    assert true_max <= upper < true_max + 2000
    last = rows.column("ts")[3].as_py()
    for query in (f"ts >= TIMESTAMPTZ '{last.isoformat()}'", f"name > '{long_name[:35]}'", "id = 3"):
        got = duck.execute(f"SELECT id FROM iceberg_scan(?) WHERE {query}", [status.metadata_file]).fetchall()
        want = table.to_pyarrow_table(filter=query.replace("TIMESTAMPTZ ", "TIMESTAMP "))
        assert sorted(r[0] for r in got) == sorted(want.column("id").to_pylist()), query


def test_arrays_and_maps_are_read_through_their_nested_ids(tmp_path, duck):
    """IcebergCompatV2 numbers list elements and map keys and values; Iceberg readers find them by those
    ids. A UniForm table without IcebergCompat (whose arrays would have none) is refused by name, as Delta
    Spark refuses it, and nothing is written."""
    schema = pa.schema([("id", pa.int64()), ("tags", pa.list_(pa.string())),
                        ("attrs", pa.map_(pa.string(), pa.int64())),
                        ("points", pa.list_(pa.struct([("x", pa.int32()), ("y", pa.int32())])))])  # fmt: skip
    rows = pa.table({"id": [1, 2], "tags": [["a", "b"], None], "attrs": [[("k", 1)], []],
                     "points": [[{"x": 1, "y": 2}], [{"x": 3, "y": None}]]}, schema=schema)  # fmt: skip
    table = _uniform_table(tmp_path / "compat", schema)
    table.write(rows)
    status = table.iceberg_status()
    assert status.lag == 0
    expected = sorted_rows(table.to_pyarrow_table())
    assert sorted_rows(pyiceberg_rows(status.metadata_file)) == expected
    assert sorted_rows(duckdb_rows(duck, status.metadata_file)) == expected

    plain = tmp_path / "plain"
    config = {"delta.columnMapping.mode": "name", "delta.universalFormat.enabledFormats": "iceberg"}
    with pytest.raises(IcebergCompatError, match="delta.enableIcebergCompatV2") as err:
        DeltaTable.create(str(plain), schema, configuration=config)
    assert err.value.rule == "universalFormat"
    assert not (plain / "_delta_log").exists() or not any((plain / "_delta_log").iterdir())


# -- the metadata ------------------------------------------------------------------------------------------
def test_table_properties_as_delta_spark_sets_them(tmp_path):
    from pyiceberg.table import StaticTable

    uri = tmp_path / "t"
    ict = {"delta.enableInCommitTimestamps": "true"}
    table = _uniform_table(uri, partition_by=["part"], configuration=ict)
    table.write(_rows(0, 3))
    status = table.iceberg_status()
    assert status.metadata_file == f"file://{uri}/metadata/v2.metadata.json"
    assert (uri / "metadata" / "version-hint.text").read_text() == "2"
    doc = json.loads((uri / "metadata" / "v2.metadata.json").read_text())
    assert doc["format-version"] == 2
    assert doc["table-uuid"] == table.snapshot().metadata.id
    assert doc["location"] == f"file://{uri}"
    committed = table.history(limit=1)[0].commit_info["inCommitTimestamp"]
    assert doc["properties"]["delta-version"] == "1"
    assert doc["properties"]["delta-timestamp"] == str(committed) == str(table.snapshot().timestamp)
    mapping = json.loads(doc["properties"]["schema.name-mapping.default"])
    assert {m["names"][0]: m["field-id"] for m in mapping} == {
        f["name"]: f["metadata"]["delta.columnMapping.id"] for f in table.snapshot().metadata.schema["fields"]
    }
    iceberg = StaticTable.from_metadata(status.metadata_file)
    spec = iceberg.spec()
    assert [(f.name, str(f.transform)) for f in spec.fields] == [("part", "identity")]
    assert doc["metadata-log"][-1]["metadata-file"] == f"file://{uri}/metadata/v1.metadata.json"


def test_tables_without_uniform_get_no_iceberg_metadata(tmp_path):
    table = DeltaTable.create(str(tmp_path / "t"), SCHEMA, configuration={"delta.columnMapping.mode": "name"})
    table.write(_rows(0, 2))
    assert not (tmp_path / "t" / "metadata").exists()
    status = table.iceberg_status()
    assert (status.enabled, status.lag, status.metadata_file) == (False, None, None)
    with pytest.raises(UniformError, match="delta.universalFormat.enabledFormats") as err:
        table.convert_to_iceberg()
    assert err.value.rule == "notEnabled"
    assert not (tmp_path / "t" / "metadata").exists()


def test_converting_an_older_version_after_a_newer_one_changes_nothing(tmp_path):
    table = _uniform_table(tmp_path / "t")
    table.write(_rows(0, 2))
    table.write(_rows(2, 2))
    before = sorted(os.listdir(tmp_path / "t" / "metadata"))
    status = convert_to_iceberg(table, table.snapshot(version=1))
    assert status.converted_version == 2 and status.lag == 0
    assert sorted(os.listdir(tmp_path / "t" / "metadata")) == before


# -- faults: the commit stands, the status shows the lag, a conversion catches up -------------------------
def test_a_junk_metadata_file_never_fails_the_commit(tmp_path, duck, caplog):
    uri = tmp_path / "t"
    table = _uniform_table(uri)
    table.write(_rows(0, 3))  # version 1: v2.metadata.json
    (uri / "metadata" / "v3.metadata.json").write_text("not iceberg")
    with caplog.at_level(logging.WARNING):
        result = table.write(_rows(3, 3))
        table.delete("id = 0")
    assert (result.version, table.version()) == (2, 3)
    assert "could not be written for version 3" in caplog.text
    status = table.iceberg_status()
    assert (status.converted_version, status.lag) == (1, 2)
    assert status.metadata_file.endswith("/metadata/v2.metadata.json")  # the newest readable one
    assert "v3.metadata.json is not Iceberg table metadata" in status.last_error
    assert (uri / "metadata" / "v3.metadata.json").read_text() == "not iceberg"  # nothing overwritten
    with pytest.raises(UniformError) as err:
        table.convert_to_iceberg()
    assert err.value.rule == "metadata"

    (uri / "metadata" / "v3.metadata.json").unlink()
    status = table.convert_to_iceberg()
    assert (status.converted_version, status.lag, status.last_error) == (3, 0, None)
    _assert_readers_agree(table, duck)
    _assert_time_travel(table, duck, at_least=4)  # the commits it caught up with, one snapshot each


def test_a_metadata_folder_that_is_a_file_never_fails_the_commit(tmp_path, duck, caplog):
    uri = tmp_path / "t"
    table = _uniform_table(uri)
    shutil.move(uri / "metadata", uri / "metadata.moved")
    (uri / "metadata").write_text("a file where the folder goes")
    with caplog.at_level(logging.WARNING):
        assert table.write(_rows(0, 4)).version == 1
    status = table.iceberg_status()
    assert (status.converted_version, status.lag) == (None, 2)
    assert "NotADirectoryError" in status.last_error
    assert table.to_pyarrow_table().num_rows == 4

    (uri / "metadata").unlink()
    shutil.move(uri / "metadata.moved", uri / "metadata")
    assert table.convert_to_iceberg().lag == 0  # from version 0's metadata, by the commit since
    _assert_readers_agree(table, duck)


@pytest.mark.parametrize("change", ["deletion vectors", "partitioning"])
def test_what_iceberg_cannot_describe_is_refused_before_the_commit(tmp_path, change):
    """Deletion vectors and a new partitioning would leave the Iceberg metadata behind for good: the commit
    is refused by name (IcebergCompatV2's writer requirements), nothing is written, and the metadata stays
    at the table's version."""
    table = _uniform_table(tmp_path / "t", partition_by=["part"])
    table.write(_rows(0, 4))
    before = sorted(p.name for p in (tmp_path / "t").rglob("*") if p.is_file())
    with pytest.raises(IcebergCompatError) as err:
        if change == "deletion vectors":
            snap = table.snapshot()  # ALTER TABLE ... SET TBLPROPERTIES, as a transaction
            p = snap.protocol
            protocol = Protocol(3, 7, tuple({*p.reader_features, "deletionVectors"}),
                                tuple({*p.writer_features, "deletionVectors"}))  # fmt: skip
            md = dataclasses.replace(snap.metadata, configuration={**snap.metadata.configuration,
                                                                   "delta.enableDeletionVectors": "true"})
            table.transaction().update_protocol(protocol).update_metadata(md).commit("SET TBLPROPERTIES")
        else:
            table.write(_rows(0, 4), mode="overwrite", schema_mode="overwrite", partition_by=["day"])
    assert err.value.rule == ("deletionVectors" if change == "deletion vectors" else "partitionSpec")
    assert sorted(p.name for p in (tmp_path / "t").rglob("*") if p.is_file()) == before
    status = table.iceberg_status()
    assert (status.converted_version, status.lag) == (1, 0)


def test_commits_cleaned_up_are_converted_from_the_checkpoint(tmp_path, duck):
    """When the commits since the last conversion are gone (log cleanup), the version's whole file list,
    streamed from its checkpoint, becomes one snapshot that replaces the older ones' files."""
    uri = tmp_path / "t"
    table = _uniform_table(uri, partition_by=["part"])
    table.write(_rows(0, 4))
    hint = (uri / "metadata" / "version-hint.text").read_text()
    (uri / "metadata" / "v3.metadata.json").write_text("in the way")
    for start in (10, 20, 30):
        table.write(_rows(start, 3))
    table.delete("id = 21")
    table.checkpoint()
    for version in range(2, 6):  # as metadata cleanup would: the commits the checkpoint stands in for
        (uri / "_delta_log" / f"{version:020d}.json").unlink()
    (uri / "metadata" / "v3.metadata.json").unlink()
    assert (uri / "metadata" / "version-hint.text").read_text() == hint
    fresh = DeltaTable(str(uri))
    status = fresh.convert_to_iceberg()
    assert status.converted_version == 5 and status.metadata_file.endswith("v3.metadata.json")
    _assert_readers_agree(fresh, duck)
    by_version = snapshots_by_delta_version(status.metadata_file)
    assert sorted(by_version) == [0, 1, 5]
    doc = json.loads((uri / "metadata" / "v3.metadata.json").read_text())
    last = next(s for s in doc["snapshots"] if s["snapshot-id"] == by_version[5])
    assert last["summary"]["operation"] == "overwrite"
    assert last["summary"]["total-records"] == str(fresh.to_pyarrow_table().num_rows)


def test_racing_commits_end_with_consistent_metadata(tmp_path, duck):
    """Writers committing at once each convert after their commits; metadata files are created only if
    absent, so every ``vN`` is whole, each holds a newer Delta version than the one before, and the newest
    holds the last commit."""
    uri = str(tmp_path / "t")
    _uniform_table(uri)
    errors: list[BaseException] = []

    def writer(start: int) -> None:
        try:
            mine = DeltaTable(uri)
            for i in range(6):
                mine.write(_rows(start + 10 * i, 2))
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(1000 * n,)) for n in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    table = DeltaTable(uri)
    assert table.version() == 18
    _assert_readers_agree(table, duck)
    folder = tmp_path / "t" / "metadata"
    numbers = sorted(int(p.name[1:].split(".")[0]) for p in folder.glob("v*.metadata.json"))
    assert numbers == list(range(1, len(numbers) + 1))
    versions = [int(json.loads((folder / f"v{n}.metadata.json").read_text())["properties"]["delta-version"])
                for n in numbers]  # fmt: skip
    assert versions == sorted(set(versions)) and versions[-1] == 18
    _assert_time_travel(table, duck, at_least=2)


@pytest.mark.s3
def test_a_table_on_s3_converts_through_its_own_filesystem(s3_server, s3_bucket):
    uri = f"s3://{s3_bucket}/t"
    table = _uniform_table(uri, partition_by=["part"], storage_options=s3_server.storage_options)
    table.write(_rows(0, 5))
    table.delete("id = 2")
    status = table.iceberg_status()
    assert status.lag == 0 and status.metadata_file == f"{uri}/metadata/v3.metadata.json"
    keys = {o["Key"] for o in s3_server.client().list_objects_v2(Bucket=s3_bucket)["Contents"]}
    assert {"t/metadata/v3.metadata.json", "t/metadata/version-hint.text"} <= keys
    read = {"s3.endpoint": s3_server.endpoint_url, "s3.access-key-id": "testing",
            "s3.secret-access-key": "testing", "s3.region": "us-east-1"}  # fmt: skip
    options = s3_server.storage_options
    read["s3.access-key-id"], read["s3.secret-access-key"] = options["key"], options["secret"]
    read["s3.region"] = options["client_kwargs"]["region_name"]
    expected = sorted_rows(table.to_pyarrow_table())
    assert sorted_rows(pyiceberg_rows(status.metadata_file, **read)) == expected
    by_version = snapshots_by_delta_version(status.metadata_file, **read)
    assert sorted(by_version) == [0, 1, 2]
    assert sorted_rows(pyiceberg_rows(status.metadata_file, by_version[1], **read)) == sorted_rows(
        table.to_pyarrow_table(version=1)
    )


# -- the command line and the optional dependency ---------------------------------------------------------
def test_deltalog_uniform(tmp_path, capsys):
    uri = tmp_path / "t"
    table = _uniform_table(uri)
    table.write(_rows(0, 2))
    (uri / "metadata" / "v3.metadata.json").write_text("junk")
    table.write(_rows(2, 2))
    (uri / "metadata" / "v3.metadata.json").unlink()

    assert deltalog(["uniform", str(uri)]) == 0
    lines = [" ".join(line.split()) for line in capsys.readouterr().out.splitlines()]
    assert lines[:6] == [
        "UniForm iceberg on", f"table {uri}", "table version 2", "converted version 1",
        "lag 1 version behind", f"metadata file file://{uri}/metadata/v2.metadata.json",
    ]  # fmt: skip
    # The reason the conversion after version 2 failed, remembered by this process.
    assert lines[6].startswith("last error file://") and "is not Iceberg table metadata" in lines[6]

    assert deltalog(["uniform", str(uri), "--convert", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc == {"uri": str(uri), "enabled": True, "table_version": 2, "converted_version": 2,
                   "metadata_file": f"file://{uri}/metadata/v3.metadata.json", "lag": 0,
                   "last_error": None}  # fmt: skip

    plain = tmp_path / "plain"
    DeltaTable.create(str(plain), SCHEMA)
    assert deltalog(["uniform", str(plain)]) == 0
    assert capsys.readouterr().out.split()[:3] == ["UniForm", "iceberg", "off"]
    assert deltalog(["uniform", str(plain), "--convert"]) == 1
    assert "does not enable UniForm iceberg" in capsys.readouterr().err


def test_the_core_imports_pyiceberg_only_when_converting(tmp_path):
    """pyiceberg (about 0.8 s to import) is loaded by a conversion, not by importing the core; without it a
    conversion is ``MissingExtraError`` naming the ``iceberg`` extra, and the commit still stands."""
    script = (
        "import sys\n"
        "import airflow_provider_delta.log as core\n"
        "assert 'pyiceberg' not in sys.modules, 'pyiceberg loaded by importing the core'\n"
        "sys.modules['pyiceberg'] = None  # as if the iceberg extra were not installed\n"
        "import pyarrow as pa\n"
        f"t = core.DeltaTable.create({str(tmp_path / 't')!r}, pa.schema([('id', pa.int64())]),\n"
        f"                           configuration={UNIFORM!r})\n"
        "print(t.iceberg_status().last_error)\n"
        "try:\n"
        "    t.convert_to_iceberg()\n"
        "except ImportError as exc:\n"
        "    print(type(exc).__name__, exc)\n"
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith("MissingExtraError") and "airflow-provider-delta[iceberg]" in lines[0]
    assert lines[1].startswith("MissingExtraError") and "airflow-provider-delta[iceberg]" in lines[1]


def test_many_commits_keep_few_manifests_and_a_long_gap_converts_whole(tmp_path, duck, monkeypatch):
    """Every commit adds a manifest; past a threshold the carried ones are merged (Iceberg's merge append).
    A conversion further behind than ``MAX_COMMITS_TO_CONVERT`` commits converts the whole file list. Both
    thresholds are lowered here so that a few commits cross them."""
    from pyiceberg.table import StaticTable

    from airflow_provider_delta.log.uniform import conversion, snapshots

    monkeypatch.setattr(snapshots, "MERGE_MANIFESTS_AT", 3)
    monkeypatch.setattr(conversion, "MAX_COMMITS_TO_CONVERT", 2)
    uri = tmp_path / "t"
    table = _uniform_table(uri, partition_by=["part"])
    for start in range(0, 50, 10):
        table.write(_rows(start, 3))
    table.delete("id = 11")
    status = _assert_readers_agree(table, duck)
    iceberg = StaticTable.from_metadata(status.metadata_file)
    assert len(iceberg.current_snapshot().manifests(iceberg.io)) <= 3
    _assert_time_travel(table, duck, at_least=7)

    (uri / "metadata" / f"v{status.converted_version + 2}.metadata.json").write_text("in the way")
    for start in (100, 110, 120):
        table.write(_rows(start, 2))
    (uri / "metadata" / f"v{status.converted_version + 2}.metadata.json").unlink()
    status = table.convert_to_iceberg()
    assert status.lag == 0
    _assert_readers_agree(table, duck)
    summary = StaticTable.from_metadata(status.metadata_file).current_snapshot().summary
    assert summary["delta-version"] == str(table.version()) and summary.operation.value == "overwrite"
    assert summary["added-data-files"] == str(len(table.snapshot().files))  # the whole file list, added


def test_old_snapshots_leave_the_metadata_so_its_size_stays_bounded(tmp_path, duck, monkeypatch):
    """Every conversion writes the metadata file again: snapshots past VACUUM's horizon
    (``delta.deletedFileRetentionDuration``: their files may be gone) and beyond the newest
    ``MAX_SNAPSHOTS`` leave it (lowered here so that a few commits cross it); the newest still read as
    their Delta versions."""
    from pyiceberg.table import StaticTable

    from airflow_provider_delta.log.uniform import conversion

    monkeypatch.setattr(conversion, "MAX_SNAPSHOTS", 3)
    table = _uniform_table(tmp_path / "t")
    for start in range(0, 50, 10):
        table.write(_rows(start, 3))
    status = _assert_readers_agree(table, duck)
    kept = snapshots_by_delta_version(status.metadata_file)
    assert sorted(kept) == [3, 4, 5]
    _assert_time_travel(table, duck, at_least=3)

    vacuumed_at_once = {"delta.deletedFileRetentionDuration": "interval 0 hours"}
    horizon = _uniform_table(tmp_path / "h", configuration=vacuumed_at_once)
    for start in range(0, 30, 10):
        horizon.write(_rows(start, 3))
    status = _assert_readers_agree(horizon, duck)
    iceberg = StaticTable.from_metadata(status.metadata_file)
    assert [s.snapshot_id for s in iceberg.metadata.snapshots] == [iceberg.current_snapshot().snapshot_id]
    assert iceberg.current_snapshot().summary["delta-version"] == "3"
