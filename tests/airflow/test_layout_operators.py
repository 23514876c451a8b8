"""DeltaOptimizeOperator and DeltaRestoreOperator in real DAG runs (``dag.test()``, templated fields
rendered by Jinja), on tables the core writes; the rows after are read by deltalake (delta-rs).
"""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import deltalake
import numpy as np
import pyarrow as pa
import pytest

from airflow_provider_delta.log import DeltaTable
from airflow_provider_delta.log.maintenance.optimize import describe
from airflow_provider_delta.operators.layout import DeltaOptimizeOperator, ProgressLog

SEED = 3


def _table(root: Path, appends: int = 4, rows: int = 30) -> DeltaTable:
    """``appends`` commits of ``rows`` rows, partitioned by day: one small file per day per append."""
    print(f"seed {SEED}")
    rng = np.random.default_rng(SEED)
    table = DeltaTable(str(root))
    for i in range(appends):
        table.write(pa.table({
            "id": pa.array(range(i * rows, (i + 1) * rows), pa.int64()),
            "x": pa.array(rng.integers(0, 1000, rows), pa.int32()),
            "day": pa.array(["2024-03-04", "2024-03-05"] * (rows // 2)),
        }), partition_by=["day"])  # fmt: skip
    return table


def _rows(root: Path) -> list[tuple]:
    t = deltalake.DeltaTable(str(root)).to_pyarrow_table()
    return sorted(zip(t["id"].to_pylist(), t["x"].to_pylist(), t["day"].to_pylist(), strict=True))


def _dag(dag_file, tmp_path: Path, name: str, body: str):
    out = tmp_path / f"{name}.json"
    return out, dag_file(name, f"""
        import datetime as dt, json
        from airflow.sdk import DAG, task
        from airflow_provider_delta.operators.layout import DeltaOptimizeOperator, DeltaRestoreOperator

        with DAG({name!r}, schedule=None, start_date=dt.datetime(2024, 1, 1),
                 params={{"root": {str(tmp_path)!r}}}) as dag:
            uri = "{{{{ params.root }}}}/t"
{body}
            @task
            def record(result):
                with open({str(out)!r}, "w") as f:
                    json.dump(result, f)

            record(last.output)
        """)  # fmt: skip


def test_optimize_operator_compacts_the_days_partition_with_pyarrow(tmp_path: Path, dag_file, capsys):
    table = _table(tmp_path / "t")
    before = _rows(tmp_path / "t")
    out, module = _dag(dag_file, tmp_path, "layout_optimize", """
            last = DeltaOptimizeOperator(
                task_id="optimize", table_uri=uri, engine="auto", progress_interval=0,
                partition_filter='[["day", "=", "{{ ds }}"]]', zorder_by="{{ 'x' }}")
""")  # fmt: skip
    run = module.dag.test(logical_date=dt.datetime(2024, 3, 5, tzinfo=dt.UTC))
    assert run.state == "success"
    result = json.loads(out.read_text())
    assert result["engine"] == "pyarrow" and result["numFilesRemoved"] == 4 and result["versions"] == [4]
    assert result["zOrderStats"]["numOutputCubes"] == 1
    assert _rows(tmp_path / "t") == before
    info = table.history(1)[0].commit_info
    assert info["operation"] == "OPTIMIZE" and info["operationParameters"]["zOrderBy"] == '["x"]'
    assert info["operationParameters"]["predicate"] == '["day = \'2024-03-05\'"]'
    days = [dict(v)["day"] for v in table.snapshot().files.column("partitionValues").to_pylist()]
    assert sorted(days) == ["2024-03-04"] * 4 + ["2024-03-05"]
    # The task log (Airflow's structured log, on stdout under dag.test()): every report, the interval being 0.
    progress = [line for line in capsys.readouterr().out.splitlines() if "OPTIMIZE (pyarrow): " in line]
    assert progress and "bins 0/1" in progress[0] and "bins 1/1" in progress[-1] and "done" in progress[-1]


def test_optimize_operator_refuses_a_partition_column_by_name(tmp_path: Path, dag_file):
    table = _table(tmp_path / "t", appends=2)
    files = sorted((tmp_path / "t").rglob("*.parquet"))
    out, module = _dag(dag_file, tmp_path, "layout_optimize_bad", """
            last = DeltaOptimizeOperator(task_id="optimize", table_uri=uri, engine="pyarrow",
                                         zorder_by=["day"])
""")  # fmt: skip
    run = module.dag.test(logical_date=dt.datetime(2024, 3, 5, tzinfo=dt.UTC))
    assert run.state == "failed" and not out.exists()
    assert sorted((tmp_path / "t").rglob("*.parquet")) == files and table.version() == 1


def test_optimize_operator_on_spark_when_the_table_is_over_the_threshold(tmp_path: Path, dag_file):
    table = _table(tmp_path / "t")
    before = _rows(tmp_path / "t")
    out, module = _dag(dag_file, tmp_path, "layout_optimize_spark", """
            last = DeltaOptimizeOperator(task_id="optimize", table_uri=uri, engine="auto",
                                         spark_threshold_bytes=1, master="local[1]")
""")  # fmt: skip
    run = module.dag.test(logical_date=dt.datetime(2024, 3, 5, tzinfo=dt.UTC))
    assert run.state == "success"
    result = json.loads(out.read_text())
    assert result["engine"] == "spark" and result["numFilesRemoved"] == 8 and result["numFilesAdded"] == 2
    assert _rows(tmp_path / "t") == before and table.snapshot().num_files == 2


def test_restore_operator_brings_back_a_version(tmp_path: Path, dag_file):
    table = _table(tmp_path / "t", appends=3)
    expected = deltalake.DeltaTable(str(tmp_path / "t"), version=1).to_pyarrow_table().num_rows
    out, module = _dag(dag_file, tmp_path, "layout_restore", """
            last = DeltaRestoreOperator(task_id="restore", table_uri=uri, version="{{ 0 + 1 }}",
                                        enforce_retention_duration=False)
""")  # fmt: skip
    run = module.dag.test(logical_date=dt.datetime(2024, 3, 5, tzinfo=dt.UTC))
    assert run.state == "success"
    result = json.loads(out.read_text())
    assert result["version"] == 3 and result["restored_version"] == 1 and result["numRemovedFiles"] == 2
    assert deltalake.DeltaTable(str(tmp_path / "t")).to_pyarrow_table().num_rows == expected
    assert table.history(1)[0].operation == "RESTORE"


def test_progress_log_keeps_a_steady_cadence():
    lines: list[str] = []

    class Log:
        def info(self, fmt: str, text: str) -> None:
            lines.append(text)

    progress = ProgressLog(Log(), interval=3600)
    report = {"engine": "pyarrow", "files_planned": 10, "bytes_planned": 2048, "bins_total": 2,
              "bins_done": 0, "bytes_read": 0, "bytes_written": 0, "commits": 0, "elapsed_s": 0.0,
              "eta_s": None, "final": False}  # fmt: skip
    for done in range(3):
        progress(describe({**report, "bins_done": done}))
    progress(describe({**report, "bins_done": 2, "final": True, "eta_s": 0.0}), final=True)
    assert len(lines) == 2  # the first, then nothing within the interval, then the final one always
    assert "bins 0/2" in lines[0] and "ETA ?" in lines[0] and "bins 2/2" in lines[1] and "done" in lines[1]


def test_bad_engine_is_refused_when_the_dag_is_parsed():
    with pytest.raises(ValueError, match="engine must be one of"):
        DeltaOptimizeOperator(task_id="o", table_uri="/tmp/x", engine="duckdb")
