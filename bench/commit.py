"""commit: single-commit latency and 8-writer commit throughput on a local table, ours against deltalake.

Every commit appends one file's metadata (no data file is written: neither committer opens it), the same
for both: path ``region=rK/wWW-cNNNNN.parquet``, size, partition value, modification time and stats.

- latency: ``--commits`` sequential commits to a new table in a fresh interpreter, each timed alone; the
  median per run, then the median over runs. Each commit starts from the table's location, as a task does:
  ours ``DeltaTable(path).transaction().add_files([AddFile(...)]).commit()``; deltalake
  ``DeltaTable(path).create_write_transaction([AddAction(...)], mode="append", schema=..., ...)``.
- contention: ``--writers`` processes, started together (each signals ready, then waits for one "go"), do
  ``--writer-commits`` commits each to one table; commits/s is all commits over the time from "go" to the
  last writer's report. Then the table is audited with both readers: every commit must be there exactly
  once (deltalake commits on local disk with a rename that refuses to replace, ours with a hard link).

Both sides keep their default checkpointing (ours every 10 commits, as Delta Spark; deltalake every 100)
and get the same retry budget (200 attempts). ``python -m bench.commit writer ...`` is the writer process.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

GOALS = {"latency": 1.2, "throughput": 1.0}  # ours/deltalake: latency at most, throughput at least
MAX_ATTEMPTS = 200
PARTITIONS = 8
_MTIME_MS = 1_767_225_600_000  # 2026-01-01, fixed
_STATS = json.dumps(
    {
        "numRecords": 1000,
        "minValues": {"id": 0, "value": 0.0},
        "maxValues": {"id": 999, "value": 1.0},
        "nullCount": {"id": 0, "value": 0},
    },
    separators=(",", ":"),
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--commits", type=int, default=50, help="sequential commits per latency run")
    parser.add_argument("--writers", type=int, default=8, help="concurrent writer processes")
    parser.add_argument("--writer-commits", type=int, default=25, help="commits per writer")


# -- the same file metadata for both ----------------------------------------------------------------------
def _schema():
    import pyarrow as pa

    return pa.schema([("id", pa.int64()), ("value", pa.float64()), ("region", pa.string())])


def _file(writer: int, n: int) -> dict[str, Any]:
    region = f"r{(writer + n) % PARTITIONS}"
    return {
        "path": f"region={region}/w{writer:02d}-c{n:05d}.parquet",
        "size": 4096 + n,
        "partition_values": {"region": region},
        "modification_time": _MTIME_MS + n,
        "data_change": True,
        "stats": _STATS,
    }


def _create(impl: str, path: str) -> None:
    if impl == "ours":
        from airflow_provider_delta.log import DeltaTable

        DeltaTable.create(path, _schema(), partition_by=["region"])
    else:
        import deltalake

        deltalake.DeltaTable.create(path, _schema(), partition_by=["region"])


def _committer(impl: str, path: str) -> Callable[[dict[str, Any]], None]:
    """A function committing one file's metadata to the table at ``path``; imports done here."""
    if impl == "ours":
        from airflow_provider_delta.log import AddFile, DeltaTable

        def ours(f: dict[str, Any]) -> None:
            DeltaTable(path).transaction().add_files([AddFile(**f)]).commit(max_attempts=MAX_ATTEMPTS)

        return ours
    if impl == "deltalake":
        import deltalake
        from deltalake.transaction import AddAction, CommitProperties

        schema = _schema()
        props = CommitProperties(max_commit_retries=MAX_ATTEMPTS)

        def theirs(f: dict[str, Any]) -> None:
            deltalake.DeltaTable(path).create_write_transaction(
                [AddAction(**f)],
                mode="append",
                schema=schema,
                partition_by=["region"],
                commit_properties=props,
            )

        return theirs
    raise ValueError(f"unknown implementation {impl!r}")


# -- child side: latency (through bench.child) --------------------------------------------------------------
def prepare(impl: str, base: str, commits: str) -> Callable[[], dict[str, Any]]:
    """A new table under ``base`` (untimed), then the work: ``commits`` sequential commits, each timed."""
    path = str(Path(base) / f"{impl}-{uuid.uuid4().hex}")
    _create(impl, path)
    commit = _committer(impl, path)

    def work() -> dict[str, Any]:
        latencies = []
        for n in range(int(commits)):
            start = time.perf_counter()
            commit(_file(0, n))
            latencies.append(time.perf_counter() - start)
        version, paths = _audit(path)
        return {
            "version": version,
            "num_files": len(paths),
            "median_commit_ms": statistics.median(latencies) * 1000,
        }

    return work


# -- child side: one contention writer -------------------------------------------------------------------
def writer_main(impl: str, path: str, writer: int, commits: int) -> None:
    commit = _committer(impl, path)
    print("ready", flush=True)
    if sys.stdin.readline().strip() != "go":
        raise SystemExit("no go")
    start = time.perf_counter()
    for n in range(commits):
        commit(_file(writer, n))
    print(json.dumps({"elapsed_s": time.perf_counter() - start}), flush=True)


# -- parent side ------------------------------------------------------------------------------------------
def _audit(path: str) -> tuple[int, set[str]]:
    """(version, live paths) as both readers see them; raises if they disagree."""
    import deltalake
    import pyarrow as pa

    from airflow_provider_delta.log import DeltaTable

    snap = DeltaTable(path).snapshot()
    dt = deltalake.DeltaTable(path)
    theirs = set(pa.table(dt.get_add_actions(flatten=True)).column("path").to_pylist())
    ours = set(snap.file_paths())
    if (snap.version, ours) != (dt.version(), theirs):
        raise RuntimeError(f"readers disagree on {path}: ours v{snap.version}, deltalake v{dt.version()}")
    return snap.version, ours


def _contend(impl: str, path: str, writers: int, commits: int, env: dict[str, str]) -> float:
    """One contention run; commits/s. Raises unless every commit landed exactly once."""
    _create(impl, path)
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "bench.commit", "writer", impl, path, str(i), str(commits)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=env,
            cwd=Path(__file__).resolve().parent.parent,
        )
        for i in range(writers)
    ]
    try:
        for p in procs:
            if p.stdout.readline().strip() != "ready":
                raise RuntimeError(f"{impl} writer failed to start (exit {p.wait()})")
        start = time.perf_counter()
        for p in procs:
            p.stdin.write("go\n")
            p.stdin.flush()
        for p in procs:
            if not p.stdout.readline().strip():
                raise RuntimeError(f"{impl} writer failed (exit {p.wait()})")
        elapsed = time.perf_counter() - start
    finally:
        for p in procs:
            p.stdin.close()
            p.wait()
    version, paths = _audit(path)
    expected = {_file(w, n)["path"] for w in range(writers) for n in range(commits)}
    if version != writers * commits or paths != expected:
        raise RuntimeError(
            f"{impl} lost or duplicated commits: version {version}, {len(paths)} files, "
            f"{len(expected - paths)} missing; expected version {writers * commits}"
        )
    _check_commit_files(path, writers * commits)
    return writers * commits / elapsed


def _check_commit_files(path: str, last: int) -> None:
    """Versions 1..last each hold exactly one add, and no add appears twice (nothing was overwritten)."""
    log = Path(path) / "_delta_log"
    seen: set[str] = set()
    for v in range(1, last + 1):
        adds = [
            json.loads(line)["add"]["path"]
            for line in (log / f"{v:020d}.json").read_text().splitlines()
            if line.startswith('{"add"')
        ]
        if len(adds) != 1 or adds[0] in seen:
            raise RuntimeError(f"{path}: commit {v} holds {adds}")
        seen.add(adds[0])


def run(args: argparse.Namespace) -> dict[str, Any]:
    from . import measure

    base = Path(args.data_dir) / f"commit-{uuid.uuid4().hex[:8]}"
    base.mkdir(parents=True)
    try:
        latency = measure.compare(
            "commit",
            [str(base), str(args.commits)],
            args.runs,
            {"version": args.commits, "num_files": args.commits},
            args.data_dir,
        )
        lat = {
            i: statistics.median(s["median_commit_ms"] for s in latency["samples"][i]) for i in measure.IMPLS
        }

        env = measure.child_env(args.data_dir)
        rates: dict[str, list[float]] = {impl: [] for impl in measure.IMPLS}
        for r in range(args.runs):
            for impl in measure.IMPLS if r % 2 == 0 else measure.IMPLS[::-1]:
                path = str(base / f"contention-{impl}-{r}")
                rates[impl].append(_contend(impl, path, args.writers, args.writer_commits, env))
        tput = {impl: statistics.median(v) for impl, v in rates.items()}
    finally:
        shutil.rmtree(base, ignore_errors=True)

    lat_ratio = lat["ours"] / lat["deltalake"]
    tput_ratio = tput["ours"] / tput["deltalake"]
    total = args.writers * args.writer_commits
    print(
        "\n".join(
            [
                f"commit: local table, one add per commit, median of {args.runs} runs",
                "",
                "| metric | ours | deltalake | ours/deltalake | goal |",
                "| --- | ---: | ---: | ---: | --- |",
                f"| latency, median of {args.commits} sequential commits (ms) | {lat['ours']:.2f} | "
                f"{lat['deltalake']:.2f} | {lat_ratio:.2f}x | <= {GOALS['latency']:.1f}x: "
                f"{'met' if lat_ratio <= GOALS['latency'] else 'MISSED'} |",
                f"| throughput, {args.writers} processes x {args.writer_commits} commits (commits/s) | "
                f"{tput['ours']:.1f} | {tput['deltalake']:.1f} | {tput_ratio:.2f}x | >= "
                f"{GOALS['throughput']:.1f}x: {'met' if tput_ratio >= GOALS['throughput'] else 'MISSED'} |",
                "",
                f"deltalake used create_write_transaction; both landed all {total} contended commits exactly "
                "once in every run.",
            ]
        ),
        end="\n\n",
        flush=True,
    )
    return {
        "goals": GOALS,
        "latency": {
            "commits": args.commits,
            "median_commit_ms": lat,
            "ratio_ours_over_deltalake": lat_ratio,
            "samples": latency["samples"],
        },
        "contention": {
            "writers": args.writers,
            "commits_per_writer": args.writer_commits,
            "commits_per_s": tput,
            "ratio_ours_over_deltalake": tput_ratio,
            "samples": rates,
        },
    }


def main(argv: list[str]) -> int:
    if argv[:1] == ["writer"]:
        impl, path, writer, commits = argv[1:]
        writer_main(impl, path, int(writer), int(commits))
        return 0
    # Standalone until "commit" is listed in bench.__main__.BENCHES: python -m bench.commit [--runs N] ...
    from . import measure
    from .__main__ import _common_options

    parser = argparse.ArgumentParser(prog="python -m bench.commit", description=__doc__.splitlines()[0])
    _common_options(parser)
    add_arguments(parser)
    args = parser.parse_args(argv)
    path = measure.write_results(args.out, "commit", {"runs": args.runs, **run(args)})
    print(f"commit: results written to {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
