"""One file of a change read, read as change rows: the per-file half of ``changes``, shared by every reader.

A change read ("Change Data Files"; Delta Spark's ``table_changes``) is planned on the log (``changes``)
into tasks, each one file of one version: a ``_change_data`` file (its rows carry their own
``_change_type``), or the rows of an ``add`` (inserts) or a ``remove`` (deletes), or of a file whose
deletion vector changed, only the rows the new vector added (deletes) or dropped (inserts). Each task is
read by the one per-file reader (``scan_file``: column mapping, type widening, partition values, deletion
vectors), then given ``_change_type``, ``_commit_version`` and ``_commit_timestamp``. The Arrow outputs of
``changes`` run it in threads, the Spark reader on executors; both hand it a picklable spec.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import Any

import pyarrow as pa

from ..base.errors import DataFileNotFoundError
from ..scans.scan_file import FileTask, ReadSpec, read_data_file

CHANGE_TYPE = "_change_type"
COMMIT_VERSION = "_commit_version"
COMMIT_TIMESTAMP = "_commit_timestamp"
CHANGE_COLUMNS = pa.schema([(CHANGE_TYPE, pa.string()), (COMMIT_VERSION, pa.int64()),
                            (COMMIT_TIMESTAMP, pa.timestamp("us", tz="UTC"))])  # fmt: skip
CDC = "cdc"  # the kind of a task that reads a change data file; the others are their change type
_CHANGE_TYPE_FIELD = {"name": CHANGE_TYPE, "type": "string", "nullable": True, "metadata": {}}


@dataclass(frozen=True)
class ChangeTask:
    """One file of one version to read as change rows.

    ``kind`` is ``cdc`` (a change data file) or the change type every row read gets (``insert`` for an
    ``add``, ``delete`` for a ``remove``). ``deletion_vector`` marks rows not read; ``selected_rows`` (a
    deletion vector too) restricts the read to the rows it marks.
    """

    kind: str
    path: str
    partition_values: dict[str, str | None]
    version: int
    timestamp: int  # ms since the epoch
    deletion_vector: dict[str, Any] | None = None
    selected_rows: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "path": self.path, "partitionValues": list(self.partition_values.items()),
                "version": self.version, "timestamp": self.timestamp, "deletionVector": self.deletion_vector,
                "selectedRows": self.selected_rows}  # fmt: skip

    @classmethod
    def from_dict(cls, row: dict[str, Any]) -> ChangeTask:
        return cls(row["kind"], row["path"], dict(row["partitionValues"] or []), row["version"],
                   row["timestamp"], row["deletionVector"], row["selectedRows"])  # fmt: skip


def change_data_spec(spec: ReadSpec) -> ReadSpec:
    """The spec of a table's rows extended to read ``_change_type`` from a change data file (where it is
    a plain column, never mapped: "Change Data Files")."""
    schema = {**spec.schema, "fields": [*spec.schema["fields"], _CHANGE_TYPE_FIELD]}
    columns = (*spec.columns, CHANGE_TYPE)
    return replace(spec, schema=schema, columns=columns, read_columns=(*spec.read_columns, CHANGE_TYPE))


def change_schema(spec: ReadSpec) -> pa.Schema:
    """The rows of a change read: the table's columns, then ``_change_type``, ``_commit_version`` and
    ``_commit_timestamp`` (Delta Spark's ``table_changes`` order)."""
    return pa.schema([*spec.output_schema(), *CHANGE_COLUMNS])


def read_change_task(
    task: ChangeTask, spec: ReadSpec, cdc_spec: ReadSpec, fs: Any, root: str
) -> Iterator[pa.RecordBatch]:
    """The change rows of one task, in ``change_schema(spec)``; a file VACUUM deleted is named."""
    file_task = FileTask(task.path, task.partition_values, task.deletion_vector,
                         selected_rows=task.selected_rows)  # fmt: skip
    schema = change_schema(spec)
    version = pa.scalar(task.version, pa.int64())
    timestamp = pa.scalar(task.timestamp * 1000, pa.timestamp("us", tz="UTC"))
    try:
        for batch in read_data_file(file_task, cdc_spec if task.kind == CDC else spec, fs, root):
            n = batch.num_rows
            columns = batch.columns
            if task.kind == CDC:
                columns, kinds = columns[:-1], columns[-1]
            else:
                kinds = pa.repeat(pa.scalar(task.kind, pa.string()), n)
            arrays = [*columns, kinds, pa.repeat(version, n), pa.repeat(timestamp, n)]
            yield pa.RecordBatch.from_arrays(arrays, schema=schema)
    except FileNotFoundError as exc:  # the data or change data file, or its deletion vector
        gone = exc.path if isinstance(exc, DataFileNotFoundError) else task.path
        what = "change data file" if task.kind == CDC else "data file"
        what = what if gone == task.path else "deletion vector file"
        raise DataFileNotFoundError(
            f"the {what} {gone} of version {task.version} is gone from {root} (VACUUM deleted it), so "
            f"the changes of version {task.version} can no longer be read",
            path=gone,
            version=task.version,
        ) from None
