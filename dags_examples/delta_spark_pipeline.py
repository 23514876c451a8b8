"""Daily ingest on Spark, a downstream wait, and maintenance, on one Delta table.

``ingest`` (DeltaSparkWriteOperator) runs a PySpark function on local Spark (a Spark connection or master
URL for a cluster): executors write the day's Parquet files straight into the table, the driver commits them
once through the core with the task's exactly-once app transaction
(``airflow/delta_spark_pipeline/ingest/-1/<logical date>``), so retries, clears and backfills load each day
once. ``wait_for_day`` (DeltaVersionSensor, deferred to the triggerer) waits for that app transaction, as a
consumer in another DAG would; ``checkpoint`` and ``vacuum`` keep the log short and the storage clean.

Where: ``$DELTA_EXAMPLE_ROOT/spark_events`` (default under ``/tmp/airflow-provider-delta-examples``).
"""

from __future__ import annotations

import datetime as dt
import os

from airflow.sdk import DAG

from airflow_provider_delta.operators.maintenance import DeltaCheckpointOperator, DeltaVacuumOperator
from airflow_provider_delta.operators.spark import DeltaSparkWriteOperator
from airflow_provider_delta.sensors.delta import DeltaVersionSensor

ROOT = os.environ.get("DELTA_EXAMPLE_ROOT") or "/tmp/airflow-provider-delta-examples"
TABLE = f"{ROOT.rstrip('/')}/spark_events"
ROWS_PER_DAY = 10_000


def day_events(spark, context):
    """The day's events, computed by Spark: deterministic for a given day, so a re-run writes the same."""
    from pyspark.sql import functions as F

    day = context["logical_date"].date()
    seed = day.toordinal()
    return (
        spark.range(ROWS_PER_DAY)
        .withColumn("user_id", (F.col("id") * 7919 + seed) % 1000)
        .withColumn("amount", F.round((F.col("id") * 31 + seed) % 10_000 / 100.0, 2))
        .withColumn(
            "kind",
            F.element_at(
                F.array(F.lit("view"), F.lit("click"), F.lit("buy")), (F.col("id") % 3 + 1).cast("int")
            ),
        )  # fmt: skip
        .withColumn("day", F.lit(day.isoformat()).cast("date"))
    )


with DAG(
    dag_id="delta_spark_pipeline",
    schedule="@daily",
    start_date=dt.datetime(2024, 1, 1, tzinfo=dt.UTC),
    catchup=False,
    tags=["delta", "spark", "example"],
) as dag:
    # [START howto_spark_write]
    ingest = DeltaSparkWriteOperator(
        task_id="ingest", table_uri=TABLE, python_callable=day_events, partition_by=["day"]
    )
    # [END howto_spark_write]
    wait_for_day = DeltaVersionSensor(
        task_id="wait_for_day",
        table_uri=TABLE,
        app_id="airflow/delta_spark_pipeline/ingest/-1/{{ logical_date.isoformat() }}",
        app_version=1,
        deferrable=True,
        poke_interval=1,
        timeout=600,
    )
    checkpoint = DeltaCheckpointOperator(task_id="checkpoint", table_uri=TABLE)
    vacuum = DeltaVacuumOperator(task_id="vacuum", table_uri=TABLE, dry_run=True)
    ingest >> wait_for_day >> checkpoint >> vacuum
