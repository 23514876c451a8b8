"""Downstream of delta_ingest: wait until the day has landed in the table, then read it.

``wait_for_ingest`` waits for the ingest's app transaction of the same day, the exactly-once key its
commit records: ``airflow/delta_ingest/commit/-1/<logical date>`` at version 1 (DeltaCommitOperator's
default ``app_id`` and ``app_version``). Waiting for the appId rather than "any new version" means that
an unrelated commit (another day, a maintenance job) does not wake it, and a re-run finds the day already
there. It waits deferred, in the triggerer, where an idle check costs one storage request.

``summarize`` reads the snapshot at the version the sensor returned (the one that holds the day, or a
later one) and logs the table's files and rows, and the day's.
"""

from __future__ import annotations

import datetime as dt
import logging
import os

import pyarrow.compute as pc
from airflow.sdk import DAG, CronDataIntervalTimetable, task

from airflow_provider_delta.hooks.delta import DeltaHook
from airflow_provider_delta.sensors.delta import DeltaVersionSensor

log = logging.getLogger(__name__)

ROOT = os.environ.get("DELTA_EXAMPLE_ROOT") or "/tmp/airflow-provider-delta-examples"
CONN_ID = os.environ.get("DELTA_EXAMPLE_CONN_ID") or None
TABLE = f"{ROOT.rstrip('/')}/events"

with DAG(
    dag_id="delta_downstream",
    schedule=CronDataIntervalTimetable("@daily", timezone="UTC"),
    start_date=dt.datetime(2024, 1, 1, tzinfo=dt.UTC),
    catchup=False,
    tags=["delta", "example"],
    doc_md=__doc__,
) as dag:
    # [START howto_version_sensor]
    wait_for_ingest = DeltaVersionSensor(
        task_id="wait_for_ingest",
        table_uri=TABLE,
        app_id="airflow/delta_ingest/commit/-1/{{ logical_date.isoformat() }}",
        app_version=1,
        deferrable=True,
        poke_interval=60,
        timeout=6 * 3600,
        delta_conn_id=CONN_ID,
    )
    # [END howto_version_sensor]

    @task
    def summarize(version: int, logical_date: dt.datetime | None = None) -> dict[str, int]:
        """Files and rows of the table at ``version``, and of the day's partition."""
        snap = DeltaHook(CONN_ID).get_table(TABLE).snapshot(version)
        records = pc.fill_null(snap.file_stats().field("numRecords"), 0)
        in_day = pc.equal(snap.partition_values().column("day"), logical_date.date())
        summary = {
            "version": snap.version,
            "files": snap.num_files,
            "rows": pc.sum(records).as_py() or 0,
            "day_files": pc.sum(pc.cast(in_day, "int64")).as_py() or 0,
            "day_rows": pc.sum(pc.if_else(in_day, records, 0)).as_py() or 0,
        }
        log.info("%s at version %d: %d files, %d rows; %s: %d files, %d rows", TABLE, snap.version,
                 summary["files"], summary["rows"], logical_date.date(), summary["day_files"],
                 summary["day_rows"])  # fmt: skip
        return summary

    summarize(wait_for_ingest.output)
