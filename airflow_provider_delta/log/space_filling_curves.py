"""Space-filling curves for OPTIMIZE: rows that are close in several columns get close sort keys.

Delta Spark's Z-order (``MultiDimClustering``) maps each column to a *range id*: its rank among
``num_ranges`` ranges whose boundaries are sampled from the data (``RangePartitionId``, nulls rank 0); the
range ids of a row's columns are then interleaved bit by bit, most significant bit first, first column
first (``InterleaveBits``), and the rows are range-partitioned by that key into files. Liquid clustering
uses a Hilbert curve over the same range ids when it clusters by more than one column (Skilling's
transform, "Programming the Hilbert curve", 2004, before the same interleaving).

Both engines compute keys with these functions: pyarrow in the task, and Spark executors, to which the
driver ships the boundaries (``range_boundaries``). Keys are fixed-size big-endian byte strings, so Arrow,
numpy and Spark order them alike. Only the low ``bits`` bits of each range id are interleaved: range ids
are below ``num_ranges``, so the higher bits Delta Spark also interleaves are zero in every row and do not
change the order.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

DEFAULT_NUM_RANGES = 1000  # Delta Spark's spark.databricks.io.skipping.mdc.rangeId.max
_CHUNK_ROWS = 1 << 20  # keys are built a million rows at a time (a bit matrix per chunk)


def bits_for(num_ranges: int) -> int:
    """Bits that hold a range id below ``num_ranges``."""
    if num_ranges < 2:
        raise ValueError(f"num_ranges must be at least 2, not {num_ranges}")
    return (num_ranges - 1).bit_length()


def comparable(values: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """A column as a numpy array that sorts as Spark orders the column (nulls dropped by the caller):
    numbers and booleans as numbers, dates and timestamps as their integers, decimals as floats, strings
    and binary as byte strings (Spark compares strings by their UTF-8 bytes)."""
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    t = values.type
    if pa.types.is_dictionary(t):
        values, t = values.dictionary_decode(), t.value_type
    if pa.types.is_boolean(t):
        return values.cast(pa.int8()).to_numpy(zero_copy_only=False)
    if pa.types.is_temporal(t):
        width = pa.int32() if pa.types.is_date32(t) else pa.int64()
        return values.view(width).to_numpy(zero_copy_only=False)
    if pa.types.is_decimal(t):
        return values.cast(pa.float64()).to_numpy(zero_copy_only=False)
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        values = values.cast(pa.binary())
        t = values.type
    if pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_fixed_size_binary(t):
        return np.array(values.to_pylist(), dtype=object).astype(bytes)
    if pa.types.is_integer(t) or pa.types.is_floating(t):
        return values.to_numpy(zero_copy_only=False)
    raise TypeError(f"a column of type {t} has no order to cluster by")


def range_boundaries(values: pa.Array | pa.ChunkedArray, num_ranges: int = DEFAULT_NUM_RANGES) -> np.ndarray:
    """At most ``num_ranges - 1`` sorted, distinct boundaries that split the non-null ``values`` into ranges
    of about equal size: the values at each ``1/num_ranges`` quantile (Spark's ``RangePartitioner`` picks
    them from a sample; pass a sample for big data)."""
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    present = comparable(values.drop_null())
    if len(present) == 0:
        return present
    ordered = np.sort(present, kind="stable")
    picks = (np.arange(1, num_ranges) * len(ordered)) // num_ranges
    return np.unique(ordered[np.minimum(picks, len(ordered) - 1)])


def range_ids(values: pa.Array | pa.ChunkedArray, boundaries: np.ndarray) -> np.ndarray:
    """Each value's range: how many boundaries are below it (as Spark's range partitioner); nulls 0."""
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    out = np.zeros(len(values), dtype=np.uint32)
    if len(boundaries) == 0 or len(values) == 0:
        return out
    valid = values.is_valid().to_numpy(zero_copy_only=False)
    present = comparable(values.filter(pa.array(valid)))
    out[valid] = np.searchsorted(boundaries, present, side="left").astype(np.uint32)
    return out


def interleave(ids: Sequence[np.ndarray], bits: int) -> pa.FixedSizeBinaryArray:
    """Z-values: the ``bits`` low bits of each column's ids, interleaved from the most significant bit,
    first column first, as big-endian bytes (``InterleaveBits``)."""
    n = len(ids[0]) if ids else 0
    width = (len(ids) * bits + 7) // 8
    chunks = []
    for start in range(0, n, _CHUNK_ROWS):
        part = [np.asarray(c[start : start + _CHUNK_ROWS], dtype=np.uint32) for c in ids]
        shifts = np.arange(bits - 1, -1, -1, dtype=np.uint32)
        # (rows, bits, columns): bit ``b`` of every column, from the most significant bit down.
        matrix = np.stack([(c[:, None] >> shifts) & 1 for c in part], axis=2).astype(np.uint8)
        packed = np.packbits(matrix.reshape(len(part[0]), -1), axis=1)
        chunks.append(pa.array(packed.reshape(-1).view(f"S{width}"), pa.binary(width)))
    if not chunks:
        return pa.array([], pa.binary(max(width, 1)))
    return pa.concat_arrays(chunks) if len(chunks) > 1 else chunks[0]


def hilbert(ids: Sequence[np.ndarray], bits: int) -> pa.FixedSizeBinaryArray:
    """Hilbert-curve keys of the points ``ids`` (one array per dimension, ``bits`` bits each): Skilling's
    axes-to-transpose transform, then the same interleaving as Z-values."""
    x = [np.asarray(c, dtype=np.uint32).copy() for c in ids]
    if len(x) < 2:
        return interleave(x, bits)
    top = np.uint32(1 << (bits - 1))
    q = top
    while q > 1:  # undo excess work: invert or exchange the low bits, per dimension
        p = np.uint32(q - 1)
        for i in range(len(x)):
            high = (x[i] & q) != 0
            x[0] = np.where(high, x[0] ^ p, x[0])
            swap = np.where(high, 0, (x[0] ^ x[i]) & p).astype(np.uint32)
            x[0] ^= swap
            x[i] ^= swap
        q = np.uint32(q >> 1)
    for i in range(1, len(x)):  # Gray encode
        x[i] ^= x[i - 1]
    t = np.zeros_like(x[0])
    q = top
    while q > 1:
        t = np.where((x[-1] & q) != 0, t ^ np.uint32(q - 1), t).astype(np.uint32)
        q = np.uint32(q >> 1)
    return interleave([c ^ t for c in x], bits)


def curve_keys(
    columns: Sequence[pa.Array | pa.ChunkedArray],
    boundaries: Sequence[np.ndarray],
    curve: str,
    num_ranges: int = DEFAULT_NUM_RANGES,
) -> pa.FixedSizeBinaryArray:
    """Sort keys of rows for ``curve`` (``zorder`` or ``hilbert``) over ``columns``, given each column's
    boundaries (``range_boundaries``)."""
    ids = [range_ids(c, b) for c, b in zip(columns, boundaries, strict=True)]
    if curve == "zorder" or len(ids) == 1:  # as Delta Spark: a Hilbert curve of one column is its order
        return interleave(ids, bits_for(num_ranges))
    if curve == "hilbert":
        return hilbert(ids, bits_for(num_ranges))
    raise ValueError(f"unknown curve {curve!r}: zorder or hilbert")


def split_points(keys: pa.Array, parts: int) -> np.ndarray:
    """Row positions, in key order, where each of ``parts`` about-equal ranges of the sorted keys starts
    (the first at 0); rows with equal keys may fall on both sides, as Delta Spark's random tie-breaker
    lets them."""
    n = len(keys)
    parts = max(1, min(parts, n)) if n else 1
    return (np.arange(parts) * n) // parts


def order_of(keys: pa.Array) -> np.ndarray:
    """Row positions sorted by key (stable, so rows with equal keys keep their input order)."""
    return pc.sort_indices(keys).to_numpy()
