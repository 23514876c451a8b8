"""scale: scan plan, checkpoint and VACUUM at 1,000,000 and 10,000,000 files (issue 35), above all memory.

An operation whose cost follows the table must hold no more than it needs: a filtered plan only its matches,
a checkpoint and a VACUUM a bounded working set. Three parts, each timed in a fresh interpreter (imports
excluded, ``bench.child``), on ``bench.task``'s tables (``bench.tables.build_task_table``: a classic
checkpoint of ``--files`` adds at version 1000, 100 partitions ``region``, 50 commits after it):

- ``plan``: a cold filtered scan plan of one partition (1 % of the files), on the table without a checksum.
  Ours ``Scan(DeltaTable(p).snapshot(), filter="region = 'r042'").files`` (streamed batch by batch through
  ``Snapshot.filtered_files``); deltalake ``DeltaTable(p).file_uris(partition_filters=[("region", "=",
  "r042")])``, its nearest equivalent: it loads every file's metadata first, so it runs only up to
  ``--deltalake-max-files``. Both must name the count pyarrow alone finds (checkpoint and commits read
  without reconciliation, ``_expected_plan``), all in the partition.
- ``checkpoint``: ours ``DeltaTable(p).checkpoint(parts=1)`` (classic) and, with ``--checkpoint-kind
  multi-part``, ``parts=max(2, files / 2,000,000)``, on a ``cp -al`` copy of the log with a checksum;
  pyarrow then counts the checkpoint's adds.
- ``vacuum``: ours ``DeltaTable(p).vacuum(retention_hours=0, enforce_retention_duration=False, dry_run=True)``
  (the same load, listing, keep set and anti-join as a deleting run; ``in-memory`` is ours with its
  bounded path switched off, ``vacuum.SPILL_FILES`` raised) on a table whose files exist: a ``cp -al``
  copy of the log with a checksum and an empty file for every live file, every tombstoned path and
  ``--orphans`` orphans, plus a few hidden files that must survive (hard links to a few empty files, see
  ``_make_files``). They are made in a temporary folder under the data directory and removed when the
  part ends, failed or not. One deleting run follows the dry runs, then every live file must still be
  there.

Goals (issue 35): the plan at most 1 GiB at 10,000,000 files and at most 0.5x deltalake's wall; checkpoint
and VACUUM at the largest ``--files`` at most 2x the peak memory over imports at the smallest.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

PARTS = ("plan", "checkpoint", "vacuum")
KINDS = ("classic", "multi-part")
REGION = "r042"
PLAN_LIMIT_KIB = 1024 * 1024  # 1 GiB
PLAN_WALL_GOAL = 0.5  # ours/deltalake
GROWTH_GOAL = 2.0  # peak at the largest --files over that at the smallest
_PART_SIZE = 2_000_000  # checkpoint.DEFAULT_PART_SIZE, not imported: it loads pyarrow
_HIDDEN = ("_staging/a.parquet", ".tmp/b.parquet", "region=r000/.c.parquet.crc", "region=r001/_SUCCESS")
_VACUUM_PREFIX = "scale-vacuum-"
_LINKS_PER_SOURCE = 60_000
_ROOT = Path(__file__).resolve().parent.parent


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--files",
        type=int,
        action="append",
        help="adds in the checkpoint (repeatable; default 1,000,000 and 10,000,000)",
    )
    parser.add_argument("--part", choices=PARTS, action="append", help="only this part (default: all)")
    parser.add_argument(
        "--checkpoint-kind", choices=KINDS, action="append", help="checkpoints to write (default: classic)"
    )
    parser.add_argument("--orphans", type=int, default=3_000, help="unreferenced files VACUUM must name")
    parser.add_argument(
        "--in-memory",
        action="store_true",
        help="also time VACUUM with its bounded path switched off (needs the memory)",
    )
    parser.add_argument(
        "--large-runs",
        type=int,
        default=None,
        help="runs on the tables deltalake is not run on (default: --runs; 1 saves ~20 min at 10,000,000)",
    )
    parser.add_argument("--deltalake-max-files", type=int, default=4_000_000,
                        help="run deltalake's plan only up to this many adds (default 4,000,000: it holds "
                        "every file's metadata, about 0.8 GiB per million files)")  # fmt: skip


# -- child side -------------------------------------------------------------------------------------------
def prepare(impl: str, part: str, table: str, *args: str) -> Callable[[], dict[str, Any]]:
    if part == "plan":
        return _plan(impl, table)
    if part == "checkpoint":
        return _checkpoint(table, args[0], int(args[1]))
    if part == "vacuum":
        return _vacuum(impl, table, args[0] == "dry_run")
    raise ValueError(f"unknown part {part!r}")


def _plan(impl: str, table: str) -> Callable[[], dict[str, Any]]:
    prefix = f"region={REGION}/"
    if impl == "ours":
        import fsspec.implementations.chained  # noqa: F401 - fsspec imports it on a table's first open
        import pyarrow.compute as pc

        from airflow_provider_delta.log import DeltaTable
        from airflow_provider_delta.log.scans.scan import Scan

        def ours() -> dict[str, Any]:
            files = Scan(DeltaTable(table).snapshot(), filter=f"region = '{REGION}'").files
            paths = files.column("path")
            return {"num_files": files.num_rows, "in_region": pc.all(pc.starts_with(paths, prefix)).as_py()}

        return ours
    if impl == "deltalake":
        import deltalake

        def theirs() -> dict[str, Any]:
            uris = deltalake.DeltaTable(table).file_uris(partition_filters=[("region", "=", REGION)])
            return {"num_files": len(uris), "in_region": all(f"/{prefix}" in u for u in uris)}

        return theirs
    raise ValueError(f"unknown implementation {impl!r}")


def _checkpoint(table: str, base: str, parts: int) -> Callable[[], dict[str, Any]]:
    copy = Path(base) / f"copy-{uuid.uuid4().hex[:12]}"
    copy.mkdir(parents=True)
    subprocess.run(["cp", "-al", f"{table}/_delta_log", str(copy / "_delta_log")], check=True)
    from airflow_provider_delta.log import DeltaTable

    def ours() -> dict[str, Any]:
        pointer = DeltaTable(str(copy)).checkpoint(parts=parts)
        return {"version": pointer.version, "parts": pointer.parts or 1, "adds": lambda: _adds_in(copy)}

    return ours


def _adds_in(copy: Path) -> int:
    """The adds of the checkpoint ``_last_checkpoint`` names, counted by pyarrow (path leaves only); the
    copy is removed then, so that a 10,000,000-file checkpoint does not stay on disk."""
    import pyarrow.parquet as pq

    log_dir = copy / "_delta_log"
    version = json.loads((log_dir / "_last_checkpoint").read_text())["version"]
    adds = 0
    for part in sorted(log_dir.glob(f"{version:020d}.checkpoint*.parquet")):
        for batch in pq.ParquetFile(part).iter_batches(columns=["add.path"]):
            adds += len(batch) - batch.column("add").null_count
    shutil.rmtree(copy)
    return adds


def _vacuum(impl: str, root: str, dry_run: bool) -> Callable[[], dict[str, Any]]:
    import fsspec.implementations.chained  # noqa: F401 - fsspec imports it on a table's first open

    from airflow_provider_delta.log import DeltaTable
    from airflow_provider_delta.log.maintenance import vacuum

    if impl == "in-memory":
        vacuum.SPILL_FILES = sys.maxsize  # type: ignore[attr-defined]
    elif impl != "ours":
        raise ValueError(f"unknown implementation {impl!r}")

    def ours() -> dict[str, Any]:
        report = DeltaTable(root).vacuum(retention_hours=0, enforce_retention_duration=False, dry_run=dry_run)
        return {"num_files": len(report.files)}

    return ours


# -- helper processes: expected answers, the vacuum table -----------------------------------------------
def _expected_plan(table: str) -> int:
    """Files in the partition, by pyarrow alone: the checkpoint's adds there, plus the commits' adds there,
    less their removes there (the generator's commits remove checkpointed files and add new ones)."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    from . import floor

    prefix = f"region={REGION}/"
    checkpoint, commits = floor.log_files(table)
    count = 0
    for part in checkpoint:
        for batch in pq.ParquetFile(part).iter_batches(columns=["add.path"]):
            paths = pc.struct_field(batch.column("add"), "path")
            count += pc.sum(pc.starts_with(paths, prefix)).as_py() or 0
    for commit in commits:
        for line in commit.read_text().splitlines():
            action = json.loads(line)
            kind = "add" if "add" in action else "remove" if "remove" in action else None
            if kind and action[kind]["path"].startswith(prefix):
                count += 1 if kind == "add" else -1
    return count


def _make_files(source: str, root: str, orphans: int) -> dict[str, int]:
    """``root``: a ``cp -al`` copy of ``source``'s log and an empty file for every path it names (live
    files streamed from our snapshot, tombstones too), ``orphans`` never named, and ``_HIDDEN``. Returns
    how many of each; VACUUM must name every file but the live and hidden ones.

    The files are hard links to a few empty files beside ``root`` (ext4 allows 65,000 links to one): on this
    machine's disk a link takes about 11 us where creating a file took 75-540 us, and 10,000,000 links use
    160 inodes, not 10,000,000. VACUUM lists and stats directory entries; a link is one like any other."""
    from airflow_provider_delta.log.actions.actions import FileFields
    from airflow_provider_delta.log.files.storage import LogStore
    from airflow_provider_delta.log.snapshot.snapshot import load_snapshot

    os.makedirs(root)
    subprocess.run(["cp", "-al", f"{source}/_delta_log", f"{root}/_delta_log"], check=True)
    paths = FileFields(add=("path",), remove=("path",))
    snap = load_snapshot(LogStore(root), fields=paths, keep_expired_tombstones=True)
    made = {"live": 0, "tombstoned": 0, "orphans": 0, "hidden": 0}
    sources = Path(root).parent / "link-sources"
    sources.mkdir(exist_ok=True)
    links = [0, ""]  # links made, the current source

    def make(rel: str) -> bool:
        if links[0] % _LINKS_PER_SOURCE == 0:
            links[1] = str(sources / f"{links[0] // _LINKS_PER_SOURCE:05d}")
            os.mknod(links[1], 0o644)
        full = os.path.join(root, rel)
        try:
            os.link(links[1], full)
        except FileNotFoundError:
            os.makedirs(os.path.dirname(full), exist_ok=True)
            os.link(links[1], full)
        except FileExistsError:
            return False
        links[0] += 1
        return True

    for kind, table in snap.stream_file_actions():
        key = "live" if kind == "add" else "tombstoned"
        made[key] += sum(make(p) for p in table.column("path").to_pylist())
    for i in range(orphans):
        made["orphans"] += make(f"region=r{i % 100:03d}/orphan-{i:07d}.parquet")
    for rel in _HIDDEN:
        made["hidden"] += make(rel)
    return made


def _files_left(root: str) -> int:
    """Files now under ``root``, outside ``_delta_log``."""
    return sum(len(files) for folder, _, files in os.walk(root) if "_delta_log" not in folder)


def _helper(argv: list[str], env: dict[str, str]) -> dict[str, Any]:
    """``python -m bench.scale ARGV`` in a fresh process: its JSON answer."""
    proc = subprocess.run([sys.executable, "-m", "bench.scale", *argv], capture_output=True, text=True,
                          cwd=_ROOT, env=env)  # fmt: skip
    if proc.returncode != 0:
        raise RuntimeError(f"bench.scale {argv[0]} failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main(argv: list[str]) -> int:
    """Helper processes: ``expect-plan TABLE``, ``files SOURCE ROOT ORPHANS``, ``left ROOT`` and ``once
    CONFIG_JSON`` (one measured run, for the deleting VACUUM, which cannot be repeated)."""
    command, *rest = argv
    if command == "expect-plan":
        answer: Any = {"num_files": _expected_plan(rest[0])}
    elif command == "files":
        answer = _make_files(rest[0], rest[1], int(rest[2]))
    elif command == "left":
        answer = {"files": _files_left(rest[0])}
    elif command == "once":
        from . import measure

        config = json.loads(rest[0])
        answer = measure.run_child("scale", config["impl"], config["args"], measure.child_env(Path(
            config["data_dir"])))  # fmt: skip
    else:
        raise SystemExit(f"unknown command {command!r}")
    print(json.dumps(answer))
    return 0


# -- parent side ------------------------------------------------------------------------------------------
def _runs(args: argparse.Namespace, files: int) -> int:
    """``--large-runs`` for the tables deltalake is not run on, else ``--runs``."""
    return args.large_runs if args.large_runs and files > args.deltalake_max_files else args.runs


def _compare(args: argparse.Namespace, files: int, runs_args: list[str], expect: dict[str, Any],
             impls: tuple[str, ...]) -> dict[str, Any]:  # fmt: skip
    """``measure.compare`` in a small helper process (``bench.checkpoint.isolated_compare``)."""
    from . import checkpoint, measure

    config = {"bench": "scale", "args": runs_args, "runs": _runs(args, files), "expect": expect,
              "data_dir": str(args.data_dir), "impls": impls}  # fmt: skip
    return checkpoint.helper(["compare", json.dumps(config)], measure.child_env(args.data_dir))


def _row(part: str, case: str, label: str, files: int, impl: str, sample: dict[str, Any],
         runs: int) -> dict[str, Any]:  # fmt: skip
    keys = ("wall_s", "peak_delta_kib", "peak_rss_kib")
    return {"part": part, "case": case, "label": label, "files": files, "impl": impl, "runs": runs,
            **{k: sample[k] for k in keys}}  # fmt: skip


def _rows(part: str, case: str, label: str, files: int, result: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        _row(part, case, label, files, impl, med, result["runs"]) for impl, med in result["median"].items()
    ]


def run_plan(args: argparse.Namespace, files: int, table: dict[str, Any]) -> list[dict[str, Any]]:
    from . import measure

    path = table["paths"]["no-checksum"]
    expect = {**_helper(["expect-plan", path], measure.child_env(args.data_dir)), "in_region": True}
    impls = ("ours", "deltalake") if files <= args.deltalake_max_files else ("ours",)
    result = _compare(args, files, ["plan", path], expect, impls)
    rows = _rows("plan", "", f"plan region = '{REGION}' ({expect['num_files']:,} files)", files, result)
    ratio = result["ratio_ours_over_deltalake"]["wall_s"]
    for row in rows:
        row["ratio"] = ratio if row["impl"] == "ours" else None
    return rows


def run_checkpoint(args: argparse.Namespace, files: int, table: dict[str, Any]) -> list[dict[str, Any]]:
    rows = []
    base = Path(tempfile.mkdtemp(prefix="scale-checkpoint-", dir=args.data_dir))
    try:
        for kind in args.checkpoint_kind or ["classic"]:
            parts = 1 if kind == "classic" else max(2, math.ceil(files / _PART_SIZE))
            expect = {"version": table["version"], "parts": parts, "adds": table["num_files"]}
            result = _compare(args, files, ["checkpoint", table["paths"]["checksum"], str(base), str(parts)],
                              expect, ("ours",))  # fmt: skip
            label = f"checkpoint, {kind} ({parts} part{'s' if parts > 1 else ''})"
            rows += _rows("checkpoint", kind, label, files, result)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    return rows


def run_vacuum(args: argparse.Namespace, files: int, table: dict[str, Any]) -> list[dict[str, Any]]:
    from . import measure

    env = measure.child_env(args.data_dir)
    for stale in Path(args.data_dir).glob(f"{_VACUUM_PREFIX}*"):  # left by a run that was killed
        subprocess.run(["rm", "-rf", str(stale)], check=True)
    folder = tempfile.mkdtemp(prefix=_VACUUM_PREFIX, dir=args.data_dir)
    root = os.path.join(folder, "table")
    try:
        made = _helper(["files", table["paths"]["checksum"], root, str(args.orphans)], env)
        if made["live"] != table["num_files"] or made["hidden"] != len(_HIDDEN):
            raise RuntimeError(f"made {made} files for a table of {table['num_files']:,}")
        doomed = made["tombstoned"] + made["orphans"]
        label = f"vacuum, {made['live'] + doomed:,} files on disk, {doomed:,} unreferenced"
        impls = ("ours", "in-memory") if args.in_memory else ("ours",)
        result = _compare(args, files, ["vacuum", root, "dry_run"], {"num_files": doomed}, impls)
        rows = _rows("vacuum", "dry run", f"{label}: dry run", files, result)
        config = {"impl": "ours", "args": ["vacuum", root, "delete"], "data_dir": str(args.data_dir)}
        once = _helper(["once", json.dumps(config)], env)
        left = _helper(["left", root], env)["files"]
        if once["num_files"] != doomed or left != made["live"] + made["hidden"]:
            raise RuntimeError(
                f"the deleting VACUUM named {once['num_files']:,} files (expected {doomed:,}) and left "
                f"{left:,} (expected {made['live'] + made['hidden']:,})"
            )
        rows.append(_row("vacuum", "deleting", f"{label}: deleted", files, "ours", once, 1))
    finally:
        subprocess.run(["rm", "-rf", folder], check=False)  # 10,000,000 files: rm, not this process
    return rows


def _scaled(n: int) -> int:
    return max(1, round(n * float(os.environ.get("BENCH_SCALE", "1"))))


def format_rows(rows: list[dict[str, Any]]) -> str:
    """A Markdown table of the rows: medians of ``runs`` runs each (the deleting VACUUM runs once)."""
    head = ("part", "adds in the checkpoint", "impl", "runs", "wall (s)", "peak over imports (MiB)",
            "peak RSS (MiB)", "ours/deltalake (wall)")  # fmt: skip
    lines = [f"| {' | '.join(head)} |", "| --- | ---: | --- | ---: | ---: | ---: | ---: | ---: |"]
    for r in rows:
        ratio = "" if r.get("ratio") is None else f"{r['ratio']:.2f}x"
        cells = (r["label"], f"{r['files']:,}", r["impl"], str(r["runs"]), f"{r['wall_s']:.3f}",
                 f"{r['peak_delta_kib'] / 1024:.0f}", f"{r['peak_rss_kib'] / 1024:.0f}", ratio)  # fmt: skip
        lines.append(f"| {' | '.join(cells)} |")
    return "\n".join(lines)


def verdicts(rows: list[dict[str, Any]]) -> list[str]:
    """The goals of issue 35 against ``rows``: the plan's memory at the largest size and wall against
    deltalake; checkpoint and VACUUM's growth of peak memory from the smallest size to the largest."""
    out = []
    counts = sorted({r["files"] for r in rows})
    for r in rows:
        if r["part"] != "plan" or r["impl"] != "ours":
            continue
        if r["files"] == counts[-1]:
            ok = r["peak_delta_kib"] <= PLAN_LIMIT_KIB
            out.append(
                f"- plan at {r['files']:,}: {r['peak_delta_kib'] / 1024:.0f} MiB over imports "
                f"({r['peak_rss_kib'] / 1024:.0f} MiB RSS) <= 1 GiB: {'met' if ok else 'MISSED'}"
            )
        if r.get("ratio") is not None:
            ok = r["ratio"] <= PLAN_WALL_GOAL
            out.append(f"- plan at {r['files']:,}: {r['ratio']:.2f}x deltalake's wall <= 0.5x: "
                       f"{'met' if ok else 'MISSED'}")  # fmt: skip
    if len(counts) < 2:
        return out
    lo, hi = counts[0], counts[-1]
    small = {(r["part"], r["case"], r["impl"]): r for r in rows if r["files"] == lo}
    for r in rows:
        twin = small.get((r["part"], r["case"], r["impl"]))
        if r["part"] == "plan" or r["files"] != hi or twin is None:
            continue
        a, b = twin["peak_delta_kib"], r["peak_delta_kib"]
        ratio = b / max(1, a)
        out.append(f"- {r['part']} {r['case']} ({r['impl']}), {lo:,} -> {hi:,}: {a / 1024:.0f} -> "
                   f"{b / 1024:.0f} MiB over imports = {ratio:.2f}x <= 2x: "
                   f"{'met' if ratio <= GROWTH_GOAL else 'MISSED'}")  # fmt: skip
    return out


def run(args: argparse.Namespace) -> dict[str, Any]:
    from . import measure

    env = measure.child_env(args.data_dir)
    counts = [_scaled(f) for f in (args.files or [1_000_000, 10_000_000])]
    rows: list[dict[str, Any]] = []
    for files in counts:
        table = _task_tables(args, files, env)
        for part in args.part or PARTS:
            new = _RUNS[part](args, files, table)
            print(format_rows(new), end="\n\n", flush=True)
            rows += new
    print(format_rows(rows), *verdicts(rows), sep="\n", end="\n\n", flush=True)
    return {"rows": rows, "verdicts": verdicts(rows)}


_RUNS = {"plan": run_plan, "checkpoint": run_checkpoint, "vacuum": run_vacuum}


def _task_tables(args: argparse.Namespace, files: int, env: dict[str, str]) -> dict[str, Any]:
    """``bench.task``'s tables of ``files`` adds (generated if missing), both variants."""
    argv = ["tables", str(args.data_dir), str(files), str(args.deltalake_max_files)]
    proc = subprocess.run([sys.executable, "-m", "bench.task", *argv], capture_output=True, text=True,
                          cwd=_ROOT, env=env)  # fmt: skip
    if proc.returncode != 0:
        raise RuntimeError(f"bench.task tables failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
