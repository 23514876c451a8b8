"""The provider in a real Airflow: registered, and a commit DAG runs with dag.test()."""

from __future__ import annotations

import datetime as dt
import json
import subprocess
import sys
from pathlib import Path

import pyarrow as pa

from airflow_provider_delta.log import DeltaTable


def test_provider_is_registered(airflow_db):
    airflow = Path(sys.executable).with_name("airflow")
    out = subprocess.run(
        [str(airflow), "providers", "list", "-o", "json"], check=True, capture_output=True, text=True
    )
    listed = {p["package_name"]: p for p in json.loads(out.stdout[out.stdout.index("[") :])}
    assert "airflow-provider-delta" in listed


def test_commit_dag_runs(tmp_path: Path, dag_file):
    table = tmp_path / "t"
    DeltaTable.create(str(table), pa.schema([("id", pa.int64()), ("day", pa.string())]), partition_by=["day"])
    module = dag_file(
        "smoke_commit",
        f"""
        import datetime as dt, os, uuid
        import pyarrow as pa, pyarrow.parquet as pq
        from airflow.sdk import DAG, task
        from airflow_provider_delta.operators.commit import DeltaCommitOperator
        ROOT = {str(table)!r}
        with DAG("smoke_commit", schedule="@daily", start_date=dt.datetime(2024, 1, 1), catchup=False) as dag:
            @task
            def write(ds=None):
                rel = f"day={{ds}}/part-{{uuid.uuid4()}}.parquet"
                os.makedirs(os.path.join(ROOT, f"day={{ds}}"), exist_ok=True)
                pq.write_table(pa.table({{"id": [1, 2, 3]}}), os.path.join(ROOT, rel))
                return [rel]
            DeltaCommitOperator(task_id="commit", table_uri=ROOT, files=write())
        """,
    )
    run = module.dag.test(logical_date=dt.datetime(2024, 1, 2, tzinfo=dt.UTC))
    assert run.state == "success"
    snap = DeltaTable(str(table)).snapshot()
    assert snap.version == 1 and snap.num_files == 1
    assert snap.app_transactions == {"airflow/smoke_commit/commit/-1/2024-01-02T00:00:00+00:00": 1}
