"""DeltaWriteOperator and the hook's row methods in real DAG runs (dag.test()): rows from an upstream XCom
or a callable returning pandas, one exactly-once commit per interval with its asset event and ``delta_commit``
XCom, a refused write failing the task with nothing committed and no file left, and incremental reads of a
version range.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest
from test_exactly_once import asset_events

from airflow_provider_delta.hooks.delta import DeltaHook
from airflow_provider_delta.log import DeltaTable
from airflow_provider_delta.log.base.errors import RowsChangedError
from airflow_provider_delta.ui.links import COMMIT_XCOM_KEY

DAY = dt.datetime(2024, 3, 1, tzinfo=dt.UTC)


def _source(dag_id: str, root: Path, rows: str, **args) -> str:
    extra = "".join(f", {k}={v!r}" for k, v in args.items())
    return f"""
        import datetime as dt
        import pandas as pd
        from airflow.sdk import DAG, task
        from airflow_provider_delta.operators.write import DeltaWriteOperator
        with DAG({dag_id!r}, schedule="@daily", start_date=dt.datetime(2024, 1, 1), catchup=False) as dag:
            @task
            def payload(ds=None):
                return {rows}
            DeltaWriteOperator(task_id="write", table_uri={str(root)!r}, data=payload(){extra})
        """


def _xcom(run, task_id: str, key: str = "return_value"):
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session

    query = XComModel.get_many(run_id=run.run_id, dag_ids=run.dag_id, task_ids=task_id, key=key)
    with create_session() as session:
        row = session.scalars(query).first()
        return None if row is None else XComModel.deserialize_value(row)


def _files(root: Path) -> set[Path]:
    return {p for p in root.rglob("*") if p.is_file() and "_delta_log" not in p.parts}


def test_rows_from_an_xcom_land_once_with_asset_event_and_commit_record(tmp_path: Path, dag_file):
    root = tmp_path / "t"
    rows = '[{"id": i, "day": ds, "note": "n"} for i in range(5)]'
    dag = dag_file("w_basic", _source("w_basic", root, rows, partition_by=["day"])).dag
    run = dag.test(logical_date=DAY)
    assert run.state == "success" and _xcom(run, "write") == 0
    app = f"airflow/w_basic/write/-1/{DAY.isoformat()}"
    assert asset_events(root, run) == [{"version": 0, "operation": "WRITE", "appId": app, "appVersion": 1,
                                        "files": 1, "records": 5, "alreadyCommitted": False}]  # fmt: skip
    record = _xcom(run, "write", COMMIT_XCOM_KEY)
    assert record["version"] == 0 and record["records_added"] == 5 and not record["already_committed"]
    files = _files(root)
    again = dag.test(logical_date=DAY)  # a clear or a retry of the same interval
    assert again.state == "success" and _xcom(again, "write") == 0
    assert _xcom(again, "write", COMMIT_XCOM_KEY)["already_committed"] is True
    assert _files(root) == files and DeltaTable(str(root)).version() == 0
    hook = DeltaHook(None)
    assert hook.read_rows(str(root), ["id"], "day = '2024-03-01' AND id >= 3")["id"].to_pylist() == [3, 4]


def test_a_refused_write_fails_the_task_and_leaves_nothing(tmp_path: Path, dag_file):
    root = tmp_path / "t"
    DeltaHook(None).write_rows(str(root), [{"id": 1, "amount": 2.0}], configuration={
        "delta.constraints.positive": "amount > 0"})  # fmt: skip
    rows = '[{"id": 2, "amount": 5.0}, {"id": 3, "amount": -1.0}]'
    dag = dag_file("w_refused", _source("w_refused", root, rows, retries=0)).dag
    before = _files(root)
    run = dag.test(logical_date=DAY)
    assert run.state == "failed"
    assert DeltaTable(str(root)).version() == 0 and _files(root) == before


def test_incremental_reads_of_a_version_range(tmp_path: Path):
    uri = str(tmp_path / "t")
    hook = DeltaHook(None)
    for i in range(4):
        hook.write_rows(uri, [{"id": i}, {"id": 10 + i}])
    assert sorted(hook.read_version_range(uri, 2, 3)["id"].to_pylist()) == [2, 3, 12, 13]
    assert hook.read_version_range(uri, 1, 1, filter="id > 5")["id"].to_pylist() == [11]
    hook.write_rows(uri, [{"id": 99}], mode="overwrite")
    with pytest.raises(RowsChangedError, match="version 4"):
        hook.read_version_range(uri, 3)
