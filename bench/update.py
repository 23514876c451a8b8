"""update: an open snapshot of 1,000,000 files catches up with one new commit, ours against deltalake.

Before the timed region (in the child): a copy of the ``checkpoint_1m`` log (hard links: nothing existing is
written), the table opened and its snapshot loaded, then one commit written behind its back (a commitInfo,
10 adds and a remove of a checkpointed file). Timed:

- ours: ``table.snapshot()`` on the same ``DeltaTable`` (``update_snapshot``: reads only the new commit);
- deltalake: ``dt.update_incremental()``, then ``dt.version()``.

Ours also counts its storage calls in the timed region (every ``LogStore`` method that lists, reads or
asks about a file): the update must be one listing and one read, never a read of the checkpoint. The
import baseline is taken after the first load, so the memory figure is what the update itself needs.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import uuid
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

TABLE = "checkpoint_1m"
SHAPES = ("narrow", "wide")
GOALS: dict[str, float] = {}  # the goal is the number of storage calls, checked on every run
EXPECTED_CALLS = {"list_log": 1, "read_log_files": 1}
# LogStore methods that reach storage; read_log_files reads its files in one batch (one GET each).
_STORAGE_CALLS = ("list_log", "read_log_file", "read_log_files", "open_input_file", "log_file_exists",
                  "info", "exists")  # fmt: skip


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--shape", choices=SHAPES, action="append", help="only this shape (default: both)")


def _new_commit(log_dir: Path, version: int) -> None:
    """Commit ``version``: 10 new files and the removal of the first file of the checkpoint."""
    import pyarrow.parquet as pq

    checkpoint = next(log_dir.glob("*.checkpoint.parquet"))
    batch = next(pq.ParquetFile(checkpoint).iter_batches(batch_size=5_000, columns=["add"]))
    gone = next(a for a in batch.column("add").to_pylist() if a is not None)
    info = {"timestamp": 1_767_225_600_000 + version, "operation": "WRITE", "operationParameters": {}}
    lines = [{"commitInfo": info}]
    for i in range(10):
        path = f"region=r{i:03d}/{uuid.uuid4()}.parquet"
        lines.append({"add": {"path": path, "partitionValues": {"region": f"r{i:03d}"}, "size": 1024,
                              "modificationTime": 1_767_225_600_000, "dataChange": True}})  # fmt: skip
    lines.append({"remove": {"path": gone["path"], "deletionTimestamp": 1_767_225_600_000 + version,
                             "dataChange": True}})  # fmt: skip
    text = "\n".join(json.dumps(line, separators=(",", ":")) for line in lines) + "\n"
    (log_dir / f"{version:020d}.json").write_text(text)


def prepare(impl: str, table: str, base: str, version: str) -> Callable[[], dict[str, Any]]:
    copy = Path(base) / f"copy-{impl}-{uuid.uuid4().hex[:12]}"
    copy.mkdir(parents=True)
    subprocess.run(["cp", "-al", f"{table}/_delta_log", str(copy / "_delta_log")], check=True)
    new = int(version) + 1
    if impl == "ours":
        from airflow_provider_delta.log import DeltaTable

        dt = DeltaTable(str(copy))
        dt.snapshot().files  # noqa: B018 (loaded before the timed region)
        _new_commit(copy / "_delta_log", new)
        calls: Counter[str] = Counter()
        depth = [0]  # only the outermost call counts: read_log_files of one file calls read_log_file
        store = dt.store
        for name in _STORAGE_CALLS:
            method = getattr(store, name)

            def counted(*args: Any, _name: str = name, _method: Any = method, **kwargs: Any) -> Any:
                calls[_name] += depth[0] == 0
                depth[0] += 1
                try:
                    return _method(*args, **kwargs)
                finally:
                    depth[0] -= 1

            setattr(store, name, counted)

        def ours() -> dict[str, Any]:
            snap = dt.snapshot()
            return {"version": snap.version, "num_files": snap.files.num_rows, "calls": +calls,
                    "copy": str(copy)}  # fmt: skip

        return ours
    if impl == "deltalake":
        import deltalake

        dt = deltalake.DeltaTable(str(copy))
        _new_commit(copy / "_delta_log", new)

        def theirs() -> dict[str, Any]:
            dt.update_incremental()
            return {"version": dt.version(), "copy": str(copy)}

        return theirs
    raise ValueError(f"unknown implementation {impl!r}")


def run(args: argparse.Namespace) -> dict[str, Any]:
    from . import measure, tables
    from .checkpoint import isolated_compare

    results = {}
    for shape in args.shape or SHAPES:
        name = TABLE if shape == "narrow" else f"{TABLE}-{shape}"
        table = tables.ensure_table(name, args.data_dir)
        base = Path(args.data_dir) / f"update-{uuid.uuid4().hex[:8]}"
        try:
            runs_args = [str(table.path), str(base), str(table.version)]
            result = isolated_compare(
                "update", runs_args, args.runs, {"version": table.version + 1}, args.data_dir
            )
        finally:
            shutil.rmtree(base, ignore_errors=True)
        for sample in result["samples"]["ours"]:
            if sample["calls"] != EXPECTED_CALLS or sample["num_files"] != table.num_files + 9:
                raise RuntimeError(f"ours updated with storage calls {sample['calls']} (expected "
                                   f"{EXPECTED_CALLS}) to {sample['num_files']} files")  # fmt: skip
        heading = f"update ({shape}): the snapshot of {table.num_files:,} files catches up with 1 commit"
        print(measure.format_table(heading, result, GOALS))
        print(
            f"\nchecked every run: ours made exactly {EXPECTED_CALLS} storage calls", end="\n\n", flush=True
        )
        results[name] = {"title": heading, "calls": EXPECTED_CALLS, **result}
    return {"tables": results}
