"""Delta table schemas as the protocol's appendix defines them ("Schema Serialization Format").

A Delta schema stays what the log stores: the parsed JSON dict of `metaData.schemaString`, so that nothing
is lost between reading a commit and writing the next one. This module turns it into Arrow types for
readers and writers and back, and resolves column-mapping physical names ("Column Mapping"). Partition
values live in ``partition_values``, per-file statistics in ``stats``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

import pyarrow as pa

from ..base.errors import shown

_PRIMITIVES: dict[str, pa.DataType] = {
    "string": pa.string(), "long": pa.int64(), "integer": pa.int32(), "short": pa.int16(), "byte": pa.int8(),
    "float": pa.float32(), "double": pa.float64(), "boolean": pa.bool_(), "binary": pa.binary(),
    "date": pa.date32(), "timestamp": pa.timestamp("us", tz="UTC"), "timestamp_ntz": pa.timestamp("us"),
    "void": pa.null(), "null": pa.null(),
}  # fmt: skip
# Spark stores a variant as two binaries; pyarrow has no variant type, so the bare struct stands in for it.
_VARIANT = pa.struct([pa.field("value", pa.binary(), False), pa.field("metadata", pa.binary(), False)])
_DECIMAL_RE = re.compile(r"^decimal\s*(?:\(\s*(\d+)\s*,\s*(\d+)\s*\))?$")
_MAX_DECIMAL_PRECISION = 38  # "Primitive Types": precision and scale can be up to 38

CM_ID = "delta.columnMapping.id"
CM_PHYSICAL_NAME = "delta.columnMapping.physicalName"
# IcebergCompat writers also number list elements and map keys/values: "<physical>.element", ".key", ...
CM_NESTED_IDS = "delta.columnMapping.nested.ids"
PARQUET_FIELD_ID = b"PARQUET:field_id"
# Field metadata that gives a column a role ("Column Invariants", "Generated Columns", "Identity Columns",
# "Default Columns", "Type Change Metadata"); what a table does with them is its configuration's business.
INVARIANTS = "delta.invariants"
GENERATION = "delta.generationExpression"
IDENTITY_PREFIX = "delta.identity."
CURRENT_DEFAULT = "CURRENT_DEFAULT"
TYPE_CHANGES = "delta.typeChanges"
COLLATIONS = "__COLLATIONS"


# ------------------------------------------------------- Delta -> Arrow ("Schema Serialization Format")


def parse_schema_string(schema_string: str) -> dict:
    """Parse `metaData.schemaString` and check its shape, so that callers fail at load time.

    Refused: text that is not JSON, JSON that is not a struct, fields that are not objects with a string
    name and a type, unknown types (also nested in arrays, maps and structs), and two fields of one struct
    whose names differ only in case (Spark resolves column names case-insensitively, so it refuses them
    too). The ``ValueError`` names the field.
    """
    try:
        schema = json.loads(schema_string)
    except (TypeError, ValueError, RecursionError) as exc:
        raise ValueError(f"schemaString is not valid JSON: {exc}") from exc
    if (
        not isinstance(schema, dict)
        or schema.get("type") != "struct"
        or not isinstance(schema.get("fields"), list)
    ):
        raise ValueError(f"schemaString must encode a struct type, got: {str(schema_string)[:200]!r}")
    _check_struct(schema, "")
    return schema


def _check_struct(struct: dict, path: str) -> None:
    fields = struct.get("fields")
    if not isinstance(fields, list):
        raise ValueError(f"struct {path or '<root>'} must have a list of fields, not {shown(fields)}")
    seen: dict[str, str] = {}
    for i, field in enumerate(fields):
        if not isinstance(field, dict) or not isinstance(field.get("name"), str) or "type" not in field:
            raise ValueError(
                f"field #{i} of {path or 'the schema'} must be an object with a name and a type, "
                f"not {shown(field)}"
            )
        name = field["name"]
        where = f"{path}.{name}" if path else name
        if name.lower() in seen:
            raise ValueError(
                f"duplicate column {where!r}: {seen[name.lower()]!r} differs only in case or not at all"
            )
        seen[name.lower()] = name
        if not isinstance(field.get("nullable", True), bool):
            raise ValueError(
                f"column {where!r}: nullable must be true or false, not {shown(field['nullable'])}"
            )
        metadata = field.get("metadata")
        if metadata is not None and not isinstance(metadata, dict):
            raise ValueError(f"column {where!r}: metadata must be an object, not {shown(metadata)}")
        metadata = metadata or {}
        if not isinstance(metadata.get(CM_PHYSICAL_NAME, ""), str) or not isinstance(
            metadata.get(CM_NESTED_IDS, {}), dict
        ):
            raise ValueError(f"column {where!r}: malformed column mapping metadata {shown(metadata)}")
        _check_type(field["type"], where)


def _check_type(delta_type: Any, path: str) -> None:
    if isinstance(delta_type, str):
        try:
            if delta_type in _PRIMITIVES or delta_type == "variant" or decimal_params(delta_type) is not None:
                return
        except ValueError as exc:  # a decimal beyond precision 38
            raise ValueError(f"column {path!r}: {exc}") from None
        raise ValueError(f"column {path!r} has the unknown type {delta_type!r}")
    kind = delta_type.get("type") if isinstance(delta_type, dict) else None
    if kind == "struct":
        _check_struct(delta_type, path)
    elif kind == "array" and "elementType" in delta_type:
        _check_type(delta_type["elementType"], f"{path}.element")
    elif kind == "map" and "keyType" in delta_type and "valueType" in delta_type:
        _check_type(delta_type["keyType"], f"{path}.key")
        _check_type(delta_type["valueType"], f"{path}.value")
    else:
        raise ValueError(f"column {path!r} has the unknown or malformed type {shown(delta_type)}")
    for flag in ("containsNull", "valueContainsNull"):
        if not isinstance(delta_type.get(flag, True), bool):
            raise ValueError(f"column {path!r}: {flag} must be true or false")


# Types a partition value can be serialised for ("Partition Value Serialization"), decimals aside.
_PARTITION_TYPES = frozenset(
    {"string", "binary", "boolean", "byte", "short", "integer", "long", "float", "double", "date",
     "timestamp", "timestamp_ntz"}
)  # fmt: skip


def check_partition_columns(schema: dict, partition_columns: Sequence[str]) -> None:
    """Every partition column is a top-level column of a type partition values can hold ("Partition
    Value Serialization"); names resolve case-insensitively, as in Spark."""
    by_lower = {field["name"].lower(): field for field in schema["fields"]}
    for column in partition_columns:
        field = by_lower.get(column.lower())
        if field is None:
            raise ValueError(f"partition column {column!r} is not in the table schema")
        kind = field["type"]
        if not isinstance(kind, str) or not (kind in _PARTITION_TYPES or decimal_params(kind)):
            raise ValueError(
                f"partition column {column!r} has type {shown(kind)}, which cannot be partitioned by"
            )


def decimal_params(name: str) -> tuple[int, int] | None:
    match = _DECIMAL_RE.match(name.strip())
    if match is None:
        return None
    # A bare "decimal" is Spark's default, decimal(10,0).
    precision, scale = (int(match[1]), int(match[2])) if match[1] else (10, 0)
    if not 0 < precision <= _MAX_DECIMAL_PRECISION or scale > precision:
        raise ValueError(f"invalid decimal type {name!r}: precision must be 1..38 and scale <= precision")
    return precision, scale


def delta_type_to_arrow(delta_type: str | dict) -> pa.DataType:
    """The Arrow type for a Delta type: a primitive name or a struct/array/map dict.

    `timestamp` is an instant, hence UTC; `timestamp_ntz` is wall-clock time, hence naive. `variant` becomes
    the two-binary struct Delta Spark writes to Parquet, as pyarrow has no variant type of its own.
    """
    return _to_arrow(delta_type, physical=False, nested_ids={}, path="")


def delta_schema_to_arrow(schema: dict, *, physical: bool = False) -> pa.Schema:
    """The Arrow schema of a Delta schema, keeping nullability and field metadata (JSON-encoded values).

    With `physical=True` names are the column-mapping physical names and `PARQUET:field_id` carries
    `delta.columnMapping.id`: the names and ids a writer must put in data files ("Writer Requirements for
    Column Mapping"). Without column mapping the physical name is the logical one.
    """
    return pa.schema([_field_to_arrow(field, physical) for field in schema["fields"]])


def _field_to_arrow(field: dict, physical: bool) -> pa.Field:
    metadata = field.get("metadata") or {}
    name = metadata.get(CM_PHYSICAL_NAME, field["name"]) if physical else field["name"]
    arrow_meta = {
        key.encode(): json.dumps(value, separators=(",", ":")).encode() for key, value in metadata.items()
    }
    if physical and CM_ID in metadata:
        arrow_meta[PARQUET_FIELD_ID] = str(metadata[CM_ID]).encode()
    nested_ids = metadata.get(CM_NESTED_IDS, {}) if physical else {}
    arrow_type = _to_arrow(field["type"], physical, nested_ids, name)
    return pa.field(name, arrow_type, nullable=field.get("nullable", True), metadata=arrow_meta or None)


def _to_arrow(delta_type: str | dict, physical: bool, nested_ids: dict, path: str) -> pa.DataType:
    if isinstance(delta_type, str):
        if delta_type in _PRIMITIVES:
            return _PRIMITIVES[delta_type]
        if delta_type == "variant":
            return _VARIANT
        params = decimal_params(delta_type)
        if params is None:
            raise ValueError(f"unknown Delta type {delta_type!r}")
        return pa.decimal128(*params)
    kind = delta_type.get("type") if isinstance(delta_type, dict) else None
    if kind == "struct":
        return pa.struct([_field_to_arrow(field, physical) for field in delta_type["fields"]])
    if kind == "array":
        element = _child(delta_type["elementType"], "element", delta_type.get("containsNull", True),
                         physical, nested_ids, path)  # fmt: skip
        return pa.list_(element)
    if kind == "map":
        key = _child(delta_type["keyType"], "key", False, physical, nested_ids, path)
        value = _child(delta_type["valueType"], "value", delta_type.get("valueContainsNull", True),
                       physical, nested_ids, path)  # fmt: skip
        return pa.map_(key, value)
    raise ValueError(f"unknown Delta type {json.dumps(delta_type)[:200]}")


def _child(
    delta_type: str | dict, name: str, nullable: bool, physical: bool, nested_ids: dict, path: str
) -> pa.Field:
    """A list element or map key/value; in physical mode it gets its IcebergCompat nested id, if any."""
    child_path = f"{path}.{name}"
    field_id = nested_ids.get(child_path)
    metadata = {PARQUET_FIELD_ID: str(field_id).encode()} if field_id is not None else None
    return pa.field(
        name, _to_arrow(delta_type, physical, nested_ids, child_path), nullable, metadata=metadata
    )


# ------------------------------------------------------- Arrow -> Delta (creating tables)

_ARROW_SIMPLE = [
    (pa.types.is_int8, "byte"), (pa.types.is_int16, "short"), (pa.types.is_int32, "integer"),
    (pa.types.is_int64, "long"), (pa.types.is_float32, "float"), (pa.types.is_float64, "double"),
    (pa.types.is_boolean, "boolean"), (pa.types.is_date, "date"), (pa.types.is_null, "void"),
    (lambda t: pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t), "string"),
    (lambda t: pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_binary_view(t)
     or pa.types.is_fixed_size_binary(t), "binary"),
]  # fmt: skip
_ARROW_LISTS = (pa.types.is_list, pa.types.is_large_list, pa.types.is_list_view, pa.types.is_fixed_size_list)


def arrow_type_to_delta(t: pa.DataType) -> str | dict:
    """The Delta type for an Arrow type; the inverse of `delta_type_to_arrow` up to Arrow's wider choice."""
    return _from_arrow(t, "<type>")


def arrow_schema_to_delta(schema: pa.Schema) -> dict:
    """The Delta schema dict for an Arrow schema, e.g. to create a table from a dataset's schema."""
    return {"type": "struct", "fields": [_field_from_arrow(field, field.name) for field in schema]}


def _field_from_arrow(field: pa.Field, path: str) -> dict:
    return {"name": field.name, "type": _from_arrow(field.type, path), "nullable": field.nullable,
            "metadata": _metadata_from_arrow(field.metadata)}  # fmt: skip


def _metadata_from_arrow(metadata: dict[bytes, bytes] | None) -> dict:
    """Field metadata back to Delta's JSON values; Parquet/Arrow bookkeeping keys are not column metadata."""
    result: dict[str, Any] = {}
    for key, raw in (metadata or {}).items():
        name = key.decode()
        if name.startswith(("PARQUET:", "ARROW:")):
            continue
        text = raw.decode()
        try:
            result[name] = json.loads(text)
        except ValueError:  # deltalake and others store plain strings unencoded
            result[name] = text
    return result


def _from_arrow(t: pa.DataType, path: str) -> str | dict:
    for predicate, name in _ARROW_SIMPLE:
        if predicate(t):
            return name
    if pa.types.is_timestamp(t):  # Delta is microsecond-only; other units are cast on write
        return "timestamp" if t.tz is not None else "timestamp_ntz"
    if pa.types.is_decimal(t) and t.precision <= _MAX_DECIMAL_PRECISION and t.scale >= 0:
        return f"decimal({t.precision},{t.scale})"
    if pa.types.is_dictionary(t):
        return _from_arrow(t.value_type, path)
    if any(is_list(t) for is_list in _ARROW_LISTS):
        return {"type": "array", "elementType": _from_arrow(t.value_type, f"{path}.element"),
                "containsNull": t.value_field.nullable}  # fmt: skip
    if pa.types.is_map(t):
        return {"type": "map", "keyType": _from_arrow(t.key_type, f"{path}.key"),
                "valueType": _from_arrow(t.item_type, f"{path}.value"),
                "valueContainsNull": t.item_field.nullable}  # fmt: skip
    if t == _VARIANT and all(not t.field(i).nullable for i in range(t.num_fields)):
        return "variant"
    if pa.types.is_struct(t):
        return {"type": "struct", "fields": [_field_from_arrow(f, f"{path}.{f.name}") for f in t]}
    raise ValueError(f"column {path!r}: Arrow type {t} has no Delta equivalent")


# ------------------------------------------------------- Column mapping


def physical_name(field: dict, mode: str) -> str:
    """The name data files, stats and partition values use for `field` under `mode`."""
    if mode == "none":
        return field["name"]
    return (field.get("metadata") or {}).get(CM_PHYSICAL_NAME, field["name"])


def physical_partition_names(schema: dict, partition_columns: Sequence[str], mode: str) -> dict[str, str]:
    """Logical -> physical partition column names, since `partitionValues` keys are physical names."""
    by_name = {field["name"]: field for field in schema["fields"]}
    # Spark resolves names case-insensitively, so `partitionColumns` may differ in case from the schema.
    by_lower = {name.lower(): field for name, field in by_name.items()}
    result = {}
    for column in partition_columns:
        field = by_name.get(column) or by_lower.get(column.lower())
        if field is None:
            raise ValueError(f"partition column {column!r} is not in the table schema")
        result[column] = physical_name(field, mode)
    return result
