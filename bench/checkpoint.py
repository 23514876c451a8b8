"""checkpoint: open a table of 1,000,000 live adds and write its checkpoint, ours against deltalake.

- ours: ``DeltaTable(path).checkpoint()`` (a classic single-file checkpoint, then ``_last_checkpoint``);
- deltalake: ``deltalake.DeltaTable(path).create_checkpoint()``;
- floor: pyarrow alone reading the same files (``bench.floor``) and writing the checkpoint's add rows again.

Both table shapes (``bench.tables``).

The log is ``checkpoint_1m`` (see ``bench.tables``) plus one commit made when the benchmark starts that
removes 1,000 checkpointed files: their tombstones are within the default 7-day retention, so a correct
checkpoint keeps them (the older tombstones of ``checkpoint_1m`` have expired and must be dropped). Each run
writes into a fresh copy of that ``_delta_log`` (no data files: a checkpoint never opens them).

Every result is checked by the other implementation: with the JSON commits hidden, it must read the version
and the live files from the new checkpoint alone, and the checkpoint must hold exactly the 1,000 tombstones.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .tables import BenchTable

TABLE = "checkpoint_1m"
SHAPES = ("narrow", "wide")  # bench.tables.SHAPES, not imported: it loads pyarrow
GOALS = {"wall_s": 0.5, "peak_delta_kib": 0.5}  # ours/deltalake, from the performance issue
TOMBSTONES = 1_000
_COPY_PREFIX = "copy-"
_ROOT = Path(__file__).resolve().parent.parent


def title(shape: str, num_files: int) -> str:
    return f"checkpoint ({shape}): {num_files:,} adds (checkpoint + 51 JSON commits) to one classic file"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--shape", choices=SHAPES, action="append", help="only this shape (default: both)")
    parser.add_argument(
        "--keep", action="store_true", help="keep the checkpointed copies (default: deleted once verified)"
    )


# -- the log ----------------------------------------------------------------------------------------------
def make_template(source: BenchTable, dest: Path, deletion_ms: int) -> dict[str, int]:
    """Copy ``source``'s log to ``dest`` and commit the removal of ``TOMBSTONES`` checkpointed files.

    Returns what a correct checkpoint of the new version holds: version, live files, tombstones.
    """
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    from . import tables

    log_dir = dest / "_delta_log"
    shutil.copytree(source.path / "_delta_log", log_dir)
    last = json.loads((log_dir / "_last_checkpoint").read_text())
    already = {  # checkpointed files the table's own commits removed (their tombstones have expired)
        json.loads(line)["remove"]["path"]
        for commit in log_dir.glob("*.json")
        for line in commit.read_text().splitlines()
        if line.startswith('{"remove"')
    }
    batch = next(
        pq.ParquetFile(log_dir / f"{last['version']:020d}.checkpoint.parquet").iter_batches(
            batch_size=2 * TOMBSTONES + len(already) + 10, columns=["add"]
        )
    )
    adds = batch.column("add").filter(batch.column("add").is_valid())
    adds = adds.filter(pc.invert(pc.is_in(adds.field("path"), pa.array(sorted(already)))))[:TOMBSTONES]
    tables.write_remove_commit(log_dir, source.version + 1, adds, deletion_ms)
    return {
        "version": source.version + 1,
        "num_files": source.num_files - TOMBSTONES,
        "tombstones": TOMBSTONES,
    }


def copy_log(template: Path, base: Path, impl: str) -> Path:
    copy = base / f"{_COPY_PREFIX}{impl}-{uuid.uuid4().hex[:12]}"
    shutil.copytree(template / "_delta_log", copy / "_delta_log")
    return copy


# -- child side -------------------------------------------------------------------------------------------
def prepare(impl: str, template: str, base: str) -> Callable[[], dict[str, Any]]:
    """A fresh copy of the template's log (untimed); the work: open the copy and write its checkpoint."""
    path = str(copy_log(Path(template), Path(base), impl))
    if impl == "ours":
        from airflow_provider_delta.log import DeltaTable

        def ours() -> dict[str, Any]:
            pointer = DeltaTable(path).checkpoint()
            return {"version": pointer.version, "copy": path}

        return ours
    if impl == "deltalake":
        import deltalake

        def theirs() -> dict[str, Any]:
            dt = deltalake.DeltaTable(path)
            dt.create_checkpoint()
            return {"version": dt.version(), "copy": path}

        return theirs
    if impl == "floor":
        import pyarrow as pa
        import pyarrow.parquet as pq

        from . import floor

        def alone() -> dict[str, Any]:
            adds, parsed = floor.read(path)
            pq.write_table(pa.table({"add": pa.chunked_array(adds)}), f"{path}/_delta_log/floor.parquet")
            return {"num_files": floor.count(adds, parsed), "copy": path}

        return alone
    raise ValueError(f"unknown implementation {impl!r}")


# -- parent side: cross-checks ----------------------------------------------------------------------------
def read_with(impl: str, path: Path) -> tuple[int, int]:
    """(version, live files) of the table at ``path`` as ``impl`` reads it."""
    import pyarrow as pa

    if impl == "ours":
        from airflow_provider_delta.log import DeltaTable

        snap = DeltaTable(str(path)).snapshot()
        return snap.version, snap.files.num_rows
    import deltalake

    dt = deltalake.DeltaTable(str(path))
    return dt.version(), pa.table(dt.get_add_actions(flatten=False)).num_rows


def checkpoint_facts(path: Path) -> dict[str, int]:
    """What the checkpoint ``_last_checkpoint`` points at holds, read with pyarrow alone."""
    import pyarrow.parquet as pq

    log_dir = path / "_delta_log"
    last = json.loads((log_dir / "_last_checkpoint").read_text())
    parts = sorted(log_dir.glob(f"{last['version']:020d}.checkpoint*.parquet"))
    adds = removes = size = 0
    for part in parts:
        table = pq.read_table(part, columns=["add", "remove"])
        adds += table.num_rows - table.column("add").null_count
        removes += table.num_rows - table.column("remove").null_count
        size += part.stat().st_size
    return {
        "version": last["version"],
        "adds": adds,
        "tombstones": removes,
        "parts": len(parts),
        "bytes": size,
    }


def verify(writer: str, path: Path, expect: dict[str, int]) -> dict[str, int]:
    """The other implementation reads ``writer``'s checkpoint alone (JSON commits hidden) and must find
    ``expect``; so must pyarrow, tombstones included. Returns the checkpoint's facts."""
    facts = checkpoint_facts(path)
    hidden = path / "hidden-commits"
    hidden.mkdir()
    for commit in (path / "_delta_log").glob("*.json"):
        commit.rename(hidden / commit.name)
    reader = "deltalake" if writer == "ours" else "ours"
    got = {
        "version": facts["version"],
        "num_files": facts["adds"],
        "tombstones": facts["tombstones"],
        f"read by {reader}": read_with(reader, path),
    }
    want = {**expect, f"read by {reader}": (expect["version"], expect["num_files"])}
    if got != want:
        raise RuntimeError(f"{writer}'s checkpoint in {path} is wrong: got {got}, expected {want}")
    return facts


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Runs; the runs, the template and the cross-checks are made by helper processes (``main``), so
    that memory this process ever used never shows in the children's figures (see ``isolated_compare``)."""
    return {"tables": {shape: run_shape(args, shape) for shape in args.shape or SHAPES}}


def run_shape(args: argparse.Namespace, shape: str) -> dict[str, Any]:
    import statistics

    from . import measure, tables

    name = TABLE if shape == "narrow" else f"{TABLE}-{shape}"
    env = measure.child_env(args.data_dir)
    helper(["table", str(args.data_dir), name], env)  # generated there if missing
    source = tables.ensure_table(name, args.data_dir)
    base = Path(args.data_dir) / f"checkpoint-{uuid.uuid4().hex[:8]}"
    try:
        # Tombstones deleted "now", so that they are within the retention when the checkpoints are written.
        template = base / "template"
        now_ms = str(int(time.time() * 1000))
        expect = helper(["template", str(source.path), str(source.version), str(source.num_files),
                         str(template), now_ms], env)  # fmt: skip
        runs_args = [str(template), str(base)]
        result = isolated_compare(
            "checkpoint", runs_args, args.runs, {"version": expect["version"]}, args.data_dir, True
        )
        written: dict[str, list[dict[str, int]]] = {impl: [] for impl in measure.IMPLS}
        for impl in measure.WITH_FLOOR:
            for sample in result["samples"][impl]:
                copy = sample.pop("copy")
                if impl in written:
                    written[impl].append(helper(["verify", impl, copy, json.dumps(expect)], env))
                if not args.keep:
                    shutil.rmtree(copy)
    finally:
        if not args.keep:  # with the warm-up runs' copies
            shutil.rmtree(base, ignore_errors=True)
    sizes = {impl: statistics.median(w["bytes"] for w in written[impl]) for impl in measure.IMPLS}
    heading = title(shape, source.num_files)
    print(measure.format_table(heading, result, GOALS))
    print(
        f"\nchecked every run: the other implementation read version {expect['version']} and "
        f"{expect['num_files']:,} files from the checkpoint alone, which held {expect['tombstones']:,} "
        f"tombstones; checkpoint size: ours {sizes['ours'] / 2**20:.0f} MiB, deltalake "
        f"{sizes['deltalake'] / 2**20:.0f} MiB",
        end="\n\n",
        flush=True,
    )
    return {"title": heading, "goals": GOALS, **expect, "checkpoint_bytes": sizes, **result}


def isolated_compare(
    bench: str, args: list[str], runs: int, expect: dict[str, Any], data_dir: Path, floor: bool = False
) -> dict[str, Any]:
    """``measure.compare`` run from a small helper process, not from this one.

    On Linux a child's ``ru_maxrss`` starts from its parent's high-water mark (``execve`` keeps it), so
    after an earlier benchmark (or a table generated) made this process big, ``bench.child``'s import
    baseline would read that much, and a work peak below it as 0. The helper stays small.
    """
    from . import measure

    config = {"bench": bench, "args": args, "runs": runs, "expect": expect, "data_dir": str(data_dir),
              "impls": measure.WITH_FLOOR if floor else measure.IMPLS}  # fmt: skip
    return helper(["compare", json.dumps(config)], measure.child_env(data_dir))


def helper(argv: list[str], env: dict[str, str]) -> dict[str, Any]:
    """``python -m bench.checkpoint ARGV``: its JSON answer."""
    proc = subprocess.run(
        [sys.executable, "-m", "bench.checkpoint", *argv], capture_output=True, text=True, env=env, cwd=_ROOT
    )
    if proc.returncode != 0:
        raise RuntimeError(
            f"bench.checkpoint {argv[0]} failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}"
        )
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main(argv: list[str]) -> int:
    """Helper processes: ``compare CONFIG_JSON`` (see ``isolated_compare``), ``table DATA_DIR NAME``
    (generate the table if missing), ``template SOURCE VERSION NUM_FILES DEST DELETION_MS`` (the log,
    and the facts its checkpoint must hold) and ``verify WRITER COPY EXPECT_JSON`` (the cross-check)."""
    from . import measure

    command, *rest = argv
    if command in ("table", "template"):
        from . import tables  # not for compare, whose process must stay small: tables loads pyarrow
    if command == "compare":
        config = json.loads(rest[0])
        answer = measure.compare(
            config["bench"], config["args"], config["runs"], config["expect"], Path(config["data_dir"]),
            tuple(config["impls"]),
        )  # fmt: skip
    elif command == "table":
        table = tables.ensure_table(rest[1], Path(rest[0]))
        answer = {"path": str(table.path), "version": table.version, "num_files": table.num_files}
    elif command == "template":
        source, version, num_files, dest, deletion_ms = rest
        table = tables.BenchTable(TABLE, Path(source), int(version), int(num_files))
        answer = make_template(table, Path(dest), int(deletion_ms))
    elif command == "verify":
        writer, copy, expect = rest
        answer = verify(writer, Path(copy), json.loads(expect))
    else:
        raise SystemExit(f"unknown command {command!r}")
    print(json.dumps(answer))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
