"""DeltaCommitOperator is exactly-once per task, map index and interval, in real DAG runs (dag.test()).

Each interval's commit records an app transaction named for the task and the interval; a retry, a re-run,
a backfill and a race must each leave every interval's data in the table exactly once.
"""

from __future__ import annotations

import datetime as dt
import json
import multiprocessing
import os
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from airflow_provider_delta.log import DeltaTable

DAY = dt.timedelta(days=1)


def day(n: int) -> dt.datetime:
    return dt.datetime(2024, 1, n, tzinfo=dt.UTC)


def app_id(dag_id: str, n: int) -> str:
    return f"airflow/{dag_id}/commit/-1/{day(n).isoformat()}"


def new_table(root: Path) -> DeltaTable:
    schema = pa.schema([("id", pa.int64()), ("loaded", pa.string()), ("day", pa.string())])
    return DeltaTable.create(str(root), schema, partition_by=["day"])


def commit_dag_source(
    dag_id: str, root: Path, *, operator: str = "DeltaCommitOperator", prelude: str = "", **commit_args: Any
) -> str:
    """A DAG whose ``write`` task writes one Parquet file for its interval and ``commit`` commits it."""
    args = "".join(f", {k}={v!r}" for k, v in commit_args.items())
    return f"""
        import datetime as dt, os, uuid
        import pyarrow as pa, pyarrow.parquet as pq
        from airflow.sdk import DAG, task
        from airflow_provider_delta.operators.commit import DeltaCommitOperator
        ROOT = {str(root)!r}
        {prelude}
        with DAG({dag_id!r}, schedule="@daily", start_date=dt.datetime(2024, 1, 1), catchup=False) as dag:
            @task
            def write(ds=None):
                rel = f"day={{ds}}/part-{{uuid.uuid4()}}.parquet"
                os.makedirs(os.path.join(ROOT, f"day={{ds}}"), exist_ok=True)
                pq.write_table(pa.table({{"id": [1, 2, 3], "loaded": [ds] * 3}}), os.path.join(ROOT, rel))
                return [rel]
            {operator}(task_id="commit", table_uri=ROOT, files=write(){args})
        """


def loaded_rows(root: Path) -> Counter[str]:
    """Rows per loaded interval among the table's live files."""
    snap = DeltaTable(str(root)).snapshot()
    rows: Counter[str] = Counter()
    for path in snap.file_paths():
        rows.update(pq.read_table(root / path, columns=["loaded"]).column("loaded").to_pylist())
    return rows


def task_instance(run: Any, task_id: str) -> tuple[str, int, Any]:
    """(state, try number, XCom return_value) of a task of a finished dag.test() run."""
    from airflow.models.taskinstance import TaskInstance
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        ti = session.scalars(
            select(TaskInstance).where(
                TaskInstance.dag_id == run.dag_id,
                TaskInstance.run_id == run.run_id,
                TaskInstance.task_id == task_id,
            )
        ).one()
        row = session.scalars(
            select(XComModel).where(
                XComModel.dag_id == run.dag_id,
                XComModel.run_id == run.run_id,
                XComModel.task_id == task_id,
                XComModel.key == "return_value",
            )
        ).one_or_none()
        return ti.state, ti.try_number, None if row is None else XComModel.deserialize_value(row)


def asset_events(root: Path, run: Any) -> list[dict[str, Any]]:
    from airflow.models.asset import AssetEvent, AssetModel
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        rows = session.scalars(
            select(AssetEvent)
            .join(AssetModel, AssetModel.id == AssetEvent.asset_id)
            .where(AssetModel.uri == f"file://{root}", AssetEvent.source_run_id == run.run_id)
        )
        return [dict(e.extra) for e in rows]


def commit_actions(root: Path, version: int) -> list[dict[str, Any]]:
    text = (root / "_delta_log" / f"{version:020d}.json").read_text()
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def test_commit_records_version_and_asset_event(tmp_path: Path, dag_file):
    root = tmp_path / "t"
    new_table(root)
    dag = dag_file("eo_basic", commit_dag_source("eo_basic", root)).dag
    run = dag.test(logical_date=day(2))
    assert task_instance(run, "commit") == ("success", 1, 1)
    assert asset_events(root, run) == [
        {
            "version": 1,
            "operation": "WRITE",
            "appId": app_id("eo_basic", 2),
            "appVersion": 1,
            "files": 1,
            "records": 3,
            "alreadyCommitted": False,
        }
    ]
    assert loaded_rows(root) == {"2024-01-02": 3}


def test_retry_after_a_lost_acknowledgement_commits_nothing(tmp_path: Path, dag_file):
    root = tmp_path / "t"
    new_table(root)
    # The first try commits, then dies before Airflow hears of it (worker lost, timeout): retried.
    prelude = """
        class LosesAck(DeltaCommitOperator):
            def execute(self, context):
                version = super().execute(context)
                if context["ti"].try_number == 1:
                    raise RuntimeError("worker lost after the commit landed")
                return version
        """
    source = commit_dag_source(
        "eo_retry", root, operator="LosesAck", prelude=prelude.strip(), retries=1, retry_delay=0
    )
    run = dag_file("eo_retry", source).dag.test(logical_date=day(2))
    assert task_instance(run, "commit") == ("success", 2, 1)  # the retry returns the version with the data
    assert task_instance(run, "write")[:2] == ("success", 1)
    table = DeltaTable(str(root))
    assert table.version() == 1 and table.snapshot().app_transactions == {app_id("eo_retry", 2): 1}
    assert loaded_rows(root) == {"2024-01-02": 3}


def test_rerun_of_an_interval_commits_nothing_new(tmp_path: Path, dag_file):
    root = tmp_path / "t"
    new_table(root)
    dag = dag_file("eo_rerun", commit_dag_source("eo_rerun", root)).dag
    first = dag.test(logical_date=day(2))
    first_files = DeltaTable(str(root)).snapshot().file_paths()
    # dag.test() of the same logical date clears the interval and runs it again (a new write, too).
    second = dag.test(logical_date=day(2))
    assert second.run_id != first.run_id
    assert task_instance(second, "commit") == ("success", 1, 1)
    snap = DeltaTable(str(root)).snapshot()
    assert snap.version == 1 and snap.file_paths() == first_files
    assert len(list((root / "day=2024-01-02").glob("*.parquet"))) == 2  # the re-run's file is not in it
    assert loaded_rows(root) == {"2024-01-02": 3}
    # Airflow records an asset event for every successful run of a task with outlets: it names the
    # version that holds the interval's data, and says nothing new was committed.
    (event,) = asset_events(root, second)
    assert (event["version"], event["appId"], event["alreadyCommitted"]) == (1, app_id("eo_rerun", 2), True)


def test_backfill_in_reverse_order_loads_each_interval_once(tmp_path: Path, dag_file):
    root = tmp_path / "t"
    new_table(root)
    dag = dag_file("eo_backfill", commit_dag_source("eo_backfill", root)).dag
    versions = [task_instance(dag.test(logical_date=day(n)), "commit")[2] for n in (3, 2, 1)]
    assert versions == [1, 2, 3]
    snap = DeltaTable(str(root)).snapshot()
    assert snap.num_files == 3
    assert snap.app_transactions == {app_id("eo_backfill", n): 1 for n in (1, 2, 3)}
    assert loaded_rows(root) == {"2024-01-01": 3, "2024-01-02": 3, "2024-01-03": 3}


def test_overwrite_removes_previous_files_in_the_same_commit(tmp_path: Path, dag_file):
    root = tmp_path / "t"
    new_table(root)
    dag_file("eo_append", commit_dag_source("eo_append", root)).dag.test(logical_date=day(1))
    before = DeltaTable(str(root)).snapshot().file_paths()
    dag = dag_file("eo_overwrite", commit_dag_source("eo_overwrite", root, mode="overwrite")).dag
    run = dag.test(logical_date=day(2))
    assert task_instance(run, "commit") == ("success", 1, 2)
    actions = commit_actions(root, 2)
    removed = {a["remove"]["path"] for a in actions if "remove" in a}
    added = [a["add"]["path"] for a in actions if "add" in a]
    assert removed == set(before) and len(added) == 1
    assert DeltaTable(str(root)).snapshot().file_paths() == added
    assert loaded_rows(root) == {"2024-01-02": 3}
    assert asset_events(root, run)[0]["operation"] == "WRITE"


# -- racing runs -------------------------------------------------------------------------------------------


def _race(dag_path: str, logical_day: int, barrier: Any, result: Any) -> None:
    """A separate process running dag.test() whose commit task waits, after reading the table's snapshot,
    until every racer has read it: all of them then commit against the same version."""
    import importlib.util

    from airflow_provider_delta.operators.commit import DeltaCommitOperator

    real_adds = DeltaCommitOperator._adds

    def adds_after_everyone_read(self: Any, snap: Any) -> Any:
        barrier.wait(60)
        return real_adds(self, snap)

    DeltaCommitOperator._adds = adds_after_everyone_read  # type: ignore[method-assign]
    spec = importlib.util.spec_from_file_location(Path(dag_path).stem, dag_path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    run = module.dag.test(logical_date=day(logical_day))
    result.put((Path(dag_path).stem, logical_day, str(run.state)))
    result.close()
    result.join_thread()
    # Leave at once: Airflow's exit hooks in a spawned child (flushing telemetry, in-process API server
    # threads) take tens of seconds and have nothing left to do here.
    os._exit(0)


def test_racing_runs_load_each_interval_once(tmp_path: Path, dag_file, dags_folder: Path):
    """Two runs of one DAG for different intervals (a backfill beside the scheduled run) commit against the
    same table version at the same time. (Airflow allows one run per DAG and logical date, so the same
    interval cannot race itself through one DAG; the core's concurrency tests cover equal app ids.)"""
    root = tmp_path / "t"
    new_table(root)
    dag_file("eo_race", commit_dag_source("eo_race", root))
    # Register the DAG first, as the DAG processor would have: each dag.test() syncs the dags folder to the
    # metadata DB, and first-time syncs at once collide on inserting the same DAG row.
    from airflow.dag_processing.bundles.manager import DagBundlesManager
    from airflow.dag_processing.dagbag import BundleDagBag, sync_bag_to_db

    DagBundlesManager().sync_bundles_to_db()
    sync_bag_to_db(BundleDagBag(dag_folder=dags_folder, bundle_path=dags_folder, bundle_name="dags-folder"),
                   "dags-folder", None)  # fmt: skip
    ctx = multiprocessing.get_context("spawn")
    barrier, result = ctx.Barrier(2), ctx.Queue()
    dag_path = str(dags_folder / "eo_race.py")
    procs = [ctx.Process(target=_race, args=(dag_path, n, barrier, result)) for n in (1, 2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
    assert [p.exitcode for p in procs] == [0, 0]
    assert sorted(result.get(timeout=5) for _ in procs) == [
        ("eo_race", 1, "success"),
        ("eo_race", 2, "success"),
    ]
    table = DeltaTable(str(root))
    assert table.version() == 2  # two intervals, two commits
    assert {commit_actions(root, v)[0]["commitInfo"]["readVersion"] for v in (1, 2)} == {0}  # they raced
    assert table.snapshot().app_transactions == {app_id("eo_race", 1): 1, app_id("eo_race", 2): 1}
    assert loaded_rows(root) == {"2024-01-01": 3, "2024-01-02": 3}


# -- log cleanup while the task runs -----------------------------------------------------------------------

STALE_PRELUDE = """
        import time
        from airflow_provider_delta.log import DeltaTable as _Table

        class Stale(DeltaCommitOperator):
            def _adds(self, snap):
                # While this try runs (its snapshot taken), other writers commit three versions, a
                # checkpoint is written and log cleanup (zero retention, clock a day ahead) removes the
                # commits this try read: what a transaction open past delta.logRetentionDuration meets.
                if self._ti_try == 1:
                    t = _Table(ROOT)
                    for i in range(3):
                        rel = f"day=2023-12-0{i + 1}/other.parquet"
                        os.makedirs(os.path.join(ROOT, os.path.dirname(rel)), exist_ok=True)
                        pq.write_table(pa.table({"id": [i], "loaded": ["other"]}), os.path.join(ROOT, rel))
                        t.transaction().add_files(
                            [t.add_file(rel, {"day": f"2023-12-0{i + 1}"})]
                        ).commit()
                    t.checkpoint()
                    t.cleanup_expired_logs(retention_ms=0, now_ms=int(time.time() * 1000) + 86_400_000)
                return super()._adds(snap)

            def execute(self, context):
                self._ti_try = context["ti"].try_number
                try:
                    return super().execute(context)
                except Exception as exc:  # what the try failed with, for the test to read
                    with open(os.path.join(ROOT, "..", "errors.txt"), "a") as fh:
                        fh.write(f"{self._ti_try} {type(exc).__name__}\\n")
                    raise
        """


def test_an_append_whose_read_version_was_cleaned_up_lands_on_the_latest_version(tmp_path: Path, dag_file):
    root = tmp_path / "t"
    new_table(root)
    source = commit_dag_source("eo_stale_append", root, operator="Stale", prelude=STALE_PRELUDE.strip())
    run = dag_file("eo_stale_append", source).dag.test(logical_date=day(2))
    # Read at version 0; others took 1-3 and checkpointed 3; the append lands visibly as version 4.
    assert task_instance(run, "commit") == ("success", 1, 4)
    snap = DeltaTable(str(root)).snapshot()
    assert snap.version == 4 and snap.app_transactions == {app_id("eo_stale_append", 2): 1}
    assert loaded_rows(root) == {"2024-01-02": 3, "other": 3}
    assert not (tmp_path / "errors.txt").exists()


def test_an_overwrite_whose_read_version_was_cleaned_up_fails_by_name_and_its_retry_commits_once(
    tmp_path: Path, dag_file
):
    root = tmp_path / "t"
    new_table(root)
    source = commit_dag_source(
        "eo_stale_overwrite", root, operator="Stale", prelude=STALE_PRELUDE.strip(), mode="overwrite",
        retries=1, retry_delay=0,
    )  # fmt: skip
    run = dag_file("eo_stale_overwrite", source).dag.test(logical_date=day(2))
    # Try 1 read version 0 and would overwrite what it read, but the commits since were cleaned up: it
    # raised StaleSnapshotError and committed nothing; try 2 overwrote the table as it is now.
    assert task_instance(run, "commit") == ("success", 2, 4)
    snap = DeltaTable(str(root)).snapshot()
    assert snap.version == 4 and snap.app_transactions == {app_id("eo_stale_overwrite", 2): 1}
    assert loaded_rows(root) == {"2024-01-02": 3}
    assert (tmp_path / "errors.txt").read_text().split() == ["1", "StaleSnapshotError"]
