"""Helpers for the Spark tests: deletion-vector encoders (the inverse of the reader's decoder), oracles."""

from __future__ import annotations

import os
import struct
import zlib
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

GOLDEN = Path(os.environ["DELTA_SHARED_DIR"]) / "golden"
_Z85 = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#"


def z85_encode(data: bytes) -> str:
    data = data + b"\x00" * (-len(data) % 4)
    out = []
    for i in range(0, len(data), 4):
        value = int.from_bytes(data[i : i + 4], "big")
        chars = []
        for _ in range(5):
            value, digit = divmod(value, 85)
            chars.append(_Z85[digit])
        out.append("".join(reversed(chars)))
    return "".join(out)


def roaring32(values: Iterable[int], kind: str = "array") -> bytes:
    """A 32-bit RoaringBitmap in the portable format, every container of ``kind`` (array, bitmap, run)."""
    by_key: dict[int, list[int]] = {}
    for v in sorted(set(values)):
        by_key.setdefault(v >> 16, []).append(v & 0xFFFF)
    n = len(by_key)
    out = bytearray()
    if kind == "run":
        out += struct.pack("<I", 12347 | ((n - 1) << 16))
        out += bytes([0xFF] * ((n + 7) // 8))
    else:
        out += struct.pack("<II", 12346, n)
    for key, lows in by_key.items():
        out += struct.pack("<HH", key, len(lows) - 1)
    if kind != "run" or n >= 4:
        out += b"\x00\x00\x00\x00" * n  # offsets: unused by the reader
    for lows in by_key.values():
        # The format implies the container kind: more than 4096 values is a bitmap, else an array.
        if kind != "run" and len(lows) <= 4096:
            out += np.array(lows, "<u2").tobytes()
        elif kind != "run":
            bits = np.zeros(65536, np.uint8)
            bits[lows] = 1
            out += np.packbits(bits, bitorder="little").tobytes()
        else:
            runs = _runs(lows)
            out += struct.pack("<H", len(runs))
            for start, length in runs:
                out += struct.pack("<HH", start, length - 1)
    return bytes(out)


def _runs(lows: list[int]) -> list[tuple[int, int]]:
    runs: list[list[int]] = []
    for v in lows:
        if runs and runs[-1][0] + runs[-1][1] == v:
            runs[-1][1] += 1
        else:
            runs.append([v, 1])
    return [(s, n) for s, n in runs]


def bitmap_array(rows: Iterable[int], kind: str = "array") -> bytes:
    """Delta's 64-bit RoaringBitmapArray: magic, count, then (high key, 32-bit bitmap) pairs."""
    by_high: dict[int, list[int]] = {}
    for r in sorted(set(rows)):
        by_high.setdefault(r >> 32, []).append(r & 0xFFFFFFFF)
    out = struct.pack("<iq", 1681511377, len(by_high))
    for high, lows in by_high.items():
        out += struct.pack("<I", high) + roaring32(lows, kind)
    return out


def dv_file(bitmap: bytes) -> bytes:
    """A deletion vector file holding one vector at offset 1."""
    return b"\x01" + struct.pack(">i", len(bitmap)) + bitmap + struct.pack(">I", zlib.crc32(bitmap))


def kernel_rows(root: Path) -> pa.Table:
    import delta_kernel_rust_sharing_wrapper as dk

    url = root.resolve().as_uri() + "/"
    engine = dk.PythonInterface(url)
    snapshot = dk.Table(url).snapshot(engine)
    return dk.ScanBuilder(snapshot).build().execute(engine).read_all()


def rows(table: Any, columns: list[str] | None = None) -> list[tuple]:
    """Rows of an Arrow table (or Spark DataFrame) as sorted tuples, for order-free comparison."""
    if hasattr(table, "toArrow"):
        table = table.toArrow()
    columns = columns or table.column_names
    data = table.select(columns).to_pylist()
    return sorted((tuple(_hashable(r[c]) for c in columns) for r in data), key=repr)


def _hashable(value: Any) -> Any:
    if isinstance(value, dict):
        return tuple(sorted((k, _hashable(v)) for k, v in value.items()))
    if isinstance(value, list):
        return tuple(_hashable(v) for v in value)
    if hasattr(value, "tzinfo") and getattr(value, "tzinfo", None) is not None:
        return value.timestamp()
    return value
