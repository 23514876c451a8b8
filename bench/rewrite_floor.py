"""The floor of a copy-on-write DELETE: rewriting the files with nothing of Delta around them.

``python -m bench.rewrite_floor [TABLE]`` reads every Parquet file of ``TABLE`` (default: the ``dml``
benchmark's cached 200-file table), drops the rows ``id % 100 = 7`` (the ``delete-mod`` case, 1 %) and
writes the rest to a scratch folder, with pyarrow (two threads, as our rewrite), Polars and DuckDB, in the
codecs each offers. No engine can delete those rows by copy-on-write faster than it can do this, so the
medians say whether a goal for ``delete-mod`` is reachable at all on this machine.
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pyarrow.compute as pc
import pyarrow.parquet as pq

DEFAULT_TABLE = Path("/tmp/airflow-provider-delta-bench/dml-200x50000-v1")
RUNS = 3


def _pyarrow(codec: str, dictionary: bool) -> Callable[[Path, Path], int]:
    def rewrite(src: Path, dst: Path) -> int:
        table = pq.read_table(src)
        ids = table["id"]
        keep = pc.not_equal(pc.subtract(ids, pc.multiply(pc.divide(ids, 100), 100)), 7)
        table = table.filter(keep)
        strings = [f.name for f in table.schema if str(f.type) == "string"]
        pq.write_table(table, dst, compression=codec, use_dictionary=strings if dictionary else False)
        return table.num_rows

    return rewrite


def _polars(codec: str) -> Callable[[Path, Path], int]:
    def rewrite(src: Path, dst: Path) -> int:
        import polars as pl

        frame = pl.read_parquet(src).filter(pl.col("id") % 100 != 7)
        frame.write_parquet(dst, compression=codec, statistics=True)
        return frame.height

    return rewrite


def _duckdb(codec: str) -> Callable[[Path, Path], int]:
    import duckdb

    con = duckdb.connect()

    def rewrite(src: Path, dst: Path) -> int:
        con.execute(
            f"COPY (SELECT * FROM read_parquet('{src}') WHERE id % 100 != 7) TO '{dst}' "
            f"(FORMAT parquet, COMPRESSION {codec})"
        )
        return 0

    return rewrite


def measure(files: list[Path], rewrite: Callable[[Path, Path], int], threads: int) -> list[float]:
    """Wall times of ``RUNS`` rewrites of ``files`` after one warm-up."""
    times = []
    with tempfile.TemporaryDirectory() as out:
        jobs = [(f, Path(out) / f"{i}.parquet") for i, f in enumerate(files)]
        for run in range(RUNS + 1):
            start = time.perf_counter()
            with ThreadPoolExecutor(threads) as pool:
                list(pool.map(lambda job: rewrite(*job), jobs))
            if run:
                times.append(time.perf_counter() - start)
    return times


def main(argv: list[str]) -> int:
    table = Path(argv[0]) if argv else DEFAULT_TABLE
    files = sorted(table.glob("*.parquet"))
    if not files:
        print(f"no Parquet files in {table}: run `python -m bench dml` once to build it", file=sys.stderr)
        return 1
    cases: list[tuple[str, Callable[[], Callable[[Path, Path], int]], int]] = [
        ("pyarrow, 2 threads, zstd", lambda: _pyarrow("zstd", True), 2),
        ("pyarrow, 2 threads, snappy", lambda: _pyarrow("snappy", True), 2),
        ("pyarrow, 2 threads, lz4, no dictionary", lambda: _pyarrow("lz4", False), 2),
        ("Polars, zstd", lambda: _polars("zstd"), 1),
        ("Polars, snappy", lambda: _polars("snappy"), 1),
        ("DuckDB, zstd", lambda: _duckdb("zstd"), 1),
        ("DuckDB, snappy", lambda: _duckdb("snappy"), 1),
    ]
    print(f"rewrite floor: {len(files)} files of {table}, dropping id % 100 = 7; median of {RUNS} runs")
    for name, make, threads in cases:
        try:
            times = measure(files, make(), threads)
        except ImportError as exc:
            print(f"{name}: skipped ({exc})")
            continue
        print(f"{name}: {statistics.median(times):.2f} s ({min(times):.2f}-{max(times):.2f})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
