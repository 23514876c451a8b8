"""Spark on top of the core: write DataFrames into Delta tables, read them back, checkpoint at scale.

``write`` (executors write Parquet, the driver commits once through the core), ``read`` (the snapshot's
files read by executors, deletion vectors and column mapping applied), ``read_changes`` (the rows a range of
versions changed, as Delta Spark's ``table_changes``: planned on the driver from the range's commits, read by
executors), the row-level ``delete``, ``update`` and ``merge`` (deletion vectors or copy-on-write, one
commit each), ``optimize`` (OPTIMIZE and Z-order on executors, the plan ``DeltaTable.optimize`` makes) and
``checkpoint_with_spark``.
This package imports pyspark (the ``spark`` extra); the core (``airflow_provider_delta.log``), the hook, the
sensor, the triggers and the operators other than ``DeltaSparkWriteOperator`` never import it.
"""

# ruff: noqa: E402 (the check must run before the modules that import pyspark)
from airflow_provider_delta.extras import require

require("pyspark")  # without the extra: an ImportError that names it, not "No module named pyspark"

from airflow_provider_delta.log.base.errors import (
    DeletionVectorError,
    InvalidConditionError,
    MergeCardinalityError,
)

from .changes import read_changes
from .checkpoint import checkpoint_with_spark
from .constraints import ConstraintViolationError
from .delete import delete
from .merge import MergeBuilder, merge
from .optimize import optimize
from .read import read
from .row_changes import RowChangeResult
from .schema import SchemaMismatchError
from .session import spark_session
from .update import update
from .write import write

__all__ = [
    "ConstraintViolationError",
    "DeletionVectorError",
    "InvalidConditionError",
    "MergeBuilder",
    "MergeCardinalityError",
    "RowChangeResult",
    "SchemaMismatchError",
    "checkpoint_with_spark",
    "read_changes",
    "delete",
    "merge",
    "optimize",
    "read",
    "spark_session",
    "update",
    "write",
]
