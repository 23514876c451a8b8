"""Change reads on Spark: the rows a range of versions changed, read by executors (``table_changes``).

The driver plans the read with the core (``DeltaTable.changes``: the range's commits only, never a replay
of the table) into one task per file of each version; executors read their tasks with the core's per-file
change reader (``log.change_rows``, the same one the Arrow outputs use): change data files with their
``_change_type``, rows of adds and removes as inserts and deletes, and of a file whose deletion vector
changed only the rows it added or dropped. Same semantics and errors as the core's; for ranges too big for
one process.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from airflow_provider_delta.log import DeltaTable
from airflow_provider_delta.log.actions.actions import DELETION_VECTOR
from airflow_provider_delta.log.changes.change_range import Bound, Timestamp
from airflow_provider_delta.log.changes.change_rows import (
    COMMIT_TIMESTAMP,
    COMMIT_VERSION,
    ChangeTask,
    change_data_spec,
    read_change_task,
)
from airflow_provider_delta.log.scans.scan_file import ReadSpec

from .schema import spark_schema_of

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

_DV = DELETION_VECTOR
TASKS = pa.schema([("kind", pa.string()), ("path", pa.string()), ("partitionValues", pa.map_(pa.string(),
                   pa.string())), ("version", pa.int64()), ("timestamp", pa.int64()), ("deletionVector", _DV),
                   ("selectedRows", _DV)])  # fmt: skip


def read_changes(
    spark: SparkSession,
    table_uri: str,
    start: Bound | None = None,
    end: Bound | None = None,
    storage_options: dict[str, Any] | None = None,
    columns: Sequence[str] | None = None,
    *,
    starting_timestamp: Timestamp | None = None,
    ending_timestamp: Timestamp | None = None,
) -> DataFrame:
    """The changes of versions ``start``..``end`` (``end``: the latest) as a DataFrame: the table's columns
    (the end version's schema, logical names), ``_change_type``, ``_commit_version``, ``_commit_timestamp``.
    Bounds are versions or timestamps (``starting_timestamp=`` / ``ending_timestamp=`` for ms since the
    epoch), as ``DeltaTable.changes`` takes them; a range crossing a rename or a drop is refused by name."""
    from pyspark.sql.pandas.types import to_arrow_schema
    from pyspark.sql.types import LongType, StringType, StructField, StructType, TimestampType

    changes = DeltaTable(table_uri, storage_options).changes(
        start, end, starting_timestamp=starting_timestamp, ending_timestamp=ending_timestamp, columns=columns
    )
    spec = changes.spec
    table_fields = {f.name: f for f in spark_schema_of(changes.metadata.schema).fields}
    spark_schema = StructType([table_fields[c] for c in spec.columns] + [
        StructField("_change_type", StringType()), StructField(COMMIT_VERSION, LongType()),
        StructField(COMMIT_TIMESTAMP, TimestampType())])  # fmt: skip
    tasks = changes.tasks  # planned (and refused by name) on the driver
    if not tasks:
        return spark.createDataFrame([], spark_schema)
    rows = pa.Table.from_pylist([t.to_dict() for t in tasks], schema=TASKS)
    output = to_arrow_schema(spark_schema, timezone="UTC")
    uri = changes.store.uri

    def scan(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        return read_tasks(batches, uri, spec, output)

    return spark.createDataFrame(rows).mapInArrow(scan, spark_schema)


def read_tasks(
    batches: Iterator[pa.RecordBatch], table_uri: str, spec: ReadSpec, output: pa.Schema
) -> Iterator[pa.RecordBatch]:
    """Executor side: the change rows of the tasks listed in ``batches``."""
    import fsspec

    fs, root = fsspec.core.url_to_fs(table_uri, **spec.storage_options)
    cdc_spec = change_data_spec(spec)
    for batch in batches:
        for row in batch.to_pylist():
            task = ChangeTask.from_dict({**row, "deletionVector": _dv(row["deletionVector"]),
                                         "selectedRows": _dv(row["selectedRows"])})  # fmt: skip
            for rows in read_change_task(task, spec, cdc_spec, fs, root):
                yield pa.RecordBatch.from_arrays(rows.columns, names=output.names).cast(output)


def _dv(value: dict | None) -> dict | None:
    return None if value is None else {k: v for k, v in value.items() if v is not None}
