"""Z-order measured by Delta Spark itself, shared by the Spark and pyarrow OPTIMIZE oracle tests.

A table of 2 partitions x 16 files whose x and y are random (every file spans both), one copy Z-ordered by
us and one by Delta Spark's OPTIMIZE ZORDER at the same target size; Delta Spark's own data skipping then
counts the files each layout reads for point and range queries on x and y.
"""

from __future__ import annotations

import random
import shutil
from collections.abc import Callable
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


def zorder_against_delta_spark(
    oracle: Oracle, scattered: Path, ours: Callable[[Path, int], Any], label: str
) -> tuple[Any, Path, dict, dict]:
    """Z-order a copy with ``ours(path, max_file_size)`` and another with Delta Spark; check that Delta
    Spark's data skipping reads no more of our files than of its own, and skips at least the same share.
    Returns ``ours``'s metrics, our copy and the files read before and after (ours)."""
    mine = copy_table(scattered, f"zorder-{label}-ours")
    theirs = copy_table(scattered, f"zorder-{label}-theirs")
    partition_bytes = sum(f.stat().st_size for f in (scattered / "part=a").glob("*.parquet"))
    max_file_size = partition_bytes // 8  # about 8 files per partition, as many for both
    metrics = ours(mine, max_file_size)
    key = "spark.databricks.delta.optimize.maxFileSize"
    oracle.call("conf", {key: str(max_file_size)})
    try:
        oracle.call("sql", f"OPTIMIZE delta.`{theirs}` ZORDER BY (x, y)")
    finally:
        oracle.call("conf", {key: None})
    asked = queries()
    before, ours_read, delta_read = (oracle.call("files_read", str(p), asked)
                                     for p in (scattered, mine, theirs))  # fmt: skip
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
    assert oracle.call("rows", str(mine)) == oracle.call("rows", str(scattered))
    return metrics, mine, before, ours_read
