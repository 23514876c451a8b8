"""The floor: pyarrow alone reading the files a snapshot reads, with no reconciliation and no checks.

No reader can answer with less work than reading its files, so ``ours / floor`` says how much the core adds
on top of the reading itself (routing actions, reconciling, validating); ``ours / deltalake`` says nothing of
the kind, since deltalake may be slow or fast for reasons of its own. What the floor does:

- the checkpoint ``_last_checkpoint`` names, streamed in batches (``ParquetFile.iter_batches``, pyarrow's
  defaults), keeping the non-null rows of ``add`` (``columns``: only those leaves);
- the JSON commits after it, read whole (local reads, in order) and parsed in one ``pyarrow.json.read_json``
  over their concatenated bytes, letting Arrow infer the types.

It answers the number of add rows it read, which is not the number of live files (nothing is reconciled),
so ``bench.measure`` never checks a floor's answers.
"""

from __future__ import annotations

import io
import json
import os
from pathlib import Path

import pyarrow as pa
import pyarrow.json as pj
import pyarrow.parquet as pq


def log_files(table: str) -> tuple[list[Path], list[Path]]:
    """The checkpoint parts ``_last_checkpoint`` names and the commits after it (all, without one)."""
    log = Path(table) / "_delta_log"
    names = sorted(os.listdir(log))
    last = log / "_last_checkpoint"
    version = json.loads(last.read_text())["version"] if last.exists() else -1
    prefix = f"{version:020d}.checkpoint"
    checkpoint = [log / n for n in names if n.startswith(prefix) and n.endswith(".parquet")]
    commits = [log / n for n in names if n.endswith(".json") and int(n[:20]) > version]
    return checkpoint, commits


def read(table: str, columns: list[str] | None = None) -> tuple[list[pa.Array], pa.Table | None]:
    """The checkpoint's add rows (as struct arrays, batch by batch) and the commits as one Arrow table."""
    checkpoint, commits = log_files(table)
    adds = []
    for part in checkpoint:
        for batch in pq.ParquetFile(part).iter_batches(columns=columns):
            add = batch.column("add")
            adds.append(add.filter(add.is_valid()))
    parsed = None
    if commits:
        data = b"".join(c.read_bytes() for c in commits)
        parsed = pj.read_json(io.BytesIO(data), read_options=pj.ReadOptions(block_size=8 << 20))
    return adds, parsed


def count(adds: list[pa.Array], parsed: pa.Table | None) -> int:
    json_adds = 0
    if parsed is not None and "add" in parsed.column_names:
        json_adds = len(parsed) - parsed.column("add").null_count
    return sum(len(a) for a in adds) + json_adds
