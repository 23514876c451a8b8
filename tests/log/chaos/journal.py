"""Per-actor journals: append-only JSON lines that outlive a SIGKILL.

Each record is one ``os.write`` to a file opened with ``O_APPEND``, so a killed process leaves whole lines
(what the kernel accepted stays, killed or not); acknowledgements are fsynced too, as the brief of an
exactly-once writer asks: the parent must know what was acknowledged.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any


class Journal:
    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

    def write(self, record: dict[str, Any], *, sync: bool = False) -> None:
        line = json.dumps({**record, "at": round(time.time(), 3)}, separators=(",", ":"))
        os.write(self._fd, (line + "\n").encode())
        if sync:
            os.fsync(self._fd)


def read_journal(path: Path) -> list[dict[str, Any]]:
    """All whole records of ``path`` (none if it does not exist)."""
    if not path.exists():
        return []
    out = []
    for line in path.read_bytes().splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:  # a line cut short by a kill mid-write: it said nothing the parent relies on
            continue
    return out
