"""OPTIMIZE and RESTORE against Delta Spark: the same outcome, and Delta Spark goes on with our tables.

RESTORE: Delta Spark writes a history (deletion vectors, a new column, a protocol upgrade, an OPTIMIZE);
the table is copied twice; our core restores one copy, Delta Spark the other, to the same version; both
must then hold the same live files, protocol, metadata and domains, record the same RESTORE metrics, and
Delta Spark must read the same rows from both and go on writing ours. When VACUUM deleted files the target
needs, both refuse, naming the same files.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from oracle_client import Oracle, OracleError
from oracle_compare import Mismatches, normalise, ours
from oracle_zorder import (
    ZORDER_ROWS,
    DeltaZorder,
    copy_table,
    delta_spark_zorder,
    make_scattered,
    zorder_against_delta_spark,
)

from airflow_provider_delta.log import AddFile, ConcurrentModificationError, DeltaTable, add_file_from_parquet
from airflow_provider_delta.log.errors import RestoreMissingFilesError
from airflow_provider_delta.log.optimize_commit import commit_batch, finished_adds
from airflow_provider_delta.log.optimize_plan import plan_optimize
from airflow_provider_delta.spark.optimize import write_bins

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


def _last_commit(oracle: Oracle, path: Path) -> dict[str, Any]:
    return oracle.call("history", str(path))[0]


@pytest.mark.parametrize("target", [2, 4, 7])
def test_our_restore_equals_delta_sparks(oracle: Oracle, history: Path, target: int):
    mine, theirs = copy_table(history, f"ours-{target}"), copy_table(history, f"theirs-{target}")
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
    mine, theirs = copy_table(history, "ours-ts"), copy_table(history, "theirs-ts")
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
    mine, theirs = copy_table(history, "ours-vacuumed"), copy_table(history, "theirs-vacuumed")
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


@pytest.fixture(scope="module")
def scattered(oracle: Oracle, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Delta Spark's table of 2 partitions x 16 files whose x and y are random: every file spans them."""
    return make_scattered(oracle, tmp_path_factory.mktemp("zorder") / "scattered")


@pytest.fixture(scope="module")
def delta_zorder(oracle: Oracle, scattered: Path) -> DeltaZorder:
    """Delta Spark's OPTIMIZE ZORDER of the scattered table, measured once for both of our engines."""
    return delta_spark_zorder(oracle, scattered)


def test_zorder_skips_at_least_as_many_files_as_delta_sparks(oracle: Oracle, spark: Any,
                                                             delta_zorder: DeltaZorder):  # fmt: skip
    from airflow_provider_delta.spark.optimize import optimize as spark_optimize

    def ours(path: Path, max_file_size: int) -> Any:
        return spark_optimize(spark, str(path), zorder_by=["x", "y"], max_file_size=max_file_size)

    metrics, mine, before, _ = zorder_against_delta_spark(oracle, delta_zorder, ours, "spark")
    assert metrics.num_files_removed == before["total"] and metrics.zorder_stats["numOutputCubes"] == 2
    info = oracle.call("history", str(mine))[0]
    assert info["operation"] == "OPTIMIZE" and info["operationParameters"]["zOrderBy"] == '["x", "y"]'
    # Delta Spark goes on writing our table: an append, then its own OPTIMIZE over our files.
    oracle.call("sql", f"INSERT INTO delta.`{mine}` VALUES (-1, 5, 5, 'a')")
    oracle.call("sql", f"OPTIMIZE delta.`{mine}` ZORDER BY (y)")
    rows = oracle.call("rows", str(mine))
    assert len(rows) == ZORDER_ROWS + 1 and json.dumps({"id": -1, "x": 5, "y": 5, "part": "a"},
                                                       separators=(",", ":")) in rows  # fmt: skip


def test_pyarrow_zorder_skips_at_least_as_many_files_as_delta_sparks(oracle: Oracle,
                                                                     delta_zorder: DeltaZorder):  # fmt: skip
    def ours(path: Path, max_file_size: int) -> Any:
        return DeltaTable(str(path)).optimize(zorder_by=["x", "y"], max_file_size=max_file_size)

    metrics, mine, before, _ = zorder_against_delta_spark(oracle, delta_zorder, ours, "pyarrow")
    assert metrics.num_files_removed == before["total"] and metrics.zorder_stats["numOutputCubes"] == 2
    info = oracle.call("history", str(mine))[0]
    assert info["operation"] == "OPTIMIZE" and info["operationParameters"]["zOrderBy"] == '["x", "y"]'


# -- conflicts: OPTIMIZE against concurrent appends, deletes, deletion vectors and more ---------------------
# OPTIMIZE compacts partitions a and b (files F1, F2 and G1, G2); partition c holds H, which it leaves alone.
# A winner commits between the OPTIMIZE's read and its commit. Ours late: our OPTIMIZE (planned and written
# by our engine) commits after it. Delta Spark late: Delta Spark's OPTIMIZE transaction (begin_optimize:
# trackFilesRead of the compacted files, dataChange=false actions) commits after it, retried as its
# commitAndRetry does. Both must decide alike.
CONFLICT_ROWS = {"a": [1, 2, 3, 4], "b": [11, 12, 13, 14], "c": [21, 22]}
WINNERS: dict[str, tuple[str, str]] = {
    "Delta Spark appends to a": ("delta", "INSERT INTO delta.`{t}` VALUES (100, 'a')"),
    "Delta Spark deletes a row of F1 (deletion vector)": ("delta", "DELETE FROM delta.`{t}` WHERE id = 1"),
    "Delta Spark deletes partition c": ("delta", "DELETE FROM delta.`{t}` WHERE p = 'c'"),
    "Delta Spark updates a row of G1": ("delta", "UPDATE delta.`{t}` SET id = 1011 WHERE id = 11"),
    "Delta Spark sets a property": ("delta", "ALTER TABLE delta.`{t}` SET TBLPROPERTIES ('team' = 'x')"),
    "Delta Spark optimizes partition a": ("delta", "OPTIMIZE delta.`{t}` WHERE p = 'a'"),
    "ours appends to b": ("ours", "append b"),
    "ours removes F1": ("ours", "remove F1"),
    "ours puts a deletion vector on G1": ("ours", "dv G1"),
    "ours removes H": ("ours", "remove H"),
}


@pytest.fixture(scope="module")
def conflict_base(oracle: Oracle, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two files in each of a and b, one in c (each INSERT writes one file per partition)."""
    path = tmp_path_factory.mktemp("conflicts") / "base"
    oracle.call("sql", f"CREATE TABLE delta.`{path}` (id BIGINT, p STRING) USING delta PARTITIONED BY (p) "
                       "TBLPROPERTIES ('delta.enableDeletionVectors' = 'true')")  # fmt: skip
    for half in (slice(0, 2), slice(2, 4)):
        rows = [(i, p) for p in "ab" for i in CONFLICT_ROWS[p][half]]
        values = ", ".join(f"({i}, '{p}')" for i, p in rows)
        oracle.call("sql", f"INSERT INTO delta.`{path}` SELECT /*+ REPARTITION(1) */ * FROM VALUES {values}")
    oracle.call("sql", f"INSERT INTO delta.`{path}` VALUES (21, 'c'), (22, 'c')")
    return path


def _file_of(table: DeltaTable, row_id: int) -> AddFile:
    for f in table.snapshot().files.to_pylist():
        stats = json.loads(f["stats"])
        if stats["minValues"]["id"] <= row_id <= stats["maxValues"]["id"]:
            return AddFile.from_dict(f)
    raise AssertionError(f"no file holds id {row_id}")


def _win(oracle: Oracle, table: DeltaTable, winner: str) -> None:
    engine, what = WINNERS[winner]
    if engine == "delta":
        oracle.call("sql", what.format(t=table.uri))
        return
    if what == "append b":
        rel = "p=b/ours-appended.parquet"
        pq.write_table(pa.table({"id": pa.array([200], pa.int64())}), Path(table.uri) / rel)
        table.transaction().add_files([add_file_from_parquet(table, rel, {"p": "b"})]).commit()
    elif what.startswith("remove"):
        victim = _file_of(table, 1 if what.endswith("F1") else 21)
        table.transaction().remove_files([victim]).commit("DELETE")
    else:
        table.transaction().delete_rows({_file_of(table, 11).path: [0]}, inline_max_bytes=0).commit("DELETE")


def _outcome(error: str | None) -> str:
    """``commits``, or the conflict's name without its engine's suffix (ConcurrentDeleteRead)."""
    if error is not None:
        return error.removesuffix("Exception").removesuffix("Error")
    return "commits"


@pytest.mark.parametrize("winner", list(WINNERS))
def test_optimize_conflicts_match_delta_spark(oracle: Oracle, spark: Any, conflict_base: Path, winner: str):
    slug = "".join(c if c.isalnum() else "-" for c in winner)
    # Ours late.
    table = DeltaTable(str(copy_table(conflict_base, f"ours-late-{slug}")))
    plan = plan_optimize(table.snapshot(), partition_filter=[("p", "in", ["a", "b"])])
    assert sorted(b.files.num_rows for b in plan.bins) == [2, 2]
    written = write_bins(spark, table, plan, list(plan.bins), {})
    _win(oracle, table, winner)
    rows_before = oracle.call("rows", table.uri)
    try:
        commit_batch(table, plan, written)
        ours = _outcome(None)
    except ConcurrentModificationError as exc:
        ours = _outcome(type(exc).__name__)
    if ours == "commits":  # Delta Spark reads the same rows after our OPTIMIZE
        assert oracle.call("rows", table.uri) == rows_before
    # Delta Spark late: its OPTIMIZE transaction of the same files, then the winner, then its commit.
    table = DeltaTable(str(copy_table(conflict_base, f"delta-late-{slug}")))
    plan = plan_optimize(table.snapshot(), partition_filter=[("p", "in", ["a", "b"])])
    written = write_bins(spark, table, plan, list(plan.bins), {})
    compact = [f["path"] for b in plan.bins for f in b.files.select(["path"]).to_pylist()]
    adds = [json.dumps({"add": a.to_json()}) for b, files in written
            for a in finished_adds(plan, b, files)]  # fmt: skip
    handle = oracle.call("begin_optimize", table.uri, [_log_path(p) for p in compact], adds)
    _win(oracle, table, winner)
    answer = oracle.call("commit_optimize", handle)
    delta = _outcome(answer.get("error"))
    print(f"OPTIMIZE after {winner!r}: Delta Spark {delta}, ours {ours}")
    assert ours == delta, f"OPTIMIZE after a concurrent {winner!r}: Delta Spark {delta}, ours {ours}"


def _log_path(path: str) -> str:
    """A data file's path as the log spells it (Delta Spark's AddFile.path): URI-encoded."""
    return AddFile(path, 0).to_json()["path"]
