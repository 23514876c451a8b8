"""UniForm from Airflow: ``DeltaIcebergConvertOperator`` in real DAG runs (dag.test()) after a
DeltaWriteOperator write, its XCom status and the rows pyiceberg reads; and the Delta view's "Iceberg
(UniForm)" row, rendered by the app's own page function for tables that are up to date, behind for real
(a file that is not Iceberg metadata where the next one goes, so a commit's conversion failed) or never
converted, and absent on a table without UniForm.
"""

from __future__ import annotations

import datetime as dt
import html
import json
import re
import shutil
from pathlib import Path

import pyarrow as pa
import pytest
from iceberg_readers import pyiceberg_rows, sorted_rows

from airflow_provider_delta.log import DeltaTable

DAY = dt.datetime(2024, 3, 1, tzinfo=dt.UTC)
UNIFORM = {"delta.enableIcebergCompatV2": "true", "delta.universalFormat.enabledFormats": "iceberg"}
SCHEMA = pa.schema([("id", pa.int64()), ("name", pa.string()), ("day", pa.string())])


def _uniform_table(uri: Path) -> DeltaTable:
    """As tests/log/test_uniform.py makes them: IcebergCompatV2 with iceberg among the universal formats."""
    return DeltaTable.create(str(uri), SCHEMA, ["day"], UNIFORM)


def _rows(start: int, n: int) -> pa.Table:
    ids = list(range(start, start + n))
    return pa.table({"id": ids, "name": [f"n{i}" for i in ids], "day": ["2024-01-01"] * n}, schema=SCHEMA)


def _xcom(run, task_id: str):
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session

    query = XComModel.get_many(run_id=run.run_id, dag_ids=run.dag_id, task_ids=task_id, key="return_value")
    with create_session() as session:
        row = session.scalars(query).first()
        return None if row is None else XComModel.deserialize_value(row)


def _dag_source(dag_id: str, root: Path, *, write: bool) -> str:
    writer = ""
    if write:
        writer = f"""
            @task
            def payload(ds=None):
                return [{{"id": i, "name": f"w{{i}}", "day": ds}} for i in range(4)]
            written = DeltaWriteOperator(task_id="write", table_uri={str(root)!r}, data=payload())
            written >> to_iceberg"""
    return f"""
        import datetime as dt
        from airflow.sdk import DAG, task
        from airflow_provider_delta.operators.maintenance import DeltaIcebergConvertOperator
        from airflow_provider_delta.operators.write import DeltaWriteOperator
        with DAG({dag_id!r}, schedule="@daily", start_date=dt.datetime(2024, 1, 1), catchup=False) as dag:
            to_iceberg = DeltaIcebergConvertOperator(task_id="to_iceberg", table_uri={str(root)!r}, retries=0)
            {writer.strip()}
        """


def test_a_dag_writes_then_the_operator_reports_iceberg_up_to_date(tmp_path: Path, dag_file):
    root = tmp_path / "orders"
    _uniform_table(root).write(_rows(100, 2))  # version 1, before the DAG
    dag = dag_file("uniform_write", _dag_source("uniform_write", root, write=True)).dag
    run = dag.test(logical_date=DAY)
    assert run.state == "success"
    table = DeltaTable(str(root))
    assert table.version() == 2
    status = _xcom(run, "to_iceberg")
    assert status == {
        "uri": status["uri"], "enabled": True, "table_version": 2, "converted_version": 2,
        "metadata_file": status["metadata_file"], "lag": 0, "last_error": None,
    }  # fmt: skip
    assert status["metadata_file"].endswith("/metadata/v3.metadata.json")
    iceberg = sorted_rows(pyiceberg_rows(status["metadata_file"]))
    assert iceberg == sorted_rows(table.to_pyarrow_table())
    written = [{"id": i, "name": f"w{i}", "day": "2024-03-01"} for i in range(4)]
    assert iceberg == sorted_rows(pa.Table.from_pylist([*_rows(100, 2).to_pylist(), *written]))


def test_the_operator_catches_up_after_a_failed_conversion_and_refuses_a_table_without_uniform(
    tmp_path: Path, dag_file
):
    root = tmp_path / "t"
    table = _uniform_table(root)
    table.write(_rows(0, 2))  # version 1: metadata/v2.metadata.json
    junk = root / "metadata" / "v3.metadata.json"
    junk.write_text("not iceberg")
    table.write(_rows(2, 2))  # version 2 commits; its conversion fails on the junk
    assert (table.iceberg_status().converted_version, table.iceberg_status().lag) == (1, 1)
    junk.unlink()
    run = dag_file("uniform_catch_up", _dag_source("uniform_catch_up", root, write=False)).dag.test(
        logical_date=DAY
    )
    assert run.state == "success"
    status = _xcom(run, "to_iceberg")
    assert (status["converted_version"], status["lag"], status["last_error"]) == (2, 0, None)
    assert sorted_rows(pyiceberg_rows(status["metadata_file"])) == sorted_rows(_rows(0, 4))

    plain = tmp_path / "plain"
    DeltaTable.create(str(plain), SCHEMA).write(_rows(0, 1))
    run = dag_file("uniform_refused", _dag_source("uniform_refused", plain, write=False)).dag.test(
        logical_date=DAY
    )
    assert run.state == "failed" and _xcom(run, "to_iceberg") is None
    assert not (plain / "metadata").exists()


# -- the Delta view ----------------------------------------------------------------------------------------
@pytest.fixture
def delta_connection(airflow_db, monkeypatch):
    """A ``delta`` connection kept in the metadata DB whose Tables field names the tables (how the view
    knows a table no task wrote), read as the API server reads it (``airflow.api_fastapi.main`` marks its
    process ``server``, whose connections come from the metadata DB)."""
    from airflow.models.connection import Connection
    from airflow.utils.session import create_session

    monkeypatch.setenv("_AIRFLOW_PROCESS_CONTEXT", "server")
    conn_id = "delta_uniform_view"

    def name_tables(*uris: Path) -> None:
        with create_session() as session:
            session.add(Connection(conn_id=conn_id, conn_type="delta",
                                   extra=json.dumps({"tables": ", ".join(map(str, uris))})))  # fmt: skip

    yield name_tables
    with create_session() as session:
        session.query(Connection).filter(Connection.conn_id == conn_id).delete()


def _maintenance_text(uri: Path) -> str:
    """The page the app serves for ``/delta/table?uri=...``: its "Pending maintenance" table as text."""
    from airflow_provider_delta.ui.app import _table_page

    response = _table_page(str(uri), None)
    assert response.status_code == 200
    page = response.body.decode()
    table = re.search(r'<table id="maintenance">(.*?)</table>', page, re.S)
    assert table, page
    return html.unescape(re.sub(r"<[^>]+>", "", table.group(1)))


def test_the_view_shows_how_far_iceberg_lags(tmp_path: Path, delta_connection):
    current, behind, never, plain = (tmp_path / n for n in ("current", "behind", "never", "plain"))
    _uniform_table(current).write(_rows(0, 2))  # version 1: metadata/v2.metadata.json

    table = _uniform_table(behind)
    table.write(_rows(0, 2))
    (behind / "metadata" / "v3.metadata.json").write_text("not iceberg")
    table.write(_rows(2, 2))  # version 2 commits, its Iceberg metadata cannot be written
    assert table.iceberg_status().lag == 1

    _uniform_table(never).write(_rows(0, 1))
    shutil.rmtree(never / "metadata")  # no Iceberg metadata at all: both versions behind

    DeltaTable.create(str(plain), SCHEMA).write(_rows(0, 1))
    delta_connection(current, behind, never, plain)

    text = _maintenance_text(current)
    assert "Iceberg (UniForm)up to date: Iceberg metadata holds version 1 (metadata/v2.metadata.json)" in text

    text = _maintenance_text(behind)
    # The newest file is the junk one (v3): the row names the newest readable one, the error the junk.
    assert ("Iceberg (UniForm)1 version(s) behind: Iceberg metadata holds version 1 "
            "(metadata/v2.metadata.json); the next commit or "
            "DeltaIcebergConvertOperator / deltalog uniform --convert catches up") in text  # fmt: skip
    assert f"{behind.as_uri()}/metadata/v3.metadata.json is not Iceberg table metadata" in text

    text = _maintenance_text(never)
    assert "Iceberg (UniForm)2 version(s) behind: Iceberg metadata holds none yet; the next commit" in text

    text = _maintenance_text(plain)
    assert "VACUUM" in text and "Checkpoint" in text and "Iceberg" not in text
