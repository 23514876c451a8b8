"""Daily maintenance of Delta tables: OPTIMIZE, checkpoint, VACUUM, log cleanup; a task group per table.

The tables come from the Airflow Variable ``delta_maintenance_tables`` (a JSON list of table URIs), read
when the run starts, so adding a table needs no DAG change; by default the example ``events`` table. For
each table, in order:

- ``optimize``: compact the day's small files into files of the target size (Delta's OPTIMIZE, with
  pyarrow in the task for tables up to a few GiB, on Spark beyond); the files it replaces are removed from
  the table, and the VACUUM of a later run deletes them once they are older than the retention;
- ``checkpoint``: a checkpoint of the latest version, so readers replay a short log and so that log
  cleanup has a recent checkpoint to keep;
- ``vacuum``: delete data files no version of the last ``delta.deletedFileRetentionDuration`` (7 days by
  default) needs: files that overwrites and deletes removed, and files written but never committed;
- ``cleanup_logs``: delete log files older than ``delta.logRetentionDuration`` (30 days by default) that
  no retained version needs.

See docs/maintenance.md for what each step may delete and why that is safe.
"""

from __future__ import annotations

import datetime as dt
import os

from airflow.sdk import DAG, CronDataIntervalTimetable, Variable, task, task_group

from airflow_provider_delta.operators.layout import DeltaOptimizeOperator
from airflow_provider_delta.operators.maintenance import (
    DeltaCheckpointOperator,
    DeltaLogCleanupOperator,
    DeltaVacuumOperator,
)

ROOT = os.environ.get("DELTA_EXAMPLE_ROOT") or "/tmp/airflow-provider-delta-examples"
CONN_ID = os.environ.get("DELTA_EXAMPLE_CONN_ID") or None
DEFAULT_TABLES = [f"{ROOT.rstrip('/')}/events"]

with DAG(
    dag_id="delta_maintenance",
    schedule=CronDataIntervalTimetable("30 3 * * *", timezone="UTC"),
    start_date=dt.datetime(2024, 1, 1, tzinfo=dt.UTC),
    catchup=False,
    max_active_runs=1,
    tags=["delta", "example"],
    doc_md=__doc__,
) as dag:

    @task
    def tables() -> list[str]:
        """The tables to maintain: Variable ``delta_maintenance_tables``, else the example table."""
        return Variable.get("delta_maintenance_tables", default=DEFAULT_TABLES, deserialize_json=True)

    # [START howto_maintenance]
    @task_group
    def maintain(table_uri: str) -> None:
        optimize = DeltaOptimizeOperator(task_id="optimize", table_uri=table_uri, delta_conn_id=CONN_ID)
        checkpoint = DeltaCheckpointOperator(task_id="checkpoint", table_uri=table_uri, delta_conn_id=CONN_ID)
        vacuum = DeltaVacuumOperator(task_id="vacuum", table_uri=table_uri, delta_conn_id=CONN_ID)
        cleanup = DeltaLogCleanupOperator(task_id="cleanup_logs", table_uri=table_uri, delta_conn_id=CONN_ID)
        optimize >> checkpoint >> vacuum >> cleanup
    # [END howto_maintenance]

    maintain.expand(table_uri=tables())
