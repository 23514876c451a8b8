"""DeltaMergeOperator, DeltaDeleteOperator and DeltaUpdateOperator in real DAG runs (dag.test()): a payload
from an upstream XCom MERGEd once per interval (a rerun changes nothing, even with a clause that is not
idempotent), a retention DELETE by a templated predicate, an UPDATE rewriting only the file it touches, bad
input failing the task by name with the table unchanged, and what every table operator leaves (asset
event, ``delta_commit`` record, the "Delta table" link, OpenLineage). The example DAG ``delta_upsert`` runs
here too.
"""

from __future__ import annotations

import datetime as dt
import importlib.util
import os
import shutil
import uuid
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from test_exactly_once import asset_events

from airflow_provider_delta.get_provider_info import get_provider_info
from airflow_provider_delta.hooks.delta import DeltaHookMixin
from airflow_provider_delta.log import DeltaTable
from airflow_provider_delta.operators.commit import table_asset
from airflow_provider_delta.operators.row_changes import (
    DeltaDeleteOperator,
    DeltaMergeOperator,
    DeltaUpdateOperator,
)
from airflow_provider_delta.ui.links import COMMIT_XCOM_KEY, DeltaTableLink, canonical_uri, table_page_url

DAY = dt.datetime(2024, 3, 1, tzinfo=dt.UTC)
EXAMPLES = Path(__file__).resolve().parents[2] / "dags_examples"
OPERATORS = (DeltaMergeOperator, DeltaDeleteOperator, DeltaUpdateOperator)
LINK_KEY = "_link_DeltaTableLink"


def _xcom(run: Any, task_id: str, key: str = "return_value") -> Any:
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session

    query = XComModel.get_many(run_id=run.run_id, dag_ids=run.dag_id, task_ids=task_id, key=key)
    with create_session() as session:
        row = session.scalars(query).first()
        return None if row is None else XComModel.deserialize_value(row)


def _link(run: Any, task_id: str) -> str:
    (ti,) = [ti for ti in run.get_task_instances() if ti.task_id == task_id]
    return ti.xcom_pull(task_ids=task_id, key=LINK_KEY)


def _files(root: Path) -> set[Path]:
    return {p for p in root.rglob("*") if p.is_file() and "_delta_log" not in p.parts}


def _rows(root: Path) -> dict[int, dict]:
    return {r["id"]: r for r in DeltaTable(str(root)).scan().to_table().to_pylist()}


def _dag(dag_id: str, body: str) -> str:
    return f"""
        import datetime as dt
        from airflow.sdk import DAG, task
        from airflow_provider_delta.operators.row_changes import (
            DeltaDeleteOperator, DeltaMergeOperator, DeltaUpdateOperator)
        with DAG({dag_id!r}, schedule="@daily", start_date=dt.datetime(2024, 1, 1), catchup=False) as dag:
{body}
        """


def _accounts(root: Path, **configuration: str) -> DeltaTable:
    """Accounts 1..3 with a running total, in one file: version 1."""
    schema = pa.schema([("id", pa.int64()), ("total", pa.float64()), ("day", pa.string())])
    table = DeltaTable.create(str(root), schema, configuration=configuration or None)
    table.write(pa.table({"id": [1, 2, 3], "total": [10.0, 20.0, 30.0], "day": ["2024-01-01"] * 3}))
    return table


# -- MERGE ------------------------------------------------------------------------------------------------
def test_merge_applies_an_xcom_payload_once_per_interval(tmp_path: Path, dag_file):
    """The clause adds the day's amount to the total: applied twice, a rerun would double it."""
    root = tmp_path / "accounts"
    _accounts(root)
    body = f"""
            @task
            def payload(ds=None):
                return [{{"id": 2, "total": 5.0, "day": ds}}, {{"id": 7, "total": 1.5, "day": ds}}]
            DeltaMergeOperator(
                task_id="merge", table_uri={str(root)!r}, data=payload(), on="target.id = source.id",
                clauses=[
                    {{"when": "matched", "then": "update",
                      "set": {{"total": "target.total + source.total", "day": "source.day"}}}},
                    {{"when": "not_matched", "then": "insert", "values": "*"}},
                ],
            )
    """
    dag = dag_file("rc_merge", _dag("rc_merge", body)).dag
    run = dag.test(logical_date=DAY)
    assert run.state == "success"
    result = _xcom(run, "merge")
    assert (result["version"], result["already_committed"]) == (2, False)
    counts = ("numSourceRows", "numTargetRowsUpdated", "numTargetRowsInserted", "numTargetRowsDeleted")
    assert [result["metrics"][k] for k in counts] == [2, 1, 1, 0]
    expected = {1: 10.0, 2: 25.0, 3: 30.0, 7: 1.5}
    assert {i: r["total"] for i, r in _rows(root).items()} == expected
    assert _rows(root)[2]["day"] == "2024-03-01"
    app = f"airflow/rc_merge/merge/-1/{DAY.isoformat()}"
    assert DeltaTable(str(root)).snapshot().app_transactions == {app: 1}
    assert asset_events(root, run) == [{
        "version": 2, "operation": "MERGE", "appId": app, "appVersion": 1, "alreadyCommitted": False,
        "files": result["metrics"]["numTargetFilesAdded"], "records": 1, "rowsUpdated": 1, "rowsDeleted": 0,
    }]  # fmt: skip
    record = _xcom(run, "merge", COMMIT_XCOM_KEY)
    assert (record["version"], record["operation"], record["records_added"]) == (2, "MERGE", 1)
    assert _link(run, "merge") == table_page_url(canonical_uri(str(root)), 2)

    files = _files(root)
    again = dag.test(logical_date=DAY)  # a clear or a retry of the same interval
    assert again.state == "success"
    assert _xcom(again, "merge") == {"version": 2, "metrics": {}, "already_committed": True}
    assert _xcom(again, "merge", COMMIT_XCOM_KEY)["already_committed"] is True
    assert asset_events(root, again)[0]["alreadyCommitted"] is True
    assert {i: r["total"] for i, r in _rows(root).items()} == expected  # not added twice
    assert DeltaTable(str(root)).version() == 2 and _files(root) == files

    later = dag.test(logical_date=DAY + dt.timedelta(days=1))  # the next interval has its own key
    assert _xcom(later, "merge")["version"] == 3 and _rows(root)[2]["total"] == 30.0


def test_a_merge_retried_after_its_commit_landed_applies_once(tmp_path: Path, dag_file):
    """The first try commits, then dies before Airflow hears of it (a lost worker, a timeout): Airflow
    retries the task, and the retry finds its app transaction in the table and changes nothing."""
    root = tmp_path / "accounts"
    _accounts(root)
    body = f"""
            class LosesAck(DeltaMergeOperator):
                def execute(self, context):
                    result = super().execute(context)
                    if context["ti"].try_number == 1:
                        raise RuntimeError("worker lost after the commit landed")
                    return result
            LosesAck(
                task_id="merge", table_uri={str(root)!r}, on="target.id = source.id", retries=1,
                retry_delay=dt.timedelta(0), data=[{{"id": 2, "total": 5.0, "day": "x"}}],
                clauses=[{{"when": "matched", "then": "update",
                           "set": {{"total": "target.total + source.total"}}}}],
            )
    """
    run = dag_file("rc_retry", _dag("rc_retry", body)).dag.test(logical_date=DAY)
    (ti,) = run.get_task_instances()
    assert (ti.state, ti.try_number) == ("success", 2)
    assert _xcom(run, "merge") == {"version": 2, "metrics": {}, "already_committed": True}
    assert {i: r["total"] for i, r in _rows(root).items()} == {1: 10.0, 2: 25.0, 3: 30.0}  # once, not 30.0
    assert DeltaTable(str(root)).version() == 2


def test_an_empty_payload_commits_nothing(tmp_path: Path, dag_file):
    root = tmp_path / "accounts"
    _accounts(root)
    body = f"""
            @task
            def payload():
                return []
            DeltaMergeOperator(task_id="merge", table_uri={str(root)!r}, data=payload(),
                               on="target.id = source.id")
    """
    run = dag_file("rc_empty", _dag("rc_empty", body)).dag.test(logical_date=DAY)
    assert run.state == "success"
    assert _xcom(run, "merge") == {"version": None, "metrics": {}, "already_committed": False}
    assert _xcom(run, "merge", COMMIT_XCOM_KEY) is None and _link(run, "merge") == ""
    assert [e["version"] for e in asset_events(root, run)] == [None]
    assert DeltaTable(str(root)).version() == 1


# -- DELETE and UPDATE ------------------------------------------------------------------------------------
def test_a_retention_delete_by_templated_predicate_marks_rows_once(tmp_path: Path, dag_file):
    root = tmp_path / "events"
    schema = pa.schema([("id", pa.int64()), ("day", pa.date32())])
    table = DeltaTable.create(str(root), schema, configuration={"delta.enableDeletionVectors": "true"})
    days = [dt.date(2024, 1, 1) + dt.timedelta(days=7 * i) for i in range(10)]  # 2024-01-01 .. 2024-03-04
    table.write(pa.table({"id": list(range(10)), "day": pa.array(days)}))
    body = f"""
            DeltaDeleteOperator(task_id="retention", table_uri={str(root)!r},
                                predicate="day < '{{{{ macros.ds_add(ds, -30) }}}}'")
    """
    dag = dag_file("rc_delete", _dag("rc_delete", body)).dag
    run = dag.test(logical_date=DAY)  # 2024-03-01: keeps 2024-01-31 and later
    assert run.state == "success"
    result = _xcom(run, "retention")
    assert result["version"] == 2 and result["metrics"]["numDeletedRows"] == 5
    # Deletion vectors: the rows are marked, no data file is written or removed.
    assert result["metrics"]["numDeletionVectorsAdded"] == 1 and result["metrics"]["numAddedFiles"] == 0
    assert sorted(r["day"] for r in _rows(root).values()) == days[5:]
    app = f"airflow/rc_delete/retention/-1/{DAY.isoformat()}"
    (event,) = asset_events(root, run)
    assert event == {"version": 2, "operation": "DELETE", "appId": app, "appVersion": 1,
                     "alreadyCommitted": False, "files": 0, "rowsDeleted": 5}  # fmt: skip
    assert _link(run, "retention") == table_page_url(canonical_uri(str(root)), 2)
    again = dag.test(logical_date=DAY)
    assert _xcom(again, "retention") == {"version": 2, "metrics": {}, "already_committed": True}
    assert DeltaTable(str(root)).version() == 2


def test_an_update_rewrites_only_the_file_it_touches(tmp_path: Path, dag_file):
    root = tmp_path / "accounts"
    table = _accounts(root)  # copy-on-write: no deletion vectors
    table.write(pa.table({"id": [4], "total": [40.0], "day": ["2024-02-01"]}))
    untouched = {p for p in _files(root) if "part" in p.name and p.stat().st_size > 0}
    body = f"""
            DeltaUpdateOperator(task_id="update", table_uri={str(root)!r},
                                set={{"total": "total * 2", "day": "'{{{{ ds }}}}'"}},
                                predicate="day < '{{{{ macros.ds_add(ds, -30) }}}}' AND id <> 3")
    """
    dag = dag_file("rc_update", _dag("rc_update", body)).dag
    run = dag.test(logical_date=DAY)
    assert run.state == "success"
    result = _xcom(run, "update")
    metrics = result["metrics"]
    assert result["version"] == 3 and metrics["numUpdatedRows"] == 2
    assert (metrics["numRemovedFiles"], metrics["numAddedFiles"], metrics["numCopiedRows"]) == (1, 1, 1)
    rows = _rows(root)
    changed, kept = (20.0, 40.0), {3: (30.0, "2024-01-01"), 4: (40.0, "2024-02-01")}
    assert {i: (r["total"], r["day"]) for i, r in rows.items()} == {
        **{i + 1: (total, "2024-03-01") for i, total in enumerate(changed)}, **kept}  # fmt: skip
    live = set(DeltaTable(str(root)).snapshot().file_paths())
    assert sum(1 for p in untouched if str(p.relative_to(root)) in live) == 1  # 2024-02-01's file stays
    assert asset_events(root, run)[0]["rowsUpdated"] == 2
    assert _xcom(dag.test(logical_date=DAY), "update")["already_committed"] is True
    assert _rows(root) == rows


# -- refused input ----------------------------------------------------------------------------------------
def test_bad_input_fails_the_task_by_name_and_changes_nothing(tmp_path: Path, dag_file):
    from task_logs import task_sdk_logging
    from test_provider_conventions import _task_logs

    root = tmp_path / "accounts"
    _accounts(root)
    uri = str(root)
    body = f"""
            rows = [{{"id": 1, "total": 1.0, "day": "x"}}, {{"id": 2, "total": 2.0, "day": "x"}}]
            DeltaMergeOperator(task_id="unknown_column", table_uri={uri!r}, data=rows,
                               on="target.id = source.id AND target.nope > 0")
            DeltaMergeOperator(task_id="no_join_key", table_uri={uri!r}, data=rows,
                               on="target.id < source.id")
            DeltaMergeOperator(task_id="duplicate_keys", table_uri={uri!r}, data=rows + rows,
                               on="target.id = source.id")
            DeltaDeleteOperator(task_id="delete_unknown", table_uri={uri!r}, predicate="nope = 1")
            DeltaUpdateOperator(task_id="update_unknown", table_uri={uri!r}, set={{"nope": "1"}})
    """
    module = dag_file("rc_refused", _dag("rc_refused", body))
    files = _files(root)
    log = Path(os.environ["AIRFLOW_HOME"], "logs", "rc_refused", "dag_test.log")
    with task_sdk_logging(log):
        run = module.dag.test(logical_date=DAY)
    tasks = ["unknown_column", "no_join_key", "duplicate_keys", "delete_unknown", "update_unknown"]
    assert {ti.task_id: ti.state for ti in run.get_task_instances()} == dict.fromkeys(tasks, "failed")
    errors = {task: [e["exc_type"] for r in records if r["level"] == "error" for e in r.get("exception", [])]
              for task, records in _task_logs(log).items()}  # fmt: skip
    assert errors == {"unknown_column": ["ColumnNotFoundError"], "no_join_key": ["InvalidConditionError"],
                      "duplicate_keys": ["MergeCardinalityError"], "delete_unknown": ["ColumnNotFoundError"],
                      "update_unknown": ["ColumnNotFoundError"]}  # fmt: skip
    assert DeltaTable(uri).version() == 1 and _files(root) == files
    assert all(_link(run, ti.task_id) == "" for ti in run.get_task_instances())
    assert asset_events(root, run) == []


def _source(context: Any) -> Any:
    raise AssertionError("not run here")


@pytest.mark.parametrize(("clauses", "message"), [
    ([], "at least one clause"),
    ([{"when": "matched", "then": "insert", "values": "*"}], "is not one of"),
    ([{"when": "matched", "then": "update", "set": "*"}, {"when": "matched", "then": "delete"}],
     "every matched clause but the last needs a condition"),
    ([{"when": "not_matched_by_source", "then": "update", "set": "*"}], "needs 'set'"),
])  # fmt: skip
def test_clause_lists_are_refused_when_the_dag_is_parsed(clauses: list, message: str):
    with pytest.raises(ValueError, match=message):
        DeltaMergeOperator(task_id="m", table_uri="/t", python_callable=_source, on="target.id = source.id",
                           clauses=clauses)  # fmt: skip


@pytest.mark.parametrize(("make", "message"), [
    (lambda: DeltaMergeOperator(task_id="m", table_uri="/t", on="true"), "exactly one of data"),
    (lambda: DeltaDeleteOperator(task_id="d", table_uri="/t", predicate=None), "'true' selects every row"),
    (lambda: DeltaDeleteOperator(task_id="d", table_uri="/t", predicate="  "), "'true' selects every row"),
    (lambda: DeltaUpdateOperator(task_id="u", table_uri="/t", set={}), "non-empty dict"),
])  # fmt: skip
def test_arguments_that_could_change_the_wrong_rows_are_refused(make: Any, message: str):
    with pytest.raises(ValueError, match=message):
        make()


def test_a_predicate_that_renders_blank_is_refused_before_any_delete(tmp_path: Path, dag_file):
    root = tmp_path / "accounts"
    _accounts(root)
    body = f"""
            DeltaDeleteOperator(task_id="delete", table_uri={str(root)!r},
                                predicate="{{{{ params.get('where', '') }}}}")
    """
    run = dag_file("rc_blank", _dag("rc_blank", body)).dag.test(logical_date=DAY)
    assert run.state == "failed" and len(_rows(root)) == 3 and DeltaTable(str(root)).version() == 1


# -- conventions ------------------------------------------------------------------------------------------
def test_the_operators_follow_the_providers_conventions():
    modules = {m for group in get_provider_info()["operators"] for m in group["python-modules"]}
    assert "airflow_provider_delta.operators.row_changes" in modules
    for operator in OPERATORS:
        assert issubclass(operator, DeltaHookMixin)
        assert any(isinstance(link, DeltaTableLink) for link in operator.operator_extra_links), operator
        assert {"table_uri", "app_id", "app_version"} <= set(operator.template_fields)
        assert set(operator.template_fields_renderers) <= set(operator.template_fields), operator
    assert {"data", "on", "clauses"} <= set(DeltaMergeOperator.template_fields)
    assert "predicate" in DeltaDeleteOperator.template_fields
    assert {"set", "predicate"} <= set(DeltaUpdateOperator.template_fields)
    op = DeltaDeleteOperator(task_id="d", table_uri="/data/t", predicate="true")
    assert op.outlets == [table_asset("/data/t")]
    templated = DeltaDeleteOperator(task_id="d", table_uri="/data/{{ ds }}", predicate="true")
    assert templated.outlets == []  # the asset of a templated URI is not known when the DAG is parsed


def test_lineage_reports_the_table_with_the_schema_the_merge_evolved(tmp_path: Path):
    from airflow.providers.openlineage.extractors import OperatorLineage
    from test_lineage import _Events

    root = tmp_path / "accounts"
    _accounts(root)
    op = DeltaMergeOperator(
        task_id="merge", table_uri=str(root), on="target.id = source.id", merge_schema=True, app_id="lineage",
        data=[{"id": 9, "total": 9.0, "day": "d", "region": "eu"}],
    )  # fmt: skip
    events = _Events()
    assert op.execute({"outlet_events": events, "ti": None})["version"] == 2
    assert events[table_asset(str(root))].extra["records"] == 1
    lineage = op.get_openlineage_facets_on_complete(task_instance=None)
    assert isinstance(lineage, OperatorLineage) and not lineage.inputs
    (out,) = lineage.outputs
    assert (out.namespace, out.name) == ("file", str(root))
    assert [f.name for f in out.facets["schema"].fields] == ["id", "total", "day", "region"]


# -- the example DAG ---------------------------------------------------------------------------------------
def test_the_upsert_example_merges_each_day_once_and_applies_retention(tmp_path: Path, dags_folder: Path,
                                                                       monkeypatch):  # fmt: skip
    monkeypatch.setenv("DELTA_EXAMPLE_ROOT", str(tmp_path / "tables"))
    monkeypatch.delenv("DELTA_EXAMPLE_CONN_ID", raising=False)
    copy = Path(shutil.copy(EXAMPLES / "delta_upsert.py", dags_folder / "delta_upsert.py"))
    try:
        spec = importlib.util.spec_from_file_location(f"example_upsert_{uuid.uuid4().hex}", copy)
        assert spec and spec.loader
        example = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(example)
        days = [dt.datetime(2024, 1, d, tzinfo=dt.UTC) for d in (1, 2, 3)]
        first = example.dag.test(logical_date=days[0])
        assert first.state == "success"
        assert _xcom(first, "upsert_orders")["metrics"]["numTargetRowsInserted"] == example.NEW_PER_DAY
        assert _xcom(first, "cancel_stale")["version"] is None  # nothing a week old yet
        assert _xcom(first, "apply_retention")["version"] is None
        second = example.dag.test(logical_date=days[1])
        merged = _xcom(second, "upsert_orders")
        metrics = merged["metrics"]
        assert merged["version"] == 2
        assert (metrics["numTargetRowsUpdated"], metrics["numTargetRowsInserted"]) == (5, 10)
        assert metrics["numTargetDeletionVectorsAdded"] == 1  # the shipped rows marked, their file kept
        again = example.dag.test(logical_date=days[1])  # a clear of a day already merged
        assert _xcom(again, "upsert_orders") == {"version": 2, "metrics": {}, "already_committed": True}
        # Day 3 with short windows: the unshipped orders of days 1 and 2 are cancelled, then day 1 deleted.
        third = example.dag.test(logical_date=days[2], run_conf={"cancel_after_days": 0, "retention_days": 1})
        assert third.state == "success"
        assert _xcom(third, "cancel_stale")["metrics"]["numUpdatedRows"] == example.NEW_PER_DAY
        assert _xcom(third, "apply_retention")["metrics"]["numDeletedRows"] == example.NEW_PER_DAY
        rows = DeltaTable(example.TABLE).scan().to_table().to_pylist()
        assert sorted({r["day"].isoformat() for r in rows}) == ["2024-01-02", "2024-01-03"]
        status = {r["order_id"]: r["status"] for r in rows}
        assert status == {**{f"2024-01-02-{i:02d}": "cancelled" if i % 2 else "shipped" for i in range(10)},
                          **{f"2024-01-03-{i:02d}": "placed" for i in range(10)}}  # fmt: skip
    finally:
        copy.unlink(missing_ok=True)
