"""Daily change batch -> MERGE into a dimension table -> a version sensor downstream, on local Spark.

``create_customers`` makes the ``customers`` dimension table once (deletion vectors on, so a MERGE marks
the rows it changes instead of rewriting their files). Each day ``merge_changes``
(DeltaSparkMergeOperator) takes the day's change batch from the source system (here computed by Spark:
updates of existing customers, new customers, and deletions flagged ``op = 'D'``) and MERGEs it into the
table as one commit with the task's exactly-once key (``airflow/delta_spark_merge/merge_changes/-1/<logical
date>``): a retry or a clear of a day already merged finds that key in the table and merges nothing, so
no change is applied twice. ``wait_for_merge`` (DeltaVersionSensor, deferred to the triggerer) waits for
that key, as a consumer of the dimension in another DAG would.

Where: ``$DELTA_EXAMPLE_ROOT/customers`` (default under ``/tmp/airflow-provider-delta-examples``).
"""

from __future__ import annotations

import datetime as dt
import os

from airflow.sdk import DAG

from airflow_provider_delta.operators.create import DeltaCreateTableOperator
from airflow_provider_delta.operators.spark import DeltaSparkMergeOperator
from airflow_provider_delta.sensors.delta import DeltaVersionSensor

ROOT = os.environ.get("DELTA_EXAMPLE_ROOT") or "/tmp/airflow-provider-delta-examples"
TABLE = f"{ROOT.rstrip('/')}/customers"
NEW_PER_DAY = 1_000  # new customers each day; a tenth as many updates and a fiftieth as many deletions


def day_changes(spark, context):
    """The day's change batch: deterministic for a given day (a re-run computes the same batch). Day ``n``
    (from 2024-01-01) brings customers ``n * 1000 ...``, updates the tier of every tenth customer seen so
    far (multiples of 10) and deletes every fiftieth of the day before's (ids ending in 5 or 55)."""
    from pyspark.sql import functions as F

    day = context["logical_date"].date()
    n = (day - dt.date(2024, 1, 1)).days
    first = n * NEW_PER_DAY
    new = spark.range(first, first + NEW_PER_DAY).select(
        F.col("id").alias("customer_id"), F.concat(F.lit("customer-"), F.col("id")).alias("name"),
        F.lit("bronze").alias("tier"), F.lit("I").alias("op"),
    )  # fmt: skip
    updated = spark.range(0, first, 10).select(
        F.col("id").alias("customer_id"), F.concat(F.lit("customer-"), F.col("id")).alias("name"),
        F.lit("gold" if n % 2 else "silver").alias("tier"), F.lit("U").alias("op"),
    )  # fmt: skip
    deleted = spark.range(max(0, first - NEW_PER_DAY) + 5, first, 50).select(
        F.col("id").alias("customer_id"), F.lit(None).cast("string").alias("name"),
        F.lit(None).cast("string").alias("tier"), F.lit("D").alias("op"),
    )  # fmt: skip
    batch = new.unionByName(updated).unionByName(deleted)  # one row per customer: ids never overlap
    return batch.withColumn("updated_on", F.lit(day.isoformat()).cast("date"))


with DAG(
    dag_id="delta_spark_merge",
    schedule="@daily",
    start_date=dt.datetime(2024, 1, 1, tzinfo=dt.UTC),
    catchup=False,
    tags=["delta", "spark", "merge", "example"],
) as dag:
    create_customers = DeltaCreateTableOperator(
        task_id="create_customers",
        table_uri=TABLE,
        schema=[("customer_id", "long"), ("name", "string"), ("tier", "string"), ("updated_on", "date")],
        configuration={"delta.enableDeletionVectors": "true"},
    )
    # [START howto_spark_merge]
    merge_changes = DeltaSparkMergeOperator(
        task_id="merge_changes",
        table_uri=TABLE,
        source_callable=day_changes,
        on="target.customer_id = source.customer_id",
        clauses=[
            {"when": "matched", "then": "delete", "condition": "source.op = 'D'"},
            {"when": "matched", "then": "update",
             "set": {"name": "source.name", "tier": "source.tier", "updated_on": "source.updated_on"}},
            {"when": "not_matched", "then": "insert", "condition": "source.op <> 'D'",
             "values": {"customer_id": "source.customer_id", "name": "source.name", "tier": "source.tier",
                        "updated_on": "source.updated_on"}},
        ],  # fmt: skip
    )
    # [END howto_spark_merge]
    wait_for_merge = DeltaVersionSensor(
        task_id="wait_for_merge",
        table_uri=TABLE,
        app_id="airflow/delta_spark_merge/merge_changes/-1/{{ logical_date.isoformat() }}",
        app_version=1,
        deferrable=True,
        poke_interval=1,
        timeout=600,
    )
    create_customers >> merge_changes >> wait_for_merge
