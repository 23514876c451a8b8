"""DeltaVersionSensor in a real Airflow (dag.test()), in poke mode and deferred, and its cost per poke on S3.

Every "fires when it becomes true" test makes the table change from another thread *after* the sensor (or
its trigger) has looked and not fired: the tests wrap the core's ``observe`` (calling the real one) to know
when a check happened. dag.test() runs a deferred task's trigger inline in the same process.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from airflow_provider_delta.log import AddFile, DeltaTable
from airflow_provider_delta.log.commits.tail import NO_TABLE, Observation
from airflow_provider_delta.sensors import delta as sensors
from airflow_provider_delta.sensors.delta import DeltaVersionSensor
from airflow_provider_delta.triggers import delta as triggers
from airflow_provider_delta.triggers.delta import DeltaVersionTrigger

POKE = 0.1
WAIT = 30.0  # seconds before giving up on something that should happen at once


@dataclass(frozen=True)
class Check:
    where: str  # "sensor" (poke or the deferring execute) or "trigger"
    cursor_in: int | None
    out: Observation


class Checks:
    """Every check the sensor and its trigger made, in order, observable from another thread."""

    def __init__(self) -> None:
        self.seen: list[Check] = []
        self.stop = threading.Event()
        self._cond = threading.Condition()

    def wrap(self, where: str, real: Callable[..., Observation]) -> Callable[..., Observation]:
        def observe(table: Any, condition: Any, cursor: int | None) -> Observation:
            out = real(table, condition, cursor)
            with self._cond:
                self.seen.append(Check(where, cursor, out))
                self._cond.notify_all()
            return out

        return observe

    def wait_for(self, done: Callable[[list[Check]], bool]) -> bool:
        with self._cond:
            self._cond.wait_for(lambda: done(self.seen) or self.stop.is_set(), WAIT)
            return done(self.seen)

    def finish(self) -> None:
        with self._cond:
            self.stop.set()
            self._cond.notify_all()


@pytest.fixture
def checks(monkeypatch: pytest.MonkeyPatch) -> Checks:
    c = Checks()
    monkeypatch.setattr(sensors, "observe", c.wrap("sensor", sensors.observe))
    monkeypatch.setattr(triggers, "observe", c.wrap("trigger", triggers.observe))
    return c


Step = tuple[int, Callable[[DeltaTable], int]]


class Driver(threading.Thread):
    """Runs ``steps``: each waits until a check has looked at the table at a version and not fired there,
    then changes the table. Started before dag.test(); problems are kept for the test to assert on."""

    def __init__(self, checks: Checks, table: DeltaTable, steps: list[Step]) -> None:
        super().__init__(daemon=True)
        self.checks, self.table, self.steps = checks, table, steps
        self.problems: list[str] = []

    def run(self) -> None:
        for at, change in self.steps:
            if not self.checks.wait_for(lambda seen, at=at: any(c.out.cursor == at for c in seen)):
                self.problems.append(f"no check at version {at} (did the sensor finish early?)")
                return
            if any(c.out.satisfied for c in self.checks.seen if c.out.cursor == at):
                self.problems.append(f"fired at version {at}")
                return
            change(self.table)


def new_table(root: Path, versions: int = 0) -> DeltaTable:
    table = DeltaTable.create(str(root), pa.schema([("id", pa.int64())]))
    for i in range(versions):
        append(table, app=None, name=f"setup{i}")
    return table


def append(table: DeltaTable, app: tuple[str, int] | None = None, name: str | None = None) -> int:
    version = table.version() + 1
    txn = table.transaction().add_files([AddFile(f"{name or f'v{version}'}.parquet", 10)])
    if app:
        txn.set_app_transaction(*app)
    return txn.commit().version


def rearrange(table: DeltaTable) -> int:
    """OPTIMIZE-like: every live file replaced by one, all with dataChange=false."""
    live = [AddFile.from_dict(r) for r in table.snapshot().files.to_pylist()]
    txn = table.transaction().remove_files(live, data_change=False)
    txn.add_files([AddFile("compacted.parquet", 10, data_change=False)])
    return txn.commit("OPTIMIZE").version


def app(app_id: str, version: int) -> Callable[[DeltaTable], int]:
    return lambda t: append(t, app=(app_id, version))


# name: (versions before the sensor starts, sensor arguments, steps, version it must return)
CASES: dict[str, tuple[int, dict[str, Any], list[Step], int]] = {
    "min_version": (0, {"min_version": 2}, [(0, append), (1, append)], 2),
    "default_baseline": (2, {}, [(2, append)], 3),
    "explicit_baseline": (2, {"baseline_version": "{{ 1 + 1 }}"}, [(2, append)], 3),
    # A baseline the table has not reached yet (e.g. a version an upstream task reported).
    "baseline_ahead": (2, {"baseline_version": 3}, [(2, append), (3, append)], 4),
    "app_version": (
        0,
        {"app_id": "ingest", "app_version": 2},
        [(0, app("ingest", 1)), (1, app("other", 5)), (2, app("ingest", 2))],
        3,
    ),
    "data_changes_only": (1, {"data_changes_only": True}, [(1, rearrange), (2, append)], 3),
}


def sensor_dag(dag_file, name: str, root: Path, **sensor_args: Any):
    args = {"poke_interval": POKE, "timeout": 60, **sensor_args}
    source = f"""
        import datetime as dt
        from airflow.sdk import DAG
        from airflow_provider_delta.sensors.delta import DeltaVersionSensor
        with DAG({name!r}, schedule=None, start_date=dt.datetime(2024, 1, 1)) as dag:
            DeltaVersionSensor(task_id="wait", table_uri={str(root)!r}, **{args!r})
        """
    return dag_file(name, source).dag


def task_result(run: Any, task_id: str = "wait") -> tuple[str, int, Any]:
    """(state, try number, XCom return_value) of a task of a finished dag.test() run."""
    from airflow.models.taskinstance import TaskInstance
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        ti = session.scalars(
            select(TaskInstance).where(
                TaskInstance.dag_id == run.dag_id,
                TaskInstance.run_id == run.run_id,
                TaskInstance.task_id == task_id,
            )
        ).one()
        row = session.scalars(
            select(XComModel).where(
                XComModel.dag_id == run.dag_id,
                XComModel.run_id == run.run_id,
                XComModel.task_id == task_id,
                XComModel.key == "return_value",
            )
        ).one_or_none()
        value = None if row is None else XComModel.deserialize_value(row)
        return ti.state, ti.try_number, value


@pytest.mark.parametrize("deferrable", [False, True], ids=["poke", "deferrable"])
@pytest.mark.parametrize("case", list(CASES))
def test_sensor_fires_on_the_right_version_and_not_before(
    tmp_path: Path, dag_file, checks: Checks, case: str, deferrable: bool
):
    before, args, steps, expected = CASES[case]
    root = tmp_path / "t"
    table = new_table(root, before)
    dag = sensor_dag(dag_file, f"sensor_{case}_{deferrable}", root, deferrable=deferrable, **args)
    driver = Driver(checks, table, steps)
    driver.start()
    try:
        run = dag.test()
    finally:
        checks.finish()
        driver.join(WAIT)
    assert driver.problems == []
    assert task_result(run) == ("success", 1, expected)
    assert table.version() == expected  # every step ran, the last one made it fire
    where = {c.where for c in checks.seen}
    assert where == ({"sensor", "trigger"} if deferrable else {"sensor"})  # deferred: the trigger polled
    assert [c.out.satisfied for c in checks.seen].count(True) == 1


def test_poke_mode_times_out_on_a_table_that_never_gets_there(tmp_path: Path, dag_file, checks: Checks):
    new_table(tmp_path / "t")
    # retries=1: a sensor timeout fails the task at once; any other error would have been retried.
    dag = sensor_dag(
        dag_file, "sensor_timeout", tmp_path / "t", min_version=5, timeout=1, retries=1, retry_delay=0
    )
    run = dag.test()
    assert task_result(run) == ("failed", 1, None)
    assert len(checks.seen) >= 3 and not any(c.out.satisfied for c in checks.seen)


def test_deferred_sensor_times_out_through_airflows_trigger_timeout(tmp_path: Path, checks: Checks):
    """dag.test() runs a deferred task's trigger inline until it fires, without the deferral's timeout (the
    scheduler enforces that): so this test takes the steps the scheduler and the task runner take."""
    from airflow.sdk.bases.operator import TriggerFailureReason
    from airflow.sdk.exceptions import AirflowSensorTimeout, TaskDeferred

    new_table(tmp_path / "t")
    sensor = DeltaVersionSensor(
        task_id="wait", table_uri=str(tmp_path / "t"), min_version=5, deferrable=True, timeout=7,
        poke_interval=0.05,
    )  # fmt: skip
    # min_version needs nothing from the context (only the default baseline reads the task instance).
    with pytest.raises(TaskDeferred) as deferred:
        sensor.execute({})
    assert deferred.value.timeout == dt.timedelta(seconds=7)
    trigger = deferred.value.trigger
    assert isinstance(trigger, DeltaVersionTrigger) and trigger.cursor == 0

    async def poll_a_while() -> bool:
        pending = asyncio.ensure_future(anext(trigger.run()))
        await asyncio.to_thread(checks.wait_for, lambda seen: len(seen) >= 4)
        fired = pending.done()
        pending.cancel()
        return fired

    assert not asyncio.run(poll_a_while())
    assert not any(c.out.satisfied for c in checks.seen)
    # The scheduler's check_trigger_timeouts resumes the task with this; the sensor must turn it into a
    # sensor timeout (not a plain failure that would be retried).
    with pytest.raises(AirflowSensorTimeout):
        sensor.resume_execution("__fail__", {"error": TriggerFailureReason.TRIGGER_TIMEOUT}, {})


def test_default_baseline_survives_a_retry(tmp_path: Path, dag_file, monkeypatch: pytest.MonkeyPatch):
    """The first try looks (version 0), a commit lands and the try fails; the retry must still wait for a
    version newer than 0, so it returns 1 at once instead of waiting for a version newer than 1."""
    table = new_table(tmp_path / "t")
    real = sensors.observe
    calls: list[int | None] = []

    def flaky_observe(t: Any, condition: Any, cursor: int | None) -> Observation:
        out = real(t, condition, cursor)
        calls.append(out.cursor)
        if len(calls) == 1:
            append(table)  # lands between the tries
            raise ConnectionError("storage went away after the first look")
        return out

    monkeypatch.setattr(sensors, "observe", flaky_observe)
    dag = sensor_dag(dag_file, "sensor_retry", tmp_path / "t", timeout=3, retries=1, retry_delay=0)
    run = dag.test()
    assert calls[0] == 0
    assert task_result(run) == ("success", 2, 1)
    assert task_state(run) == {}  # forgotten on success: a cleared sensor waits for a new change


def xcom(run: Any, key: str, task_id: str = "wait") -> Any:
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        row = session.scalars(
            select(XComModel).where(
                XComModel.dag_id == run.dag_id,
                XComModel.run_id == run.run_id,
                XComModel.task_id == task_id,
                XComModel.key == key,
            )
        ).one_or_none()
        return None if row is None else XComModel.deserialize_value(row)


def task_state(run: Any) -> dict[str, str]:
    from airflow.models.task_state_store import TaskStateStoreModel
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        rows = session.scalars(select(TaskStateStoreModel).where(TaskStateStoreModel.run_id == run.run_id))
        return {r.key: r.value for r in rows}


def test_default_baseline_survives_reschedules(tmp_path: Path, dag_file, checks: Checks):
    """mode="reschedule": every poke is a new execution of the task; a commit landing between two pokes
    must still count as newer than the version the sensor first saw."""
    table = new_table(tmp_path / "t")
    driver = Driver(checks, table, [(0, append)])
    dag = sensor_dag(
        dag_file, "sensor_reschedule", tmp_path / "t", mode="reschedule", poke_interval=1, timeout=5
    )
    driver.start()
    try:
        run = dag.test()
    finally:
        checks.finish()
        driver.join(WAIT)
    assert driver.problems == []
    assert task_result(run) == ("success", 1, 1)


# -- a table that does not exist yet ------------------------------------------------------------------------


def create(table: DeltaTable) -> int:
    """Create the table at the handle's location (version 0: schema only, no data)."""
    return DeltaTable.create(table.uri, pa.schema([("id", pa.int64())])).version()


# name: (what the location holds before, sensor arguments, steps, version returned, change_range from_version)
MISSING_CASES: dict[str, tuple[str, dict[str, Any], list[Step], int, int | None]] = {
    "min_version": ("nothing", {"min_version": 1}, [(NO_TABLE, create), (0, append)], 1, None),
    # Nothing before the table: its first commit is the change (from version 0).
    "default_baseline": ("nothing", {}, [(NO_TABLE, create)], 0, 0),
    # Data files a writer put there before committing make no table.
    "default_baseline_files_no_log": ("files", {}, [(NO_TABLE, create)], 0, 0),
    # The creation changes no data: the first append is the change, and the range still starts at 0.
    "data_changes_only": ("nothing", {"data_changes_only": True}, [(NO_TABLE, create), (0, append)], 1, 0),
    "app_version": (
        "nothing",
        {"app_id": "ingest", "app_version": 1},
        [(NO_TABLE, create), (0, app("ingest", 1))],
        1,
        None,
    ),
}


@pytest.mark.parametrize("deferrable", [False, True], ids=["poke", "deferrable"])
@pytest.mark.parametrize("case", list(MISSING_CASES))
def test_sensor_waits_for_a_table_created_later(
    tmp_path: Path, dag_file, checks: Checks, case: str, deferrable: bool
):
    """The table is created (by another thread) only after the sensor, or its trigger, found nothing there."""
    before, args, steps, expected, first = MISSING_CASES[case]
    root = tmp_path / "t"
    if before == "files":
        root.mkdir()
        (root / "part-00000.parquet").write_bytes(b"PAR1")
    table = DeltaTable(str(root))
    dag = sensor_dag(dag_file, f"sensor_missing_{case}_{deferrable}", root, deferrable=deferrable, **args)
    driver = Driver(checks, table, steps)
    driver.start()
    try:
        run = dag.test()
    finally:
        checks.finish()
        driver.join(WAIT)
    assert driver.problems == []
    assert task_result(run) == ("success", 1, expected)
    change_range = {"table_uri": str(root), "from_version": first, "to_version": expected}
    assert xcom(run, "change_range") == change_range
    assert table.version() == expected
    assert checks.seen[0].out == Observation(False, NO_TABLE)  # the first look found no table, and waited
    assert "sensor" in {c.where for c in checks.seen if c.out.cursor == NO_TABLE}
    if deferrable:  # the sensor deferred on a missing table, and the trigger saw the table come
        assert any(c.where == "trigger" for c in checks.seen)
    assert task_state(run) == {}


def test_missing_table_baseline_survives_a_retry(tmp_path: Path, dag_file, monkeypatch: pytest.MonkeyPatch):
    """The first try finds no table (baseline -1, kept in the task state store); the table is created and
    the try fails. The retry must take version 0 as the change, not wait for a version after it."""
    root = tmp_path / "t"
    real = sensors.observe
    calls: list[int] = []

    def flaky_observe(t: Any, condition: Any, cursor: int | None) -> Observation:
        out = real(t, condition, cursor)
        calls.append(out.cursor)
        if len(calls) == 1:
            create(DeltaTable(str(root)))  # lands between the tries
            raise ConnectionError("storage went away after the first look")
        return out

    monkeypatch.setattr(sensors, "observe", flaky_observe)
    dag = sensor_dag(dag_file, "sensor_missing_retry", root, timeout=5, retries=1, retry_delay=0)
    run = dag.test()
    # The baseline -1 outlived the failed try: with 0 the retry would wait for version 1 until its timeout.
    assert calls[0] == NO_TABLE
    assert task_result(run) == ("success", 2, 0)
    assert xcom(run, "change_range") == {"table_uri": str(root), "from_version": 0, "to_version": 0}
    assert task_state(run) == {}


@pytest.mark.parametrize("deferrable", [False, True], ids=["poke", "deferrable"])
def test_sensor_fails_at_once_on_a_log_it_cannot_read(tmp_path: Path, dag_file, deferrable: bool):
    """Only a missing table is waited for: a corrupt log fails the task at once (waiting would take the
    sensor's 60 s timeout)."""
    log = tmp_path / "t" / "_delta_log"
    log.mkdir(parents=True)
    (log / f"{0:020d}.json").write_bytes(b'{"commitInfo": {"operation": "WRITE"}\n')  # cut short
    name = f"sensor_corrupt_{deferrable}"
    dag = sensor_dag(dag_file, name, tmp_path / "t", deferrable=deferrable, retries=0)
    run = dag.test()
    assert task_result(run)[:2] == ("failed", 1)


# -- cost per poke on S3 -----------------------------------------------------------------------------------


def commit_bytes(version: int) -> bytes:
    lines: list[dict[str, Any]] = [{"commitInfo": {"operation": "WRITE"}}]
    if version == 0:
        schema = {
            "type": "struct",
            "fields": [{"name": "id", "type": "long", "nullable": True, "metadata": {}}],
        }
        lines += [
            {"protocol": {"minReaderVersion": 1, "minWriterVersion": 2}},
            {
                "metaData": {
                    "id": "t",
                    "format": {"provider": "parquet", "options": {}},
                    "schemaString": json.dumps(schema),
                    "partitionColumns": [],
                    "configuration": {},
                }
            },
        ]
    add = {"path": f"f{version}.parquet", "partitionValues": {}, "size": 1, "modificationTime": 1}
    lines.append({"add": {**add, "dataChange": True}})
    return ("\n".join(json.dumps(x) for x in lines) + "\n").encode()


def seed_log(tmp_path: Path, bucket: str, n_commits: int, checkpoint: bool) -> None:
    """Put a log of ``n_commits`` commits (and a checkpoint of the last one) under ``s3://bucket/t``.

    The files go straight into the moto server's S3 backend (this process's own server): through HTTP,
    10,000 puts take about 50 s and a checkpoint-free first read of them as long again. Only the pokes
    under test go through HTTP, and only they are counted.
    """
    from moto.core import DEFAULT_ACCOUNT_ID
    from moto.s3.models import s3_backends

    log = tmp_path / "log" / "_delta_log"
    log.mkdir(parents=True)
    for v in range(n_commits):
        (log / f"{v:020d}.json").write_bytes(commit_bytes(v))
    if checkpoint:
        DeltaTable(str(log.parent)).checkpoint(n_commits - 1)
    backend = s3_backends[DEFAULT_ACCOUNT_ID]["global"]
    for f in log.iterdir():
        backend.put_object(bucket, f"t/_delta_log/{f.name}", f.read_bytes())


def s3_connection(s3_server: Any) -> dict[str, Any]:
    """The ``delta`` connection to the tests' S3 API server, as an ``AIRFLOW_CONN_*`` value."""
    return {
        "conn_type": "delta",
        "login": "testing",
        "password": "testing",
        "host": s3_server.endpoint_url,
        "extra": {"storage_options": {"client_kwargs": {"region_name": "us-east-1"}}},
    }


@pytest.mark.s3
@pytest.mark.parametrize("n_commits", [10, 10_000])
def test_idle_poke_costs_one_request_on_s3(
    tmp_path: Path, s3_server, s3_bucket, request_counter, monkeypatch: pytest.MonkeyPatch, n_commits: int
):
    seed_log(tmp_path, s3_bucket, n_commits, checkpoint=n_commits > 100)
    fs = s3_server.filesystem()
    monkeypatch.setenv("AIRFLOW_CONN_DELTA_S3", json.dumps(s3_connection(s3_server)))
    latest = n_commits - 1
    sensor = DeltaVersionSensor(
        task_id="wait", table_uri=f"s3://{s3_bucket}/t", delta_conn_id="delta_s3", min_version=n_commits + 1
    )
    # poke() directly, so that the count covers exactly one poke. With min_version the sensor's condition
    # needs nothing from the context (only the default baseline reads the task instance), so {} will do.
    context: Any = {}
    request_counter.clear()
    assert not sensor.poke(context).is_done  # the first poke reads the table
    assert request_counter.count() > 0
    for _ in range(3):
        request_counter.clear()
        assert not sensor.poke(context).is_done
        assert [(r.method, r.key) for r in request_counter.requests] == [
            ("HEAD", f"t/_delta_log/{latest + 1:020d}.json")
        ]
    fs.pipe({f"{s3_bucket}/t/_delta_log/{latest + 1:020d}.json": commit_bytes(latest + 1)})
    assert not sensor.poke(context).is_done  # sees version n_commits, still one short
    request_counter.clear()
    assert not sensor.poke(context).is_done
    assert [(r.method, r.key) for r in request_counter.requests] == [
        ("HEAD", f"t/_delta_log/{latest + 2:020d}.json")
    ]
    fs.pipe({f"{s3_bucket}/t/_delta_log/{latest + 2:020d}.json": commit_bytes(latest + 2)})
    done = sensor.poke(context)
    assert done.is_done and done.xcom_value == n_commits + 1


@pytest.mark.s3
def test_first_poke_with_an_app_id_reads_the_newest_checksum_and_the_commits_after_it(
    tmp_path: Path, s3_server, s3_bucket, request_counter, monkeypatch: pytest.MonkeyPatch
):
    """Issue 35: a sensor's first poke in a fresh task is a cold read of the table. With version checksums
    it reads ``_last_checkpoint``, the newest checksum and the commits after it: never the checkpoint,
    never the commits the checksum covers, however big the table."""
    from moto.core import DEFAULT_ACCOUNT_ID
    from moto.s3.models import s3_backends

    local = tmp_path / "t"
    table = DeltaTable(str(local))
    for i in range(12):  # a checkpoint at 10; a checksum after every commit
        table.write(pa.table({"id": [i]}), app_id="job", app_version=i)
    table.write(pa.table({"id": [99]}), app_id="other", app_version=1)  # version 12
    (local / "_delta_log" / f"{12:020d}.crc").unlink()  # as if another writer wrote none
    assert (local / "_delta_log" / f"{10:020d}.checkpoint.parquet").exists()
    backend = s3_backends[DEFAULT_ACCOUNT_ID]["global"]
    for f in (local / "_delta_log").iterdir():
        backend.put_object(s3_bucket, f"t/_delta_log/{f.name}", f.read_bytes())
    monkeypatch.setenv("AIRFLOW_CONN_DELTA_S3", json.dumps(s3_connection(s3_server)))
    sensor = DeltaVersionSensor(task_id="wait", table_uri=f"s3://{s3_bucket}/t", delta_conn_id="delta_s3",
                                app_id="job", app_version=11)  # fmt: skip
    request_counter.clear()
    done = sensor.poke({})
    assert done.is_done and done.xcom_value == 12
    gets = [r.key.rsplit("/", 1)[-1] for r in request_counter.requests if r.method == "GET" and r.key]
    expected = ["_last_checkpoint", f"{11:020d}.crc", f"{12:020d}.json"]
    assert sorted(set(gets)) == sorted(expected), request_counter.requests
