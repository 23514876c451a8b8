"""Tests for `airflow_provider_delta.log.schema.schema`.

Expected values come from outside the code under test: the protocol text, the Delta Spark golden tables
(their JSON log, data files, checkpoints and `expected/` outputs), deltalake, or are written out by hand.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import os
import struct
from decimal import Decimal
from pathlib import Path

import deltalake
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from airflow_provider_delta.log.features.properties import column_mapping_mode_of as column_mapping_mode
from airflow_provider_delta.log.schema import stats as schema_module
from airflow_provider_delta.log.schema.partition_values import (
    parse_partition_value,
    parse_partition_values,
    serialize_partition_value,
)
from airflow_provider_delta.log.schema.schema import (
    arrow_schema_to_delta,
    arrow_type_to_delta,
    delta_schema_to_arrow,
    delta_type_to_arrow,
    parse_schema_string,
    physical_name,
    physical_partition_names,
)
from airflow_provider_delta.log.schema.stats import parse_stats, stats_schema

GOLDEN = Path(os.environ["DELTA_SHARED_DIR"]) / "golden/delta-golden"
SPEC = Path(os.environ["DELTA_SHARED_DIR"]) / "protocol/003_51b5c166d670ae37.txt"
UTC = dt.UTC


def log_actions(table: str) -> list[dict]:
    """Every action of every JSON commit of a golden table, in commit order."""
    commits = sorted((GOLDEN / table / "delta" / "_delta_log").glob("*.json"))
    return [json.loads(line) for path in commits for line in path.read_text().splitlines() if line.strip()]


def latest_metadata(table: str) -> dict:
    return [action["metaData"] for action in log_actions(table) if "metaData" in action][-1]


def golden_schema(table: str) -> dict:
    return parse_schema_string(latest_metadata(table)["schemaString"])


def tables_with_schema() -> list[str]:
    result = []
    for path in sorted(GOLDEN.iterdir()):
        metadata = [a["metaData"] for a in log_actions(path.name) if "metaData" in a]
        if metadata and "schemaString" in metadata[-1]:
            result.append(path.name)
    return result


# ------------------------------------------------------------ schemas


def spec_example_schema() -> dict:
    """The "JSON Encoded Table Schema" of the appendix's "Example", cut out of the protocol text."""
    text = SPEC.read_text()
    start = text.index("```\n", text.index("JSON Encoded Table Schema:")) + 4
    return json.loads(text[start : text.index("```", start)])


def test_spec_example_schema_round_trips() -> None:
    delta = spec_example_schema()
    assert parse_schema_string(json.dumps(delta)) == delta
    arrow = delta_schema_to_arrow(delta)
    d_struct = pa.struct([pa.field("d", pa.int32(), nullable=False)])
    expected = pa.schema(
        [
            pa.field("a", pa.int32(), nullable=False),
            pa.field("b", d_struct),
            pa.field("c", pa.list_(pa.field("element", pa.int32(), nullable=False))),
            pa.field("e", pa.list_(pa.field("element", d_struct, nullable=True))),
            pa.field("f", pa.map_(pa.field("key", pa.string(), False), pa.field("value", pa.string(), True))),
        ]
    )
    assert arrow.equals(expected)
    assert arrow_schema_to_delta(arrow) == delta


PRIMITIVES = [
    ("string", pa.string()),
    ("long", pa.int64()),
    ("integer", pa.int32()),
    ("short", pa.int16()),
    ("byte", pa.int8()),
    ("float", pa.float32()),
    ("double", pa.float64()),
    ("boolean", pa.bool_()),
    ("binary", pa.binary()),
    ("date", pa.date32()),
    ("timestamp", pa.timestamp("us", tz="UTC")),
    ("timestamp_ntz", pa.timestamp("us")),
    ("decimal(10,2)", pa.decimal128(10, 2)),
    ("decimal(38,38)", pa.decimal128(38, 38)),
    ("void", pa.null()),
    ("variant", pa.struct([pa.field("value", pa.binary(), False), pa.field("metadata", pa.binary(), False)])),
]


@pytest.mark.parametrize(("delta", "arrow"), PRIMITIVES)
def test_primitive_types_both_ways(delta: str, arrow: pa.DataType) -> None:
    assert delta_type_to_arrow(delta) == arrow
    assert arrow_type_to_delta(arrow) == delta


@pytest.mark.parametrize(
    ("spelling", "expected"),
    [
        ("decimal(10, 2)", pa.decimal128(10, 2)),
        ("decimal( 5 ,0 )", pa.decimal128(5, 0)),
        ("decimal", pa.decimal128(10, 0)),  # Spark's DecimalType.USER_DEFAULT
        ("null", pa.null()),
    ],
)
def test_lenient_type_spellings(spelling: str, expected: pa.DataType) -> None:
    assert delta_type_to_arrow(spelling) == expected


@pytest.mark.parametrize(
    "bad", ["uuid", "interval", "decimal(39,0)", "decimal(5,6)", "Integer", {"type": "tuple", "fields": []}]
)
def test_unknown_delta_types_are_named(bad: str | dict) -> None:
    with pytest.raises(ValueError, match="uuid|interval|decimal|Integer|tuple"):
        delta_type_to_arrow(bad)


@pytest.mark.parametrize("text", ["not json", '"string"', "[]", '{"type": "array", "elementType": "long"}'])
def test_parse_schema_string_rejects_non_structs(text: str) -> None:
    with pytest.raises(ValueError, match="schemaString"):
        parse_schema_string(text)


def field(name: str, delta_type: str | dict, nullable: bool = True, metadata: dict | None = None) -> dict:
    return {"name": name, "type": delta_type, "nullable": nullable, "metadata": metadata or {}}


NESTED_SCHEMA = {
    "type": "struct",
    "fields": [
        *(field(f"p_{name.split('(')[0]}", name) for name, _ in PRIMITIVES),
        field("dec_spaces", "decimal(10,2)", False),
        field(
            "s",
            {
                "type": "struct",
                "fields": [
                    field("ntz", "timestamp_ntz", False, {"comment": "wall clock"}),
                    field("deep", {"type": "struct", "fields": [field("x", "long")]}),
                ],
            },
        ),
        field(
            "a",
            {
                "type": "array",
                "elementType": {"type": "array", "elementType": "date", "containsNull": False},
                "containsNull": True,
            },
        ),  # fmt: skip
        field("v", {"type": "array", "elementType": "variant", "containsNull": False}),
        field(
            "m",
            {
                "type": "map",
                "keyType": {"type": "array", "elementType": "string", "containsNull": False},
                "valueType": {"type": "struct", "fields": [field("y", "binary", False)]},
                "valueContainsNull": False,
            },
        ),  # fmt: skip
        field(
            "widened",
            "long",
            metadata={
                "delta.typeChanges": [{"toType": "long", "fromType": "integer", "tableVersion": 2}],
                "delta.columnMapping.id": 7,
                "__COLLATIONS": {"widened": "spark.UTF8_LCASE"},
                "delta.invariants": '{"expression": {"expression": "widened > 0"}}',
            },
        ),
    ],
}


def test_nested_schema_with_metadata_round_trips() -> None:
    arrow = delta_schema_to_arrow(NESTED_SCHEMA)
    assert arrow_schema_to_delta(arrow) == NESTED_SCHEMA
    assert arrow.field("dec_spaces").nullable is False
    assert arrow.field("s").type.field("ntz").type == pa.timestamp("us")
    assert arrow.field("a").type.value_type.value_field.nullable is False
    # Field metadata values are JSON-encoded, so strings keep their quotes and numbers do not get any.
    metadata = arrow.field("widened").metadata
    assert metadata[b"delta.columnMapping.id"] == b"7"
    assert json.loads(metadata[b"delta.typeChanges"]) == [
        {"toType": "long", "fromType": "integer", "tableVersion": 2}
    ]
    assert arrow.field("s").type.field("ntz").metadata == {b"comment": b'"wall clock"'}


@pytest.mark.parametrize("table", tables_with_schema())
def test_golden_schemas_round_trip(table: str) -> None:
    delta = golden_schema(table)
    assert arrow_schema_to_delta(delta_schema_to_arrow(delta)) == delta


@pytest.mark.parametrize(
    ("arrow", "delta"),
    [
        (pa.large_string(), "string"),
        (pa.string_view(), "string"),
        (pa.large_binary(), "binary"),
        (pa.binary_view(), "binary"),
        (pa.binary(16), "binary"),
        (pa.date64(), "date"),
        (pa.timestamp("s"), "timestamp_ntz"),
        (pa.timestamp("ns"), "timestamp_ntz"),
        (pa.timestamp("ms", tz="America/New_York"), "timestamp"),
        (pa.timestamp("ns", tz="UTC"), "timestamp"),
        (pa.decimal256(20, 3), "decimal(20,3)"),
        (pa.dictionary(pa.int32(), pa.string()), "string"),
        (pa.large_list(pa.int64()), {"type": "array", "elementType": "long", "containsNull": True}),
        (pa.list_(pa.int8(), 3), {"type": "array", "elementType": "byte", "containsNull": True}),
    ],
)
def test_wider_arrow_types_map_to_delta(arrow: pa.DataType, delta: str | dict) -> None:
    assert arrow_type_to_delta(arrow) == delta


@pytest.mark.parametrize(
    ("arrow_schema", "path"),
    [
        (pa.schema([("ok", pa.int32()), ("big", pa.uint64())]), "big"),
        (pa.schema([("d", pa.duration("s"))]), "d"),
        (pa.schema([("outer", pa.struct([("inner", pa.uint32())]))]), "outer.inner"),
        (pa.schema([("l", pa.list_(pa.float16()))]), "l.element"),
        (pa.schema([("wide", pa.decimal256(40, 0))]), "wide"),
    ],
)
def test_unsupported_arrow_types_name_the_column(arrow_schema: pa.Schema, path: str) -> None:
    with pytest.raises(ValueError, match=f"'{path}'"):
        arrow_schema_to_delta(arrow_schema)


def test_arrow_metadata_from_other_writers_is_read_back() -> None:
    # deltalake stores string metadata unencoded; Parquet/Arrow bookkeeping is not Delta column metadata.
    arrow = pa.schema(
        [pa.field("c", pa.int32(), metadata={"delta.columnMapping.physicalName": "col-1",
                                             "delta.columnMapping.id": "1", "PARQUET:field_id": "1"})]
    )  # fmt: skip
    meta = arrow_schema_to_delta(arrow)["fields"][0]["metadata"]
    assert meta == {"delta.columnMapping.physicalName": "col-1", "delta.columnMapping.id": 1}


# ------------------------------------------------------------ deltalake


@pytest.mark.parametrize(
    "table",
    [
        "parquet-all-types",
        "table-with-columnmapping-mode-name",
        "table-with-columnmapping-mode-id",
        "table-with-icebegCompatV2Enabled",
        "data-reader-partition-values",
        "data-reader-map",
        "data-reader-array-complex-objects",
        "decimal-various-scale-precision",
        "type-widening",
        "collations-preview-table",
        "dv-with-columnmapping",
    ],
)
def test_arrow_schema_agrees_with_deltalake(table: str) -> None:
    # as_large_types=False makes deltalake use string/binary/list as we do; no other normalising is needed
    # (deltalake also uses microsecond timestamps, "element" list fields and key/value map fields).
    theirs = pa.schema(
        deltalake.DeltaTable(str(GOLDEN / table / "delta")).schema().to_arrow(as_large_types=False)
    )
    ours = delta_schema_to_arrow(golden_schema(table))
    assert ours.names == theirs.names
    for mine, other in zip(ours, theirs, strict=True):
        assert mine.type == other.type, mine.name  # compares nested names, types and nullability
        assert mine.nullable == other.nullable


# ------------------------------------------------------------ column mapping


def test_column_mapping_mode() -> None:
    assert column_mapping_mode({}) == "none"
    assert column_mapping_mode({"delta.columnMapping.mode": "Name"}) == "name"
    assert column_mapping_mode(latest_metadata("table-with-columnmapping-mode-id")["configuration"]) == "id"
    assert (
        column_mapping_mode(latest_metadata("table-with-columnmapping-mode-name")["configuration"]) == "name"
    )
    assert column_mapping_mode(latest_metadata("parquet-all-types")["configuration"]) == "none"
    with pytest.raises(ValueError, match="bogus"):
        column_mapping_mode({"delta.columnMapping.mode": "bogus"})


def ids_and_names(arrow_type: pa.DataType, path: str = "") -> list[tuple[str, str, bytes | None]]:
    """(path, name, PARQUET:field_id) for every field below `arrow_type`, map entry structs skipped."""
    if pa.types.is_map(arrow_type):
        children = [arrow_type.key_field, arrow_type.item_field]
    elif pa.types.is_list(arrow_type):
        children = [arrow_type.value_field]
    elif pa.types.is_struct(arrow_type):
        children = list(arrow_type)
    else:
        return []
    result = []
    for child in children:
        field_id = (child.metadata or {}).get(b"PARQUET:field_id")
        result.append((path, child.name, field_id))
        result.extend(ids_and_names(child.type, f"{path}/{child.name}"))
    return result


@pytest.mark.parametrize(
    "table",
    [
        "table-with-columnmapping-mode-name",
        "table-with-columnmapping-mode-id",
        "table-with-icebegCompatV2Enabled",  # also numbers list elements and map keys/values
        "data-skipping-basic-stats-all-types-columnmapping-id",
    ],
)
def test_physical_schema_matches_spark_data_files(table: str) -> None:
    data_file = sorted((GOLDEN / table / "delta").glob("*.parquet"))[0]
    written = pq.read_schema(data_file)
    ours = delta_schema_to_arrow(golden_schema(table), physical=True)
    assert ids_and_names(pa.struct(list(ours))) == ids_and_names(pa.struct(list(written)))
    assert all(field.name.startswith("col-") for field in ours)


def test_physical_names_and_ids_from_golden_metadata() -> None:
    delta = golden_schema("table-with-columnmapping-mode-id")
    physical = delta_schema_to_arrow(delta, physical=True)
    byte_field = physical.field("col-adb3ab8f-9a6d-4f44-abb3-cf411d800e5f")
    assert byte_field.metadata[b"PARQUET:field_id"] == b"1"
    nested = physical.field("col-ab01c262-302d-4162-be9c-98d905966527").type  # nested_struct, id 13
    inner = nested.field("col-6551e960-1c32-4bf2-bd5b-1f57180d25f7").type  # nested_struct.ac, id 15
    assert inner.field(0).name == "col-c091fdeb-7cca-4849-912d-5f77fa400933"
    assert inner.field(0).metadata[b"PARQUET:field_id"] == b"16"
    logical = delta_schema_to_arrow(delta)
    assert logical.names[:2] == ["ByteType", "ShortType"]
    assert b"PARQUET:field_id" not in logical.field("ByteType").metadata
    assert physical_name(delta["fields"][0], "none") == "ByteType"
    assert physical_name(delta["fields"][0], "id") == "col-adb3ab8f-9a6d-4f44-abb3-cf411d800e5f"
    # Without column mapping metadata the physical name is the logical one.
    assert delta_schema_to_arrow(golden_schema("parquet-all-types"), physical=True).names[0] == "ByteType"


def test_physical_partition_names_match_add_actions() -> None:
    table = "dv-with-columnmapping"
    metadata = latest_metadata(table)
    delta = parse_schema_string(metadata["schemaString"])
    names = physical_partition_names(
        delta, metadata["partitionColumns"], column_mapping_mode(metadata["configuration"])
    )
    keys = {key for a in log_actions(table) if "add" in a for key in a["add"]["partitionValues"]}
    assert names == {"part": "col-60c949ca-b8bc-4330-b931-b73fb4c60037"}
    assert set(names.values()) == keys
    assert physical_partition_names(delta, ["PART"], "none") == {"PART": "part"}
    with pytest.raises(ValueError, match="nope"):
        physical_partition_names(delta, ["nope"], "name")


# ------------------------------------------------------------ partition values

TS = dt.datetime(2021, 9, 8, 11, 11, 11, tzinfo=UTC)
SCALAR_CASES = [
    ("0", "integer", 0),
    ("-128", "byte", -128),
    ("32767", "short", 32767),
    ("9223372036854775807", "long", 2**63 - 1),
    ("+5", "long", 5),
    ("1.5", "double", 1.5),
    ("1.0E10", "double", 1e10),
    ("-Infinity", "float", -math.inf),
    ("true", "boolean", True),
    ("FALSE", "boolean", False),
    ("2021-09-08", "date", dt.date(2021, 9, 8)),
    ("2021-9-8", "date", dt.date(2021, 9, 8)),
    ("2021-09-08 11:11:11", "timestamp", TS),
    ("2021-09-08 11:11:11.123456", "timestamp", TS.replace(microsecond=123456)),
    ("2021-09-08 11:11:11.5", "timestamp", TS.replace(microsecond=500000)),
    ("2021-09-08T11:11:11.000000Z", "timestamp", TS),
    ("2021-09-08T12:41:11+01:30", "timestamp", TS),
    ("2021-09-08T11:11:11.123456789Z", "timestamp", TS.replace(microsecond=123456)),
    ("2021-09-08 11:11:11", "timestamp_ntz", TS.replace(tzinfo=None)),
    ("abc", "string", "abc"),
    ("null", "string", "null"),  # only JSON null is null; the word stays a string
    (" ", "string", " "),
    ("\u0001\u0002é", "binary", b"\x01\x02\xc3\xa9"),
    ("123.45", "decimal(10, 2)", Decimal("123.45")),
    ("5", "decimal(10,2)", Decimal("5.00")),
    ("-0.1", "decimal(3,1)", Decimal("-0.1")),
]
ALL_PARTITION_TYPES = ["string", "binary", "long", "integer", "short", "byte", "float", "double", "boolean",
                       "date", "timestamp", "timestamp_ntz", "decimal(10,2)"]  # fmt: skip


@pytest.mark.parametrize(("value", "delta_type", "expected"), SCALAR_CASES)
def test_parse_partition_value(value: str, delta_type: str, expected: object) -> None:
    parsed = parse_partition_value(value, delta_type)
    assert parsed == expected and type(parsed) is type(expected)
    if isinstance(expected, dt.datetime):
        assert parsed.tzinfo == expected.tzinfo


@pytest.mark.parametrize("delta_type", ALL_PARTITION_TYPES)
def test_null_and_empty_partition_values_are_null(delta_type: str) -> None:
    assert parse_partition_value(None, delta_type) is None
    assert parse_partition_value("", delta_type) is None
    parsed = parse_partition_values(pa.array([None, "", None], pa.string()), delta_type)
    assert parsed.null_count == 3 and parsed.type == delta_type_to_arrow(delta_type)


@pytest.mark.parametrize(
    ("value", "delta_type"),
    [("128", "byte"), ("1.5", "integer"), ("1_000", "long"), ("maybe", "boolean"), ("2024-13-01", "date"),
     ("yesterday", "timestamp"), ("1.234", "decimal(10,2)"), ("123456789012", "decimal(10,2)")],
)  # fmt: skip
def test_invalid_partition_values_raise(value: str, delta_type: str) -> None:
    with pytest.raises(ValueError):
        parse_partition_value(value, delta_type)
    with pytest.raises(ValueError):
        parse_partition_values(
            pa.array(["1", value] if delta_type != "boolean" else ["true", value]), delta_type
        )


def test_unsupported_partition_type() -> None:
    with pytest.raises(ValueError, match="not supported"):
        parse_partition_value("x", "variant")
    with pytest.raises(ValueError, match="not supported"):
        parse_partition_value(None, {"type": "array", "elementType": "long", "containsNull": True})


VECTOR_INPUTS = {
    "string": ["a", "", None, "null", " x "],
    "binary": ["\u0001", "é", "", None],
    "long": ["0", "-9223372036854775808", "+7", " 8 ", None, ""],
    "integer": ["2147483647", "-1", "+3", None],
    "short": ["-32768", "12", None],
    "byte": ["127", "-128", "+1", None],
    "float": ["1.5", "0.1", "-2.5e3", "Infinity", "inf", " 2.0", None],
    "double": ["0.0", "1.0E10", ".5", "-Infinity", "1e-300", "+4", None],
    "boolean": ["true", "false", "TRUE", "False", None, ""],
    "date": ["2021-09-08", "1970-01-01", "2024-1-5", "0001-01-01", None],
    "timestamp": ["2021-09-08 11:11:11", "2021-09-08T11:11:11.000000Z", "2021-09-08 11:11:11.123",
                  "2021-09-08T12:41:11+01:30", "2021-09-08 1:2:3", "2021-09-08T11:11:11.123456789Z",
                  None, ""],
    "timestamp_ntz": ["2021-09-08 11:11:11", "2021-09-08 11:11:11.000001", "2021-09-08T11:11:11", "2021-9-8",
                      None],
    "decimal(10,2)": ["1.5", "-0.25", "12345678.99", "1E+2", "+3", "0", None],
}  # fmt: skip


@pytest.mark.parametrize("delta_type", sorted(VECTOR_INPUTS))
def test_vectorised_partition_parsing_matches_scalar(delta_type: str) -> None:
    inputs = VECTOR_INPUTS[delta_type]
    target = delta_type_to_arrow(delta_type)
    scalar = pa.array([parse_partition_value(value, delta_type) for value in inputs], type=target)
    vector = parse_partition_values(pa.array(inputs, pa.string()), delta_type)
    assert vector.type == target
    assert vector.equals(scalar), (vector, scalar)
    chunked = parse_partition_values(pa.chunked_array([inputs[:2], inputs[2:]], pa.string()), delta_type)
    assert chunked.combine_chunks().equals(scalar)


def test_vectorised_nan_partition_values() -> None:
    parsed = parse_partition_values(pa.array(["NaN", "1"]), "double").to_pylist()
    assert math.isnan(parsed[0]) and parsed[1] == 1.0
    assert math.isnan(parse_partition_value("NaN", "double"))


def test_golden_partition_values_agree_with_spark_output() -> None:
    table = "data-reader-partition-values"
    metadata = latest_metadata(table)
    types = {f["name"]: f["type"] for f in parse_schema_string(metadata["schemaString"])["fields"]}
    columns = metadata["partitionColumns"]
    partitions = [a["add"]["partitionValues"] for a in log_actions(table) if "add" in a]
    parsed = {
        column: parse_partition_values(pa.array([p[column] for p in partitions], pa.string()), types[column])
        for column in columns
    }
    for column in columns:  # vectorised and scalar agree on real log values too
        scalar = [parse_partition_value(p[column], types[column]) for p in partitions]
        assert parsed[column].equals(pa.array(scalar, parsed[column].type))
    ours = {tuple(row[c] for c in columns) for row in pa.table(parsed).to_pylist()}
    expected_rows = pq.read_table(GOLDEN / table / "expected").select(columns).to_pylist()
    # The golden writer ran with session time zone America/Los_Angeles (PDT, UTC-7) and wrote the local
    # wall time "2021-09-08 11:11:11"; the log cannot tell us that, so we read it as UTC - 7 hours early.
    ts_index = columns.index("as_timestamp")
    shifted = set()
    for row in expected_rows:
        values = [row[c] for c in columns]
        if values[ts_index] is not None:
            values[ts_index] -= dt.timedelta(hours=7)
        shifted.add(tuple(values))
    assert ours == shifted
    assert len(ours) == 3


def test_partition_values_parsed_in_spark_checkpoint() -> None:
    # Delta Spark wrote `partitionValues_parsed` in this checkpoint: a typed oracle under column mapping.
    table = "dv-with-columnmapping"
    metadata = latest_metadata(table)
    delta = parse_schema_string(metadata["schemaString"])
    physical = physical_partition_names(delta, metadata["partitionColumns"], "name")["part"]
    checkpoint = GOLDEN / table / "delta" / "_delta_log" / "00000000000000000010.checkpoint.parquet"
    adds = pq.read_table(checkpoint, columns=["add"]).column("add").combine_chunks()
    adds = adds.filter(adds.is_valid())
    raw = pa.array([dict(m)[physical] for m in adds.field("partitionValues").to_pylist()], pa.string())
    assert len(raw) > 5
    assert parse_partition_values(raw, "integer").equals(adds.field("partitionValues_parsed").field(physical))


PLUS_TWO = dt.timezone(dt.timedelta(hours=2))
SERIALIZE_CASES = [
    (dt.date(2024, 1, 5), "date", "2024-01-05"),
    (dt.datetime(2024, 1, 1, 2, tzinfo=PLUS_TWO), "timestamp", "2024-01-01 00:00:00.000000"),
    (dt.datetime(2024, 1, 1, 12, 30, 45, 123), "timestamp", "2024-01-01 12:30:45.000123"),
    (dt.datetime(2024, 1, 1, 12, 30, 45, 123), "timestamp_ntz", "2024-01-01 12:30:45.000123"),
    (True, "boolean", "true"),
    (False, "boolean", "false"),
    (Decimal("1E+2"), "decimal(10,2)", "100"),
    (Decimal("1.50"), "decimal(10,2)", "1.50"),
    (0.1, "decimal(10,2)", "0.1"),
    (float("nan"), "double", "NaN"),
    (float("-inf"), "float", "-Infinity"),
    (7, "long", "7"),
    (b"\x01\x02", "binary", "\u0001\u0002"),
    ("", "string", None),  # the spec reads "" as null; Delta Spark records null for it
    (b"", "binary", None),
    (None, "integer", None),
    (pa.scalar(5, pa.int32()), "integer", "5"),
    (pa.scalar(None, pa.int32()), "integer", None),
]  # fmt: skip


@pytest.mark.parametrize(("value", "delta_type", "expected"), SERIALIZE_CASES)
def test_serialize_partition_value(value: object, delta_type: str, expected: str | None) -> None:
    assert serialize_partition_value(value, delta_type) == expected


@pytest.mark.parametrize(
    ("value", "delta_type"),
    [(dt.datetime(2024, 1, 1, tzinfo=UTC), "timestamp_ntz"), (1.5, "integer"), (b"\xff", "binary"),
     ("yes", "boolean"), (dt.datetime(2024, 1, 1), "date"), (dt.date(2024, 1, 1), "timestamp")],
)  # fmt: skip
def test_serialize_rejects_values_that_do_not_fit(value: object, delta_type: str) -> None:
    with pytest.raises(ValueError):
        serialize_partition_value(value, delta_type)


ROUND_TRIP_VALUES = {
    "string": ["a b", "ü", "null"],
    "binary": [b"\x00\x01", "é".encode()],
    "long": [-(2**63), 2**63 - 1],
    "integer": [-(2**31), 0],
    "short": [-32768],
    "byte": [127],
    "float": [1.5, -0.25, math.inf],
    "double": [0.1, 1e300, -5e-324],
    "boolean": [True, False],
    "date": [dt.date(1, 1, 1), dt.date(9999, 12, 31)],
    "timestamp": [
        dt.datetime(1970, 1, 1, tzinfo=UTC),
        dt.datetime(2024, 2, 29, 23, 59, 59, 999999, tzinfo=UTC),
    ],
    "timestamp_ntz": [dt.datetime(2000, 1, 1, 0, 0, 0, 1)],
    "decimal(10,2)": [Decimal("-12345678.90"), Decimal("0.01")],
}


@pytest.mark.parametrize("delta_type", sorted(ROUND_TRIP_VALUES))
def test_serialize_then_parse_round_trips(delta_type: str) -> None:
    values = ROUND_TRIP_VALUES[delta_type]
    written = [serialize_partition_value(value, delta_type) for value in values]
    assert [parse_partition_value(text, delta_type) for text in written] == values
    vector = parse_partition_values(pa.array(written, pa.string()), delta_type)
    assert vector.equals(pa.array(values, type=delta_type_to_arrow(delta_type)))


# ------------------------------------------------------------ stats


def names(struct_type: pa.DataType) -> list:
    """Field names of a struct type, nested structs as (name, [children])."""
    return [(f.name, names(f.type)) if pa.types.is_struct(f.type) else f.name for f in struct_type]


ALL_TYPES_LEAVES = ["ByteType", "ShortType", "IntegerType", "LongType", "FloatType", "DoubleType", "decimal",
                    "BooleanType", "StringType", "BinaryType", "DateType", "TimestampType",
                    "TimestampNTZType"]  # fmt: skip
NESTED_STATS = ("nested_struct", ["aa", ("ac", ["aca"])])
COLLECTIONS = ["array_of_prims", "array_of_arrays", "array_of_structs", "map_of_prims", "map_of_rows",
               "map_of_arrays"]  # fmt: skip


def test_stats_schema_types_follow_delta_spark() -> None:
    stats = stats_schema(golden_schema("parquet-all-types"))
    assert names(stats)[0] == "numRecords" and stats.field("numRecords").type == pa.int64()
    assert stats.field("tightBounds").type == pa.bool_()
    no_min_max = {"BooleanType", "BinaryType"}
    expected_min_max = [n for n in ALL_TYPES_LEAVES if n not in no_min_max] + [NESTED_STATS]
    assert names(stats.field("minValues").type) == expected_min_max
    assert stats.field("maxValues").type == stats.field("minValues").type
    assert names(stats.field("nullCount").type) == [*ALL_TYPES_LEAVES, NESTED_STATS, *COLLECTIONS]
    min_values = stats.field("minValues").type
    assert min_values.field("decimal").type == pa.decimal128(10, 2)
    assert min_values.field("TimestampType").type == pa.timestamp("us", tz="UTC")
    assert min_values.field("TimestampNTZType").type == pa.timestamp("us")
    null_count = stats.field("nullCount").type
    assert {null_count.field(n).type for n in ALL_TYPES_LEAVES + COLLECTIONS} == {pa.int64()}


@pytest.mark.parametrize(
    ("kwargs", "min_values", "null_count"),
    [
        ({"num_indexed_cols": 3}, ["ByteType", "ShortType", "IntegerType"],
         ["ByteType", "ShortType", "IntegerType"]),
        ({"num_indexed_cols": 3, "partition_columns": ["bytetype"]}, ["ShortType", "IntegerType", "LongType"],
         ["ShortType", "IntegerType", "LongType"]),
        ({"num_indexed_cols": 14},
         [*ALL_TYPES_LEAVES[:7], *ALL_TYPES_LEAVES[8:9], *ALL_TYPES_LEAVES[10:], ("nested_struct", ["aa"])],
         [*ALL_TYPES_LEAVES, ("nested_struct", ["aa"])]),
        ({"num_indexed_cols": 16}, None, [*ALL_TYPES_LEAVES, NESTED_STATS, "array_of_prims"]),
        ({"num_indexed_cols": 0}, [], []),
        ({"num_indexed_cols": -1}, None, [*ALL_TYPES_LEAVES, NESTED_STATS, *COLLECTIONS]),
        ({"num_indexed_cols": 1, "stats_columns": ["longtype", "nested_struct.ac", "map_of_rows"]},
         ["LongType", ("nested_struct", [("ac", ["aca"])])],
         ["LongType", ("nested_struct", [("ac", ["aca"])]), "map_of_rows"]),
        ({"stats_columns": "`LongType`,nested_struct.aa , BooleanType"},
         ["LongType", ("nested_struct", ["aa"])], ["LongType", "BooleanType", ("nested_struct", ["aa"])]),
    ],
)  # fmt: skip
def test_stats_schema_indexed_columns(kwargs: dict, min_values: list | None, null_count: list) -> None:
    stats = stats_schema(golden_schema("parquet-all-types"), **kwargs)
    if min_values is not None:
        assert names(stats.field("minValues").type) == min_values
    assert names(stats.field("nullCount").type) == null_count


def test_stats_columns_quoting_with_dots_in_names() -> None:
    delta = {"type": "struct", "fields": [field("a.b", "long"), field("a", {"type": "struct", "fields": [
        field("b", "long"), field("c`d", "string")]})]}  # fmt: skip
    assert names(stats_schema(delta, stats_columns=["`a.b`"]).field("minValues").type) == ["a.b"]
    assert names(stats_schema(delta, stats_columns=["a.b"]).field("minValues").type) == [("a", ["b"])]
    assert names(stats_schema(delta, stats_columns="a.`c``d`").field("minValues").type) == [("a", ["c`d"])]


def stats_strings(table: str) -> list[str]:
    return [a["add"]["stats"] for a in log_actions(table) if "add" in a and a["add"].get("stats")]


@pytest.mark.parametrize(
    "table",
    ["data-skipping-basic-stats-all-types", "data-skipping-basic-stats-all-types-columnmapping-name",
     "data-skipping-basic-stats-all-types-columnmapping-id", "dv-with-columnmapping", "parquet-all-types"],
)  # fmt: skip
def test_stats_schema_names_match_spark_stats_keys(table: str) -> None:
    metadata = latest_metadata(table)
    mode = column_mapping_mode(metadata["configuration"])
    stats = stats_schema(
        parse_schema_string(metadata["schemaString"]),
        mode=mode,
        partition_columns=metadata["partitionColumns"],
    )

    def json_names(obj: dict) -> list:
        return [(k, json_names(v)) if isinstance(v, dict) else k for k, v in obj.items()]

    for text in stats_strings(table):
        written = json.loads(text)
        for key in ("minValues", "maxValues", "nullCount"):
            if key in written:  # Spark omits min/max for a file with only nulls
                assert sorted(map(str, names(stats.field(key).type))) == sorted(
                    map(str, json_names(written[key]))
                )


def expected_leaf(value: object, arrow_type: pa.DataType) -> object:
    """What a JSON stats value should parse to, computed with the standard library only."""
    if value is None:
        return None
    if pa.types.is_struct(arrow_type):
        return {f.name: expected_leaf(value.get(f.name), f.type) for f in arrow_type}
    if pa.types.is_date(arrow_type):
        return dt.date.fromisoformat(value)
    if pa.types.is_timestamp(arrow_type):
        parsed = dt.datetime.fromisoformat(value)
        if arrow_type.tz is None:
            return parsed
        return (parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)).astimezone(UTC)
    if pa.types.is_float32(arrow_type):
        return struct.unpack("f", struct.pack("f", float(value)))[0]
    if pa.types.is_floating(arrow_type):
        return float(value)
    if pa.types.is_decimal(arrow_type):
        return Decimal(str(value))
    return value


STATS_TABLES = [t for t in tables_with_schema() if stats_strings(t)]


@pytest.mark.parametrize("table", STATS_TABLES)
def test_parse_golden_stats(table: str) -> None:
    metadata = latest_metadata(table)
    mode = column_mapping_mode(metadata["configuration"])
    stats_type = stats_schema(
        parse_schema_string(metadata["schemaString"]),
        mode=mode,
        partition_columns=metadata["partitionColumns"],
        num_indexed_cols=-1,
    )
    texts = stats_strings(table)
    parsed = parse_stats(pa.array(texts, pa.string()), stats_type)
    assert parsed.type == stats_type and len(parsed) == len(texts)
    for text, row in zip(texts, parsed.to_pylist(), strict=True):
        written = json.loads(text, parse_float=Decimal)
        assert row == expected_leaf(written, stats_type)


def test_parse_stats_exact_values_all_types() -> None:
    stats_type = stats_schema(golden_schema("data-skipping-basic-stats-all-types"))
    (row,) = parse_stats(
        pa.array(stats_strings("data-skipping-basic-stats-all-types")), stats_type
    ).to_pylist()
    assert row["numRecords"] == 1
    # Written as "2000-01-01T00:00:00.000-08:00" by a writer in America/Los_Angeles.
    assert row["minValues"]["as_timestamp"] == dt.datetime(2000, 1, 1, 8, tzinfo=UTC)
    assert row["maxValues"]["as_date"] == dt.date(2000, 1, 1)
    assert row["minValues"]["as_string"] == "0"
    assert row["minValues"]["as_big_decimal"] == Decimal(0)
    assert row["nullCount"]["as_float"] == 0
    assert row["tightBounds"] is None  # not written by Delta 3.1 here


def test_parse_stats_after_type_widening() -> None:
    # Written before byte->long, float->double, decimal(10,2)->decimal(20,5) and date->timestamp_ntz.
    stats_type = stats_schema(golden_schema("type-widening"))
    first = stats_strings("type-widening")[0]
    (row,) = parse_stats(pa.array([first]), stats_type).to_pylist()
    assert row["minValues"]["byte_long"] == 1
    assert row["minValues"]["float_double"] == pytest.approx(3.4)
    assert row["minValues"]["decimal_decimal_greater_scale"] == Decimal("67.89")
    assert row["maxValues"]["date_timestamp_ntz"] == dt.datetime(2024, 9, 9)


STATS_TYPE = pa.struct(
    [
        ("numRecords", pa.int64()),
        ("minValues", pa.struct([("i", pa.int8()), ("d", pa.date32()), ("s", pa.string()),
                                 ("ts", pa.timestamp("us", "UTC")),
                                 ("n", pa.struct([("x", pa.decimal128(5, 2))]))])),
        ("nullCount", pa.struct([("i", pa.int64())])),
        ("tightBounds", pa.bool_()),
    ]
)  # fmt: skip
GOOD = '{"numRecords":3,"minValues":{"i":-1,"d":"2024-02-29","s":"a","ts":"2024-01-01T00:00:00.000Z","n":{"x":1.5}},"nullCount":{"i":0},"tightBounds":true}'  # noqa: E501
GOOD_ROW = {
    "numRecords": 3,
    "minValues": {"i": -1, "d": dt.date(2024, 2, 29), "s": "a", "ts": dt.datetime(2024, 1, 1, tzinfo=UTC),
                  "n": {"x": Decimal("1.50")}},
    "nullCount": {"i": 0},
    "tightBounds": True,
}  # fmt: skip


def test_parse_stats_tolerates_nulls_and_bad_values() -> None:
    bad_leaves = '{"numRecords":"many","minValues":{"i":300,"d":"2024-13-01","s":5,"ts":"noon","n":{"x":1.234}},"nullCount":{"i":2}}'  # noqa: E501
    wrong_shapes = '{"numRecords":1,"minValues":{"i":[1],"n":7},"nullCount":5,"tightBounds":"yes"}'
    pretty = json.dumps(json.loads(GOOD), indent=2)  # raw newlines between tokens
    unknown_only = '{"extra":{"deep":[1,{"a":2}]}}'
    inputs = [GOOD, None, "", "{", bad_leaves, "[]", wrong_shapes, pretty, unknown_only, GOOD]
    rows = parse_stats(pa.array(inputs, pa.string()), STATS_TYPE).to_pylist()
    empty_min = {"i": None, "d": None, "s": None, "ts": None, "n": None}
    assert rows == [
        GOOD_ROW,
        None,
        None,
        None,  # broken JSON
        {"numRecords": None, "minValues": {**empty_min, "n": {"x": None}}, "nullCount": {"i": 2},
         "tightBounds": None},
        None,  # not an object
        {"numRecords": 1, "minValues": empty_min, "nullCount": None, "tightBounds": None},
        GOOD_ROW,
        {"numRecords": None, "minValues": None, "nullCount": None, "tightBounds": None},
        GOOD_ROW,
    ]  # fmt: skip


def test_parse_stats_isolates_bad_rows_without_python_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    loads_calls = []
    real_loads = schema_module._loads
    monkeypatch.setattr(schema_module, "_loads", lambda line: loads_calls.append(line) or real_loads(line))
    inputs = [GOOD] * 5000
    inputs[2345] = GOOD.replace('"i":-1', '"i":-300')
    parsed = parse_stats(pa.chunked_array([inputs[:100], inputs[100:]], pa.string()), STATS_TYPE)
    rows = parsed.to_pylist()
    assert len(rows) == 5000
    assert rows[2345]["minValues"]["i"] is None and rows[2345]["minValues"]["s"] == "a"
    assert all(row == GOOD_ROW for i, row in enumerate(rows) if i != 2345)
    assert 0 < len(loads_calls) <= 16  # only the small block around the bad row went through Python


def test_parse_stats_edge_inputs() -> None:
    assert len(parse_stats(pa.array([], pa.string()), STATS_TYPE)) == 0
    rows = parse_stats(pa.array([None, None], pa.large_string()), STATS_TYPE)
    assert rows.null_count == 2 and rows.type == STATS_TYPE
    big = '{"numRecords":1,"minValues":{"s":"' + "x" * (3 << 20) + '"}}'  # longer than the default JSON block
    assert parse_stats(pa.array([big, GOOD]), STATS_TYPE)[0]["minValues"]["s"].as_py() == "x" * (3 << 20)
