"""Spark on top of the core: write DataFrames into Delta tables, read them back, checkpoint at scale.

``write`` (executors write Parquet, the driver commits once through the core), ``read`` (the snapshot's
files read by executors, deletion vectors and column mapping applied) and ``checkpoint_with_spark``.
This package imports pyspark (the ``spark`` extra); the core (``airflow_provider_delta.log``), the hook, the
sensor, the triggers and the operators other than ``DeltaSparkWriteOperator`` never import it.
"""

# ruff: noqa: E402 (the check must run before the modules that import pyspark)
from airflow_provider_delta.extras import require

require("pyspark")  # without the extra: an ImportError that names it, not "No module named pyspark"

from airflow_provider_delta.log.errors import DeletionVectorError

from .checkpoint import checkpoint_with_spark
from .constraints import ConstraintViolationError
from .read import read
from .schema import SchemaMismatchError
from .session import spark_session
from .write import write

__all__ = [
    "ConstraintViolationError",
    "DeletionVectorError",
    "SchemaMismatchError",
    "checkpoint_with_spark",
    "read",
    "spark_session",
    "write",
]
