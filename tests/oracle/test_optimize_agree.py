"""OPTIMIZE judged by Delta Spark.

Row tracking kept: Delta Spark's ``_metadata.row_id`` and ``row_commit_version`` of every row are the same
after our OPTIMIZE (pyarrow in the task, and on Spark; compaction and Z-order) as before, as they are after
Delta Spark's own OPTIMIZE. (How well each engine's Z-order lets Delta Spark skip files is measured in
``test_layout_agree.py``, against one OPTIMIZE ZORDER by Delta Spark.)

Delta Spark writes the table: row tracking and deletion vectors on, appends in several commits, an UPDATE
(which materializes row ids in the files it writes) and a DELETE (deletion vectors). The table is copied;
each copy is optimized by one engine; Delta Spark then reads every copy and goes on writing to ours.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from oracle_client import Oracle
from oracle_zorder import copy_table

from airflow_provider_delta.log import DeltaTable

HISTORY = [
    "CREATE TABLE delta.`{t}` (id BIGINT, x INT, y INT, part STRING) USING delta PARTITIONED BY (part) "
    "TBLPROPERTIES ('delta.enableRowTracking' = 'true', 'delta.enableDeletionVectors' = 'true')",
    "INSERT INTO delta.`{t}` SELECT /*+ REPARTITION(4) */ id, CAST(rand(1) * 1000 AS INT), "
    "CAST(rand(2) * 1000 AS INT), IF(id % 2 = 0, 'a', 'b') FROM range(0, 400)",
    "INSERT INTO delta.`{t}` SELECT /*+ REPARTITION(3) */ id, CAST(rand(3) * 1000 AS INT), "
    "CAST(rand(4) * 1000 AS INT), IF(id % 3 = 0, 'a', 'c') FROM range(400, 700)",
    "UPDATE delta.`{t}` SET y = y + 1 WHERE id % 5 = 0",
    "DELETE FROM delta.`{t}` WHERE id % 7 = 0",
    "INSERT INTO delta.`{t}` SELECT id, 1, 2, 'c' FROM range(700, 720)",
]
TRACKED = "SELECT id, _metadata.row_id AS row_id, _metadata.row_commit_version AS version FROM delta.`{t}`"


@pytest.fixture(scope="module")
def tracked_table(oracle: Oracle, tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.mktemp("rowtracking") / "base"
    for statement in HISTORY:
        oracle.call("sql", statement.format(t=base))
    return base


def _tracked(oracle: Oracle, path: Path) -> list[tuple[Any, ...]]:
    rows = oracle.sql(TRACKED.format(t=path))
    return sorted((r["id"], r["row_id"], r["version"]) for r in rows)


def _optimize(engine: str, path: Path, spark: Any, zorder: bool) -> Any:
    options: dict[str, Any] = {"zorder_by": ["x", "y"]} if zorder else {}
    if engine == "pyarrow":
        return DeltaTable(str(path)).optimize(**options)
    from airflow_provider_delta.spark.optimize import optimize as spark_optimize

    return spark_optimize(spark, str(path), **options)


@pytest.mark.parametrize("zorder", [False, True], ids=["compaction", "zorder"])
@pytest.mark.parametrize("engine", ["pyarrow", "spark"])
def test_delta_spark_sees_the_same_row_ids_after_our_optimize(
    oracle: Oracle, spark: Any, tracked_table: Path, engine: str, zorder: bool
):
    before = _tracked(oracle, tracked_table)
    assert len(before) == 700 - 100 + 20 and len({r[1] for r in before}) == len(before)
    assert len({r[2] for r in before}) >= 4  # rows of several commits: versions worth keeping
    mine = copy_table(tracked_table, f"ours-{engine}-{'zorder' if zorder else 'compaction'}")
    files_before = DeltaTable(str(mine)).snapshot().num_files
    metrics = _optimize(engine, mine, spark, zorder)
    assert metrics.num_files_removed > 0 and metrics.versions
    after = DeltaTable(str(mine)).snapshot()
    assert after.num_files < files_before
    assert after.files.column("deletionVector").null_count == after.num_files  # deleted rows dropped
    print(f"{engine} {'Z-order' if zorder else 'compaction'}: {files_before} files -> {after.num_files}")
    assert _tracked(oracle, mine) == before
    assert oracle.call("rows", str(mine)) == oracle.call("rows", str(tracked_table))
    # Delta Spark goes on: an append gets fresh ids above every id (ours included), and its own OPTIMIZE
    # over our files keeps the ids we kept.
    oracle.call("sql", f"INSERT INTO delta.`{mine}` VALUES (5000, 1, 1, 'a')")
    oracle.call("sql", f"OPTIMIZE delta.`{mine}`")
    again = _tracked(oracle, mine)
    assert [r for r in again if r[0] != 5000] == before
    ids = [r[1] for r in again]
    assert len(ids) == len(set(ids)) == len(before) + 1


def test_delta_sparks_own_optimize_keeps_them_too(oracle: Oracle, tracked_table: Path):
    """The reference the tests above hold us to: Delta Spark's OPTIMIZE keeps ids and versions."""
    theirs = copy_table(tracked_table, "theirs")
    before = _tracked(oracle, tracked_table)
    oracle.call("sql", f"OPTIMIZE delta.`{theirs}` ZORDER BY (x, y)")
    assert _tracked(oracle, theirs) == before
