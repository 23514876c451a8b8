"""The Spark writer, reader and checkpoint against S3 (moto's server): executors reach S3 over fsspec.

Spark itself has no S3 connector here (no hadoop-aws jars): everything that touches S3 runs in Python
workers with the storage options the driver ships to them.
"""

from __future__ import annotations

import datetime as dt

import deltalake
import pyarrow as pa
import pytest
from spark_helpers import rows

from airflow_provider_delta.log import DeltaTable
from airflow_provider_delta.spark import checkpoint_with_spark, read, write

pytestmark = pytest.mark.s3


def _keys(s3_server, bucket: str, prefix: str) -> set[str]:
    listing = s3_server.client().list_objects_v2(Bucket=bucket, Prefix=prefix)
    return {o["Key"][len(prefix) :] for o in listing.get("Contents", [])}


def test_write_read_and_checkpoint_on_s3(spark, s3_server, s3_bucket):
    uri = f"s3://{s3_bucket}/sales"
    options = s3_server.storage_options
    df = spark.createDataFrame(
        [(i, f"r{i % 3}", dt.date(2024, 5, 1 + i % 2), i * 0.5) for i in range(30)],
        "id long, region string, day date, amount double",
    )
    assert write(df, uri, partition_by=["region"], storage_options=options).version == 0
    more = df.where("id < 10").withColumn("id", df.id + 1000)
    assert write(more, uri, storage_options=options, app_id="job", app_version=1).version == 1
    assert write(more, uri, storage_options=options, app_id="job", app_version=1).already_committed
    keys = _keys(s3_server, s3_bucket, "sales/")
    assert any(k.startswith("region=r1/part-") for k in keys)
    listing = s3_server.client().list_objects_v2(Bucket=s3_bucket, Prefix="sales/region=")["Contents"]
    sizes = {o["Key"][len("sales/") :]: o["Size"] for o in listing}
    files = DeltaTable(uri, options).snapshot().files
    assert dict(zip(files.column("path").to_pylist(), files.column("size").to_pylist(), strict=True)) == sizes
    assert {"_delta_log/00000000000000000000.json", "_delta_log/00000000000000000001.json"} <= keys
    expected = rows(df.union(more))
    assert rows(read(spark, uri, storage_options=options)) == expected
    theirs = deltalake.DeltaTable(uri, storage_options=s3_server.delta_storage_options)
    assert rows(theirs.to_pyarrow_table(), df.columns) == expected
    # Replace one partition, then checkpoint with Spark; readers then start from the checkpoint.
    write(
        df.where("region = 'r0'"),
        uri,
        mode="overwrite",
        replace_where="region = 'r0'",
        storage_options=options,
    )
    pointer = checkpoint_with_spark(spark, uri, parts=2, storage_options=options)
    assert pointer.version == 2 and pointer.parts == 2
    snap = DeltaTable(uri, options).snapshot()
    assert snap.segment.checkpoint_version == 2 and snap.app_transactions == {"job": 1}
    expected = rows(df.union(more.where("region != 'r0'")))
    assert rows(read(spark, uri, storage_options=options)) == expected
    theirs = deltalake.DeltaTable(uri, storage_options=s3_server.delta_storage_options)
    assert rows(theirs.to_pyarrow_table(), df.columns) == expected


def test_deltalake_table_on_s3_read_into_spark(spark, s3_server, s3_bucket):
    uri = f"s3://{s3_bucket}/dl"
    data = pa.table({"id": pa.array(range(8), pa.int64()), "part": [f"p{i % 2}" for i in range(8)]})
    deltalake.write_deltalake(
        uri, data, partition_by=["part"], storage_options=s3_server.delta_storage_options
    )
    deltalake.write_deltalake(
        uri, data.slice(0, 2), mode="append", storage_options=s3_server.delta_storage_options
    )
    got = read(spark, uri, storage_options=s3_server.storage_options)
    theirs = deltalake.DeltaTable(uri, storage_options=s3_server.delta_storage_options).to_pyarrow_table()
    assert got.columns == ["id", "part"] and rows(got) == rows(theirs, ["id", "part"])


def test_operator_writes_to_s3_through_connections(spark, s3_server, s3_bucket, monkeypatch, caplog):
    import json
    import logging
    from collections import defaultdict
    from types import SimpleNamespace

    from airflow_provider_delta.operators.spark import DeltaSparkWriteOperator

    secret = "SPARK-SECRET-do-not-log-7731"
    conn = {"conn_type": "delta", "login": "testing", "password": secret, "host": s3_server.endpoint_url,
            "extra": {"storage_options": {"client_kwargs": {"region_name": "us-east-1"}}}}  # fmt: skip
    monkeypatch.setenv("AIRFLOW_CONN_DELTA_S3", json.dumps(conn))
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_LOCAL", json.dumps({"conn_type": "spark", "host": "local[2]"}))
    uri = f"s3://{s3_bucket}/op"
    op = DeltaSparkWriteOperator(
        task_id="load", table_uri=uri, delta_conn_id="delta_s3", spark_conn_id="spark_local",
        python_callable=lambda session, context: session.range(5).withColumnRenamed("id", "n"),
    )  # fmt: skip
    pushed: list[tuple[str, dict]] = []
    ti = SimpleNamespace(dag_id="d", task_id="load", map_index=-1,
                         xcom_push=lambda key, value: pushed.append((key, value)))  # fmt: skip
    context = {"ti": ti, "run_id": "manual", "logical_date": None,
               "outlet_events": defaultdict(SimpleNamespace)}  # fmt: skip
    with caplog.at_level(logging.DEBUG):
        assert op.execute(context) == 0
        assert op.execute(context) == 0  # the same run again: already committed
    # Each run records the commit for the task's "Delta table" link: version 0, then already committed.
    assert [(k, v["version"], v["already_committed"]) for k, v in pushed] == [
        ("delta_commit", 0, False),
        ("delta_commit", 0, True),
    ]
    assert DeltaTable(uri, s3_server.storage_options).snapshot().app_transactions == {
        "airflow/d/load/-1/manual": 1
    }
    assert rows(read(spark, uri, storage_options=s3_server.storage_options)) == [(i,) for i in range(5)]
    assert secret not in caplog.text
    log_objects = s3_server.client().list_objects_v2(Bucket=s3_bucket, Prefix="op/_delta_log/")["Contents"]
    for obj in log_objects:
        body = s3_server.client().get_object(Bucket=s3_bucket, Key=obj["Key"])["Body"].read()
        assert secret.encode() not in body


@pytest.mark.parametrize("dv", [True, False], ids=["deletion-vectors", "rewrite"])
def test_delete_update_and_merge_on_s3(spark, s3_server, s3_bucket, dv: bool):
    """Row-level changes on S3: executors read the touched files and write the new ones over fsspec with
    the shipped storage options; the driver writes the deletion vectors and commits."""
    from airflow_provider_delta.spark import delete, merge, update

    uri = f"s3://{s3_bucket}/changes-{'dv' if dv else 'rewrite'}"
    options = s3_server.storage_options
    df = spark.range(0, 40).selectExpr("id", "id % 4 AS v", "char(97 + id % 2) AS p").repartition(4)
    write(df, uri, partition_by=["p"], storage_options=options,
          configuration={"delta.enableDeletionVectors": str(dv).lower()})  # fmt: skip
    assert delete(spark, uri, "v = 0", storage_options=options).metrics["numDeletedRows"] == 10
    updated = update(spark, uri, {"v": "v + 100"}, "id < 10", storage_options=options)
    assert updated.metrics["numUpdatedRows"] == 7
    source = spark.range(35, 45).selectExpr("id", "-1 AS v", "char(97 + id % 2) AS p")
    result = merge(source, uri, "target.id = source.id", storage_options=options, app_id="m", app_version=1) \
        .when_matched_update_all().when_not_matched_insert_all().execute()  # fmt: skip
    assert (result.metrics["numTargetRowsUpdated"], result.metrics["numTargetRowsInserted"]) == (4, 6)
    again = merge(source, uri, "target.id = source.id", storage_options=options, app_id="m", app_version=1) \
        .when_matched_update_all().execute()  # fmt: skip
    assert again.already_committed and again.version == result.version == 3
    expected = {i: i % 4 + (100 if i < 10 else 0) for i in range(40) if i % 4}
    expected.update({i: -1 for i in range(35, 45)})
    got = read(spark, uri, storage_options=options).toArrow().to_pylist()
    assert {r["id"]: r["v"] for r in got} == expected
    snap = DeltaTable(uri, options).snapshot()
    has_dv = snap.files.column("deletionVector").null_count < snap.num_files
    assert has_dv == dv
    prefix = uri.split("/", 3)[3] + "/"
    assert set(snap.files.column("path").to_pylist()) <= _keys(s3_server, s3_bucket, prefix)
