"""OPTIMIZE and RESTORE against Delta Spark: the same outcome, and Delta Spark goes on with our tables.

RESTORE: Delta Spark writes a history (deletion vectors, a new column, a protocol upgrade, an OPTIMIZE);
the table is copied twice; our core restores one copy, Delta Spark the other, to the same version; both
must then hold the same live files, protocol, metadata and domains, record the same RESTORE metrics, and
Delta Spark must read the same rows from both and go on writing ours. When VACUUM deleted files the target
needs, both refuse, naming the same files.

One Delta Spark session serves the module.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from oracle_client import Oracle, OracleError
from oracle_compare import Mismatches, normalise, ours

from airflow_provider_delta.log import DeltaTable
from airflow_provider_delta.log.errors import RestoreMissingFilesError

# The history both RESTOREs start from; the comment is the version each statement makes.
HISTORY = [
    "CREATE TABLE delta.`{t}` (id BIGINT, v STRING, part STRING) USING delta PARTITIONED BY (part) "
    "TBLPROPERTIES ('delta.enableDeletionVectors' = 'true')",  # 0
    "INSERT INTO delta.`{t}` SELECT id, concat('v', id), if(id % 2 = 0, 'a', 'b') FROM range(0, 40)",  # 1
    "INSERT INTO delta.`{t}` SELECT id, concat('w', id), 'c' FROM range(40, 60)",  # 2
    "DELETE FROM delta.`{t}` WHERE id % 3 = 0",  # 3: deletion vectors
    "ALTER TABLE delta.`{t}` ADD COLUMNS (extra INT)",  # 4: metadata
    "INSERT INTO delta.`{t}` SELECT id, 'x', 'a', 7 FROM range(60, 70)",  # 5
    "ALTER TABLE delta.`{t}` SET TBLPROPERTIES ('delta.enableChangeDataFeed' = 'true')",  # 6: protocol
    "UPDATE delta.`{t}` SET v = 'u' WHERE id < 10",  # 7
    "OPTIMIZE delta.`{t}`",  # 8
]


@pytest.fixture(scope="module")
def history(oracle: Oracle, tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.mktemp("layout") / "history"
    for statement in HISTORY:
        oracle.call("sql", statement.format(t=base))
    assert DeltaTable(str(base)).version() == len(HISTORY) - 1
    return base


def _copy(base: Path, name: str) -> Path:
    target = base.parent / name
    shutil.copytree(base, target)
    return target


def _last_commit(oracle: Oracle, path: Path) -> dict[str, Any]:
    return oracle.call("history", str(path))[0]


@pytest.mark.parametrize("target", [2, 4, 7])
def test_our_restore_equals_delta_sparks(oracle: Oracle, history: Path, target: int):
    mine, theirs = _copy(history, f"ours-{target}"), _copy(history, f"theirs-{target}")
    result = DeltaTable(str(mine)).restore(target)
    oracle.call("sql", f"RESTORE TABLE delta.`{theirs}` TO VERSION AS OF {target}")
    m = Mismatches(f"RESTORE to version {target}")
    delta = normalise(oracle.call("snapshot", str(theirs)), log_paths=True)
    state = ours(str(mine))
    for key in ("version", "protocol", "metadata", "files", "txns", "domains"):
        m.diff("restored table", key, delta[key], state[key])
    # The commit as DESCRIBE HISTORY shows it: operation, parameters, Delta Spark's metrics.
    d, o = _last_commit(oracle, theirs), _last_commit(oracle, mine)
    for key in ("operation", "operationParameters", "operationMetrics", "isolationLevel", "isBlindAppend",
                "readVersion"):  # fmt: skip
        m.diff("RESTORE commit", key, d.get(key), o.get(key))
    m.diff("RESTORE result", "metrics", {k: str(v) for k, v in result.metrics().items()},
           d.get("operationMetrics"))  # fmt: skip
    # Delta Spark reads the same rows from both, those of the target version; then goes on writing ours.
    expected = oracle.call("rows", str(history), target)
    m.diff("rows", "ours restored", expected, oracle.call("rows", str(mine)))
    m.diff("rows", "Delta Spark restored", expected, oracle.call("rows", str(theirs)))
    m.check()
    oracle.call("sql", f"INSERT INTO delta.`{mine}` (id, v, part) VALUES (1000, 'after', 'z')")
    rows = [json.loads(r) for r in oracle.call("rows", str(mine))]
    assert {"id": 1000, "v": "after", "part": "z"} in rows and len(rows) == len(expected) + 1


def test_restore_to_a_timestamp_picks_the_same_version(oracle: Oracle, history: Path):
    mine, theirs = _copy(history, "ours-ts"), _copy(history, "theirs-ts")
    ts = {h["version"]: h["ts"] for h in oracle.call("history", str(history))}
    when = ts[5] + (ts[6] - ts[5]) // 2  # between versions 5 and 6: version 5
    result = DeltaTable(str(mine)).restore(timestamp=when)
    iso = oracle.sql(f"SELECT CAST(timestamp_millis({when}) AS STRING) AS t")[0]["t"]
    oracle.call("sql", f"RESTORE TABLE delta.`{theirs}` TO TIMESTAMP AS OF '{iso}'")
    assert result.restored_version == 5
    delta = normalise(oracle.call("snapshot", str(theirs)), log_paths=True)
    assert delta["files"] == ours(str(mine))["files"]
    assert oracle.call("rows", str(mine)) == oracle.call("rows", str(theirs))


def test_both_refuse_a_restore_whose_files_vacuum_deleted(oracle: Oracle, history: Path):
    mine, theirs = _copy(history, "ours-vacuumed"), _copy(history, "theirs-vacuumed")
    for copy in (mine, theirs):
        oracle.call("sql", f"VACUUM delta.`{copy}` RETAIN 0 HOURS")
    with pytest.raises(RestoreMissingFilesError) as caught:
        DeltaTable(str(mine)).restore(2)
    with pytest.raises(OracleError) as delta:
        oracle.call("sql", f"RESTORE TABLE delta.`{theirs}` TO VERSION AS OF 2")
    assert "RESTORE_MISSED_DATA_FILES" in delta.value.message or "missing" in delta.value.message.lower()
    # Delta Spark lists the data files it misses; we name the same ones.
    for path in caught.value.files:
        if not Path(path).name.startswith("deletion_vector_"):
            assert Path(path).name in delta.value.message, (path, delta.value.message[:2000])
    assert DeltaTable(str(mine)).history(1)[0].operation == "VACUUM END"  # no RESTORE committed


# -- Z-order, measured by Delta Spark ----------------------------------------------------------------------
ZORDER_ROWS = 40_000


@pytest.fixture(scope="module")
def scattered(oracle: Oracle, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Delta Spark's table of 2 partitions x 16 files whose x and y are random: every file spans them."""
    path = tmp_path_factory.mktemp("zorder") / "scattered"
    oracle.call("sql", f"CREATE TABLE delta.`{path}` (id BIGINT, x INT, y INT, part STRING) USING delta "
                       "PARTITIONED BY (part)")  # fmt: skip
    oracle.call("sql", f"INSERT INTO delta.`{path}` SELECT /*+ REPARTITION(16) */ id, "
                       "CAST(rand(7) * 1000 AS INT), CAST(rand(8) * 1000 AS INT), IF(id % 2 = 0, 'a', 'b') "
                       f"FROM range(0, {ZORDER_ROWS})")  # fmt: skip
    return path


def _queries(seed: int = 11) -> list[str]:
    import random

    rng = random.Random(seed)
    out = []
    for column in ("x", "y"):
        out += [f"{column} = {rng.randrange(1000)}" for _ in range(6)]
        out += [f"{column} >= {a} AND {column} < {a + 60}" for a in (rng.randrange(940) for _ in range(4))]
    out += ["x < 120 AND y < 120", "x > 900 AND y >= 300 AND y <= 400"]
    return out


def test_zorder_skips_at_least_as_many_files_as_delta_sparks(oracle: Oracle, spark: Any, scattered: Path):
    from airflow_provider_delta.spark.optimize import optimize as spark_optimize

    mine, theirs = _copy(scattered, "zorder-ours"), _copy(scattered, "zorder-theirs")
    partition_bytes = sum(f.stat().st_size for f in (scattered / "part=a").glob("*.parquet"))
    max_file_size = partition_bytes // 8  # about 8 files per partition, as many for both
    metrics = spark_optimize(spark, str(mine), zorder_by=["x", "y"], max_file_size=max_file_size)
    key = "spark.databricks.delta.optimize.maxFileSize"
    oracle.call("conf", {key: str(max_file_size)})
    try:
        oracle.call("sql", f"OPTIMIZE delta.`{theirs}` ZORDER BY (x, y)")
    finally:
        oracle.call("conf", {key: None})
    queries = _queries()
    before, ours_read, delta_read = (oracle.call("files_read", str(p), queries)
                                     for p in (scattered, mine, theirs))  # fmt: skip
    skipped_ours = sum(ours_read["total"] - n for n in ours_read["read"])
    skipped_delta = sum(delta_read["total"] - n for n in delta_read["read"])
    skipped_before = sum(before["total"] - n for n in before["read"])
    print(f"Z-order over {len(queries)} queries: files {before['total']} -> ours {ours_read['total']}, Delta "
          f"Spark {delta_read['total']}; files skipped: before {skipped_before}, ours {skipped_ours}, Delta "
          f"Spark {skipped_delta}; files read per query ours {ours_read['read']} Delta {delta_read['read']}")
    assert metrics.num_files_removed == before["total"] and metrics.zorder_stats["numOutputCubes"] == 2
    assert skipped_before <= len(queries)  # random rows: before, almost every file is read
    assert skipped_ours >= skipped_delta, (ours_read, delta_read)
    assert sum(ours_read["read"]) <= sum(delta_read["read"]), (ours_read, delta_read)
    assert oracle.call("rows", str(mine)) == oracle.call("rows", str(scattered))
    info = oracle.call("history", str(mine))[0]
    assert info["operation"] == "OPTIMIZE" and info["operationParameters"]["zOrderBy"] == '["x", "y"]'
    # Delta Spark goes on writing our table: an append, then its own OPTIMIZE over our files.
    oracle.call("sql", f"INSERT INTO delta.`{mine}` VALUES (-1, 5, 5, 'a')")
    oracle.call("sql", f"OPTIMIZE delta.`{mine}` ZORDER BY (y)")
    rows = oracle.call("rows", str(mine))
    assert len(rows) == ZORDER_ROWS + 1 and json.dumps({"id": -1, "x": 5, "y": 5, "part": "a"},
                                                       separators=(",", ":")) in rows  # fmt: skip
