"""Downstream of delta_changes_upstream: read only what changed in ``orders_feed``, once, into a second table.

The ``orders_feed`` Asset carries an AssetWatcher (``DeltaTableWatcherTrigger``) that emits an asset event for
every new data version, with the range it saw (``from_version``, ``to_version``) in its extra. Each run of
``aggregate`` consumes the changes after its own recorded progress up to that range's end
(``DeltaHook.consume_changes``) and appends, per customer, the net change of the amount (inserts and
post-images count up, deletes and pre-images down) to ``order_totals``, recording the progress as the app
transaction ``delta_changes_downstream/aggregate`` in the same commit. A retry, a clear or a backfill
re-reads the same range and commits nothing; a run that failed for good leaves its range to the next run.
So ``order_totals`` summed per customer always equals the orders' amounts per customer.

A run no event triggered (``dag.test()``, a manual run) reads up to the latest version.
"""

from __future__ import annotations

import datetime as dt
import os
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from airflow.sdk import DAG, Asset, AssetWatcher, task

from airflow_provider_delta.hooks.changes import change_range
from airflow_provider_delta.hooks.delta import DeltaHook
from airflow_provider_delta.operators.commit import table_asset
from airflow_provider_delta.triggers.delta import DeltaTableWatcherTrigger

ROOT = os.environ.get("DELTA_EXAMPLE_ROOT") or "/tmp/airflow-provider-delta-examples"
CONN_ID = os.environ.get("DELTA_EXAMPLE_CONN_ID") or None
ORDERS = f"{ROOT.rstrip('/')}/orders_feed"
TOTALS = f"{ROOT.rstrip('/')}/order_totals"
CONSUMER = "delta_changes_downstream/aggregate"
SIGN = {"insert": 1.0, "update_postimage": 1.0, "delete": -1.0, "update_preimage": -1.0}

orders = Asset(
    name="delta_example_orders_feed",
    uri=table_asset(ORDERS).uri,
    watchers=[
        AssetWatcher(
            name="delta_example_orders_feed_changes",
            trigger=DeltaTableWatcherTrigger(table_uri=ORDERS, delta_conn_id=CONN_ID, poke_interval=60),
        )
    ],
)


def net_amounts(changes: pa.Table) -> pa.Table:
    """Per customer, the net change of the amount in ``changes`` (``_change_type`` gives the sign), with
    the versions it covers."""
    sign = pa.array([SIGN[k] for k in changes.column("_change_type").to_pylist()], pa.float64())
    signed = pa.table({"customer": changes.column("customer"),
                       "amount": pc.multiply(changes.column("amount"), sign)})  # fmt: skip
    totals = signed.group_by("customer").aggregate([("amount", "sum")]).rename_columns(["customer", "amount"])
    versions = changes.column("_commit_version")
    low, high = (pc.min(versions).as_py(), pc.max(versions).as_py()) if len(versions) else (None, None)
    n = totals.num_rows
    return totals.append_column("from_version", pa.array([low] * n, pa.int64())).append_column(
        "to_version", pa.array([high] * n, pa.int64()))


with DAG(
    dag_id="delta_changes_downstream",
    schedule=[orders],
    start_date=dt.datetime(2024, 1, 1, tzinfo=dt.UTC),
    catchup=False,
    max_active_runs=1,
    tags=["delta", "example"],
    doc_md=__doc__,
) as dag:
    # [START howto_consume_changes]
    @task
    def aggregate(triggering_asset_events: Any = None) -> dict[str, Any]:
        """Consume the new changes of ``orders_feed`` once: net amounts per customer into ``order_totals``."""
        seen = change_range((triggering_asset_events or {}).get(orders, []))
        done = DeltaHook(CONN_ID).consume_changes(
            ORDERS, CONSUMER, net_amounts, sink_uri=TOTALS, upto=seen, columns=["customer", "amount"]
        )
        # Versions read and the commit; or already_committed (a retry, a clear: the range was done); or
        # start and end None: nothing new. consume_changes logs which.
        return done.to_dict()
    # [END howto_consume_changes]

    aggregate()
