"""Data files as they are written, and the ``add`` each one becomes.

Spec: "Add File and Remove File", "Per-file Statistics" (taken from the Parquet footer, so no data page is
read). Where a file goes, what it is called and how it is encoded is the table's file layout
(``schema.file_layout``), which the Spark writer's executors use too, so the writers lay tables out alike.
The Arrow writer and OPTIMIZE write through :class:`DataFileWriter`; a file
another writer produced (Spark's Parquet writer, pyarrow in a task, an upstream job) becomes an ``add``
through :func:`add_file_from_parquet`.
"""

from __future__ import annotations

import contextlib
import posixpath
import time
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from ..actions.actions import AddFile
from ..base.errors import IcebergCompatError, InvalidCommitError
from ..schema.file_layout import FileLayout
from ..schema.stats import file_stats
from ..snapshot.snapshot import Snapshot
from ..snapshot.table_context import TableContext

ROW_GROUP_ROWS = 128 * 1024  # rows buffered into one row group
ROW_GROUP_BYTES = 64 * 1024 * 1024  # or this many bytes of Arrow data, whichever comes first


class DataFileWriter:
    """One data file being written: Parquet rows buffered into row groups, then its ``add``.

    :param layout: the table's file layout: the file's physical Arrow schema (physical names, field ids
        under column mapping), its codec and data page version, and the statistics the table keeps.
        Rows are given in its ``physical`` shape; the layout appends the partition values where files
        must hold them (IcebergCompat), so every writer of data files follows that rule here.
    """

    def __init__(
        self,
        fs: Any,
        root: str,
        rel_path: str,
        partition_values: dict[str, str | None],
        layout: FileLayout,
        row_group_bytes: int = ROW_GROUP_BYTES,
    ) -> None:
        self.rel_path, self.partition_values, self.layout = rel_path, partition_values, layout
        self.row_group_bytes = row_group_bytes
        full = posixpath.join(root, rel_path)
        protocols = fs.protocol if isinstance(fs.protocol, tuple | list) else (fs.protocol,)
        if "file" in protocols or "local" in protocols:  # object stores have no folders to create
            fs.makedirs(posixpath.dirname(full), exist_ok=True)
        self.handle = fs.open(full, "wb")
        self.writer = layout.parquet_writer(self.handle)
        self.pending: list[pa.Table] = []
        self.pending_rows = 0
        self.pending_bytes = 0
        self.rows = 0

    @property
    def written_bytes(self) -> int:
        return self.handle.tell()

    def write(self, table: pa.Table) -> None:
        table = self.layout.with_partition_values(table, self.partition_values)
        self.pending.append(table)
        self.pending_rows += table.num_rows
        self.pending_bytes += table.nbytes
        self.rows += table.num_rows
        if self.pending_rows >= ROW_GROUP_ROWS or self.pending_bytes >= self.row_group_bytes:
            self.flush()

    def flush(self) -> None:
        if self.pending:
            self.writer.write_table(pa.concat_tables(self.pending), row_group_size=ROW_GROUP_ROWS)
        self.pending, self.pending_rows, self.pending_bytes = [], 0, 0

    def close(self) -> AddFile:
        self.flush()
        self.writer.close()
        footer = self.writer.writer.metadata
        size = self.handle.tell()
        self.handle.close()
        return AddFile(
            path=self.rel_path,
            size=size,
            partition_values=dict(self.partition_values),
            modification_time=int(time.time() * 1000),
            data_change=True,
            stats=self.layout.stats(footer),
            tags=self.layout.file_tags,
        )

    def abort(self) -> None:
        for closer in (self.writer.close, self.handle.close):
            with contextlib.suppress(Exception):  # failing already; the caller deletes the file
                closer()


def check_relative(path: str, where: str) -> None:
    """A data file's path must be relative to the root and outside ``_delta_log`` ("Data Files")."""
    norm = posixpath.normpath(path)
    if path.startswith("/") or "://" in path or norm.startswith("..") or norm.startswith("_delta_log"):
        raise InvalidCommitError(
            f"{path!r} must be a path relative to the table root {where}, outside _delta_log"
        )


def add_file_from_parquet(
    table: TableContext | Snapshot,
    path: str,
    partition_values: dict[str, str | None] | None = None,
    *,
    data_change: bool = True,
    tags: dict[str, str] | None = None,
) -> AddFile:
    """The ``add`` action of a Parquet file already written under the table root, stats from its footer.

    Pass a snapshot instead of the table when building many actions, so the log is read once.
    """
    store = table.store
    check_relative(path, store.uri)
    full = store.table_file(path)
    info = store.info(full)
    snap = table if isinstance(table, Snapshot) else table.snapshot()
    with store.open_input_file(full) as fh:
        footer = pq.read_metadata(fh)
    _check_materialized(snap, path, footer)
    return AddFile(
        path=path,
        size=info.size,
        partition_values=dict(partition_values or {}),
        modification_time=info.modification_time,
        data_change=data_change,
        stats=file_stats(footer, snap.table_configuration.stats_schema),
        tags=tags,
    )


def _check_materialized(snap: Snapshot, path: str, footer: pq.FileMetaData) -> None:
    """A file added to a table whose files must hold their partition values (IcebergCompat,
    materializePartitionColumns) must hold them as its last columns, by physical name; one written
    elsewhere without them is refused by name before it is committed."""
    config = snap.table_configuration
    layout = config.file_layout()
    if not layout.materialized_partitions:
        return
    wanted = layout.physical_partition_names
    names = footer.schema.to_arrow_schema().names
    if names[-len(wanted) :] == wanted:
        return
    message = (f"table {snap.store.uri}: {path} does not end with the partition columns {wanted} (their "
               "physical names), which every data file of this table must hold after its other columns; "
               "write the file with them, or write the rows through DeltaTable.write")  # fmt: skip
    version = config.iceberg_compat_version
    if version is not None:
        raise IcebergCompatError(message, version=version, rule="partitionValues")
    raise InvalidCommitError(message)
