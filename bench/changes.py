"""changes: the changes of the last 10 commits of a table with a 1,000,000-file checkpoint.

The ``checkpoint_1m`` table (``bench.tables``): a classic checkpoint of 1,000,000 adds, then 50 JSON commits
of 10 adds and 3 removes each; the last 10 commits' changes, action by action (no data files exist):

- ours: ``DeltaTable(path).changes(latest - 9, latest)``, every version's adds, removes and cdc as Arrow
  (with the protocol and metadata that apply, read without replaying the checkpoint's files);
- deltalake: opening the table at the end version (``deltalake.DeltaTable(path, version=latest)`` and its
  add actions), the snapshot a reader without a change read would start from. deltalake's own
  ``load_cdf`` cannot run here: the table does not enable the change data feed and has no data files;
- floor: pyarrow alone reading those 10 commit files (``pyarrow.json`` over their bytes): what the read
  cannot cost less than. The goal is ours/floor near 1: the checkpoint is never read whole.
"""

from __future__ import annotations

import argparse
import io
from collections.abc import Callable
from pathlib import Path
from typing import Any

TABLE = "checkpoint_1m"
COMMITS = 10
GOALS = {"wall_s@floor": 3.0}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--shape", choices=("narrow", "wide"), action="append", help="default: narrow")


def run(args: argparse.Namespace) -> dict[str, Any]:
    from . import measure, tables

    results = {}
    for shape in args.shape or ("narrow",):
        name = TABLE if shape == "narrow" else f"{TABLE}-{shape}"
        table = tables.ensure_table(name, args.data_dir)
        start, end = table.version - COMMITS + 1, table.version
        result = measure.compare("changes", [str(table.path), str(start), str(end)], args.runs,
                                 {"versions": COMMITS}, args.data_dir, measure.WITH_FLOOR)  # fmt: skip
        files = table.num_files - 350
        title = f"changes ({shape}): versions {start}..{end} of a table with a {files:,}-file checkpoint"
        print(measure.format_table(title, result, GOALS), end="\n\n", flush=True)
        results[name] = {"title": title, "goals": GOALS, **result}
    return {"tables": results}


def prepare(impl: str, path: str, start: str, end: str) -> Callable[[], dict[str, Any]]:
    first, last = int(start), int(end)
    if impl == "ours":
        from airflow_provider_delta.log import DeltaTable

        def ours() -> dict[str, Any]:
            changes = DeltaTable(path).changes(first, last)
            actions = sum(v.adds.num_rows + v.removes.num_rows + v.cdc.num_rows for v in changes.versions)
            return {"versions": len(changes.versions), "actions": actions}

        return ours
    if impl == "deltalake":
        import deltalake
        import pyarrow as pa

        def theirs() -> dict[str, Any]:
            dt = deltalake.DeltaTable(path, version=last)
            files = pa.table(dt.get_add_actions(flatten=False))
            return {"versions": dt.version() - first + 1, "files": files.num_rows}

        return theirs
    if impl == "floor":
        import pyarrow.json as pj

        names = [Path(path) / "_delta_log" / f"{v:020d}.json" for v in range(first, last + 1)]

        def alone() -> dict[str, Any]:
            data = b"".join(n.read_bytes() for n in names)
            return {"rows": pj.read_json(io.BytesIO(data)).num_rows}

        return alone
    raise ValueError(f"unknown implementation {impl!r}")
