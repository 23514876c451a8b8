"""scan: rows without Spark, the Arrow scan and writer against deltalake and Polars, pyarrow as the floor.

Cases (each run in a fresh interpreter, implementations alternating, see ``bench.child``):

- ``full``: every row of ``rows_10m`` (10,000,000 rows, partitioned by ``region`` into 100 partitions of
  2 files each) as Arrow: ours ``DeltaTable(p).to_pyarrow_table()``, deltalake ``DeltaTable(p)
  .to_pyarrow_table()``, Polars ``pl.scan_delta(p).collect()``;
- ``filtered``: the rows of one region (2 of the 200 files, 1 %): ours with ``filter=[("region", "=",
  "r042")]``, deltalake with ``filters=`` the same, Polars ``.filter(pl.col("region") == "r042")``;
- ``dv``: every row of ``dv_10m`` (the same rows, every data file with a deletion vector dropping one row in
  ten): deltalake refuses such tables (reported as refused), Polars reads them;
- ``write``: 10,000,000 rows from an in-memory Arrow table into a new table partitioned by ``region``: ours
  ``write(p, table, partition_by=...)`` against ``deltalake.write_deltalake``.

``floor`` is pyarrow alone reading the same Parquet files (``pyarrow.dataset``, file list made outside the
timed region, no partition columns, no deletion vectors), or writing the table to one Parquet file per
region with ``pyarrow.dataset.write_dataset``: what any implementation has to pay. Ratios are ours over the
fastest peer that could do the work. The machine's load average is recorded with the figures.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROWS = 10_000_000
REGIONS = 100
CASES = ("full", "filtered", "dv", "write")
PEERS = {
    "full": ("deltalake", "polars"),
    "filtered": ("deltalake", "polars"),
    "dv": ("deltalake", "polars"),
    "write": ("deltalake",),
}
GOALS = {"wall_s": 1.0, "peak_delta_kib": 1.0}
_GENERATOR_VERSION = 1


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--case", choices=CASES, action="append", help="only this case (repeatable)")


# -- tables ------------------------------------------------------------------------------------------------
def make_rows(seed: int = 20261124, rows: int = ROWS):
    """The benchmark rows, sorted by region: id, value, name, ts, region."""
    import numpy as np
    import pyarrow as pa

    rng = np.random.default_rng(seed)
    region_index = np.sort(rng.integers(0, REGIONS, rows))
    names = pa.array([f"name-{i:04d}" for i in range(1000)])
    return pa.table(
        {
            "id": pa.array(np.arange(rows, dtype=np.int64)),
            "value": pa.array(rng.random(rows)),
            "name": names.take(pa.array(rng.integers(0, 1000, rows))),
            "ts": pa.array(1_700_000_000_000_000 + rng.integers(0, 10**12, rows), pa.timestamp("us", "UTC")),
            "region": pa.array([f"r{i:03d}" for i in range(REGIONS)]).take(pa.array(region_index)),
        }
    )


def ensure_tables(data_dir: Path) -> dict[str, Path]:
    """``rows_10m`` (written by deltalake, 2 files per region) and ``dv_10m`` (ours, with deletion vectors),
    generated once into a temporary folder and renamed into place."""
    out = {}
    for name, build in (("rows_10m", _build_rows), ("dv_10m", _build_dv)):
        path = data_dir / f"scan-{name}-v{_GENERATOR_VERSION}"
        if not (path / "_delta_log").is_dir():
            tmp = data_dir / f".tmp-{name}-{os.getpid()}"
            shutil.rmtree(tmp, ignore_errors=True)
            started = time.monotonic()
            build(tmp)
            tmp.rename(path)
            print(f"generated {name} in {time.monotonic() - started:.0f} s", flush=True)
        out[name] = path
    return out


def _halves():
    data = make_rows()
    mid = data.num_rows // 2
    # Each half holds every region, so each write makes one file per region: two files per region.
    return [data.filter(_even(data, k)) for k in (0, 1)] if mid else [data]


def _even(data, k: int):
    import pyarrow.compute as pc

    return pc.equal(pc.bit_wise_and(data["id"], 1), k)


def _build_rows(path: Path) -> None:
    import deltalake

    for half in _halves():
        deltalake.write_deltalake(str(path), half, partition_by=["region"], mode="append")


def _build_dv(path: Path) -> None:
    import json

    import fsspec
    import numpy as np

    from airflow_provider_delta.log import AddFile, DeltaTable, write
    from airflow_provider_delta.log.files.deletion_vectors import write_deletion_vectors

    for half in _halves():
        write(str(path), half, partition_by=["region"], configuration={"delta.enableDeletionVectors": "true"})
    table = DeltaTable(str(path))
    files = [AddFile.from_dict(r) for r in table.snapshot().files.to_pylist()]
    vectors = [np.arange(0, json.loads(f.stats)["numRecords"], 10, dtype=np.uint64) for f in files]
    descriptors = write_deletion_vectors(fsspec.filesystem("file"), table.store.root, vectors)
    with_dvs = [
        AddFile(
            f.path,
            f.size,
            f.partition_values,
            f.modification_time,
            True,
            json.dumps({**json.loads(f.stats), "tightBounds": False}),  # the writer rule for new vectors
            deletion_vector=d.to_json(),
        )
        for f, d in zip(files, descriptors, strict=True)
    ]
    table.transaction().remove_files(files).add_files(with_dvs).commit("DELETE")


# -- the parent: runs, medians, ratios -------------------------------------------------------------------
def run(args: argparse.Namespace) -> dict[str, Any]:
    from . import measure

    tables = ensure_tables(args.data_dir)
    env = measure.child_env(args.data_dir)
    results = {}
    for case in args.case or CASES:
        impls = ("ours", *PEERS[case], "floor")
        table = tables["dv_10m" if case == "dv" else "rows_10m"]
        out = args.data_dir / "scan-write-out"
        samples: dict[str, list[dict[str, Any]]] = {i: [] for i in impls}
        load_before = os.getloadavg()
        for i in range(-1, args.runs):
            order = impls if i % 2 == 0 else impls[::-1]
            for impl in order:
                shutil.rmtree(out, ignore_errors=True)
                try:
                    sample = measure.run_child("scan", impl, [case, str(table), str(out)], env)
                except RuntimeError as exc:
                    sample = {"refused": str(exc).splitlines()[-1][:200]}
                if i >= 0:
                    samples[impl].append(sample)
        shutil.rmtree(out, ignore_errors=True)
        result = _summarise(case, samples, os.getloadavg(), load_before)
        print(format_case(case, result), end="\n\n", flush=True)
        results[case] = result
    return {"cases": results}


def _summarise(case: str, samples: dict[str, list[dict]], load_after: tuple, load_before: tuple) -> dict:
    medians, refused = {}, {}
    for impl, runs in samples.items():
        ok = [s for s in runs if "refused" not in s]
        if not ok:
            refused[impl] = runs[0]["refused"] if runs else "not run"
            continue
        rows = {s.get("rows") for s in ok}
        medians[impl] = {k: statistics.median(s[k] for s in ok) for k in ("wall_s", "peak_delta_kib")}
        medians[impl]["rows"] = rows.pop() if len(rows) == 1 else sorted(rows)
    peers = [p for p in PEERS[case] if p in medians]
    ratios = {}
    if "ours" in medians and peers:
        for key in ("wall_s", "peak_delta_kib"):
            best = min(medians[p][key] for p in peers)
            ratios[key] = medians["ours"][key] / best if best else None
    floor = {}
    if "ours" in medians and "floor" in medians:
        floor = {
            k: medians["ours"][k] / medians["floor"][k]
            for k in ("wall_s", "peak_delta_kib")
            if medians["floor"][k]
        }
    return {
        "median": medians,
        "refused": refused,
        "ratio_ours_over_fastest_peer": ratios,
        "ratio_ours_over_floor": floor,
        "samples": samples,
        "load_average": {"before": load_before, "after": load_after},
    }


def format_case(case: str, result: dict) -> str:
    lines = [
        f"scan {case} (medians; load average {result['load_average']['before'][0]:.1f} -> "
        f"{result['load_average']['after'][0]:.1f})",
        "",
        "| implementation | wall (s) | peak memory over imports (MiB) | rows |",
        "| --- | ---: | ---: | ---: |",
    ]
    for impl, m in result["median"].items():
        lines.append(f"| {impl} | {m['wall_s']:.3f} | {m['peak_delta_kib'] / 1024:.0f} | {m['rows']} |")
    for impl, why in result["refused"].items():
        lines.append(f"| {impl} | refused | | {why} |")
    r, f = result["ratio_ours_over_fastest_peer"], result["ratio_ours_over_floor"]
    if r:
        lines.append(
            f"\nours / fastest peer: wall {r['wall_s']:.2f}x, peak memory {r['peak_delta_kib']:.2f}x "
            f"(goal <= {GOALS['wall_s']:.1f}x both)"
        )
    if f:
        lines.append(
            f"ours / floor (pyarrow alone): wall {f.get('wall_s', 0):.2f}x, "
            f"peak memory {f.get('peak_delta_kib', 0):.2f}x"
        )
    return "\n".join(lines)


# -- the child: one implementation, one case --------------------------------------------------------------
def prepare(impl: str, case: str, path: str, out: str) -> Callable[[], dict[str, Any]]:
    """Imports and inputs outside the timed region; the returned work is what is timed."""
    if case == "write":
        data = make_rows()
        if impl == "ours":
            import airflow_provider_delta.log.writes.write_rows  # noqa: F401 - imported outside the timed region
            from airflow_provider_delta.log import write

            return lambda: _facts(write(out, data, partition_by=["region"]) and data.num_rows)
        if impl == "deltalake":
            import deltalake

            return lambda: _facts(
                deltalake.write_deltalake(out, data, partition_by=["region"]) or data.num_rows
            )
        import pyarrow.dataset as ds

        return lambda: _facts(
            ds.write_dataset(
                data,
                out,
                format="parquet",
                partitioning=["region"],
                partitioning_flavor="hive",
                max_rows_per_group=128 * 1024,
            )
            or data.num_rows
        )
    region = "r042"
    if impl == "ours":
        import airflow_provider_delta.log.scans.scan  # noqa: F401 - the implementation's own modules, as deltalake's
        from airflow_provider_delta.log import DeltaTable

        filt = [("region", "=", region)] if case == "filtered" else None
        return lambda: _facts(DeltaTable(path).to_pyarrow_table(filter=filt).num_rows)
    if impl == "deltalake":
        import deltalake

        filters = [("region", "=", region)] if case == "filtered" else None
        return lambda: _facts(deltalake.DeltaTable(path).to_pyarrow_table(filters=filters).num_rows)
    if impl == "polars":
        import polars as pl

        def polars_read() -> dict[str, Any]:
            frame = pl.scan_delta(path)
            if case == "filtered":
                frame = frame.filter(pl.col("region") == region)
            return _facts(frame.collect().height)

        return polars_read
    import pyarrow.dataset as ds

    from airflow_provider_delta.log import DeltaTable

    paths = [os.path.join(path, p) for p in DeltaTable(path).snapshot().file_paths()]
    if case == "filtered":
        paths = [p for p in paths if f"region={region}/" in p]
    return lambda: _facts(ds.dataset(paths, format="parquet").to_table().num_rows)


def _facts(rows: int) -> dict[str, Any]:
    return {"rows": int(rows)}
