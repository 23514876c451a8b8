"""DeltaVersionSensor: waits for a Delta table to change, in poke mode or deferred to the triggerer.

The sensor only decides and defers; the check is the core's ``tail.observe``, the same function the
trigger polls with. After the first check, an idle poke costs one storage request (an existence check
for the next commit file) however long the table's log is.

A table that does not exist yet is waited for, as Airflow's key sensors wait for a key: its version is
"none" (-1), so ``min_version`` and ``app_id`` are not met yet, and a default baseline of -1 makes the
table's first commit (version 0) the change waited for. A log that cannot be read still fails the task.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from airflow.configuration import conf
from airflow.sdk import BaseSensorOperator, PokeReturnValue

from airflow_provider_delta.hooks.delta import DeltaHookMixin
from airflow_provider_delta.hooks.secrets import redact_errors
from airflow_provider_delta.log.commits.tail import NO_TABLE, VersionCondition, current_version, observe
from airflow_provider_delta.triggers.delta import DeltaVersionTrigger

if TYPE_CHECKING:
    from airflow.sdk import Context

# Task state store key (not XCom: Airflow clears a task's XComs at the start of every try and every
# reschedule, so a baseline kept there would move and the sensor would miss the change it waits for).
# -1 when the table did not exist at the first look: a retry then still waits for its version 0.
BASELINE_KEY = "delta_baseline_version"
# XCom key of the version range the sensor saw: {"table_uri", "from_version", "to_version"}; from_version is
# the first version after the baseline (None when waiting for a version or an app transaction).
CHANGE_RANGE_KEY = "change_range"


def _as_int(value: int | str | None) -> int | None:
    return None if value in (None, "") else int(value)


class DeltaVersionSensor(BaseSensorOperator, DeltaHookMixin):
    """Wait until a Delta table reaches a version, gets a new version, or records an app transaction.

    Set one of ``min_version``, ``app_id`` (with ``app_version``); with neither, the sensor waits for any
    version newer than ``baseline_version`` (default: the version when the sensor first looked, kept in
    the task state store across retries and reschedules, forgotten on success so that a cleared sensor
    waits for a new change). Returns (and pushes to XCom) the version observed, and pushes the range it
    saw under ``change_range`` (``{"table_uri", "from_version", "to_version"}``) for a downstream task to
    read with ``DeltaHook.consume_changes``.

    A table that does not exist yet (no ``_delta_log`` with a commit or checkpoint: nothing there, or data
    files that no commit has added yet) is waited for, in poke and deferrable mode: ``min_version`` and
    ``app_id`` are not met until it is created and gets there; with the default baseline, the baseline is
    -1 and the table's first commit is the change waited for (``change_range`` from version 0). An error
    reading the log (permissions, a corrupt or cleaned-up log) fails the task as before.

    :param table_uri: the table root, e.g. ``s3://bucket/path`` or ``/data/table``. Templated.
    :param delta_conn_id: connection for the table's storage (``None``: no credentials).
    :param min_version: wait until the table's version is at least this. Templated.
    :param baseline_version: wait for a version newer than this. Templated.
    :param app_id: wait until this application id's transaction version... Templated.
    :param app_version: ...is at least this (e.g. an upstream ingest's batch number). Templated.
    :param data_changes_only: ignore commits that change no data (OPTIMIZE, dataChange=false, properties).
    :param deferrable: wait in the triggerer instead of a worker slot (default
        ``[operators] default_deferrable``).
    """

    template_fields: Sequence[str] = ("table_uri", "min_version", "baseline_version", "app_id", "app_version")
    ui_color = "#00add4"

    def __init__(
        self,
        *,
        table_uri: str,
        delta_conn_id: str | None = None,
        min_version: int | str | None = None,
        baseline_version: int | str | None = None,
        app_id: str | None = None,
        app_version: int | str | None = None,
        data_changes_only: bool = False,
        deferrable: bool = conf.getboolean("operators", "default_deferrable", fallback=False),
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.table_uri = table_uri
        self.delta_conn_id = delta_conn_id
        self.min_version = min_version
        self.baseline_version = baseline_version
        self.app_id = app_id
        self.app_version = app_version
        self.data_changes_only = data_changes_only
        self.deferrable = deferrable
        self._cursor: int | None = None

    def _condition(self, context: Context) -> VersionCondition:
        if self.app_id:
            return VersionCondition(app_id=self.app_id, app_version=_as_int(self.app_version))
        if self.min_version not in (None, ""):
            return VersionCondition(min_version=_as_int(self.min_version))
        baseline = _as_int(self.baseline_version)
        if baseline is None:
            baseline = self._baseline(context)
        return VersionCondition(newer_than=baseline, data_changes_only=self.data_changes_only)

    def _uses_default_baseline(self) -> bool:
        return not self.app_id and self.min_version in (None, "") and _as_int(self.baseline_version) is None

    def _baseline(self, context: Context) -> int:
        """The version when this sensor first looked, kept so that retries and reschedules wait for the
        same change."""
        store = context["task_state_store"]
        stored = store.get(BASELINE_KEY)
        if stored is not None:
            return int(stored)
        version = current_version(self.delta_table())
        store.set(BASELINE_KEY, version)
        if version == NO_TABLE:
            self.log.info("No Delta table at %s yet: its first commit is the change awaited", self.table_uri)
        else:
            self.log.info("Waiting for %s to move past version %d", self.table_uri, version)
        return version

    def _done(self, context: Context, version: int) -> int:
        first = None
        if not self.app_id and self.min_version in (None, ""):
            baseline = _as_int(self.baseline_version)
            if baseline is None:
                stored = context["task_state_store"].get(BASELINE_KEY)
                baseline = None if stored is None else int(stored)
            first = None if baseline is None else baseline + 1
        context["ti"].xcom_push(
            key=CHANGE_RANGE_KEY,
            value={"table_uri": self.table_uri, "from_version": first, "to_version": int(version)},
        )
        if self._uses_default_baseline():
            context["task_state_store"].delete(BASELINE_KEY)
        return version

    @redact_errors
    def poke(self, context: Context) -> PokeReturnValue:
        seen = observe(self.delta_table(), self._condition(context), self._cursor)
        if seen.cursor == NO_TABLE and self._cursor is None:
            self.log.info("No Delta table at %s yet: waiting for it to be created", self.table_uri)
        self._cursor = seen.cursor  # later pokes look only past it: one request while idle
        return PokeReturnValue(is_done=seen.satisfied, xcom_value=seen.version)

    @redact_errors
    def execute(self, context: Context) -> Any:
        if not self.deferrable:
            return self._done(context, super().execute(context))
        condition = self._condition(context)
        seen = observe(self.delta_table(), condition, None)
        if seen.satisfied:
            return self._done(context, seen.version)
        self.defer(
            trigger=DeltaVersionTrigger(
                table_uri=self.table_uri,
                delta_conn_id=self.delta_conn_id,
                poke_interval=self.poke_interval,
                cursor=seen.cursor,
                min_version=condition.min_version,
                newer_than=condition.newer_than,
                app_id=condition.app_id,
                app_version=condition.app_version,
                data_changes_only=condition.data_changes_only,
            ),
            method_name="execute_complete",
            timeout=timedelta(seconds=self.timeout) if self.timeout else None,
        )

    @redact_errors
    def execute_complete(self, context: Context, event: dict[str, Any]) -> int:
        if event.get("status") != "success":
            raise RuntimeError(f"DeltaVersionSensor on {self.table_uri}: {event.get('message')}")
        self.log.info("%s reached version %s", self.table_uri, event["version"])
        return self._done(context, int(event["version"]))
