"""Triggers that poll a Delta table's log with the same core function as the sensor's poke.

``DeltaVersionTrigger`` fires once, for a deferred :class:`DeltaVersionSensor`. ``DeltaTableWatcherTrigger``
is a ``BaseEventTrigger`` for ``AssetWatcher``: it fires for every new (data) version and keeps its cursor in
Airflow's asset state store, so a triggerer restart neither re-emits nor skips a commit.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from typing import Any

from airflow.sdk import Asset
from airflow.triggers.base import BaseEventTrigger, BaseTrigger, TriggerEvent

from airflow_provider_delta.hooks.delta import DeltaHookMixin
from airflow_provider_delta.log.commits.tail import VersionCondition, current_version, observe

CURSOR_KEY = "delta_version"


def _condition_kwargs(condition: VersionCondition) -> dict[str, Any]:
    return {
        "min_version": condition.min_version,
        "newer_than": condition.newer_than,
        "app_id": condition.app_id,
        "app_version": condition.app_version,
        "data_changes_only": condition.data_changes_only,
    }


class DeltaVersionTrigger(BaseTrigger, DeltaHookMixin):
    """Fires when the table meets a :class:`VersionCondition` (see ``DeltaVersionSensor``).

    :param table_uri: the table root.
    :param delta_conn_id: connection for the table's storage (``None``: no credentials).
    :param poke_interval: seconds between checks; an idle check costs one storage request.
    :param cursor: the newest version already examined (from the sensor's first poke; -1: the table
        did not exist yet, and the trigger waits for it to be created).
    """

    def __init__(
        self,
        table_uri: str,
        delta_conn_id: str | None = None,
        poke_interval: float = 60.0,
        cursor: int | None = None,
        min_version: int | None = None,
        newer_than: int | None = None,
        app_id: str | None = None,
        app_version: int | None = None,
        data_changes_only: bool = False,
    ) -> None:
        super().__init__()
        self.table_uri = table_uri
        self.delta_conn_id = delta_conn_id
        self.poke_interval = poke_interval
        self.cursor = cursor
        self.condition = VersionCondition(min_version, newer_than, app_id, app_version, data_changes_only)

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {
                "table_uri": self.table_uri,
                "delta_conn_id": self.delta_conn_id,
                "poke_interval": self.poke_interval,
                "cursor": self.cursor,
                **_condition_kwargs(self.condition),
            },
        )

    async def run(self) -> AsyncIterator[TriggerEvent]:
        try:
            table = await asyncio.to_thread(self.delta_table)
            cursor = self.cursor
            while True:
                seen = await asyncio.to_thread(observe, table, self.condition, cursor)
                if seen.satisfied:
                    newer_than = self.condition.newer_than
                    yield TriggerEvent({
                        "status": "success", "version": seen.version, "table_uri": self.table_uri,
                        "from_version": None if newer_than is None else newer_than + 1,
                        "to_version": seen.version,
                    })  # fmt: skip
                    return
                cursor = seen.cursor
                await asyncio.sleep(self.poke_interval)
        except Exception as exc:  # the sensor re-raises it in the worker, where it is logged and retried
            yield TriggerEvent({"status": "error", "message": f"{type(exc).__name__}: {exc}"})


class DeltaTableWatcherTrigger(BaseEventTrigger, DeltaHookMixin):
    """Emits an event for each new version of a table, for ``AssetWatcher`` (event-driven scheduling).

    The cursor (the last version announced) lives in the asset state store of every asset the trigger
    feeds, written before the event is emitted, so that a restarted triggerer resumes after it. With
    several assets on one trigger, one event per version is emitted and the assets share the cursor: the
    newest cursor any of them holds wins, so an asset added later does not replay the table's history.
    On a location with no table yet the watcher waits (cursor -1), then announces the table's first data
    version as any other; a log that cannot be read fails the trigger.

    The state store is reached through Airflow's public accessors only: the store itself when the trigger
    feeds one asset, ``store[Asset.ref(name=...)]`` for each of ``asset_names`` otherwise (Airflow offers no
    public way to list the assets a trigger feeds, so a trigger shared by several assets names them).

    :param table_uri: the table root.
    :param delta_conn_id: connection for the table's storage.
    :param poke_interval: seconds between checks; an idle check costs one storage request.
    :param data_changes_only: announce only versions that add or remove data (default), not OPTIMIZE etc.
    :param asset_names: the names of the assets this trigger feeds, needed only when it feeds more than one
        (the same trigger, with the same arguments, on several assets' watchers).
    """

    def __init__(
        self,
        table_uri: str,
        delta_conn_id: str | None = None,
        poke_interval: float = 60.0,
        data_changes_only: bool = True,
        asset_names: Sequence[str] = (),
    ) -> None:
        super().__init__()
        self.table_uri = table_uri
        self.delta_conn_id = delta_conn_id
        self.poke_interval = poke_interval
        self.data_changes_only = data_changes_only
        if isinstance(asset_names, str):
            raise TypeError("asset_names must be a list of asset names, not one string")
        self.asset_names = list(asset_names)

    def serialize(self) -> tuple[str, dict[str, Any]]:
        kwargs: dict[str, Any] = {
            "table_uri": self.table_uri,
            "delta_conn_id": self.delta_conn_id,
            "poke_interval": self.poke_interval,
            "data_changes_only": self.data_changes_only,
        }
        # Left out when empty: the kwargs (and so the hash Airflow identifies a watcher's trigger by) of a
        # trigger defined without asset names stay what they were.
        if self.asset_names:
            kwargs["asset_names"] = list(self.asset_names)
        return f"{type(self).__module__}.{type(self).__qualname__}", kwargs

    def _accessors(self) -> list[Any]:
        """Where the cursor is kept: each fed asset's state, through Airflow's public accessor API only
        (``AssetStateStoreAccessors[Asset.ref(name=...)]``, or its single-asset ``aget``/``aset``)."""
        store = self.asset_state_store
        if store is None:
            return []
        if not self.asset_names:
            return [store]  # one asset: the store's own aget/aset address it
        accessors = []
        for name in self.asset_names:
            try:
                accessors.append(store[Asset.ref(name=name)])
            except KeyError:
                raise KeyError(f"DeltaTableWatcherTrigger on {self.table_uri}: asset_names names {name!r}, "
                               "but no watcher of that asset runs this trigger") from None  # fmt: skip
        return accessors

    async def _load_cursor(self) -> int | None:
        try:
            values = [await a.aget(CURSOR_KEY) for a in self._accessors()]
        except ValueError as exc:
            if self.asset_names:
                raise
            raise ValueError(
                f"DeltaTableWatcherTrigger on {self.table_uri} cannot read its cursor from the asset state "
                f"store ({exc}); a trigger that feeds several assets must name them: asset_names=[...]"
            ) from exc
        known = [int(v) for v in values if v is not None]
        return max(known) if known else None

    async def _save_cursor(self, version: int) -> None:
        for accessor in self._accessors():
            await accessor.aset(CURSOR_KEY, version)

    async def run(self) -> AsyncIterator[TriggerEvent]:
        table = await asyncio.to_thread(self.delta_table)
        cursor = await self._load_cursor()
        if cursor is None:
            # First start: announce what comes after the current version, not the table's history. A table
            # not created yet has no version (-1): its first data version is announced once it appears.
            cursor = await asyncio.to_thread(current_version, table)
            await self._save_cursor(cursor)
        condition = VersionCondition(newer_than=cursor, data_changes_only=self.data_changes_only)
        while True:
            seen = await asyncio.to_thread(observe, table, condition, cursor)
            if seen.cursor != cursor:
                await self._save_cursor(seen.cursor)
            if seen.satisfied:
                self.log.info("Delta table %s reached version %d", self.table_uri, seen.version)
                # The range this event hands on (from, to, table): what a consumer reads with
                # DeltaHook.consume_changes (it resumes from its own recorded progress, so none is skipped).
                yield TriggerEvent({"table_uri": self.table_uri, "version": seen.version, "previous": cursor,
                                    "from_version": cursor + 1, "to_version": seen.version})  # fmt: skip
            if seen.cursor != cursor:
                cursor = seen.cursor
                condition = VersionCondition(newer_than=cursor, data_changes_only=self.data_changes_only)
            await asyncio.sleep(self.poke_interval)
