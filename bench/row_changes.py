"""row_changes: MERGE and DELETE on our Spark layer against Delta Spark 4.4, deletion vectors and rewrite.

Two worker processes (``bench/row_changes_worker.py``), each one ``local[2]`` session with the same
settings (``CONF``): ours (the project's pyspark, ``airflow_provider_delta.spark``) and Delta Spark's (the
oracle's pyspark and jars, ``.oracle/``: ``make oracle``). Delta Spark builds the two tables once: 5,000,000
rows (``id``, ``value``, ``name``, ``region``) in 8 files of consecutive ids, one with
``delta.enableDeletionVectors=true`` (the DV path), one without (the rewrite path). Each run works on a
fresh copy (data files hard-linked, the log copied: both engines only add files).

- merge: a 100,000-row change batch, half updates of rows spread over every file (every 100th id), half
  new ids; ``WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *`` on ``id``;
- delete: ``DELETE WHERE id % 100 = 7`` (1 % of the rows, in every file);
- optimize (issue 15): compaction of ``bench.optimize``'s table of 10,000 files of 50 rows into one, by
  both of our engines, ``airflow_provider_delta.spark.optimize`` (Spark) and ``DeltaTable.optimize``
  (pyarrow in the process), against ``OPTIMIZE delta.`path``` and deltalake's ``optimize.compact()``. The
  pyarrow path and deltalake run in our worker's process beside its idle session; each of ours is measured
  against the faster of the two others, as issue 15 asks.

One unrecorded warm-up round, then ``--runs`` rounds; in each round every case runs on both engines, who
goes first swapping each round. Only the operation is timed (the source DataFrame is defined before the
clock starts; Delta Spark's SQL is run to completion). Every run's commit metrics must count the rows the
case changes, and each engine's last copy of each case is counted by that engine's reader.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

from . import optimize

ROWS, BATCH, FILES = 5_000_000, 100_000, 8
GOAL = 1.0  # ours / Delta Spark, median wall: at most as slow
CONF = {  # the one set of session settings both engines use
    "spark.driver.memory": "4g",
    "spark.sql.shuffle.partitions": "2",
    "spark.default.parallelism": "2",
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.session.timeZone": "UTC",
    "spark.databricks.delta.snapshotPartitions": "2",  # Delta Spark's state reconstruction on 2 cores
}
CASES = [(op, layout) for layout in ("dv", "rewrite") for op in ("merge", "delete")] + [("optimize", "small")]
# The engines of each operation: (name, the worker that runs it, its command). Ours first, then the peers.
ENGINES = {
    "optimize": [("ours", "ours", "optimize"), ("pyarrow", "ours", "optimize_pyarrow"),
                 ("delta", "delta", "optimize"), ("deltalake", "ours", "compact_deltalake")],
}  # fmt: skip
DEFAULT_ENGINES = [("ours", "ours", None), ("delta", "delta", None)]
PEERS = ("delta", "deltalake")
_ROOT = Path(__file__).resolve().parent.parent
WORKER = Path(__file__).with_name("row_changes_worker.py")
_GENERATOR_VERSION = 1


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.set_defaults(runs=3)  # Spark runs are long: 3 by default, not 5
    parser.add_argument("--rows", type=int, default=ROWS, help=f"rows of the table (default {ROWS:,})")
    parser.add_argument("--batch", type=int, default=BATCH, help=f"MERGE source rows (default {BATCH:,})")
    parser.add_argument("--cases", default=",".join(f"{op}-{layout}" for op, layout in CASES),
                        help="comma-separated cases to run (default: all)")  # fmt: skip
    parser.add_argument("--oracle-home", type=Path, default=_ROOT / ".oracle",
                        help="Delta Spark's venv and jars (default .oracle: `make oracle`)")  # fmt: skip


class Worker:
    """One engine's worker process; ``call`` sends a command and returns its answer."""

    def __init__(self, engine: str, python: str, env: dict[str, str], jars: str | None = None) -> None:
        argv = [python, str(WORKER), engine, json.dumps(CONF), *([jars] if jars else [])]
        self.engine = engine
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env,
                                     cwd=_ROOT)  # fmt: skip
        self.version = self._answer()["ready"]

    def _answer(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"the {self.engine} worker ended (exit {self.proc.wait()}); its log is above")
        return json.loads(line)

    def call(self, **cmd: Any) -> dict[str, Any]:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(cmd) + "\n")
        self.proc.stdin.flush()
        return self._answer()

    def stop(self) -> None:
        if self.proc.poll() is None:
            assert self.proc.stdin is not None
            self.proc.stdin.write(json.dumps({"op": "stop"}) + "\n")
            self.proc.stdin.close()
            self.proc.wait(timeout=120)


def _copy(table: Path, base: Path, name: str) -> Path:
    copy = base / f"{name}-{uuid.uuid4().hex[:10]}"
    subprocess.run(["cp", "-al", str(table), str(copy)], check=True)
    shutil.rmtree(copy / "_delta_log")
    subprocess.run(["cp", "-a", str(table / "_delta_log"), str(copy / "_delta_log")], check=True)
    return copy


def _check(engine: str, op: str, m: dict[str, Any], rows: int, batch: int) -> None:
    if op == "merge":
        got = (m["numTargetRowsUpdated"], m["numTargetRowsInserted"], m["numTargetRowsDeleted"])
        want = (batch // 2, batch - batch // 2, 0)
    elif op == "optimize":
        got, want = (int(m["numRemovedFiles"]), int(m["numAddedFiles"])), (optimize.FILES, 1)
    else:
        got, want = (m["numDeletedRows"],), (len(range(7, rows, 100)),)
    if got != want:
        raise RuntimeError(f"{engine} {op}: the commit's metrics count {got} rows, expected {want}: {m}")


def _tables(delta: Worker, data_dir: Path, rows: int) -> dict[str, Path]:
    """The two tables Delta Spark builds, cached under the data directory."""
    out = {}
    for layout in ("dv", "rewrite"):
        path = data_dir / f"row_changes-{rows}-{layout}-v{_GENERATOR_VERSION}"
        if not (path / "_complete").exists():
            shutil.rmtree(path, ignore_errors=True)
            delta.call(op="build", path=str(path), dv=layout == "dv", rows=rows, files=FILES)
            (path / "_complete").touch()
        out[layout] = path
    out["small"] = optimize.ensure_table(data_dir)
    return out


def run(args: argparse.Namespace) -> dict[str, Any]:
    from . import measure

    python, jars = args.oracle_home / "venv" / "bin" / "python", args.oracle_home / "jars"
    if not python.exists() or not list(jars.glob("delta-spark_*.jar")):
        raise SystemExit(f"row_changes needs Delta Spark in {args.oracle_home}: run `make oracle`")
    env = measure.child_env(args.data_dir)
    theirs_env = {k: v for k, v in env.items() if not k.startswith(("PYSPARK_", "PYTHON"))}
    base = Path(args.data_dir) / f"row_changes-{uuid.uuid4().hex[:8]}"
    base.mkdir(parents=True)
    load_before = os.getloadavg()
    workers = {"delta": Worker("delta", str(python), theirs_env, str(jars))}
    cases = [(op, layout) for op, layout in CASES if f"{op}-{layout}" in args.cases.split(",")]
    samples: dict[str, dict[str, list[float]]] = {
        f"{op}-{layout}": {name: [] for name, _, _ in ENGINES.get(op, DEFAULT_ENGINES)}
        for op, layout in cases
    }
    runs_on: dict[str, str] = {}
    metrics: dict[str, dict[str, Any]] = {}
    try:
        tables = _tables(workers["delta"], Path(args.data_dir), args.rows)
        workers["ours"] = Worker("ours", sys.executable, env)
        last: dict[tuple[str, str], Path] = {}
        for r in range(-1, args.runs):
            for op, layout in cases:
                engines = ENGINES.get(op, DEFAULT_ENGINES)
                for engine, worker, command in engines if r % 2 == 0 else engines[::-1]:
                    runs_on[engine] = worker
                    copy = _copy(tables[layout], base, f"{engine}-{op}-{layout}")
                    answer = workers[worker].call(op=command or op, path=str(copy), rows=args.rows,
                                                  batch=args.batch)  # fmt: skip
                    _check(engine, op, answer["metrics"], args.rows, args.batch)
                    print(f"[row_changes] round {r} {op} {layout} {engine}: {answer['seconds']:.2f} s",
                          file=sys.stderr, flush=True)  # fmt: skip
                    if r >= 0:
                        samples[f"{op}-{layout}"][engine].append(answer["seconds"])
                        metrics[f"{op}-{layout}-{engine}"] = answer["metrics"]
                    previous = last.pop((engine, f"{op}-{layout}"), None)
                    if previous is not None:
                        shutil.rmtree(previous)
                    last[(engine, f"{op}-{layout}")] = copy
        expected = {"merge": args.rows + args.batch - args.batch // 2,
                    "delete": args.rows - len(range(7, args.rows, 100)),
                    "optimize": optimize.FILES * optimize.ROWS_PER_FILE}  # fmt: skip
        for (engine, case), copy in last.items():
            counted = workers[runs_on[engine]].call(op="count", path=str(copy))["rows"]
            if counted != expected[case.split("-")[0]]:
                raise RuntimeError(f"{engine} {case}: {counted} rows after the last run, expected "
                                   f"{expected[case.split('-')[0]]}")  # fmt: skip
        versions = {name: w.version for name, w in workers.items()}
    finally:
        for w in workers.values():
            w.stop()
        shutil.rmtree(base, ignore_errors=True)
    load_after = os.getloadavg()
    text, payload = _report(samples, metrics, versions, args, load_before, load_after)
    print(text, end="\n\n", flush=True)
    return payload


def _report(samples: dict, metrics: dict, versions: dict, args: argparse.Namespace, load_before: tuple,
            load_after: tuple) -> tuple[str, dict[str, Any]]:  # fmt: skip
    lines = [
        f"row_changes: {args.rows:,}-row table, MERGE of {args.batch:,} rows (half updates, half inserts) "
        f"and DELETE of 1 %, OPTIMIZE of 10,000 small files, local[2], ours (Spark {versions['ours']}) vs "
        f"Delta Spark 4.4 (Spark "
        f"{versions['delta']}), median of {args.runs} runs (load average {load_before[0]:.1f} before, "
        f"{load_after[0]:.1f} after)",
        "",
        "| case | ours (s) | Delta Spark (s) | ours/Delta Spark | deltalake (s) | ours/faster peer | "
        "goal <= 1.0x |",
        "| --- | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    medians: dict[str, dict[str, float]] = {}
    for case, by_engine in samples.items():
        med = {engine: statistics.median(v) for engine, v in by_engine.items()}
        fastest = min(med[p] for p in PEERS if p in med)
        ours = [e for e in med if e not in PEERS]
        medians[case] = {**med, "ratio": med["ours"] / med["delta"],
                         **{f"{e}_ratio_to_fastest": med[e] / fastest for e in ours}}  # fmt: skip
        deltalake = f"{med['deltalake']:.2f}" if "deltalake" in med else "-"
        for engine in ours:
            path = "Spark" if engine == "ours" else engine
            label = case if "deltalake" not in med else f"{case} ({path} path)"
            ratio, to_delta = med[engine] / fastest, med[engine] / med["delta"]
            verdict = "met" if ratio <= GOAL else "MISSED"
            lines.append(f"| {label} | {med[engine]:.2f} | {med['delta']:.2f} | {to_delta:.2f}x | "
                         f"{deltalake} | {ratio:.2f}x | {verdict} |")  # fmt: skip
    return "\n".join(lines), {"rows": args.rows, "batch": args.batch, "conf": CONF, "versions": versions,
                              "samples": samples, "median": medians, "metrics": metrics,
                              "load_before": load_before, "load_after": load_after}  # fmt: skip
