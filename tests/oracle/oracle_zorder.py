"""Z-order measured by Delta Spark itself, shared by the Spark and pyarrow OPTIMIZE oracle tests.

A table of 2 partitions x 16 files whose x and y are random (every file spans both), one copy Z-ordered by
each of our engines and one by Delta Spark's OPTIMIZE ZORDER at the same target size; Delta Spark's own
data skipping then counts the files each layout reads for point and range queries on x and y.
"""

from __future__ import annotations

import random
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from oracle_client import Oracle

ZORDER_ROWS = 40_000


def copy_table(base: Path, name: str) -> Path:
    target = base.parent / name
    shutil.copytree(base, target)
    return target


def make_scattered(oracle: Oracle, path: Path) -> Path:
    oracle.call("sql", f"CREATE TABLE delta.`{path}` (id BIGINT, x INT, y INT, part STRING) USING delta "
                       "PARTITIONED BY (part)")  # fmt: skip
    oracle.call("sql", f"INSERT INTO delta.`{path}` SELECT /*+ REPARTITION(16) */ id, "
                       "CAST(rand(7) * 1000 AS INT), CAST(rand(8) * 1000 AS INT), IF(id % 2 = 0, 'a', 'b') "
                       f"FROM range(0, {ZORDER_ROWS})")  # fmt: skip
    return path


def queries(seed: int = 11) -> list[str]:
    rng = random.Random(seed)
    out = []
    for column in ("x", "y"):
        out += [f"{column} = {rng.randrange(1000)}" for _ in range(6)]
        out += [f"{column} >= {a} AND {column} < {a + 60}" for a in (rng.randrange(940) for _ in range(4))]
    out += ["x < 120 AND y < 120", "x > 900 AND y >= 300 AND y <= 400"]
    return out


@dataclass
class DeltaZorder:
    """Delta Spark's Z-order of a scattered table and what its data skipping reads, before and after: made
    once per module, then each of our engines is measured against it."""

    scattered: Path
    theirs: Path
    max_file_size: int
    before: dict
    delta_read: dict
    rows: list[str]  # the scattered table's rows as Delta Spark reads them: what every Z-ordered copy holds


def delta_spark_zorder(oracle: Oracle, scattered: Path) -> DeltaZorder:
    """Z-order a copy with Delta Spark's OPTIMIZE ZORDER at a target size of about 8 files per partition,
    count the files its data skipping reads per query, before and after, and read the rows (once: 40,000
    of them, each engine's copy is compared with them)."""
    theirs = copy_table(scattered, "zorder-theirs")
    partition_bytes = sum(f.stat().st_size for f in (scattered / "part=a").glob("*.parquet"))
    max_file_size = partition_bytes // 8
    key = "spark.databricks.delta.optimize.maxFileSize"
    oracle.call("conf", {key: str(max_file_size)})
    try:
        oracle.call("sql", f"OPTIMIZE delta.`{theirs}` ZORDER BY (x, y)")
    finally:
        oracle.call("conf", {key: None})
    before, delta_read = (oracle.call("files_read", str(p), queries()) for p in (scattered, theirs))
    rows = oracle.call("rows", str(scattered))
    return DeltaZorder(scattered, theirs, max_file_size, before, delta_read, rows)


def zorder_against_delta_spark(
    oracle: Oracle, reference: DeltaZorder, ours: Callable[[Path, int], Any], label: str, *, rows: bool = True
) -> tuple[Any, Path, dict, dict]:
    """Z-order a copy with ``ours(path, max_file_size)``; check that Delta Spark's data skipping reads no
    more of our files than of its own (``reference``), and skips at least the same share, and (``rows``)
    that Delta Spark reads the same rows from it; ``rows=False`` leaves that to a caller that reads them
    after Delta Spark wrote to the copy (each read is a Spark job over 40,000 rows).
    Returns ``ours``'s metrics, our copy and the files read before and after (ours)."""
    mine = copy_table(reference.scattered, f"zorder-{label}-ours")
    metrics = ours(mine, reference.max_file_size)
    asked = queries()
    before, delta_read = reference.before, reference.delta_read
    ours_read = oracle.call("files_read", str(mine), asked)
    skipped = {name: sum(r["total"] - n for n in r["read"])
               for name, r in (("before", before), ("ours", ours_read), ("delta", delta_read))}  # fmt: skip
    print(f"{label} Z-order over {len(asked)} queries: files {before['total']} -> ours {ours_read['total']}, "
          f"Delta Spark {delta_read['total']}; files skipped {skipped}; files read per query ours "
          f"{ours_read['read']} Delta {delta_read['read']}")
    assert skipped["before"] <= len(asked)  # random rows: before, almost every file is read
    # Skipped files counted as a share of each layout's files: the two OPTIMIZEs may cut a different number
    # of files (13 against 15, say), and a layout of more files skips more of them while reading more.
    share = {name: skipped[name] / r["total"] for name, r in (("ours", ours_read), ("delta", delta_read))}
    assert share["ours"] >= share["delta"], (ours_read, delta_read)
    assert sum(ours_read["read"]) <= sum(delta_read["read"]), (ours_read, delta_read)
    if rows:
        assert oracle.call("rows", str(mine)) == reference.rows, f"{label} Z-order: other rows"
    return metrics, mine, before, ours_read
