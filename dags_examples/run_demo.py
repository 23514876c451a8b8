"""``make demo``: the example DAGs end to end with ``dag.test()``, on a local table. Not a DAG.

The Makefile's ``demo`` target sets AIRFLOW_HOME (a private one), the dags folder (this folder) and
DELTA_EXAMPLE_ROOT, migrates the metadata DB, runs this script with its stdout (Airflow's log lines) sent
to a file, then prints the table's history with ``deltalog history``. What each run did to the table is
printed to stderr, so that it shows on the terminal.
"""

from __future__ import annotations

import datetime as dt
import os
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
DAYS = [dt.datetime(2024, 1, d, tzinfo=dt.UTC) for d in (1, 2, 3)]


def say(text: str) -> None:
    print(f"[demo] {text}", file=sys.stderr, flush=True)


def table_state(table: str) -> str:
    import pyarrow.compute as pc

    from airflow_provider_delta.log import DeltaTable, TableNotFoundError

    try:
        snap = DeltaTable(table).snapshot()
    except TableNotFoundError:
        return "no table yet"
    rows = pc.sum(pc.fill_null(snap.file_stats().field("numRecords"), 0)).as_py() or 0
    return f"table at version {snap.version}: {snap.num_files} files, {rows} rows"


def run(dag, day: dt.datetime, table: str) -> None:
    started = time.monotonic()
    result = dag.test(logical_date=day)
    took = time.monotonic() - started
    say(f"{dag.dag_id} {day.date()}: {result.state} in {took:.1f} s; {table_state(table)}")
    if result.state != "success":
        raise SystemExit(f"{dag.dag_id} {day.date()} did not succeed")


def main() -> None:
    from airflow.dag_processing.dagbag import DagBag

    table = f"{os.environ['DELTA_EXAMPLE_ROOT'].rstrip('/')}/events"
    bag = DagBag(dag_folder=str(HERE))
    if bag.import_errors:
        raise SystemExit(f"example DAGs failed to import: {bag.import_errors}")
    say(f"example DAGs: {', '.join(sorted(bag.dag_ids))}")
    say(f"table: {table}")
    ingest, downstream, maintenance = (
        bag.get_dag(d) for d in ("delta_ingest", "delta_downstream", "delta_maintenance")
    )
    for day in DAYS:
        run(ingest, day, table)
    say("delta_ingest again for a day already loaded, as a retry or a clear would: nothing is committed")
    run(ingest, DAYS[1], table)
    for day in DAYS:
        run(downstream, day, table)
    run(maintenance, DAYS[-1], table)
    orders = f"{os.environ['DELTA_EXAMPLE_ROOT'].rstrip('/')}/orders"
    say("delta_rows: fetch a payload -> write rows exactly once (no Spark) -> check the day (filtered read)")
    rows = bag.get_dag("delta_rows")
    for day in DAYS:
        run(rows, day, orders)
    say("delta_rows again for a day already written, as a retry or a clear would: nothing is written")
    run(rows, DAYS[0], orders)
    root = os.environ["DELTA_EXAMPLE_ROOT"].rstrip("/")
    say("delta_changes_upstream appends and corrects orders (a MERGE with change data);")
    say("delta_changes_downstream reads only the changes since its last run into order_totals, exactly once")
    upstream, downstream = bag.get_dag("delta_changes_upstream"), bag.get_dag("delta_changes_downstream")
    for day in DAYS:
        run(upstream, day, f"{root}/orders_feed")
        run(downstream, day, f"{root}/order_totals")
    say("delta_changes_downstream again, as a clear would: nothing new to read, nothing committed")
    run(downstream, DAYS[-1], f"{root}/order_totals")
    spark_table = f"{os.environ['DELTA_EXAMPLE_ROOT'].rstrip('/')}/spark_events"
    say("delta_spark_pipeline: ingest on local Spark -> deferred sensor -> checkpoint + vacuum")
    for day in DAYS[:2]:
        run(bag.get_dag("delta_spark_pipeline"), day, spark_table)
    customers = f"{os.environ['DELTA_EXAMPLE_ROOT'].rstrip('/')}/customers"
    say("delta_spark_merge: the day's change batch -> MERGE into the customers dimension -> deferred sensor")
    for day in DAYS[:2]:
        run(bag.get_dag("delta_spark_merge"), day, customers)
    say("delta_spark_merge again for a day already merged, as a retry or a clear would: nothing is merged")
    run(bag.get_dag("delta_spark_merge"), DAYS[1], customers)


if __name__ == "__main__":
    main()
