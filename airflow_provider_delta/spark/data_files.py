"""Executor side of the writer: Arrow batches in, Parquet data files out, one ``add`` row per file.

Spec: "Data Files" (Hive-style ``col=value`` folders, unique names), "Partition Value Serialization",
"Per-file Statistics" (taken from the footer the writer just produced), "Writer Requirements for Column
Mapping" (physical names and Parquet field ids). Files go straight to the table's storage over fsspec; a
task that fails leaves only unreferenced files, which VACUUM removes later.
"""

from __future__ import annotations

import contextlib
import posixpath
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.parquet as pq

from airflow_provider_delta.log.actions.actions import Metadata, Protocol
from airflow_provider_delta.log.schema.partition_values import serialize_partition_value
from airflow_provider_delta.log.schema.stats import file_stats
from airflow_provider_delta.log.writes.data_files import HIVE_NULL, ROW_GROUP_ROWS, escape_path_name
from airflow_provider_delta.log.writes.data_files import partition_dir as _partition_dir

from .schema import to_physical

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

__all__ = ["ADD_ROW", "HIVE_NULL", "ROW_GROUP_ROWS", "WritePlan", "WriteSpec", "escape_path_name",
           "partition_dir", "write_files"]  # fmt: skip

ADD_ROW = pa.schema(
    [
        ("path", pa.string()),
        ("size", pa.int64()),
        ("partitionValues", pa.map_(pa.string(), pa.string())),
        ("modificationTime", pa.int64()),
        ("stats", pa.string()),
    ]
)



@dataclass(frozen=True)
class WritePlan:
    """The DataFrame as it will be written (table columns, logical names) and the table it goes into."""

    df: DataFrame
    schema: dict
    configuration: dict[str, str]
    partition_columns: tuple[str, ...]
    protocol: Protocol | None = None  # set when this write creates the table
    metadata: Metadata | None = None  # set when creating the table or merging the schema
    # Columns of ``df`` written after the table's, as long integers without statistics: row tracking's
    # materialized row ids and commit versions, which OPTIMIZE keeps ("Row Tracking").
    hidden_columns: tuple[str, ...] = ()


@dataclass(frozen=True)
class WriteSpec:
    """What an executor needs to write files for one commit (pickled into each task)."""

    table_uri: str
    data_columns: tuple[str, ...]  # logical names of the non-partition columns, in file order
    physical: pa.Schema  # their Arrow schema in the file: physical names, field ids
    partitions: tuple[tuple[str, str, str], ...]  # (logical name, physical name, Delta type)
    schema: dict  # the table's Delta schema and configuration, for the statistics
    configuration: dict[str, str] = field(default_factory=dict)
    partition_columns: tuple[str, ...] = ()
    storage_options: dict[str, Any] = field(
        default_factory=dict, repr=False
    )  # credentials: never in a repr or a log


def partition_dir(values: dict[str, str | None], spec: WriteSpec) -> str:
    """``phys1=v1/phys2=v2``, escaped as Spark does (``log.data_files``, the Arrow writer's layout too)."""
    return _partition_dir(values, [physical for _, physical, _ in spec.partitions])


class _OpenFile:
    """A data file being written: its handle, Parquet writer, and rows waiting to become a row group."""

    def __init__(self, fs: Any, root: str, rel_path: str, values: dict, spec: WriteSpec) -> None:
        self.rel_path, self.values, self.spec = rel_path, values, spec
        full = posixpath.join(root, rel_path)
        protocols = fs.protocol if isinstance(fs.protocol, tuple) else (fs.protocol,)
        if "file" in protocols:  # object stores have no folders to create
            fs.makedirs(posixpath.dirname(full), exist_ok=True)
        self.handle = fs.open(full, "wb")
        self.writer = pq.ParquetWriter(self.handle, spec.physical, compression="snappy")
        self.pending: list[pa.Table] = []
        self.rows = 0

    def write(self, table: pa.Table) -> None:
        self.pending.append(table)
        self.rows += table.num_rows
        if self.rows >= ROW_GROUP_ROWS:
            self.flush()

    def flush(self) -> None:
        if self.pending:
            self.writer.write_table(pa.concat_tables(self.pending), row_group_size=ROW_GROUP_ROWS)
        self.pending, self.rows = [], 0

    def close(self) -> dict[str, Any]:
        self.flush()
        self.writer.close()
        footer = self.writer.writer.metadata
        size = self.handle.tell()
        self.handle.close()
        stats = file_stats(footer, self.spec.schema, self.spec.configuration, self.spec.partition_columns)
        return {
            "path": self.rel_path,
            "size": size,
            "partitionValues": list(self.values.items()),
            "modificationTime": int(time.time() * 1000),
            "stats": stats,
        }

    def abort(self) -> None:
        for closer in (self.writer.close, self.handle.close):
            # The task is failing already; its half-written file becomes an orphan for VACUUM.
            with contextlib.suppress(Exception):
                closer()


def _groups(table: pa.Table, spec: WriteSpec) -> Iterator[tuple[dict[str, str | None], pa.Table]]:
    """Split a batch by partition values: (serialised values by physical name, rows)."""
    if not spec.partitions:
        yield {}, table
        return
    names = [logical for logical, _, _ in spec.partitions]
    indexed = table.select(names).append_column("__row", pa.array(range(table.num_rows), pa.int64()))
    groups = indexed.group_by(names, use_threads=False).aggregate([("__row", "list")])
    rows = groups.column("__row_list")
    keys = groups.select(names).to_pylist()
    for i, key in enumerate(keys):
        values = {
            physical: serialize_partition_value(key[logical], delta_type)
            for logical, physical, delta_type in spec.partitions
        }
        yield values, table.take(rows[i].values)


def _physical(table: pa.Table, spec: WriteSpec) -> pa.Table:
    arrays = [
        to_physical(table.column(name), spec.physical.field(i).type)
        for i, name in enumerate(spec.data_columns)
    ]
    return pa.Table.from_arrays(arrays, schema=spec.physical)


def write_files(batches: Iterator[pa.RecordBatch], spec: WriteSpec) -> Iterator[pa.RecordBatch]:
    """Write the rows of one Spark task: one file per partition value seen, named ``part-<task>-<uuid>``."""
    import fsspec
    from pyspark import TaskContext

    context = TaskContext.get()
    task = context.partitionId() if context is not None else 0
    fs, root = fsspec.core.url_to_fs(spec.table_uri, **spec.storage_options)
    open_files: dict[tuple, _OpenFile] = {}
    try:
        for batch in batches:
            for values, rows in _groups(pa.Table.from_batches([batch]), spec):
                key = tuple(values.items())
                if key not in open_files:
                    folder = partition_dir(values, spec)
                    name = f"part-{task:05d}-{uuid.uuid4()}.c000.snappy.parquet"
                    rel = f"{folder}/{name}" if folder else name
                    open_files[key] = _OpenFile(fs, root, rel, values, spec)
                open_files[key].write(_physical(rows, spec))
        added = [f.close() for f in open_files.values()]
    except BaseException:
        for f in open_files.values():
            f.abort()
        raise
    if added:
        yield pa.RecordBatch.from_pylist(added, schema=ADD_ROW)
