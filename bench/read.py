"""read: open a table and get the latest snapshot's file list as Arrow, ours against deltalake.

- ours: ``DeltaTable(path).snapshot()``, then ``.version`` and ``.files`` (a pyarrow.Table, one row per
  live add).
- deltalake: ``deltalake.DeltaTable(path)``, ``.version()`` and ``pyarrow.table(dt.get_add_actions(
  flatten=False))``, its closest equivalent (one row per live add with path, size, modification time,
  partition values and stats), rather than ``file_uris()``, which is only a list of path strings.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

GOALS = {"wall_s": 1.0, "peak_delta_kib": 1.5}  # ours/deltalake, from the benchmark issue
TABLES = ("checkpoint_1m", "json_10k")
TITLES = {
    "checkpoint_1m": "read: classic checkpoint of 1,000,000 adds + 50 JSON commits",
    "json_10k": "read: 10,000 JSON commits of 10 adds, no checkpoint",
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--table", choices=TABLES, action="append", help="only this table (repeatable; default: all)"
    )


def run(args: argparse.Namespace) -> dict[str, Any]:
    from . import measure, tables

    results = {}
    for name in args.table or TABLES:
        table = tables.ensure_table(name, args.data_dir)
        expect = {"version": table.version, "num_files": table.num_files}
        result = measure.compare("read", [str(table.path)], args.runs, expect, args.data_dir)
        print(measure.format_table(TITLES[name], result, GOALS), end="\n\n", flush=True)
        results[name] = {"title": TITLES[name], "goals": GOALS, **expect, **result}
    return {"tables": results}


def prepare(impl: str, path: str) -> Callable[[], dict[str, Any]]:
    """Import ``impl`` (outside the timed region) and return the work to time."""
    import pyarrow as pa

    if impl == "ours":
        from airflow_provider_delta.log import DeltaTable

        def ours() -> dict[str, Any]:
            snapshot = DeltaTable(path).snapshot()
            files: pa.Table = snapshot.files
            return {"version": snapshot.version, "num_files": files.num_rows}

        return ours
    if impl == "deltalake":
        import deltalake

        def theirs() -> dict[str, Any]:
            dt = deltalake.DeltaTable(path)
            files = pa.table(dt.get_add_actions(flatten=False))
            return {"version": dt.version(), "num_files": files.num_rows}

        return theirs
    raise ValueError(f"unknown implementation {impl!r}")
