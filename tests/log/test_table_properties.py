"""Table properties the newest protocol names, honoured through the table configuration ("Table Properties",
"Void Type"): the Parquet codec and data page version of new data and checkpoint files, and void columns
never written to data files, with the schema shapes no data file can hold refused on write."""

from __future__ import annotations

import glob
from pathlib import Path

import deltalake
import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from airflow_provider_delta.log import DeltaTable, InvalidCommitError, write

ROWS = pa.table(
    {"id": pa.array(range(1000), pa.int64()), "name": pa.array([f"n{i % 7}" for i in range(1000)])}
)


def _data_files(root: Path) -> list[str]:
    return sorted(glob.glob(str(root / "**" / "*.parquet"), recursive=True))


def _codecs(path: str) -> set[str]:
    """The codecs of a file's column chunks as the footer names them (read by DuckDB: pyarrow calls LZ4_RAW
    "LZ4", the name of the deprecated Hadoop-framed codec)."""
    return {row[0] for row in duckdb.sql(f"SELECT compression FROM parquet_metadata('{path}')").fetchall()}


def _data_page_type(path: str) -> int:
    """The type of the first data page of the file's first column (id: no dictionary), read from its Thrift
    header: field 1 (``type``, i32) is the header's first byte pair; 0 is DATA_PAGE, 3 DATA_PAGE_V2."""
    chunk = pq.ParquetFile(path).metadata.row_group(0).column(0)
    with open(path, "rb") as fh:
        fh.seek(chunk.data_page_offset)
        head = fh.read(2)
    assert head[0] == 0x15, head  # compact protocol: field 1, type i32
    return head[1] >> 1  # zigzag


def test_new_files_default_to_zstd_data_checkpoint_and_compaction_alike(tmp_path):
    root = tmp_path / "t"
    write(str(root), ROWS)
    write(str(root), ROWS)
    table = DeltaTable(str(root))
    table.checkpoint()
    table.optimize()
    files = _data_files(root)
    assert any(".checkpoint." in f for f in files)
    for f in files:
        assert _codecs(f) == {"ZSTD"}, f
    data = [f for f in files if "_delta_log" not in f]
    assert all(f.endswith(".c000.zstd.parquet") for f in data)
    assert deltalake.DeltaTable(str(root)).to_pyarrow_table().num_rows == 2 * ROWS.num_rows


@pytest.mark.parametrize(
    ("value", "codec"),
    [
        ("snappy", "SNAPPY"),
        ("GZIP", "GZIP"),
        ("uncompressed", "UNCOMPRESSED"),
        ("none", "UNCOMPRESSED"),
        ("lz4_raw", "LZ4_RAW"),
        ("zstd", "ZSTD"),
        ("lz4", "ZSTD"),
    ],  # fmt: skip
)
def test_the_codec_property_is_followed(tmp_path, value, codec):
    root = tmp_path / "t"
    write(str(root), ROWS, configuration={"delta.parquet.compression.codec": value})
    DeltaTable(str(root)).checkpoint()
    for f in _data_files(root):
        assert _codecs(f) == {codec}, f
    assert DeltaTable(str(root)).to_pyarrow_table().num_rows == ROWS.num_rows


def test_an_unknown_codec_or_page_version_is_refused_before_any_file(tmp_path):
    codec, version = "delta.parquet.compression.codec", "delta.parquet.format.version"
    for key, value in ((codec, "brotli"), (version, "1.5.0"), (version, "3.0.0"), (version, "2.1")):
        root = tmp_path / value
        with pytest.raises(InvalidCommitError, match=key.replace(".", r"\.")):
            write(str(root), ROWS, configuration={key: value})
        assert _data_files(root) == []


@pytest.mark.parametrize(("value", "page_type"), [(None, 0), ("1.0.0", 0), ("2.12.0", 3), ("2.0.1", 3)])
def test_the_data_page_version_property_is_followed(tmp_path, value, page_type):
    root = tmp_path / "t"
    config = {} if value is None else {"delta.parquet.format.version": value}
    write(str(root), ROWS, configuration=config)
    files = [f for f in _data_files(root) if "_delta_log" not in f]
    assert files and all(_data_page_type(f) == page_type for f in files)
    assert deltalake.DeltaTable(str(root)).to_pyarrow_table().num_rows == ROWS.num_rows


def _field(name: str, kind: object) -> dict:
    return {"name": name, "type": kind, "nullable": True, "metadata": {}}


def test_void_columns_are_never_written_and_read_back_as_nulls(tmp_path):
    struct = {"type": "struct", "fields": [_field("a", "long"), _field("gone", "void")]}
    schema = {"type": "struct", "fields": [_field("id", "long"), _field("v", "void"), _field("s", struct)]}
    root = tmp_path / "t"
    table = DeltaTable.create(str(root), schema)
    table.write(pa.table({"id": [1, 2], "s": pa.array([{"a": 7}, None], pa.struct([("a", pa.int64())]))}))
    (path,) = [f for f in _data_files(root) if "_delta_log" not in f]
    physical = pq.read_schema(path)
    assert physical.names == ["id", "s"] and physical.field("s").type == pa.struct([("a", pa.int64())])
    rows = table.to_pyarrow_table().to_pylist()
    assert rows == [{"id": 1, "v": None, "s": {"a": 7, "gone": None}}, {"id": 2, "v": None, "s": None}]
    assert deltalake.DeltaTable(str(root)).to_pyarrow_table().to_pylist() == rows


@pytest.mark.parametrize(
    ("shape", "named"),
    [
        ({"type": "array", "elementType": "void", "containsNull": True}, "a void inside an array or map"),
        (
            {"type": "map", "keyType": "string", "valueType": "void", "valueContainsNull": True},
            "a void inside an array or map",
        ),
        ({"type": "struct", "fields": [_field("x", "void")]}, "a struct whose fields are all void"),
    ],
)
def test_schemas_no_data_file_can_hold_are_refused_on_write_but_created_and_read(tmp_path, shape, named):
    schema = {"type": "struct", "fields": [_field("id", "long"), _field("bad", shape)]}
    root = tmp_path / "t"
    table = DeltaTable.create(str(root), schema)  # creating it is a metadata-only operation: allowed
    assert table.to_pyarrow_table().num_rows == 0
    with pytest.raises(InvalidCommitError, match=named):
        table.write(pa.table({"id": [1]}))
    assert [f for f in _data_files(root) if "_delta_log" not in f] == []


def test_a_table_of_only_void_columns_takes_no_data_files(tmp_path):
    table = DeltaTable.create(str(tmp_path / "t"), {"type": "struct", "fields": [_field("v", "void")]})
    with pytest.raises(InvalidCommitError, match="every column of the table is void"):
        table.write(pa.table({"v": pa.nulls(2)}))
