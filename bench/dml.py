"""dml: DELETE, UPDATE and MERGE in the task (issue 36), ours on Arrow against deltalake.

The table (``bench.tables.build_dml_table``): 10,000,000 rows in 200 Parquet files of 50,000 (``id`` BIGINT,
consecutive per file so that statistics prune; ``value`` DOUBLE in [0, 1); ``name`` STRING; ``region``
STRING of four values), unpartitioned, one commit; generated once and cached under the data directory.
Each run works on a fresh copy, made in the child before the clock starts (data files hard-linked, the log
copied: both engines only add files). Timed, in a fresh interpreter with the imports done
(``bench.child``), from opening the table to the commit:

- ``merge``: 100,000 source rows (an Arrow table built before the clock), half updating ids in 10 of the
  200 files spread over the table (5,000 each: 5 % of the files touched), half new ids beyond the largest;
  ours ``DeltaTable(p).merge(src, "target.id = source.id").when_matched_update_all()
  .when_not_matched_insert_all().execute()``, deltalake the same builder with ``source_alias="source",
  target_alias="target"``;
- ``delete-mod`` / ``delete-range``: 1 % of the rows, ``id % 100 = 7`` (in every file) or an id range of
  100,000 starting mid-file (3 files: half of one, one whole, half of another; a 1 % range can touch only
  2 files by covering both whole, and a DELETE would then drop files without copying a row); ours
  ``DeltaTable(p).delete(pred)``, deltalake ``dt.delete(pred)``;
- ``update-mod`` / ``update-range``: ``value = value + 1`` on the same rows; ours ``DeltaTable(p).update(
  {"value": "value + 1"}, pred)``, deltalake ``dt.update(updates={"value": "value + 1"}, predicate=pred)``;
- ``delete-dv-mod`` / ``delete-dv-range``: ours alone (deltalake cannot write tables with deletion vectors)
  on the same data files under a log with ``delta.enableDeletionVectors=true``: no data file may be written
  (``numAddedFiles == 0``) and vectors must be added;
- ``small``: ours alone doing the same ``merge``, ``delete-range`` and ``update-range`` (the same rows and
  the same number of touched files) on a table of 40 such files: memory should follow the touched files,
  not the table (``--small-files 0`` skips it);
- with ``--layout partitioned``, ``merge``, ``delete-*`` and ``update-*`` on the same rows partitioned by
  ``region`` (file ``i`` in region ``i % 4``); ``delete-dv`` and ``small`` run with the plain layout only.

The answers are checked after the figures are taken, in the child: the commit's metrics count the rows the
case changes, and the table it leaves, read with our reader, has the expected rows (deleted rows gone;
updated rows, and only they, at ``value >= 1``; the 100,000 source rows present, named ``merged``).
Goals (issue 36): MERGE at most 0.5x deltalake's wall and 1.0x its peak memory; DELETE and UPDATE at most
0.5x its wall; memory following the touched files; a DELETE on a table with deletion vectors writes vectors
only. ``--scale`` multiplies the rows per file and the MERGE batch (the number of files stays).
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
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

FILES, ROWS_PER_FILE, BATCH, SMALL_FILES = 200, 50_000, 100_000, 40
MERGED = "merged"  # the name every source row of the MERGE carries, to find them afterwards
GOALS = {"merge": {"wall_s": 0.5, "peak_delta_kib": 1.0}, "delete": {"wall_s": 0.5},
         "update": {"wall_s": 0.5}}  # fmt: skip
# Each engine's names for the commit metrics a run reports: ours Delta Spark's, deltalake its own.
METRICS = {
    "ours": {
        "delete": {"changed": "numDeletedRows", "added_files": "numAddedFiles",
                   "removed_files": "numRemovedFiles", "vectors": "numDeletionVectorsAdded"},
        "update": {"changed": "numUpdatedRows", "added_files": "numAddedFiles",
                   "removed_files": "numRemovedFiles"},
        "merge": {"updated": "numTargetRowsUpdated", "inserted": "numTargetRowsInserted",
                  "added_files": "numTargetFilesAdded", "removed_files": "numTargetFilesRemoved"},
    },
    "deltalake": {
        "delete": {"changed": "num_deleted_rows", "added_files": "num_added_files",
                   "removed_files": "num_removed_files"},
        "update": {"changed": "num_updated_rows", "added_files": "num_added_files",
                   "removed_files": "num_removed_files"},
        "merge": {"updated": "num_target_rows_updated", "inserted": "num_target_rows_inserted",
                  "added_files": "num_target_files_added", "removed_files": "num_target_files_removed"},
    },
}  # fmt: skip
# What the table left by each operation is read back for (``_read_back``).
READ_BACK = {"merge": ("rows_after", "merged_after"), "delete": ("rows_after", "left_after"),
             "update": ("rows_after", "raised_after", "raised_elsewhere")}  # fmt: skip
# "Memory grows with the touched files, not the table", read as task's rule for "the same": the small
# table's peak within 25 % of the big one's, or 20 MiB, whichever is more (the noise of a run).
FLAT = {"ratio": 1.25, "peak_delta_kib": 20 * 1024}
CASE_GROUPS = ("merge", "delete", "update", "delete-dv", "small")
LAYOUTS = ("plain", "partitioned")  # delete-dv and small: the plain layout's rows
_GENERATOR_VERSION = 1
_ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Work:
    """One case as the child runs it: the operation, its table, and the sizes its answers follow from."""

    op: str  # merge, delete, update
    table: str
    base: str
    files: int
    per_file: int
    batch: int
    predicate: str | None  # "mod", "range" or None (MERGE)
    start: int  # the range predicate's ids: [start, stop)
    stop: int

    @property
    def rows(self) -> int:
        return self.files * self.per_file

    def sql(self) -> str | None:
        if self.predicate == "mod":
            return "id % 100 = 7"
        return None if self.predicate is None else f"id >= {self.start} AND id < {self.stop}"

    def hits(self, ids: Any) -> Any:
        """Which of ``ids`` (a numpy array) the predicate holds for."""
        return ids % 100 == 7 if self.predicate == "mod" else (ids >= self.start) & (ids < self.stop)

    def matching(self) -> int:
        return len(range(7, self.rows, 100)) if self.predicate == "mod" else self.stop - self.start

    def updated_files(self) -> list[int]:
        """The 10 files a MERGE's updates fall in, spread evenly over the table."""
        return [(2 * k + 1) * self.files // 20 for k in range(10)]

    def expected(self, dv: bool) -> dict[str, Any]:
        """The facts every run must report (see ``_facts`` and ``_read_back``)."""
        if self.op == "merge":
            updates = self.batch // 2
            return {"updated": updates, "inserted": self.batch - updates,
                    "rows_after": self.rows + self.batch - updates, "merged_after": self.batch}  # fmt: skip
        n = self.matching()
        if self.op == "update":
            return {"changed": n, "rows_after": self.rows, "raised_after": n, "raised_elsewhere": 0}
        facts = {"changed": n, "rows_after": self.rows - n, "left_after": 0}
        return {**facts, "added_files": 0, "vectors_added": True} if dv else facts


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.set_defaults(runs=3)  # a 10-million-row DML takes seconds: 3 by default, not 5
    parser.add_argument("--case", choices=CASE_GROUPS, action="append", help="only these cases (default all)")
    parser.add_argument("--files", type=int, default=FILES, help=f"data files of the table (default {FILES})")
    parser.add_argument("--small-files", type=int, default=SMALL_FILES,
                        help=f"files of the small table (default {SMALL_FILES}; 0 skips it)")  # fmt: skip
    parser.add_argument("--layout", choices=LAYOUTS, action="append",
                        help="layout for merge, delete and update (default plain; repeatable)")  # fmt: skip


# -- child side -------------------------------------------------------------------------------------------
def merge_source(w: Work) -> Any:
    """The MERGE's source: ``batch // 2`` updates (every ``per_file / (updates per file)``-th id of the 10
    updated files, region as the partitioned layout has it there) and the rest new ids past the largest."""
    import numpy as np
    import pyarrow as pa

    from .tables import DML_REGIONS, DML_SCHEMA

    rng = np.random.default_rng(36)
    updates, per = w.batch // 2, (w.batch // 2) // 10
    step = w.per_file // per
    ids = [i * w.per_file + np.arange(0, per * step, step) for i in w.updated_files()]
    regions = [np.full(per, i % len(DML_REGIONS)) for i in w.updated_files()]
    inserts = w.batch - updates
    ids.append(np.arange(w.rows, w.rows + inserts))
    regions.append(rng.integers(0, len(DML_REGIONS), inserts))
    return pa.table({
        "id": pa.array(np.concatenate(ids), pa.int64()),
        "value": pa.array(2 + rng.random(w.batch)),
        "name": pa.array([MERGED] * w.batch),
        "region": pa.array(DML_REGIONS).take(pa.array(np.concatenate(regions))),
    }, schema=DML_SCHEMA)  # fmt: skip


def _copy(table: Path, base: Path, name: str) -> Path:
    copy = base / f"{name}-{uuid.uuid4().hex[:10]}"
    subprocess.run(["cp", "-al", str(table), str(copy)], check=True)
    shutil.rmtree(copy / "_delta_log")
    subprocess.run(["cp", "-a", str(table / "_delta_log"), str(copy / "_delta_log")], check=True)
    return copy


def prepare(impl: str, config: str) -> Callable[[], dict[str, Any]]:
    """The copy, the source and the imports outside the timed region; the operation is the work."""
    w = Work(**json.loads(config))
    copy = str(_copy(Path(w.table), Path(w.base), f"{impl}-{w.op}"))
    source = merge_source(w) if w.op == "merge" else None
    import pyarrow.compute  # noqa: F401 - loaded by both engines' callers anyway
    import pyarrow.parquet  # noqa: F401

    if impl == "ours":
        from airflow_provider_delta.log import DeltaTable

        def ours() -> dict[str, Any]:
            t = DeltaTable(copy)
            if w.op == "delete":
                result = t.delete(w.sql())
            elif w.op == "update":
                result = t.update({"value": "value + 1"}, w.sql())
            else:
                result = (t.merge(source, "target.id = source.id").when_matched_update_all()
                          .when_not_matched_insert_all().execute())  # fmt: skip
            return _facts(w, copy, impl, result.metrics)

        return ours
    if impl == "deltalake":
        import deltalake

        def theirs() -> dict[str, Any]:
            dt = deltalake.DeltaTable(copy)
            if w.op == "delete":
                metrics = dt.delete(w.sql())
            elif w.op == "update":
                metrics = dt.update(updates={"value": "value + 1"}, predicate=w.sql())
            else:
                builder = dt.merge(
                    source, "target.id = source.id", source_alias="source", target_alias="target"
                )
                metrics = builder.when_matched_update_all().when_not_matched_insert_all().execute()
            return _facts(w, copy, impl, metrics)

        return theirs
    raise ValueError(f"unknown implementation {impl!r}")


def _facts(w: Work, copy: str, impl: str, metrics: dict[str, Any]) -> dict[str, Any]:
    """The commit's counts, a flag that vectors were added, and the read-back facts as functions, which
    ``bench.child`` calls once the figures are taken."""
    facts: dict[str, Any] = {key: metrics[name] for key, name in METRICS[impl][w.op].items()}
    if "vectors" in facts:
        facts["vectors_added"] = facts["vectors"] > 0
    done: dict[str, Any] = {}

    def read_back(key: str) -> Any:
        if not done:
            done.update(_read_back(w, copy))
        return done[key]

    return {**facts, **{k: (lambda k=k: read_back(k)) for k in READ_BACK[w.op]}}


def _read_back(w: Work, copy: str) -> dict[str, int]:
    """The table the run left, read with our reader (deletion vectors applied); the copy is then removed."""
    import numpy as np
    import pyarrow.compute as pc

    from airflow_provider_delta.log import DeltaTable

    rows = DeltaTable(copy).to_pyarrow_table(columns=["id", "value", "name"])
    shutil.rmtree(copy, ignore_errors=True)
    hit = w.hits(rows.column("id").to_numpy()) if w.predicate else None
    raised = rows.column("value").to_numpy() >= 1
    return {
        "rows_after": rows.num_rows,
        "merged_after": int(pc.sum(pc.equal(rows.column("name"), MERGED)).as_py() or 0),
        "left_after": int(np.count_nonzero(hit)) if hit is not None else 0,
        "raised_after": int(np.count_nonzero(raised & hit)) if hit is not None else 0,
        "raised_elsewhere": int(np.count_nonzero(raised & ~hit)) if hit is not None else 0,
    }


# -- tables (a helper process, so that the parent stays small) --------------------------------------------
def ensure_tables(
    data_dir: Path, files: int, per_file: int, small_files: int, partitioned: bool
) -> dict[str, str]:
    """The tables the cases need (paths by variant), each generated and checked first if missing."""
    from . import tables

    def verify_deltalake(path: Path, version: int, num_files: int) -> None:
        tables.verify_with_deltalake(path, version, num_files)
        _verify_ours(path, version, num_files * per_file)

    def built(name: str, build: Callable[[Path], tuple[int, int]], verify: Callable[..., None]) -> str:
        path = data_dir / f"dml-{name}-v{_GENERATOR_VERSION}"
        return str(tables.ensure_built(name, path, build, verify).path)

    size = f"{files}x{per_file}"
    out = {"plain": built(size, lambda r: tables.build_dml_table(r, files, per_file), verify_deltalake)}
    out["dv"] = built(f"{size}-dv", lambda r: tables.build_dml_dv_table(r, Path(out["plain"])),
                      lambda p, v, n: _verify_ours(p, v, n * per_file, dv=True))  # fmt: skip
    if small_files:
        small = f"{small_files}x{per_file}"
        out["small"] = built(
            small, lambda r: tables.build_dml_table(r, small_files, per_file), verify_deltalake
        )
    if partitioned:
        out["partitioned"] = built(f"{size}-partitioned",
                                   lambda r: tables.build_dml_table(r, files, per_file, partitioned=True),
                                   verify_deltalake)  # fmt: skip
    return out


def _verify_ours(path: Path, version: int, rows: int, dv: bool = False) -> None:
    from airflow_provider_delta.log import DeltaTable

    t = DeltaTable(str(path))
    s = t.snapshot()
    rows_read = t.to_pyarrow_table(columns=["id"]).num_rows
    got = (s.version, rows_read, s.table_configuration.deletion_vectors_enabled)
    if got != (version, rows, dv):
        raise RuntimeError(f"ours reads {path} as (version, rows, deletion vectors) = {got}, expected "
                           f"{(version, rows, dv)}")  # fmt: skip


def main(argv: list[str]) -> int:
    """Helper process: ``tables DATA_DIR FILES PER_FILE SMALL_FILES PARTITIONED``."""
    command, *rest = argv
    if command != "tables":
        raise SystemExit(f"unknown command {command!r}")
    data_dir, files, per_file, small, partitioned = Path(rest[0]), *map(int, rest[1:])
    print(json.dumps(ensure_tables(data_dir, files, per_file, small, bool(partitioned))))
    return 0


# -- parent side ------------------------------------------------------------------------------------------
def _scaled(n: int) -> int:
    """``bench.tables.scaled``, without loading pyarrow into this process."""
    return max(1, round(n * float(os.environ.get("BENCH_SCALE", "1"))))


def _plan(args: argparse.Namespace, tables: dict[str, str], base: Path) -> list[tuple[str, str, Work, bool]]:
    """(case name, the table's variant, the work, whether deltalake runs it) for every case asked for."""
    per_file, files = _scaled(ROWS_PER_FILE), args.files
    start = (files // 10) * per_file + per_file // 2
    stop = start + files * per_file // 100  # 1 % of the big table's rows, on the small table too

    def work(op: str, variant: str, predicate: str | None) -> Work:
        n = args.small_files if variant == "small" else files
        return Work(op, tables[variant], str(base), n, per_file, _scaled(BATCH), predicate, start, stop)

    groups, layouts = args.case or list(CASE_GROUPS), args.layout or ["plain"]
    plan = []
    for variant in layouts:
        suffix = "" if variant == "plain" else " (partitioned)"
        if "merge" in groups:
            plan.append((f"merge{suffix}", variant, work("merge", variant, None), True))
        for op in ("delete", "update"):
            if op in groups:
                plan += [(f"{op}-{p}{suffix}", variant, work(op, variant, p), True) for p in ("mod", "range")]
    if "plain" not in layouts:
        return plan
    if "delete-dv" in groups:
        plan += [(f"delete-dv-{p}", "dv", work("delete", "dv", p), False) for p in ("mod", "range")]
    if "small" in groups and args.small_files:
        plan += [("merge (small)", "small", work("merge", "small", None), False)]
        plan += [(f"{op}-range (small)", "small", work(op, "small", "range"), False)
                 for op in ("delete", "update")]  # fmt: skip
    return plan


def _compare(w: Work, dv: bool, runs: int, data_dir: Path, with_deltalake: bool) -> dict[str, Any]:
    """``measure.compare`` from a small helper process (``bench.checkpoint.helper``)."""
    from . import checkpoint, measure

    config = {"bench": "dml", "args": [json.dumps(asdict(w))], "runs": runs, "expect": w.expected(dv),
              "data_dir": str(data_dir), "impls": measure.IMPLS if with_deltalake else ("ours",)}  # fmt: skip
    return checkpoint.helper(["compare", json.dumps(config)], measure.child_env(data_dir))


def run(args: argparse.Namespace) -> dict[str, Any]:
    from . import measure

    env = measure.child_env(args.data_dir)
    partitioned = int("partitioned" in (args.layout or ()))
    argv = [sys.executable, "-m", "bench.dml", "tables", str(args.data_dir), str(args.files),
            str(_scaled(ROWS_PER_FILE)), str(args.small_files), str(partitioned)]  # fmt: skip
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=_ROOT)
    if proc.returncode != 0:
        raise RuntimeError(f"bench.dml tables failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
    tables = json.loads(proc.stdout.strip().splitlines()[-1])
    base = Path(args.data_dir) / f"dml-{uuid.uuid4().hex[:8]}"
    base.mkdir(parents=True)
    load_before = os.getloadavg()
    results: dict[str, Any] = {}
    try:
        for name, variant, w, with_deltalake in _plan(args, tables, base):
            results[name] = _compare(w, variant == "dv", args.runs, args.data_dir, with_deltalake)
            results[name]["work"] = asdict(w)
            ours = results[name]["median"]["ours"]["wall_s"]
            print(f"[dml] {name}: ours {ours:.2f} s", file=sys.stderr, flush=True)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    load_after = os.getloadavg()
    text = report(results, args, load_before, load_after)
    print(text, end="\n\n", flush=True)
    return {"goals": GOALS, "flat": FLAT, "tables": tables, "load_before": load_before,
            "load_after": load_after, "cases": results}  # fmt: skip


def _mib(kib: float) -> str:
    return f"{kib / 1024:.0f}"


def _touched(result: dict[str, Any], impl: str) -> str:
    """Files removed (rewritten, or dropped whole) by the last run. Not deltalake's MERGE's
    ``num_target_files_scanned``: it reads 0 here, whatever the MERGE read."""
    return str(result["samples"][impl][-1].get("removed_files"))


def _goal(name: str, result: dict[str, Any]) -> str:
    op = name.split("-")[0].split(" ")[0]
    if name.startswith("delete-dv"):
        s = result["samples"]["ours"][-1]
        ok = all(x["added_files"] == 0 and x["vectors"] for x in result["samples"]["ours"])
        verdict = "met" if ok else "MISSED"
        return f"no data file written ({s['added_files']} added, {s['vectors']} vectors): {verdict}"
    if "(small)" in name or "deltalake" not in result["median"]:
        return ""
    ratios = result["ratio_ours_over_deltalake"]
    return "; ".join(measure_verdict(ratios[key], goal, key) for key, goal in GOALS[op].items())


def measure_verdict(ratio: float | None, goal: float, key: str) -> str:
    what = "wall" if key == "wall_s" else "peak"
    if ratio is None:
        return f"{what} <= {goal:.1f}x: n/a"
    return f"{what} <= {goal:.1f}x: {'met' if ratio <= goal else 'MISSED'}"


def _flat_lines(results: dict[str, Any]) -> list[str]:
    """Ours' peak on the small table against the big one, for the cases that touch the same files."""
    lines = []
    for small_name, result in results.items():
        if "(small)" not in small_name or small_name.replace(" (small)", "") not in results:
            continue
        big = results[small_name.replace(" (small)", "")]
        a = result["median"]["ours"]["peak_delta_kib"]
        b = big["median"]["ours"]["peak_delta_kib"]
        ok = b <= max(a * FLAT["ratio"], a + FLAT["peak_delta_kib"])
        small, files = small_name.replace(" (small)", ""), (result["work"]["files"], big["work"]["files"])
        lines.append(f"- {small}: {files[0]} files {_mib(a)} MiB, {files[1]} files {_mib(b)} MiB (wall "
                     f"{result['median']['ours']['wall_s']:.2f} -> {big['median']['ours']['wall_s']:.2f} s): "
                     f"{'met' if ok else 'MISSED'}")  # fmt: skip
    if lines:
        lines.insert(0, "memory follows the touched files, not the table (ours' peak over imports, small "
                        "table -> big table; goal: the same, within 25 % or 20 MiB):")  # fmt: skip
    return lines


def report(results: dict[str, Any], args: argparse.Namespace, load_before: tuple, load_after: tuple) -> str:
    """The Markdown table of medians, ratios and verdicts, then the memory check and the wall ranges."""
    per_file = _scaled(ROWS_PER_FILE)
    lines = [
        f"dml: {args.files * per_file:,} rows in {args.files} files, MERGE of {_scaled(BATCH):,} rows, "
        f"DELETE and UPDATE of 1 % (median of {args.runs} runs; peak: memory over imports; load average "
        f"{load_before[0]:.1f} before, {load_after[0]:.1f} after)",
        "",
        "| case | files removed (ours / deltalake) | ours wall (s) | ours peak (MiB) | deltalake wall "
        "(s) | deltalake peak (MiB) | wall ratio | peak ratio | goal |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    for name, r in results.items():
        med, ratios = r["median"], r["ratio_ours_over_deltalake"]
        ours = med["ours"]
        theirs = med.get("deltalake")
        touched = _touched(r, "ours") + (f" / {_touched(r, 'deltalake')}" if theirs else "")
        cells = [f"{theirs['wall_s']:.2f}", _mib(theirs["peak_delta_kib"]), f"{ratios['wall_s']:.2f}x",
                 f"{ratios['peak_delta_kib']:.2f}x"] if theirs else ["-", "-", "-", "-"]  # fmt: skip
        lines.append(f"| {name} | {touched} | {ours['wall_s']:.2f} | {_mib(ours['peak_delta_kib'])} | "
                     f"{' | '.join(cells)} | {_goal(name, r)} |")  # fmt: skip
    rewrite = {n.replace("delete-dv", "delete"): n for n in results if n.startswith("delete-dv")}
    notes = [f"- {dv}: ours with vectors {results[dv]['median']['ours']['wall_s']:.2f} s against deltalake's "
             f"rewrite {results[plain]['median']['deltalake']['wall_s']:.2f} s"
             for plain, dv in rewrite.items() if plain in results]  # fmt: skip
    for impl in ("ours", "deltalake"):
        loaded = [name for name, r in results.items()
                  if any(x["pandas_loaded_by_work"] for x in r["samples"].get(impl, []))]  # fmt: skip
        if loaded:
            notes.append(f"- the work of {impl} imported pandas (about 0.15 s, 45 MiB): {', '.join(loaded)}")
    ranges = "; ".join(f"{n}: " + ", ".join(f"{i} {lo:.2f}-{hi:.2f}" for i, (lo, hi) in
                                             ((i, r["range"][i]["wall_s"]) for i in r["range"]))
                       for n, r in results.items())  # fmt: skip
    return "\n".join([*lines, "", *notes, *_flat_lines(results), f"wall ranges (s): {ranges}"])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
