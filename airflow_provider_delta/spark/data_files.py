"""Executor side of the writer: Arrow batches in, Parquet data files out, one ``add`` row per file.

Spec: "Data Files" (Hive-style ``col=value`` folders, unique names), "Partition Value Serialization",
"Per-file Statistics" (taken from the footer the writer just produced), "Writer Requirements for Column
Mapping" (physical names and Parquet field ids). Files go straight to the table's storage over fsspec; a
task that fails leaves only unreferenced files, which VACUUM removes later.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from airflow_provider_delta.log.actions.actions import AddFile
from airflow_provider_delta.log.schema.file_layout import HIVE_NULL, FileLayout
from airflow_provider_delta.log.schema.partition_values import serialize_partition_value
from airflow_provider_delta.log.writes.data_files import DataFileWriter

from .schema import to_physical

__all__ = ["ADD_ROW", "HIVE_NULL", "WriteSpec", "write_files"]

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
class WriteSpec:
    """What an executor needs to write files for one commit (pickled into each task): where, and the
    table's file layout as the core's write planner decided it."""

    table_uri: str
    layout: FileLayout
    storage_options: dict[str, Any] = field(default_factory=dict, repr=False)  # credentials: never logged


def _groups(table: pa.Table, layout: FileLayout) -> Iterator[tuple[dict[str, str | None], pa.Table]]:
    """Split a batch by partition values: (serialised values by physical name, rows)."""
    if not layout.partitions:
        yield {}, table
        return
    names = [logical for logical, _, _ in layout.partitions]
    indexed = table.select(names).append_column("__row", pa.array(range(table.num_rows), pa.int64()))
    groups = indexed.group_by(names, use_threads=False).aggregate([("__row", "list")])
    rows = groups.column("__row_list")
    keys = groups.select(names).to_pylist()
    for i, key in enumerate(keys):
        values = {
            physical: serialize_partition_value(key[logical], delta_type)
            for logical, physical, delta_type in layout.partitions
        }
        yield values, table.take(rows[i].values)


def _physical(table: pa.Table, layout: FileLayout) -> pa.Table:
    names = [*layout.data_columns, *layout.hidden_columns]
    arrays = [to_physical(table.column(name), layout.physical.field(i).type) for i, name in enumerate(names)]
    return pa.Table.from_arrays(arrays, schema=layout.physical)


def _add_row(add: AddFile) -> dict[str, Any]:
    return {
        "path": add.path,
        "size": add.size,
        "partitionValues": list(add.partition_values.items()),
        "modificationTime": add.modification_time,
        "stats": add.stats,
    }


def write_files(batches: Iterator[pa.RecordBatch], spec: WriteSpec) -> Iterator[pa.RecordBatch]:
    """Write the rows of one Spark task with the core's ``DataFileWriter``: one file per partition value
    seen, named ``part-<task>-<uuid>`` as the layout names files."""
    import fsspec
    from pyspark import TaskContext

    context = TaskContext.get()
    task = context.partitionId() if context is not None else 0
    fs, root = fsspec.core.url_to_fs(spec.table_uri, **spec.storage_options)
    layout = spec.layout
    open_files: dict[tuple, DataFileWriter] = {}
    try:
        for batch in batches:
            for values, rows in _groups(pa.Table.from_batches([batch]), layout):
                key = tuple(values.items())
                if key not in open_files:
                    folder = layout.partition_dir(values)
                    name = layout.file_name(task)
                    rel = f"{folder}/{name}" if folder else name
                    open_files[key] = DataFileWriter(fs, root, rel, values, layout)
                open_files[key].write(_physical(rows, layout))
        added = [_add_row(f.close()) for f in open_files.values()]
    except BaseException:
        for f in open_files.values():
            f.abort()  # the task is failing already; its half-written file becomes an orphan for VACUUM
        raise
    if added:
        yield pa.RecordBatch.from_pylist(added, schema=ADD_ROW)
