"""IcebergCompatV1/V2 tables written by the core: what creation sets up, what every writer's data files hold,
and every rule refused by name with nothing written.

Spec: "Iceberg Compatibility V1/V2" and their "Writer Requirements". The files are checked in their Parquet
footers (``pq.ParquetFile(...).schema``): the partition columns last with their physical names and field
ids and the values the ``add`` records, the nested ``element``/``key``/``value`` field ids the metadata's
``delta.columnMapping.nested.ids`` give, timestamps as INT64 (never INT96), ``numRecords`` in every add.
Delta Spark's agreement (its tables, its reads of ours, its metadata for the same DDL) is in
``tests/oracle/test_iceberg_compat_agree.py``.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from parquet_field_ids import parquet_field_ids

from airflow_provider_delta.log import AddFile, DeltaTable
from airflow_provider_delta.log.actions.actions import Protocol, stats_num_records
from airflow_provider_delta.log.base.errors import IcebergCompatError, InvalidCommitError
from airflow_provider_delta.log.features import iceberg_compat
from airflow_provider_delta.log.schema.partition_values import parse_partition_value
from airflow_provider_delta.log.schema.schema import CM_ID, CM_NESTED_IDS, CM_PHYSICAL_NAME
from airflow_provider_delta.log.writes.write_plan import plan_write

V2 = {"delta.enableIcebergCompatV2": "true"}
V1 = {"delta.enableIcebergCompatV1": "true"}
SET = "SET TBLPROPERTIES"
UTC = dt.UTC
PAIR = pa.struct([("x", pa.int32()), ("y", pa.list_(pa.string()))])
NESTED = pa.schema([
    ("id", pa.int64()), ("ts", pa.timestamp("us", tz="UTC")), ("a", pa.list_(PAIR)),
    ("m", pa.map_(pa.string(), pa.list_(pa.int32()))),
    ("s", pa.struct([("p", pa.int32()), ("q", pa.list_(pa.int32()))])),
    ("part", pa.string()), ("day", pa.date32()),
])  # fmt: skip


def _rows(ids: range, part: str | None = "p1") -> pa.Table:
    n = len(ids)
    return pa.table({
        "id": pa.array(list(ids), pa.int64()),
        "ts": pa.array([dt.datetime(2024, 1, 1, 12, i % 60, tzinfo=UTC) for i in ids],
                       NESTED.field("ts").type),
        "a": pa.array([[{"x": i, "y": [f"y{i}"]}] if i % 3 else None for i in ids], NESTED.field("a").type),
        "m": pa.array([[(f"k{i}", [i, i + 1])] for i in ids], NESTED.field("m").type),
        "s": pa.array([{"p": i, "q": [i]} for i in ids], NESTED.field("s").type),
        "part": pa.array([part] * n, pa.string()),
        "day": pa.array([dt.date(2024, 1, 1 + i % 2) for i in ids], pa.date32()),
    })  # fmt: skip


def _create(tmp_path: Path, config: dict[str, str] | None = None, name: str = "t") -> DeltaTable:
    table = DeltaTable(str(tmp_path / name))
    table.write(_rows(range(6)), partition_by=["part", "day"], configuration={**V2, **(config or {})})
    return table


def _expected_ids(schema: dict[str, Any]) -> dict[str, int]:
    """The field ids a file of ``schema`` must carry: column ids, and nested ids at their Parquet paths."""
    out: dict[str, int] = {}

    def field(f: dict[str, Any], path: str) -> None:
        md = f["metadata"]
        name = f"{path}{md[CM_PHYSICAL_NAME]}"
        out[name] = md[CM_ID]
        typed(f["type"], name, md[CM_PHYSICAL_NAME], md.get(CM_NESTED_IDS, {}))

    def typed(t: Any, parquet: str, key: str, ids: dict[str, int]) -> None:
        if not isinstance(t, dict):
            return
        if t["type"] == "struct":
            for child in t["fields"]:
                field(child, f"{parquet}.")
        elif t["type"] == "array":
            out[f"{parquet}.list.element"] = ids[f"{key}.element"]
            typed(t["elementType"], f"{parquet}.list.element", f"{key}.element", ids)
        elif t["type"] == "map":
            out[f"{parquet}.key_value.key"] = ids[f"{key}.key"]
            typed(t["keyType"], f"{parquet}.key_value.key", f"{key}.key", ids)
            out[f"{parquet}.key_value.value"] = ids[f"{key}.value"]
            typed(t["valueType"], f"{parquet}.key_value.value", f"{key}.value", ids)

    for f in schema["fields"]:
        field(f, "")
    return out


def _check_files(table: DeltaTable, untagged: frozenset[str] = frozenset()) -> int:
    """Every live file of ``table`` as IcebergCompatV2 asks (files written before a column was added lack
    it; ``untagged``: files added from outside, which carry no ``ICEBERG_COMPAT_VERSION`` tag); the number
    of files checked."""
    snap = table.snapshot()
    schema = snap.metadata.schema
    by_name = {f["name"]: f for f in schema["fields"]}
    partitions = [by_name[c] for c in snap.partition_columns]
    physical = [f["metadata"][CM_PHYSICAL_NAME] for f in partitions]
    expected = _expected_ids(schema)
    adds = AddFile.from_table(snap.files)
    assert adds
    for add in adds:
        footer = pq.ParquetFile(str(Path(table.uri) / add.path))
        arrow = footer.schema_arrow
        # Partition values materialized after the data columns, with their physical names and field ids.
        assert arrow.names[len(arrow.names) - len(physical):] == physical, add.path
        assert set(arrow.names[: len(arrow.names) - len(physical)]) <= {
            f["metadata"][CM_PHYSICAL_NAME] for f in schema["fields"] if f not in partitions}
        ids = parquet_field_ids(footer.schema)
        assert ids == {path: expected[path] for path in ids}, add.path  # every column and nested id
        content = pq.read_table(str(Path(table.uri) / add.path))
        for f, name in zip(partitions, physical, strict=True):
            want = parse_partition_value(add.partition_values[name], f["type"])
            assert set(content.column(name).to_pylist()) == {want}, (add.path, name)
        for i in range(len(footer.schema)):
            column = footer.schema.column(i)
            assert column.physical_type != "INT96"
            if column.logical_type.type == "TIMESTAMP":
                assert column.physical_type == "INT64"
        assert stats_num_records(add.stats) == footer.metadata.num_rows
        assert add.tags == (None if add.path in untagged else {"ICEBERG_COMPAT_VERSION": "2"})
    return len(adds)


def _state(table: DeltaTable) -> tuple[int, set[str]]:
    """The version and every file under the root: what "nothing written" compares."""
    root = Path(table.uri)
    files = {str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()}
    return table.version(), files


def _refused(table: DeltaTable, rule: str, run: Any) -> IcebergCompatError:
    before = _state(table)
    with pytest.raises(IcebergCompatError) as err:
        run()
    assert err.value.rule == rule, err.value
    assert table.uri in str(err.value) or "new table" in str(err.value)
    assert _state(table) == before
    return err.value


# -- creation -----------------------------------------------------------------------------------------------
def test_creation_sets_up_column_mapping_nested_ids_and_the_protocol(tmp_path):
    table = DeltaTable.create(str(tmp_path / "t"), NESTED, partition_by=["part"], configuration=V2)
    snap = table.snapshot()
    assert snap.protocol == Protocol(3, 7, ("columnMapping",), ("columnMapping", "icebergCompatV2"))
    config = snap.metadata.configuration
    assert config["delta.columnMapping.mode"] == "name"
    assert config[iceberg_compat.ATOMIC_CONVERSION] == "true"
    assert config["delta.columnMapping.maxColumnId"] == "17"  # 11 columns and fields, 6 nested ids
    assert snap.table_configuration.iceberg_compat_version == 2
    fields = {f["name"]: f for f in snap.metadata.schema["fields"]}

    def nested(f: dict[str, Any]) -> dict[str, int]:
        name = f["metadata"][CM_PHYSICAL_NAME]
        return {k.replace(name, "_"): v for k, v in f["metadata"][CM_NESTED_IDS].items()}

    # Column ids first, depth first; then nested ids in Delta Spark's order, as the spec's example keys them.
    assert [f["metadata"][CM_ID] for f in fields.values()] == [1, 2, 3, 6, 7, 10, 11]
    assert nested(fields["id"]) == {} and nested(fields["part"]) == {}
    assert nested(fields["a"]) == {"_.element": 12}
    x, y = fields["a"]["type"]["elementType"]["fields"]
    assert (x["metadata"][CM_ID], nested(x)) == (4, {})
    assert (y["metadata"][CM_ID], nested(y)) == (5, {"_.element": 13})
    assert nested(fields["m"]) == {"_.key": 14, "_.value": 15, "_.value.element": 16}
    p, q = fields["s"]["type"]["fields"]
    assert nested(fields["s"]) == {} and nested(p) == {} and nested(q) == {"_.element": 17}


def test_nested_ids_follow_the_spec_example():
    """The protocol's example ("Example of storing identifiers for nested fields"): array of array, map of
    array, map of struct with an array field."""
    schema = {"type": "struct", "fields": [
        {"name": "col1", "type": {"type": "array", "elementType": {"type": "array", "elementType": "integer",
                                  "containsNull": True}, "containsNull": True}, "nullable": True,
         "metadata": {CM_ID: 1, CM_PHYSICAL_NAME: "col-aaa"}},
        {"name": "col2", "type": {"type": "map", "keyType": "integer", "valueType": {
            "type": "array", "elementType": "integer", "containsNull": True}, "valueContainsNull": True},
         "nullable": True, "metadata": {CM_ID: 2, CM_PHYSICAL_NAME: "col-bbb"}},
        {"name": "col3", "type": {"type": "map", "keyType": "integer", "valueType": {
            "type": "struct", "fields": [
                {"name": "subcol1", "type": {"type": "array", "elementType": "integer", "containsNull": True},
                 "nullable": True, "metadata": {CM_ID: 4, CM_PHYSICAL_NAME: "col-ddd"}}]},
            "valueContainsNull": True},
         "nullable": True, "metadata": {CM_ID: 3, CM_PHYSICAL_NAME: "col-ccc"}},
    ]}  # fmt: skip
    assert iceberg_compat.assign_nested_ids(schema, 99) == 107
    ids = [f["metadata"][CM_NESTED_IDS] for f in schema["fields"]]
    assert ids == [{"col-aaa.element": 100, "col-aaa.element.element": 101},
                   {"col-bbb.key": 102, "col-bbb.value": 103, "col-bbb.value.element": 104},
                   {"col-ccc.key": 105, "col-ccc.value": 106}]  # fmt: skip
    sub = schema["fields"][2]["type"]["valueType"]["fields"][0]
    assert sub["metadata"][CM_NESTED_IDS] == {"col-ddd.element": 107}
    # Numbered once: a second pass keeps them and gives nothing new.
    assert iceberg_compat.assign_nested_ids(schema, 107) == 107


def test_a_given_column_mapping_mode_is_kept_and_v1_gets_no_nested_ids(tmp_path):
    flat = pa.schema([("id", pa.int64()), ("part", pa.string())])
    by_id = DeltaTable.create(str(tmp_path / "id"), flat, ["part"], {**V2, "delta.columnMapping.mode": "id"})
    assert by_id.snapshot().table_configuration.column_mapping_mode == "id"
    v1 = DeltaTable.create(str(tmp_path / "v1"), flat, ["part"], V1)
    snap = v1.snapshot()
    assert set(snap.protocol.writer_features) == {"columnMapping", "icebergCompatV1"}
    assert all(CM_NESTED_IDS not in f["metadata"] for f in snap.metadata.schema["fields"])
    v1.write(pa.table({"id": pa.array([1, 2], pa.int64()), "part": ["a", "b"]}))
    for add in AddFile.from_table(v1.snapshot().files):
        names = pq.read_schema(str(Path(v1.uri) / add.path)).names
        assert names[-1] == snap.metadata.schema["fields"][1]["metadata"][CM_PHYSICAL_NAME]
        assert add.tags is None  # Delta Spark tags the files of V2 and later only


# -- every writer -------------------------------------------------------------------------------------------
def test_every_arrow_writer_writes_iceberg_compatible_files(tmp_path):
    table = _create(tmp_path)
    assert _check_files(table) == 2
    table.write(_rows(range(6, 10)))
    assert _check_files(table) == 4
    assert table.optimize().num_files_removed == 4
    assert _check_files(table) == 2  # one file per partition
    table.write(_rows(range(10, 12), part=None))  # null partition: a null column in the file
    assert _check_files(table) == 4
    table.delete("id = 1")
    table.update({"part": "'p2'"}, "id = 2")  # moves a row to another partition
    source = pa.table({"id": pa.array([3, 100], pa.int64()), "part": ["p1", "p3"]})
    table.merge(source, "target.id = source.id").when_matched_update({"day": "DATE'2024-02-01'"}) \
        .when_not_matched_insert({"id": "source.id", "part": "source.part"}).execute()  # fmt: skip
    _check_files(table)
    rows = {r["id"]: (r["part"], r["day"]) for r in table.to_pyarrow_table().to_pylist()}
    assert 1 not in rows and rows[2][0] == "p2" and rows[3][1] == dt.date(2024, 2, 1)
    assert rows[100] == ("p3", None) and len(rows) == 12
    table.write(_rows(range(200, 203), part="over"), mode="overwrite")
    assert _check_files(table) == 2
    assert sorted(table.to_pyarrow_table().column("id").to_pylist()) == [200, 201, 202]
    assert table.snapshot().protocol.writer_features == ("columnMapping", "icebergCompatV2")


def test_numrecords_is_in_every_add_even_without_statistics_columns(tmp_path):
    table = _create(tmp_path, {"delta.dataSkippingNumIndexedCols": "0"})
    table.write(_rows(range(6, 9)))
    adds = AddFile.from_table(table.snapshot().files)
    assert len(adds) == 4
    for add in adds:
        stats = json.loads(add.stats)
        assert stats["numRecords"] > 0 and not stats["minValues"] and not stats["nullCount"]
    _check_files(table)


def test_schema_evolution_numbers_new_arrays_and_maps(tmp_path):
    """A write with schema_mode='merge' and a MERGE with merge_schema add array and map columns: their
    elements, keys and values get ids above maxColumnId, which counts them, and the files carry them."""
    table = _create(tmp_path)
    before = table.snapshot().table_configuration.max_column_id
    wider = _rows(range(10, 12)).append_column("tags", pa.array([["a"], ["b", "c"]], pa.list_(pa.string())))
    table.write(wider, schema_mode="merge")
    snap = table.snapshot()
    tags = next(f for f in snap.metadata.schema["fields"] if f["name"] == "tags")
    physical = tags["metadata"][CM_PHYSICAL_NAME]
    assert tags["metadata"][CM_ID] == before + 1
    assert tags["metadata"][CM_NESTED_IDS] == {f"{physical}.element": before + 2}
    assert snap.table_configuration.max_column_id == before + 2
    source = pa.table({"id": pa.array([10, 50], pa.int64()), "part": ["p1", "p1"],
                       "attrs": pa.array([[("k", 1)], None], pa.map_(pa.string(), pa.int64()))})  # fmt: skip
    table.merge(source, "target.id = source.id", merge_schema=True).when_matched_update_all() \
        .when_not_matched_insert_all().execute()  # fmt: skip
    snap = table.snapshot()
    attrs = next(f for f in snap.metadata.schema["fields"] if f["name"] == "attrs")
    physical = attrs["metadata"][CM_PHYSICAL_NAME]
    assert attrs["metadata"][CM_ID] == before + 3
    assert attrs["metadata"][CM_NESTED_IDS] == {f"{physical}.key": before + 4,
                                                f"{physical}.value": before + 5}
    assert snap.table_configuration.max_column_id == before + 5
    _check_files(table)
    rows = {r["id"]: r for r in table.to_pyarrow_table().to_pylist()}
    assert rows[10]["tags"] == ["a"] and rows[10]["attrs"] == [("k", 1)] and rows[50]["tags"] is None


def test_materialize_partition_columns_without_iceberg_compat(tmp_path):
    """Delta Spark's ``materializePartitionColumns`` (``delta.enableMaterializePartitionColumnsFeature``):
    partition columns in every file, by their names when there is no column mapping."""
    table = DeltaTable(str(tmp_path / "t"))
    data = pa.table({"id": pa.array([1, 2, 3], pa.int64()), "k": ["a", "b", None],
                     "n": pa.array([7, 7, 8], pa.int32())})  # fmt: skip
    table.write(data, partition_by=["k", "n"],
                configuration={"delta.enableMaterializePartitionColumnsFeature": "true"})  # fmt: skip
    assert "materializePartitionColumns" in table.snapshot().protocol.writer_features
    table.optimize()
    for add in AddFile.from_table(table.snapshot().files):
        content = pq.read_table(str(Path(table.uri) / add.path))
        assert content.column_names == ["id", "k", "n"]
        assert content.column("k").to_pylist() == [add.partition_values["k"]]
        assert content.column("n").to_pylist() == [int(add.partition_values["n"])]
        assert add.tags is None
    assert sorted(table.to_pyarrow_table().column("id").to_pylist()) == [1, 2, 3]


def test_partition_values_of_every_type_are_materialized_as_typed(tmp_path):
    table = DeltaTable(str(tmp_path / "t"))
    data = pa.table({
        "v": pa.array([1], pa.int64()), "ts": pa.array([dt.datetime(2024, 5, 6, 7, 8, 9, 123456, tzinfo=UTC)],
                                                        pa.timestamp("us", tz="UTC")),
        "ntz": pa.array([dt.datetime(2024, 5, 6, 7, 8, 9)], pa.timestamp("us")),
        "dec": pa.array([Decimal("12.34")], pa.decimal128(5, 2)), "b": [True],
        "f": pa.array([1.5], pa.float32()), "e": [""],
    })  # fmt: skip
    parts = ["ts", "ntz", "dec", "b", "f", "e"]
    table.write(data, partition_by=parts, configuration={**V2, "delta.feature.timestampNtz": "supported"})
    add = AddFile.from_table(table.snapshot().files)[0]
    content = pq.read_table(str(Path(table.uri) / add.path))
    assert content.num_columns == 1 + len(parts)  # the data column, then the partition columns
    values = dict(zip(parts, [content.column(i)[0].as_py() for i in range(1, 1 + len(parts))], strict=True))
    assert values == {"ts": dt.datetime(2024, 5, 6, 7, 8, 9, 123456, tzinfo=UTC),
                      "ntz": dt.datetime(2024, 5, 6, 7, 8, 9), "dec": Decimal("12.34"), "b": True, "f": 1.5,
                      "e": None}  # fmt: skip
    assert table.to_pyarrow_table().to_pylist()[0]["e"] is None  # "" records null, in the log and the file


def test_spark_layer_writes_through_the_layout_that_materializes(tmp_path):
    """The Spark writer's choice between Spark's own Parquet writer and the core's layout: tables whose
    files hold their partition values never go to Spark's writer, which leaves partition columns out."""
    from airflow_provider_delta.spark.native_files import native_write_blocker

    table = DeltaTable(str(tmp_path / "t"))
    schema = pa.schema([("id", pa.int64()), ("k", pa.string())])
    table.write(pa.table({"id": pa.array([1], pa.int64()), "k": ["a"]}), partition_by=["k"],
                configuration={"delta.enableMaterializePartitionColumnsFeature": "true"})  # fmt: skip
    plan = plan_write(table.snapshot(), schema, partition_by=None, schema_mode=None, overwrite=False,
                      configuration=None, replace_where=None)  # fmt: skip
    assert "materialized" in native_write_blocker(plan, table.store)
    plain = DeltaTable(str(tmp_path / "plain"))
    plain.write(pa.table({"id": pa.array([1], pa.int64()), "k": ["a"]}), partition_by=["k"])
    plan = plan_write(plain.snapshot(), schema, partition_by=None, schema_mode=None, overwrite=False,
                      configuration=None, replace_where=None)  # fmt: skip
    assert native_write_blocker(plan, plain.store) is None


# -- refusals -----------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("config", "rule"), [
    ({**V2, "delta.enableDeletionVectors": "true"}, "deletionVectors"),
    ({**V1, "delta.feature.deletionVectors": "supported"}, "deletionVectors"),
    ({**V2, "delta.columnMapping.mode": "none"}, "columnMapping"),
    ({**V1, **V2}, "singleVersion"),
], ids=["v2-with-dvs", "v1-with-dv-feature", "mapping-none", "v1-and-v2"])  # fmt: skip
def test_creating_a_table_that_breaks_a_rule_is_refused(tmp_path, config, rule):
    flat = pa.schema([("id", pa.int64()), ("part", pa.string())])
    for create in (lambda: DeltaTable.create(str(tmp_path / "t"), flat, ["part"], config),
                   lambda: DeltaTable(str(tmp_path / "t")).write(
                       pa.table({"id": pa.array([1], pa.int64()), "part": ["a"]}), configuration=config)):
        with pytest.raises(IcebergCompatError) as err:
            create()
        assert err.value.rule == rule and "IcebergCompatV" in str(err.value)
        assert not (tmp_path / "t").exists() or not any((tmp_path / "t").rglob("*.*"))


@pytest.mark.parametrize(("config", "kind", "found"), [
    (V2, "variant", "variant"),
    (V2, "void", "void"),
    (V1, {"type": "array", "elementType": "integer", "containsNull": True}, "array"),
    (V1, {"type": "map", "keyType": "string", "valueType": "integer", "valueContainsNull": True}, "map"),
    (V1, "void", "void"),
    (V2, {"type": "map", "keyType": "string", "valueType": "void", "valueContainsNull": True}, "void"),
], ids=["v2-variant", "v2-void", "v1-array", "v1-map", "v1-void", "v2-map-of-void"])  # fmt: skip
def test_types_outside_the_allow_list_are_refused(tmp_path, config, kind, found):
    schema = {"type": "struct", "fields": [
        {"name": "id", "type": "long", "nullable": True, "metadata": {}},
        {"name": "odd", "type": kind, "nullable": True, "metadata": {}}]}  # fmt: skip
    with pytest.raises(IcebergCompatError) as err:
        DeltaTable.create(str(tmp_path / "t"), schema, configuration=config)
    assert err.value.rule == "types" and f"holds type {found}" in str(err.value) and "'odd'" in str(err.value)
    assert not (tmp_path / "t").exists()
    # A write that would add such a column to an existing table is refused before any file is written.
    table = DeltaTable(str(tmp_path / "w"))
    table.write(pa.table({"id": pa.array([1], pa.int64())}), configuration=config)
    if found == "variant":
        return  # pyarrow has no variant to add
    extra = {"void": pa.null(), "array": pa.list_(pa.int32()), "map": pa.map_(pa.string(), pa.int32())}
    of_void = isinstance(kind, dict) and kind.get("valueType") == "void"
    kind_arrow = pa.map_(pa.string(), pa.null()) if of_void else extra[found]
    data = pa.table({"id": pa.array([2], pa.int64()), "odd": pa.nulls(1, kind_arrow)})
    _refused(table, "types", lambda: table.write(data, schema_mode="merge"))


def test_enabling_deletion_vectors_or_changing_the_mapping_is_refused(tmp_path):
    table = _create(tmp_path)
    md = table.snapshot().metadata
    with_dvs = Protocol(3, 7, ("columnMapping", "deletionVectors"),
                        ("columnMapping", "deletionVectors", "icebergCompatV2"))  # fmt: skip
    with_v1 = Protocol(3, 7, ("columnMapping",), ("columnMapping", "icebergCompatV1", "icebergCompatV2"))
    for change, rule, protocol in (
        ({"delta.enableDeletionVectors": "true"}, "deletionVectors", with_dvs),
        ({"delta.columnMapping.mode": "id"}, "columnMapping", table.snapshot().protocol),
        ({"delta.enableIcebergCompatV1": "true"}, "singleVersion", with_v1),
    ):
        new = dataclasses.replace(md, configuration={**md.configuration, **change})

        def commit(new: Any = new, protocol: Protocol = protocol) -> None:
            table.transaction().update_protocol(protocol).update_metadata(new).commit("SET TBLPROPERTIES")

        _refused(table, rule, commit)
    # The deletion vectors feature alone, without enabling them, is allowed under V2 (not active), as the
    # spec says; V1 refuses the feature itself (see test_creating_a_table_that_breaks_a_rule_is_refused).
    table.write(_rows(range(20, 21)), configuration={"delta.feature.deletionVectors": "supported"})
    assert "deletionVectors" in table.snapshot().protocol.writer_features
    _check_files(table)


def test_a_replace_that_renames_the_partition_columns_is_refused(tmp_path):
    table = _create(tmp_path)
    renamed = _rows(range(3)).rename_columns(["id", "ts", "a", "m", "s", "region", "day"])
    _refused(table, "partitionSpec", lambda: table.write(renamed, mode="overwrite", schema_mode="overwrite",
                                                        partition_by=["region", "day"]))  # fmt: skip
    _refused(table, "partitionSpec", lambda: table.write(_rows(range(3)), mode="overwrite",
                                                        schema_mode="overwrite", partition_by=["part"]))
    # The same names with another type are allowed (Iceberg follows it).
    retyped = _rows(range(3)).set_column(5, "part", pa.array([1, 1, 2], pa.int64()))
    table.write(retyped, mode="overwrite", schema_mode="overwrite", partition_by=["part", "day"])
    assert sorted(table.to_pyarrow_table().column("part").to_pylist()) == [1, 1, 2]
    _check_files(table)
    # An unpartitioned table may become partitioned (Iceberg-Spark allows it too).
    flat = DeltaTable(str(tmp_path / "flat"))
    flat.write(pa.table({"id": pa.array([1], pa.int64()), "k": ["a"]}), configuration=V2)
    flat.write(pa.table({"id": pa.array([2], pa.int64()), "k": ["b"]}), mode="overwrite",
               schema_mode="overwrite", partition_by=["k"])  # fmt: skip
    assert list(flat.snapshot().partition_columns) == ["k"]


def test_type_widening_iceberg_cannot_follow_is_refused(tmp_path):
    """A MERGE with schema evolution on a type-widening table widens INT to BIGINT (Iceberg follows it) but
    a decimal's scale raised is refused by name, before a file is written."""
    table = DeltaTable(str(tmp_path / "t"))
    data = pa.table({"id": pa.array([1, 2], pa.int64()), "v": pa.array([1, 2], pa.int32()),
                     "d": pa.array([Decimal("1.50"), Decimal("2.50")], pa.decimal128(5, 2))})  # fmt: skip
    table.write(data, configuration={**V2, "delta.enableTypeWidening": "true"})
    source = pa.table({"id": pa.array([2], pa.int64()), "v": pa.array([5_000_000_000], pa.int64())})
    table.merge(source, "target.id = source.id", merge_schema=True).when_matched_update_all().execute()
    v = next(f for f in table.snapshot().metadata.schema["fields"] if f["name"] == "v")
    assert v["type"] == "long"
    assert v["metadata"]["delta.typeChanges"] == [{"fromType": "integer", "toType": "long"}]
    wider = pa.table({"id": pa.array([1], pa.int64()),
                      "d": pa.array([Decimal("1.2345")], pa.decimal128(10, 4))})  # fmt: skip
    merge = table.merge(wider, "target.id = source.id", merge_schema=True).when_matched_update_all()
    err = _refused(table, "typeWidening", merge.execute)
    assert "decimal(5,2) to decimal(10,4)" in str(err)


def test_an_add_without_numrecords_is_refused(tmp_path):
    table = _create(tmp_path)
    live = AddFile.from_table(table.snapshot().files)[0]
    bare = dataclasses.replace(live, path="copy.parquet", stats=None)
    (Path(table.uri) / "copy.parquet").write_bytes((Path(table.uri) / live.path).read_bytes())
    err = _refused(table, "numRecords", lambda: table.transaction().add_files([bare]).commit())
    assert "copy.parquet" in str(err)
    # The same file with its footer's statistics goes in (it holds the partition columns already).
    table.transaction().add_files([table.add_file("copy.parquet", live.partition_values)]).commit()
    _check_files(table, untagged=frozenset({"copy.parquet"}))  # Delta Spark tags only files it writes


def test_an_external_file_without_the_partition_columns_is_refused(tmp_path):
    table = _create(tmp_path)
    live = AddFile.from_table(table.snapshot().files)[0]
    content = pq.read_table(str(Path(table.uri) / live.path))
    partitions = list(live.partition_values)
    pq.write_table(content.drop_columns(partitions), str(Path(table.uri) / "external.parquet"))
    with pytest.raises(IcebergCompatError) as err:
        table.add_file("external.parquet", live.partition_values)
    assert err.value.rule == "partitionValues" and "external.parquet" in str(err.value)


def test_enabling_on_an_existing_table_that_would_need_rewriting_is_refused(tmp_path):
    """A property change does not rewrite files: Delta Spark's REORG ... UPGRADE UNIFORM does. Turning
    IcebergCompatV2 on is refused while live files lack what it requires, and allowed where they do not."""
    name_mapped = {"delta.columnMapping.mode": "name"}

    def enable(table: DeltaTable, extra: dict[str, str] | None = None) -> Any:
        snap = table.snapshot()
        md = snap.metadata
        new = dataclasses.replace(md, configuration={**md.configuration, **V2, **(extra or {})})
        features = set(snap.protocol.writer_features or ()) | {"columnMapping", "icebergCompatV2"}
        protocol = Protocol(3, 7, ("columnMapping",), tuple(sorted(features)))
        return lambda: table.transaction().update_protocol(protocol).update_metadata(new).commit(SET)

    partitioned = DeltaTable(str(tmp_path / "partitioned"))
    partitioned.write(pa.table({"id": pa.array([1], pa.int64()), "k": ["a"]}), partition_by=["k"],
                      configuration=name_mapped)  # fmt: skip
    err = _refused(partitioned, "rewrite", enable(partitioned))
    assert "1 of its 1 live data files" in str(err) and "REORG TABLE" in str(err)
    nested = DeltaTable(str(tmp_path / "nested"))
    nested.write(pa.table({"id": pa.array([1], pa.int64()), "xs": pa.array([[1]], pa.list_(pa.int32()))}),
                 configuration=name_mapped)  # fmt: skip
    _refused(nested, "rewrite", enable(nested))
    unmapped = DeltaTable(str(tmp_path / "unmapped"))
    unmapped.write(pa.table({"id": pa.array([1], pa.int64())}))
    _refused(unmapped, "columnMapping", enable(unmapped))
    # Flat, unpartitioned, name-mapped: nothing to rewrite; later writes follow the rules.
    flat = DeltaTable(str(tmp_path / "flat"))
    flat.write(pa.table({"id": pa.array([1], pa.int64())}), configuration=name_mapped)
    enable(flat)()
    assert flat.snapshot().table_configuration.iceberg_compat_version == 2
    flat.write(pa.table({"id": pa.array([2], pa.int64())}))
    assert AddFile.from_table(flat.snapshot().files)[-1].tags == {"ICEBERG_COMPAT_VERSION": "2"}


def test_hand_made_metadata_is_held_to_the_rules(tmp_path):
    table = _create(tmp_path)
    snap = table.snapshot()
    schema = json.loads(json.dumps(snap.metadata.schema))
    for f in schema["fields"]:
        f["metadata"].pop(CM_NESTED_IDS, None)
    stripped = dataclasses.replace(snap.metadata, schema_string=json.dumps(schema))
    _refused(table, "nestedIds", lambda: table.transaction().update_metadata(stripped).commit(SET))
    # The property on, the feature not in the protocol: refused, naming the feature to add.
    plain = DeltaTable(str(tmp_path / "plain"))
    plain.write(pa.table({"id": pa.array([1], pa.int64())}),
                configuration={"delta.columnMapping.mode": "name"})
    md = plain.snapshot().metadata
    on = dataclasses.replace(md, configuration={**md.configuration, **V2})
    err = _refused(plain, "protocol", lambda: plain.transaction().update_metadata(on).commit(SET))
    assert "icebergCompatV2" in str(err)


def test_configuration_answers(tmp_path):
    table = _create(tmp_path)
    config = table.snapshot().table_configuration
    assert config.iceberg_compat_version == 2 and config.materialize_partition_columns
    layout = config.file_layout()
    assert layout.materialized_partitions and layout.file_tags == {"ICEBERG_COMPAT_VERSION": "2"}
    assert layout.file_schema.names[-2:] == layout.physical_partition_names
    plain = DeltaTable(str(tmp_path / "plain"))
    plain.write(pa.table({"id": pa.array([1], pa.int64()), "k": ["a"]}), partition_by=["k"],
                configuration=V2 | {"delta.enableIcebergCompatV2": "false"})  # fmt: skip
    config = plain.snapshot().table_configuration
    assert config.iceberg_compat_version is None and not config.materialize_partition_columns
    with pytest.raises(InvalidCommitError):  # the base class callers may catch
        DeltaTable.create(str(tmp_path / "x"), pa.schema([("a", pa.int64())]), configuration={**V1, **V2})


def test_partition_columns_follow_row_tracking_hidden_columns(tmp_path):
    """OPTIMIZE on a row-tracking table keeps row ids and commit versions in hidden columns after the table's
    columns; the partition columns come after those, as Delta Spark's writer appends them to the rest."""
    table = DeltaTable(str(tmp_path / "t"))
    rows = pa.table({"id": pa.array([1, 2], pa.int64()), "k": ["a", "a"]})
    table.write(rows, partition_by=["k"], configuration={**V2, "delta.enableRowTracking": "true"})
    table.write(pa.table({"id": pa.array([3], pa.int64()), "k": ["a"]}))
    assert table.optimize().num_files_removed == 2
    snap = table.snapshot()
    config = snap.table_configuration
    hidden = [config.materialized_row_id_column, config.materialized_row_commit_version_column]
    fields = {f["name"]: f["metadata"][CM_PHYSICAL_NAME] for f in snap.metadata.schema["fields"]}
    (add,) = AddFile.from_table(snap.files)
    names = pq.read_schema(str(Path(table.uri) / add.path)).names
    assert names == [fields["id"], *hidden, fields["k"]]
    assert sorted(table.to_pyarrow_table().column("id").to_pylist()) == [1, 2, 3]
