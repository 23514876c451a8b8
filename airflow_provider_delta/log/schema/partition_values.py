"""Partition values: the strings in ``add.partitionValues`` and the typed values they stand for.

Spec: "Partition Value Serialization". Parsing is vectorised over Arrow string arrays for the canonical
forms writers use; only unusual rows go through the scalar parser.
"""

from __future__ import annotations

import datetime as dt
import json
import re
from decimal import Decimal, InvalidOperation
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from ..actions.actions import Metadata
from ..base.arrow_utils import EMPTY_STRING, NULL_STRING, TRUE, map_value, string_scalar
from ..base.errors import CorruptLogError
from .schema import decimal_params, delta_type_to_arrow, physical_partition_names

_TIMESTAMP_RE = re.compile(
    r"^(\d{4,})-(\d{1,2})-(\d{1,2})(?:[ T](\d{1,2}):(\d{1,2})(?::(\d{1,2})(?:\.(\d{1,9}))?)?)?"
    r"\s*(Z|[+-]\d{2}(?::?\d{2})?)?$"
)
_DATE_RE = re.compile(r"^(\d{4,})-(\d{1,2})-(\d{1,2})$")
_INT_RE = re.compile(r"^\s*[+-]?\d+\s*$")
_TRUE_TEXT = string_scalar("true")
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
    kind = "decimal" if decimal_params(delta_type) else delta_type
    if kind not in _VECTOR_FORMS and kind not in ("string", "binary"):
        raise ValueError(f"partition values of type {delta_type!r} are not supported")
    return kind


def parse_timestamp(value: str, ntz: bool) -> dt.datetime:
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
        return parse_timestamp(value, ntz=kind == "timestamp_ntz")
    return parse_decimal(value, *decimal_params(delta_type))


def parse_decimal(value: str, precision: int, scale: int) -> Decimal:
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
    values = pc.if_else(pc.equal(values, EMPTY_STRING), NULL_STRING, values)
    kind = _partition_kind(delta_type)
    target = delta_type_to_arrow(delta_type)
    if kind == "string":
        return values
    if kind == "binary":
        return pc.cast(values, target)
    canonical = pc.fill_null(pc.match_substring_regex(values, _VECTOR_FORMS[kind]), TRUE)
    if pc.all(canonical).as_py():
        return _vector_cast(values, kind, target)
    others = pc.invert(canonical)
    fast = _vector_cast(pc.if_else(canonical, values, NULL_STRING), kind, target)
    slow = [parse_partition_value(v, delta_type) for v in pc.filter(values, others).to_pylist()]
    return pc.replace_with_mask(fast, others, pa.array(slow, type=target))


def _vector_cast(values: pa.Array, kind: str, target: pa.DataType) -> pa.Array:
    try:
        if kind == "boolean":
            return pc.equal(pc.utf8_lower(values), _TRUE_TEXT)
        if kind in ("timestamp", "timestamp_ntz"):
            # Arrow parses an offset only into a zoned type and a bare time only into a naive one.
            has_offset = pc.match_substring_regex(values, r"(Z|[+-]\d{2}:\d{2})$")
            none = NULL_STRING
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
    spells them. None stays None (JSON null), which is how Delta Spark records a null partition. So does an
    empty string or binary value: the spec reads ``""`` as null for every type, and Delta Spark records
    null for it, so a ``""`` in the log would be read as ``""`` by Delta Spark and as NULL by every reader
    that follows the spec.
    """
    value = value.as_py() if isinstance(value, pa.Scalar) else value
    kind = _partition_kind(delta_type)
    if value is None:
        return None
    if kind == "string":
        return str(value) or None
    if kind == "binary":
        try:
            return bytes(value).decode("utf-8") or None
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


def typed_partition_values(metadata: Metadata, files: pa.Table, mode: str) -> pa.Table:
    """Typed partition values of ``files`` (rows of AddFile), one column per partition column, by logical
    name; values are looked up by physical name under column mapping ``mode`` (the table configuration's).

    A value that does not parse for its column's type raises ``CorruptLogError`` naming the data file (as
    the log records it) and the value: the log holds an ``add`` no writer should have written.
    """
    schema = metadata.schema
    columns = list(metadata.partition_columns)
    physical = physical_partition_names(schema, columns, mode)
    by_lower = {f["name"].lower(): f["type"] for f in schema["fields"]}
    raw = files.column("partitionValues")
    typed = {}
    for c in columns:
        values = map_value(raw, physical[c])
        try:
            typed[c] = parse_partition_values(values, by_lower[c.lower()])
        except (ValueError, OverflowError) as exc:
            raise _bad_value(files, values, c, by_lower[c.lower()], exc) from None
    return pa.table(typed) if typed else pa.table({}).slice(0, 0)


def _bad_value(
    files: pa.Table, values: pa.Array, column: str, delta_type: str, exc: Exception
) -> CorruptLogError:
    """The error for the first file whose value fails (a Python loop, but only once something failed)."""
    for i, value in enumerate(values.to_pylist()):
        try:
            parse_partition_value(value, delta_type)
        except (ValueError, OverflowError):
            path = files.column("path")[i].as_py()
            return CorruptLogError(
                f"the add action of a data file has partition value {value!r} for column {column!r}, "
                f"which is not a valid {delta_type}",
                path=path,
            )
    return CorruptLogError(f"partition values of column {column!r} are not valid {delta_type}: {exc}")
