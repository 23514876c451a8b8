"""Read a Delta table into a Spark DataFrame: exactly the snapshot's files, read by executors.

The driver computes the snapshot with the core (never listing the data directory) and hands the file list
to Spark; each executor task reads its files with pyarrow over fsspec ("Requirements for Readers"), so any
storage fsspec reaches works without Hadoop connectors (S3 included). Per file it resolves column mapping
(physical names, or Parquet field ids in ``id`` mode), fills columns the file predates with nulls, adds the
partition columns typed from the log (never from folder names), and drops the rows its deletion vector
marks ("Deletion Vectors").
"""

from __future__ import annotations

import dataclasses
import posixpath
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from airflow_provider_delta.log import DeltaTable
from airflow_provider_delta.log.deletion_vectors import deleted_rows
from airflow_provider_delta.log.partition_values import parse_partition_value
from airflow_provider_delta.log.schema import column_mapping_mode, delta_type_to_arrow, physical_name

from .schema import find_field, resolve_column, spark_schema_of

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

_TASK_COLUMNS = ["path", "partitionValues", "deletionVector"]


@dataclass(frozen=True)
class ScanSpec:
    """What an executor needs to read files of one snapshot (pickled into each task)."""

    table_uri: str
    schema: dict  # the Delta schema (logical)
    mode: str  # column mapping mode
    partition_columns: tuple[str, ...]
    output: pa.Schema  # the Arrow schema Spark expects back
    storage_options: dict[str, Any] = dataclasses.field(
        default_factory=dict, repr=False
    )  # credentials: never in a repr or a log


def read(
    spark: SparkSession,
    table_uri: str,
    version: int | None = None,
    timestamp: int | float | str | datetime | None = None,
    storage_options: dict[str, Any] | None = None,
) -> DataFrame:
    """The table at ``version`` / ``timestamp`` (latest by default) as a DataFrame with logical names."""
    from pyspark.sql.pandas.types import to_arrow_schema

    snap = DeltaTable(table_uri, storage_options).snapshot(version=version, timestamp=timestamp)
    schema = snap.metadata.schema
    spark_schema = spark_schema_of(schema)
    files = snap.files
    if files.num_rows == 0:
        return spark.createDataFrame([], spark_schema)
    spec = ScanSpec(
        table_uri=table_uri,
        storage_options=dict(storage_options or {}),
        schema=schema,
        mode=column_mapping_mode(snap.metadata.configuration),
        partition_columns=tuple(snap.partition_columns),
        output=to_arrow_schema(spark_schema, timezone="UTC"),
    )
    tasks = spark.createDataFrame(files.select(_TASK_COLUMNS))

    def scan(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        return scan_files(batches, spec)

    return tasks.mapInArrow(scan, spark_schema)


def scan_files(batches: Iterator[pa.RecordBatch], spec: ScanSpec) -> Iterator[pa.RecordBatch]:
    """Executor side: read the files listed in ``batches`` (path, partitionValues, deletionVector)."""
    import fsspec

    fs, root = fsspec.core.url_to_fs(spec.table_uri, **spec.storage_options)
    for batch in batches:
        for task in batch.to_pylist():
            yield from _read_file(task, fs, root, spec)


def _open(path: str, fs: Any, root: str, spec: ScanSpec) -> tuple[Any, str]:
    """The filesystem and path of a data file: relative to the root, or an absolute URI in the log."""
    if "://" in path or path.startswith("file:"):
        import fsspec

        return fsspec.core.url_to_fs(path, **spec.storage_options)
    return fs, posixpath.join(root, path)


def _read_file(task: dict, fs: Any, root: str, spec: ScanSpec) -> Iterator[pa.RecordBatch]:
    file_fs, path = _open(task["path"], fs, root, spec)
    deleted = None
    if task["deletionVector"] is not None:
        deleted = deleted_rows(task["deletionVector"], root, fs, data_file=task["path"])
    partition_values = dict(task["partitionValues"] or [])
    with file_fs.open(path, "rb") as fh:
        pf = pq.ParquetFile(fh)
        file_fields = list(pf.schema_arrow)
        columns = _columns_to_read(file_fields, spec)
        first_row = 0
        for rg in range(pf.num_row_groups):
            data = pf.read_row_group(rg, columns=[file_fields[i].name for i in columns.values()])
            n = data.num_rows
            batch = _to_table_batch(data, columns, file_fields, partition_values, spec)
            if deleted is not None:
                batch = _drop_deleted(batch, deleted, first_row)
            first_row += n
            if batch.num_rows:
                yield batch


def _columns_to_read(file_fields: list[pa.Field], spec: ScanSpec) -> dict[str, int]:
    """Logical name -> index of the file field holding it, for the data (non-partition) columns."""
    partitions = {c.lower() for c in spec.partition_columns}
    found = {}
    for field in spec.schema["fields"]:
        if field["name"].lower() in partitions:
            continue
        i = find_field(file_fields, field, spec.mode)
        if i is not None:
            found[field["name"]] = i
    return found


def _to_table_batch(
    data: pa.Table,
    columns: dict[str, int],
    file_fields: list[pa.Field],
    partition_values: dict[str, str | None],
    spec: ScanSpec,
) -> pa.RecordBatch:
    n = data.num_rows
    partitions = {c.lower() for c in spec.partition_columns}
    arrays = []
    for field in spec.schema["fields"]:
        name = field["name"]
        if name.lower() in partitions:
            raw = partition_values.get(physical_name(field, spec.mode))
            value = parse_partition_value(raw, field["type"])
            arrays.append(pa.repeat(pa.scalar(value, delta_type_to_arrow(field["type"])), n))
            continue
        i = columns.get(name)
        column = None if i is None else data.column(file_fields[i].name)
        arrays.append(resolve_column(column, n, field["type"], spec.mode))
    batch = pa.RecordBatch.from_arrays(arrays, names=spec.output.names)
    return batch.cast(spec.output)


def _drop_deleted(batch: pa.RecordBatch, deleted: np.ndarray, first_row: int) -> pa.RecordBatch:
    """Drop rows whose file row index (``first_row`` + position) is in the deletion vector."""
    n = batch.num_rows
    local = deleted[(deleted >= first_row) & (deleted < first_row + n)].astype(np.int64) - first_row
    if not len(local):
        return batch
    keep = np.ones(n, dtype=bool)
    keep[local] = False
    return batch.filter(pa.array(keep))
