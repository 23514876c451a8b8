"""How ``deltalog`` prints: timestamps, sizes, aligned listings and a progress bar (for every command)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import IO, Any


def iso(ms: int | None) -> str | None:
    """ms since the epoch as ISO-8601 UTC with milliseconds, e.g. 2024-05-01T12:00:00.000Z."""
    if ms is None:
        return None
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def human_bytes(n: int) -> str:
    """Exact, then rounded: "1,458 bytes (1.4 KiB)"."""
    size, unit = float(n), "bytes"
    for bigger in ("KiB", "MiB", "GiB", "TiB"):
        if size < 1024:
            break
        size, unit = size / 1024, bigger
    return f"{n:,} bytes" if unit == "bytes" else f"{n:,} bytes ({size:.1f} {unit})"


def columns(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """Rows aligned under a header; the last column is not padded."""
    cells = [[str(c) for c in header]] + [["" if c is None else str(c) for c in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in cells)


def pairs(items: Sequence[tuple[str, Any]], indent: str = "") -> str:
    width = max((len(k) for k, _ in items), default=0)
    return "\n".join(f"{indent}{k.ljust(width)}  {'' if v is None else v}".rstrip() for k, v in items)


class ProgressBar:
    """``done/total`` as a bar on one line of ``stream``, redrawn only when the percentage moves (a vacuum
    of a million files calls it per batch; a terminal should not be written a million times)."""

    WIDTH = 30

    def __init__(self, label: str, stream: IO[str]) -> None:
        self.label = label
        self.stream = stream
        self._drawn: int | None = None  # the percentage on screen

    def __call__(self, done: int, total: int) -> None:
        percent = 100 * done // total if total else 100
        if percent == self._drawn:
            return
        self._drawn = percent
        step = self.WIDTH * percent // 100
        bar = "#" * step + "-" * (self.WIDTH - step)
        self.stream.write(f"\r{self.label} [{bar}] {percent:3d}% {done:,}/{total:,}")
        self.stream.flush()

    def close(self) -> None:
        if self._drawn is not None:
            self.stream.write("\n")
            self.stream.flush()
