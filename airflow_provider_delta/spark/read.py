"""Read a Delta table into a Spark DataFrame: exactly the snapshot's files, read by executors.

The driver computes the snapshot with the core (never listing the data directory) and hands the file list
to Spark; each executor task reads its files with pyarrow over fsspec ("Requirements for Readers"), so any
storage fsspec reaches works without Hadoop connectors (S3 included). Per file it resolves column mapping
(physical names, or Parquet field ids in ``id`` mode), fills columns the file predates with nulls, adds the
partition columns typed from the log (never from folder names), and drops the rows its deletion vector
marks ("Deletion Vectors"). Asked for, a ``_metadata`` struct column carries what Delta Spark's does:
``file_path``, ``row_index`` and, on tables that enable row tracking, ``row_id`` and
``row_commit_version`` (a materialized value where the file has one, else ``baseRowId`` + row index and
the file's ``defaultRowCommitVersion``: "Reader Requirements for Row Tracking").
"""

from __future__ import annotations

import dataclasses
import posixpath
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from airflow_provider_delta.log import DeltaTable
from airflow_provider_delta.log.deletion_vectors import deleted_rows
from airflow_provider_delta.log.errors import UnsupportedFeatureError
from airflow_provider_delta.log.partition_values import parse_partition_value
from airflow_provider_delta.log.row_tracking import MATERIALIZED_ROW_COMMIT_VERSION as ROW_VERSION_COLUMN
from airflow_provider_delta.log.row_tracking import MATERIALIZED_ROW_ID as ROW_ID_COLUMN
from airflow_provider_delta.log.row_tracking import is_enabled
from airflow_provider_delta.log.schema import column_mapping_mode, delta_type_to_arrow, physical_name

from .schema import find_field, resolve_column, spark_schema_of

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

_TASK_COLUMNS = ["path", "partitionValues", "deletionVector", "baseRowId", "defaultRowCommitVersion"]
METADATA_FIELDS = ("file_path", "row_index", "row_id", "row_commit_version")


@dataclass(frozen=True)
class ScanSpec:
    """What an executor needs to read files of one snapshot (pickled into each task)."""

    table_uri: str
    schema: dict  # the Delta schema (logical)
    mode: str  # column mapping mode
    partition_columns: tuple[str, ...]
    output: pa.Schema  # the Arrow schema Spark expects back
    metadata: tuple[str, ...] = ()  # _metadata fields asked for
    row_id_column: str | None = None  # materialized row ids / commit versions, by their hidden names
    row_version_column: str | None = None
    storage_options: dict[str, Any] = dataclasses.field(
        default_factory=dict, repr=False
    )  # credentials: never in a repr or a log


def read(
    spark: SparkSession,
    table_uri: str,
    version: int | None = None,
    timestamp: int | float | str | datetime | None = None,
    storage_options: dict[str, Any] | None = None,
    metadata: Sequence[str] = (),
) -> DataFrame:
    """The table at ``version`` / ``timestamp`` (latest by default) as a DataFrame with logical names;
    ``metadata`` adds a ``_metadata`` struct of those fields (``METADATA_FIELDS``)."""
    from pyspark.sql.pandas.types import to_arrow_schema

    snap = DeltaTable(table_uri, storage_options).snapshot(version=version, timestamp=timestamp)
    schema = snap.metadata.schema
    spark_schema = _with_metadata(spark_schema_of(schema), snap, tuple(metadata))
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
        metadata=tuple(metadata),
        row_id_column=snap.metadata.configuration.get(ROW_ID_COLUMN),
        row_version_column=snap.metadata.configuration.get(ROW_VERSION_COLUMN),
    )
    tasks = spark.createDataFrame(files.select(_TASK_COLUMNS))

    def scan(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        return scan_files(batches, spec)

    return tasks.mapInArrow(scan, spark_schema)


def _with_metadata(spark_schema: Any, snap: Any, metadata: tuple[str, ...]) -> Any:
    from pyspark.sql.types import LongType, StringType, StructField, StructType

    if not metadata:
        return spark_schema
    unknown = [m for m in metadata if m not in METADATA_FIELDS]
    if unknown:
        raise ValueError(f"unknown _metadata field(s) {unknown}; known: {list(METADATA_FIELDS)}")
    if {"row_id", "row_commit_version"} & set(metadata) and not is_enabled(snap.protocol, snap.metadata):
        # As Delta Spark: row ids exist for readers only once delta.enableRowTracking is true.
        raise UnsupportedFeatureError(
            f"table {snap.store.uri} does not enable row tracking (delta.enableRowTracking): its rows have "
            "no row_id or row_commit_version to read", features=("rowTracking",),
        )  # fmt: skip
    fields = [StructField(m, StringType() if m == "file_path" else LongType(), m != "row_index")
              for m in metadata]  # fmt: skip
    return StructType([*spark_schema.fields, StructField("_metadata", StructType(fields), False)])


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
            names = [file_fields[i].name for i in columns.values()]
            materialized = (spec.row_id_column, spec.row_version_column) if spec.metadata else ()
            hidden = [c for c in materialized if c in pf.schema_arrow.names]
            data = pf.read_row_group(rg, columns=names + [c for c in hidden if c not in names])
            n = data.num_rows
            batch = _to_table_batch(data, columns, file_fields, partition_values, spec)
            if spec.metadata:
                batch = _add_metadata(batch, data, first_row, task, spec)
            if deleted is not None:
                batch = _drop_deleted(batch, deleted, first_row)
            first_row += n
            if batch.num_rows:
                yield batch


def _add_metadata(batch: pa.RecordBatch, data: pa.Table, first_row: int, task: dict, spec: ScanSpec
                  ) -> pa.RecordBatch:  # fmt: skip
    """The ``_metadata`` struct of a row group's rows, from their physical row indexes in the file."""
    n = batch.num_rows
    index = pa.array(np.arange(first_row, first_row + n, dtype=np.int64))
    children = []
    for name in spec.metadata:
        if name == "file_path":
            children.append(pa.repeat(pa.scalar(task["path"], pa.string()), n))
        elif name == "row_index":
            children.append(index)
        else:
            base = task["baseRowId"] if name == "row_id" else task["defaultRowCommitVersion"]
            fresh = pa.nulls(n, pa.int64()) if base is None else (
                pc.add(index, base) if name == "row_id" else pa.repeat(pa.scalar(base, pa.int64()), n))
            hidden = spec.row_id_column if name == "row_id" else spec.row_version_column
            if hidden and hidden in data.column_names:  # a materialized value wins where it is not null
                fresh = pc.coalesce(data.column(hidden).combine_chunks().cast(pa.int64()), fresh)
            children.append(fresh)
    field = spec.output.field("_metadata")
    column = pa.StructArray.from_arrays(children, fields=list(field.type))
    return pa.RecordBatch.from_arrays([*batch.columns, column], schema=spec.output)


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
    names = [n for n in spec.output.names if n != "_metadata" or not spec.metadata]
    output = pa.schema([spec.output.field(n) for n in names])
    return pa.RecordBatch.from_arrays(arrays, names=names).cast(output)


def _drop_deleted(batch: pa.RecordBatch, deleted: np.ndarray, first_row: int) -> pa.RecordBatch:
    """Drop rows whose file row index (``first_row`` + position) is in the deletion vector."""
    n = batch.num_rows
    local = deleted[(deleted >= first_row) & (deleted < first_row + n)].astype(np.int64) - first_row
    if not len(local):
        return batch
    keep = np.ones(n, dtype=bool)
    keep[local] = False
    return batch.filter(pa.array(keep))
