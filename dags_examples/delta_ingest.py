"""Daily ingest into a Delta table, exactly once per data interval.

``write_batch`` writes the day's rows as Parquet under the table root, in a Hive-style partition folder
(``day=YYYY-MM-DD/part-<uuid>.parquet``); ``commit`` (DeltaCommitOperator) then adds them to the table in
one Delta commit that records the app transaction ``airflow/delta_ingest/commit/-1/<logical date>``. A retry
or a clear of the run finds that transaction and commits nothing; a backfill of an older day has an appId
of its own (docs/exactly-once.md). Files a re-run wrote but did not commit are unreferenced, and VACUUM
(delta_maintenance) deletes them once they are older than the table's retention.

The day loaded is the run's logical date: the start of its data interval for scheduled runs (the run for
2024-01-01 starts at 2024-01-02 00:00 UTC), the date asked for in a manual run or ``dag.test()``. The
exactly-once key names the same date, so each day lands once whichever kind of run loads it.

Where: ``$DELTA_EXAMPLE_ROOT/events`` (default ``/tmp/airflow-provider-delta-examples/events``);
storage credentials from the connection named by ``$DELTA_EXAMPLE_CONN_ID`` (none by default).
"""

from __future__ import annotations

import datetime as dt
import logging
import os
import random
import uuid

import pyarrow as pa
import pyarrow.parquet as pq
from airflow.sdk import DAG, CronDataIntervalTimetable, task

from airflow_provider_delta.hooks.delta import DeltaHook
from airflow_provider_delta.operators.commit import DeltaCommitOperator
from airflow_provider_delta.operators.create import DeltaCreateTableOperator

log = logging.getLogger(__name__)

ROOT = os.environ.get("DELTA_EXAMPLE_ROOT") or "/tmp/airflow-provider-delta-examples"
CONN_ID = os.environ.get("DELTA_EXAMPLE_CONN_ID") or None
TABLE = f"{ROOT.rstrip('/')}/events"

# Delta type names; "day" is the partition column, so it lives in the folder names, not in the files.
SCHEMA = [
    ("event_id", "string", False),
    ("user_id", "long"),
    ("kind", "string"),
    ("amount", "double"),
    ("event_time", "timestamp"),
    ("day", "date"),
]
KINDS = ("view", "click", "purchase")


def day_rows(day: dt.date) -> pa.Table:
    """The day's events: 100 to 149 rows, the same every time for the same day."""
    rng = random.Random(day.toordinal())
    n = 100 + rng.randrange(50)
    start = dt.datetime(day.year, day.month, day.day, tzinfo=dt.UTC)
    seconds = sorted(rng.randrange(86_400) for _ in range(n))
    kinds = [rng.choice(KINDS) for _ in range(n)]
    return pa.table(
        {
            "event_id": [f"{day.isoformat()}-{i:05d}" for i in range(n)],
            "user_id": pa.array([rng.randrange(1, 1_000) for _ in range(n)], pa.int64()),
            "kind": kinds,
            "amount": [round(rng.uniform(1, 200), 2) if k == "purchase" else 0.0 for k in kinds],
            "event_time": pa.array(
                [start + dt.timedelta(seconds=s) for s in seconds], pa.timestamp("us", "UTC")
            ),
        }
    )


with DAG(
    dag_id="delta_ingest",
    schedule=CronDataIntervalTimetable("@daily", timezone="UTC"),
    start_date=dt.datetime(2024, 1, 1, tzinfo=dt.UTC),
    catchup=False,
    max_active_runs=4,
    default_args={"retries": 2, "retry_delay": dt.timedelta(minutes=1)},
    tags=["delta", "example"],
    doc_md=__doc__,
) as dag:
    # [START howto_create_table]
    create_table = DeltaCreateTableOperator(
        task_id="create_table",
        table_uri=TABLE,
        schema=SCHEMA,
        partition_by=["day"],
        configuration={"delta.logRetentionDuration": "interval 30 days"},
        exist_ok=True,
        delta_conn_id=CONN_ID,
    )
    # [END howto_create_table]

    @task
    def write_batch(logical_date: dt.datetime | None = None) -> list[str]:
        """Write the day's Parquet file under the table root; return its path relative to the root."""
        day = logical_date.date()
        store = DeltaHook(CONN_ID).get_table(TABLE).store
        relative = f"day={day.isoformat()}/part-{uuid.uuid4()}.parquet"
        store.fs.makedirs(store.table_file(f"day={day.isoformat()}"), exist_ok=True)
        rows = day_rows(day)
        with store.fs.open(store.table_file(relative), "wb") as out:
            pq.write_table(rows, out)
        log.info("wrote %d rows to %s/%s", rows.num_rows, TABLE, relative)
        return [relative]

    files = write_batch()
    # Paths are enough: the commit reads each file's stats from its Parquet footer and the partition value
    # from its day=... folder.
    # [START howto_commit]
    commit = DeltaCommitOperator(task_id="commit", table_uri=TABLE, files=files, delta_conn_id=CONN_ID)
    # [END howto_commit]
    create_table >> files
