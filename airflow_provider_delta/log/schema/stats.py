"""Per-file statistics ("Per-file Statistics"): their typed schema, parsing, and writing.

Which columns get statistics follows the table (``delta.dataSkippingNumIndexedCols``,
``delta.dataSkippingStatsColumns``; physical names under column mapping): ``stats_schema``. Readers parse
the JSON ``stats`` of many adds at once with Arrow: ``parse_stats``. Writers take values from the
row-group statistics Parquet writers already store, so building an ``add`` never reads data pages;
bounds are widened rather than guessed: a column whose statistics are missing in any row group gets no
min/max.
"""

from __future__ import annotations

import datetime as dt
import json
import math
from collections.abc import Iterator, Sequence
from decimal import Decimal
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pa_json
import pyarrow.parquet as pq

from ..base.arrow_utils import FALSE, from_numpy, string_scalar
from .partition_values import parse_decimal, parse_partition_value, parse_timestamp
from .schema import decimal_params, delta_type_to_arrow, physical_name

_MAX_STRING_PREFIX = 32  # as Delta Spark: long strings get a prefix as min and no max
_TIMESTAMP_UNITS_PER_MS = {"milliseconds": 1, "microseconds": 1_000, "nanoseconds": 1_000_000}
_EPOCH = dt.datetime(1970, 1, 1)


def file_stats(footer: pq.FileMetaData, wanted: pa.StructType) -> str:
    """The ``stats`` JSON for a file from its footer, for the columns of ``wanted`` (the table's
    ``stats_schema``, which its table configuration holds)."""
    columns = _footer_columns(footer)
    out: dict[str, Any] = {"numRecords": footer.num_rows}
    mins, maxs, nulls = {}, {}, {}
    _fill(wanted.field("minValues").type, (), columns, mins, "min")
    _fill(wanted.field("maxValues").type, (), columns, maxs, "max")
    _fill(wanted.field("nullCount").type, (), columns, nulls, "nulls")
    out["minValues"], out["maxValues"], out["nullCount"] = mins, maxs, nulls
    return json.dumps(out, separators=(",", ":"), ensure_ascii=False)


def _footer_columns(footer: pq.FileMetaData) -> dict[tuple[str, ...], list[Any]]:
    """Column chunk metadata of every row group, by lower-cased leaf path."""
    cols: dict[tuple[str, ...], list[Any]] = {}
    for rg in range(footer.num_row_groups):
        group = footer.row_group(rg)
        for i in range(group.num_columns):
            chunk = group.column(i)
            key = tuple(p.lower() for p in chunk.path_in_schema.split("."))
            cols.setdefault(key, []).append(chunk)
    return cols


def _fill(t: pa.StructType, prefix: tuple[str, ...], columns: dict, out: dict[str, Any], what: str) -> None:
    for field in t:
        path = (*prefix, field.name.lower())
        if pa.types.is_struct(field.type):
            child: dict[str, Any] = {}
            _fill(field.type, path, columns, child, what)
            if child:
                out[field.name] = child
            continue
        chunks = columns.get(path)
        if not chunks and what == "nulls":
            # A variant is a leaf of the statistics but a group in the file; its required metadata binary
            # is null exactly where the variant is ("Statistics for Variant Columns": nullCount only).
            chunks = columns.get((*path, "metadata"))
        if not chunks:
            continue  # nested list/map leaves have other paths: their statistics are optional
        value = _null_count(chunks) if what == "nulls" else _bound(chunks, field.type, what)
        if value is not None:
            out[field.name] = value


def _null_count(chunks: list[Any]) -> int | None:
    total = 0
    for c in chunks:
        s = c.statistics
        if s is None or not s.has_null_count:
            return None
        total += s.null_count
    return total


def _bound(chunks: list[Any], t: pa.DataType, what: str) -> Any:
    values = []
    unit = None
    for c in chunks:
        s = c.statistics
        if c.physical_type == "INT96" or s is None:
            return None  # legacy Spark timestamps: Parquet writers' INT96 statistics are unreliable
        if not s.has_min_max:
            if s.has_null_count and s.null_count == c.num_values:
                continue  # an all-null row group bounds nothing
            return None
        if c.physical_type == "INT64" and s.logical_type.type == "TIMESTAMP":
            # The raw count of units since the epoch: ``min``/``max`` would make a zoned datetime, which
            # pyarrow builds by importing pandas (0.2 s in a fresh task).
            unit = _TIMESTAMP_UNITS_PER_MS[json.loads(s.logical_type.to_json())["timeUnit"]]
            values.append(s.min_raw if what == "min" else s.max_raw)
        else:
            values.append(s.min if what == "min" else s.max)
    if not values:
        return None
    try:
        value = min(values) if what == "min" else max(values)
    except TypeError:
        return None
    if unit is not None:
        return _timestamp_of_units(value, unit, t, what)
    return _to_json(value, t, what)


def _timestamp_of_units(value: int, per_ms: int, t: pa.DataType, what: str) -> str:
    """A bound given in units since the epoch, at Delta's millisecond precision: the minimum floored, the
    maximum raised to the next millisecond, so both still bound."""
    millis = value // per_ms if what == "min" else -(-value // per_ms)
    text = (_EPOCH + dt.timedelta(milliseconds=millis)).isoformat(timespec="milliseconds")
    return text if pa.types.is_timestamp(t) and t.tz is None else text + "Z"


def _to_json(value: Any, t: pa.DataType, what: str) -> Any:
    if isinstance(value, bytes):
        try:
            value = value.decode("utf-8")
        except UnicodeDecodeError:
            return None
    if isinstance(value, str):
        if len(value) <= _MAX_STRING_PREFIX:
            return value
        return value[:_MAX_STRING_PREFIX] if what == "min" else None
    if isinstance(value, float):
        return None if math.isnan(value) else value
    if isinstance(value, Decimal):
        return float(value) if len(value.as_tuple().digits) <= 15 else None
    if isinstance(value, dt.datetime):
        return _timestamp(value, t, what)
    if isinstance(value, dt.date):
        return value.isoformat()
    if isinstance(value, bool):
        return None
    return value


def _timestamp(value: dt.datetime, t: pa.DataType, what: str) -> str:
    # Delta stores millisecond precision: floor the minimum, ceil the maximum, so both still bound.
    micros = value.microsecond % 1000
    if micros and what == "max":
        value += dt.timedelta(microseconds=1000 - micros)
    value = value.replace(microsecond=value.microsecond - value.microsecond % 1000)
    ntz = pa.types.is_timestamp(t) and t.tz is None
    if value.tzinfo is not None:
        value = value.astimezone(dt.UTC).replace(tzinfo=None)
    text = value.isoformat(timespec="milliseconds")
    return text if ntz else text + "Z"


# -- reading: typed statistics -------------------------------------------------------------------------
_MIN_MAX_TYPES = {"byte", "short", "integer", "long", "float", "double", "date", "timestamp", "timestamp_ntz",
                  "string"}  # fmt: skip
_BISECT_FLOOR = 16  # below this many lines a failing block is parsed row by row in Python
_SPLIT_PARTS = 8
_EMPTY_OBJECT = string_scalar("{}", pa.large_string())
_NEWLINE = string_scalar("\n", pa.large_string())


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
    if isinstance(delta_type, str) and (delta_type in _MIN_MAX_TYPES or decimal_params(delta_type)):
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
    present = pc.fill_null(pc.not_equal(text, string_scalar("", pa.large_string())), FALSE)
    # Raw newlines can only be whitespace between JSON tokens; removing them keeps one row per line.
    lines = pc.replace_substring_regex(pc.if_else(present, text, _EMPTY_OBJECT), r"[\r\n]", " ")
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
    offsets = from_numpy(np.array([0, len(lines)], dtype=np.int64))
    buffer = pc.binary_join(pa.LargeListArray.from_arrays(offsets, lines), _NEWLINE)[0].as_buffer()
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
            return parse_decimal(str(value), arrow_type.precision, arrow_type.scale)
        if pa.types.is_date(arrow_type) and isinstance(value, str):
            return parse_partition_value(value, "date")
        if pa.types.is_timestamp(arrow_type) and isinstance(value, str):
            return parse_timestamp(value, ntz=arrow_type.tz is None)
        return value if isinstance(value, bool | str) and arrow_type in (pa.bool_(), pa.string()) else None
    except (ValueError, ArithmeticError):
        return None


def typed_file_stats(wanted: pa.StructType, files: pa.Table) -> pa.StructArray:
    """The ``stats`` of ``files`` (rows of AddFile) parsed into the table's typed stats struct ``wanted``."""
    return parse_stats(files.column("stats").combine_chunks(), wanted)
