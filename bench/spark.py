"""spark: Delta writes through Spark against Spark's own Parquet writes; Spark checkpoints against the core's.

Both run in one worker process (``python -m bench.spark worker CONFIG_JSON``) with one ``local[2]`` session,
started once (Spark takes seconds to start); one unrecorded warm-up round, then ``--runs`` rounds, the
order of the two swapped every round.

- write: the same 5,000,000 rows (``spark.range``: ``id``, ``value``, ``name``, and ``region`` with 20
  values), partitioned by ``region``, to a new folder on local disk each run, through
  ``airflow_provider_delta.spark.write(df, uri, partition_by=["region"])`` (Spark's own Parquet writer
  writes the files, the driver reads their footers, moves them into the table and commits; with
  ``--mapinarrow``, executors write the files with pyarrow instead, as for tables Spark's writer cannot
  follow) and through ``df.write.partitionBy("region").parquet(path)``. The figure is our overhead on top
  of Spark's own write. Each result is checked: the Parquet footers (and, for
  Delta, the table's stats) must count every row, in 20 partitions.
- checkpoint: a checkpoint of the ``bench.checkpoint`` log (1,000,000 adds, 1,000 live tombstones) by
  ``checkpoint_with_spark(spark, uri)`` and by ``DeltaTable(uri).checkpoint()`` in the same process, each
  on a fresh copy; each checked as ``bench.checkpoint`` checks (deltalake reads it alone, tombstones kept).
  No warm-up round here: the writes warmed the session, and a Spark checkpoint takes a minute on 2 cores.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

WRITE_GOAL = 0.10  # at most 10% slower than Spark's own Parquet write, from the benchmark issue
ROWS = 5_000_000
REGIONS = 20
CONF = {  # the one session both sides use
    "spark.driver.memory": "4g",
    "spark.sql.shuffle.partitions": "2",
    "spark.default.parallelism": "2",
}
_ROOT = Path(__file__).resolve().parent.parent


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.set_defaults(runs=3)  # Spark runs are long: 3 by default, not 5
    parser.add_argument("--rows", type=int, default=ROWS, help=f"rows written (default {ROWS:,})")
    parser.add_argument("--skip-checkpoint", action="store_true", help="only the write comparison")
    fallback = "write through mapInArrow, the fallback for tables Spark's Parquet writer cannot follow"
    parser.add_argument("--mapinarrow", action="store_true", help=fallback)


# -- worker side ------------------------------------------------------------------------------------------
def frame(spark: Any, rows: int) -> Any:
    """The rows both writers write, the same every time: no randomness, no clock."""
    from pyspark.sql import functions as F

    ids = spark.range(0, rows, 1, numPartitions=2)
    return ids.select(
        "id",
        ((F.col("id") * 7919) % 1_000_003 / 1000.0).alias("value"),
        F.concat(F.lit("name_"), (F.col("id") % 100_000).cast("string")).alias("name"),
        F.concat(F.lit("r"), F.lpad((F.col("id") % REGIONS).cast("string"), 2, "0")).alias("region"),
    )


def _parquet_rows(files: list[Path]) -> int:
    import pyarrow.parquet as pq

    return sum(pq.ParquetFile(f).metadata.num_rows for f in files)


def check_parquet(path: Path, rows: int) -> dict[str, int]:
    files = sorted(path.rglob("*.parquet"))
    facts = {
        "rows": _parquet_rows(files),
        "partitions": len({f.parent.name for f in files}),
        "files": len(files),
        "bytes": sum(f.stat().st_size for f in files),
    }
    if (facts["rows"], facts["partitions"]) != (rows, REGIONS):
        raise RuntimeError(
            f"Spark's Parquet write to {path} holds {facts}, expected {rows} rows in {REGIONS}"
        )
    return facts


def check_delta(path: Path, rows: int) -> dict[str, int]:
    import pyarrow.compute as pc

    from airflow_provider_delta.log import DeltaTable

    snap = DeltaTable(str(path)).snapshot()
    files = snap.files
    stats_rows = sum(json.loads(s)["numRecords"] for s in files.column("stats").to_pylist())
    facts = {
        "rows": _parquet_rows([path / p for p in snap.file_paths()]),
        "stats_rows": stats_rows,
        "partitions": len(pc.unique(snap.partition_values().column("region"))),
        "files": files.num_rows,
        "bytes": int(pc.sum(files.column("size")).as_py()),
        "version": snap.version,
    }
    if (facts["rows"], stats_rows, facts["partitions"], snap.version) != (rows, rows, REGIONS, 0):
        raise RuntimeError(f"the Delta write to {path} holds {facts}, expected {rows} rows in {REGIONS}")
    return facts


def _timed(work: Callable[[], Any]) -> float:
    start = time.perf_counter()
    work()
    return time.perf_counter() - start


def _rounds(
    runs: int, pair: dict[str, Callable[[int], float]], warm_up: bool = True
) -> dict[str, list[float]]:
    """A warm-up round, then ``runs`` rounds; who goes first swaps each round. Seconds per recorded run."""
    names = list(pair)
    times: dict[str, list[float]] = {name: [] for name in names}
    for r in range(-1 if warm_up else 0, runs):
        for name in names if r % 2 == 0 else names[::-1]:
            seconds = pair[name](r)
            print(f"[spark bench] round {r} {name}: {seconds:.2f} s", file=sys.stderr, flush=True)
            if r >= 0:
                times[name].append(seconds)
    return times


def _time_commits() -> list[float]:
    """Time the driver's commit inside ``spark.write`` (the rest is the Spark job writing the files): a
    list that gets the seconds of each commit."""
    import importlib

    write_module = importlib.import_module("airflow_provider_delta.spark.write")  # the module, not write()
    commit, seconds = write_module._commit, []

    def timed_commit(*args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        try:
            return commit(*args, **kwargs)
        finally:
            seconds.append(time.perf_counter() - start)

    write_module._commit = timed_commit
    return seconds


def worker(config: dict[str, Any]) -> dict[str, Any]:
    from airflow_provider_delta.log import DeltaTable
    from airflow_provider_delta.spark import checkpoint_with_spark, native_files, spark_session, write

    from .checkpoint import copy_log, verify

    logging.getLogger("py4j").setLevel(logging.WARNING)
    native_files.NATIVE_WRITES = not config.get("mapinarrow", False)
    base, rows = Path(config["base"]), config["rows"]
    started = time.perf_counter()
    spark = spark_session("local[2]", CONF, app_name="airflow-provider-delta-bench")
    spark.sparkContext.setLogLevel("ERROR")
    startup = time.perf_counter() - started
    df = frame(spark, rows)
    path = "mapInArrow" if config.get("mapinarrow") else "Spark's Parquet writer"
    out: dict[str, Any] = {"session_start_s": startup, "facts": {}, "path": path}

    commit_s = _time_commits()

    def delta(r: int) -> float:
        path = base / f"delta-{r + 1}"
        seconds = _timed(lambda: write(df, path.as_uri(), partition_by=["region"]))
        out["facts"]["delta"] = {**check_delta(path, rows), "commit_s": commit_s.pop()}
        if r >= 0:
            out.setdefault("commit_s", []).append(out["facts"]["delta"]["commit_s"])
        shutil.rmtree(path)
        return seconds

    def parquet(r: int) -> float:
        path = base / f"parquet-{r + 1}"
        seconds = _timed(lambda: df.write.partitionBy("region").parquet(str(path)))
        out["facts"]["parquet"] = check_parquet(path, rows)
        shutil.rmtree(path)
        return seconds

    out["write"] = _rounds(config["runs"], {"delta": delta, "parquet": parquet})
    if config.get("template"):
        template, expect = Path(config["template"]), config["expect"]

        def spark_checkpoint(r: int) -> float:
            copy = copy_log(template, base, "spark")
            seconds = _timed(lambda: checkpoint_with_spark(spark, copy.as_uri()))
            out["facts"]["spark_checkpoint"] = verify("ours", copy, expect)
            shutil.rmtree(copy)
            return seconds

        def core_checkpoint(r: int) -> float:
            copy = copy_log(template, base, "core")
            seconds = _timed(lambda: DeltaTable(str(copy)).checkpoint())
            out["facts"]["core_checkpoint"] = verify("ours", copy, expect)
            shutil.rmtree(copy)
            return seconds

        # No warm-up round: the writes warmed the session, and one Spark checkpoint takes a minute on 2 cores.
        pair = {"spark": spark_checkpoint, "core": core_checkpoint}
        out["checkpoint"] = _rounds(config["runs"], pair, warm_up=False)
    spark.stop()
    return out


# -- parent side ------------------------------------------------------------------------------------------
def mib(facts: dict[str, int]) -> str:
    return f"{facts['bytes'] / 2**20:.0f}"


def _report(out: dict[str, Any], runs: int, rows: int) -> tuple[str, dict[str, Any]]:
    med = {name: statistics.median(v) for name, v in out["write"].items()}
    overhead = med["delta"] / med["parquet"] - 1
    facts = out["facts"]
    verdict = "met" if overhead <= WRITE_GOAL else "MISSED"
    lines = [
        f"spark: {rows:,} rows partitioned by region ({REGIONS} values), local[2] (median of {runs} runs); "
        f"Delta files written by {out['path']}",
        "",
        "| | Delta: spark.write() | Spark: df.write.parquet() | Delta/Parquet | goal |",
        "| --- | ---: | ---: | ---: | --- |",
        f"| wall (s) | {med['delta']:.2f} | {med['parquet']:.2f} | {med['delta'] / med['parquet']:.2f}x "
        f"(overhead {overhead:+.0%}) | <= +{WRITE_GOAL:.0%}: {verdict} |",
        f"| of which the driver's commit (s) | {statistics.median(out['commit_s']):.3f} | | | |",
        f"| files | {facts['delta']['files']} | {facts['parquet']['files']} | | |",
        f"| MiB written | {mib(facts['delta'])} | {mib(facts['parquet'])} | | |",
        "",
        f"wall range: Delta {min(out['write']['delta']):.2f}-{max(out['write']['delta']):.2f} s, Parquet "
        f"{min(out['write']['parquet']):.2f}-{max(out['write']['parquet']):.2f} s; session start "
        f"{out['session_start_s']:.1f} s (not counted)",
    ]
    payload: dict[str, Any] = {
        "rows": rows,
        "path": out["path"],
        "session_start_s": out["session_start_s"],
        "write": {
            "samples": out["write"],
            "median": med,
            "overhead": overhead,
            "goal": WRITE_GOAL,
            "commit_s": out["commit_s"],
        },
        "facts": facts,
    }
    if "checkpoint" in out:
        cp = {name: statistics.median(v) for name, v in out["checkpoint"].items()}
        lines += [
            "",
            f"spark: checkpoint of 1,000,000 adds, Spark and the core in one process (median of {runs} runs)",
            "",
            "| | checkpoint_with_spark | DeltaTable.checkpoint() | Spark/core |",
            "| --- | ---: | ---: | ---: |",
            f"| wall (s) | {cp['spark']:.2f} | {cp['core']:.2f} | {cp['spark'] / cp['core']:.2f}x |",
            f"| parts | {facts['spark_checkpoint']['parts']} | {facts['core_checkpoint']['parts']} | |",
        ]
        payload["checkpoint"] = {"samples": out["checkpoint"], "median": cp}
    return "\n".join(lines), payload


def run(args: argparse.Namespace) -> dict[str, Any]:
    from . import checkpoint, measure

    env = measure.child_env(args.data_dir)
    base = Path(args.data_dir) / f"spark-{uuid.uuid4().hex[:8]}"
    base.mkdir(parents=True)
    config: dict[str, Any] = {"base": str(base), "rows": args.rows, "runs": args.runs,
                              "mapinarrow": args.mapinarrow}  # fmt: skip
    try:
        if not args.skip_checkpoint:
            source = checkpoint.helper(["table", str(args.data_dir), checkpoint.TABLE], env)
            template = base / "template"
            now_ms = str(int(time.time() * 1000))  # tombstones within the retention, as in bench.checkpoint
            argv = ["template", source["path"], str(source["version"]), str(source["num_files"])]
            config["expect"] = checkpoint.helper([*argv, str(template), now_ms], env)
            config["template"] = str(template)
        proc = subprocess.run(
            [sys.executable, "-m", "bench.spark", "worker", json.dumps(config)],
            stdout=subprocess.PIPE,
            text=True,
            env=env,
            cwd=_ROOT,
        )
        if proc.returncode != 0:
            raise RuntimeError(f"the Spark worker failed (exit {proc.returncode}); its log is above")
        out = json.loads(proc.stdout.strip().splitlines()[-1])
    finally:
        shutil.rmtree(base, ignore_errors=True)
    text, payload = _report(out, args.runs, args.rows)
    print(text, end="\n\n", flush=True)
    return payload


def main(argv: list[str]) -> int:
    if argv[:1] != ["worker"]:
        raise SystemExit("usage: python -m bench.spark worker CONFIG_JSON (see python -m bench spark)")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    print(json.dumps(worker(json.loads(argv[1]))), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
