"""optimize: compacting 10,000 small files (50 rows each) with pyarrow in the process, against deltalake.

- ours: ``DeltaTable(path).optimize()`` (``log.optimize``: the bin read with the scan, written with the
  Arrow writer, one OPTIMIZE commit);
- deltalake: ``deltalake.DeltaTable(path).optimize.compact()``.

The table is ``optimize_10k``: unpartitioned, 10,000 Parquet files of 50 rows (id, value, name, ts), one
commit; both engines' defaults put every file into one bin (the files total far less than the 1 GiB
target) and write one file. Each run works on a fresh copy (the log copied, data files hard-linked:
OPTIMIZE only adds files and commits). Every run must report 10,000 files removed and 1 added; afterwards
one copy of each is read back by deltalake, which must find the 500,000 rows in one file.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

TABLE = "optimize_10k"
FILES = 10_000
ROWS_PER_FILE = 50
GOALS = {"wall_s": 1.0, "peak_delta_kib": 1.5}
_COPY_PREFIX = "copy-"
_GENERATOR_VERSION = 1


def add_arguments(parser: argparse.ArgumentParser) -> None:
    del parser  # no options of its own


def ensure_table(data_dir: Path) -> Path:
    """The cached table of small files, made once (about 20 s): files by pyarrow, one commit by the core."""
    path = Path(data_dir) / f"{TABLE}-v{_GENERATOR_VERSION}"
    marker = path / "_complete"
    if marker.exists():
        return path
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    from airflow_provider_delta.log import DeltaTable, add_file_from_parquet

    shutil.rmtree(path, ignore_errors=True)
    schema = pa.schema([("id", pa.int64()), ("value", pa.float64()), ("name", pa.string()),
                        ("ts", pa.timestamp("us", tz="UTC"))])  # fmt: skip
    table = DeltaTable.create(str(path), schema)
    rng = np.random.default_rng(20261124)
    names = [f"name-{i:03d}" for i in range(100)]
    snapshot = table.snapshot()
    adds = []
    for i in range(FILES):
        first = i * ROWS_PER_FILE
        rel = f"part-{i:05d}-{uuid.uuid4()}.c000.snappy.parquet"
        pq.write_table(pa.table({
            "id": pa.array(np.arange(first, first + ROWS_PER_FILE, dtype=np.int64)),
            "value": pa.array(rng.random(ROWS_PER_FILE)),
            "name": pa.array([names[j] for j in rng.integers(0, 100, ROWS_PER_FILE)]),
            "ts": pa.array(1_700_000_000_000_000 + rng.integers(0, 10**12, ROWS_PER_FILE),
                           schema.field("ts").type),
        }, schema=schema), path / rel)  # fmt: skip
        adds.append(add_file_from_parquet(snapshot, rel))
    table.transaction().add_files(adds).commit("WRITE")
    marker.touch()
    return path


def _copy(table: Path, base: Path, impl: str) -> Path:
    copy = base / f"{_COPY_PREFIX}{impl}-{uuid.uuid4().hex[:12]}"
    subprocess.run(["cp", "-al", str(table), str(copy)], check=True)
    shutil.rmtree(copy / "_delta_log")
    subprocess.run(["cp", "-a", str(table / "_delta_log"), str(copy / "_delta_log")], check=True)
    return copy


# -- child side -------------------------------------------------------------------------------------------
def prepare(impl: str, table: str, base: str) -> Callable[[], dict[str, Any]]:
    path = str(_copy(Path(table), Path(base), impl))
    if impl == "ours":
        from airflow_provider_delta.log import DeltaTable

        def ours() -> dict[str, Any]:
            m = DeltaTable(path).optimize()
            return {"removed": m.num_files_removed, "added": m.num_files_added, "copy": path}

        return ours
    if impl == "deltalake":
        import deltalake

        def theirs() -> dict[str, Any]:
            m = deltalake.DeltaTable(path).optimize.compact()
            return {"removed": m["numFilesRemoved"], "added": m["numFilesAdded"], "copy": path}

        return theirs
    raise ValueError(f"unknown implementation {impl!r}")


# -- parent side ------------------------------------------------------------------------------------------
def _check(copy: str) -> None:
    import deltalake

    dt = deltalake.DeltaTable(copy)
    rows = dt.to_pyarrow_table(columns=["id"])
    if len(dt.file_uris()) != 1 or rows.num_rows != FILES * ROWS_PER_FILE:
        raise RuntimeError(f"{copy}: {len(dt.file_uris())} files and {rows.num_rows} rows after OPTIMIZE")
    if sorted(rows.column("id").to_pylist()) != list(range(FILES * ROWS_PER_FILE)):
        raise RuntimeError(f"{copy}: the rows after OPTIMIZE are not the rows before")


def run(args: argparse.Namespace) -> dict[str, Any]:
    from . import measure

    table = ensure_table(args.data_dir)
    base = Path(args.data_dir) / f"optimize-{uuid.uuid4().hex[:8]}"
    base.mkdir(parents=True)
    try:
        load_before = os.getloadavg()
        result = measure.compare("optimize", [str(table), str(base)], args.runs,
                                 {"removed": FILES, "added": 1}, args.data_dir)  # fmt: skip
        load_after = os.getloadavg()
        for impl in measure.IMPLS:
            _check(result["samples"][impl][-1]["copy"])
    finally:
        shutil.rmtree(base, ignore_errors=True)
    title = (f"optimize: compaction of {FILES:,} files of {ROWS_PER_FILE} rows, pyarrow in the process "
             f"(load average {load_before[0]:.1f} before, {load_after[0]:.1f} after)")  # fmt: skip
    print(measure.format_table(title, result, GOALS))
    return {"table": TABLE, "files": FILES, "rows_per_file": ROWS_PER_FILE, "load_before": load_before,
            "load_after": load_after, **result}  # fmt: skip
