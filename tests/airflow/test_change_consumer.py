"""A downstream DAG consumes a table's changes exactly once (``DeltaHook.consume_changes``), in real DAG runs.

The upstream table (change data feed on) keeps committing appends, deletes by deletion vector and updates
with change data while the downstream run is retried (its first try dies after reading), cleared (run
again), fed by a watcher trigger that is restarted from its serialized state, and backfilled with an older
range; one run fails for good. The sink records, per consumed range, how many change rows of each type it
read; at the end the counts add up to exactly the source's change rows, each version in exactly one range.
A consumer that writes no table keeps its progress in Airflow's asset state store: a try that dies between
processing and recording makes the retry process the range again (at least once), and each range's
progress is set once.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from airflow_provider_delta.hooks.changes import ChangeRange, change_range
from airflow_provider_delta.log import DeltaTable
from airflow_provider_delta.triggers.delta import DeltaTableWatcherTrigger

CDF = {"delta.enableChangeDataFeed": "true", "delta.enableDeletionVectors": "true"}
SCHEMA = pa.schema([("id", pa.int64()), ("v", pa.string())])
SEED = 1616


def _source(root: Path, sink: Path, fail_marker: Path) -> str:
    return f"""
        import datetime as dt, os
        import pyarrow as pa, pyarrow.compute as pc
        from airflow.sdk import DAG, task
        from airflow_provider_delta.hooks.delta import DeltaHook
        FAIL = {str(fail_marker)!r}

        def counts(rows):
            got = rows.group_by("_change_type").aggregate([("id", "count")]) if rows.num_rows else None
            if os.path.exists(FAIL):  # the try reads, then dies before its commit: "retried"
                mode = open(FAIL).read()
                if mode == "once":
                    os.remove(FAIL)
                raise RuntimeError("worker lost after reading the changes")
            n = 0 if got is None else got.num_rows
            return pa.table({{"change_type": got.column(0) if n else pa.array([], pa.string()),
                             "rows": got.column(1).cast(pa.int64()) if n else pa.array([], pa.int64())}})

        with DAG("consume_once", schedule=None, start_date=dt.datetime(2024, 1, 1), catchup=False) as dag:
            @task(retries=1, retry_delay=0)
            def consume(dag_run=None):
                upto = (dag_run.conf or {{}}).get("range")
                done = DeltaHook(None).consume_changes({str(root)!r}, "consume_once/consume", counts,
                                                       sink_uri={str(sink)!r}, upto=upto)
                return done.to_dict()
            consume()
        """


def _commit_some(table: DeltaTable, rng: np.random.Generator, next_id: list[int]) -> None:
    """An append, a delete by deletion vector or an update with change data, at random."""
    live = table.scan(metadata=["file_path", "row_index"]).to_table()
    kind = rng.choice(["append", "delete", "update"]) if live.num_rows > 4 else "append"
    if kind == "append":
        n = int(rng.integers(1, 6))
        ids = list(range(next_id[0], next_id[0] + n))
        next_id[0] += n
        table.write(pa.table({"id": ids, "v": [f"v{i}" for i in ids]}, schema=SCHEMA))
        return
    pick = rng.choice(live.num_rows, size=int(rng.integers(1, 3)), replace=False)
    chosen = live.take(pa.array(pick))
    where = chosen.column("_metadata").combine_chunks()
    rows: dict[str, list[int]] = {}
    for path, index in zip(where.field("file_path").to_pylist(), where.field("row_index").to_pylist(),
                           strict=True):  # fmt: skip
        rows.setdefault(path, []).append(index)
    txn = table.transaction().delete_rows(rows)
    if kind == "update":
        before = chosen.drop_columns(["_metadata"])
        after = before.set_column(1, "v", pa.array([f"{x}+" for x in before.column("v").to_pylist()]))
        path = f"update-{next_id[0]}.parquet"
        next_id[0] += 1
        pq.write_table(after, Path(table.uri) / path)
        kinds = pa.array(["update_preimage"] * len(before) + ["update_postimage"] * len(after))
        txn.add_files(table.add_file(path)).add_change_data(pa.concat_tables([before, after]).append_column(
            "_change_type", kinds))  # fmt: skip
    txn.commit(kind.upper())


async def _next_event(trigger: DeltaTableWatcherTrigger) -> dict[str, Any]:
    events = trigger.run()
    try:
        return (await asyncio.wait_for(anext(events), 30)).payload
    finally:
        await events.aclose()


def test_every_change_is_consumed_once_through_retries_clears_restarts_and_backfills(
    tmp_path: Path, dag_file
):
    from test_triggers import FakeStateStore  # the asset state store stand-in, documented there

    print(f"seed {SEED}")
    rng = np.random.default_rng(SEED)
    root, sink, fail = tmp_path / "source", tmp_path / "sink", tmp_path / "fail"
    table = DeltaTable.create(str(root), SCHEMA, configuration=CDF)
    next_id = [0]
    dag = dag_file("consume_once", _source(root, sink, fail)).dag

    def run(rng_range: ChangeRange | None) -> dict[str, Any]:
        conf = {"range": rng_range.to_dict()} if rng_range is not None else {}
        result = dag.test(run_conf=conf)
        return {"state": result.state}

    for _ in range(3):
        _commit_some(table, rng, next_id)
    store = FakeStateStore("source")
    trigger = DeltaTableWatcherTrigger(str(root), poke_interval=0.05)
    trigger.asset_state_store = store
    # The watcher's first start only stores its cursor; the next commit is its first event.
    pending = asyncio.run(_first_start_then_event(trigger, table, rng, next_id))
    first_range = change_range(pending)
    assert first_range is not None and first_range.to_version == table.version()

    # Retried: the first try reads and dies; the retry reads the same range and commits it once.
    fail.write_text("once")
    assert run(first_range)["state"] == "success"
    assert _progress(sink) == first_range.to_version
    # Cleared: the same range again commits nothing.
    versions_before = DeltaTable(str(sink)).version()
    assert run(first_range)["state"] == "success"
    assert DeltaTable(str(sink)).version() == versions_before

    # The triggerer restarts: the trigger is rebuilt from its serialized state; commits land meanwhile.
    for _ in range(4):
        _commit_some(table, rng, next_id)
    classpath, kwargs = trigger.serialize()
    rebuilt = DeltaTableWatcherTrigger(**kwargs)
    rebuilt.asset_state_store = store
    second_range = change_range(asyncio.run(_next_event(rebuilt)))
    assert second_range.from_version == first_range.to_version + 1
    assert second_range.to_version == table.version()

    # A run that fails for good (both tries): its range is not recorded...
    fail.write_text("always")
    assert run(second_range)["state"] == "failed"
    fail.unlink()
    assert _progress(sink) == first_range.to_version
    for _ in range(3):
        _commit_some(table, rng, next_id)
    third_range = change_range(asyncio.run(_next_event(rebuilt)))
    # ...so the next run reads it too: from its own progress, not from the event's from_version.
    assert third_range.from_version == second_range.to_version + 1
    assert run(third_range)["state"] == "success"
    assert _progress(sink) == third_range.to_version
    # A backfill of an older range (and a run with no range, up to the latest) reads nothing new.
    assert run(second_range)["state"] == "success"
    assert run(first_range)["state"] == "success"
    assert run(None)["state"] == "success"

    # Count: the sink's rows per change type equal the source's change rows, all versions once.
    latest = table.version()
    assert _progress(sink) == latest
    expected = table.changes(1, latest).to_table().group_by("_change_type").aggregate([("id", "count")])
    want = dict(zip(expected.column(0).to_pylist(), expected.column(1).to_pylist(), strict=True))
    got: dict[str, int] = {}
    for r in DeltaTable(str(sink)).scan().to_table().to_pylist():
        got[r["change_type"]] = got.get(r["change_type"], 0) + r["rows"]
    assert got == want and sum(want.values()) > 0
    commits = [v for v in DeltaTable(str(sink)).history() if v.operation == "WRITE"]
    assert len(commits) == 2  # the first range, then the second and third together


async def _first_start_then_event(trigger, table, rng, next_id) -> dict[str, Any]:
    events = trigger.run()
    pending = asyncio.ensure_future(anext(events))
    for _ in range(200):  # the first start stores the cursor; wait for it before committing
        if trigger.asset_state_store.cursors()["source"] is not None:
            break
        await asyncio.sleep(0.02)
    else:
        pytest.fail("the watcher never stored its cursor")
    await asyncio.to_thread(_commit_some, table, rng, next_id)
    try:
        return (await asyncio.wait_for(pending, 30)).payload
    finally:
        await events.aclose()


def _progress(sink: Path) -> int:
    return DeltaTable(str(sink)).snapshot().app_transactions.get("consume_once/consume", -1)


def _state_store_source(root: Path, out: Path, fail_marker: Path) -> str:
    return f"""
        import datetime as dt, json, os
        from pathlib import Path
        from airflow.sdk import DAG, Asset, task
        from airflow_provider_delta.hooks.delta import DeltaHook
        SOURCE = Asset(name="changes_source", uri={"file://" + str(root)!r})
        OUT, FAIL = Path({str(out)!r}), Path({str(fail_marker)!r})

        class Recorded:
            # Airflow's own accessor underneath; each set is logged so the test can count them.
            def __init__(self, accessor):
                self.accessor = accessor
            def get(self, key):
                return self.accessor.get(key)
            def set(self, key, value):
                self.accessor.set(key, value)
                with open(OUT / "progress.jsonl", "a") as f:
                    f.write(json.dumps({{"key": key, "value": value}}) + "\\n")

        def process(rows):
            # Idempotent: the output of a range is one file named for it, overwritten by a repeat.
            versions = sorted(set(rows.column("_commit_version").to_pylist()))
            kinds = rows.column("_change_type").to_pylist()
            first, last = (versions[0], versions[-1]) if versions else (None, None)
            counts = {{k: kinds.count(k) for k in set(kinds)}}
            (OUT / f"range-{{first}}-{{last}}.json").write_text(json.dumps(counts))
            with open(OUT / "processed.jsonl", "a") as f:
                f.write(json.dumps({{"versions": versions, "rows": rows.num_rows}}) + "\\n")
            if FAIL.exists():  # processed, then the worker dies before the progress is recorded
                FAIL.unlink()
                raise RuntimeError("worker lost between processing and recording progress")

        with DAG("consume_to_state_store", schedule=None, start_date=dt.datetime(2024, 1, 1),
                 catchup=False) as dag:
            @task(retries=1, retry_delay=0, inlets=[SOURCE])
            def consume(asset_state_store=None):
                done = DeltaHook(None).consume_changes({str(root)!r}, "consumer", process,
                                                       progress=Recorded(asset_state_store[SOURCE]))
                return done.to_dict()
            consume()
        """


def test_without_a_sink_each_range_is_processed_at_least_once_and_its_progress_recorded_once(
    tmp_path: Path, dag_file
):
    """The state-store path under real Airflow: a try that processed a range and died before recording
    progress makes the retry process the same range again (at least once: hence ``process`` must be
    idempotent), and the progress of each range is set once, by the try that finished."""
    print(f"seed {SEED}")
    rng = np.random.default_rng(SEED)
    root, out, fail = tmp_path / "source", tmp_path / "out", tmp_path / "fail"
    out.mkdir()
    table = DeltaTable.create(str(root), SCHEMA, configuration=CDF)
    next_id = [0]
    dag = dag_file("consume_to_state_store", _state_store_source(root, out, fail)).dag

    def progress_writes() -> list[int]:
        path = out / "progress.jsonl"
        lines = path.read_text().splitlines() if path.exists() else []
        return [json.loads(line)["value"] for line in lines]

    def processed() -> list[list[int]]:
        path = out / "processed.jsonl"
        lines = path.read_text().splitlines() if path.exists() else []
        return [json.loads(line)["versions"] for line in lines]

    for _ in range(3):
        _commit_some(table, rng, next_id)
    first = table.version()
    fail.touch()  # the first try processes 1..first, then dies
    assert dag.test().state == "success"
    assert processed() == [list(range(1, first + 1))] * 2  # the retry processed the same range again
    assert progress_writes() == [first]  # ...and only the retry recorded progress

    assert dag.test().state == "success"  # nothing new: nothing processed, nothing recorded
    assert len(processed()) == 2 and progress_writes() == [first]

    for _ in range(4):
        _commit_some(table, rng, next_id)
    second = table.version()
    assert dag.test().state == "success"
    assert processed()[2:] == [list(range(first + 1, second + 1))]
    assert progress_writes() == [first, second]
    assert _stored_progress("changes_source", "delta_consumer/consumer") == second  # in Airflow's DB

    # What the idempotent outputs add up to: each change row once, though a range was processed twice.
    got: dict[str, int] = {}
    for path in out.glob("range-*.json"):
        for kind, n in json.loads(path.read_text()).items():
            got[kind] = got.get(kind, 0) + n
    expected = table.changes(1, second).to_table().group_by("_change_type").aggregate([("id", "count")])
    assert got == dict(zip(expected.column(0).to_pylist(), expected.column(1).to_pylist(), strict=True))


def _stored_progress(asset_name: str, key: str) -> Any:
    """The value Airflow's asset state store holds (its metadata DB table), read as the API server would."""
    from airflow.models.asset import AssetModel
    from airflow.models.asset_state_store import AssetStateStoreModel
    from airflow.utils.session import create_session

    with create_session() as session:
        store = AssetStateStoreModel
        query = session.query(store).join(AssetModel, AssetModel.id == store.asset_id)
        row = query.filter(AssetModel.name == asset_name, store.key == key).one()
        return json.loads(row.value)


# -- What a run reports: read, already committed, nothing new ---------------------------------------------
def _results_source(root: Path, sink: Path, out: Path) -> str:
    """A consumer whose run conf picks the range (``range``: a dict or a version) and the progress (``sink``
    true: the sink's app transaction; false: the asset state store); a ``fail-after`` file makes the try
    die after consume_changes returned (it committed): the retry runs with the same range."""
    return f"""
        import datetime as dt, json, os
        from pathlib import Path
        import pyarrow as pa
        from airflow.sdk import DAG, Asset, task
        from airflow_provider_delta.hooks.delta import DeltaHook
        SOURCE = Asset(name="results_source", uri={"file://" + str(root)!r})
        OUT = Path({str(out)!r})

        def rows_read(rows):
            with open(OUT / "calls.jsonl", "a") as f:  # each call of process, for the test to count
                f.write(json.dumps(sorted(set(rows.column("_commit_version").to_pylist()))) + "\\n")
            return pa.table({{"rows": [rows.num_rows]}})

        with DAG("consume_results", schedule=None, start_date=dt.datetime(2024, 1, 1), catchup=False) as dag:
            @task(retries=1, retry_delay=0, inlets=[SOURCE])
            def consume(dag_run=None, asset_state_store=None):
                conf = dag_run.conf or {{}}
                where = ({{"sink_uri": {str(sink)!r}}} if conf.get("sink", True)
                         else {{"progress": asset_state_store[SOURCE]}})
                done = DeltaHook(None).consume_changes({str(root)!r}, "results", rows_read,
                                                       upto=conf.get("range"), **where)
                if (OUT / "fail-after").exists():
                    (OUT / "fail-after").unlink()
                    raise RuntimeError("worker lost after the commit")
                return done.to_dict()
            consume()
        """


def _return_value(run: Any, task_id: str) -> Any:
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session

    query = XComModel.get_many(run_id=run.run_id, dag_ids=run.dag_id, task_ids=task_id, key="return_value")
    with create_session() as session:
        row = session.scalars(query).first()
        return None if row is None else XComModel.deserialize_value(row)


def _appends(root: Path, *counts: int) -> DeltaTable:
    """A change-data-feed table at version ``len(counts)``: version 0 empty, then one append per count."""
    table = DeltaTable.create(str(root), SCHEMA, configuration=CDF)
    for n in counts:
        _append(table, n)
    return table


def _append(table: DeltaTable, n: int, **options: Any) -> None:
    start = table.scan().to_table().num_rows
    table.write(pa.table({"id": list(range(start, start + n)), "v": ["x"] * n}, schema=SCHEMA), **options)


def test_a_rerun_of_a_consumed_range_says_already_committed_and_nothing_new_says_so(tmp_path: Path, dag_file):
    root, sink, out = tmp_path / "source", tmp_path / "sink", tmp_path / "out"
    out.mkdir()
    table = _appends(root, 3, 2)
    dag = dag_file("consume_results", _results_source(root, sink, out)).dag

    def run(**conf: Any) -> dict[str, Any]:
        result = dag.test(run_conf=conf)
        assert result.state == "success"
        return _return_value(result, "consume")

    seen = ChangeRange(str(root), 1, 2)
    # Read: from the consumer's progress (none yet: version 0), not from the range's from_version.
    first = run(range=seen.to_dict())
    assert first == {"start": 0, "end": 2, "rows": 5, "committed_version": 0, "already_committed": False}
    # A re-run of the same range (a clear): the range asked for, done, in sink version 0; nothing read.
    assert run(range=seen.to_dict()) == {"start": 1, "end": 2, "rows": 0, "committed_version": 0,
                                         "already_committed": True}  # fmt: skip
    # A version as the bound says no start.
    assert run(range=1) == {"start": None, "end": 1, "rows": 0, "committed_version": 0,
                            "already_committed": True}  # fmt: skip
    # No range and no version after the progress: nothing new, which is not "already committed".
    assert run() == {"start": None, "end": None, "rows": 0, "committed_version": None,
                     "already_committed": False}  # fmt: skip
    assert DeltaTable(str(sink)).version() == 0 and len(_calls(out)) == 1

    _append(table, 4)
    assert run() == {"start": 3, "end": 3, "rows": 4, "committed_version": 1, "already_committed": False}
    # A backfill of the older range: done, covered by the progress sink version 1 recorded.
    assert run(range=seen.to_dict()) == {"start": 1, "end": 2, "rows": 0, "committed_version": 1,
                                         "already_committed": True}  # fmt: skip
    assert DeltaTable(str(sink)).version() == 1
    assert _calls(out) == [[1, 2], [3]]  # version 0 (the creation) changed no rows


def _calls(out: Path) -> list[list[int]]:
    path = out / "calls.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


@pytest.mark.parametrize("sink_mode", [True, False], ids=["sink", "state-store"])
def test_a_retry_after_the_commit_reads_and_commits_nothing(tmp_path: Path, dag_file, sink_mode: bool):
    """The first try consumes the range, records the progress (the sink's commit, or the state store),
    then dies; the retry, with the same range, finds it done: already committed, no second read or commit."""
    root, sink, out = tmp_path / "source", tmp_path / "sink", tmp_path / "out"
    out.mkdir()
    _appends(root, 3, 2)
    dag = dag_file("consume_results", _results_source(root, sink, out)).dag
    (out / "fail-after").touch()
    run = dag.test(run_conf={"range": ChangeRange(str(root), 1, 2).to_dict(), "sink": sink_mode})
    assert run.state == "success" and not (out / "fail-after").exists()
    assert [ti.try_number for ti in run.get_task_instances()] == [2]
    assert _return_value(run, "consume") == {"start": 1, "end": 2, "rows": 0,
                                             "committed_version": 0 if sink_mode else None,
                                             "already_committed": True}  # fmt: skip
    assert _calls(out) == [[1, 2]]  # read once, by the first try
    if sink_mode:
        assert DeltaTable(str(sink)).version() == 0
        assert DeltaTable(str(sink)).snapshot().app_transactions == {"results": 2}
    else:
        assert not sink.exists()
        assert _stored_progress("results_source", "delta_consumer/results") == 2


def _after_ingest_source(root: Path, sink: Path, out: Path) -> str:
    return f"""
        import datetime as dt, json
        import pyarrow as pa
        from airflow.sdk import DAG, task
        from airflow_provider_delta.hooks.delta import DeltaHook
        from airflow_provider_delta.sensors.delta import DeltaVersionSensor

        def rows_read(rows):
            with open({str(out / "calls.jsonl")!r}, "a") as f:
                f.write(json.dumps(sorted(set(rows.column("_commit_version").to_pylist()))) + "\\n")
            return pa.table({{"rows": [rows.num_rows]}})

        with DAG("consume_after_ingest", schedule=None, start_date=dt.datetime(2024, 1, 1),
                 catchup=False) as dag:
            wait = DeltaVersionSensor(task_id="wait", table_uri={str(root)!r}, app_id="ingest",
                                      app_version="{{{{ dag_run.conf['batch'] }}}}", poke_interval=0.1,
                                      timeout=60, deferrable=False)

            @task
            def consume(ti=None):
                seen = ti.xcom_pull(task_ids="wait", key="change_range")
                done = DeltaHook(None).consume_changes({str(root)!r}, "after_ingest", rows_read,
                                                       sink_uri={str(sink)!r}, upto=seen)
                return {{"seen": seen, "done": done.to_dict()}}
            wait >> consume()
        """


def test_after_an_app_transaction_sensor_the_consumer_starts_from_its_own_progress(tmp_path: Path, dag_file):
    """A sensor waiting for an upstream's app transaction hands on a range without ``from_version``: the
    consumer reads from its own progress, and a re-run of the same batch reads nothing."""
    root, sink, out = tmp_path / "source", tmp_path / "sink", tmp_path / "out"
    out.mkdir()
    table = _appends(root)
    _append(table, 3, app_id="ingest", app_version=1)  # version 1
    _append(table, 2)  # version 2: another writer
    dag = dag_file("consume_after_ingest", _after_ingest_source(root, sink, out)).dag

    def run(batch: int) -> dict[str, Any]:
        result = dag.test(run_conf={"batch": batch})
        assert result.state == "success"
        return _return_value(result, "consume")

    assert run(1) == {"seen": {"table_uri": str(root), "from_version": None, "to_version": 2},
                      "done": {"start": 0, "end": 2, "rows": 5, "committed_version": 0,
                               "already_committed": False}}  # fmt: skip
    _append(table, 4, app_id="ingest", app_version=2)  # version 3
    assert run(2) == {"seen": {"table_uri": str(root), "from_version": None, "to_version": 3},
                      "done": {"start": 3, "end": 3, "rows": 4, "committed_version": 1,
                               "already_committed": False}}  # fmt: skip
    assert run(2)["done"] == {"start": None, "end": 3, "rows": 0, "committed_version": 1,
                              "already_committed": True}  # fmt: skip
    assert _calls(out) == [[1, 2], [3]]
    assert DeltaTable(str(sink)).snapshot().app_transactions == {"after_ingest": 3}
