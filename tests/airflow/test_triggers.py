"""DeltaVersionTrigger and DeltaTableWatcherTrigger, run with asyncio directly (no triggerer process).

The triggers poll with the core's ``tail.observe``; the tests wrap it (calling the real one) only to learn
when a check has happened, so that a commit lands between two checks without sleeping and hoping.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from airflow_provider_delta.log import AddFile, DeltaTable
from airflow_provider_delta.log.commits.tail import Observation
from airflow_provider_delta.triggers import delta as triggers
from airflow_provider_delta.triggers.delta import CURSOR_KEY, DeltaTableWatcherTrigger, DeltaVersionTrigger

POKE = 0.05
WAIT = 20.0  # seconds before a test gives up waiting for something that should happen at once


class Checks:
    """Observations the trigger made, in order; lets a test wait for the n-th one."""

    def __init__(self) -> None:
        self.seen: list[Observation] = []
        self._cond = threading.Condition()

    def wrap(self, real: Callable[..., Observation]) -> Callable[..., Observation]:
        def observe(table: Any, condition: Any, cursor: int | None) -> Observation:
            out = real(table, condition, cursor)
            with self._cond:
                self.seen.append(out)
                self._cond.notify_all()
            return out

        return observe

    async def reach(self, n: int) -> None:
        """Return once at least ``n`` checks have been made."""
        await self.until(lambda seen: len(seen) >= n, f"{n} checks")

    async def saw(self, cursor: int) -> None:
        """Return once a check has examined the log up to ``cursor`` (and did not fire there)."""
        await self.until(lambda seen: any(o.cursor == cursor for o in seen), f"a check at {cursor}")
        assert not any(o.satisfied for o in self.seen if o.cursor == cursor), f"fired at {cursor}"

    async def until(self, done: Callable[[list[Observation]], bool], what: str) -> None:
        def wait() -> None:
            with self._cond:
                assert self._cond.wait_for(lambda: done(self.seen), WAIT), f"no {what} within {WAIT}s"

        await asyncio.to_thread(wait)


@pytest.fixture
def checks(monkeypatch: pytest.MonkeyPatch) -> Checks:
    c = Checks()
    monkeypatch.setattr(triggers, "observe", c.wrap(triggers.observe))
    return c


def new_table(root: Path) -> DeltaTable:
    return DeltaTable.create(str(root), pa.schema([("id", pa.int64())]))


def append(table: DeltaTable, name: str, app: tuple[str, int] | None = None) -> int:
    txn = table.transaction().add_files([AddFile(f"{name}.parquet", 10)])
    if app:
        txn.set_app_transaction(*app)
    return txn.commit().version


def rearrange(table: DeltaTable) -> int:
    """An OPTIMIZE-like commit: every live file replaced by one, all with dataChange=false."""
    live = [AddFile.from_dict(r) for r in table.snapshot().files.to_pylist()]
    txn = table.transaction().remove_files(live, data_change=False)
    txn.add_files([AddFile(f"compacted-{len(live)}.parquet", 10, data_change=False)])
    return txn.commit("OPTIMIZE").version


# -- DeltaVersionTrigger -----------------------------------------------------------------------------------


def test_version_trigger_fires_once_at_the_version(tmp_path: Path, checks: Checks):
    table = new_table(tmp_path / "t")
    trigger = DeltaVersionTrigger(str(tmp_path / "t"), poke_interval=POKE, min_version=2)

    async def scenario() -> list[Any]:
        events = trigger.run()
        first = asyncio.ensure_future(anext(events))
        await checks.saw(0)
        append(table, "a")  # version 1: not yet
        await checks.saw(1)
        append(table, "b")  # version 2
        event = await asyncio.wait_for(first, WAIT)
        with pytest.raises(StopAsyncIteration):  # it fires once
            await anext(events)
        return [event]

    [event] = asyncio.run(scenario())
    assert event.payload == {"status": "success", "version": 2, "table_uri": str(tmp_path / "t"),
                             "from_version": None, "to_version": 2}  # fmt: skip


def test_version_trigger_stays_quiet_until_the_condition_holds(tmp_path: Path, checks: Checks):
    table = new_table(tmp_path / "t")
    append(table, "a")
    trigger = DeltaVersionTrigger(
        str(tmp_path / "t"), poke_interval=POKE, cursor=1, newer_than=1, data_changes_only=True
    )

    async def scenario() -> tuple[bool, Any]:
        first = asyncio.ensure_future(anext(trigger.run()))
        await checks.reach(2)  # idle checks at version 1
        rearrange(table)  # version 2 changes no data
        await checks.saw(2)
        n = len(checks.seen)
        await checks.reach(n + 1)
        quiet = not first.done()
        append(table, "b")  # version 3
        return quiet, await asyncio.wait_for(first, WAIT)

    quiet, event = asyncio.run(scenario())
    assert quiet and event.payload == {"status": "success", "version": 3, "table_uri": str(tmp_path / "t"),
                                       "from_version": 2, "to_version": 3}  # the range it saw  # fmt: skip


def test_version_trigger_reports_errors_as_an_event(tmp_path: Path):
    # A missing table is waited for (test_sensor.py); a log that cannot be read is an error event.
    log = tmp_path / "corrupt" / "_delta_log"
    log.mkdir(parents=True)
    (log / f"{0:020d}.json").write_bytes(b'{"commitInfo": {"operation": "WRITE"}\n')  # cut short
    trigger = DeltaVersionTrigger(str(tmp_path / "corrupt"), poke_interval=POKE, min_version=0)
    event = asyncio.run(asyncio.wait_for(anext(trigger.run()), WAIT))
    assert event.payload["status"] == "error"
    assert "corrupt" in event.payload["message"] and "Error" in event.payload["message"]


def test_version_trigger_serialize_round_trip(tmp_path: Path):
    table = new_table(tmp_path / "t")
    append(table, "a", app=("ingest", 7))
    trigger = DeltaVersionTrigger(str(tmp_path / "t"), None, POKE, cursor=0, app_id="ingest", app_version=7)
    classpath, kwargs = trigger.serialize()
    module, _, name = classpath.rpartition(".")
    cls = getattr(__import__(module, fromlist=[name]), name)
    rebuilt = cls(**kwargs)
    assert cls is DeltaVersionTrigger and rebuilt.serialize() == (classpath, kwargs)

    async def first_event(t: DeltaVersionTrigger) -> Any:
        return await asyncio.wait_for(anext(t.run()), WAIT)

    assert asyncio.run(first_event(rebuilt)).payload == asyncio.run(first_event(trigger)).payload
    expected = {"status": "success", "version": 1, "to_version": 1, "table_uri": str(tmp_path / "t"),
                "from_version": None}  # fmt: skip
    assert asyncio.run(first_event(rebuilt)).payload == expected


# -- DeltaTableWatcherTrigger ------------------------------------------------------------------------------


class FakeAccessor:
    """Stands in for Airflow's AssetStateStoreAccessor: ``aget``/``aset`` over a dict.

    A mock, on purpose: the triggerer injects a real ``AssetStateStoreAccessors`` whose accessors talk to the
    triggerer's supervisor over its comms channel, and no triggerer runs in this process (dag.test's
    in-process comms has no async ``asend``). ``test_watcher_on_airflows_own_state_store_accessors`` runs the
    trigger on the real classes once, over a stand-in comms channel.
    """

    def __init__(self) -> None:
        self.values: dict[str, Any] = {}
        self.writes: list[Any] = []

    async def aget(self, key: str, default: Any = None) -> Any:
        return self.values.get(key, default)

    async def aset(self, key: str, value: Any) -> None:
        self.values[key] = value
        self.writes.append(value)


class FakeStateStore:
    """Stands in for Airflow's ``AssetStateStoreAccessors`` with its public surface only, which is all the
    trigger may use: ``store[Asset or Asset.ref(name=...)]``, and ``aget``/``aset`` on the store itself when
    it holds exactly one asset (Airflow raises ``ValueError`` otherwise, as this does)."""

    def __init__(self, *names: str) -> None:
        self.accessors = {n: FakeAccessor() for n in names}

    def __getitem__(self, asset: Any) -> FakeAccessor:
        try:
            return self.accessors[asset.name]
        except KeyError:
            raise KeyError(f"{asset!r} is not in this task's inlets or outlets") from None

    def _single(self) -> FakeAccessor:
        if len(self.accessors) != 1:
            raise ValueError(f"Task has {len(self.accessors)} concrete inlets and outlets")
        return next(iter(self.accessors.values()))

    async def aget(self, key: str, default: Any = None) -> Any:
        return await self._single().aget(key, default)

    async def aset(self, key: str, value: Any) -> None:
        await self._single().aset(key, value)

    def cursors(self) -> dict[str, Any]:
        return {n: a.values.get(CURSOR_KEY) for n, a in self.accessors.items()}


def watcher(root: Path, store: Any, **kwargs: Any) -> DeltaTableWatcherTrigger:
    t = DeltaTableWatcherTrigger(str(root), poke_interval=POKE, **kwargs)
    t.asset_state_store = store  # what the triggerer does before run()
    return t


async def next_event(events: Any) -> dict[str, Any]:
    return (await asyncio.wait_for(anext(events), WAIT)).payload


def test_watcher_announces_each_new_data_version_once_and_survives_restarts(tmp_path: Path, checks: Checks):
    root = tmp_path / "t"
    table = new_table(root)
    append(table, "a")
    append(table, "b")  # the table is at version 2 before the watcher first starts
    store = FakeStateStore("orders")

    async def scenario() -> None:
        events = watcher(root, store).run()
        first = asyncio.ensure_future(anext(events))
        await checks.reach(1)
        # First start: the cursor is stored, the table's history is not announced.
        assert store.cursors() == {"orders": 2} and not first.done()
        append(table, "c")  # version 3
        assert (await asyncio.wait_for(first, WAIT)).payload == {
            "table_uri": str(root),
            "version": 3,
            "previous": 2,
            "from_version": 3,
            "to_version": 3,
        }
        assert store.cursors() == {"orders": 3}  # written before the event was emitted

        pending = asyncio.ensure_future(anext(events))
        await checks.reach(len(checks.seen) + 1)
        rearrange(table)  # version 4: no data change
        await checks.saw(4)
        await checks.reach(len(checks.seen) + 1)
        assert not pending.done() and store.cursors() == {"orders": 4}  # not announced, cursor moved on
        append(table, "d")  # version 5
        assert (await asyncio.wait_for(pending, WAIT)).payload["version"] == 5
        await events.aclose()  # the triggerer stops (restart, redeploy)

        append(table, "e")  # version 6 lands while no watcher runs
        restarted = watcher(root, store).run()
        assert await next_event(restarted) == {
            "table_uri": str(root), "version": 6, "previous": 5, "from_version": 6, "to_version": 6}
        await restarted.aclose()

        again = watcher(root, store).run()  # a restart with nothing new: quiet, then the next version
        quiet = asyncio.ensure_future(anext(again))
        n = len(checks.seen)
        await checks.reach(n + 2)
        assert not quiet.done()
        append(table, "f")  # version 7
        assert (await asyncio.wait_for(quiet, WAIT)).payload["version"] == 7
        await again.aclose()

    asyncio.run(scenario())
    assert store.accessors["orders"].writes == [2, 3, 4, 5, 6, 7]


def test_watcher_with_two_assets_emits_once_per_version_and_advances_both(tmp_path: Path, checks: Checks):
    root = tmp_path / "t"
    table = new_table(root)
    store = FakeStateStore("orders", "orders_copy")

    async def scenario() -> list[int]:
        events = watcher(root, store, asset_names=["orders", "orders_copy"]).run()
        got = []
        first = asyncio.ensure_future(anext(events))
        await checks.reach(1)
        append(table, "a")
        got.append((await asyncio.wait_for(first, WAIT)).payload["version"])
        append(table, "b")
        got.append(await next_event(events))
        # one more poll with nothing new: no second event for version 2
        pending = asyncio.ensure_future(anext(events))
        n = len(checks.seen)
        await checks.reach(n + 2)
        assert not pending.done()
        pending.cancel()
        return [got[0], got[1]["version"]]

    assert asyncio.run(scenario()) == [1, 2]
    assert store.cursors() == {"orders": 2, "orders_copy": 2}


def test_watcher_resumes_from_the_newest_cursor_any_asset_holds(tmp_path: Path, checks: Checks):
    root = tmp_path / "t"
    table = new_table(root)
    for name in "abc":
        append(table, name)  # versions 1-3
    store = FakeStateStore("old", "added_later")
    store.accessors["old"].values[CURSOR_KEY] = 2  # version 3 landed while the watcher was down

    async def scenario() -> dict[str, Any]:
        events = watcher(root, store, asset_names=("old", "added_later")).run()
        event = await next_event(events)
        await events.aclose()
        return event

    assert asyncio.run(scenario())["version"] == 3
    assert store.cursors() == {"old": 3, "added_later": 3}


def test_watcher_serialize_round_trip(tmp_path: Path, checks: Checks):
    root = tmp_path / "t"
    table = new_table(root)
    trigger = DeltaTableWatcherTrigger(str(root), "delta_conn", POKE, data_changes_only=False)
    classpath, kwargs = trigger.serialize()
    assert classpath == "airflow_provider_delta.triggers.delta.DeltaTableWatcherTrigger"
    rebuilt = DeltaTableWatcherTrigger(**kwargs)
    assert rebuilt.serialize() == (classpath, kwargs)
    # Same behaviour: with data_changes_only=False, a rearrangement is announced too.
    rebuilt.delta_conn_id = None  # no such connection here; the kwargs round trip is what was checked
    store = FakeStateStore("t")
    rebuilt.asset_state_store = store

    async def scenario() -> int:
        events = rebuilt.run()
        first = asyncio.ensure_future(anext(events))
        await checks.reach(1)
        append(table, "a")
        assert (await asyncio.wait_for(first, WAIT)).payload["version"] == 1
        version = rearrange(table)
        event = await next_event(events)
        await events.aclose()
        assert event["version"] == version
        return version

    assert asyncio.run(scenario()) == 2


def test_watcher_serializes_asset_names_only_when_given(tmp_path: Path):
    plain = DeltaTableWatcherTrigger(str(tmp_path), "delta_conn", POKE)
    # Unchanged kwargs for a trigger without names: Airflow identifies a watcher's trigger by their hash.
    assert set(plain.serialize()[1]) == {"table_uri", "delta_conn_id", "poke_interval", "data_changes_only"}
    named = DeltaTableWatcherTrigger(str(tmp_path), asset_names=("orders", "orders_copy"))
    classpath, kwargs = named.serialize()
    assert kwargs["asset_names"] == ["orders", "orders_copy"]
    assert DeltaTableWatcherTrigger(**kwargs).serialize() == (classpath, kwargs)
    with pytest.raises(TypeError, match="list of asset names"):
        DeltaTableWatcherTrigger(str(tmp_path), asset_names="orders")


def test_watcher_fed_to_two_assets_without_their_names_fails_and_says_how(tmp_path: Path):
    new_table(tmp_path / "t")

    async def scenario() -> None:
        await anext(watcher(tmp_path / "t", FakeStateStore("orders", "orders_copy")).run())

    with pytest.raises(ValueError, match=r"asset_names=\[\.\.\.\]"):
        asyncio.run(scenario())


def test_watcher_naming_an_asset_it_does_not_feed_fails_by_name(tmp_path: Path):
    new_table(tmp_path / "t")

    async def scenario() -> None:
        await anext(watcher(tmp_path / "t", FakeStateStore("orders"), asset_names=["orders", "nope"]).run())

    with pytest.raises(KeyError, match="'nope'"):
        asyncio.run(scenario())


class FakeComms:
    """The triggerer's comms channel to its supervisor, as the real accessors use it: the asset state rows
    in a dict (the supervisor would call the API server)."""

    def __init__(self) -> None:
        self.rows: dict[tuple[str, str], Any] = {}

    async def asend(self, msg: Any) -> Any:
        from airflow.sdk.exceptions import ErrorType
        from airflow.sdk.execution_time.comms import (
            AssetStateStoreResult,
            ErrorResponse,
            GetAssetStateStoreByName,
            SetAssetStateStoreByName,
        )

        if isinstance(msg, GetAssetStateStoreByName):
            if (msg.name, msg.key) not in self.rows:
                return ErrorResponse(error=ErrorType.ASSET_STORE_NOT_FOUND)
            return AssetStateStoreResult(value=self.rows[msg.name, msg.key])
        if isinstance(msg, SetAssetStateStoreByName):
            self.rows[msg.name, msg.key] = msg.value
            return None
        raise AssertionError(f"the trigger sent {msg!r}")


@pytest.mark.parametrize("names", [["orders"], ["orders", "orders_copy"]])
def test_watcher_on_airflows_own_state_store_accessors(
    tmp_path: Path, checks: Checks, monkeypatch: pytest.MonkeyPatch, names: list[str]
):
    """The real ``AssetStateStoreAccessors`` the triggerer injects (built as it builds it), so the trigger is
    known to work with Airflow's public accessor API: the store itself for one asset, by name for several."""
    from airflow.sdk import Asset
    from airflow.sdk.execution_time import task_runner
    from airflow.sdk.execution_time.context import AssetStateStoreAccessors

    comms = FakeComms()
    monkeypatch.setattr(task_runner, "SUPERVISOR_COMMS", comms, raising=False)
    root = tmp_path / "t"
    table = new_table(root)
    append(table, "a")  # version 1
    store = AssetStateStoreAccessors(inlets=[Asset(name=n, uri=f"file://{root}/{n}") for n in names])
    trigger = watcher(root, store, asset_names=names if len(names) > 1 else ())

    async def scenario() -> int:
        events = trigger.run()
        first = asyncio.ensure_future(anext(events))
        await checks.reach(1)
        assert comms.rows == {(n, CURSOR_KEY): 1 for n in names}  # first start: the cursor, no event
        append(table, "b")  # version 2
        event = (await asyncio.wait_for(first, WAIT)).payload
        await events.aclose()
        return event["version"]

    assert asyncio.run(scenario()) == 2
    assert comms.rows == {(n, CURSOR_KEY): 2 for n in names}


def test_asset_watcher_dag_loads_and_serializes(tmp_path: Path, dags_folder: Path):
    """The DAG parses, serializes and is synced to the metadata DB with its watcher's trigger, as the DAG
    processor does it (a triggerer would then run the trigger from that row)."""
    from airflow.dag_processing.bundles.manager import DagBundlesManager
    from airflow.dag_processing.dagbag import DagBag, sync_bag_to_db
    from airflow.models.asset import AssetModel
    from airflow.models.dag import DagModel
    from airflow.serialization.serialized_objects import DagSerialization
    from airflow.utils.session import create_session
    from sqlalchemy import select

    root = tmp_path / "orders"
    new_table(root)
    path = dags_folder / "delta_watch_orders.py"
    path.write_text(
        f"""
from airflow.sdk import DAG, Asset, AssetWatcher, task
from airflow_provider_delta.triggers.delta import DeltaTableWatcherTrigger

trigger = DeltaTableWatcherTrigger(table_uri={str(root)!r}, poke_interval=30)
watcher = AssetWatcher(name="orders_watcher", trigger=trigger)
orders = Asset("delta_orders", uri="file://{root}", watchers=[watcher])

with DAG("delta_watch_orders", schedule=[orders]) as dag:
    @task
    def consume():
        pass
    consume()
"""
    )
    try:
        bag = DagBag(dag_folder=str(path), bundle_path=dags_folder, bundle_name="dags-folder")
        assert bag.import_errors == {}
        serialized = DagSerialization.to_dict(bag.get_dag("delta_watch_orders"))
        assert DagSerialization.from_dict(serialized).dag_id == "delta_watch_orders"
        DagBundlesManager().sync_bundles_to_db()
        sync_bag_to_db(bag, "dags-folder", None)
        # Watchers are registered for active, unpaused DAGs only; new DAGs start paused.
        with create_session() as session:
            session.get(DagModel, "delta_watch_orders").is_paused = False
        sync_bag_to_db(bag, "dags-folder", None)
    finally:
        path.unlink()
    with create_session() as session:
        asset = session.scalars(select(AssetModel).where(AssetModel.name == "delta_orders")).one()
        [watcher] = asset.watchers
        assert watcher.name == "orders_watcher"
        assert watcher.trigger.classpath == "airflow_provider_delta.triggers.delta.DeltaTableWatcherTrigger"
        assert watcher.trigger.kwargs == {
            "table_uri": str(root),
            "delta_conn_id": None,
            "poke_interval": 30,
            "data_changes_only": True,
        }
