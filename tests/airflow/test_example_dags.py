"""Every example DAG in dags_examples/ imports cleanly and runs to success with dag.test().

dag.test() only runs DAGs from the configured dags folder, so the examples are copied there; their tables
go under tmp_path through DELTA_EXAMPLE_ROOT, which the examples read when they are parsed.
"""

from __future__ import annotations

import datetime as dt
import importlib.util
import shutil
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType, SimpleNamespace

import deltalake
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from airflow_provider_delta.log import DeltaTable, add_file_from_parquet
from airflow_provider_delta.log.table import read_table
from airflow_provider_delta.triggers.delta import DeltaTableWatcherTrigger

EXAMPLES = Path(__file__).resolve().parents[2] / "dags_examples"
DAG_IDS = {
    "delta_ingest",
    "delta_downstream",
    "delta_asset_watch",
    "delta_maintenance",
    "delta_spark_pipeline",
    "delta_spark_merge",
    "delta_rows",
    "delta_changes_upstream",
    "delta_changes_downstream",
    "delta_upsert",
}
DAYS = [dt.datetime(2024, 1, d, tzinfo=dt.UTC) for d in (1, 2, 3)]


@pytest.fixture
def examples(dags_folder: Path, tmp_path: Path, monkeypatch) -> Iterator[Callable[[str], ModuleType]]:
    """Copies of the examples in the dags folder; ``load(name)`` imports one with its tables in tmp_path."""
    monkeypatch.setenv("DELTA_EXAMPLE_ROOT", str(tmp_path / "tables"))
    monkeypatch.delenv("DELTA_EXAMPLE_CONN_ID", raising=False)
    copies = [Path(shutil.copy(p, dags_folder / p.name)) for p in sorted(EXAMPLES.glob("*.py"))]

    def load(name: str) -> ModuleType:
        spec = importlib.util.spec_from_file_location(
            f"example_{name}_{uuid.uuid4().hex}", dags_folder / f"{name}.py"
        )
        assert spec and spec.loader
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module

    yield load
    for path in copies:
        path.unlink(missing_ok=True)


def _xcom(run, task_id: str, map_index: int = -1):
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session

    query = XComModel.get_many(
        run_id=run.run_id, dag_ids=run.dag_id, task_ids=task_id, map_indexes=map_index, key="return_value"
    )
    with create_session() as session:
        row = session.scalars(query).first()
        return None if row is None else XComModel.deserialize_value(row)


def _test(module: ModuleType, day: dt.datetime):
    run = module.dag.test(logical_date=day)
    assert run.state == "success", f"{module.dag.dag_id} {day.date()}: {run.state}"
    return run


def test_every_example_imports_into_a_dagbag():
    from airflow.dag_processing.dagbag import DagBag
    from airflow.serialization.serialized_objects import DagSerialization

    bag = DagBag(dag_folder=str(EXAMPLES))
    assert bag.import_errors == {}
    assert set(bag.dag_ids) == DAG_IDS
    for dag in bag.dags.values():
        assert DagSerialization.from_dict(DagSerialization.to_dict(dag)).dag_id == dag.dag_id


def test_ingest_downstream_and_maintenance_run(examples, tmp_path: Path):
    ingest, downstream, maintenance = (
        examples("delta_ingest"),
        examples("delta_downstream"),
        examples("delta_maintenance"),
    )
    table = str(tmp_path / "tables" / "events")
    expected = {day.date(): ingest.day_rows(day.date()).num_rows for day in DAYS}
    for day in DAYS:
        run = _test(ingest, day)
        assert _xcom(run, "commit") == DAYS.index(day) + 1
    # A re-run of a day already loaded (a clear, a retry) commits nothing; its new file stays unreferenced.
    run = _test(ingest, DAYS[1])
    assert _xcom(run, "commit") == 2
    snap = DeltaTable(table).snapshot()
    assert snap.version == 3 and snap.num_files == 3
    assert snap.app_transactions == {f"airflow/delta_ingest/commit/-1/{d.isoformat()}": 1 for d in DAYS}
    rows = deltalake.DeltaTable(table).to_pyarrow_table()
    assert rows.num_rows == sum(expected.values())
    per_day = rows.group_by("day").aggregate([("event_id", "count")]).to_pydict()
    assert dict(zip(per_day["day"], per_day["event_id_count"], strict=True)) == expected

    for day in DAYS:
        run = _test(downstream, day)
        assert _xcom(run, "wait_for_ingest") == 3
        summary = _xcom(run, "summarize")
        assert summary == {
            "version": 3,
            "files": 3,
            "rows": sum(expected.values()),
            "day_files": 1,
            "day_rows": expected[day.date()],
        }

    run = _test(maintenance, DAYS[-1])
    optimized = _xcom(run, "maintain.optimize", 0)  # one file per day: nothing to compact
    assert optimized["engine"] == "pyarrow" and optimized["numFilesRemoved"] == 0
    assert optimized["versions"] == []
    assert _xcom(run, "maintain.checkpoint", 0)["version"] == 3
    assert _xcom(run, "maintain.vacuum", 0)["num_files"] == 0  # the re-run's orphan is younger than 7 days
    assert _xcom(run, "maintain.cleanup_logs", 0) == []
    assert deltalake.DeltaTable(table).to_pyarrow_table().num_rows == sum(expected.values())


def test_rows_dag_writes_each_day_once_and_checks_it_with_a_filtered_read(examples, tmp_path: Path):
    rows = examples("delta_rows")
    table = str(tmp_path / "tables" / "orders")
    for i, day in enumerate(DAYS[:2]):
        run = _test(rows, day)
        assert _xcom(run, "write_rows") == i
        check = _xcom(run, "check_day")
        assert check == {"version": i, "day": day.date().isoformat(), "orders": len(rows.payload(day.date())),
                         "total": round(sum(r["amount"] for r in rows.payload(day.date())), 2)}  # fmt: skip
    # A retry or a clear of a day already written writes nothing and commits nothing.
    files = {p for p in (tmp_path / "tables" / "orders").rglob("*.parquet")}
    run = _test(rows, DAYS[0])
    assert _xcom(run, "write_rows") == 0 and _xcom(run, "check_day")["version"] == 0
    assert {p for p in (tmp_path / "tables" / "orders").rglob("*.parquet")} == files
    snap = DeltaTable(table).snapshot()
    assert snap.version == 1 and snap.app_transactions == {
        f"airflow/delta_rows/write_rows/-1/{d.isoformat()}": 1 for d in DAYS[:2]
    }
    theirs = deltalake.DeltaTable(table).to_pyarrow_table()
    assert theirs.num_rows == sum(len(rows.payload(d.date())) for d in DAYS[:2])


def _per_customer(rows: pa.Table) -> dict[str, float]:
    out: dict[str, float] = {}
    for r in rows.select(["customer", "amount"]).to_pylist():
        out[r["customer"]] = round(out.get(r["customer"], 0.0) + r["amount"], 6)
    return out


def test_changes_pair_aggregates_only_the_new_changes_exactly_once(examples, tmp_path: Path):
    upstream, downstream = examples("delta_changes_upstream"), examples("delta_changes_downstream")
    orders, totals = str(tmp_path / "tables" / "orders_feed"), str(tmp_path / "tables" / "order_totals")
    _test(upstream, DAYS[0])
    first = _xcom(_test(downstream, DAYS[0]), "aggregate")
    assert first["start"] == 0 and first["rows"] == 5 and not first["already_committed"]
    _test(upstream, DAYS[1])  # 5 new orders, 2 corrected: 5 inserts, 2 pre- and 2 post-images
    second = _xcom(_test(downstream, DAYS[1]), "aggregate")
    assert (second["start"], second["rows"]) == (first["end"] + 1, 9)
    again = _xcom(_test(downstream, DAYS[1]), "aggregate")  # a clear: nothing new, nothing committed
    assert again == {"start": None, "end": None, "rows": 0, "committed_version": None,
                     "already_committed": False}  # fmt: skip
    _test(upstream, DAYS[1])  # a re-run of the upstream day commits nothing either
    assert DeltaTable(totals).version() == second["committed_version"]
    corrections = DeltaTable(orders).changes(second["start"]).versions[-1]
    assert corrections.operation == "MERGE" and corrections.cdc.num_rows == 1
    # The totals, summed per customer, are the orders' amounts per customer: every change counted once.
    assert _per_customer(deltalake.DeltaTable(totals).to_pyarrow_table()) == _per_customer(
        DeltaTable(orders).scan().to_table())  # deletion vectors: deltalake cannot read orders_feed
    progress = DeltaTable(totals).snapshot().app_transactions
    assert progress == {"delta_changes_downstream/aggregate": second["end"]}


def test_maintenance_maps_over_the_tables_variable(examples, tmp_path: Path, monkeypatch):
    tables = [str(tmp_path / name) for name in ("a", "b")]
    for uri in tables:  # two small files each: OPTIMIZE compacts them into one, as version 2
        deltalake.write_deltalake(uri, pa.table({"id": [1, 2]}))
        deltalake.write_deltalake(uri, pa.table({"id": [3]}), mode="append")
    monkeypatch.setenv("AIRFLOW_VAR_DELTA_MAINTENANCE_TABLES", f'["{tables[0]}", "{tables[1]}"]')
    run = _test(examples("delta_maintenance"), DAYS[0])
    for i, uri in enumerate(tables):
        optimized = _xcom(run, "maintain.optimize", i)
        assert optimized["numFilesRemoved"] == 2 and optimized["versions"] == [2]
        assert _xcom(run, "maintain.checkpoint", i) == {**_xcom(run, "maintain.checkpoint", i), "version": 2}
        assert (Path(uri) / "_delta_log" / f"{2:020d}.checkpoint.parquet").exists()
        theirs = deltalake.DeltaTable(uri)
        assert len(theirs.file_uris()) == 1
        assert sorted(theirs.to_pyarrow_table()["id"].to_pylist()) == [1, 2, 3]


def test_downstream_defers_until_the_day_lands(examples, tmp_path: Path):
    """The sensor defers (dag.test runs the trigger in line) and wakes when the ingest's appId lands."""
    ingest, downstream = examples("delta_ingest"), examples("delta_downstream")
    _test(ingest, DAYS[0])
    day = DAYS[1]
    downstream.dag.get_task("wait_for_ingest").poke_interval = 0.2
    table = DeltaTable(ingest.TABLE)

    def land() -> None:  # what the ingest's commit does for the day, done by hand a moment later
        rel = f"day={day.date()}/part-{uuid.uuid4()}.parquet"
        (tmp_path / "tables" / "events" / f"day={day.date()}").mkdir()
        pq.write_table(ingest.day_rows(day.date()), tmp_path / "tables" / "events" / rel)
        txn = table.transaction()
        txn.add_files([add_file_from_parquet(txn.snapshot, rel, {"day": str(day.date())})])
        txn.set_app_transaction(f"airflow/delta_ingest/commit/-1/{day.isoformat()}", 1).commit()

    timer = threading.Timer(1.5, land)
    started = time.monotonic()
    timer.start()
    try:
        run = _test(downstream, day)
    finally:
        timer.join()
    assert time.monotonic() - started >= 1.5
    assert _xcom(run, "wait_for_ingest") == 2
    assert _xcom(run, "summarize")["day_rows"] == ingest.day_rows(day.date()).num_rows


def test_asset_watch_trigger_watches_the_clicks_table(examples, tmp_path: Path):
    module = examples("delta_asset_watch")
    (watcher,) = module.clicks.watchers
    trigger = watcher.trigger
    assert isinstance(trigger, DeltaTableWatcherTrigger)
    assert trigger.table_uri == str(tmp_path / "tables" / "clicks")
    assert module.clicks.uri == f"file://{tmp_path}/tables/clicks"
    classpath, kwargs = trigger.serialize()
    assert classpath == "airflow_provider_delta.triggers.delta.DeltaTableWatcherTrigger"
    assert kwargs["table_uri"] == trigger.table_uri and kwargs["data_changes_only"] is True
    assert list(module.dag.timetable.asset_condition.objects) == [module.clicks]


def test_asset_watch_runs_without_a_triggering_event(examples, tmp_path: Path):
    """A manual run (no triggering asset event) reads the latest version, or None before the table exists."""
    module = examples("delta_asset_watch")
    run = _test(module, DAYS[0])
    assert _xcom(run, "on_new_version") is None
    deltalake.write_deltalake(str(tmp_path / "tables" / "clicks"), pa.table({"id": [1]}))
    deltalake.write_deltalake(str(tmp_path / "tables" / "clicks"), pa.table({"id": [2]}), mode="append")
    run = _test(module, DAYS[1])
    assert _xcom(run, "on_new_version") == 1


def test_asset_watch_reads_versions_from_events(examples):
    module = examples("delta_asset_watch")
    events = [
        SimpleNamespace(
            extra={"from_trigger": True, "payload": {"table_uri": "t", "version": 7, "previous": 6}}
        ),
        SimpleNamespace(extra={"version": 9, "operation": "WRITE"}),  # a DeltaCommitOperator's outlet event
        SimpleNamespace(extra={}),
    ]
    assert module.event_versions(events) == [7, 9]
    assert module.event_versions(None) == []


def test_spark_pipeline_ingests_each_day_once_then_waits_and_maintains(examples, tmp_path: Path):
    pipeline = examples("delta_spark_pipeline")
    table = str(tmp_path / "tables" / "spark_events")
    for n, day in enumerate(DAYS[:2]):  # the first write creates the table with its data: version 0
        run = _test(pipeline, day)
        assert _xcom(run, "ingest") == n
        assert _xcom(run, "wait_for_day") == n  # the sensor saw the day's app transaction at that version
        assert _xcom(run, "checkpoint")["version"] == n
    run = _test(pipeline, DAYS[0])  # a clear of a day already loaded: nothing new is committed
    assert _xcom(run, "ingest") == 0
    rows = deltalake.DeltaTable(table).to_pyarrow_table()
    assert deltalake.DeltaTable(table).version() == 1
    per_day = rows.group_by("day").aggregate([("id", "count")]).to_pydict()
    expected = {d.date(): pipeline.ROWS_PER_DAY for d in DAYS[:2]}
    assert dict(zip(per_day["day"], per_day["id_count"], strict=True)) == expected


def test_spark_merge_applies_each_days_change_batch_once(examples, tmp_path: Path):
    """The dimension after each day's MERGE; a clear of a day already merged (the same exactly-once key)
    merges nothing: the table's version moves once per day."""
    dag = examples("delta_spark_merge")
    table = str(tmp_path / "tables" / "customers")
    for n, day in enumerate(DAYS[:2]):
        run = _test(dag, day)
        assert _xcom(run, "merge_changes") == n + 1  # version 0 is the table's creation
        assert _xcom(run, "wait_for_merge") == n + 1
    rows = read_table(table).to_pylist()
    by_id = {r["customer_id"]: r for r in rows}
    deleted = set(range(5, 1000, 50))
    assert set(by_id) == set(range(0, 2000)) - deleted
    assert {i for i, r in by_id.items() if r["tier"] == "gold"} == set(range(0, 1000, 10))
    history = DeltaTable(table).history()
    merge_info = next(h.commit_info for h in history if h.version == 2)
    assert merge_info["operation"] == "MERGE"
    counts = {"numTargetRowsInserted": 1000, "numTargetRowsUpdated": 100, "numTargetRowsDeleted": 20}
    assert {k: int(merge_info["operationMetrics"][k]) for k in counts} == counts
    run = _test(dag, DAYS[1])  # a clear of day 2: its key is in the table, nothing is merged again
    assert _xcom(run, "merge_changes") == 2 and _xcom(run, "wait_for_merge") == 2
    assert DeltaTable(table).version() == 2
    again = read_table(table).to_pylist()
    assert sorted(again, key=lambda r: r["customer_id"]) == sorted(rows, key=lambda r: r["customer_id"])
