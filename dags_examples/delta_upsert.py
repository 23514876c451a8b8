"""Rows without Spark, changed in place: upsert each day's order changes, delete orders past retention.

``fetch_changes`` stands for an API that returns the orders created or changed on a day (the same every time
for the same day): the day's new orders, and the day before's even-numbered orders, now shipped.
``upsert_orders`` (DeltaMergeOperator) MERGEs them into ``$DELTA_EXAMPLE_ROOT/orders_current`` in the task,
without Spark: a known order takes its new status, a new order is inserted, and a change of an order the
table does not hold is dropped. One commit records the app transaction
``airflow/delta_upsert/upsert_orders/-1/<logical date>``, so a retry or a clear of a day already merged
changes nothing. ``cancel_stale`` (DeltaUpdateOperator) cancels the orders still ``placed``
``params.cancel_after_days`` days after they were placed, and ``apply_retention`` (DeltaDeleteOperator)
deletes the orders placed more than ``params.retention_days`` days before the interval, each exactly once
per interval too. The table has deletion vectors on: the three operators mark the rows they change instead
of rewriting their files.
"""

from __future__ import annotations

import datetime as dt
import os

from airflow.sdk import DAG, task

from airflow_provider_delta.operators.create import DeltaCreateTableOperator
from airflow_provider_delta.operators.row_changes import (
    DeltaDeleteOperator,
    DeltaMergeOperator,
    DeltaUpdateOperator,
)

ROOT = os.environ.get("DELTA_EXAMPLE_ROOT") or "/tmp/airflow-provider-delta-examples"
CONN_ID = os.environ.get("DELTA_EXAMPLE_CONN_ID") or None
TABLE = f"{ROOT.rstrip('/')}/orders_current"
NEW_PER_DAY = 10


def changes(day: dt.date) -> list[dict]:
    """The day's changes: ``NEW_PER_DAY`` new orders, and the day before's even-numbered orders shipped."""
    before = day - dt.timedelta(days=1)
    return [
        {"order_id": f"{d.isoformat()}-{i:02d}", "customer": i % 4, "amount": 10.0 + i, "status": status,
         "day": d.isoformat()}
        for d, status, step in ((day, "placed", 1), (before, "shipped", 2))
        for i in range(0, NEW_PER_DAY, step)
    ]  # fmt: skip


with DAG(
    dag_id="delta_upsert",
    schedule="@daily",
    start_date=dt.datetime(2024, 1, 1, tzinfo=dt.UTC),
    catchup=False,
    params={"cancel_after_days": 7, "retention_days": 30},
    tags=["delta", "merge", "example"],
    doc_md=__doc__,
) as dag:
    create_orders = DeltaCreateTableOperator(
        task_id="create_orders",
        table_uri=TABLE,
        schema=[("order_id", "string"), ("customer", "long"), ("amount", "double"), ("status", "string"),
                ("day", "date")],
        configuration={"delta.enableDeletionVectors": "true"},
        exist_ok=True,
        delta_conn_id=CONN_ID,
    )  # fmt: skip

    @task
    def fetch_changes(logical_date: dt.datetime | None = None) -> list[dict]:
        return changes(logical_date.date())

    # [START howto_upsert_rows]
    upsert_orders = DeltaMergeOperator(
        task_id="upsert_orders",
        table_uri=TABLE,
        data=fetch_changes(),
        on="target.order_id = source.order_id",
        clauses=[
            {"when": "matched", "then": "update", "set": {"status": "source.status"}},
            {"when": "not_matched", "then": "insert", "values": "*", "condition": "source.status = 'placed'"},
        ],
        delta_conn_id=CONN_ID,
    )
    # [END howto_upsert_rows]

    # [START howto_update_rows]
    cancel_stale = DeltaUpdateOperator(
        task_id="cancel_stale",
        table_uri=TABLE,
        set={"status": "'cancelled'"},
        predicate="status = 'placed' AND day < '{{ macros.ds_add(ds, -params.cancel_after_days) }}'",
        delta_conn_id=CONN_ID,
    )
    # [END howto_update_rows]

    # [START howto_delete_rows]
    apply_retention = DeltaDeleteOperator(
        task_id="apply_retention",
        table_uri=TABLE,
        predicate="day < '{{ macros.ds_add(ds, -params.retention_days) }}'",
        delta_conn_id=CONN_ID,
    )
    # [END howto_delete_rows]

    create_orders >> upsert_orders >> cancel_stale >> apply_retention
