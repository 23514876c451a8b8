"""read: open a table and get the latest snapshot's file list as Arrow, ours against deltalake.

- ours: ``DeltaTable(path).snapshot()``, then ``.version`` and ``.files`` (a pyarrow.Table, one row per
  live add).
- deltalake: ``deltalake.DeltaTable(path)``, ``.version()`` and ``pyarrow.table(dt.get_add_actions(
  flatten=False))``, its closest equivalent (one row per live add with path, size, modification time,
  partition values and stats), rather than ``file_uris()``, which is only a list of path strings.
- floor: pyarrow alone reading the same files, nothing reconciled (``bench.floor``).

Every table in both shapes (``bench.tables``).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .tables import BenchTable

# ours/deltalake and ours/floor (``@floor``, see ``bench.floor``), from the performance issue
GOALS = {
    "checkpoint_1m": {"wall_s": 0.5, "wall_s@floor": 2.0, "peak_delta_kib": 1.0},
    "json_10k": {"wall_s": 0.5, "wall_s@floor": 3.0, "peak_delta_kib": 1.0},
}
TABLES = ("checkpoint_1m", "json_10k")
SHAPES = ("narrow", "wide")  # bench.tables.SHAPES, not imported: it loads pyarrow into the parent


def title(table: BenchTable) -> str:
    base, _, shape = table.name.partition("-")
    if base == "checkpoint_1m":
        what = f"classic checkpoint of {table.num_files - 350:,} adds + 50 JSON commits"
    else:
        what = f"{table.version + 1:,} JSON commits of 10 adds, no checkpoint"
    return f"read ({shape or 'narrow'}): {what}"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--table", choices=TABLES, action="append", help="only this table (repeatable; default: all)"
    )
    parser.add_argument("--shape", choices=SHAPES, action="append", help="only this shape (default: both)")


def run(args: argparse.Namespace) -> dict[str, Any]:
    from . import measure, tables

    results = {}
    for base in args.table or TABLES:
        for shape in args.shape or SHAPES:
            name = base if shape == "narrow" else f"{base}-{shape}"
            table = tables.ensure_table(name, args.data_dir)
            expect = {"version": table.version, "num_files": table.num_files}
            result = measure.compare(
                "read", [str(table.path)], args.runs, expect, args.data_dir, measure.WITH_FLOOR
            )
            print(measure.format_table(title(table), result, GOALS[base]), end="\n\n", flush=True)
            results[name] = {"title": title(table), "goals": GOALS[base], **expect, **result}
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
    if impl == "floor":
        from . import floor

        def alone() -> dict[str, Any]:
            return {"num_files": floor.count(*floor.read(path))}

        return alone
    raise ValueError(f"unknown implementation {impl!r}")
