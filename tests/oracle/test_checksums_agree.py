"""Version checksums and log compactions agree with Delta Spark's, both ways ("Version Checksum File",
"Log Compaction Files").

Delta Spark validates the checksum of a snapshot against its own replay of the log when a transaction
starts (``spark.databricks.delta.incremental.commit.verify``) and before a checkpoint, and fails with "The
transaction log has failed integrity checks" on any disagreement (``checksum.mismatch.fatal``, on by
default): its numFiles, tableSizeBytes, metadata, protocol, app transactions, domain metadata and file
size histogram must equal ours. It also builds its next checksum incrementally from ours. A control table
with one wrong number shows that Delta Spark really reads and checks our files. The other way, we read the
checksums Delta Spark writes and commit on top of them, and Delta Spark checks the result again.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest
from oracle_client import Oracle, OracleError
from oracle_compare import Mismatches, compare_step

from airflow_provider_delta.log import DeltaTable

SCHEMA = pa.schema([("k", pa.int64()), ("part", pa.string())])
VERIFY = {"spark.databricks.delta.incremental.commit.verify": "true",
          "spark.databricks.delta.checksum.mismatch.fatal": "true"}  # fmt: skip


def _crc(root: Path, version: int) -> dict:
    return json.loads((root / "_delta_log" / f"{version:020d}.crc").read_text())


def _rows(keys: range, part: str) -> pa.Table:
    return pa.table({"k": pa.array(list(keys), pa.int64()), "part": [part] * len(keys)})


@pytest.fixture
def verifying(oracle: Oracle) -> Iterator[Oracle]:
    oracle.call("conf", VERIFY)
    try:
        yield oracle
    finally:
        oracle.call("conf", {k: None for k in VERIFY})


def test_delta_spark_validates_our_checksums_and_goes_on_from_them(verifying: Oracle, tmp_path: Path):
    oracle = verifying
    root = tmp_path / "t"
    uri = str(root)
    table = DeltaTable.create(uri, SCHEMA, partition_by=["part"],
                              configuration={"delta.enableDeletionVectors": "true"})  # fmt: skip
    table.write(_rows(range(0, 10), "a"))
    table.write(_rows(range(10, 20), "b"), app_id="ingest", app_version=3)
    live = table.snapshot().files.column("path").to_pylist()
    txn = table.transaction()
    txn.delete_rows({live[0]: [0, 1]})
    txn.commit("DELETE")
    table.write(_rows(range(30, 33), "a"), mode="overwrite", replace_where="part = 'a'")
    ours = _crc(root, table.version())

    detail = oracle.call("detail", uri)
    assert (detail["numFiles"], detail["sizeInBytes"]) == (ours["numFiles"], ours["tableSizeBytes"])
    # A Delta Spark transaction starts: it validates our checksum against its replay, then commits and
    # derives its own checksum from ours.
    oracle.sql(f"INSERT INTO delta.`{uri}` VALUES (100, 'c')")
    spark_v = table.version()
    theirs = _crc(root, spark_v)
    assert theirs["numFiles"] == ours["numFiles"] + 1
    # We read Delta Spark's checksum (the snapshot starts from it) and commit on top of it.
    snap = DeltaTable(uri).snapshot()
    assert snap.checksum is not None and snap.checksum.version == spark_v
    assert snap.app_transactions == {"ingest": 3} and snap.num_files == theirs["numFiles"]
    assert snap.checksum_disagreement() == []
    DeltaTable(uri).write(_rows(range(200, 202), "c"), app_id="ingest", app_version=4)
    again = _crc(root, spark_v + 1)
    assert again["numFiles"] == theirs["numFiles"] + 1
    # Delta Spark validates that one too, and checkpoints (validating once more).
    oracle.sql(f"INSERT INTO delta.`{uri}` VALUES (300, 'd')")
    final = DeltaTable(uri)
    final.checkpoint()
    detail = oracle.call("detail", uri)
    snap = final.snapshot()
    assert (detail["numFiles"], detail["sizeInBytes"]) == (snap.files.num_rows, snap.table_size_bytes)
    assert final.validate_checksum().totals.num_files == detail["numFiles"]


def test_delta_spark_refuses_a_wrong_checksum_of_ours(verifying: Oracle, tmp_path: Path):
    """The control: one number off in our checksum, and Delta Spark's validation stops its transaction, so
    the test above shows agreement, not a checksum Delta Spark ignored."""
    root = tmp_path / "t"
    uri = str(root)
    table = DeltaTable.create(uri, SCHEMA, partition_by=["part"])
    table.write(_rows(range(5), "a"))
    path = root / "_delta_log" / f"{1:020d}.crc"
    body = json.loads(path.read_text())
    body["tableSizeBytes"] += 1
    path.write_text(json.dumps(body))
    with pytest.raises(OracleError, match="integrity"):
        verifying.sql(f"INSERT INTO delta.`{uri}` VALUES (9, 'a')")


def test_delta_spark_reads_our_log_compaction(oracle: Oracle, spark, tmp_path: Path):
    """A table of many commits with our compaction of them: Delta Spark (which reads compactions in place
    of their commits, ``deltaLog.minorCompaction.useForReads``) sees exactly our state and rows; the
    same table with the compaction cut short fails in Delta Spark, so it did read it."""
    root = tmp_path / "t"
    uri = str(root)
    table = DeltaTable.create(uri, SCHEMA, partition_by=["part"],
                              configuration={"delta.checkpointInterval": "1000"})  # fmt: skip
    for i in range(12):
        mode = "overwrite" if i % 4 == 3 else "append"
        table.write(_rows(range(10 * i, 10 * i + 3), f"p{i % 3}"), mode=mode,
                    replace_where=f"part = 'p{i % 3}'" if mode == "overwrite" else None,
                    app_id="ingest", app_version=i)  # fmt: skip
    for f in (root / "_delta_log").glob("*.crc"):
        f.unlink()  # Delta Spark would otherwise take the state from the newest checksum
    name = table.compact_log()
    assert name == f"{0:020d}.{12:020d}.compacted.json"
    m = Mismatches("a table read through our log compaction")
    compare_step(m, oracle, spark, uri, 12, "with our compaction of commits 0-12")
    m.check()

    broken = tmp_path / "broken"
    shutil.copytree(root, broken)
    path = broken / "_delta_log" / name
    path.write_bytes(path.read_bytes()[:200])
    with pytest.raises(OracleError):
        oracle.sql(f"SELECT count(*) FROM delta.`{broken}`")
