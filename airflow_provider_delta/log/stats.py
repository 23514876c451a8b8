"""Per-file statistics written by the core: read from a Parquet footer into the ``add.stats`` JSON.

Spec: "Per-file Statistics". Which columns get statistics follows the table
(``delta.dataSkippingNumIndexedCols``, ``delta.dataSkippingStatsColumns``; physical names under column
mapping) through ``schema.stats_schema``. Values come from the row-group statistics Parquet writers
already store, so building an ``add`` never reads the data pages. Bounds are widened rather than
guessed: a column whose statistics are missing in any row group gets no min/max.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import posixpath
from decimal import Decimal
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.parquet as pq

from .errors import InvalidCommitError
from .schema import column_mapping_mode, stats_schema

if TYPE_CHECKING:
    from .actions import AddFile
    from .snapshot import Snapshot
    from .table import DeltaTable

_MAX_STRING_PREFIX = 32  # as Delta Spark: long strings get a prefix as min and no max


def _check_relative(path: str, where: str) -> None:
    norm = posixpath.normpath(path)
    if path.startswith("/") or "://" in path or norm.startswith("..") or norm.startswith("_delta_log"):
        raise InvalidCommitError(
            f"{path!r} must be a path relative to the table root {where}, outside _delta_log"
        )


def add_file_from_parquet(
    table: DeltaTable | Snapshot,
    path: str,
    partition_values: dict[str, str | None],
    *,
    data_change: bool = True,
    tags: dict[str, str] | None = None,
) -> AddFile:
    """The ``add`` action of a Parquet file already written under the table root.

    Pass a snapshot instead of the table when building many actions, so the log is read once.
    """
    from .actions import AddFile

    store = table.store
    _check_relative(path, store.uri)
    full = store.table_file(path)
    info = store.info(full)
    snap = table if hasattr(table, "metadata") else table.snapshot()
    with store.open_input_file(full) as fh:
        footer = pq.read_metadata(fh)
    stats = file_stats(
        footer, snap.metadata.schema, snap.metadata.configuration, snap.metadata.partition_columns
    )
    return AddFile(
        path=path,
        size=info.size,
        partition_values=dict(partition_values),
        modification_time=info.modification_time,
        data_change=data_change,
        stats=stats,
        tags=tags,
    )


def file_stats(
    footer: pq.FileMetaData, schema: dict, configuration: dict[str, str], partition_columns: tuple[str, ...]
) -> str:
    """The ``stats`` JSON for a file from its footer, for the columns the table indexes."""
    stats_cols = configuration.get("delta.dataSkippingStatsColumns")
    wanted = stats_schema(
        schema,
        mode=column_mapping_mode(configuration),
        partition_columns=list(partition_columns),
        num_indexed_cols=int(configuration.get("delta.dataSkippingNumIndexedCols", 32)),
        stats_columns=stats_cols,
    )
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
    for c in chunks:
        s = c.statistics
        if c.physical_type == "INT96" or s is None:
            return None  # legacy Spark timestamps: Parquet writers' INT96 statistics are unreliable
        if not s.has_min_max:
            if s.has_null_count and s.null_count == c.num_values:
                continue  # an all-null row group bounds nothing
            return None
        values.append(s.min if what == "min" else s.max)
    if not values:
        return None
    try:
        value = min(values) if what == "min" else max(values)
    except TypeError:
        return None
    return _to_json(value, t, what)


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
