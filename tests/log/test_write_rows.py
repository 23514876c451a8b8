"""The Arrow writer: rows from pyarrow, pandas, Polars and readers, one commit, exactly once per app
transaction; the table's rules enforced as the Spark writer enforces them; bad input refused by a named error
with nothing committed and no file left behind. Delta Spark agreeing: tests/oracle/test_arrow_rows_agree.py.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import random
from decimal import Decimal
from pathlib import Path

import deltalake
import pandas as pd
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from airflow_provider_delta.log import DeltaTable, read_table, write
from airflow_provider_delta.log.base.errors import (
    ConstraintViolationError,
    IdentityColumnError,
    InvalidCommitError,
    SchemaMismatchError,
    UnsupportedFeatureError,
)
from airflow_provider_delta.log.expressions.sql_parser import UnsupportedExpressionError

SEED = 20261125


def _data_files(root: Path) -> set[str]:
    """Every file under the table root outside the log: what a refused write must not leave behind."""
    return {str(p.relative_to(root)) for p in root.rglob("*") if p.is_file() and "_delta_log" not in p.parts}


def _versions(uri: str) -> int:
    return DeltaTable(uri).version()


def test_pandas_polars_and_readers_land_as_one_commit_each_read_by_deltalake(tmp_path):
    uri = str(tmp_path / "t")
    frame = pd.DataFrame({"id": [1, 2], "name": ["a", "b"]}, index=[10, 11])  # the index is not written
    assert write(uri, frame).version == 0
    assert write(uri, pl.DataFrame({"id": [3], "name": ["c"]})).version == 1
    batches = pa.table({"id": [4, 5], "name": ["d", None]}).to_batches(max_chunksize=1)
    reader = pa.RecordBatchReader.from_batches(batches[0].schema, iter(batches))
    assert write(uri, reader).version == 2
    ours = read_table(uri).sort_by("id")
    theirs = deltalake.DeltaTable(uri).to_pyarrow_table().sort_by("id")
    assert ours.equals(theirs.select(ours.column_names).cast(ours.schema))
    assert ours["id"].to_pylist() == [1, 2, 3, 4, 5]
    assert [h.operation for h in DeltaTable(uri).history()] == ["WRITE"] * 3


def test_exactly_once_per_app_transaction(tmp_path):
    uri = str(tmp_path / "t")
    data = pa.table({"id": [1, 2]})
    first = write(uri, data, app_id="job", app_version=7)
    files = _data_files(tmp_path / "t")
    again = write(uri, data, app_id="job", app_version=7)
    older = write(uri, data, app_id="job", app_version=6)
    assert not first.already_committed and again.already_committed and older.already_committed
    assert again.version == first.version == 0
    assert _data_files(tmp_path / "t") == files  # nothing written the second time
    assert write(uri, data, app_id="job", app_version=8).version == 1
    assert read_table(uri).num_rows == 4


def test_an_empty_string_partition_value_is_recorded_as_null(tmp_path):
    # "Partition Value Serialization": "" is null for every type. Delta Spark records null for it; a ""
    # in the log would be read as "" by Delta Spark and as NULL by readers that follow the spec.
    uri = str(tmp_path / "t")
    write(uri, pa.table({"id": [1, 2, 3], "part": ["", None, "x"]}), partition_by=["part"])
    log = (tmp_path / "t" / "_delta_log" / f"{0:020d}.json").read_text().splitlines()
    recorded = sorted((json.loads(line)["add"]["partitionValues"]["part"] or "<null>")
                      for line in log if '"add"' in line)  # fmt: skip
    assert recorded == ["<null>", "x"]  # "" and None share the null partition
    assert sorted(read_table(uri).column("part").to_pylist(), key=str) == [None, None, "x"]


def test_target_file_size_rolls_files_and_stats_follow_the_table(tmp_path):
    uri = str(tmp_path / "t")
    rng = random.Random(SEED)
    data = pa.table(
        {
            "id": pa.array(range(300_000), pa.int64()),
            "x": [rng.random() for _ in range(300_000)],
            "note": ["n" * 40] * 300_000,
        }
    )
    write(uri, data, target_file_size=1_000_000, configuration={"delta.dataSkippingNumIndexedCols": "1"})
    snap = DeltaTable(uri).snapshot()
    assert snap.num_files >= 2
    stats = [json.loads(s) for s in snap.files.column("stats").to_pylist()]
    assert sum(s["numRecords"] for s in stats) == 300_000
    assert all(set(s["minValues"]) == {"id"} for s in stats)  # only the first column is indexed
    assert read_table(uri, ["id"], "id >= 299990")["id"].to_pylist() == list(range(299_990, 300_000))


def test_overwrite_replace_where_and_schema_evolution(tmp_path):
    uri = str(tmp_path / "t")
    write(uri, pa.table({"id": [1, 2, 3], "day": ["a", "b", "c"]}), partition_by=["day"])
    write(uri, pa.table({"id": [10], "day": ["b"]}), mode="overwrite", replace_where="day = 'b'")
    assert sorted(read_table(uri)["id"].to_pylist()) == [1, 3, 10]
    write(uri, pa.table({"id": [4], "day": ["a"], "extra": [1.5]}), schema_mode="merge")
    got = read_table(uri, ["id", "extra"]).sort_by("id").to_pylist()
    assert got[0] == {"id": 1, "extra": None} and {"id": 4, "extra": 1.5} in got
    write(uri, pa.table({"k": ["x"]}), mode="overwrite", schema_mode="overwrite", partition_by=[])
    assert read_table(uri).to_pylist() == [{"k": "x"}]
    assert deltalake.DeltaTable(uri).to_pyarrow_table().to_pylist() == [{"k": "x"}]
    write(uri, pa.table({"k": ["y"]}), mode="overwrite")
    assert read_table(uri).to_pylist() == [{"k": "y"}]


def test_generated_columns_are_computed_and_checked(tmp_path):
    uri = str(tmp_path / "t")
    schema = {
        "type": "struct",
        "fields": [
            {"name": "v", "type": "integer", "nullable": True, "metadata": {}},
            {"name": "ts", "type": "timestamp", "nullable": True, "metadata": {}},
            {
                "name": "g",
                "type": "integer",
                "nullable": True,
                "metadata": {"delta.generationExpression": "v * 2"},
            },
            {
                "name": "day",
                "type": "date",
                "nullable": True,
                "metadata": {"delta.generationExpression": "CAST(ts AS DATE)"},
            },
        ],
    }
    DeltaTable.create(uri, schema, partition_by=["day"])
    ts = pa.array([dt.datetime(2024, 2, 29, 23, 59, tzinfo=dt.UTC), None], pa.timestamp("us", "UTC"))
    write(uri, pa.table({"v": pa.array([1, None], pa.int32()), "ts": ts}))
    got = read_table(uri).sort_by("v").to_pylist()
    assert [(r["v"], r["g"], r["day"]) for r in got] == [(1, 2, dt.date(2024, 2, 29)), (None, None, None)]
    bad = pa.table({"v": pa.array([3], pa.int32()), "ts": ts.slice(0, 1), "g": pa.array([7], pa.int32())})
    with pytest.raises(ConstraintViolationError, match=r"generated column g .*violated by 1 row.*\"g\": 7"):
        write(uri, bad)


# -- bad input: a named error, nothing committed, no stray files ------------------------------------------
@pytest.fixture
def checked_table(tmp_path) -> str:
    uri = str(tmp_path / "c")
    schema = {
        "type": "struct",
        "fields": [
            {"name": "id", "type": "integer", "nullable": False, "metadata": {}},
            {"name": "v", "type": "integer", "nullable": True, "metadata": {}},
            {"name": "s", "type": "string", "nullable": True, "metadata": {}},
        ],
    }
    DeltaTable.create(
        uri,
        schema,
        configuration={
            "delta.constraints.v_range": "v BETWEEN 0 AND 100",
            "delta.constraints.short_s": "s IS NULL OR length(s) < 4",
        },
    )
    write(uri, pa.table({"id": pa.array([1], pa.int32()), "v": pa.array([5], pa.int32()), "s": ["ok"]}))
    return uri


def _refused(uri: str, data, error, match: str) -> None:
    root = Path(uri)
    before, version = _data_files(root), _versions(uri)
    with pytest.raises(error, match=match):
        write(uri, data)
    assert _versions(uri) == version, "a refused write committed"
    assert _data_files(root) == before, f"a refused write left files: {_data_files(root) - before}"


def _rows(**cols) -> pa.Table:
    return pa.table({k: pa.array(v, pa.int32()) if k in ("id", "v") else v for k, v in cols.items()})


def test_a_schema_that_does_not_match_names_the_column_and_both_types(checked_table):
    data = pa.table({"id": pa.array([2], pa.int32()), "v": pa.array([1], pa.int64())})
    _refused(checked_table, data, SchemaMismatchError, r"'v' \(table: integer, data: long\)")
    _refused(checked_table, _rows(id=[2], w=[1]), SchemaMismatchError, r"'w'.*schema_mode='merge'")
    _refused(checked_table, _rows(v=[1]), SchemaMismatchError, r"non-nullable column\(s\) \['id'\]")


def test_narrower_columns_are_written_as_the_tables_types(tmp_path):
    # As Delta Spark's SQL INSERT and deltalake cast them: lossless widenings only, the schema unchanged.
    uri = str(tmp_path / "t")
    schema = pa.schema([
        ("p", pa.int64()), ("id", pa.int64()), ("x", pa.float64()), ("amount", pa.decimal128(10, 2)),
        ("tags", pa.list_(pa.int64())), ("s", pa.struct([("n", pa.int64())])),
    ])  # fmt: skip
    DeltaTable.create(uri, schema, partition_by=["p"])
    data = pa.table({
        "p": pa.array([7], pa.int32()), "id": pa.array([1], pa.int8()), "x": pa.array([0.5], pa.float32()),
        "amount": pa.array([12], pa.decimal128(4, 0)).cast(pa.decimal128(5, 2)),
        "tags": pa.array([[1, 2]], pa.list_(pa.int16())),
        "s": pa.array([{"n": 3}], pa.struct([("n", pa.int32())])),
    })  # fmt: skip
    write(uri, data)
    snap = DeltaTable(uri).snapshot()
    assert (
        snap.version == 1
        and snap.metadata.schema_string == DeltaTable(uri).snapshot(version=0).metadata.schema_string
    )
    (path,) = snap.file_paths()
    written = pq.read_schema(tmp_path / "t" / path)
    assert [written.field(c).type for c in ("id", "x", "amount", "tags", "s")] == [
        schema.field(c).type for c in ("id", "x", "amount", "tags", "s")
    ]
    assert snap.files.column("partitionValues").to_pylist()[0] == [("p", "7")]
    theirs = deltalake.DeltaTable(uri).to_pyarrow_table()
    assert theirs.to_pylist() == [
        {"p": 7, "id": 1, "x": 0.5, "amount": Decimal("12.00"), "tags": [1, 2], "s": {"n": 3}}
    ]
    # Lossy or meaning-changing ones are still refused, naming both types.
    for column, value, kind in [
        ("amount", pa.array([1], pa.decimal128(10, 0)).cast(pa.decimal128(12, 3)), "decimal\\(12,3\\)"),
        ("id", pa.array([1.0], pa.float64()), "double"),
        ("x", pa.array([1], pa.int64()), "long"),
    ]:
        _refused(
            uri,
            pa.table({"p": [1], column: value}),
            SchemaMismatchError,
            rf"'{column}' \(table: .*data: {kind}\)",
        )


def test_nulls_in_a_non_nullable_column_are_refused(checked_table):
    _refused(
        checked_table,
        _rows(id=[2, None], v=[1, 2]),
        ConstraintViolationError,
        r"NOT NULL id .*violated by 1 row.*\"id\": null",
    )


def test_a_violated_constraint_is_named_with_a_row(checked_table):
    _refused(
        checked_table,
        _rows(id=[2, 3], v=[50, 101], s=["a", "b"]),
        ConstraintViolationError,
        r"CHECK constraint v_range \(v BETWEEN 0 AND 100\) violated by 1 row\(s\), e.g. .*\"v\": 101",
    )
    # Rows are checked batch by batch as they stream: a bad row late in a stream still writes nothing.
    good = _rows(id=list(range(10, 1010)), v=[1] * 1000, s=["a"] * 1000)
    bad = _rows(id=[2], v=[1], s=["long"])
    batches = [*good.to_batches(max_chunksize=100), *bad.to_batches()]
    reader = pa.RecordBatchReader.from_batches(good.schema, iter(batches))
    _refused(checked_table, reader, ConstraintViolationError, "CHECK constraint short_s")


def test_a_constraint_we_cannot_evaluate_is_refused_by_name(tmp_path):
    uri = str(tmp_path / "t")
    DeltaTable.create(
        uri, pa.schema([("s", pa.string())]), configuration={"delta.constraints.fancy": "s RLIKE '^a'"}
    )
    _refused(uri, pa.table({"s": ["a"]}), UnsupportedExpressionError, r"CHECK constraint fancy .*RLIKE")


def test_a_failing_stream_leaves_no_files(tmp_path):
    uri = str(tmp_path / "t")
    write(uri, pa.table({"id": [0]}))

    def batches():
        for i in range(1, 4):
            yield pa.record_batch({"id": pa.array([i] * 200_000, pa.int64())})
        raise OSError("the source went away")

    _refused(
        uri,
        pa.RecordBatchReader.from_batches(pa.schema([("id", pa.int64())]), batches()),
        OSError,
        "went away",
    )


def test_features_are_added_only_when_asked(tmp_path):
    uri = str(tmp_path / "t")
    write(uri, pa.table({"id": [1]}))
    ntz = pa.table({"id": [2], "at": pa.array([dt.datetime(2024, 1, 1)], pa.timestamp("us"))})
    with pytest.raises(UnsupportedFeatureError, match="timestampNtz.*delta.feature.timestampNtz"):
        write(uri, ntz, schema_mode="merge")
    assert _versions(uri) == 0 and len(_data_files(tmp_path / "t")) == 1
    write(uri, ntz, schema_mode="merge", configuration={"delta.feature.timestampNtz": "supported"})
    protocol = DeltaTable(uri).snapshot().protocol
    assert "timestampNtz" in protocol.reader_features and "timestampNtz" in protocol.writer_features
    assert read_table(uri, ["at"], "id = 2")["at"].to_pylist() == [dt.datetime(2024, 1, 1)]
    # A new table with a timestamp_ntz column gets the feature, as Delta Spark's CREATE does.
    write(str(tmp_path / "n"), ntz)
    assert "timestampNtz" in DeltaTable(str(tmp_path / "n")).snapshot().protocol.writer_features


def test_row_tracking_and_identity_columns_on_arrow_writes(tmp_path):
    """The Arrow writer commits to row-tracking and identity tables as Delta Spark's INSERT does: fresh
    row ids above the mark, identity values generated from the column's mark, the mark moved in the same
    commit, explicit values refused by name with nothing written."""
    md = {"delta.identity.start": "100", "delta.identity.step": "-3",
          "delta.identity.allowExplicitInsert": "false"}  # fmt: skip
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False, metadata=md), ("name", pa.string())])
    uri = str(tmp_path / "t")
    DeltaTable.create(uri, schema, configuration={"delta.enableRowTracking": "true"})
    write(uri, pa.table({"name": ["a", "b", "c"]}))
    write(uri, pa.table({"name": ["d", "e"]}), target_file_size=1)
    got = read_table(uri, metadata=["row_id", "row_commit_version"]).sort_by("name")
    assert got["id"].to_pylist() == [100, 97, 94, 91, 88]
    meta = got["_metadata"].combine_chunks()
    assert sorted(meta.field("row_id").to_pylist()) == [0, 1, 2, 3, 4]
    assert meta.field("row_commit_version").to_pylist() == [1, 1, 1, 2, 2]
    snap = DeltaTable(uri).snapshot()
    field = json.loads(snap.metadata.schema_string)["fields"][0]
    assert field["metadata"]["delta.identity.highWaterMark"] == 88
    assert json.loads(snap.domain_metadata["delta.rowTracking"].configuration)["rowIdHighWaterMark"] == 4
    _refused(uri, pa.table({"id": [1], "name": ["x"]}), IdentityColumnError, "GENERATED ALWAYS AS IDENTITY")


def test_append_only_tables_are_not_overwritten(tmp_path):
    uri = str(tmp_path / "t")
    write(uri, pa.table({"id": [1]}), configuration={"delta.appendOnly": "true"})
    with pytest.raises(InvalidCommitError, match="append-only"):
        write(uri, pa.table({"id": [2]}), mode="overwrite")


def test_column_mapping_writes_physical_names_delta_rs_reads(tmp_path):
    uri = str(tmp_path / "t")
    data = pa.table({"id": [1, 2], "part": ["x", None]})
    write(uri, data, partition_by=["part"], configuration={"delta.columnMapping.mode": "name"})
    write(uri, pa.table({"id": [3], "part": ["x"], "new": ["n"]}), schema_mode="merge")
    snap = DeltaTable(uri).snapshot()
    fields = {f["name"]: f["metadata"] for f in snap.metadata.schema["fields"]}
    assert int(snap.configuration["delta.columnMapping.maxColumnId"]) == 3
    for path in snap.file_paths():
        names = pq.read_schema(os.path.join(uri, path)).names
        assert "id" not in names and fields["id"]["delta.columnMapping.physicalName"] in names
    assert sorted(read_table(uri)["id"].to_pylist()) == [1, 2, 3]
    # deltalake's to_pyarrow_table ignores column mapping (all nulls); its DataFusion scan reads it.
    theirs = deltalake.QueryBuilder().register("t", deltalake.DeltaTable(uri)).execute("SELECT id FROM t")
    assert sorted(pa.table(theirs)["id"].to_pylist()) == [1, 2, 3]


@pytest.mark.parametrize("mode", ["none", "name", "id"])
def test_struct_fields_match_by_name_in_any_order_as_delta_spark_merges_schemas(tmp_path, mode):
    """Delta Spark accepts data whose schema merged into the table's leaves it unchanged: a struct's fields
    in another order, or some missing, or named in another case. API payloads land that way (a dict's keys
    in the order they came). A field the table lacks is refused by its path unless merged."""
    uri = str(tmp_path / "t")
    point = pa.struct([("x", pa.int64()), ("y", pa.string())])
    cfg = {"delta.columnMapping.mode": mode} if mode != "none" else None
    nested = pa.list_(point)
    write(uri, pa.table({"id": [1], "p": pa.array([{"x": 1, "y": "a"}], point),
                         "ps": pa.array([[{"x": 1, "y": "a"}]], nested)}), configuration=cfg)  # fmt: skip
    write(uri, pa.table({"id": [2, 3], "p": [{"y": "b", "x": 2}, None], "ps": [[{"Y": "c"}], None]}))
    write(uri, pa.table({"ps": [[None, {"y": "d", "x": 4}]], "id": [4]}))
    got = read_table(uri).sort_by("id").to_pylist()
    assert got == [
        {"id": 1, "p": {"x": 1, "y": "a"}, "ps": [{"x": 1, "y": "a"}]},
        {"id": 2, "p": {"x": 2, "y": "b"}, "ps": [{"x": None, "y": "c"}]},
        {"id": 3, "p": None, "ps": None},
        {"id": 4, "p": None, "ps": [None, {"x": 4, "y": "d"}]},
    ]
    if mode == "none":  # deltalake's to_pyarrow_table ignores column mapping
        theirs = deltalake.DeltaTable(uri).to_pyarrow_table().sort_by("id").to_pylist()
        assert theirs == got
    before = _versions(uri), _data_files(tmp_path / "t")
    with pytest.raises(SchemaMismatchError, match=r"'p\.z' are not in the table \(pass schema_mode='merge'"):
        write(uri, pa.table({"id": [5], "p": [{"x": 5, "z": 0.5}]}))
    with pytest.raises(SchemaMismatchError, match=r"'ps\.element\.x' \(table: long, data: string\)"):
        write(uri, pa.table({"id": [5], "ps": [[{"x": "5"}]]}))
    with pytest.raises(SchemaMismatchError, match=r"duplicate fields .*'p' \['y', 'Y'\]"):
        write(uri, pa.table({"id": [5], "p": [{"y": "e", "Y": "f"}]}))
    assert (_versions(uri), _data_files(tmp_path / "t")) == before
    write(uri, pa.table({"id": [6], "p": [{"z": 0.5, "x": 6}]}), schema_mode="merge")
    assert read_table(uri).schema.field("p").type == pa.struct([("x", pa.int64()), ("y", pa.string()),
                                                                 ("z", pa.float64())])  # fmt: skip
    assert read_table(uri, filter="id = 6").to_pylist()[0]["p"] == {"x": 6, "y": None, "z": 0.5}
    assert read_table(uri, filter="id = 1").to_pylist()[0]["p"] == {"x": 1, "y": "a", "z": None}


def test_a_missing_non_nullable_nested_field_is_refused_by_its_path():
    """Delta Spark refuses data that lacks a NOT NULL field of a struct (not inside arrays or maps, where it
    does not check NOT NULL): writing it as null would break the constraint."""
    from airflow_provider_delta.log.schema.schema_enforcement import match_schema

    def struct(*fields):
        return {"type": "struct", "fields": [
            {"name": n, "type": t, "nullable": nullable, "metadata": {}} for n, t, nullable in fields
        ]}  # fmt: skip

    def array(element):
        return {"type": "array", "elementType": element, "containsNull": True}

    table = struct(("p", struct(("x", "long", False), ("y", "string", True)), True),
                   ("ps", array(struct(("x", "long", False))), True))  # fmt: skip
    with pytest.raises(SchemaMismatchError, match=r"non-nullable nested field\(s\) 'p\.x' are missing"):
        match_schema(table, struct(("p", struct(("y", "string", True)), True)), merge=False)
    data = struct(("ps", array(struct(("y", "long", True))), True))
    assert match_schema(table, data, merge=True)[0] == ["ps"]


def test_a_struct_field_that_is_not_null_is_checked_on_the_rows(tmp_path):
    """Delta Spark checks NOT NULL on a struct's fields (not inside arrays or maps), reading the field
    through its parents: a null parent breaks it too (delta-io/delta#860, kept as Delta Spark 4.4 does)."""
    uri = str(tmp_path / "n")
    inner = {"type": "struct", "fields": [{"name": "a", "type": "long", "nullable": False, "metadata": {}},
                                          {"name": "b", "type": "string", "nullable": True, "metadata": {}}]}
    schema = {"type": "struct", "fields": [{"name": "id", "type": "long", "nullable": True, "metadata": {}},
                                           {"name": "s", "type": inner, "nullable": True, "metadata": {}}]}
    DeltaTable.create(uri, schema)  # fmt: skip
    write(uri, pa.table({"id": [1], "s": [{"a": 1, "b": "x"}]}))
    kind = pa.struct([("a", pa.int64()), ("b", pa.string())])
    for bad in ([{"a": None, "b": "y"}], [None]):
        with pytest.raises(ConstraintViolationError, match=r"NOT NULL s\.a .*violated by 1 row"):
            write(uri, pa.table({"id": [2], "s": pa.array(bad, kind)}))
    assert _versions(uri) == 1
    assert _data_files(tmp_path / "n") == set(DeltaTable(uri).snapshot().file_paths())
