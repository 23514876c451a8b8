"""vacuum: VACUUM of 100,000 data files on local disk, half of them unreferenced, ours against deltalake.

- ours: ``DeltaTable(path).vacuum(retention_hours=0, enforce_retention_duration=False, dry_run=...)``;
- deltalake: ``deltalake.DeltaTable(path).vacuum(retention_hours=0, enforce_retention_duration=False,
  dry_run=..., full=True)`` (FULL: every unreferenced file, as ours and Delta Spark's VACUUM do);
- floor: pyarrow alone reading the paths of adds, a walk of the folders, the difference (``_floor``).

Both table shapes (``bench.tables``; the wide one has 49,900 orphans and no tombstones).

The table is ``vacuum_100k`` (see ``bench.tables``): 50,000 live files, 25,100 tombstoned and 24,900
orphans, all 30 days old. A deleting run works on a fresh copy (the log copied, data files hard-linked, so
deleting one never touches the cached table); a dry run lists the cached table itself, whose log is checked
unchanged afterwards. Every run must report 50,000 files; each deleting run's copy must then hold exactly the
live files, and one more run of each (in a helper process) must name exactly the unreferenced files.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

TABLE = "vacuum_100k"
SHAPES = ("narrow", "wide")  # bench.tables.SHAPES, not imported: it loads pyarrow
GOALS = {"wall_s": 0.7, "peak_delta_kib": 1.0}  # ours/deltalake, from the performance issue
MODES = ("delete", "dry_run")


def title(mode: str, shape: str, live: int, doomed: int) -> str:
    if mode == "delete":
        return f"vacuum ({shape}): {live + doomed:,} files on local disk, {doomed:,} unreferenced, deleted"
    return f"vacuum ({shape}), dry run: the same table, the {doomed:,} unreferenced files listed only"
_COPY_PREFIX = "copy-"
_ROOT = Path(__file__).resolve().parent.parent


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--mode", choices=MODES, action="append", help="only this mode (default: both)")
    parser.add_argument("--shape", choices=SHAPES, action="append", help="only this shape (default: both)")


def _copy(table: Path, base: Path, impl: str) -> Path:
    """The table with its own log and hard links to the data files (``cp``: no memory in this process)."""
    copy = base / f"{_COPY_PREFIX}{impl}-{uuid.uuid4().hex[:12]}"
    subprocess.run(["cp", "-al", str(table), str(copy)], check=True)
    shutil.rmtree(copy / "_delta_log")
    subprocess.run(["cp", "-a", str(table / "_delta_log"), str(copy / "_delta_log")], check=True)
    return copy


def _vacuum(impl: str, path: str, dry_run: bool) -> Callable[[], list[str]]:
    """The vacuum of ``impl`` (imported here) as a function returning the paths it names."""
    if impl == "ours":
        from airflow_provider_delta.log import DeltaTable

        def ours() -> list[str]:
            report = DeltaTable(path).vacuum(
                retention_hours=0, enforce_retention_duration=False, dry_run=dry_run
            )
            return report.files

        return ours
    if impl == "deltalake":
        import deltalake

        def theirs() -> list[str]:
            dt = deltalake.DeltaTable(path)
            return dt.vacuum(retention_hours=0, enforce_retention_duration=False, dry_run=dry_run, full=True)

        return theirs
    if impl == "floor":
        return lambda: _floor(path, dry_run)
    raise ValueError(f"unknown implementation {impl!r}")


def _floor(path: str, dry_run: bool) -> list[str]:
    """pyarrow alone: every path an add names (checkpoint and commits, nothing reconciled), the files on
    disk outside hidden folders, the difference, deleted unless ``dry_run``."""
    import pyarrow as pa
    import pyarrow.compute as pc

    from . import floor

    adds, parsed = floor.read(path, columns=["add.path"])
    keep = [a.field("path") for a in adds]
    if parsed is not None and "add" in parsed.column_names:
        keep.append(pc.struct_field(parsed.column("add"), "path").combine_chunks().drop_null())
    on_disk = []
    for folder, dirs, files in os.walk(path):
        dirs[:] = [d for d in dirs if not d.startswith(("_", "."))]
        rel = os.path.relpath(folder, path)
        on_disk.extend(f if rel == "." else f"{rel}/{f}" for f in files if not f.startswith(("_", ".")))
    listed = pa.array(on_disk, pa.string())
    doomed = listed.filter(pc.invert(pc.is_in(listed, value_set=pa.concat_arrays(keep)))).to_pylist()
    if not dry_run:
        for rel in doomed:
            os.unlink(os.path.join(path, rel))
    return doomed


# -- child side -------------------------------------------------------------------------------------------
def prepare(impl: str, table: str, base: str, mode: str) -> Callable[[], dict[str, Any]]:
    dry_run = mode == "dry_run"
    path = table if dry_run else str(_copy(Path(table), Path(base), impl))
    vacuum = _vacuum(impl, path, dry_run)

    def work() -> dict[str, Any]:
        return {"num_files": len(vacuum()), "copy": path}

    return work


# -- parent side: checks ----------------------------------------------------------------------------------
def _data_files(root: Path) -> set[str]:
    """Every file under ``root`` outside hidden folders and files (``_delta_log``, the cache's marker)."""
    found = set()
    for folder, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if not d.startswith(("_", "."))]
        rel = os.path.relpath(folder, root)
        found.update(f if rel == "." else f"{rel}/{f}" for f in files if not f.startswith(("_", ".")))
    return found


def _relative(paths: list[str], root: Path) -> set[str]:
    prefix = f"{root.resolve().as_posix()}/"
    return {p.removeprefix("file://").removeprefix(prefix) for p in paths}


def expected_doomed(table: Path) -> set[str]:
    from airflow_provider_delta.log import DeltaTable

    live = set(DeltaTable(str(table)).snapshot().file_paths())
    on_disk = _data_files(table)
    if not live <= on_disk:
        raise RuntimeError(f"{table}: {len(live - on_disk)} live files are missing on disk")
    return on_disk - live


def check_names(table: Path, base: Path, doomed: set[str]) -> None:
    """One more run of each implementation, here: both must name exactly ``doomed``, dry run or not."""
    for impl in ("ours", "deltalake"):
        for dry_run in (True, False):
            path = table if dry_run else _copy(table, base, impl)
            named = _relative(_vacuum(impl, str(path), dry_run)(), path)
            if named != doomed:
                raise RuntimeError(
                    f"{impl} vacuum (dry_run={dry_run}) named {len(named)} files, {len(named - doomed)} "
                    f"of them referenced, and missed {len(doomed - named)} of the {len(doomed)} unreferenced"
                )
            if not dry_run:
                check_left(table, path, doomed)
                shutil.rmtree(path)


def check_left(table: Path, copy: Path, doomed: set[str]) -> None:
    """After a deleting run, ``copy`` must hold exactly the table's files that are not ``doomed``."""
    left, live = _data_files(copy), _data_files(table) - doomed
    if left != live:
        raise RuntimeError(f"vacuum left {len(left)} files in {copy}: {len(left - live)} unreferenced ones "
                           f"kept, {len(live - left)} live ones gone")  # fmt: skip


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Runs; the runs and the checks are made by helper processes, so that memory this process ever used
    never shows in the children's figures (see ``bench.checkpoint.isolated_compare``)."""
    return {"tables": {shape: run_shape(args, shape) for shape in args.shape or SHAPES}}


def run_shape(args: argparse.Namespace, shape: str) -> dict[str, Any]:
    from . import measure, tables
    from .checkpoint import isolated_compare

    name = TABLE if shape == "narrow" else f"{TABLE}-{shape}"
    env = measure.child_env(args.data_dir)
    helper(["table", str(args.data_dir), name], env)  # generated there if missing
    table = tables.ensure_table(name, args.data_dir).path
    log_before = sorted(os.listdir(table / "_delta_log"))
    base = Path(args.data_dir) / f"vacuum-{uuid.uuid4().hex[:8]}"
    base.mkdir(parents=True)
    results = {}
    try:
        counts = helper(["names", str(table), str(base)], env)
        for mode in args.mode or MODES:
            expect = {"num_files": counts["doomed"]}
            result = isolated_compare(
                "vacuum", [str(table), str(base), mode], args.runs, expect, args.data_dir, True
            )
            copies = [s.pop("copy") for impl in measure.WITH_FLOOR for s in result["samples"][impl]]
            if mode == "delete":
                helper(["left", str(table), *copies[: -len(result["samples"]["floor"])]], env)
            heading = title(mode, shape, counts["live"], counts["doomed"])
            print(measure.format_table(heading, result, GOALS), end="\n\n", flush=True)
            results[mode] = {"title": heading, "goals": GOALS, **expect, **result}
            for stale in base.glob(f"{_COPY_PREFIX}*"):  # with the warm-up runs' copies
                shutil.rmtree(stale)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    if sorted(os.listdir(table / "_delta_log")) != log_before:
        raise RuntimeError(f"a dry run changed the log of {table}")
    print(f"checked: both named the same {counts['doomed']:,} files, and every deleting run left exactly "
          f"the {counts['live']:,} live ones", end="\n\n", flush=True)  # fmt: skip
    return {"modes": results}


def helper(argv: list[str], env: dict[str, str]) -> dict[str, Any]:
    """``python -m bench.vacuum ARGV``: its JSON answer."""
    proc = subprocess.run(
        [sys.executable, "-m", "bench.vacuum", *argv], capture_output=True, text=True, env=env, cwd=_ROOT
    )
    if proc.returncode != 0:
        raise RuntimeError(f"bench.vacuum {argv[0]} failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main(argv: list[str]) -> int:
    """Helper processes: ``table DATA_DIR NAME`` (generate the table if missing), ``names TABLE BASE`` (both
    implementations name the unreferenced files, dry run and deleting) and ``left TABLE COPY...`` (each
    deleting run's copy holds exactly the live files)."""
    command, table, *rest = argv
    if command == "table":
        from .tables import ensure_table

        print(json.dumps({"path": str(ensure_table(rest[0], Path(table)).path)}))
        return 0
    doomed = expected_doomed(Path(table))
    if command == "names":
        check_names(Path(table), Path(rest[0]), doomed)
    elif command == "left":
        for copy in rest:
            check_left(Path(table), Path(copy), doomed)
    else:
        raise SystemExit(f"unknown command {command!r}")
    print(json.dumps({"doomed": len(doomed), "live": len(_data_files(Path(table))) - len(doomed)}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
