"""The provider as Airflow sees it: provider info that validates, the declared connection form, the Test
button, extras that name themselves, and the Delta view's reading of a table's history (the browser test,
tests/airflow/test_ui.py, covers the pages)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import deltalake
import pyarrow as pa
import pytest

from airflow_provider_delta.extras import EXTRAS, MissingExtraError, require, require_for_uri
from airflow_provider_delta.get_provider_info import get_provider_info
from airflow_provider_delta.hooks.delta import DeltaHook, split_tables
from airflow_provider_delta.log import DeltaTable
from airflow_provider_delta.operators.commit import DeltaCommitOperator
from airflow_provider_delta.operators.create import DeltaCreateTableOperator
from airflow_provider_delta.operators.maintenance import (
    DeltaCheckpointOperator,
    DeltaIcebergConvertOperator,
    DeltaLogCleanupOperator,
    DeltaVacuumOperator,
)
from airflow_provider_delta.operators.spark import DeltaSparkWriteOperator
from airflow_provider_delta.operators.write import DeltaWriteOperator
from airflow_provider_delta.ui.links import DeltaTableLink, canonical_uri, table_page_url
from airflow_provider_delta.ui.table_view import AirflowTask, build_view


def test_provider_info_validates_against_airflows_schema():
    import airflow
    import jsonschema

    schema = json.loads((Path(airflow.__file__).parent / "provider_info.schema.json").read_text())
    jsonschema.validate(get_provider_info(), schema)


def test_the_connection_form_is_declared_for_airflows_ui():
    from airflow.providers_manager import ProvidersManager

    manager = ProvidersManager()
    behaviour = manager.field_behaviours["delta"]
    assert behaviour["hidden_fields"] == ["schema", "port"]
    assert behaviour["relabeling"]["host"] == "S3 endpoint URL (optional)"
    assert behaviour["placeholders"]["extra__delta__tables"].startswith("s3://")
    widgets = manager.connection_form_widgets
    assert widgets["extra__delta__tables"].field["schema"]["title"] == "Tables"
    assert widgets["extra__delta__region_name"].hook_class_name.endswith("DeltaHook")


def _delta_conn(monkeypatch, conn_id: str, **extra) -> None:
    monkeypatch.setenv(f"AIRFLOW_CONN_{conn_id.upper()}", json.dumps({"conn_type": "delta", "extra": extra}))


def test_test_button_reads_each_table_of_the_connection(monkeypatch, tmp_path):
    deltalake.write_deltalake(str(tmp_path / "a"), pa.table({"x": [1]}))
    deltalake.write_deltalake(str(tmp_path / "a"), pa.table({"x": [2]}), mode="append")
    _delta_conn(monkeypatch, "delta_ok", tables=f"{tmp_path / 'a'}")
    assert DeltaHook("delta_ok").test_connection() == (True, f"read {tmp_path / 'a'} at version 1")
    _delta_conn(monkeypatch, "delta_missing", tables=[str(tmp_path / "a"), str(tmp_path / "none")])
    ok, message = DeltaHook("delta_missing").test_connection()
    assert not ok and message.startswith("TableNotFoundError") and str(tmp_path / "none") in message
    _delta_conn(monkeypatch, "delta_no_tables", storage_options={"region_name": "x"})
    ok, message = DeltaHook("delta_no_tables").test_connection()
    assert ok and "name tables" in message
    _delta_conn(monkeypatch, "delta_bad", storage_options={"evil": 1}, tables="s3://b/t")
    ok, message = DeltaHook("delta_bad").test_connection()
    assert not ok and "evil" in message


def test_tables_field_forms():
    assert split_tables("s3://b/a, s3://b/c/\n/local/t") == ["s3://b/a", "s3://b/c", "/local/t"]
    assert split_tables('["s3://b/a"]') == ["s3://b/a"]
    assert split_tables(None) == [] and split_tables(["x/"]) == ["x"]


def test_a_missing_extra_names_the_pip_line(monkeypatch):
    monkeypatch.setitem(EXTRAS, "no_such_module_for_delta", ("spark", "a test feature"))
    with pytest.raises(MissingExtraError, match=r"pip install 'airflow-provider-delta\[spark\]'") as err:
        require("no_such_module_for_delta")
    assert isinstance(err.value, ImportError) and err.value.extra == "spark"
    require("pyspark")  # installed here (the test extra pulls [all])
    require_for_uri("s3://bucket/t")
    require_for_uri("/local/path")


def test_every_operator_has_the_table_link_and_json_renderers():
    for operator in (DeltaCommitOperator, DeltaCreateTableOperator, DeltaCheckpointOperator,
                     DeltaVacuumOperator, DeltaLogCleanupOperator, DeltaIcebergConvertOperator,
                     DeltaSparkWriteOperator, DeltaWriteOperator):  # fmt: skip
        assert any(isinstance(link, DeltaTableLink) for link in operator.operator_extra_links), operator
        for field in getattr(operator, "template_fields_renderers", {}):
            assert field in operator.template_fields, (operator, field)
    assert "spark_conf" in DeltaSparkWriteOperator.template_fields


def test_link_urls_name_the_table_once():
    assert canonical_uri("/data/t/") == "file:///data/t" and canonical_uri("s3://b/t/") == "s3://b/t"
    assert table_page_url("s3://b/t", 3) == "/delta/table?uri=s3%3A%2F%2Fb%2Ft&version=3"


def test_app_ids_of_our_operators_name_the_task():
    task = AirflowTask.from_app_id("airflow/dag_a/group.task/2/2024-01-01T00:00:00+00:00")
    assert task == AirflowTask("dag_a", "group.task", 2, "2024-01-01T00:00:00+00:00")
    assert AirflowTask.from_app_id("my-own-app") is None
    assert AirflowTask.from_app_id("airflow/d/t/x/i") is None


def test_the_view_walks_the_table_back_exactly(tmp_path):
    uri = str(tmp_path / "t")
    deltalake.write_deltalake(uri, pa.table({"a": [1, 2, 3]}))
    deltalake.write_deltalake(uri, pa.table({"a": [4]}), mode="append")
    deltalake.write_deltalake(uri, pa.table({"a": [5, 6]}), mode="overwrite")
    deltalake.DeltaTable(uri).delete("a = 5")
    table = DeltaTable(uri)
    view = build_view(table, selected=1)
    assert [r.version for r in view.rows] == [3, 2, 1, 0]
    assert view.exact_points
    for point in view.points:
        snap = table.snapshot(point.version)
        assert (point.files, point.bytes) == (snap.num_files, sum(snap.files.column("size").to_pylist()))
    by_version = {r.version: r for r in view.rows}
    assert (by_version[0].files_added, by_version[0].rows_added) == (1, 3)
    assert (by_version[2].files_added, by_version[2].files_removed) == (1, 2)
    delete = by_version[3]  # rewrites the file with 5 and 6 into one with 6: rows from the metrics
    assert delete.operation == "DELETE" and (delete.rows_added, delete.rows_removed) == (1, 2)
    assert view.maintenance.commits_since_checkpoint == 4 and view.maintenance.vacuum_files == 0
    assert view.protocol["minReaderVersion"] == 1


def test_the_view_of_a_big_table_reads_no_file_list(tmp_path, monkeypatch):
    """Over ``VACUUM_PREVIEW_MAX_FILES`` live files (counted by the version checksum), the page makes no
    VACUUM dry run and never replays the file list; it says how to get the preview."""
    from airflow_provider_delta.log.snapshot import snapshot as snapshot_module
    from airflow_provider_delta.ui import table_view

    uri = str(tmp_path / "t")
    table = DeltaTable.create(uri, pa.schema([("a", pa.int64())]))
    for i in range(3):
        table.write(pa.table({"a": [i]}))
    monkeypatch.setattr(table_view, "VACUUM_PREVIEW_MAX_FILES", 2)

    def no_file_list(*args, **kwargs):
        raise AssertionError("the page replayed the file list")

    monkeypatch.setattr(snapshot_module, "replay_version", no_file_list)
    view = build_view(DeltaTable(uri))
    assert (view.num_files, view.version) == (3, 3) and view.size_bytes == table.snapshot().table_size_bytes
    assert view.maintenance.vacuum_files is None
    assert "not checked on this page for a table of 3 live files" in view.maintenance.vacuum_note


def test_the_view_opens_an_old_version_beyond_the_window(tmp_path):
    uri = str(tmp_path / "t")
    for i in range(5):
        deltalake.write_deltalake(uri, pa.table({"a": [i]}), mode="append")
    view = build_view(DeltaTable(uri), limit=2, selected=0)
    assert [r.version for r in view.rows] == [4, 3, 0]
    assert [p.version for p in view.points] == [3, 4]



def _task_logs(path: Path) -> dict[str, list[dict]]:
    """The JSON log records of a dag.test() run, per task (between its start and end lines)."""
    tasks: dict[str, list[dict]] = {}
    current: list[dict] | None = None
    for line in path.read_text().splitlines():
        record = json.loads(line)
        event = str(record.get("event", ""))
        if event.startswith("[DAG TEST] starting task_id="):
            current = tasks.setdefault(event.split("task_id=")[1].split()[0], [])
        elif event.startswith("[DAG TEST] end task"):
            current = None
        elif current is not None:
            current.append(record)
    return tasks


def test_a_failed_task_logs_its_error_and_nothing_else(tmp_path: Path, dag_file):
    """Each table operator failing for real under dag.test() (the link, the XCom and the lineage code are
    shared by every class of a module, so one failure per module): the task log's only error is the task's
    exception. Airflow builds the "Delta table" link after every try; it used to ask for the ``delta_commit``
    XCom a failed try never pushed, which logged ``XCom not found`` as a second error."""
    from test_hook import task_sdk_logging

    existing, missing = tmp_path / "existing", tmp_path / "missing"
    DeltaTable.create(str(existing), pa.schema([("id", pa.int64())]))
    module = dag_file("delta_fails", f"""
        import datetime as dt
        from airflow.sdk import DAG
        from airflow_provider_delta.operators.commit import DeltaCommitOperator
        from airflow_provider_delta.operators.create import DeltaCreateTableOperator
        from airflow_provider_delta.operators.layout import DeltaOptimizeOperator
        from airflow_provider_delta.operators.maintenance import DeltaCheckpointOperator
        from airflow_provider_delta.operators.write import DeltaWriteOperator
        EXISTING, MISSING, NEW = {str(existing)!r}, {str(missing)!r}, {str(tmp_path / "new")!r}
        with DAG("delta_fails", schedule=None, start_date=dt.datetime(2024, 1, 1), catchup=False) as dag:
            DeltaCommitOperator(task_id="commit", table_uri=MISSING, files=["x.parquet"])
            DeltaCreateTableOperator(task_id="create", table_uri=EXISTING, schema=[("id", "long")],
                                     exist_ok=False)
            DeltaCheckpointOperator(task_id="checkpoint", table_uri=MISSING)
            DeltaOptimizeOperator(task_id="optimize", table_uri=EXISTING, zorder_by=["no_such_column"])
            DeltaWriteOperator(task_id="write", table_uri=EXISTING, data={{"id": ["not a number"]}})
            DeltaWriteOperator(task_id="written", table_uri=NEW, data={{"id": [1]}})
        """)  # fmt: skip
    log = Path(os.environ["AIRFLOW_HOME"], "logs", "delta_fails", "dag_test.log")
    with task_sdk_logging(log):
        run = module.dag.test()
    states = {ti.task_id: ti.state for ti in run.get_task_instances()}
    assert states == {"commit": "failed", "create": "failed", "checkpoint": "failed", "optimize": "failed",
                      "write": "failed", "written": "success"}  # fmt: skip
    assert "XCom not found" not in log.read_text()
    errors = {task: [(r["event"], [e["exc_type"] for e in r.get("exception", [])])
                     for r in records if r["level"] in ("error", "critical")]
              for task, records in _task_logs(log).items()}  # fmt: skip
    assert errors == {
        "commit": [("Task failed with exception", ["TableNotFoundError"])],
        "create": [("Task failed with exception", ["FileExistsError"])],
        "checkpoint": [("Task failed with exception", ["TableNotFoundError"])],
        "optimize": [("Task failed with exception", ["ZOrderColumnError"])],
        "write": [("Task failed with exception", ["SchemaMismatchError"])],
        "written": [],
    }
    # The link still reads the try's own record: the task that committed links to its version.
    links = {ti.task_id: ti.xcom_pull(task_ids=ti.task_id, key="_link_DeltaTableLink")
             for ti in run.get_task_instances()}  # fmt: skip
    assert links["written"] == table_page_url(canonical_uri(str(tmp_path / "new")), 0)
    assert links["commit"] == ""
