"""The worker of ``bench.row_changes``: one Spark session, one engine, commands on stdin, answers on stdout.

``python bench/row_changes_worker.py ENGINE CONF_JSON [JARS_DIR]`` where ENGINE is ``ours`` (run by the
project's Python: ``airflow_provider_delta.spark``) or ``delta`` (run by the Delta Spark oracle's Python,
``.oracle/venv``, with the jars of ``JARS_DIR``: Delta Spark 4.4's SQL). It imports nothing of the
project on the ``delta`` side, so it runs in the oracle's environment as it is. Each command is a JSON
line (``build``, ``merge``, ``delete``, ``optimize``, ``count``, ``stop``; on the ``ours`` side also
``optimize_pyarrow``, the core's OPTIMIZE without Spark, and ``compact_deltalake``, delta-rs's compaction,
both in this process beside the idle session); each answer a JSON line with the seconds the operation took
(only the operation: the session is warm, the source DataFrame defined before the clock starts) and the
operation's metrics from the commit, which the parent checks.
"""

from __future__ import annotations

import glob
import json
import os
import sys
import time
from typing import Any

MERGE_ON = "target.id = source.id"
DELETE_WHERE = "id % 100 = 7"  # 1 % of the rows, in every file


def rows_frame(spark: Any, first: int, count: int, partitions: int) -> Any:
    """Rows ``first ...``: id, value, name, region; the same in both engines (no randomness, no clock)."""
    from pyspark.sql import functions as F

    ids = spark.range(first, first + count, 1, numPartitions=partitions)
    return _columns(ids, F)


def _columns(ids: Any, F: Any) -> Any:
    return ids.select(
        "id",
        ((F.col("id") * 7919) % 1_000_003 / 1000.0).alias("value"),
        F.concat(F.lit("name_"), (F.col("id") % 100_000).cast("string")).alias("name"),
        F.concat(F.lit("r"), F.lpad((F.col("id") % 20).cast("string"), 2, "0")).alias("region"),
    )


def change_batch(spark: Any, rows: int, batch: int) -> Any:
    """``batch`` source rows: the first half update existing rows spread over the whole table (ids
    ``k * step + 37``), the second half are new ids after the table's last; values changed."""
    from pyspark.sql import functions as F

    half = batch // 2
    step = rows // half
    ids = spark.range(0, batch, 1, numPartitions=2).select(
        F.when(F.col("id") < half, F.col("id") * step + 37).otherwise(F.col("id") - half + rows).alias("id"))
    out = _columns(ids, F)
    return out.withColumn("value", F.col("value") + 1.0)


def session(engine: str, conf: dict[str, str], jars_dir: str | None) -> Any:
    from pyspark.sql import SparkSession

    settings = dict(conf)
    if engine == "delta":
        settings.update({
            "spark.jars": ",".join(sorted(glob.glob(os.path.join(jars_dir or "", "*.jar")))),
            "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
            "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
        })  # fmt: skip
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = SparkSession.builder.master("local[2]").appName(f"bench-row-changes-{engine}")
    for key, value in settings.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def _history_metrics(spark: Any, path: str) -> dict[str, Any]:
    row = spark.sql(f"DESCRIBE HISTORY delta.`{path}` LIMIT 1").collect()[0]
    return {"operation": row["operation"], **{k: int(v) for k, v in row["operationMetrics"].items()}}


def run_delta(spark: Any, cmd: dict[str, Any]) -> dict[str, Any]:
    path = cmd.get("path")
    if cmd["op"] == "build":
        dv = "true" if cmd["dv"] else "false"
        spark.sql(f"CREATE TABLE delta.`{path}` (id BIGINT, value DOUBLE, name STRING, region STRING) USING "
                  f"delta TBLPROPERTIES ('delta.enableDeletionVectors' = '{dv}')")  # fmt: skip
        rows_frame(spark, 0, cmd["rows"], cmd["files"]).write.format("delta").mode("append").save(path)
        return {"metrics": _history_metrics(spark, path)}
    if cmd["op"] == "count":
        return {"rows": spark.read.format("delta").load(path).count()}
    if cmd["op"] == "merge":
        change_batch(spark, cmd["rows"], cmd["batch"]).createOrReplaceTempView("changes")
        sql = (f"MERGE INTO delta.`{path}` AS target USING changes AS source ON {MERGE_ON} "
               "WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *")  # fmt: skip
    elif cmd["op"] == "optimize":
        sql = f"OPTIMIZE delta.`{path}`"
    else:
        sql = f"DELETE FROM delta.`{path}` WHERE {DELETE_WHERE}"
    started = time.perf_counter()
    spark.sql(sql).collect()
    seconds = time.perf_counter() - started
    return {"seconds": seconds, "metrics": _history_metrics(spark, path)}


def run_ours(spark: Any, cmd: dict[str, Any]) -> dict[str, Any]:
    from airflow_provider_delta.spark import delete, merge, read
    from airflow_provider_delta.spark.optimize import optimize

    path = cmd["path"]
    if cmd["op"] == "count":
        return {"rows": read(spark, path).count()}
    if cmd["op"] == "merge":
        builder = merge(change_batch(spark, cmd["rows"], cmd["batch"]), path, MERGE_ON) \
            .when_matched_update_all().when_not_matched_insert_all()  # fmt: skip
        started = time.perf_counter()
        result = builder.execute()
    elif cmd["op"] in ("optimize", "optimize_pyarrow"):
        from airflow_provider_delta.log import DeltaTable

        started = time.perf_counter()
        m = optimize(spark, path) if cmd["op"] == "optimize" else DeltaTable(path).optimize()
        seconds = time.perf_counter() - started
        return {"seconds": seconds, "metrics": {"numRemovedFiles": m.num_files_removed,
                                                "numAddedFiles": m.num_files_added}}  # fmt: skip
    elif cmd["op"] == "compact_deltalake":
        import deltalake

        started = time.perf_counter()
        m = deltalake.DeltaTable(path).optimize.compact()
        seconds = time.perf_counter() - started
        return {"seconds": seconds, "metrics": {"numRemovedFiles": m["numFilesRemoved"],
                                                "numAddedFiles": m["numFilesAdded"]}}  # fmt: skip
    else:
        started = time.perf_counter()
        result = delete(spark, path, DELETE_WHERE)
    seconds = time.perf_counter() - started
    return {"seconds": seconds, "metrics": {"version": result.version, **result.metrics}}


def main() -> None:
    engine, conf = sys.argv[1], json.loads(sys.argv[2])
    jars_dir = sys.argv[3] if len(sys.argv) > 3 else None
    answers = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)  # the JVM prints to fd 1: keep the answers' stream clean
    spark = session(engine, conf, jars_dir)
    answers.write(json.dumps({"ready": spark.version}) + "\n")
    run = run_delta if engine == "delta" else run_ours
    for line in sys.stdin:
        cmd = json.loads(line)
        if cmd["op"] == "stop":
            break
        answers.write(json.dumps(run(spark, cmd)) + "\n")
    spark.stop()


if __name__ == "__main__":
    main()
