"""Conflicts of our DELETE, UPDATE and MERGE as Delta Spark's checker decides them, both ways round.

Winner ours: a Delta Spark transaction begins (reading a partition, or removing a file without reading),
then a row-level command commits, then the Delta Spark transaction commits; its outcome must be the one it
has when Delta Spark's own command (the same SQL) wins instead, on a second copy of the table.

Loser ours: our command plans, then (in a hook run just before its commit; the only way to order a race
between two processes deterministically) Delta Spark commits a competing change; our outcome must be the
one Delta Spark's transaction with the same read set has against the same competitor.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from oracle_client import Oracle

from airflow_provider_delta.log import DeltaTable
from airflow_provider_delta.log.base.errors import ConcurrentModificationError
from airflow_provider_delta.spark import delete, merge, row_changes, update

SOURCE = "SELECT id, 7 AS v, 'new' AS s, 'b' AS p FROM range(1000, 1003)"
WINNERS = {  # name: (Delta Spark's SQL on {uri}, ours)
    "delete in a": ("DELETE FROM delta.`{uri}` WHERE p = 'a' AND v < 50",
                    lambda spark, uri: delete(spark, uri, "p = 'a' AND v < 50")),
    "update in a": ("UPDATE delta.`{uri}` SET s = 'u' WHERE p = 'a' AND v > 50",
                    lambda spark, uri: update(spark, uri, {"s": "'u'"}, "p = 'a' AND v > 50")),
    "merge inserting into b": (f"MERGE INTO delta.`{{uri}}` AS target USING ({SOURCE}) AS source "
                               "ON target.id = source.id WHEN NOT MATCHED THEN INSERT *",
                               lambda spark, uri: merge(spark.sql(SOURCE), uri, "target.id = source.id")
                               .when_not_matched_insert_all().execute()),
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


def _copy(template: Path, to: Path) -> str:
    shutil.copytree(template, to)
    return str(to)


def _begin(oracle: Oracle, uri: str, loser: dict) -> int:
    remove = None
    if "remove" in loser:
        files = DeltaTable(uri).snapshot().files.to_pylist()
        remove = [next(f["path"] for f in files if dict(f["partitionValues"])["p"] == loser["remove"])]
    return oracle.call("begin", uri, read=loser.get("read"), remove=remove)


@pytest.mark.parametrize("winner", list(WINNERS))
@pytest.mark.parametrize("loser", list(LOSERS))
def test_delta_spark_loses_to_ours_as_to_its_own(oracle: Oracle, spark, template: Path, tmp_path: Path,
                                                  winner: str, loser: str):  # fmt: skip
    sql, ours = WINNERS[winner]
    theirs_uri, ours_uri = _copy(template, tmp_path / "theirs"), _copy(template, tmp_path / "ours")
    handle = _begin(oracle, theirs_uri, LOSERS[loser])
    oracle.call("sql", sql.format(uri=theirs_uri))
    expected = oracle.call("commit", handle).get("error")
    handle = _begin(oracle, ours_uri, LOSERS[loser])
    ours(spark, ours_uri)
    assert oracle.call("commit", handle).get("error") == expected, f"{winner} then {loser}"


COMPETITORS = {  # Delta Spark's concurrent change: SQL on {uri}
    "blind append into a": "INSERT INTO delta.`{uri}` VALUES (5000, 1, 'x', 'a')",
    "blind append into c": "INSERT INTO delta.`{uri}` VALUES (5001, 1, 'x', 'c')",
    "delete in a": "DELETE FROM delta.`{uri}` WHERE p = 'a' AND v < 20",
}
OURS = {  # our command and the read set Delta Spark's same command records
    "delete in a": (lambda spark, uri: delete(spark, uri, "p = 'a' AND v < 50"), "p = 'a' AND v < 50"),
    "update in b": (lambda spark, uri: update(spark, uri, {"v": "0"}, "p = 'b'"), "p = 'b'"),
}


@pytest.mark.parametrize("competitor", list(COMPETITORS))
@pytest.mark.parametrize("command", list(OURS))
def test_ours_loses_to_delta_spark_as_its_own_would(oracle: Oracle, spark, template: Path, tmp_path: Path,
                                                     monkeypatch, competitor: str, command: str):  # fmt: skip
    run, predicate = OURS[command]
    theirs_uri, ours_uri = _copy(template, tmp_path / "theirs"), _copy(template, tmp_path / "ours")
    # Delta Spark's transaction with the read set of its own command: the predicate, and the files it
    # removes (those holding matching rows).
    hits = DeltaTable(theirs_uri).scan(filter=predicate, metadata=("file_path",)).to_table()
    remove = sorted(set(hits.column("_metadata").combine_chunks().field("file_path").to_pylist()))
    conjuncts = predicate.split(" AND ")  # as Delta Spark's commands split a condition before reading
    handle = oracle.call("begin", theirs_uri, read=conjuncts, remove=remove)
    oracle.call("sql", COMPETITORS[competitor].format(uri=theirs_uri))
    expected = oracle.call("commit", handle).get("error")

    class Racing(row_changes.Transaction):
        def commit(self, *args, **kwargs):
            oracle.call("sql", COMPETITORS[competitor].format(uri=ours_uri))
            return super().commit(*args, **kwargs)

    monkeypatch.setattr(row_changes, "Transaction", Racing)
    try:
        run(spark, ours_uri)
        outcome = None
    except ConcurrentModificationError as exc:
        outcome = type(exc).__name__.replace("Error", "Exception")
    assert outcome == expected, f"{command} against {competitor}"
