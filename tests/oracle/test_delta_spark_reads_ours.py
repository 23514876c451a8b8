"""Delta Spark reads what we write, and goes on writing on top of it.

After each of our commits (the core's ``DeltaTable.create`` and ``transaction().add_files(...).commit()``,
our Spark writer), checkpoints (classic, multi-part, V2, and the Spark-built one), log cleanup and VACUUM,
Delta Spark must see the same version, files, protocol, metadata, app transactions and rows as we do, and
``DESCRIBE HISTORY`` must show our commitInfo. Then Delta Spark writes (INSERT, DELETE, UPDATE, OPTIMIZE,
VACUUM, RENAME COLUMN) and we read its result. Tables we create with CHECK constraints, generated columns
and column mapping must be accepted by Delta Spark, which must then enforce those rules itself.
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from oracle_client import Oracle, OracleError
from oracle_compare import Mismatches, compare_history, compare_step, compare_time_travel, compare_versions
from oracle_scenarios import age_log

from airflow_provider_delta.log import AddFile, DeltaTable, add_file_from_parquet

SCHEMA = pa.schema([("k", pa.int64()), ("s", pa.string()), ("part", pa.string())])
_DAY_MS = 86_400_000


def _add(table: DeltaTable, root: Path, part: str, keys: list[int]) -> AddFile:
    """A Parquet file of ``keys`` in partition ``part`` (a raw directory name: spaces, '=' and '%' kept, so
    the log's URI encoding of paths is exercised), and its ``add`` action."""
    rel = f"part={part}/ours-{keys[0]}.parquet"
    (root / rel).parent.mkdir(parents=True, exist_ok=True)
    data = pa.table({"k": pa.array(keys, pa.int64()), "s": [f"s{k}" for k in keys]})
    pq.write_table(data, root / rel)
    return add_file_from_parquet(table, rel, {"part": part})


def _vacuum_agrees(m: Mismatches, oracle: Oracle, uri: str, where: str) -> None:
    """Delta Spark's VACUUM DRY RUN and ours name the same files."""
    listed = oracle.sql(f"VACUUM delta.`{uri}` RETAIN 0 HOURS DRY RUN")
    delta = sorted(r["path"].removeprefix("file:").removeprefix(uri + "/") for r in listed)
    mine = DeltaTable(uri).vacuum(retention_hours=0, dry_run=True, enforce_retention_duration=False).files
    m.diff(where, "VACUUM DRY RUN files", delta, sorted(mine))


CORE_CASES = {
    "classic": {},
    "multipart": {"delta.checkpoint.partSize": "2"},
    "v2": {"delta.checkpointPolicy": "v2", "delta.feature.v2Checkpoint": "supported",
           "delta.enableInCommitTimestamps": "true"},
}  # fmt: skip


@pytest.mark.parametrize("kind", list(CORE_CASES))
def test_delta_spark_reads_core_commits_checkpoints_cleanup_and_vacuum(kind, oracle, spark, tmp_path):
    root = tmp_path / "t"
    uri = str(root)
    m = Mismatches(f"core-written table, {kind} checkpoints")
    config = {**CORE_CASES[kind], "delta.enableDeletionVectors": "true"}
    table = DeltaTable.create(uri, SCHEMA, partition_by=["part"], configuration=config)
    compare_step(m, oracle, spark, uri, 0, "create")
    files = [_add(table, root, p, [10 * i + j for j in range(3)]) for i, p in enumerate(["a", "x y", "p=q%"])]
    commits = [
        lambda: table.transaction().add_files(files[:2]).commit(),
        lambda: (
            table.transaction()
            .add_files(files[2:])
            .set_app_transaction("ingest", 7)
            .commit(user_metadata="batch 7")
        ),
        lambda: table.transaction().remove_files([files[0]]).commit("DELETE", {"predicate": ["part = 'a'"]}),
    ]
    for commit in commits:
        result = commit()
        compare_step(m, oracle, spark, uri, result.version, f"our commit v{result.version}")
    history = {h["version"]: h for h in oracle.call("history", uri)}
    m.diff("DESCRIBE HISTORY v2", "userMetadata", history[2].get("userMetadata"), "batch 7")
    m.diff("DESCRIBE HISTORY v3", "operation", history[3]["operation"], "DELETE")
    m.diff(
        "DESCRIBE HISTORY v3", "engineInfo", history[3]["engineInfo"].split("/")[0], "airflow-provider-delta"
    )
    parts = 3 if kind == "multipart" else None
    table.checkpoint(parts=parts)
    oracle.call("clear_cache")
    compare_step(m, oracle, spark, uri, 3, f"our {kind} checkpoint")
    # Only our checkpoint is left to read version 3 from: the commits before it expire.
    age_log(root / "_delta_log", 3 * 86_400)
    removed = table.cleanup_expired_logs(retention_ms=_DAY_MS)
    m.diff("our log cleanup", "commits removed", sorted(n for n in removed if n.endswith(".json")),
           [f"{v:020d}.json" for v in range(3)])  # fmt: skip
    oracle.call("clear_cache")
    compare_step(m, oracle, spark, uri, 3, "after our log cleanup")
    _vacuum_agrees(m, oracle, uri, "before our VACUUM")
    report = table.vacuum(retention_hours=0, dry_run=False, enforce_retention_duration=False)
    m.diff("our VACUUM", "deleted", report.files, [files[0].path])
    version = table.version()
    compare_step(m, oracle, spark, uri, version, "after our VACUUM")
    # Delta Spark goes on writing on top; we read what it wrote (every operation on one kind of table).
    queries = [
        f"INSERT INTO delta.`{uri}` VALUES (100, 'delta', 'a'), (101, 'delta', 'x y')",
        f"DELETE FROM delta.`{uri}` WHERE k % 2 = 1",
        f"UPDATE delta.`{uri}` SET s = 'updated' WHERE k = 20",
        f"OPTIMIZE delta.`{uri}`",
        f"VACUUM delta.`{uri}` RETAIN 0 HOURS",
    ]
    for query in queries if kind == "classic" else queries[:2]:
        oracle.call("sql", query)
        version = table.version()
        compare_step(m, oracle, spark, uri, version, query.split(" delta.")[0])
    compare_versions(m, oracle, uri, list(range(version + 1)), "time travel")
    timestamps = compare_history(m, oracle, uri, "history")
    compare_time_travel(m, oracle, uri, timestamps, "history")
    m.diff("Delta Spark's txns", "ingest", oracle.call("snapshot", uri)["txns"], {"ingest": 7})
    m.check()


def test_delta_spark_reads_our_spark_writer_and_spark_checkpoint(oracle, spark, tmp_path):
    from airflow_provider_delta.spark import checkpoint_with_spark, write

    uri = str(tmp_path / "t")
    m = Mismatches("Spark-written table with column mapping, CDF and deletion vectors")
    ddl = "k long, `odd name` string, info struct<x:int,y:string>, part string"
    config = {"delta.columnMapping.mode": "name", "delta.enableChangeDataFeed": "true",
              "delta.enableDeletionVectors": "true", "delta.checkpointInterval": "4"}  # fmt: skip
    rows = [(1, "a", (1, "p"), "x"), (2, None, None, "y"), (3, "c", (3, "r"), "x")]
    write(spark.createDataFrame(rows, ddl), uri, partition_by=["part"], configuration=config)
    compare_step(m, oracle, spark, uri, 0, "create by write()")
    write(spark.createDataFrame([(4, "d", (4, "s"), "z")], ddl), uri, app_id="job", app_version=1)
    wider = spark.createDataFrame([(5, "e", None, "x", 2.5)], f"{ddl}, more double")
    write(wider, uri, merge_schema=True)
    write(spark.createDataFrame([(6, "f", (6, "t"), "x", None)], f"{ddl}, more double"), uri,
          mode="overwrite", replace_where="part = 'x'")  # fmt: skip
    compare_step(m, oracle, spark, uri, 3, "after append, merge_schema, replace_where")
    # We write no cdc actions: Delta Spark's change data feed of our commits comes from adds and removes.
    changes = oracle.sql(f"SELECT k, _change_type, _commit_version FROM table_changes_by_path('{uri}', 1, 3)")
    expected = [(4, "insert", 1), (5, "insert", 2), (1, "delete", 3), (3, "delete", 3), (5, "delete", 3),
                (6, "insert", 3)]  # fmt: skip
    got = sorted((c["k"], c["_change_type"], c["_commit_version"]) for c in changes)
    m.diff("change data feed of our commits", "rows", got, sorted(expected))
    checkpoint_with_spark(spark, uri)
    oracle.call("clear_cache")
    compare_step(m, oracle, spark, uri, 3, "our Spark checkpoint")
    for query in (
        f"INSERT INTO delta.`{uri}` (k, `odd name`, part) VALUES (7, 'delta', 'y')",
        f"UPDATE delta.`{uri}` SET `odd name` = 'u' WHERE k = 4",
        f"DELETE FROM delta.`{uri}` WHERE k = 2",
        f"ALTER TABLE delta.`{uri}` RENAME COLUMN `odd name` TO `renamed col`",
        f"OPTIMIZE delta.`{uri}`",
    ):
        oracle.call("sql", query)
        compare_step(m, oracle, spark, uri, DeltaTable(uri).version(), query.split(" delta.")[0])
    # Our writer appends after Delta Spark's rename: the schema by its new name.
    write(spark.createDataFrame([(8, "g", None, "y", 1.0)], ddl.replace("odd name", "renamed col") +
                                ", more double"), uri)  # fmt: skip
    version = DeltaTable(uri).version()
    compare_step(m, oracle, spark, uri, version, "our append after Delta Spark's rename")
    compare_versions(m, oracle, uri, list(range(version + 1)), "time travel")
    compare_history(m, oracle, uri, "history")
    m.diff("Delta Spark's txns", "job", oracle.call("snapshot", uri)["txns"], {"job": 1})
    m.check()


def test_delta_spark_accepts_and_enforces_our_constraints_and_generated_columns(oracle, spark, tmp_path):
    uri = str(tmp_path / "t")
    m = Mismatches("core-created table with rules")
    schema = {"type": "struct", "fields": [
        {"name": "id", "type": "long", "nullable": False, "metadata": {}},
        {"name": "price", "type": "double", "nullable": True, "metadata": {}},
        {"name": "qty", "type": "integer", "nullable": True, "metadata": {}},
        {"name": "total", "type": "double", "nullable": True,
         "metadata": {"delta.generationExpression": "price * qty"}},
    ]}  # fmt: skip
    DeltaTable.create(uri, schema, configuration={"delta.constraints.positive_price": "price > 0",
                                                  "delta.columnMapping.mode": "id"})  # fmt: skip
    compare_step(m, oracle, spark, uri, 0, "create")
    oracle.call("sql", f"INSERT INTO delta.`{uri}` (id, price, qty) VALUES (1, 2.5, 4)")
    for bad, rule in ((f"INSERT INTO delta.`{uri}` (id, price, qty) VALUES (2, -1.0, 1)", "positive_price"),
                      (f"INSERT INTO delta.`{uri}` VALUES (3, 1.0, 1, 5.0)", "total"),
                      (f"INSERT INTO delta.`{uri}` (price) VALUES (1.0)", "id")):  # fmt: skip
        with pytest.raises(OracleError) as err:
            oracle.call("sql", bad)
        if rule not in err.value.message:
            m.add(f"Delta Spark rejected {bad!r} without naming {rule}: {err.value.message[:300]}")
    m.diff("Delta Spark's generated value", "rows", oracle.call("rows", uri),
           [json.dumps({"id": 1, "price": 2.5, "qty": 4, "total": 10.0}, separators=(",", ":"))])  # fmt: skip
    compare_step(m, oracle, spark, uri, DeltaTable(uri).version(), "after Delta Spark's insert")
    m.check()


def test_vacuum_removes_emptied_directories_as_delta_spark_does(oracle, tmp_path):
    root = tmp_path / "t"
    uri = str(root)
    table = DeltaTable.create(uri, SCHEMA, partition_by=["part"])
    gone = _add(table, root, "a", [1])
    table.transaction().add_files([gone, _add(table, root, "b", [2])]).commit()
    table.transaction().remove_files([gone]).commit("DELETE")
    table.vacuum(retention_hours=0, dry_run=False, enforce_retention_duration=False)
    listed = oracle.sql(f"VACUUM delta.`{uri}` RETAIN 0 HOURS DRY RUN")
    assert [r["path"].removeprefix("file:").removeprefix(uri + "/") for r in listed] == []
    assert not (root / "part=a").exists()
