"""We read what Delta Spark writes: randomised Delta Spark workloads, compared version by version.

Each seed builds a table with Delta Spark and runs a random sequence of its operations (see
``oracle_scenarios``). After every operation our core's snapshot of the new version (version, protocol,
metadata, live files with their deletion vectors, app transactions, domain metadata, timestamp) must equal
Delta Spark's own snapshot, and the rows our Arrow scan returns must equal Delta Spark's (whole, projected
and filtered). At the end: the latest version in full (``DESCRIBE DETAIL``, ``inputFiles()``, and the rows
of our Spark reader against Delta Spark's), our Spark reader at up to three other versions, every version
in the log again (time travel by version), the Arrow scan through a partition filter and, on row-tracking
tables, with ``_metadata`` row ids, ``DESCRIBE HISTORY`` against ``history()``, and time travel by
timestamp around every commit. A failure names the seed: rerun it with ``DELTA_ORACLE_SEEDS=<seed>``.

Why not everything after every operation: ``DESCRIBE DETAIL`` and ``inputFiles()`` are Delta Spark's
views of the same snapshot state compared at each step, and our Spark reader's executors decode files
with the scan code the Arrow scan uses (``scan_file``); each cost a Spark job per step (two for the rows,
one in each JVM), about a third of the module's time. ``test_delta_spark_reads_ours`` and tests/spark
compare the Spark reader on every table they write.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from oracle_arrow import compare_scan, compare_scan_extras
from oracle_client import OracleError
from oracle_compare import (
    Mismatches,
    compare_history,
    compare_rows,
    compare_snapshot,
    compare_step,
    compare_time_travel,
    compare_versions,
)
from oracle_scenarios import Scenario, age_log, seeds

from airflow_provider_delta.log import DataFileNotFoundError, DeltaTable


@pytest.mark.parametrize("seed", seeds(), ids=lambda s: f"seed{s}")
def test_we_read_what_delta_spark_writes(seed: int, oracle, spark, tmp_path) -> None:
    scenario = Scenario(seed, str(tmp_path / "table"))
    m = Mismatches(str(scenario))
    scanned: set[int] = set()
    for step, op, _ in scenario.steps(oracle):
        where = f"seed {seed} step {step} ({op}) v{scenario.version}"
        compare_snapshot(m, oracle, scenario.path, scenario.version, where)
        compare_scan(m, oracle, scenario.path, scenario.version, where, tmp_path)
        scanned.add(scenario.version)
        for what, delta, mine in scenario.checks:
            m.diff(where, what, delta, mine)
        scenario.checks.clear()
    where = f"seed {seed} (time travel)"
    readable = compare_versions(m, oracle, scenario.path, list(range(scenario.version + 1)), where)
    with_data = [v for v in readable if v >= scenario.vacuumed]
    compare_step(m, oracle, spark, scenario.path, scenario.version, f"seed {seed} (latest)")
    for v in scenario.rng.sample(with_data, min(3, len(with_data))):
        if v != scenario.version:
            compare_rows(m, oracle, spark, scenario.path, v, where)
    # Our scan by time travel: the versions no step left as the latest, and two more at random.
    with_rows = range(max(scenario.floor, scenario.vacuumed), scenario.version + 1)
    sampled = scenario.rng.sample(with_rows, min(2, len(with_rows)))
    for v in [v for v in with_rows if v not in scanned] + sampled:
        compare_scan(m, oracle, scenario.path, v, where, tmp_path)
    compare_scan_extras(m, oracle, scenario, tmp_path)
    timestamps = compare_history(m, oracle, scenario.path, where)
    compare_time_travel(m, oracle, scenario.path, timestamps, where)
    print(f"seed {seed}: {len(scenario.ops)} operations, versions 0..{scenario.version} "
          f"({len(readable)} still readable), {len(m.found)} mismatch(es)")  # fmt: skip
    if m.found:
        print("\n".join(scenario.log))
    m.check()


ENFORCE_TIME_TRAVEL = "spark.databricks.delta.vacuum.enforceTimeTravelWithinDeletedFileRetentionDuration"


def test_time_travel_beyond_the_file_retention(oracle, tmp_path) -> None:
    """Known difference 13: Delta Spark refuses a version older than ``delta.deletedFileRetentionDuration``;
    ours reads the same rows Delta Spark reads with its check off, and once VACUUM deleted that version's
    files raises ``DataFileNotFoundError`` naming it, while Delta Spark fails too."""
    path = str(tmp_path / "t")
    retention = "TBLPROPERTIES ('delta.deletedFileRetentionDuration' = 'interval 1 days')"
    oracle.call("sql", f"CREATE TABLE delta.`{path}` (k INT, s STRING) USING delta {retention}")
    oracle.call("sql", f"INSERT INTO delta.`{path}` VALUES (1, 'a'), (2, 'b')")
    oracle.call("sql", f"INSERT INTO delta.`{path}` VALUES (3, NULL)")
    oracle.call("sql", f"INSERT OVERWRITE delta.`{path}` VALUES (4, 'd')")
    age_log(Path(path) / "_delta_log", 3 * 86_400)  # every commit three days old: beyond the retention
    oracle.call("conf", {ENFORCE_TIME_TRAVEL: "true"})
    try:
        with pytest.raises(OracleError, match="TIME_TRAVEL_BEYOND_DELETED_FILE_RETENTION"):
            oracle.call("rows", path, 2)
        assert [json.loads(r) for r in oracle.call("rows", path, 3)] == [{"k": 4, "s": "d"}]  # the latest
    finally:
        oracle.call("conf", {ENFORCE_TIME_TRAVEL: "false"})
    table = DeltaTable(path)
    theirs = sorted((r["k"], r.get("s")) for r in map(json.loads, oracle.call("rows", path, 2)))
    ours = sorted((r["k"], r["s"]) for r in table.to_pyarrow_table(version=2).to_pylist())
    assert ours == theirs == [(1, "a"), (2, "b"), (3, None)]

    oracle.call("sql", f"VACUUM delta.`{path}` RETAIN 0 HOURS")
    with pytest.raises(OracleError):
        oracle.call("rows", path, 2)
    with pytest.raises(DataFileNotFoundError, match=f"version 2 of {path} cannot be read") as gone:
        table.to_pyarrow_table(version=2)
    assert gone.value.version == 2 and isinstance(gone.value, FileNotFoundError)
    assert gone.value.path.endswith(".parquet") and gone.value.path in str(gone.value)
    assert not (Path(path) / gone.value.path).exists()
    assert table.to_pyarrow_table().to_pylist() == [{"k": 4, "s": "d"}]
