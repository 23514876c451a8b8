"""OPTIMIZE and RESTORE against Delta Spark: the same outcome, and Delta Spark goes on with our tables.

RESTORE: Delta Spark writes a history (deletion vectors, a new column, a protocol upgrade, an OPTIMIZE);
the table is copied twice; our core restores one copy, Delta Spark the other, to the same version; both
must then hold the same live files, protocol, metadata and domains, record the same RESTORE metrics, and
Delta Spark must go on writing ours and read from it the rows of its own restored copy and its new one. When
VACUUM deleted files the target needs, both refuse, naming the same files.

CPU: the module runs Delta Spark with one task per shuffle and per snapshot (``_one_task_per_stage``), and
reads each table version's rows once where one read proves the point (see each test).
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass
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
from airflow_provider_delta.log.base.errors import RestoreMissingFilesError
from airflow_provider_delta.log.maintenance.optimize_commit import commit_batch, finished_adds
from airflow_provider_delta.log.maintenance.optimize_plan import Bin, OptimizePlan, plan_optimize
from airflow_provider_delta.log.snapshot.snapshot import Snapshot
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


@pytest.fixture(scope="module", autouse=True)
def _one_task_per_stage(oracle: Oracle) -> None:
    """Delta Spark with one shuffle partition and one snapshot partition (the session's are 2) while this
    module runs; the oracle's ``reset`` puts them back after it.

    The tables here hold tens of files, and a Delta Spark task costs tens of ms of CPU whatever it does (a
    RESTORE at 200 shuffle partitions: 60 s): at one task a stage, RESTORE takes 2.7 s instead of 3.7, and
    every state reconstruction, read, DML and filesForScan less too. Neither changes a result: the only
    writes that go through such a shuffle are the deletion vectors of a DELETE or UPDATE, which then share
    fewer files (the history's: 2 instead of 3); the data files and the rows each vector deletes are the same.
    """
    one = ("spark.sql.shuffle.partitions", "spark.databricks.delta.snapshotPartitions")
    oracle.call("conf", dict.fromkeys(one, "1"))


def _json_row(**values: Any) -> str:
    """A row as Delta Spark's ``rows`` spells it (Spark's JSON: no spaces, nulls left out)."""
    return json.dumps(values, separators=(",", ":"))


def _row_diff(expected: list[str], got: list[str]) -> str:
    """The rows Delta Spark missed and those it read besides (multisets of JSON rows), ten of each."""
    want, read = Counter(expected), Counter(got)
    missing, unexpected = sorted((want - read).elements())[:10], sorted((read - want).elements())[:10]
    return f"{len(got)} rows read, {len(expected)} expected; missing {missing}, unexpected {unexpected}"


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
    m.check()
    # Delta Spark goes on writing ours, then reads from it the rows it reads from its own restored copy and
    # its new row: one read of ours proves both, as an INSERT of one row into partition z touches no other
    # file. (Its copy's rows are those of the target version: Delta Spark's RESTORE, not ours, under test.)
    expected = oracle.call("rows", str(theirs))
    oracle.call("sql", f"INSERT INTO delta.`{mine}` (id, v, part) VALUES (1000, 'after', 'z')")
    expected.append(_json_row(id=1000, v="after", part="z"))
    rows = oracle.call("rows", str(mine))
    assert rows == sorted(expected), f"RESTORE to version {target}, then INSERT: {_row_diff(expected, rows)}"


def test_restore_to_a_timestamp_picks_the_same_version(oracle: Oracle, history: Path):
    mine, theirs = copy_table(history, "ours-ts"), copy_table(history, "theirs-ts")
    ts = {h["version"]: h["ts"] for h in oracle.call("history", str(history))}
    when = ts[5] + (ts[6] - ts[5]) // 2  # between versions 5 and 6: version 5
    result = DeltaTable(str(mine)).restore(timestamp=when)
    iso = oracle.sql(f"SELECT CAST(timestamp_millis({when}) AS STRING) AS t")[0]["t"]
    oracle.call("sql", f"RESTORE TABLE delta.`{theirs}` TO TIMESTAMP AS OF '{iso}'")
    assert result.restored_version == 5
    # The same files with the same deletion vectors, protocol and metadata as Delta Spark's restored copy, so
    # Delta Spark reads the same rows from both (not read: the tests by version read ours after RESTORE).
    m = Mismatches("RESTORE to a timestamp between versions 5 and 6")
    delta, state = normalise(oracle.call("snapshot", str(theirs)), log_paths=True), ours(str(mine))
    for key in ("version", "protocol", "metadata", "files", "txns", "domains"):
        m.diff("restored table", key, delta[key], state[key])
    m.check()


def test_both_refuse_a_restore_whose_files_vacuum_deleted(oracle: Oracle, history: Path):
    # One VACUUM (a Spark job listing every file), then a copy of the vacuumed table, files and log alike.
    mine = copy_table(history, "ours-vacuumed")
    oracle.call("sql", f"VACUUM delta.`{mine}` RETAIN 0 HOURS")
    theirs = copy_table(mine, "theirs-vacuumed")
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

    metrics, mine, before, _ = zorder_against_delta_spark(oracle, delta_zorder, ours, "spark", rows=False)
    assert metrics.num_files_removed == before["total"] and metrics.zorder_stats["numOutputCubes"] == 2
    info = oracle.call("history", str(mine))[0]
    assert info["operation"] == "OPTIMIZE" and info["operationParameters"]["zOrderBy"] == '["x", "y"]'
    # Delta Spark goes on writing our table: an append, then its own OPTIMIZE over our files. Then it reads
    # the scattered table's rows and its new one: our Z-order kept every row (read once, after the writes).
    oracle.call("sql", f"INSERT INTO delta.`{mine}` VALUES (-1, 5, 5, 'a')")
    oracle.call("sql", f"OPTIMIZE delta.`{mine}` ZORDER BY (y)")
    expected = [*delta_zorder.rows, _json_row(id=-1, x=5, y=5, part="a")]
    rows = oracle.call("rows", str(mine))
    assert len(rows) == ZORDER_ROWS + 1 and rows == sorted(expected), _row_diff(expected, rows)


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
# commitAndRetry does. Both must decide alike. The winner commits once, on Delta Spark's copy, which is
# copied for ours before Delta Spark's OPTIMIZE commits; our OPTIMIZE's files are written once
# (``conflict_written``).
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
# The rows each winner leaves (F1 holds ids 1 and 2, G1 11 and 12, in that order; H 21, c's other file 22):
# what Delta Spark must read after an OPTIMIZE that commits after the winner, as it read them before it.
BASE_ROWS = {(i, p) for p, ids in CONFLICT_ROWS.items() for i in ids}
LEFT: dict[str, set[tuple[int, str]]] = {
    "Delta Spark appends to a": BASE_ROWS | {(100, "a")},
    "Delta Spark deletes a row of F1 (deletion vector)": BASE_ROWS - {(1, "a")},
    "Delta Spark deletes partition c": BASE_ROWS - {(21, "c"), (22, "c")},
    "Delta Spark updates a row of G1": BASE_ROWS - {(11, "b")} | {(1011, "b")},
    "Delta Spark sets a property": BASE_ROWS,
    "Delta Spark optimizes partition a": BASE_ROWS,
    "ours appends to b": BASE_ROWS | {(200, "b")},
    "ours removes F1": BASE_ROWS - {(1, "a"), (2, "a")},
    "ours puts a deletion vector on G1": BASE_ROWS - {(11, "b")},  # row 0 of G1
    "ours removes H": BASE_ROWS - {(21, "c")},
}


@pytest.fixture(scope="module")
def conflict_base(oracle: Oracle, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two files in each of a and b (each INSERT ... REPARTITION(1) writes one file per partition), and two
    in c (H, then 22: the VALUES' two rows go to two tasks)."""
    path = tmp_path_factory.mktemp("conflicts") / "base"
    oracle.call("sql", f"CREATE TABLE delta.`{path}` (id BIGINT, p STRING) USING delta PARTITIONED BY (p) "
                       "TBLPROPERTIES ('delta.enableDeletionVectors' = 'true')")  # fmt: skip
    for half in (slice(0, 2), slice(2, 4)):
        rows = [(i, p) for p in "ab" for i in CONFLICT_ROWS[p][half]]
        values = ", ".join(f"({i}, '{p}')" for i, p in rows)
        oracle.call("sql", f"INSERT INTO delta.`{path}` SELECT /*+ REPARTITION(1) */ * FROM VALUES {values}")
    oracle.call("sql", f"INSERT INTO delta.`{path}` VALUES (21, 'c'), (22, 'c')")
    return path


def _plan(snapshot: Snapshot) -> OptimizePlan:
    """Our OPTIMIZE of partitions a and b."""
    return plan_optimize(snapshot, partition_filter=[("p", "in", ["a", "b"])])


@dataclass(frozen=True)
class Written:
    """The base with the files our OPTIMIZE of a and b writes (our Spark engine, a job per bin), uncommitted.

    Written once: each case copies the table with these files, plans the same bins and commits their adds
    (the race is in the commit, not in the write); two Spark writes a case cost a second of CPU.
    """

    path: Path
    version: int  # the version our OPTIMIZE reads
    adds: dict[str, list[AddFile]]  # each bin's adds, by the files it rewrites

    def of(self, plan: OptimizePlan) -> list[tuple[Bin, list[AddFile]]]:
        """``write_bins``'s answer for ``plan`` (a plan of a copy): the same bins, the same adds."""
        assert sorted(_bin_key(b) for b in plan.bins) == sorted(self.adds), "not the plan written"
        return [(b, self.adds[_bin_key(b)]) for b in plan.bins]


def _bin_key(b: Bin) -> str:
    return "|".join(sorted(b.files.column("path").to_pylist()))


@pytest.fixture(scope="module")
def conflict_written(spark: Any, conflict_base: Path) -> Written:
    table = DeltaTable(str(copy_table(conflict_base, "written")))
    plan = _plan(table.snapshot())
    assert sorted(b.files.num_rows for b in plan.bins) == [2, 2]
    written = write_bins(spark, table, plan, list(plan.bins), {})
    assert not any(Path(a.path).is_absolute() for _, adds in written for a in adds)  # valid in every copy
    return Written(Path(table.uri), plan.snapshot.version, {_bin_key(b): adds for b, adds in written})


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
def test_optimize_conflicts_match_delta_spark(oracle: Oracle, conflict_written: Written, winner: str):
    slug = "".join(c if c.isalnum() else "-" for c in winner)
    expected = sorted(_json_row(id=i, p=p) for i, p in LEFT[winner])
    # Delta Spark late: its OPTIMIZE transaction of the files our plan compacts, with our adds, begun; then
    # the winner commits.
    table = DeltaTable(str(copy_table(conflict_written.path, f"delta-late-{slug}")))
    plan = _plan(table.snapshot())
    compact = [f["path"] for b in plan.bins for f in b.files.select(["path"]).to_pylist()]
    actions = [json.dumps({"add": a.to_json()}) for b, files in conflict_written.of(plan)
               for a in finished_adds(plan, b, files)]  # fmt: skip
    handle = oracle.call("begin_optimize", table.uri, [_log_path(p) for p in compact], actions)
    _win(oracle, table, winner)
    # Ours late: the table as the winner left it, copied before Delta Spark's OPTIMIZE commits (one winner for
    # both engines); our OPTIMIZE, planned on the version the winner read, commits after it.
    mine = DeltaTable(str(copy_table(Path(table.uri), f"ours-late-{slug}")))
    delta = _outcome(oracle.call("commit_optimize", handle).get("error"))
    plan = _plan(mine.snapshot(conflict_written.version))
    try:
        committed = commit_batch(mine, plan, conflict_written.of(plan))
        ours = _outcome(None)
    except ConcurrentModificationError as exc:
        committed, ours = None, _outcome(type(exc).__name__)
    print(f"OPTIMIZE after {winner!r}: Delta Spark {delta}, ours {ours}")
    assert ours == delta, f"OPTIMIZE after a concurrent {winner!r}: Delta Spark {delta}, ours {ours}"
    if committed is not None:  # Delta Spark reads after our OPTIMIZE the rows the winner left (one read)
        rows = oracle.call("rows", mine.uri)
        assert rows == expected, f"OPTIMIZE after a concurrent {winner!r}: {_row_diff(expected, rows)}"


def _log_path(path: str) -> str:
    """A data file's path as the log spells it (Delta Spark's AddFile.path): URI-encoded."""
    return AddFile(path, 0).to_json()["path"]
