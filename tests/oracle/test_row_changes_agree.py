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
Delta Spark's ``table_changes`` returns the same change rows, version by version, for both copies; then
Delta Spark goes on writing our copy, and deltalake reads it (``_delta_spark_goes_on``). MERGEs with NULL
keys and with several source rows matching one target row (refused by both, unless the only matched
clause is an unconditional delete) are held to the same.
"""

from __future__ import annotations

import json
import os
import random
import shutil
from pathlib import Path

import pytest
from duckdb_reader import deltalake_arrow_rows, deltalake_sql_rows
from oracle_client import Oracle, OracleError
from oracle_compare import our_rows
from oracle_depth import on_engines

from airflow_provider_delta.log import DeltaTable, MergeCardinalityError
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


# In this order, taking the engines in turn gives each engine a case with and one without deletion vectors,
# and one with and one without column mapping (``make oracle-deep`` runs all eight).
@pytest.mark.parametrize(("case", "engine"), on_engines(["dv-partitioned", "rewrite-plain",
                                                          "rewrite-column-mapping-partitioned",
                                                          "dv-column-mapping"]))
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
        _step_agrees(oracle, spark, theirs, ours, op, mine, before, f"step {step} ({steps[-1]}), seed {seed}")
    assert _changes(oracle, ours, start + 1) == _changes(oracle, theirs, start + 1), "table_changes differ"
    print(json.dumps(steps, indent=1))
    _delta_spark_goes_on(oracle, theirs, ours, to_pyarrow=not (dv or cm))


def _step_agrees(oracle: Oracle, spark, theirs: str, ours: str, op: str, mine, before: int,
                 where: str) -> None:  # fmt: skip
    """Both commit (or neither), the same version; all four reads give the same rows; the same operation
    and row counts in the metrics, and every metric Delta Spark records is in ours."""
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


def _delta_spark_goes_on(oracle: Oracle, theirs: str, ours: str, to_pyarrow: bool) -> None:
    """Delta Spark appends to both copies and reads back the same rows from each. deltalake (delta-rs) reads
    our copy as Delta Spark does: its SQL engine always, and ``to_pyarrow_table`` where it reads such a
    table at all (it refuses deletion vectors, reads column-mapped data as NULL: test_duckdb_reads_ours)."""
    for uri in (theirs, ours):
        oracle.call("sql", f"INSERT INTO delta.`{uri}` VALUES (9000, 1, 'x', 'a'), (9001, NULL, NULL, 'c')")
    rows = oracle.call("rows", theirs)
    assert oracle.call("rows", ours) == rows, "Delta Spark's append to our copy reads back differently"
    want = sorted(json.dumps(json.loads(r), sort_keys=True) for r in rows)
    readers = {"deltalake SQL": deltalake_sql_rows}
    if to_pyarrow:
        readers["deltalake to_pyarrow_table"] = deltalake_arrow_rows
    for name, read in readers.items():
        got = sorted(json.dumps({k: v for k, v in r.items() if v is not None}, sort_keys=True)
                     for r in read(ours).to_pylist())  # fmt: skip
        assert got == want, f"{name} reads our copy differently from Delta Spark"


def _values(*rows: str) -> str:
    return f"SELECT * FROM VALUES {', '.join(rows)} AS s(id, v, s, p)"


NULL_ID = "CAST(NULL AS BIGINT)"
# (what it shows, source, clauses as in _merge_step, whether both refuse)
KEY_STEPS = [
    ("NULL keys never match: NULL-keyed source rows are inserted, the NULL-keyed target row is not matched "
     "by the source",
     _values("(1L, 11L, 'n1', 'a')", f"({NULL_ID}, 99L, 'nn', 'b')", f"({NULL_ID}, 98L, 'nn2', 'c')"),
     [("matched", "update", None, None), ("notMatched", "insert", None, None),
      ("notMatchedBySource", "update", "target.id IS NULL OR target.id > 2",
       {"v": "coalesce(target.v, 0) - 1"})],
     False),
    ("two source rows match one target row: refused", _values("(2L, 5L, 'd1', 'b')", "(2L, 6L, 'd2', 'b')",
                                                             "(7L, 7L, 'd7', 'a')"),
     [("matched", "update", None, None), ("notMatched", "insert", None, None)], True),
    ("refused with a conditional delete too", _values("(2L, 5L, 'd1', 'b')", "(2L, 6L, 'd2', 'b')"),
     [("matched", "delete", "source.v > 0", None)], True),
    ("allowed when the only matched clause is an unconditional delete",
     _values("(2L, 5L, 'd1', 'b')", "(2L, 6L, 'd2', 'b')", "(8L, 8L, 'd8', 'c')"),
     [("matched", "delete", None, None), ("notMatched", "insert", None, None)], False),
]  # fmt: skip


@pytest.mark.parametrize("engine", ["spark", "arrow"])
def test_merge_null_keys_and_duplicate_matches_as_delta_spark(oracle: Oracle, spark, tmp_path: Path,
                                                              engine: str):  # fmt: skip
    """NULL keys never match (on either side); a target row matched by two source rows is refused by both
    engines (Delta Spark's DELTA_MULTIPLE_SOURCE_ROW_MATCHING_TARGET_ROW_IN_MERGE, our
    ``MergeCardinalityError``) and neither commits, unless the only matched clause is an unconditional
    delete. Then the same change rows and Delta Spark goes on writing our copy."""
    theirs, ours = str(tmp_path / "delta_spark"), str(tmp_path / "ours")
    create_empty(oracle, theirs, dv=True, cm=False, partitioned=True)
    oracle.call("sql", f"INSERT INTO delta.`{theirs}` VALUES (1, 10, 's1', 'a'), (2, 20, 's2', 'b'), "
                       "(NULL, 30, 'snull', 'c'), (3, NULL, 's3', 'a'), (4, 40, 's4', 'b')")  # fmt: skip
    shutil.copytree(theirs, ours)
    start = DeltaTable(ours).version()
    for what, source, clauses, refused in KEY_STEPS:
        where = f"{engine}: {what}: {_merge_sql('t', source, clauses)}"
        before = DeltaTable(theirs).version()
        try:
            oracle.call("sql", _merge_sql(theirs, source, clauses))
            their_error = None
        except OracleError as exc:
            their_error = exc.message
        try:
            mine = _our_merge(spark, ours, source, clauses, engine)
            our_error = None
        except MergeCardinalityError as exc:
            mine, our_error = None, str(exc)
        print(f"{what}: Delta Spark {their_error or 'committed'}; ours {our_error or 'committed'}")
        if refused:
            assert "DELTA_MULTIPLE_SOURCE_ROW_MATCHING_TARGET_ROW_IN_MERGE" in (their_error or ""), where
            assert our_error is not None, f"{where}: Delta Spark refuses, ours committed"
            versions = DeltaTable(theirs).version(), DeltaTable(ours).version()
            assert versions == (before, before), f"{where}: a refused MERGE committed: {versions}"
        else:
            assert their_error is None and our_error is None, f"{where}: {their_error} vs {our_error}"
            _step_agrees(oracle, spark, theirs, ours, "MERGE", mine, before, where)
    assert _changes(oracle, ours, start + 1) == _changes(oracle, theirs, start + 1), "table_changes differ"
    _delta_spark_goes_on(oracle, theirs, ours, to_pyarrow=False)
