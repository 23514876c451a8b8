"""Arrow helpers shared by replay and checkpoints: conforming structs, struct->map, URI path decoding.

Kept apart so the protocol modules read as protocol, not as Arrow plumbing.
"""

from __future__ import annotations

import datetime as dt
import os
import re
from collections.abc import Callable
from decimal import Decimal
from typing import Any
from urllib.parse import unquote

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc


def rows_pool() -> pa.MemoryPool:
    """The memory pool a read allocates the rows it hands back from, unless its caller names one: the
    system allocator, or pyarrow's default pool when ``ARROW_DEFAULT_MEMORY_POOL`` chooses it.

    Why not pyarrow's default (mimalloc): a read keeps all it allocates for its rows (hundreds of MiB for a
    large table), and mimalloc backs such allocations with transparent huge pages where Linux allows them.
    Reading ``rows_10m`` whole that meant 535 MiB of huge pages, 4-12 % more peak RSS than ``malloc`` and
    system time that varied fourfold from run to run (0.2-0.9 s, the first touch of each 2 MiB page); with
    ``malloc`` it stayed at 0.2-0.3 s. The decoder's short-lived buffers stay in the default pool, which
    recycles them between files.
    """
    chosen = os.environ.get("ARROW_DEFAULT_MEMORY_POOL")
    return pa.default_memory_pool() if chosen else pa.system_memory_pool()


def copied(array: pa.ChunkedArray, pool: pa.MemoryPool | None = None) -> pa.Array:
    """``array`` as one array in fresh buffers from ``pool`` (a copy even of a single chunk).

    ``pa.concat_arrays``, not ``ChunkedArray.combine_chunks``: that allocates from the default pool
    whichever pool it is given (pyarrow 26).
    """
    return pa.concat_arrays(array.chunks, memory_pool=pool) if array.num_chunks else pa.nulls(0, array.type)


# pyarrow imports pandas the first time it converts Python or numpy values (``pa.array``, ``pa.scalar``, a
# Python number or string given to a compute function, ``ChunkedArray.to_numpy``): about 45 MiB and 0.15 s,
# more than reading a small table costs. The core builds its arrays from buffers instead, and passes compute
# functions Arrow scalars, so it never loads pandas itself.
def from_numpy(values: np.ndarray) -> pa.Array:
    """A 1-d numpy array of numbers or booleans as Arrow (zero-copy for numbers), without pandas."""
    values = np.ascontiguousarray(values)
    if values.dtype == np.bool_:
        bits = np.packbits(values, bitorder="little")
        return pa.Array.from_buffers(pa.bool_(), len(values), [None, pa.py_buffer(bits)])
    return pa.Array.from_buffers(pa.from_numpy_dtype(values.dtype), len(values), [None, pa.py_buffer(values)])


def from_strings(values: list[str]) -> pa.Array:
    """A list of Python strings as an Arrow string array, without pandas."""
    encoded = [v.encode("utf-8") for v in values]
    offsets = np.zeros(len(encoded) + 1, dtype=np.int64)
    np.cumsum(np.fromiter(map(len, encoded), dtype=np.int64, count=len(encoded)), out=offsets[1:])
    kind, offsets = (
        (pa.string(), offsets.astype(np.int32)) if offsets[-1] < 2**31 else (pa.large_string(), offsets)
    )
    data = pa.py_buffer(b"".join(encoded))
    return pa.Array.from_buffers(kind, len(encoded), [None, pa.py_buffer(offsets), data]).cast(pa.string())


def int64_scalar(value: int) -> pa.Scalar:
    """An Arrow int64 scalar, for compute functions (a Python int would be converted through pandas)."""
    return from_numpy(np.array([value], dtype=np.int64))[0]


_EPOCH = dt.datetime(1970, 1, 1)
_EPOCH_UTC = _EPOCH.replace(tzinfo=dt.UTC)
_MICROS = {"s": 1_000_000, "ms": 1_000, "us": 1, "ns": None}


def scalar(value: Any, kind: pa.DataType) -> pa.Scalar:
    """``pa.scalar(value, kind)`` for the flat types of a Delta schema, without pandas: numbers and booleans
    from numpy, text and decimals cast from their exact string form, dates and timestamps from their count
    of days or microseconds. Other types (nested, nanosecond timestamps) fall back to ``pa.scalar``."""
    if isinstance(value, pa.Scalar):
        return value if value.type == kind else value.cast(kind)
    if value is None:
        return pa.nulls(1, kind)[0]
    if pa.types.is_boolean(kind) and isinstance(value, bool):
        return (TRUE if value else FALSE) if kind == pa.bool_() else pa.scalar(value, kind)
    if pa.types.is_integer(kind) and type(value) is int and -(2**63) <= value < 2**63:
        # a safe cast: a value out of the type's range raises, as with pa.scalar
        return from_numpy(np.array([value], dtype=np.int64)).cast(kind)[0]
    if pa.types.is_floating(kind) and type(value) is float:
        return from_numpy(np.array([value], dtype=np.float64)).cast(kind)[0]
    if (pa.types.is_string(kind) or pa.types.is_large_string(kind)) and isinstance(value, str):
        return string_scalar(value, kind)
    if pa.types.is_decimal(kind) and isinstance(value, Decimal | int):
        return from_strings([str(value)]).cast(kind)[0]
    if pa.types.is_date32(kind) and isinstance(value, dt.date) and not isinstance(value, dt.datetime):
        days = np.array([(value - _EPOCH.date()).days], dtype=np.int32)
        return pa.Array.from_buffers(kind, 1, [None, pa.py_buffer(days)])[0]
    if pa.types.is_timestamp(kind) and _MICROS[kind.unit] and isinstance(value, dt.datetime):
        delta = value - (_EPOCH if value.tzinfo is None else _EPOCH_UTC)
        micros = (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds
        if micros % _MICROS[kind.unit]:
            return pa.scalar(value, kind)  # not whole units: let Arrow say so
        ticks = np.array([micros // _MICROS[kind.unit]], dtype=np.int64)
        return pa.Array.from_buffers(kind, 1, [None, pa.py_buffer(ticks)])[0]
    return pa.scalar(value, kind)


_STRING = pa.string()


def string_scalar(value: str | None, kind: pa.DataType = _STRING) -> pa.Scalar:
    """An Arrow string scalar (null for None), for compute functions, without pandas."""
    return (pa.nulls(1, kind) if value is None else from_strings([value]).cast(kind))[0]


FALSE = from_numpy(np.zeros(1, dtype=np.bool_))[0]
TRUE = from_numpy(np.ones(1, dtype=np.bool_))[0]
EMPTY_STRING = string_scalar("")
NULL_STRING = string_scalar(None)


def single(values: pa.Array | pa.ChunkedArray) -> pa.Array:
    """One array for a column: the chunk itself when there is one (no copy), an empty array when there is
    none (``combine_chunks`` of no chunks loads pandas)."""
    if not isinstance(values, pa.ChunkedArray):
        return values
    if values.num_chunks == 0:
        return pa.nulls(0, values.type)
    return values.chunk(0) if values.num_chunks == 1 else values.combine_chunks()


def empty_table(schema: pa.Schema) -> pa.Table:
    """A table of no rows (``Schema.empty_table`` loads pandas)."""
    return pa.Table.from_arrays([pa.nulls(0, f.type) for f in schema], schema=schema)


def to_numpy(values: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """A numeric array without nulls as numpy (a view of its buffer), without pandas (``to_numpy`` may
    load it)."""
    values = single(values)
    dtype = np.dtype(values.type.to_pandas_dtype())
    return np.frombuffer(
        values.buffers()[1], dtype=dtype, count=len(values), offset=values.offset * dtype.itemsize
    )


def true_rows(mask: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """The positions where a boolean array is true (null counts as false), as int64 numpy, without pandas."""
    return to_numpy(pc.indices_nonzero(mask)).astype(np.int64)


def conform(arr: pa.Array | pa.ChunkedArray, target: pa.DataType) -> pa.Array:
    """Reshape ``arr`` to ``target`` by field name: missing fields become null, extra ones are dropped.

    Different writers put different subsets of fields in checkpoints and commits; replay needs one shape.
    """
    arr = single(arr)
    if arr.type.equals(target):
        return arr
    if pa.types.is_struct(target):
        if pa.types.is_null(arr.type):
            return pa.nulls(len(arr), target)
        if not pa.types.is_struct(arr.type):
            raise TypeError(f"cannot conform {arr.type} to {target}")
        names = {arr.type.field(i).name: i for i in range(arr.type.num_fields)}
        children = []
        for f in target:
            if f.name in names:
                child = arr.field(names[f.name])
                children.append(conform(child, f.type))
            else:
                children.append(pa.nulls(len(arr), f.type))
        mask = arr.is_null() if arr.null_count else None
        return pa.StructArray.from_arrays(children, fields=list(target), mask=mask)
    if pa.types.is_map(target) and pa.types.is_struct(arr.type):
        return struct_to_map(arr, drop_nulls=False)
    if pa.types.is_map(target) and pa.types.is_null(arr.type):
        return pa.nulls(len(arr), target)
    return arr.cast(target)


def map_value(maps: pa.Array | pa.ChunkedArray, key: str) -> pa.Array | pa.ChunkedArray:
    """The value under ``key`` in each map (null where absent), as ``pc.map_lookup(..., "first")``.

    Writers give every file the same keys in the same order (partition values, above all), so the value
    usually sits at one position of every map: then it is taken from there, about 10x faster than Arrow's
    per-row lookup (0.49 s for 1,000,000 files). Any other shape is left to ``map_lookup``.
    """
    if isinstance(maps, pa.ChunkedArray):
        return pa.chunked_array([map_value(chunk, key) for chunk in maps.chunks], maps.type.item_type)
    if len(maps) == 0 or maps.null_count:
        return pc.map_lookup(maps, string_scalar(key), "first")
    offsets = to_numpy(maps.offsets)
    starts, lengths = offsets[:-1], np.diff(offsets)
    width = int(lengths[0])
    if width == 0 or not (lengths == width).all():
        return pc.map_lookup(maps, string_scalar(key), "first")
    keys, wanted = maps.keys, string_scalar(key)
    for position in range(width):
        at = from_numpy(starts + position)
        hits = pc.equal(keys.take(at), wanted)
        if pc.all(hits).as_py():
            return maps.items.take(at)
        if pc.any(hits).as_py():
            break  # at this position in some maps only: "first" needs the per-row lookup
    return pc.map_lookup(maps, string_scalar(key), "first")


def struct_to_map(arr: pa.StructArray, *, drop_nulls: bool) -> pa.MapArray:
    """Turn a struct inferred from JSON objects (``{"p": "1"}``) into ``map<string,string>``, vectorised.

    Arrow's JSON reader cannot produce maps, so objects with free-form keys (``partitionValues``, ``tags``)
    arrive as structs over the union of keys in the batch.
    """
    n = len(arr)
    k = arr.type.num_fields
    row_valid = np.ones(n, dtype=bool)
    if arr.null_count:
        row_valid[true_rows(arr.is_null())] = False
    if k == 0:
        offsets = from_numpy(np.zeros(n + 1, dtype=np.int32))
        empty = pa.nulls(0, pa.string())
        return pa.MapArray.from_arrays(offsets, empty, empty, mask=from_numpy(~row_valid))
    names = [arr.type.field(i).name for i in range(k)]
    values = [arr.field(i).cast(pa.string()) for i in range(k)]
    # entry (row i, key j) sits at j*n + i in the concatenation of the children
    flat_values = pa.concat_arrays(values)
    flat_keys = from_strings(names).take(from_numpy(np.repeat(np.arange(k, dtype=np.int64), n)))
    order = (np.arange(k)[None, :] * n + np.arange(n)[:, None]).ravel()
    keep = np.repeat(row_valid, k)
    if drop_nulls:
        valid = np.zeros(n * k, dtype=bool)
        valid[true_rows(flat_values.is_valid())] = True
        keep &= valid[order]
    order = order[keep]
    counts = keep.reshape(n, k).sum(axis=1)
    offsets = np.zeros(n + 1, dtype=np.int32)
    np.cumsum(counts, out=offsets[1:])
    idx = from_numpy(order)
    return pa.MapArray.from_arrays(
        from_numpy(offsets), flat_keys.take(idx), flat_values.take(idx), mask=from_numpy(~row_valid)
    )


def _map_matching(strings: pa.Array, matches: pa.Array, fn: Callable[[str], str]) -> pa.Array:
    """Apply ``fn`` to the rows where ``matches`` holds, in Python; the rest stay Arrow, zero-copy when
    no row matches (the common case for paths)."""
    strings, matches = single(strings), single(matches)
    positions = true_rows(matches)
    if not len(positions):
        return strings
    changed = [fn(s) for s in strings.take(from_numpy(positions)).to_pylist()]
    out = strings.to_pylist()
    for i, value in zip(positions.tolist(), changed, strict=True):
        out[i] = value
    return from_strings(out)


def decode_uri_paths(paths: pa.Array) -> pa.Array:
    """Decode RFC 2396 escapes in action paths ("Add File and Remove File": the path is a URI)."""
    return _map_matching(paths, pc.match_substring(paths, "%"), unquote)


_PATH_SAFE = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-!.~'()*,;:$&+=/@")
_ALL_SAFE = re.compile(r"[A-Za-z0-9_\-!.~'()*,;:$&+=/@\u0080-\U0010FFFF]*")


def encode_uri_path(path: str) -> str:
    """Encode a file path for the log as Delta Spark does (Hadoop ``Path.toUri``).

    ASCII characters that are not legal in a URI path (space, ``%``, ``#``, ``?``, brackets ...) are
    percent-encoded as UTF-8; non-ASCII characters stay as they are, as in Delta Spark's logs.
    """
    if _ALL_SAFE.fullmatch(path):
        return path  # the common case, without a loop over the characters
    out = []
    for ch in path:
        if ch in _PATH_SAFE or ord(ch) > 127:
            out.append(ch)
        else:
            out.extend(f"%{b:02X}" for b in ch.encode("utf-8"))
    return "".join(out)


def encode_uri_paths(paths: pa.Array) -> pa.Array:
    """``encode_uri_path`` over an Arrow array; only rows with a character to escape go through Python."""
    unsafe = pc.match_substring_regex(paths, r"[^A-Za-z0-9_\-!.~'()*,;:$&+=/@\x{80}-\x{10FFFF}]")
    return _map_matching(paths, unsafe, encode_uri_path)


# The most bytes the values of one ``string`` or ``binary`` array can hold: its offsets are 32-bit.
OFFSET_LIMIT = 2**31 - 1


def fitting_row_ranges(table: pa.Table) -> list[tuple[int, int]]:
    """Row ranges ``[start, stop)`` of ``table`` in each of which every column can be one array: ``[(0,
    len)]`` unless a column holds more than ``OFFSET_LIMIT`` bytes of string or binary values, at any depth.

    pyarrow returns such a column in several chunks, each one array: the ranges do not cross them. A
    dictionary-encoded string or binary column is one chunk of indices that would decode past the limit:
    its ranges come from a bound (the longest value times the rows), and only past that bound from its
    values measured row by row.
    """
    n = table.num_rows
    cuts: set[int] = set()
    for column in table.columns:
        if pa.types.is_dictionary(column.type):
            kind = column.type.value_type
            binary = pa.types.is_string(kind) or pa.types.is_binary(kind)
            if binary and _decoded_bound(column) > OFFSET_LIMIT:
                cuts.update(_cuts_by_size(_value_lengths(column)))
        elif column.num_chunks > 1:
            cuts.update(np.cumsum([len(c) for c in column.chunks])[:-1].tolist())
    bounds = [0, *sorted(c for c in cuts if 0 < c < n), n]
    return list(zip(bounds[:-1], bounds[1:], strict=True))


def _cuts_by_size(lengths: np.ndarray) -> list[int]:
    """Where to cut rows of these value lengths so that no range holds more than ``OFFSET_LIMIT`` bytes
    (a single longer value is a range of its own: Arrow names the error, if any)."""
    sums = np.concatenate([[0], np.cumsum(lengths)])
    cuts, start, n = [], 0, len(lengths)
    while start < n:
        stop = max(int(np.searchsorted(sums, sums[start] + OFFSET_LIMIT, side="right")) - 1, start + 1)
        if stop < n:
            cuts.append(stop)
        start = stop
    return cuts


def _decoded_bound(column: pa.ChunkedArray) -> int:
    """At least the bytes a dictionary-encoded column's values take decoded."""
    bound = 0
    for c in column.chunks:
        longest = pc.max(pc.binary_length(c.dictionary)).as_py() if len(c.dictionary) else 0
        bound += (longest or 0) * len(c)
    return bound


def _value_lengths(column: pa.ChunkedArray) -> np.ndarray:
    """Each row's value length in bytes, decoded (0 for a null), as int64."""
    zero = int64_scalar(0)
    parts = []
    for c in column.chunks:
        lengths = pc.binary_length(c.dictionary).cast(pa.int64()).fill_null(zero).to_numpy()
        indices = c.indices.cast(pa.int64()).fill_null(zero).to_numpy()
        parts.append(lengths[indices] if len(lengths) else np.zeros(len(c), np.int64))
    return np.concatenate(parts) if parts else np.zeros(0, np.int64)
