"""Our change reads (``DeltaTable.changes``) against Delta Spark 4.4's ``table_changes``, on tables Delta
Spark wrote with seeded workloads (the change data feed on): INSERTs, DELETEs, UPDATEs and MERGEs, with
deletion vectors (partitioned) and without (rewrites, column mapping). For many random ranges, by version
and by timestamp, both return the same rows: columns, ``_change_type``, ``_commit_version`` and
``_commit_timestamp``. One Delta Spark table per case, so the oracle's cost stays a few queries per range.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import random
from pathlib import Path

import pytest
from oracle_client import Oracle, OracleError
from test_row_changes_agree import create_empty as _create

from airflow_provider_delta.log import DeltaTable
from airflow_provider_delta.log.base.errors import IncompatibleSchemaChangeError

SEED = int(os.environ.get("CHANGES_SEED", "1616"))
STEPS = int(os.environ.get("CHANGES_STEPS", "8"))
RANGES = int(os.environ.get("CHANGES_RANGES", "6"))
CASES = {  # name: (deletion vectors, column mapping, partitioned)
    "dv-partitioned": (True, False, True),
    "rewrite-column-mapping": (False, True, False),
}
COLUMNS = ("id", "v", "s", "p")


def _step(rng: random.Random, uri: str, i: int) -> str:
    k = rng.randrange(0, 100)
    lo = rng.randrange(0, 150)
    kind = rng.choice(["insert", "insert", "delete", "update", "merge"]) if i else "insert"
    if kind == "insert":
        return (f"INSERT INTO delta.`{uri}` SELECT id, (id * 37) % 100, concat('s', id), char(97 + id % 3) "
                f"FROM range({lo}, {lo + rng.randrange(10, 60)}, 1, 2)")  # fmt: skip
    if kind == "delete":
        return f"DELETE FROM delta.`{uri}` WHERE v < {k // 3} OR id % {rng.randrange(5, 9)} = 0"
    if kind == "update":
        return f"UPDATE delta.`{uri}` SET v = v + 1, s = concat(s, 'u') WHERE id % {rng.randrange(3, 7)} = 1"
    source = (f"SELECT id, (id * 13) % 100 AS v, concat('n', id) AS s, char(97 + id % 3) AS p "
              f"FROM range({lo}, {lo + rng.randrange(5, 40)})")  # fmt: skip
    return (f"MERGE INTO delta.`{uri}` AS t USING ({source}) AS src ON t.id = src.id "
            f"WHEN MATCHED AND src.v < {k} THEN DELETE WHEN MATCHED THEN UPDATE SET * "
            "WHEN NOT MATCHED THEN INSERT *")


def _theirs(oracle: Oracle, uri: str, start: str, end: str) -> list[tuple]:
    rows = oracle.call("sql", f"SELECT {', '.join(COLUMNS)}, _change_type, _commit_version, "
                              f"unix_millis(_commit_timestamp) AS ts FROM table_changes_by_path('{uri}', "
                              f"{start}, {end})")  # fmt: skip
    return sorted(tuple(json.loads(r).get(c) for c in (*COLUMNS, "_change_type", "_commit_version", "ts"))
                  for r in rows)  # fmt: skip


def _ours(table: DeltaTable, start, end) -> list[tuple]:
    rows = table.changes(start, end).to_table().to_pylist()
    return sorted((*(r[c] for c in COLUMNS), r["_change_type"], r["_commit_version"],
                   int(r["_commit_timestamp"].timestamp() * 1000)) for r in rows)  # fmt: skip


def _sql_timestamp(ms: int) -> str:
    return "'" + dt.datetime.fromtimestamp(ms / 1000, dt.UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + "'"


@pytest.mark.parametrize("case", list(CASES))
def test_changes_agree_with_table_changes(oracle: Oracle, tmp_path: Path, case: str):
    dv, cm, partitioned = CASES[case]
    seed = SEED + list(CASES).index(case)
    print(f"seed {seed} (CHANGES_SEED={SEED}), case {case}")
    rng = random.Random(seed)
    uri = str(tmp_path / "t")
    _create(oracle, uri, dv, cm, partitioned)
    for i in range(STEPS):
        oracle.call("sql", _step(rng, uri, i))
    table = DeltaTable(uri)
    latest = table.version()
    history = sorted((h.version, h.timestamp) for h in table.history())
    kinds = {op for h in table.history() for op in [h.operation]}
    assert kinds & {"DELETE", "UPDATE", "MERGE"}, f"seed {seed}: the workload changed no rows ({kinds})"
    assert any(table.changes(1).versions[i].cdc.num_rows for i in range(latest)) or dv
    # By version: random ranges, and the whole history.
    ranges = [(1, latest)] + [tuple(sorted(rng.sample(range(1, latest + 1), 2))) for _ in range(RANGES)]
    for start, end in ranges:
        ours = _ours(table, start, end)
        assert ours == _theirs(oracle, uri, str(start), str(end)), (seed, start, end)
        assert ours or (start, end) != (1, latest)
        assert {r[4] for r in ours} <= {"insert", "delete", "update_preimage", "update_postimage"}
    # By timestamp: random instants between the first and the last commit (Delta Spark resolves the start
    # to the first commit at or after it, the end to the last at or before it).
    first_ms, last_ms = history[1][1], history[-1][1]
    for _ in range(RANGES // 2):
        a, b = sorted(rng.randint(first_ms - 5, last_ms) for _ in range(2))
        when = [dt.datetime.fromtimestamp(x / 1000, dt.UTC) for x in (a, b)]
        ours = _ours(table, *when)
        assert ours == _theirs(oracle, uri, _sql_timestamp(a), _sql_timestamp(b)), (seed, a, b)


def test_schema_changes_inside_a_range_agree_with_table_changes(oracle: Oracle, tmp_path: Path):
    """A column-mapping table (Delta Spark reads its change data in the end version's schema): an ADD COLUMN
    inside a range reads the same rows (null before it), a RENAME COLUMN inside one is refused by both, and
    a range starting at the rename reads the same rows in the new names."""
    uri = str(tmp_path / "t")
    statements = [
        f"CREATE TABLE delta.`{uri}` (id BIGINT, s STRING) USING delta TBLPROPERTIES ("
        "'delta.enableChangeDataFeed' = 'true', 'delta.columnMapping.mode' = 'name')",  # v0
        f"INSERT INTO delta.`{uri}` VALUES (1, 'a'), (2, 'b')",  # v1
        f"ALTER TABLE delta.`{uri}` ADD COLUMNS (n BIGINT)",  # v2
        f"INSERT INTO delta.`{uri}` VALUES (3, 'c', 30)",  # v3
        f"UPDATE delta.`{uri}` SET n = 10 WHERE id = 1",  # v4: change data files, an older file's row
        f"ALTER TABLE delta.`{uri}` RENAME COLUMN s TO label",  # v5
        f"INSERT INTO delta.`{uri}` VALUES (4, 'd', 40)",  # v6
    ]
    for sql in statements:
        oracle.call("sql", sql)
    table = DeltaTable(uri)
    assert table.version() == 6

    def rows(start: int, end: int, columns: tuple[str, ...]) -> tuple[list[tuple], list[tuple]]:
        theirs = oracle.call("sql", f"SELECT {', '.join(columns)}, _change_type, _commit_version FROM "
                                    f"table_changes_by_path('{uri}', {start}, {end})")  # fmt: skip
        got = table.changes(start, end).to_table()
        assert got.column_names[: len(columns)] == list(columns)
        ours = [tuple(r[c] for c in (*columns, "_change_type", "_commit_version")) for r in got.to_pylist()]
        keys = (*columns, "_change_type", "_commit_version")
        theirs = [tuple(json.loads(r).get(c) for c in keys) for r in theirs]
        return sorted(ours, key=repr), sorted(theirs, key=repr)

    ours, theirs = rows(1, 4, ("id", "s", "n"))
    assert ours == theirs and (1, "a", None, "insert", 1) in ours  # v1's rows without n: null
    ours, theirs = rows(5, 6, ("id", "label", "n"))
    assert ours == theirs == [(4, "d", 40, "insert", 6)]
    for start in (1, 3):
        with pytest.raises(OracleError) as delta:
            oracle.call("sql", f"SELECT * FROM table_changes_by_path('{uri}', {start}, 6)")
        # INCOMPATIBLE_SCHEMA_CHANGE (a metaData inside the range) or _DATA_SCHEMA (the start's schema)
        assert "DELTA_CHANGE_DATA_FEED_INCOMPATIBLE_" in delta.value.message, delta.value.message[:2000]
        with pytest.raises(IncompatibleSchemaChangeError, match="at version 5: column .s. was renamed") as e:
            table.changes(start, 6).to_table()
        # We name the rename's version; Delta Spark the first metaData it checked (the ADD COLUMN at 2
        # for a range from 1) or the start. The ranges we suggest read the same rows above (1..4, 5..6).
        assert e.value.version == 5 and f"read versions {start}..4 and 5..6" in str(e.value)
