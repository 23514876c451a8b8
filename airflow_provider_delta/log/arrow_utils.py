"""Arrow helpers shared by replay and checkpoints: conforming structs, struct->map, URI path decoding.

Kept apart so the protocol modules read as protocol, not as Arrow plumbing.
"""

from __future__ import annotations

from collections.abc import Callable
from urllib.parse import unquote

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc


def conform(arr: pa.Array | pa.ChunkedArray, target: pa.DataType) -> pa.Array:
    """Reshape ``arr`` to ``target`` by field name: missing fields become null, extra ones are dropped.

    Different writers put different subsets of fields in checkpoints and commits; replay needs one shape.
    """
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks() if arr.num_chunks != 1 else arr.chunk(0)
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


def struct_to_map(arr: pa.StructArray, *, drop_nulls: bool) -> pa.MapArray:
    """Turn a struct inferred from JSON objects (``{"p": "1"}``) into ``map<string,string>``, vectorised.

    Arrow's JSON reader cannot produce maps, so objects with free-form keys (``partitionValues``, ``tags``)
    arrive as structs over the union of keys in the batch.
    """
    n = len(arr)
    k = arr.type.num_fields
    row_valid = (
        np.ones(n, dtype=bool) if arr.null_count == 0 else arr.is_valid().to_numpy(zero_copy_only=False)
    )
    if k == 0:
        offsets = pa.array(np.zeros(n + 1, dtype=np.int32))
        empty = pa.array([], pa.string())
        return pa.MapArray.from_arrays(offsets, empty, empty, mask=pa.array(~row_valid))
    names = [arr.type.field(i).name for i in range(k)]
    values = [arr.field(i).cast(pa.string()) for i in range(k)]
    # entry (row i, key j) sits at j*n + i in the concatenation of the children
    flat_values = pa.concat_arrays(values)
    flat_keys = pa.array(np.repeat(np.array(names, dtype=object), n), pa.string())
    order = (np.arange(k)[None, :] * n + np.arange(n)[:, None]).ravel()
    keep = np.repeat(row_valid, k)
    if drop_nulls:
        keep &= flat_values.is_valid().to_numpy(zero_copy_only=False)[order]
    order = order[keep]
    counts = keep.reshape(n, k).sum(axis=1)
    offsets = np.zeros(n + 1, dtype=np.int32)
    np.cumsum(counts, out=offsets[1:])
    idx = pa.array(order)
    return pa.MapArray.from_arrays(
        pa.array(offsets), flat_keys.take(idx), flat_values.take(idx), mask=pa.array(~row_valid)
    )


def _map_matching(strings: pa.Array, matches: pa.Array, fn: Callable[[str], str]) -> pa.Array:
    """Apply ``fn`` to the rows where ``matches`` holds, in Python; the rest stay Arrow, zero-copy when
    no row matches (the common case for paths)."""
    if isinstance(strings, pa.ChunkedArray):
        strings = strings.combine_chunks()
    if isinstance(matches, pa.ChunkedArray):
        matches = matches.combine_chunks()
    matches = pc.fill_null(matches, False)
    if not pc.any(matches).as_py():
        return strings
    positions = np.flatnonzero(matches.to_numpy(zero_copy_only=False))
    changed = [fn(s) for s in strings.take(pa.array(positions)).to_pylist()]
    out = strings.to_numpy(zero_copy_only=False).copy()
    out[positions] = changed
    return pa.array(out, pa.string())


def decode_uri_paths(paths: pa.Array) -> pa.Array:
    """Decode RFC 2396 escapes in action paths ("Add File and Remove File": the path is a URI)."""
    return _map_matching(paths, pc.match_substring(paths, "%"), unquote)


_PATH_SAFE = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-!.~'()*,;:$&+=/@")


def encode_uri_path(path: str) -> str:
    """Encode a file path for the log as Delta Spark does (Hadoop ``Path.toUri``).

    ASCII characters that are not legal in a URI path (space, ``%``, ``#``, ``?``, brackets ...) are
    percent-encoded as UTF-8; non-ASCII characters stay as they are, as in Delta Spark's logs.
    """
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
