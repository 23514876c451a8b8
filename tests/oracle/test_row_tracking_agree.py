"""Row ids after our DELETE, UPDATE and MERGE, judged by Delta Spark 4.4 ("Row Tracking").

Delta Spark creates a table that tracks row ids (deletion vectors on, or off so that touched files are
rewritten) and fills it in two commits; the table is copied. The same DELETE, UPDATE and MERGE (updates,
inserts, deletes of rows the source does not match) then run on both copies: Delta Spark's SQL on one,
ours on the other (the Spark engine's, or ``DeltaTable.delete``/``update``/``merge`` on Arrow; Delta
Spark's copy is made once for both). After each step Delta Spark reads ``_metadata.row_id`` and
``row_commit_version`` of every row of both copies: rows that existed before must have the same id and
version in both (kept ids, the commit's version for updated rows); rows the MERGE inserts must have the same
version in both and ids that no other row has, above every id the table gave before (which ids exactly
depends on how each engine splits the rows into files). Delta Spark then goes on writing to our copy and
ids stay unique.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest
from oracle_client import Oracle

from airflow_provider_delta.log import DeltaTable
from airflow_provider_delta.spark import delete, merge, update

TRACKED = "SELECT id, v, _metadata.row_id AS row_id, _metadata.row_commit_version AS rv FROM delta.`{t}`"
SOURCE = "SELECT id, id % 9 AS v, concat('m', id) AS s, char(97 + id % 2) AS p FROM range(150, 260)"
DELETE = "v = 3 AND id > 20"
UPDATE = ({"v": "v + 100"}, "id % 4 = 1")
SQL = {  # Delta Spark's statements on {t}; ours are the same (``_ours``)
    "DELETE": f"DELETE FROM delta.`{{t}}` WHERE {DELETE}",
    "UPDATE": f"UPDATE delta.`{{t}}` SET v = v + 100 WHERE {UPDATE[1]}",
    "MERGE": "MERGE INTO delta.`{t}` AS target USING (" + SOURCE + ") AS source ON target.id = source.id "
             "WHEN MATCHED AND source.v = 0 THEN DELETE WHEN MATCHED THEN UPDATE SET * "
             "WHEN NOT MATCHED THEN INSERT * WHEN NOT MATCHED BY SOURCE AND target.id < 10 THEN DELETE",
}  # fmt: skip


def _tracked(oracle: Oracle, path: str) -> dict[int, tuple[int, int, int]]:
    return {r["id"]: (r["v"], r["row_id"], r["rv"]) for r in oracle.sql(TRACKED.format(t=path))}


def _mark(path: str) -> int:
    domain = DeltaTable(path).snapshot().domain_metadata.get("delta.rowTracking")
    return json.loads(domain.configuration)["rowIdHighWaterMark"]


def _ours(spark, uri: str, op: str, engine: str):
    """Our command of the step ``op`` on ``uri``, on the Spark engine or on Arrow in the task."""
    table = DeltaTable(uri)
    if op == "DELETE":
        return table.delete(DELETE) if engine == "arrow" else delete(spark, uri, DELETE)
    if op == "UPDATE":
        return table.update(*UPDATE) if engine == "arrow" else update(spark, uri, *UPDATE)
    on = "target.id = source.id"
    builder = table.merge(spark.sql(SOURCE).toArrow(), on) if engine == "arrow" else \
        merge(spark.sql(SOURCE), uri, on)  # fmt: skip
    return (builder.when_matched_delete("source.v = 0").when_matched_update_all()
            .when_not_matched_insert_all().when_not_matched_by_source_delete("target.id < 10").execute())


@dataclass(frozen=True)
class Truth:
    """One step on Delta Spark's copy: the rows before it, the mark before it, the rows after, the version."""

    before: dict[int, tuple[int, int, int]]
    mark: int
    after: dict[int, tuple[int, int, int]]
    version: int


@pytest.fixture(scope="module")
def delta_spark_steps(oracle: Oracle, tmp_path_factory: pytest.TempPathFactory):
    """Per layout, once for the module (both engines are held to it): the table Delta Spark made (``base``,
    copied for ours) and what its own DELETE, UPDATE and MERGE did to a copy of it."""
    made: dict[bool, tuple[Path, list[Truth]]] = {}

    def steps(dv: bool) -> tuple[Path, list[Truth]]:
        if dv not in made:
            base = tmp_path_factory.mktemp("row_tracking") / "base"
            oracle.call("sql", f"CREATE TABLE delta.`{base}` (id BIGINT, v BIGINT, s STRING, p STRING) USING "
                               f"delta PARTITIONED BY (p) TBLPROPERTIES ('delta.enableRowTracking' = 'true', "
                               f"'delta.enableDeletionVectors' = '{str(dv).lower()}')")  # fmt: skip
            for lo, hi in [(0, 120), (120, 200)]:
                oracle.call("sql", f"INSERT INTO delta.`{base}` SELECT id, id % 7, concat('s', id), "
                                   f"char(97 + id % 2) FROM range({lo}, {hi}, 1, 3)")  # fmt: skip
            theirs = base.with_name("delta_spark")
            shutil.copytree(base, theirs)
            truths = []
            for sql in SQL.values():
                before, mark = _tracked(oracle, str(theirs)), _mark(str(theirs))
                oracle.call("sql", sql.format(t=theirs))
                after = _tracked(oracle, str(theirs))
                truths.append(Truth(before, mark, after, DeltaTable(str(theirs)).version()))
            made[dv] = base, truths
        return made[dv]

    return steps


@pytest.mark.parametrize("engine", ["spark", "arrow"])
@pytest.mark.parametrize("dv", [True, False], ids=["deletion-vectors", "rewrite"])
def test_row_ids_after_our_row_changes_are_delta_sparks(oracle: Oracle, spark, tmp_path: Path,
                                                        delta_spark_steps, dv: bool,
                                                        engine: str):  # fmt: skip
    base, truths = delta_spark_steps(dv)
    ours = str(tmp_path / "ours")
    shutil.copytree(base, ours)
    for op, truth in zip(SQL, truths, strict=True):
        where = f"{engine}: {op}"
        mark = truth.mark
        assert _mark(ours) == mark, f"{where}: the engines start from different high-water marks"
        version = _ours(spark, ours, op, engine).version
        assert version == truth.version, f"{where}: the engines committed different versions"
        want, got = truth.after, _tracked(oracle, ours)
        assert sorted(want) == sorted(got), f"{where}: different rows"
        old = {i: r for i, r in want.items() if i in truth.before}
        assert {i: got[i] for i in old} == old, f"{where}: kept ids or versions differ"
        new = [i for i in want if i not in truth.before]
        assert [want[i][::2] for i in new] == [got[i][::2] for i in new], f"{where}: inserted rows differ"
        assert all(got[i][1] > mark for i in new), f"{where}: an inserted row reuses an id at or below {mark}"
        assert len({r[1] for r in got.values()}) == len(got), f"{where}: a row id is given twice"
        print(f"{where}: {len(old)} old rows agree, {len(new)} inserted; our mark {_mark(ours)}")
    # Delta Spark goes on writing to our copy: fresh ids stay above ours.
    oracle.call("sql", f"INSERT INTO delta.`{ours}` VALUES (5000, 1, 'x', 'a')")
    after = _tracked(oracle, ours)
    assert len({r[1] for r in after.values()}) == len(after)
