"""task: a cold task's cost on a big table (issue 35), ours against deltalake and a pyarrow floor.

An Airflow task is a fresh process that opens a table of millions of files to do one small thing. Three such
things, each timed in a fresh interpreter (imports excluded, ``bench.child``):

- ``commit``: one file's add and an app transaction. Ours ``DeltaTable(p).transaction().add_files(
  [AddFile(...)]).set_app_transaction("bench-app", N).commit()``; deltalake ``DeltaTable(p).
  create_write_transaction([AddAction(...)], mode="append", schema=..., partition_by=["region"],
  commit_properties=CommitProperties(app_transactions=[Transaction("bench-app", N)]))``.
- ``lookup``: the version and the app transactions. Ours ``s = DeltaTable(p).snapshot(); s.version;
  s.app_transactions``; deltalake ``dt = DeltaTable(p); dt.version(); dt.transaction_version("bench-app")``.
- ``second``: the commit again, after a helper process made one with ours (which, on a table with a
  checksum, writes the checksum of its version): what the next task of a DAG pays.
- floor (the variant without a checksum): pyarrow alone reading what a reader without a checksum cannot
  do without, the checkpoint's ``protocol``, ``metaData`` and ``txn`` columns (``pyarrow.parquet.
  read_table(columns=...)``) and the JSON commits after it (``bench.floor.log_files``), nothing else.

The table (``bench.tables.build_task_table``, wide shape: stats of 5 data columns, 100 partitions): a classic
checkpoint of ``--files`` adds at version 1000, then 50 JSON commits of 10 adds and 3 removes; commit 1026
sets the app transaction ``bench-app``. Two variants, each cached under the data directory:

- ``checksum``: the same log (hard links) and ``00000000000000001050.crc``, written once, untimed, by the
  core from a replay of the table (``checksum_of_state`` of the snapshot's files, read with only the
  fields a checksum counts: path, size, deletion vector);
- ``no checksum``: no ``.crc`` file, as delta-rs writes tables.

Every run works on its own copy of ``_delta_log`` (``cp -al``, in the child, untimed): a commit adds new
files and never changes one. Every run of ours counts the log files it reads (``LogStore.read_log_file``,
``read_log_files``) and the Parquet files it opens (``LogStore.open_input_file``, ``pyarrow.parquet.
ParquetFile``), so a checkpoint opened on a table with a checksum shows. The answers are checked after the
figures are taken: the commit landed as the next version with its add and its ``txn``, exactly once; the
look-up found version 1050 and ``bench-app`` at 1026.

Goals (issue 35), for ours: with a checksum, every operation at most 0.2 s and 60 MiB above imports, and
the same at the largest ``--files`` as at the smallest (within 25 %, or 20 ms and 10 MiB, whichever is
more: the noise of such short runs); without a checksum, at most 1.5x the floor's wall and memory.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import shutil
import subprocess
import sys
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

OPS = ("commit", "lookup", "second")
OP_TITLES = {
    "commit": "cold commit with an app transaction",
    "lookup": "cold version + app_transactions",
    "second": "second cold commit, after one of ours",
}
VARIANTS = ("checksum", "no-checksum")
APP_ID = "bench-app"  # bench.tables.TASK_APP_ID, not imported: it loads pyarrow
# With a checksum, limits on ours (wall in s, memory in KiB over imports); without one, ratios to the floor.
LIMITS = {"wall_s": 0.2, "peak_delta_kib": 60 * 1024}
FLOOR_GOALS = {"wall_s@floor": 1.5, "peak_delta_kib@floor": 1.5}
# "The same at 10 M as at 1 M": the largest table's median within 25 % of the smallest's, or this much.
FLAT = {"ratio": 1.25, "wall_s": 0.02, "peak_delta_kib": 10 * 1024}
_METRICS = ("wall_s", "peak_delta_kib", "peak_rss_kib")
_MTIME_MS = 1_767_225_600_000
_STATS = json.dumps(
    {
        "numRecords": 1000,
        "minValues": {"id": 0, "value": 0.0, "name": "name_0", "ts": "2025-12-01T00:00:00Z", "qty": 0},
        "maxValues": {"id": 999, "value": 1.0, "name": "name_9", "ts": "2025-12-31T00:00:00Z", "qty": 99},
        "nullCount": {"id": 0, "value": 0, "name": 0, "ts": 0, "qty": 0},
    },
    separators=(",", ":"),
)
_ROOT = Path(__file__).resolve().parent.parent


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--files",
        type=int,
        action="append",
        help="adds in the checkpoint (repeatable; default 1,000,000; times --scale)",
    )
    parser.add_argument("--op", choices=OPS, action="append", help="only this operation (default: all)")
    parser.add_argument(
        "--variant", choices=VARIANTS, action="append", help="only this variant (default: both)"
    )
    parser.add_argument(
        "--deltalake-max-files",
        type=int,
        default=4_000_000,
        help="run deltalake only on tables of at most this many adds (default 4,000,000: it holds every "
        "file's metadata, about 1.7 GiB per million files)",
    )


# -- child side -------------------------------------------------------------------------------------------
def _file(name: str) -> dict[str, Any]:
    return {
        "path": f"region=r007/{name}.parquet",
        "size": 4096,
        "partition_values": {"region": "r007"},
        "modification_time": _MTIME_MS,
        "data_change": True,
        "stats": _STATS,
    }


def _schema():
    import pyarrow as pa

    return pa.schema([("id", pa.int64()), ("value", pa.float64()), ("name", pa.string()),
                      ("ts", pa.timestamp("us", tz="UTC")), ("qty", pa.int32()),
                      ("region", pa.string())])  # fmt: skip


def _copy(table: str, base: str, impl: str) -> Path:
    copy = Path(base) / f"copy-{impl}-{uuid.uuid4().hex[:12]}"
    copy.mkdir(parents=True)
    subprocess.run(["cp", "-al", f"{table}/_delta_log", str(copy / "_delta_log")], check=True)
    return copy


def _count_reads() -> dict[str, Any]:
    """Count, from now on, the log files ours reads and the Parquet files it opens (file names)."""
    import pyarrow.parquet as pq

    from airflow_provider_delta.log.files.storage import LogStore

    seen: dict[str, Any] = {"log": [], "calls": 0, "parquet": []}  # log file names, read calls, Parquet
    depth = [0]  # only the outermost call counts: read_log_files of one file calls read_log_file
    one, many, open_input = LogStore.read_log_file, LogStore.read_log_files, LogStore.open_input_file

    def read_log_file(self: LogStore, name: str) -> bytes:
        if not depth[0]:
            seen["log"].append(name)
            seen["calls"] += 1
        return one(self, name)

    def read_log_files(self: LogStore, names: Any) -> list[bytes]:
        names = list(names)
        seen["log"].extend(names)
        seen["calls"] += bool(names)  # none: no request
        depth[0] += 1
        try:
            return many(self, names)
        finally:
            depth[0] -= 1

    def open_input_file(self: LogStore, path: str) -> Any:
        seen["parquet"].append(os.path.basename(path))
        depth[0] += 1
        try:
            return open_input(self, path)
        finally:
            depth[0] -= 1

    class ParquetFile(pq.ParquetFile):
        def __init__(self, source: Any, *args: Any, **kwargs: Any) -> None:
            if not depth[0]:
                name = source if isinstance(source, str) else getattr(source, "path", repr(source))
                seen["parquet"].append(os.path.basename(str(name)))
            super().__init__(source, *args, **kwargs)

    LogStore.read_log_file = read_log_file  # type: ignore[method-assign]
    LogStore.read_log_files = read_log_files  # type: ignore[method-assign]
    LogStore.open_input_file = open_input_file  # type: ignore[method-assign]
    pq.ParquetFile = ParquetFile  # type: ignore[misc]
    return seen


def _committer(impl: str, path: str) -> Callable[[str, int], Any]:
    """``commit(file_name, app_version)`` of ``impl`` on the table at ``path``; imports done here."""
    if impl == "ours":
        import fsspec.implementations.chained  # noqa: F401 - fsspec imports it on a table's first open

        from airflow_provider_delta.log import AddFile, DeltaTable

        def ours(name: str, app_version: int) -> Any:
            result = (
                DeltaTable(path)
                .transaction()
                .add_files([AddFile(**_file(name))])
                .set_app_transaction(APP_ID, app_version)
                .commit()
            )
            return result.already_committed

        return ours
    if impl == "deltalake":
        import deltalake
        from deltalake.transaction import AddAction, CommitProperties, Transaction

        schema = _schema()

        def theirs(name: str, app_version: int) -> Any:
            deltalake.DeltaTable(path).create_write_transaction(
                [AddAction(**_file(name))],
                mode="append",
                schema=schema,
                partition_by=["region"],
                commit_properties=CommitProperties(app_transactions=[Transaction(APP_ID, app_version)]),
            )
            return False

        return theirs
    raise ValueError(f"unknown implementation {impl!r}")


def _landed(path: Path, name: str, app_version: int) -> dict[str, Any]:
    """The newest commit of ``path``, and whether it holds exactly one add, ``name``, and the ``txn``."""
    log_dir = path / "_delta_log"
    commits = sorted(n for n in os.listdir(log_dir) if n.endswith(".json") and n[:20].isdigit())
    newest = commits[-1]
    actions = [json.loads(line) for line in (log_dir / newest).read_text().splitlines() if line.strip()]
    adds = [a["add"]["path"] for a in actions if "add" in a]
    txns = [(a["txn"]["appId"], a["txn"]["version"]) for a in actions if "txn" in a]
    ok = adds == [_file(name)["path"]] and txns == [(APP_ID, app_version)]
    landed_once = sum(name in (log_dir / c).read_text() for c in commits[-3:]) == 1
    return {
        "version": int(newest[:20]),
        "landed": ok and landed_once,
        "checksum_written": (log_dir / f"{newest[:20]}.crc").exists(),
    }


def prepare(impl: str, op: str, table: str, base: str, app_version: str) -> Callable[[], dict[str, Any]]:
    """A fresh copy of the table's log (untimed; for ``second``, with one commit of ours made first by a
    helper process); the work: ``op`` on it. ``app_version`` is the table's version of ``bench-app``."""
    path = _copy(table, base, impl)
    n = int(app_version)
    first: dict[str, Any] = {}
    if op == "second":
        first = _helper(["first-commit", str(path), str(n + 1)], dict(os.environ))
        if first["already_committed"] or not first["landed"]:
            raise RuntimeError(f"the first commit of ours on {path} did not land: {first}")
    if impl == "floor":
        return _floor(str(path))
    if op == "lookup":
        if impl == "ours":
            import fsspec.implementations.chained  # noqa: F401 - fsspec imports it on a table's first open

            from airflow_provider_delta.log import DeltaTable

            seen = _count_reads()

            def ours() -> dict[str, Any]:
                s = DeltaTable(str(path)).snapshot()
                return {"version": s.version, "app_version": s.app_transactions.get(APP_ID), "reads": seen}

            return ours
        if impl == "deltalake":
            import deltalake

            def theirs() -> dict[str, Any]:
                dt = deltalake.DeltaTable(str(path))
                return {"version": dt.version(), "app_version": dt.transaction_version(APP_ID)}

            return theirs
        raise ValueError(f"unknown implementation {impl!r}")
    commit = _committer(impl, str(path))
    seen = _count_reads() if impl == "ours" else None
    name, app = (f"task-{op}", n + 1) if op == "commit" else (f"task-{op}", n + 2)

    check = functools.cache(lambda: _landed(path, name, app))

    def work() -> dict[str, Any]:
        already = commit(name, app)
        facts = {"already_committed": already, "first_commit": first, "reads": seen}
        # Read back once the figures are taken (bench.child calls the functions it is given as facts).
        checks = {key: (lambda k=key: check()[k]) for key in ("version", "landed", "checksum_written")}
        return {**facts, **checks}

    return work


def _floor(path: str) -> Callable[[], dict[str, Any]]:
    import io

    import pyarrow.dataset  # noqa: F401 - read_table imports it (and pandas with it) on its first call
    import pyarrow.json as pj
    import pyarrow.parquet as pq

    from . import floor

    def alone() -> dict[str, Any]:
        checkpoint, commits = floor.log_files(path)
        small = [pq.read_table(p, columns=["protocol", "metaData", "txn"]) for p in checkpoint]
        data = b"".join(c.read_bytes() for c in commits)
        parsed = pj.read_json(io.BytesIO(data), read_options=pj.ReadOptions(block_size=8 << 20))
        return {"rows": sum(t.num_rows for t in small) + parsed.num_rows}

    return alone


# -- helper processes -------------------------------------------------------------------------------------
def first_commit(path: str, app_version: int) -> dict[str, Any]:
    """One commit of ours in this (fresh) process: the commit ``second`` follows."""
    already = _committer("ours", path)("task-first", app_version)
    return {"already_committed": already, **_landed(Path(path), "task-first", app_version)}


def ensure_tables(data_dir: Path, num_adds: int, deltalake_max: int) -> dict[str, Any]:
    """Both variants of the table of ``num_adds`` adds, generated and checked first if missing."""
    from . import tables

    def verify(path: Path, version: int, num_files: int) -> None:
        if num_adds <= deltalake_max:
            tables.verify_with_deltalake(path, version, num_files)
        _verify_ours(path, version, num_files, tables.task_app_version(), with_checksum=False)

    name = f"task_{num_adds}-wide"
    plain = tables.ensure_built(
        name,
        data_dir / f"{name}-v{tables.GENERATOR_VERSION}",
        lambda root: tables.build_task_table(root, num_adds),
        verify,
    )

    def with_checksum(root: Path) -> tuple[int, int]:
        root.rmdir()
        subprocess.run(["cp", "-al", str(plain.path), str(root)], check=True)
        (root / "_bench_table.json").unlink()
        _write_checksum(root)
        return plain.version, plain.num_files

    def verify_checksum(path: Path, version: int, num_files: int) -> None:
        _verify_ours(path, version, num_files, tables.task_app_version(), with_checksum=True)

    crc = tables.ensure_built(
        f"{name}-crc",
        data_dir / f"{name}-crc-v{tables.GENERATOR_VERSION}",
        with_checksum,
        verify_checksum,
    )
    return {
        "version": plain.version,
        "num_files": plain.num_files,
        "app_version": tables.task_app_version(),
        "paths": {"no-checksum": str(plain.path), "checksum": str(crc.path)},
    }


def _write_checksum(root: Path) -> None:
    """The checksum of the table's latest version, from a replay of its files by the core. Only the fields
    a checksum counts are read (path, size, deletion vector): the same bytes as from ``snapshot().files``
    with every field, without holding the stats of millions of files."""
    from airflow_provider_delta.log.actions.actions import FileFields
    from airflow_provider_delta.log.files.storage import LogStore
    from airflow_provider_delta.log.files.version_checksum import checksum_of_state, write_checksum
    from airflow_provider_delta.log.snapshot.snapshot import load_snapshot

    counted = ("path", "size", "deletionVector")
    s = load_snapshot(LogStore(str(root)), fields=FileFields(add=counted, remove=counted))
    crc = checksum_of_state(s.version, s.protocol, s.metadata, s.files, s.app_transaction_actions,
                            s.domain_metadata, None)  # fmt: skip
    if not write_checksum(s.store, crc):
        raise RuntimeError(f"could not write the checksum of {root} at version {s.version}")


def _verify_ours(path: Path, version: int, num_files: int, app_version: int, *, with_checksum: bool) -> None:
    """Our snapshot finds the version and ``bench-app``; with a checksum, it starts from it and the
    checksum counts ``num_files``."""
    from airflow_provider_delta.log import DeltaTable

    s = DeltaTable(str(path)).snapshot()
    got = (s.version, s.app_transactions.get(APP_ID), s.checksum is not None)
    if got != (version, app_version, with_checksum):
        raise RuntimeError(f"ours reads {path} as (version, {APP_ID}, from a checksum) = {got}, expected "
                           f"{(version, app_version, with_checksum)}")  # fmt: skip
    if with_checksum and s.checksum.totals.num_files != num_files:
        raise RuntimeError(
            f"the checksum of {path} counts {s.checksum.totals.num_files} files, not {num_files}"
        )


def _helper(argv: list[str], env: dict[str, str]) -> dict[str, Any]:
    """``python -m bench.task ARGV`` in a fresh process: its JSON answer."""
    proc = subprocess.run([sys.executable, "-m", "bench.task", *argv], capture_output=True, text=True,
                          cwd=_ROOT, env=env)  # fmt: skip
    if proc.returncode != 0:
        raise RuntimeError(f"bench.task {argv[0]} failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main(argv: list[str]) -> int:
    """Helper processes: ``first-commit PATH APP_VERSION`` and ``tables DATA_DIR NUM_ADDS DELTALAKE_MAX``."""
    command, *rest = argv
    if command == "first-commit":
        answer = first_commit(rest[0], int(rest[1]))
    elif command == "tables":
        answer = ensure_tables(Path(rest[0]), int(rest[1]), int(rest[2]))
    else:
        raise SystemExit(f"unknown command {command!r}")
    print(json.dumps(answer))
    return 0


# -- parent side ------------------------------------------------------------------------------------------
def _scaled(n: int) -> int:
    """``bench.tables.scaled``, without loading pyarrow into this process."""
    return max(1, round(n * float(os.environ.get("BENCH_SCALE", "1"))))


def _compare(op: str, runs_args: list[str], runs: int, expect: dict[str, Any], data_dir: Path,
             impls: tuple[str, ...]) -> dict[str, Any]:  # fmt: skip
    """``measure.compare`` in a small helper process (``bench.checkpoint.isolated_compare``)."""
    from . import checkpoint, measure

    config = {"bench": "task", "args": [op, *runs_args], "runs": runs, "expect": expect,
              "data_dir": str(data_dir), "impls": impls}  # fmt: skip
    return checkpoint.helper(["compare", json.dumps(config)], measure.child_env(data_dir))


def _reads_text(sample: dict[str, Any]) -> str:
    """What ours read in one run: log files (commits as ranges), in how many calls, and the Parquet files."""
    reads = sample.get("reads")
    if reads is None:
        return ""
    names = _ranges([_short(n) for n in reads["log"]])
    checkpoint = any(".checkpoint" in n for n in reads["parquet"] + reads["log"])
    opened = f" ({', '.join(_short(n) for n in reads['parquet'])})" if reads["parquet"] else ""
    return (
        f"{len(reads['log'])} log files in {reads['calls']} calls ({', '.join(names)}); "
        f"checkpoint {'OPENED' + opened if checkpoint else 'not opened'}"
    )


def _ranges(names: list[str]) -> list[str]:
    """Consecutive commits ``1001.json``, ``1002.json``, ... as ``1001-1050.json``."""
    out: list[str] = []
    run: list[int] = []
    for name in [*names, ""]:
        head, _, tail = name.partition(".")
        if tail == "json" and head.isdigit() and (not run or int(head) == run[-1] + 1):
            run.append(int(head))
            continue
        if run:
            out.append(f"{run[0]}.json" if len(run) == 1 else f"{run[0]}-{run[-1]}.json")
            run = []
        if tail == "json" and head.isdigit():
            run = [int(head)]
        elif name:
            out.append(name)
    return out


def _short(name: str) -> str:
    """``00000000000000001050.crc`` as ``1050.crc``."""
    head, dot, tail = name.partition(".")
    return f"{int(head)}.{tail}" if head.isdigit() and dot else name


def _cell(value: float | None, fmt: str, scale: float) -> str:
    return "" if value is None else fmt.format(value * scale)


def format_variant(title: str, variant: str, results: dict[str, dict[str, Any]], runs: int) -> str:
    """One Markdown table: each operation's medians, ratios and goals, and what ours read."""
    from . import measure

    metrics = [m for m in measure.METRICS if m[0] in _METRICS]
    floor = variant == "no-checksum"
    lines = [
        f"{title} (median of {runs} runs)",
        "",
        "| operation | metric | ours | deltalake | ours/deltalake |"
        + (" floor | ours/floor |" if floor else "") + " goal |",
        "| --- | --- | ---: | ---: | ---: |" + (" ---: | ---: |" if floor else "") + " --- |",
    ]  # fmt: skip
    notes = []
    for op, result in results.items():
        med = result["median"]
        for i, (key, label, scale, fmt) in enumerate(metrics):
            ours = med["ours"][key]
            theirs = med.get("deltalake", {}).get(key)
            ratio = result["ratio_ours_over_deltalake"].get(key)
            row = (f"| {OP_TITLES[op] if i == 0 else ''} | {label} | {fmt.format(ours * scale)} | "
                   f"{_cell(theirs, fmt, scale) or 'not run'} | {measure._ratio_text(ratio)} |")  # fmt: skip
            goal = ""
            if floor:
                to_floor = result["ratio_ours_over_floor"][key]
                row += f" {_cell(med['floor'][key], fmt, scale)} | {measure._ratio_text(to_floor)} |"
                goal = measure._verdict(FLOOR_GOALS.get(f"{key}@floor"), to_floor, " of floor")
            elif key in LIMITS:
                limit = LIMITS[key] * scale
                unit = "s" if key == "wall_s" else "MiB"
                goal = f"<= {limit:g} {unit}: {'met' if ours * scale <= limit else 'MISSED'}"
            lines.append(f"{row} {goal} |")
        sample = result["samples"]["ours"][-1]
        reads = {_reads_text(s) for s in result["samples"]["ours"]}
        note = f"{OP_TITLES[op]}: ours read {' / '.join(sorted(reads))}"
        written = {s.get("checksum_written") for s in result["samples"]["ours"]} - {None}
        if written:
            note += (
                "; wrote the checksum of its version"
                if written == {True}
                else ("; wrote no checksum" if written == {False} else "; wrote a checksum in some runs only")
            )
        if sample.get("first_commit"):
            first = sample["first_commit"]
            note += (f"; after ours committed version {first['version']} "
                     f"({'with' if first['checksum_written'] else 'without'} a checksum of it)")  # fmt: skip
        notes.append(note)
    ranges = "; ".join(
        f"{op}: "
        + ", ".join(
            f"{impl} {lo:.3f}-{hi:.3f} s"
            for impl, (lo, hi) in ((i, r["range"][i]["wall_s"]) for i in r["range"])
        )  # fmt: skip
        for op, r in results.items()
    )
    return "\n".join([*lines, "", *notes, f"wall range: {ranges}"])


def _flat(per_count: dict[int, dict[str, Any]]) -> list[str]:
    """Whether ours with a checksum costs the same on the largest table as on the smallest."""
    counts = sorted(per_count)
    if len(counts) < 2:
        return []
    lo, hi = counts[0], counts[-1]
    out = [f"with a checksum, {hi:,} adds against {lo:,} (goal: the same; within 25 %, or 20 ms / 10 MiB):"]
    for op in per_count[lo]:
        if op not in per_count[hi]:
            continue
        parts = []
        for key, unit, scale, fmt in (("wall_s", "s", 1.0, "{:.3f}"),
                                      ("peak_delta_kib", "MiB", 1 / 1024, "{:.0f}")):  # fmt: skip
            a, b = (per_count[c][op]["median"]["ours"][key] for c in (lo, hi))
            ok = b <= max(a * FLAT["ratio"], a + FLAT[key])
            parts.append(f"{fmt.format(a * scale)} -> {fmt.format(b * scale)} {unit}: "
                         f"{'met' if ok else 'MISSED'}")  # fmt: skip
        out.append(f"- {OP_TITLES[op]}: " + "; ".join(parts))
    return out


def run(args: argparse.Namespace) -> dict[str, Any]:
    from . import measure

    env = measure.child_env(args.data_dir)
    counts = [_scaled(f) for f in (args.files or [1_000_000])]
    ops = args.op or list(OPS)
    variants = args.variant or list(VARIANTS)
    results: dict[str, Any] = {}
    flat_input: dict[int, dict[str, Any]] = {}
    for num_adds in counts:
        table = _helper(["tables", str(args.data_dir), str(num_adds), str(args.deltalake_max_files)], env)
        with_deltalake = num_adds <= args.deltalake_max_files
        per_variant: dict[str, Any] = {}
        base = Path(args.data_dir) / f"task-{uuid.uuid4().hex[:8]}"
        try:
            for variant in variants:
                impls = ("ours", "deltalake") if with_deltalake else ("ours",)
                if variant == "no-checksum":
                    impls += ("floor",)
                per_op = {}
                for op in ops:
                    if op == "lookup":
                        expect = {"version": table["version"], "app_version": table["app_version"]}
                    else:
                        version = table["version"] + (1 if op == "commit" else 2)
                        expect = {"version": version, "landed": True, "already_committed": False}
                    runs_args = [table["paths"][variant], str(base / variant / op), str(table["app_version"])]
                    per_op[op] = _compare(op, runs_args, args.runs, expect, args.data_dir, impls)
                shown = "a checksum at its latest version" if variant == "checksum" else "no checksum"
                title = (f"task ({variant}): checkpoint of {num_adds:,} adds + 50 JSON commits, "
                         f"{table['num_files']:,} live files, {shown}")  # fmt: skip
                print(format_variant(title, variant, per_op, args.runs), end="\n\n", flush=True)
                per_variant[variant] = {"title": title, **per_op}
                if variant == "checksum":
                    flat_input[num_adds] = per_op
        finally:
            shutil.rmtree(base, ignore_errors=True)
        results[str(num_adds)] = {"version": table["version"], "num_files": table["num_files"],
                                  "deltalake_run": with_deltalake, "variants": per_variant}  # fmt: skip
    flat = _flat(flat_input)
    if flat:
        print("\n".join(flat), end="\n\n", flush=True)
    goals = {"checksum": {"wall_s": LIMITS["wall_s"], "peak_delta_mib": LIMITS["peak_delta_kib"] / 1024,
                          "flat": FLAT}, "no-checksum": FLOOR_GOALS}  # fmt: skip
    return {"goals": goals, "tables": results, "flat": flat}


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
