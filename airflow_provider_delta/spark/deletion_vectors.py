"""Deletion vectors: which rows of a data file are deleted ("Deletion Vectors", "Deletion Vector Format").

A descriptor (``add.deletionVector``) points at a bitmap of row indexes, stored in a file beside the data
(``u``: relative, named by a Z85-encoded UUID; ``p``: an absolute path) or inline in the log (``i``). The
bitmap is a 64-bit ``RoaringBitmapArray`` in RoaringBitmap's "portable" serialization, decoded here with
numpy (no native roaring library needed). Readers drop the rows whose index is in the bitmap.
"""

from __future__ import annotations

import posixpath
import struct
import uuid
import zlib
from collections.abc import Mapping
from typing import Any

import numpy as np

from airflow_provider_delta.log.errors import CorruptLogError, UnsupportedFeatureError

_Z85 = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#"
_Z85_VALUE = {c: i for i, c in enumerate(_Z85)}
_UUID_CHARS = 20  # a 16-byte UUID is 20 Z85 characters
_PORTABLE_MAGIC = 1681511377  # "Deletion Vector Format": RoaringBitmapArray, portable serialization
_SERIAL_COOKIE = 12347  # RoaringBitmap format: run containers present
_SERIAL_COOKIE_NO_RUN = 12346
_NO_OFFSET_THRESHOLD = 4
_ARRAY_MAX = 4096


class DeletionVectorError(CorruptLogError):
    """A deletion vector cannot be read: missing file, wrong size or checksum, unknown encoding."""


def z85_decode(text: str) -> bytes:
    """Decode Z85 text (Delta's Base85 variant); each 5 characters give 4 big-endian bytes."""
    if len(text) % 5:
        raise DeletionVectorError(f"Z85 text of length {len(text)} is not a multiple of 5")
    out = bytearray()
    try:
        for i in range(0, len(text), 5):
            value = 0
            for c in text[i : i + 5]:
                value = value * 85 + _Z85_VALUE[c]
            out += value.to_bytes(4, "big")
    except (KeyError, OverflowError) as exc:
        raise DeletionVectorError(f"invalid Z85 text {text[:40]!r}") from exc
    return bytes(out)


def dv_file_path(descriptor: Mapping[str, Any], table_root: str) -> str:
    """Where a ``u`` or ``p`` deletion vector is stored (``<root>/<prefix>/deletion_vector_<uuid>.bin``)."""
    kind, value = descriptor["storageType"], descriptor["pathOrInlineDv"]
    if kind == "p":
        return value
    if kind != "u":
        raise UnsupportedFeatureError(f"deletion vector storage type {kind!r}", features=("deletionVectors",))
    prefix, encoded = value[:-_UUID_CHARS], value[-_UUID_CHARS:]
    name = f"deletion_vector_{uuid.UUID(bytes=z85_decode(encoded))}.bin"
    return posixpath.join(table_root, prefix, name) if prefix else posixpath.join(table_root, name)


def read_dv_bytes(descriptor: Mapping[str, Any], table_root: str, fs: Any) -> bytes:
    """The serialized bitmap of a descriptor: decoded inline text, or read (size and CRC checked) from a file.

    A stored vector sits at ``offset`` in its file as a big-endian size, the bitmap, and a CRC-32 of it.
    """
    size = int(descriptor["sizeInBytes"])
    if descriptor["storageType"] == "i":
        return z85_decode(descriptor["pathOrInlineDv"])[:size]
    path = dv_file_path(descriptor, table_root)
    if "://" in path:
        import fsspec

        fs, path = fsspec.core.url_to_fs(path, **getattr(fs, "storage_options", {}))
    offset = int(descriptor.get("offset") or 1)  # version byte first: the first vector starts at 1
    try:
        with fs.open(path, "rb") as fh:
            fh.seek(offset)
            blob = fh.read(size + 8)
    except FileNotFoundError as exc:
        raise DeletionVectorError(f"deletion vector file {path} is missing") from exc
    (stored_size,) = struct.unpack(">i", blob[:4])
    data = blob[4 : 4 + size]
    if stored_size != size or len(data) != size:
        raise DeletionVectorError(f"deletion vector at {path}@{offset}: size {stored_size}, expected {size}")
    (crc,) = struct.unpack(">I", blob[4 + size : 8 + size])
    if zlib.crc32(data) != crc:
        raise DeletionVectorError(f"deletion vector at {path}@{offset}: checksum mismatch")
    return data


def deleted_rows(descriptor: Mapping[str, Any], table_root: str, fs: Any) -> np.ndarray:
    """Sorted row indexes (uint64) that the descriptor marks as deleted."""
    rows = decode_bitmap(read_dv_bytes(descriptor, table_root, fs))
    expected = descriptor.get("cardinality")
    if expected is not None and len(rows) != int(expected):
        raise DeletionVectorError(f"deletion vector holds {len(rows)} rows, its descriptor says {expected}")
    return rows


def decode_bitmap(data: bytes) -> np.ndarray:
    """A ``RoaringBitmapArray`` (magic, count, then per 32-bit bitmap its high key and portable bytes)."""
    (magic,) = struct.unpack_from("<i", data, 0)
    if magic != _PORTABLE_MAGIC:
        raise DeletionVectorError(f"deletion vector magic number {magic}, expected {_PORTABLE_MAGIC}")
    (count,) = struct.unpack_from("<q", data, 4)
    pos = 12
    parts = []
    for _ in range(count):
        (high,) = struct.unpack_from("<I", data, pos)
        values, pos = _decode_roaring32(data, pos + 4)
        parts.append(values.astype(np.uint64) | (np.uint64(high) << np.uint64(32)))
    return np.concatenate(parts) if parts else np.empty(0, np.uint64)


def _decode_roaring32(data: bytes, pos: int) -> tuple[np.ndarray, int]:
    """One 32-bit RoaringBitmap in the portable format; returns its values and the position after it."""
    (cookie,) = struct.unpack_from("<I", data, pos)
    pos += 4
    if cookie & 0xFFFF == _SERIAL_COOKIE:
        n = (cookie >> 16) + 1
        run_flags = np.frombuffer(data, np.uint8, (n + 7) // 8, pos)
        pos += (n + 7) // 8
        is_run = np.unpackbits(run_flags, bitorder="little")[:n].astype(bool)
    elif cookie == _SERIAL_COOKIE_NO_RUN:
        (n,) = struct.unpack_from("<I", data, pos)
        pos += 4
        is_run = np.zeros(n, bool)
    else:
        raise DeletionVectorError(f"unknown RoaringBitmap cookie {cookie}")
    header = np.frombuffer(data, "<u2", 2 * n, pos).reshape(n, 2)
    pos += 4 * n
    if not is_run.any() or n >= _NO_OFFSET_THRESHOLD:
        pos += 4 * n  # the offset header: only needed for random access
    out = []
    for i in range(n):
        key = np.uint32(header[i, 0]) << np.uint32(16)
        card = int(header[i, 1]) + 1
        if is_run[i]:
            (n_runs,) = struct.unpack_from("<H", data, pos)
            runs = np.frombuffer(data, "<u2", 2 * n_runs, pos + 2).reshape(n_runs, 2).astype(np.uint32)
            pos += 2 + 4 * n_runs
            low = np.concatenate([np.arange(s, s + length + 1, dtype=np.uint32) for s, length in runs])
        elif card > _ARRAY_MAX:
            words = np.frombuffer(data, np.uint8, 8192, pos)
            pos += 8192
            low = np.flatnonzero(np.unpackbits(words, bitorder="little")).astype(np.uint32)
        else:
            low = np.frombuffer(data, "<u2", card, pos).astype(np.uint32)
            pos += 2 * card
        out.append(key | low)
    return (np.concatenate(out) if out else np.empty(0, np.uint32)), pos
