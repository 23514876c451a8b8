"""OPTIMIZE on the Spark standalone cluster (a master and two workers on 127.0.0.1): the same plan and
commit as on local[2], with executors in other processes. Its own module: a local session must not be the
one ``getOrCreate`` returns."""

from __future__ import annotations

from pathlib import Path

from test_spark_optimize import _table, kernel_rows

from airflow_provider_delta.spark import optimize


def test_on_the_standalone_cluster(spark_standalone, tmp_path: Path):
    table = _table(tmp_path / "t", 6)
    before = kernel_rows(tmp_path / "t")
    session = spark_standalone.session()
    try:
        metrics = optimize(session, table.uri, zorder_by=["x"])
        apps = spark_standalone.status().get("activeapps", [])
    finally:
        session.stop()
    assert apps, "the OPTIMIZE ran on the cluster"
    assert metrics.num_files_removed == 12 and kernel_rows(tmp_path / "t") == before
    assert (tmp_path / "t" / table.snapshot().file_paths()[0]).exists()
