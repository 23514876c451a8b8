"""Upstream of delta_changes_downstream: each day, append new orders and correct earlier ones (an upsert).

``orders`` records its changes (``delta.enableChangeDataFeed``) and deletes by deletion vector. Both tasks
run without Spark, on the core, and each commits exactly once per day (an app transaction named for the
task and the day), so a retry or a clear changes nothing:

- ``append_orders`` writes the day's orders (``DeltaHook.write_rows``);
- ``correct_orders`` raises the amount of the previous day's first two orders as a MERGE would: the old
  rows deleted by deletion vector, the new ones in a new file, and both images as change data, in one
  commit. A change reader sees ``update_preimage``/``update_postimage`` rows for it.

delta_changes_downstream wakes on every new version (an AssetWatcher) and reads only what changed.
"""

from __future__ import annotations

import datetime as dt
import os
import uuid

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from airflow.sdk import DAG, CronDataIntervalTimetable, task

from airflow_provider_delta.hooks.delta import DeltaHook
from airflow_provider_delta.log import DeltaTable, TableNotFoundError

ROOT = os.environ.get("DELTA_EXAMPLE_ROOT") or "/tmp/airflow-provider-delta-examples"
CONN_ID = os.environ.get("DELTA_EXAMPLE_CONN_ID") or None
ORDERS = f"{ROOT.rstrip('/')}/orders_feed"
SCHEMA = pa.schema([("order_id", pa.int64()), ("customer", pa.string()), ("amount", pa.float64())])
CONFIGURATION = {"delta.enableChangeDataFeed": "true", "delta.enableDeletionVectors": "true"}


def orders_of(day: dt.date) -> pa.Table:
    first = day.toordinal() * 10
    ids = list(range(first, first + 5))
    return pa.table({"order_id": ids, "customer": [f"c{i % 3}" for i in ids],
                     "amount": [float(i % 7 + 1) for i in ids]}, schema=SCHEMA)  # fmt: skip


def orders_table(hook: DeltaHook) -> DeltaTable:
    table = hook.get_table(ORDERS)
    try:
        table.version()
    except TableNotFoundError:
        DeltaTable.create(ORDERS, SCHEMA, configuration=CONFIGURATION)
    return table


def correct(table: DeltaTable, ids: list[int], app_id: str) -> int | None:
    """Add 1 to the amount of orders ``ids``, as one MERGE commit with its change data (once per app_id)."""
    txn = table.transaction()
    if txn.snapshot.app_transactions.get(app_id, -1) >= 1:
        return None
    old = table.scan(filter=pc.field("order_id").isin(ids), metadata=["file_path", "row_index"],
                     version=txn.snapshot.version).to_table()  # fmt: skip
    if old.num_rows == 0:
        return None
    where = old.column("_metadata").combine_chunks()
    rows: dict[str, list[int]] = {}
    for path, index in zip(where.field("file_path").to_pylist(), where.field("row_index").to_pylist(),
                           strict=True):  # fmt: skip
        rows.setdefault(path, []).append(index)
    before = old.drop_columns(["_metadata"])
    after = before.set_column(2, "amount", pc.add(before.column("amount"), 1.0))
    name = f"part-correction-{uuid.uuid4()}.parquet"
    with table.store.fs.open(table.store.table_file(name), "wb") as fh:
        pq.write_table(after, fh)
    kinds = pa.array(["update_preimage"] * before.num_rows + ["update_postimage"] * after.num_rows)
    images = pa.concat_tables([before, after]).append_column("_change_type", kinds)
    txn.delete_rows(rows).add_files(table.add_file(name)).add_change_data(images)
    txn.set_app_transaction(app_id, 1)
    metrics = {"numTargetRowsUpdated": str(after.num_rows), "numTargetRowsInserted": "0",
               "numTargetRowsDeleted": "0"}  # fmt: skip
    return txn.commit("MERGE", operation_metrics=metrics).version


with DAG(
    dag_id="delta_changes_upstream",
    schedule=CronDataIntervalTimetable("@daily", timezone="UTC"),
    start_date=dt.datetime(2024, 1, 1, tzinfo=dt.UTC),
    catchup=False,
    tags=["delta", "example"],
    doc_md=__doc__,
) as dag:

    @task
    def append_orders(ds: str | None = None) -> int:
        hook = DeltaHook(CONN_ID)
        orders_table(hook)
        day = dt.date.fromisoformat(ds)
        return hook.write_rows(ORDERS, orders_of(day), app_id=f"delta_changes_upstream/append/{ds}",
                               app_version=1).version  # fmt: skip

    @task
    def correct_orders(ds: str | None = None) -> int | None:
        previous = dt.date.fromisoformat(ds) - dt.timedelta(days=1)
        ids = orders_of(previous).column("order_id").to_pylist()[:2]
        return correct(orders_table(DeltaHook(CONN_ID)), ids, f"delta_changes_upstream/correct/{ds}")

    append_orders() >> correct_orders()
