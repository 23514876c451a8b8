"""Rows without Spark: fetch a day's payload, write it exactly once, check the day with a filtered read.

``fetch_payload`` stands for an API call: it returns the day's orders as a list of dicts (the same every
time for the same day, as a paginated API queried for a closed interval would). ``write_rows``
(DeltaWriteOperator) writes them with the core's Arrow writer into ``$DELTA_EXAMPLE_ROOT/orders``,
partitioned by ``day``, with the table's rules enforced (``amount >= 0`` is a CHECK constraint the DAG
creates the table with) and one commit recording the app transaction
``airflow/delta_rows/write_rows/-1/<logical date>``: a retry or a clear of the run writes nothing the second
time. ``check_day`` reads back only the day's partition (a filtered read skips every other day's files)
and fails the run unless it holds exactly the payload's orders and total.
"""

from __future__ import annotations

import datetime as dt
import logging
import os
import random

from airflow.sdk import DAG, CronDataIntervalTimetable, task

from airflow_provider_delta.hooks.delta import DeltaHook
from airflow_provider_delta.operators.write import DeltaWriteOperator

log = logging.getLogger(__name__)

ROOT = os.environ.get("DELTA_EXAMPLE_ROOT") or "/tmp/airflow-provider-delta-examples"
CONN_ID = os.environ.get("DELTA_EXAMPLE_CONN_ID") or None
TABLE = f"{ROOT.rstrip('/')}/orders"


def payload(day: dt.date) -> list[dict]:
    """The day's orders, as an API would return them: 20 to 39, the same every time for the same day."""
    rng = random.Random(day.toordinal())
    return [
        {"order_id": f"{day.isoformat()}-{i:04d}", "customer": rng.randrange(1, 500),
         "amount": round(rng.uniform(1, 300), 2), "day": day.isoformat()}
        for i in range(20 + rng.randrange(20))
    ]  # fmt: skip


with DAG(
    dag_id="delta_rows",
    schedule=CronDataIntervalTimetable("@daily", timezone="UTC"),
    start_date=dt.datetime(2024, 1, 1, tzinfo=dt.UTC),
    catchup=False,
    default_args={"retries": 2, "retry_delay": dt.timedelta(minutes=1)},
    tags=["delta", "example"],
    doc_md=__doc__,
) as dag:

    @task
    def fetch_payload(logical_date: dt.datetime | None = None) -> list[dict]:
        return payload(logical_date.date())

    # [START howto_write_rows]
    write_rows = DeltaWriteOperator(
        task_id="write_rows",
        table_uri=TABLE,
        data=fetch_payload(),
        partition_by=["day"],
        configuration={"delta.constraints.amount_positive": "amount >= 0"},
        delta_conn_id=CONN_ID,
    )
    # [END howto_write_rows]

    # [START howto_read_rows]
    @task
    def check_day(version: int, logical_date: dt.datetime | None = None) -> dict:
        """The day's rows at the version that holds them: a filtered read skips other days' files."""
        day = logical_date.date().isoformat()
        hook = DeltaHook(CONN_ID)
        rows = hook.read_rows(TABLE, ["order_id", "amount"], [("day", "=", day)], version=version)
        expected = payload(logical_date.date())
        total = round(sum(rows.column("amount").to_pylist()), 2)
        if rows.num_rows != len(expected) or total != round(sum(r["amount"] for r in expected), 2):
            raise ValueError(f"{TABLE} at version {version} holds {rows.num_rows} orders for {day}, "
                             f"totalling {total}; the payload had {len(expected)}")  # fmt: skip
        log.info("%s at version %d: %d orders for %s, total %.2f", TABLE, version, rows.num_rows, day, total)
        return {"version": version, "day": day, "orders": rows.num_rows, "total": total}

    check_day(write_rows.output)
    # [END howto_read_rows]
