"""A SparkSession for the Delta writer and reader: local by default, any master URL for a cluster.

Nothing here is Delta-specific: the writer and reader move data with ``mapInArrow`` and pyarrow, so no Delta
or Hadoop-cloud jars are needed. Executors must be able to import ``airflow_provider_delta`` (installed in
the same environment as the driver, which ``PYSPARK_PYTHON`` defaults to for local masters).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

LOCAL_DEFAULTS: dict[str, str] = {
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.shuffle.partitions": "4",
    "spark.sql.session.timeZone": "UTC",
}


def spark_session(
    master: str = "local[2]",
    conf: Mapping[str, Any] | None = None,
    app_name: str = "airflow-provider-delta",
) -> SparkSession:
    """Get or create a session for ``master``; ``conf`` overrides the defaults.

    For ``local[...]`` masters the workers run this interpreter (``PYSPARK_PYTHON``), so they import the
    same provider and pyarrow as the driver; the UI and progress bar are off and shuffles are small.
    """
    from pyspark.sql import SparkSession

    settings: dict[str, Any] = {}
    if master.startswith("local"):
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
        settings.update(LOCAL_DEFAULTS)
    settings.update(conf or {})
    builder = SparkSession.builder.master(master).appName(app_name)
    for key, value in settings.items():
        builder = builder.config(key, str(value))
    return builder.getOrCreate()


def default_parallelism(spark: SparkSession) -> int:
    """How many tasks keep the cluster busy (Spark Connect sessions have no SparkContext: 8)."""
    try:
        return max(1, spark.sparkContext.defaultParallelism)
    except Exception:  # Spark Connect: no SparkContext on the client
        return 8
