"""Space-filling curves for OPTIMIZE: rows that are close in several columns get close sort keys.

Delta Spark's Z-order (``MultiDimClustering``) maps each column to a *range id*: its rank among
``num_ranges`` ranges whose boundaries are sampled from the data (``RangePartitionId``, nulls rank 0); the
range ids of a row's columns are then interleaved bit by bit, most significant bit first, first column
first (``InterleaveBits``), and the rows are range-partitioned by that key into files. Two refinements
here: range ids are stretched over the whole bit space before interleaving (so each bit halves a
column's rows, which 1000 ranges in 10 bits do not), and files are cut where the curve's blocks begin
(``cut_keys``) rather than at sampled keys; both keep the order Delta Spark's keys give and make files
whose bounding boxes are narrower, so readers skip more of them. Liquid clustering
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
    bits = bits_for(num_ranges)
    # Range ids spread over the whole bit space (there are rarely a power of two ranges, and fewer than
    # ``num_ranges`` when values repeat): each bit then halves a column's values, so blocks of the curve
    # hold about equal numbers of rows.
    ids = [(range_ids(c, b).astype(np.uint64) << np.uint64(bits)) // np.uint64(len(b) + 1)
           for c, b in zip(columns, boundaries, strict=True)]  # fmt: skip
    if curve == "zorder" or len(ids) == 1:  # as Delta Spark: a Hilbert curve of one column is its order
        return interleave(ids, bits)
    if curve == "hilbert":
        return hilbert(ids, bits)
    raise ValueError(f"unknown curve {curve!r}: zorder or hilbert")


def _matrix(keys: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """Fixed-size binary keys as a (rows, bytes) uint8 matrix, without copying them one by one."""
    if isinstance(keys, pa.ChunkedArray):
        keys = keys.combine_chunks()
    width = keys.type.byte_width
    data = np.frombuffer(keys.buffers()[1], dtype=np.uint8)
    return data[keys.offset * width : (keys.offset + len(keys)) * width].reshape(len(keys), width)


_LEADING_ZEROS = np.array([8 - int(b).bit_length() for b in range(256)], dtype=np.int64)


def cut_keys(sorted_keys: pa.Array | pa.ChunkedArray, parts: int, tolerance: float = 0.25) -> np.ndarray:
    """Where to split sorted curve keys into ``parts`` files of about equal rows: at most ``parts - 1``
    increasing keys, each the first key of a file (as ``S<bytes>`` numpy strings).

    Each cut is placed within ``tolerance`` of a file's rows from the equal-count position, where the
    neighbouring keys differ in the most significant bit; the cut key is the smallest key of that aligned
    block of the curve. A file then holds whole blocks of the curve as far as possible, whose bounding
    boxes are narrower than those of a stretch cut at an arbitrary key (as a sampled range partitioner
    cuts), so readers skip more files.
    """
    keys = _matrix(sorted_keys)
    n, width = keys.shape
    if parts <= 1 or n < 2:
        return np.array([], dtype=f"S{max(width, 1)}")
    diff = keys[1:] ^ keys[:-1]  # row j: how key j+1 differs from key j
    nonzero = diff != 0
    first = nonzero.argmax(axis=1)
    common = first * 8 + _LEADING_ZEROS[diff[np.arange(n - 1), first]]
    common[~nonzero.any(axis=1)] = width * 8  # equal keys: never cut between them
    size = n / parts
    slack = max(0, int(tolerance * size))
    cuts, last = [], 0
    for i in range(1, parts):
        ideal = int(round(i * size))
        lo, hi = max(last + 1, ideal - slack), min(n - 1, ideal + slack)
        if lo > hi:
            continue
        window = common[lo - 1 : hi]  # boundary before row j is common[j - 1]
        distance = np.abs(np.arange(lo, hi + 1) - ideal)
        j = lo + int(np.lexsort((distance, window))[0])
        bit = int(common[j - 1])
        if bit >= width * 8:
            continue
        cut = keys[j].copy()
        cut[bit // 8] &= np.uint8((0xFF00 >> (bit % 8 + 1)) & 0xFF)  # keep bits 0..bit of that byte
        cut[bit // 8 + 1 :] = 0
        cuts.append(cut.tobytes())
        last = j
    return np.array(sorted(set(cuts)), dtype=f"S{width}")


def part_ids(keys: pa.Array | pa.ChunkedArray, cuts: np.ndarray) -> np.ndarray:
    """The file each key goes to: how many cut keys are at or below it."""
    matrix = _matrix(keys)
    if len(cuts) == 0 or len(matrix) == 0:
        return np.zeros(len(matrix), dtype=np.int32)
    as_strings = np.ascontiguousarray(matrix).view(f"S{matrix.shape[1]}").ravel()
    return np.searchsorted(cuts, as_strings, side="right").astype(np.int32)
