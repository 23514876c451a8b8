"""Run when a Delta table gets a new data version: event-driven scheduling with an AssetWatcher.

The table ``clicks`` is written outside Airflow (a Spark job, a deltalake script, another team). Its
Asset carries an ``AssetWatcher`` whose ``DeltaTableWatcherTrigger`` polls the log in the triggerer (one
storage request per idle check) and emits an asset event for every version that adds or removes data;
each event schedules a run of this DAG.

Tables written by a DeltaCommitOperator need no watcher: the operator already emits an event on the
table's Asset (``table_asset(uri)``, with the version in its extra), so schedule on that Asset instead.

``on_new_version`` reads the version from the triggering asset events. A run that no event triggered (a
manual run, ``dag.test()``) has none; it then reads the table's latest version (or ``None`` when the table
does not exist yet) and says so.
"""

from __future__ import annotations

import datetime as dt
import logging
import os
from typing import Any

from airflow.sdk import DAG, Asset, AssetWatcher, task

from airflow_provider_delta.hooks.delta import DeltaHook
from airflow_provider_delta.log import TableNotFoundError
from airflow_provider_delta.operators.commit import table_asset
from airflow_provider_delta.triggers.delta import DeltaTableWatcherTrigger

log = logging.getLogger(__name__)

ROOT = os.environ.get("DELTA_EXAMPLE_ROOT") or "/tmp/airflow-provider-delta-examples"
CONN_ID = os.environ.get("DELTA_EXAMPLE_CONN_ID") or None
TABLE = f"{ROOT.rstrip('/')}/clicks"

# [START howto_asset_watcher]
clicks = Asset(
    name="delta_example_clicks",
    uri=table_asset(TABLE).uri,
    watchers=[
        AssetWatcher(
            name="delta_example_clicks_new_version",
            trigger=DeltaTableWatcherTrigger(table_uri=TABLE, delta_conn_id=CONN_ID, poke_interval=60),
        )
    ],
)
# [END howto_asset_watcher]


def event_versions(events: Any) -> list[int]:
    """Table versions named by asset events: a watcher's ``{"payload": {"version": v}}`` or a commit
    operator's ``{"version": v}``."""
    versions = []
    for event in events or []:
        extra = event.extra or {}
        version = (extra.get("payload") or {}).get("version", extra.get("version"))
        if version is not None:
            versions.append(int(version))
    return versions


with DAG(
    dag_id="delta_asset_watch",
    schedule=[clicks],
    start_date=dt.datetime(2024, 1, 1, tzinfo=dt.UTC),
    catchup=False,
    tags=["delta", "example"],
    doc_md=__doc__,
) as dag:

    @task
    def on_new_version(triggering_asset_events: Any = None) -> int | None:
        """The newest version the triggering events announce, else (untriggered run) the latest."""
        versions = event_versions((triggering_asset_events or {}).get(clicks, []))
        if versions:
            log.info("%s reached version %d (events for versions %s)", TABLE, max(versions), sorted(versions))
            return max(versions)
        try:
            version = DeltaHook(CONN_ID).get_table(TABLE).version()
        except TableNotFoundError:
            log.info("no triggering asset event (manual run) and no table at %s yet", TABLE)
            return None
        log.info("no triggering asset event (manual run): %s is at version %d", TABLE, version)
        return version

    on_new_version()
