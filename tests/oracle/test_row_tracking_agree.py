"""Row ids after our DELETE, UPDATE and MERGE, judged by Delta Spark 4.4 ("Row Tracking").

Delta Spark creates a table that tracks row ids (deletion vectors on, or off so that touched files are
rewritten) and fills it in two commits; the table is copied. The same DELETE, UPDATE and MERGE (updates,
inserts, deletes of rows the source does not match) then run on both copies: Delta Spark's SQL on one,
ours on the other. After each step Delta Spark reads ``_metadata.row_id`` and ``row_commit_version`` of
every row of both copies: rows that existed before must have the same id and version in both (kept ids,
the commit's version for updated rows); rows the MERGE inserts must have the same version in both and ids
that no other row has, above every id the table gave before (which ids exactly depends on how each engine
splits the rows into files). Delta Spark then goes on writing to our copy and ids stay unique.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from oracle_client import Oracle

from airflow_provider_delta.log import DeltaTable
from airflow_provider_delta.spark import delete, merge, update

TRACKED = "SELECT id, v, _metadata.row_id AS row_id, _metadata.row_commit_version AS rv FROM delta.`{t}`"
SOURCE = "SELECT id, id % 9 AS v, concat('m', id) AS s, char(97 + id % 2) AS p FROM range(150, 260)"
MERGE = ("MERGE INTO delta.`{t}` AS target USING ({source}) AS source ON target.id = source.id "
         "WHEN MATCHED AND source.v = 0 THEN DELETE WHEN MATCHED THEN UPDATE SET * "
         "WHEN NOT MATCHED THEN INSERT * WHEN NOT MATCHED BY SOURCE AND target.id < 10 THEN DELETE")


def _tracked(oracle: Oracle, path: str) -> dict[int, tuple[int, int, int]]:
    return {r["id"]: (r["v"], r["row_id"], r["rv"]) for r in oracle.sql(TRACKED.format(t=path))}


def _mark(path: str) -> int:
    domain = DeltaTable(path).snapshot().domain_metadata.get("delta.rowTracking")
    return json.loads(domain.configuration)["rowIdHighWaterMark"]


@pytest.mark.parametrize("dv", [True, False], ids=["deletion-vectors", "rewrite"])
def test_row_ids_after_our_row_changes_are_delta_sparks(oracle: Oracle, spark, tmp_path: Path, dv: bool):
    theirs, ours = str(tmp_path / "delta_spark"), str(tmp_path / "ours")
    oracle.call("sql", f"CREATE TABLE delta.`{theirs}` (id BIGINT, v BIGINT, s STRING, p STRING) USING delta "
                       f"PARTITIONED BY (p) TBLPROPERTIES ('delta.enableRowTracking' = 'true', "
                       f"'delta.enableDeletionVectors' = '{str(dv).lower()}')")  # fmt: skip
    for lo, hi in [(0, 120), (120, 200)]:
        oracle.call("sql", f"INSERT INTO delta.`{theirs}` SELECT id, id % 7, concat('s', id), "
                           f"char(97 + id % 2) FROM range({lo}, {hi}, 1, 3)")  # fmt: skip
    shutil.copytree(theirs, ours)
    steps = [
        ("DELETE", f"DELETE FROM delta.`{theirs}` WHERE v = 3 AND id > 20",
         lambda: delete(spark, ours, "v = 3 AND id > 20")),
        ("UPDATE", f"UPDATE delta.`{theirs}` SET v = v + 100 WHERE id % 4 = 1",
         lambda: update(spark, ours, {"v": "v + 100"}, "id % 4 = 1")),
        ("MERGE", MERGE.format(t=theirs, source=SOURCE),
         lambda: merge(spark.sql(SOURCE), ours, "target.id = source.id").when_matched_delete("source.v = 0")
         .when_matched_update_all().when_not_matched_insert_all()
         .when_not_matched_by_source_delete("target.id < 10").execute()),
    ]  # fmt: skip
    for op, sql, ours_op in steps:
        before = _tracked(oracle, theirs)
        mark = _mark(theirs)
        assert _mark(ours) == mark, f"{op}: the engines start from different high-water marks"
        oracle.call("sql", sql)
        version = ours_op().version
        assert version == DeltaTable(theirs).version(), f"{op}: the engines committed different versions"
        want, got = _tracked(oracle, theirs), _tracked(oracle, ours)
        assert sorted(want) == sorted(got), f"{op}: different rows"
        old = {i: r for i, r in want.items() if i in before}
        assert {i: got[i] for i in old} == old, f"{op}: kept ids or versions differ"
        new = [i for i in want if i not in before]
        assert [want[i][::2] for i in new] == [got[i][::2] for i in new], f"{op}: inserted rows differ"
        assert all(got[i][1] > mark for i in new), f"{op}: an inserted row reuses an id at or below {mark}"
        assert len({r[1] for r in got.values()}) == len(got), f"{op}: a row id is given twice"
        print(f"{op}: {len(old)} old rows agree, {len(new)} inserted; marks {_mark(theirs)} / {_mark(ours)}")
    # Delta Spark goes on writing to our copy: fresh ids stay above ours.
    oracle.call("sql", f"INSERT INTO delta.`{ours}` VALUES (5000, 1, 'x', 'a')")
    after = _tracked(oracle, ours)
    assert len({r[1] for r in after.values()}) == len(after)
