"""Conflicts of our DELETE, UPDATE and MERGE (the Spark engine's and the Arrow engine's in the task) as
Delta Spark's checker decides them, both ways round.

Winner ours: a Delta Spark transaction begins (reading a partition, or removing a file without reading),
then a row-level command commits, then the Delta Spark transaction commits; its outcome must be the one it
has when Delta Spark's own command (the same SQL) wins instead, on a second copy of the table.

Loser ours: our command plans, then (in a hook run just before its commit; the only way to order a race
between two processes deterministically) Delta Spark commits a competing change; our outcome must be the
one Delta Spark's transaction with the same read set has against the same competitor.

Delta Spark's outcome does not depend on our engine: each is found once per module and held to both.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from oracle_client import Oracle

from airflow_provider_delta.log import DeltaTable
from airflow_provider_delta.log.base.errors import ConcurrentModificationError
from airflow_provider_delta.log.row_changes import row_change_commit
from airflow_provider_delta.spark import delete, merge, update

ENGINES = ["spark", "arrow"]
SOURCE = "SELECT id, 7 AS v, 'new' AS s, 'b' AS p FROM range(1000, 1003)"


def _delete(spark, uri: str, engine: str, condition: str):
    return DeltaTable(uri).delete(condition) if engine == "arrow" else delete(spark, uri, condition)


def _update(spark, uri: str, engine: str, sets: dict, condition: str):
    if engine == "arrow":
        return DeltaTable(uri).update(sets, condition)
    return update(spark, uri, sets, condition)


def _insert_all(spark, uri: str, engine: str, source: str):
    on = "target.id = source.id"
    builder = DeltaTable(uri).merge(spark.sql(source).toArrow(), on) if engine == "arrow" else \
        merge(spark.sql(source), uri, on)  # fmt: skip
    return builder.when_not_matched_insert_all().execute()


WINNERS = {  # name: (Delta Spark's SQL on {uri}, ours on an engine)
    "delete in a": ("DELETE FROM delta.`{uri}` WHERE p = 'a' AND v < 50",
                    lambda spark, uri, engine: _delete(spark, uri, engine, "p = 'a' AND v < 50")),
    "update in a": ("UPDATE delta.`{uri}` SET s = 'u' WHERE p = 'a' AND v > 50",
                    lambda spark, uri, engine: _update(spark, uri, engine, {"s": "'u'"},
                                                       "p = 'a' AND v > 50")),
    "merge inserting into b": (f"MERGE INTO delta.`{{uri}}` AS target USING ({SOURCE}) AS source "
                               "ON target.id = source.id WHEN NOT MATCHED THEN INSERT *",
                               lambda spark, uri, engine: _insert_all(spark, uri, engine, SOURCE)),
}  # fmt: skip
LOSERS = {"reads a": {"read": "p = 'a'"}, "reads b": {"read": "p = 'b'"}, "reads c": {"read": "p = 'c'"},
          "removes a file of a": {"remove": "a"}}  # fmt: skip


@pytest.fixture(scope="module")
def template(oracle: Oracle, tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("conflicts") / "template"
    props = "TBLPROPERTIES ('delta.enableDeletionVectors' = 'true')"
    oracle.call("sql", f"CREATE TABLE delta.`{path}` (id BIGINT, v BIGINT, s STRING, p STRING) USING "
                       f"delta PARTITIONED BY (p) {props}")  # fmt: skip
    oracle.call("sql", f"INSERT INTO delta.`{path}` SELECT id, id % 100, concat('s', id), char(97 + id % 3) "
                       "FROM range(0, 300, 1, 2)")  # fmt: skip
    return path


@pytest.fixture(scope="module")
def delta_spark_outcomes() -> dict[tuple[str, str, str], str | None]:
    """Delta Spark's outcome of each race (its own command in ours' place), found by the first engine."""
    return {}


def _copy(template: Path, to: Path) -> str:
    shutil.copytree(template, to)
    return str(to)


def _begin(oracle: Oracle, uri: str, loser: dict) -> int:
    remove = None
    if "remove" in loser:
        files = DeltaTable(uri).snapshot().files.to_pylist()
        remove = [next(f["path"] for f in files if dict(f["partitionValues"])["p"] == loser["remove"])]
    return oracle.call("begin", uri, read=loser.get("read"), remove=remove)


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("winner", list(WINNERS))
@pytest.mark.parametrize("loser", list(LOSERS))
def test_delta_spark_loses_to_ours_as_to_its_own(oracle: Oracle, spark, template: Path, tmp_path: Path,
                                                  delta_spark_outcomes, winner: str, loser: str,
                                                  engine: str):  # fmt: skip
    sql, ours = WINNERS[winner]
    if ("wins", winner, loser) not in delta_spark_outcomes:
        theirs_uri = _copy(template, tmp_path / "theirs")
        handle = _begin(oracle, theirs_uri, LOSERS[loser])
        oracle.call("sql", sql.format(uri=theirs_uri))
        delta_spark_outcomes["wins", winner, loser] = oracle.call("commit", handle).get("error")
    expected = delta_spark_outcomes["wins", winner, loser]
    ours_uri = _copy(template, tmp_path / "ours")
    handle = _begin(oracle, ours_uri, LOSERS[loser])
    assert ours(spark, ours_uri, engine).version is not None, f"{engine}: {winner} committed nothing"
    assert oracle.call("commit", handle).get("error") == expected, f"{engine}: {winner} then {loser}"


COMPETITORS = {  # Delta Spark's concurrent change: SQL on {uri}
    "blind append into a": "INSERT INTO delta.`{uri}` VALUES (5000, 1, 'x', 'a')",
    "blind append into c": "INSERT INTO delta.`{uri}` VALUES (5001, 1, 'x', 'c')",
    "delete in a": "DELETE FROM delta.`{uri}` WHERE p = 'a' AND v < 20",
}
UPSERT_B = "SELECT id, 7L AS v, 'm' AS s, 'b' AS p FROM VALUES (1L), (4L), (1000L) AS t(id)"  # 1, 4 in b


def _upsert_into_b(spark, uri: str, engine: str):
    """A MERGE whose ON condition confines the target to partition b (Delta Spark reads ``p = 'b'``)."""
    on = "target.id = source.id AND target.p = 'b'"
    builder = DeltaTable(uri).merge(spark.sql(UPSERT_B).toArrow(), on) if engine == "arrow" else \
        merge(spark.sql(UPSERT_B), uri, on)  # fmt: skip
    return builder.when_matched_update_all().when_not_matched_insert_all().execute()


OURS = {  # our command on an engine; the read set Delta Spark's same command records; the rows it changes
    "delete in a": (lambda spark, uri, engine: _delete(spark, uri, engine, "p = 'a' AND v < 50"),
                    "p = 'a' AND v < 50", "p = 'a' AND v < 50"),
    "update in b": (lambda spark, uri, engine: _update(spark, uri, engine, {"v": "0"}, "p = 'b'"), "p = 'b'",
                    "p = 'b'"),
    "merge into b": (_upsert_into_b, "p = 'b'", "p = 'b' AND id IN (1, 4)"),
}  # fmt: skip
@pytest.mark.parametrize("competitor", list(COMPETITORS))
@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("command", list(OURS))
def test_ours_loses_to_delta_spark_as_its_own_would(oracle: Oracle, spark, template: Path, tmp_path: Path,
                                                     monkeypatch, delta_spark_outcomes, competitor: str,
                                                     command: str, engine: str):  # fmt: skip
    run, predicate, changed = OURS[command]
    if ("loses", command, competitor) not in delta_spark_outcomes:
        # Delta Spark's transaction with the read set of its own command: the predicate, and the files it
        # removes (those holding rows it changes).
        theirs_uri = _copy(template, tmp_path / "theirs")
        hits = DeltaTable(theirs_uri).scan(filter=changed, metadata=("file_path",)).to_table()
        remove = sorted(set(hits.column("_metadata").combine_chunks().field("file_path").to_pylist()))
        conjuncts = predicate.split(" AND ")  # as Delta Spark's commands split a condition before reading
        handle = oracle.call("begin", theirs_uri, read=conjuncts, remove=remove)
        oracle.call("sql", COMPETITORS[competitor].format(uri=theirs_uri))
        delta_spark_outcomes["loses", command, competitor] = oracle.call("commit", handle).get("error")
    expected = delta_spark_outcomes["loses", command, competitor]
    ours_uri = _copy(template, tmp_path / "ours")
    raced = []

    class Racing(row_change_commit.Transaction):  # both engines commit through row_change_commit.commit
        def commit(self, *args, **kwargs):
            oracle.call("sql", COMPETITORS[competitor].format(uri=ours_uri))
            raced.append(True)
            return super().commit(*args, **kwargs)

    monkeypatch.setattr(row_change_commit, "Transaction", Racing)
    try:
        run(spark, ours_uri, engine)
        outcome = None
    except ConcurrentModificationError as exc:
        outcome = type(exc).__name__.replace("Error", "Exception")
    assert raced, f"{engine}: {command} never reached its commit"
    assert outcome == expected, f"{engine}: {command} against {competitor}"
