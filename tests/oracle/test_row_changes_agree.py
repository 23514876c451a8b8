"""Our DELETE, UPDATE and MERGE, on Spark and on Arrow in the task, against Delta Spark 4.4's own, on two
copies of one table.

Delta Spark creates a table (change data feed on; deletion vectors on or off; column mapping on or off;
partitioned or not) and fills it; the table is copied. A seeded random workload of DELETEs, UPDATEs and
MERGEs (conditions on data and partition columns, every MERGE clause kind) then runs step by step: Delta
Spark's SQL on one copy, our ``delete``/``update``/``merge`` on the other (the Spark engine's, or
``DeltaTable.delete``/``update``/``merge`` on Arrow with the source collected from the same query). After
each step both engines read both copies (Delta Spark reads ours, we read Delta Spark's) and all four give
the same rows; both
commit (or neither does) with the same operation and the same row counts in their metrics. At the end
Delta Spark's ``table_changes`` returns the same change rows, version by version, for both copies.
"""

from __future__ import annotations

import json
import os
import random
import shutil
from pathlib import Path

import pytest
from oracle_client import Oracle
from oracle_compare import our_rows

from airflow_provider_delta.log import DeltaTable
from airflow_provider_delta.spark import delete, merge, update

SEED = int(os.environ.get("ROW_CHANGES_SEED", "1414"))
# Three commands per layout in `make test`, one DELETE, one UPDATE and one MERGE in a random order (each runs
# on both engines and is compared whole; tests/spark and the conflict matrix cover each clause kind alone);
# ROW_CHANGES_STEPS=20 ROW_CHANGES_SEED=<n> for a deeper run.
STEPS = int(os.environ.get("ROW_CHANGES_STEPS", "3"))
CASES = {  # name: (deletion vectors, column mapping, partitioned)
    "dv-partitioned": (True, False, True),
    "rewrite-plain": (False, False, False),
    "dv-column-mapping": (True, True, False),
    "rewrite-column-mapping-partitioned": (False, True, True),
}
# Metrics that count rows: equal in both engines (times and bytes are not).
ROW_METRICS = {
    "DELETE": ("numDeletedRows",),
    "UPDATE": ("numUpdatedRows",),
    "MERGE": ("numSourceRows", "numTargetRowsInserted", "numTargetRowsUpdated", "numTargetRowsDeleted",
              "numTargetRowsMatchedUpdated", "numTargetRowsMatchedDeleted",
              "numTargetRowsNotMatchedBySourceUpdated", "numTargetRowsNotMatchedBySourceDeleted"),
}  # fmt: skip
CONDITIONS = ["v < {k}", "id % {m} = {r}", "p = '{p}'", "p = '{p}' AND v > {k}", "s LIKE 's1%'",
              "v IS NULL OR v > {k}", "id BETWEEN {k} AND {k2}"]  # fmt: skip


def _condition(rng: random.Random) -> str:
    k = rng.randrange(0, 100)
    return rng.choice(CONDITIONS).format(k=k, k2=k + rng.randrange(5, 60), m=rng.randrange(2, 7),
                                         r=rng.randrange(0, 2), p=rng.choice("abc"))  # fmt: skip


def _create(oracle: Oracle, uri: str, dv: bool, cm: bool, partitioned: bool) -> None:
    create_empty(oracle, uri, dv, cm, partitioned)
    for lo, hi in [(0, 60), (60, 130), (130, 200)]:
        oracle.call("sql", f"INSERT INTO delta.`{uri}` SELECT id, CASE WHEN id % 11 = 0 THEN NULL ELSE "
                           f"(id * 37) % 100 END, concat('s', id), char(97 + id % 3) "
                           f"FROM range({lo}, {hi}, 1, 2)")  # fmt: skip


def create_empty(oracle: Oracle, uri: str, dv: bool, cm: bool, partitioned: bool) -> None:
    """Delta Spark creates the table (id, v, s, p) with change data on; shared with test_changes_agree."""
    props = {"delta.enableChangeDataFeed": "true", "delta.enableDeletionVectors": str(dv).lower()}
    if cm:
        props["delta.columnMapping.mode"] = "name"
    shown = ", ".join(f"'{k}' = '{v}'" for k, v in props.items())
    by = " PARTITIONED BY (p)" if partitioned else ""
    oracle.call("sql", f"CREATE TABLE delta.`{uri}` (id BIGINT, v BIGINT, s STRING, p STRING) USING delta"
                       f"{by} TBLPROPERTIES ({shown})")  # fmt: skip


def _source_sql(rng: random.Random) -> str:
    lo = rng.randrange(0, 220)
    n = rng.randrange(5, 50)
    shift = rng.randrange(3)
    return (f"SELECT id, (id * 13) % 100 AS v, concat('n', id) AS s, char(97 + (id + {shift}) % 3) AS p "
            f"FROM range({lo}, {lo + n})")  # fmt: skip


def _merge_step(rng: random.Random) -> tuple[str, list[tuple[str, str, str | None, dict | None]]]:
    """A source query and clauses as (kind, action, condition, assignments); None assignments are ``*``."""
    k = rng.randrange(0, 100)
    templates = [
        [("matched", "update", None, None), ("notMatched", "insert", None, None)],
        [("matched", "delete", f"source.v < {k}", None), ("matched", "update", None, {"v": "source.v + 1"}),
         ("notMatched", "insert", "source.id % 2 = 0", None)],
        [("matched", "update", None, {"s": "concat(target.s, source.s)"}),
         ("notMatchedBySource", "delete", f"target.v > {k}", None)],
        [("notMatched", "insert", None, {"id": "source.id", "s": "'ins'", "p": "source.p"}),
         ("notMatchedBySource", "update", "target.id % 5 = 0", {"v": "coalesce(target.v, 0) + 100"})],
    ]  # fmt: skip
    return _source_sql(rng), rng.choice(templates)


def _merge_sql(uri: str, source: str, clauses: list) -> str:
    words = {"matched": "WHEN MATCHED", "notMatched": "WHEN NOT MATCHED",
             "notMatchedBySource": "WHEN NOT MATCHED BY SOURCE"}  # fmt: skip
    parts = [f"MERGE INTO delta.`{uri}` AS target USING ({source}) AS source ON target.id = source.id"]
    for kind, action, cond, sets in clauses:
        head = words[kind] + (f" AND {cond}" if cond else "") + " THEN "
        if action == "delete":
            parts.append(head + "DELETE")
        elif action == "update":
            parts.append(head + ("UPDATE SET *" if sets is None else
                                 "UPDATE SET " + ", ".join(f"{c} = {e}" for c, e in sets.items())))
        else:
            parts.append(head + ("INSERT *" if sets is None else
                                 f"INSERT ({', '.join(sets)}) VALUES ({', '.join(sets.values())})"))
    return " ".join(parts)


def _our_merge(spark, uri: str, source: str, clauses: list, engine: str):
    if engine == "arrow":
        builder = DeltaTable(uri).merge(spark.sql(source).toArrow(), "target.id = source.id")
    else:
        builder = merge(spark.sql(source), uri, "target.id = source.id")
    for kind, action, cond, sets in clauses:
        if kind == "matched" and action == "update":
            builder = builder.when_matched_update_all(cond) if sets is None else \
                builder.when_matched_update(sets, cond)  # fmt: skip
        elif kind == "matched":
            builder = builder.when_matched_delete(cond)
        elif kind == "notMatched":
            builder = builder.when_not_matched_insert_all(cond) if sets is None else \
                builder.when_not_matched_insert(sets, cond)  # fmt: skip
        elif action == "update":
            builder = builder.when_not_matched_by_source_update(sets, cond)
        else:
            builder = builder.when_not_matched_by_source_delete(cond)
    return builder.execute()


def _changes(oracle: Oracle, uri: str, start: int) -> list[str]:
    return sorted(oracle.call("sql", f"SELECT id, v, s, p, _change_type, _commit_version FROM "
                                     f"table_changes_by_path('{uri}', {start})"))  # fmt: skip


@pytest.mark.parametrize("engine", ["spark", "arrow"])
@pytest.mark.parametrize("case", list(CASES))
def test_random_row_changes_agree_with_delta_spark(oracle: Oracle, spark, tmp_path: Path, case: str,
                                                   engine: str):  # fmt: skip
    dv, cm, partitioned = CASES[case]
    seed = SEED + list(CASES).index(case) + (100 if engine == "arrow" else 0)
    print(f"seed {seed} (ROW_CHANGES_SEED={SEED}), case {case}, engine {engine}")
    rng = random.Random(seed)
    theirs, ours = str(tmp_path / "delta_spark"), str(tmp_path / "ours")
    _create(oracle, theirs, dv, cm, partitioned)
    shutil.copytree(theirs, ours)
    start = DeltaTable(ours).version()
    steps = []
    # Each command kind once first (in a random order), so every layout runs all three; then at random.
    kinds = rng.sample(["DELETE", "UPDATE", "MERGE"], 3)
    for step in range(STEPS):
        op = kinds[step] if step < len(kinds) else rng.choice(["DELETE", "UPDATE", "MERGE", "MERGE"])
        before = DeltaTable(theirs).version()
        if op == "DELETE":
            cond = _condition(rng)
            steps.append(f"DELETE WHERE {cond}")
            oracle.call("sql", f"DELETE FROM delta.`{theirs}` WHERE {cond}")
            mine = DeltaTable(ours).delete(cond) if engine == "arrow" else delete(spark, ours, cond)
        elif op == "UPDATE":
            cond = _condition(rng)
            sets = rng.choice([{"v": "v + 1000"}, {"s": "concat(s, 'u')"}, {"p": "'c'", "v": "NULL"}])
            steps.append(f"UPDATE SET {sets} WHERE {cond}")
            assignments = ", ".join(f"{c} = {e}" for c, e in sets.items())
            oracle.call("sql", f"UPDATE delta.`{theirs}` SET {assignments} WHERE {cond}")
            mine = DeltaTable(ours).update(sets, cond) if engine == "arrow" else \
                update(spark, ours, sets, cond)  # fmt: skip
        else:
            source, clauses = _merge_step(rng)
            steps.append(_merge_sql("t", source, clauses))
            oracle.call("sql", _merge_sql(theirs, source, clauses))
            mine = _our_merge(spark, ours, source, clauses, engine)
        where = f"step {step} ({steps[-1]}), seed {seed}"
        after = DeltaTable(theirs).version()
        assert (mine.version is not None) == (after > before), f"{where}: one engine committed, the other not"
        assert DeltaTable(ours).version() == after, where
        rows = oracle.call("rows", theirs)
        assert oracle.call("rows", ours) == rows, f"{where}: Delta Spark reads different rows from our copy"
        assert our_rows(spark, theirs) == rows == our_rows(spark, ours), f"{where}: our reads differ"
        if mine.version is not None:
            theirs_info = oracle.call("history", theirs)[0]
            assert theirs_info["operation"] == op, where
            expected = {k: int(theirs_info["operationMetrics"][k]) for k in ROW_METRICS[op]}
            assert {k: mine.metrics[k] for k in ROW_METRICS[op]} == expected, where
            ours_info = DeltaTable(ours).history(1)[0].commit_info
            missing = set(theirs_info["operationMetrics"]) - set(ours_info["operationMetrics"])
            assert not missing, f"{where}: metrics Delta Spark records and we do not: {sorted(missing)}"
    assert _changes(oracle, ours, start + 1) == _changes(oracle, theirs, start + 1), "table_changes differ"
    print(json.dumps(steps, indent=1))
