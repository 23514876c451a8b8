"""Spark on a cluster from Airflow: ``DeltaSparkWriteOperator`` builds its session from an Airflow ``spark``
connection, and a spark-submit job commits with the task's exactly-once key, both against the standalone
cluster (``spark_standalone``: a master and two workers on 127.0.0.1).
"""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from types import SimpleNamespace

import deltalake
import pytest

from airflow_provider_delta.operators.spark import spark_settings

DAY = dt.datetime(2024, 3, 1, tzinfo=dt.UTC)
ROOT = Path(__file__).resolve().parents[2]


def _conn(host: str, port: int | None = None, **extra) -> SimpleNamespace:
    return SimpleNamespace(conn_id="spark_x", host=host, port=port, extra_dejson=extra)


def test_spark_connection_fields_become_master_and_conf():
    assert spark_settings(_conn("spark://h", 7077)) == ("spark://h:7077", {})
    assert spark_settings(_conn("h", 7077)) == ("spark://h:7077", {})  # a bare host is a standalone master
    assert spark_settings(_conn("spark://h:7000", 7077))[0] == "spark://h:7000"
    assert spark_settings(_conn("yarn", queue="etl")) == ("yarn", {"spark.yarn.queue": "etl"})
    assert spark_settings(_conn("local[2]"))[0] == "local[2]"
    master, conf = spark_settings(_conn("k8s://https://api:6443", namespace="spark", conf={"a.b": 1}))
    assert master == "k8s://https://api:6443" and conf == {"spark.kubernetes.namespace": "spark", "a.b": "1"}
    with pytest.raises(ValueError, match="client mode.*docs/spark.md"):
        spark_settings(_conn("yarn", **{"deploy-mode": "cluster"}))
    with pytest.raises(ValueError, match="no host"):
        spark_settings(_conn(""))


def test_operator_runs_on_the_cluster_named_by_a_spark_connection(
    spark_standalone, dag_file, tmp_path, monkeypatch
):
    table = tmp_path / "events"
    conf = {"spark.executor.memory": "512m", "spark.cores.max": "1", "spark.sql.shuffle.partitions": "2",
            "spark.executor.extraJavaOptions": spark_standalone.jvm_options}  # fmt: skip
    conn = {
        "conn_type": "spark", "host": "spark://127.0.0.1", "port": spark_standalone.port,
        "extra": {"deploy-mode": "client", "conf": conf},
    }  # fmt: skip
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_CLUSTER", json.dumps(conn))
    before = len(spark_standalone.status().get("completedapps", []))
    module = dag_file(
        "spark_cluster_write",
        f"""
        import datetime as dt
        from airflow.sdk import DAG
        from airflow_provider_delta.operators.spark import DeltaSparkWriteOperator

        def rows(spark, context):
            masters.append(spark.sparkContext.master)
            return spark.range(1000).selectExpr("id", "id % 7 AS bucket")

        masters = []
        with DAG("spark_cluster_write", schedule=None, start_date=dt.datetime(2024, 1, 1)) as dag:
            DeltaSparkWriteOperator(task_id="write", table_uri={str(table)!r}, python_callable=rows,
                                    spark_conn_id="spark_cluster")
        """,
    )
    run = module.dag.test(logical_date=DAY)
    assert run.state == "success"
    assert module.masters == [spark_standalone.master_url]
    apps = spark_standalone.status().get("completedapps", [])
    assert len(apps) == before + 1  # the task's application ran on the cluster and ended with the task
    assert apps[-1]["name"] == "airflow-provider-delta" and apps[-1]["cores"] == 1, apps[-1]
    assert deltalake.DeltaTable(str(table)).to_pyarrow_table().num_rows == 1000


JOB = textwrap.dedent(
    """
    # The job a SparkSubmitOperator (or any scheduler) submits: it writes and commits with the Airflow
    # task's exactly-once key, passed on the command line.
    import sys
    from pyspark.sql import SparkSession
    from airflow_provider_delta.spark import write

    table_uri, app_id, app_version = sys.argv[1], sys.argv[2], int(sys.argv[3])
    spark = SparkSession.builder.appName("delta-job").getOrCreate()
    df = spark.range(500).selectExpr("id", "'job' AS source")
    result = write(df, table_uri, mode="append", app_id=app_id, app_version=app_version)
    print(f"RESULT version={result.version} already_committed={result.already_committed}")
    spark.stop()
    """
)


def test_spark_submit_job_commits_once_per_task_key(spark_standalone, tmp_path):
    job = tmp_path / "job.py"
    job.write_text(JOB)
    table = tmp_path / "submitted"
    app_id = f"airflow/ingest/spark_submit/-1/{DAY.isoformat()}"
    submit = Path(spark_standalone.spark_home) / "bin" / "spark-submit"
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable,
           "SPARK_LOCAL_IP": "127.0.0.1"}  # fmt: skip
    # Executors only when a job needs one: the retry, which finds its key and runs no job, starts none.
    lazy = [
        "spark.dynamicAllocation.enabled=true", "spark.dynamicAllocation.shuffleTracking.enabled=true",
        "spark.dynamicAllocation.initialExecutors=0", "spark.dynamicAllocation.minExecutors=0",
    ]  # fmt: skip
    outputs = []
    for _ in range(2):  # the second run is a retry of the same task and interval
        done = subprocess.run(
            [str(submit), "--master", spark_standalone.master_url, "--deploy-mode", "client",
             "--conf", "spark.executor.memory=512m", "--conf", "spark.cores.max=1",
             "--driver-java-options", spark_standalone.jvm_options,
             "--conf", f"spark.executor.extraJavaOptions={spark_standalone.jvm_options}",
             *[arg for setting in lazy for arg in ("--conf", setting)], str(job), str(table), app_id, "1"],
            capture_output=True, text=True, env=env, timeout=300, cwd=ROOT,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr[-3000:]
        outputs.append([line for line in done.stdout.splitlines() if line.startswith("RESULT")])
    first, retry = outputs
    assert first == ["RESULT version=0 already_committed=False"]
    assert retry == ["RESULT version=0 already_committed=True"]
    assert deltalake.DeltaTable(str(table)).to_pyarrow_table().num_rows == 500
