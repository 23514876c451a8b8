"""Delta table schemas, partition values and per-file statistics, as the protocol's appendix defines them.

A Delta schema stays what the log stores: the parsed JSON dict of `metaData.schemaString` ("Schema
Serialization Format"), so that nothing is lost between reading a commit and writing the next one. This
module turns it into Arrow types for readers and writers, resolves column-mapping physical names ("Column
Mapping"), parses and writes partition values ("Partition Value Serialization") and types the JSON `stats` of
`add` actions ("Per-file Statistics"). It imports only the standard library and pyarrow.
"""

from __future__ import annotations

import datetime as dt
import json
import re
from collections.abc import Iterator, Sequence
from decimal import Decimal, InvalidOperation
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pa_json

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


# ------------------------------------------------------- Delta -> Arrow ("Schema Serialization Format")


def parse_schema_string(schema_string: str) -> dict:
    """Parse `metaData.schemaString`; refuse anything that is not a struct so callers fail at load time."""
    try:
        schema = json.loads(schema_string)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"schemaString is not valid JSON: {exc}") from exc
    if (
        not isinstance(schema, dict)
        or schema.get("type") != "struct"
        or not isinstance(schema.get("fields"), list)
    ):
        raise ValueError(f"schemaString must encode a struct type, got: {str(schema_string)[:200]!r}")
    return schema


def _decimal_params(name: str) -> tuple[int, int] | None:
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
        params = _decimal_params(delta_type)
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


def column_mapping_mode(configuration: dict[str, str]) -> str:
    """`delta.columnMapping.mode` ("Column Mapping"): "none", "id" or "name"; absent means "none"."""
    mode = (configuration or {}).get("delta.columnMapping.mode", "none").lower()
    if mode not in ("none", "id", "name"):
        raise ValueError(f"unknown delta.columnMapping.mode {mode!r}")
    return mode


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


# ------------------------------------------------------- Partition values


_TIMESTAMP_RE = re.compile(
    r"^(\d{4,})-(\d{1,2})-(\d{1,2})(?:[ T](\d{1,2}):(\d{1,2})(?::(\d{1,2})(?:\.(\d{1,9}))?)?)?"
    r"\s*(Z|[+-]\d{2}(?::?\d{2})?)?$"
)
_DATE_RE = re.compile(r"^(\d{4,})-(\d{1,2})-(\d{1,2})$")
_INT_RE = re.compile(r"^\s*[+-]?\d+\s*$")
_INT_TYPES = {"byte": 8, "short": 16, "integer": 32, "long": 64}
# Rows in these canonical forms are cast by Arrow; any other row goes through the scalar parser.
_VECTOR_FORMS = {
    **dict.fromkeys(_INT_TYPES, r"^-?\d+$"),
    **dict.fromkeys(("float", "double"), r"^[+-]?((\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?|NaN|Infinity)$"),
    "decimal": r"^[+-]?\d+(\.\d+)?$",
    "date": r"^\d{4}-\d{2}-\d{2}$",
    **dict.fromkeys(("timestamp", "timestamp_ntz"),
                    r"^\d{4}-\d{2}-\d{2}[ T]\d{2}:\d{2}:\d{2}(\.\d{1,6})?(Z|[+-]\d{2}:\d{2})?$"),
    "boolean": r"^(?i:true|false)$",
}  # fmt: skip


def _partition_kind(delta_type: str) -> str:
    if not isinstance(delta_type, str):
        raise ValueError(f"partition values of type {json.dumps(delta_type)[:100]} are not supported")
    kind = "decimal" if _decimal_params(delta_type) else delta_type
    if kind not in _VECTOR_FORMS and kind not in ("string", "binary"):
        raise ValueError(f"partition values of type {delta_type!r} are not supported")
    return kind


def _parse_timestamp(value: str, ntz: bool) -> dt.datetime:
    match = _TIMESTAMP_RE.match(value.strip())
    if match is None:
        raise ValueError(f"invalid timestamp partition value {value!r}")
    year, month, day, hour, minute, second = (int(group or 0) for group in match.groups()[:6])
    micros = int((match[7] or "0")[:6].ljust(6, "0"))  # Delta is microsecond precision; nanos are dropped
    parsed = dt.datetime(year, month, day, hour, minute, second, micros, tzinfo=dt.UTC)
    if match[8] and match[8] != "Z":
        offset = match[8].replace(":", "")
        delta = dt.timedelta(hours=int(offset[1:3]), minutes=int(offset[3:5] or 0))
        parsed = parsed - delta if offset[0] == "+" else parsed + delta
    return parsed.replace(tzinfo=None) if ntz else parsed


def parse_partition_value(value: str | None, delta_type: str) -> Any:
    """One `partitionValues` string as a Python value ("Partition Value Serialization").

    None and the empty string are null for every type, strings included (Delta Spark writes a null partition
    for ""). Timestamps are `YYYY-MM-DD HH:MM:SS[.ffffff]` or ISO-8601 with `Z`/offset; a value without offset
    is read as UTC for `timestamp` although Delta Spark writes it in the writer's session time zone - the
    log does not record which zone that was. An offset on a `timestamp_ntz` value is applied (UTC wall time).
    """
    kind = _partition_kind(delta_type)
    if value is None or value == "":
        return None
    if kind == "string":
        return value
    if kind == "binary":
        return value.encode("utf-8")  # Spark turns the bytes into a (UTF-8) string to write them
    if kind in _INT_TYPES:
        bits = _INT_TYPES[kind]
        number = int(value) if _INT_RE.match(value) else None
        if number is None or not -(1 << (bits - 1)) <= number < (1 << (bits - 1)):
            raise ValueError(f"invalid {kind} partition value {value!r}")
        return number
    if kind in ("float", "double"):
        return float(value)
    if kind == "boolean":
        if value.lower() not in ("true", "false"):
            raise ValueError(f"invalid boolean partition value {value!r}")
        return value.lower() == "true"
    if kind == "date":
        match = _DATE_RE.match(value.strip())
        if match is None:
            raise ValueError(f"invalid date partition value {value!r}")
        return dt.date(int(match[1]), int(match[2]), int(match[3]))
    if kind in ("timestamp", "timestamp_ntz"):
        return _parse_timestamp(value, ntz=kind == "timestamp_ntz")
    return _parse_decimal(value, *_decimal_params(delta_type))


def _parse_decimal(value: str, precision: int, scale: int) -> Decimal:
    try:
        number = Decimal(value.strip())
        exact = number.quantize(Decimal(1).scaleb(-scale))
    except InvalidOperation:
        exact = None
    if exact is None or exact != number or len(exact.as_tuple().digits) > precision:
        raise ValueError(f"invalid decimal({precision},{scale}) value {value!r}")
    return exact


def parse_partition_values(values: pa.Array, delta_type: str) -> pa.Array:
    """`parse_partition_value` over a string array: Arrow casts canonical rows, the scalar parser the rest."""
    if isinstance(values, pa.ChunkedArray):
        return pa.chunked_array([parse_partition_values(chunk, delta_type) for chunk in values.chunks],
                                type=delta_type_to_arrow(delta_type))  # fmt: skip
    values = pc.cast(values, pa.string())
    values = pc.if_else(pc.equal(values, ""), pa.scalar(None, pa.string()), values)
    kind = _partition_kind(delta_type)
    target = delta_type_to_arrow(delta_type)
    if kind == "string":
        return values
    if kind == "binary":
        return pc.cast(values, target)
    canonical = pc.fill_null(pc.match_substring_regex(values, _VECTOR_FORMS[kind]), True)
    if pc.all(canonical).as_py():
        return _vector_cast(values, kind, target)
    others = pc.invert(canonical)
    fast = _vector_cast(pc.if_else(canonical, values, pa.scalar(None, pa.string())), kind, target)
    slow = [parse_partition_value(v, delta_type) for v in pc.filter(values, others).to_pylist()]
    return pc.replace_with_mask(fast, others, pa.array(slow, type=target))


def _vector_cast(values: pa.Array, kind: str, target: pa.DataType) -> pa.Array:
    try:
        if kind == "boolean":
            return pc.equal(pc.utf8_lower(values), "true")
        if kind in ("timestamp", "timestamp_ntz"):
            # Arrow parses an offset only into a zoned type and a bare time only into a naive one.
            has_offset = pc.match_substring_regex(values, r"(Z|[+-]\d{2}:\d{2})$")
            none = pa.scalar(None, pa.string())
            zoned = pc.cast(pc.if_else(has_offset, values, none), pa.timestamp("us", tz="UTC"))
            naive = pc.cast(pc.if_else(has_offset, none, values), pa.timestamp("us"))
            return pc.if_else(has_offset, pc.cast(zoned, target), pc.cast(naive, target))
        return pc.cast(values, target)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
        raise ValueError(f"invalid {kind} partition values: {exc}") from exc


def serialize_partition_value(value: Any, delta_type: str) -> str | None:
    """The `partitionValues` string a writer records for `value` ("Partition Value Serialization").

    Timestamps are written as `YYYY-MM-DD HH:MM:SS.ffffff` in UTC (naive datetimes are taken to be UTC for
    `timestamp`; `timestamp_ntz` refuses zoned ones), decimals in plain notation, NaN/infinities as Spark
    spells them. None stays None (JSON null), which is how Delta Spark records a null partition.
    """
    value = value.as_py() if isinstance(value, pa.Scalar) else value
    kind = _partition_kind(delta_type)
    if value is None:
        return None
    if kind == "string":
        return str(value)
    if kind == "binary":
        try:
            return bytes(value).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ValueError("binary partition values must be valid UTF-8 to survive the JSON log") from exc
    if kind == "boolean":
        if value not in (True, False):
            raise ValueError(f"not a boolean partition value: {value!r}")
        return "true" if value else "false"
    if kind in _INT_TYPES:
        if int(value) != value:
            raise ValueError(f"not an integer partition value: {value!r}")
        return str(int(value))
    if kind in ("float", "double"):
        number = float(value)
        return {"nan": "NaN", "inf": "Infinity", "-inf": "-Infinity"}.get(str(number), repr(number))
    if kind == "decimal":
        return format(value if isinstance(value, Decimal) else Decimal(str(value)), "f")
    if kind == "date":
        if isinstance(value, dt.datetime):
            raise ValueError(f"a date partition value must be a date, not a datetime: {value!r}")
        return value.isoformat()
    if not isinstance(value, dt.datetime):
        raise ValueError(f"a {kind} partition value must be a datetime, got {value!r}")
    if kind == "timestamp_ntz" and value.tzinfo is not None:
        raise ValueError(f"timestamp_ntz partition value must be naive, got {value!r}")
    if value.tzinfo is not None:
        value = value.astimezone(dt.UTC).replace(tzinfo=None)
    return value.isoformat(sep=" ", timespec="microseconds")


# ------------------------------------------------------- Per-file statistics

_MIN_MAX_TYPES = {"byte", "short", "integer", "long", "float", "double", "date", "timestamp", "timestamp_ntz",
                  "string"}  # fmt: skip
_BISECT_FLOOR = 16  # below this many lines a failing block is parsed row by row in Python
_SPLIT_PARTS = 8


def stats_schema(
    schema: dict,
    *,
    mode: str = "none",
    partition_columns: Sequence[str] = (),
    num_indexed_cols: int = 32,
    stats_columns: Sequence[str] | str | None = None,
) -> pa.StructType:
    """The typed schema of `add.stats` ("Per-file Statistics"), named by physical name under column mapping.

    Follows Delta Spark: partition columns have no stats; only the first `num_indexed_cols` leaf columns in
    schema order (`delta.dataSkippingNumIndexedCols`, -1 = all; an array or map is one leaf) or, taking
    precedence, the columns in `stats_columns` (`delta.dataSkippingStatsColumns`, dotted for nested, a
    struct meaning all its leaves) are indexed. min/max exist for numbers, dates, timestamps and strings;
    nullCount for every indexed leaf, arrays and maps included.
    """
    partitions = {column.lower() for column in partition_columns}
    fields = [field for field in schema["fields"] if field["name"].lower() not in partitions]
    leaves = list(_leaf_paths(fields, ()))
    if stats_columns is not None:
        names = (
            _split_quoted(stats_columns, ",", unquote=False)
            if isinstance(stats_columns, str)
            else stats_columns
        )
        wanted = [
            tuple(part.lower() for part in _split_quoted(name.strip(), ".", unquote=True)) for name in names
        ]
        indexed = {leaf for leaf in leaves if any(leaf[: len(want)] == want for want in wanted)}
    else:
        indexed = set(leaves if num_indexed_cols < 0 else leaves[:num_indexed_cols])
    min_max = _stats_struct(fields, (), indexed, mode, _min_max_type)
    null_count = _stats_struct(fields, (), indexed, mode, lambda _: pa.int64())
    return pa.struct([("numRecords", pa.int64()), ("minValues", min_max), ("maxValues", min_max),
                      ("nullCount", null_count), ("tightBounds", pa.bool_())])  # fmt: skip


def _leaf_paths(fields: list[dict], prefix: tuple[str, ...]) -> Iterator[tuple[str, ...]]:
    for field in fields:
        path = (*prefix, field["name"].lower())
        field_type = field["type"]
        if isinstance(field_type, dict) and field_type.get("type") == "struct":
            yield from _leaf_paths(field_type["fields"], path)
        else:
            yield path


def _stats_struct(
    fields: list[dict], prefix: tuple, indexed: set, mode: str, leaf_type: Any
) -> pa.StructType:
    result = []
    for field in fields:
        path = (*prefix, field["name"].lower())
        field_type = field["type"]
        if isinstance(field_type, dict) and field_type.get("type") == "struct":
            arrow_type = _stats_struct(field_type["fields"], path, indexed, mode, leaf_type)
            arrow_type = arrow_type if arrow_type.num_fields else None  # no stats below: no struct either
        else:
            arrow_type = leaf_type(field_type) if path in indexed else None
        if arrow_type is not None:
            result.append(pa.field(physical_name(field, mode), arrow_type))
    return pa.struct(result)


def _min_max_type(delta_type: str | dict) -> pa.DataType | None:
    if isinstance(delta_type, str) and (delta_type in _MIN_MAX_TYPES or _decimal_params(delta_type)):
        return delta_type_to_arrow(delta_type)
    return None


def _split_quoted(text: str, separator: str, *, unquote: bool) -> list[str]:
    """Split on `separator` outside backquotes, Spark's quoting for names containing dots or commas."""
    parts, current, quoted, i = [], [], False, 0
    while i < len(text):
        char = text[i]
        if char == "`" and quoted and text[i + 1 : i + 2] == "`":  # `` is an escaped backquote
            current.append("`" if unquote else "``")
            i += 1
        elif char == "`":
            quoted = not quoted
            current.extend([] if unquote else [char])
        elif char == separator and not quoted:
            parts.append("".join(current))
            current = []
        else:
            current.append(char)
        i += 1
    return [*parts, "".join(current)]


def parse_stats(stats_json: pa.Array, stats_type: pa.StructType) -> pa.StructArray:
    """Type the JSON `stats` strings of `add` actions (nulls allowed) as `stats_type`, one row per input.

    All lines are parsed in one `pyarrow.json` read. A block that Arrow rejects (a value that does not fit
    its declared type, e.g. an out-of-range int, a malformed date, an object where a number belongs, broken
    JSON) is split up until the bad rows are isolated; those few rows are parsed in Python, where each
    offending leaf - or the whole row, for unparsable JSON - becomes null rather than failing the scan. Null
    or empty input is a null row. Timestamps may carry `Z` or an offset (Delta Spark writes the session zone)
    and become UTC.
    """
    if isinstance(stats_json, pa.ChunkedArray):
        stats_json = stats_json.combine_chunks()
    text = pc.cast(stats_json, pa.large_string())
    present = pc.fill_null(pc.not_equal(text, ""), False)
    # Raw newlines can only be whitespace between JSON tokens; removing them keeps one row per line.
    lines = pc.replace_substring_regex(pc.if_else(present, text, "{}"), r"[\r\n]", " ")
    parsed = _read_lines(lines, stats_type)
    mask = pc.or_(pc.invert(present), parsed.is_null())
    children = [parsed.field(i) for i in range(stats_type.num_fields)]
    return pa.StructArray.from_arrays(children, fields=list(stats_type), mask=mask)


def _read_lines(lines: pa.Array, stats_type: pa.StructType) -> pa.StructArray:
    try:
        return _read_json_block(lines, stats_type)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, ValueError):
        if len(lines) <= _BISECT_FLOOR:
            rows = [_coerce(_loads(line), stats_type) for line in lines.to_pylist()]
            return pa.array(rows, type=stats_type)
        # Eight parts rather than two: the good parts are re-read once instead of at every level.
        step = -(-len(lines) // _SPLIT_PARTS)
        parts = [_read_lines(lines[i : i + step], stats_type) for i in range(0, len(lines), step)]
        return pa.concat_arrays(parts)


def _read_json_block(lines: pa.Array, stats_type: pa.StructType) -> pa.StructArray:
    if len(lines) == 0:
        return pa.array([], type=stats_type)
    as_list = pa.LargeListArray.from_arrays(pa.array([0, len(lines)], pa.int64()), lines)
    buffer = pc.binary_join(as_list, pa.scalar("\n", pa.large_string()))[0].as_buffer()
    longest = pc.max(pc.binary_length(lines)).as_py()
    read_options = pa_json.ReadOptions(block_size=min(max(1 << 20, 2 * longest + 2), (1 << 31) - 1))
    read_type = _json_read_type(stats_type)
    parse_options = pa_json.ParseOptions(explicit_schema=pa.schema(list(read_type)),
                                         unexpected_field_behavior="ignore")  # fmt: skip
    table = pa_json.read_json(pa.BufferReader(buffer), read_options=read_options, parse_options=parse_options)
    if table.num_rows != len(lines):
        raise ValueError(f"stats JSON gave {table.num_rows} rows for {len(lines)} lines")
    return _cast_like(table.to_struct_array().combine_chunks(), stats_type)


def _json_read_type(arrow_type: pa.DataType) -> pa.DataType:
    """Arrow's JSON reader cannot read a string into date32, so dates are read as strings and cast after."""
    if pa.types.is_struct(arrow_type):
        return pa.struct([field.with_type(_json_read_type(field.type)) for field in arrow_type])
    return pa.string() if pa.types.is_date(arrow_type) else arrow_type


def _cast_like(array: pa.Array, target: pa.DataType) -> pa.Array:
    if array.type == target:
        return array
    if pa.types.is_struct(target):
        children = [_cast_like(array.field(i), field.type) for i, field in enumerate(target)]
        return pa.StructArray.from_arrays(children, fields=list(target), mask=array.is_null())
    return pc.cast(array, target)


def _loads(line: str) -> Any:
    try:
        return json.loads(line, parse_float=Decimal)  # Decimal keeps decimal stats exact
    except ValueError:
        return None


def _coerce(value: Any, arrow_type: pa.DataType) -> Any:
    """A JSON value as a Python value of `arrow_type`, or None where it does not fit."""
    if pa.types.is_struct(arrow_type):
        if not isinstance(value, dict):
            return None
        return {field.name: _coerce(value.get(field.name), field.type) for field in arrow_type}
    if value is None or isinstance(value, bool) != pa.types.is_boolean(arrow_type):
        return None
    try:
        if pa.types.is_integer(arrow_type):
            bits = arrow_type.bit_width
            fits = isinstance(value, int) and -(1 << (bits - 1)) <= value < (1 << (bits - 1))
            return value if fits else None
        if pa.types.is_floating(arrow_type):
            ok = isinstance(value, int | Decimal) or value in ("NaN", "Infinity", "-Infinity")
            return float(value) if ok else None
        if pa.types.is_decimal(arrow_type) and isinstance(value, int | Decimal):
            return _parse_decimal(str(value), arrow_type.precision, arrow_type.scale)
        if pa.types.is_date(arrow_type) and isinstance(value, str):
            return parse_partition_value(value, "date")
        if pa.types.is_timestamp(arrow_type) and isinstance(value, str):
            return _parse_timestamp(value, ntz=arrow_type.tz is None)
        return value if isinstance(value, bool | str) and arrow_type in (pa.bool_(), pa.string()) else None
    except (ValueError, ArithmeticError):
        return None
