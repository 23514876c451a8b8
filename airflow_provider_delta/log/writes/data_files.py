"""Data files: where a writer puts them, what they are called, and the ``add`` each one becomes.

Spec: "Data Files" (Hive-style ``col=value`` folders named as Spark escapes them, unique names, paths
relative to the root), "Add File and Remove File", "Partition Value Serialization", "Per-file Statistics"
(taken from the Parquet footer, so no data page is read), "Writer Requirements for Column Mapping"
(physical names and Parquet field ids). The Arrow writer writes through :class:`DataFileWriter`; the Spark
layer names its files and folders with the same functions, so the two writers lay tables out alike; a file
another writer produced (Spark's Parquet writer, pyarrow in a task, an upstream job) becomes an ``add``
through :func:`add_file_from_parquet`.
"""

from __future__ import annotations

import contextlib
import posixpath
import time
import uuid
from collections.abc import Sequence
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from ..actions.actions import AddFile
from ..base.errors import InvalidCommitError
from ..schema.stats import file_stats
from ..snapshot.snapshot import Snapshot
from ..snapshot.table_context import TableContext

HIVE_NULL = "__HIVE_DEFAULT_PARTITION__"
ROW_GROUP_ROWS = 128 * 1024  # rows buffered into one row group
ROW_GROUP_BYTES = 64 * 1024 * 1024  # or this many bytes of Arrow data, whichever comes first
# Characters Spark escapes in partition folder names (ExternalCatalogUtils.escapePathName).
_ESCAPED = frozenset("\"#%'*/:=?\\\x7f{[]^") | frozenset(chr(c) for c in range(1, 32))


def escape_path_name(text: str) -> str:
    return "".join(f"%{ord(c):02X}" if c in _ESCAPED else c for c in text)


def partition_dir(values: dict[str, str | None], physical_names: Sequence[str]) -> str:
    """``phys1=v1/phys2=v2``, escaped as Spark does; null and empty values as ``HIVE_NULL``."""
    return "/".join(
        f"{escape_path_name(physical)}={escape_path_name(values[physical] or HIVE_NULL)}"
        for physical in physical_names
    )


def dictionary_columns(schema: pa.Schema) -> list[str]:
    """Columns worth dictionary encoding: strings and binaries. Numbers and timestamps rarely repeat enough,
    and trying costs the writer twice the time before it falls back to plain encoding."""
    kinds = (pa.types.is_string, pa.types.is_large_string, pa.types.is_binary, pa.types.is_large_binary)
    return [f.name for f in schema if any(kind(f.type) for kind in kinds)]


def data_file_name(task: int) -> str:
    """``part-<task>-<uuid>.c000.snappy.parquet``, as Spark names the files of a write."""
    return f"part-{task:05d}-{uuid.uuid4()}.c000.snappy.parquet"


class DataFileWriter:
    """One data file being written: Parquet rows buffered into row groups, then its ``add``.

    :param schema: the file's physical Arrow schema (physical names, field ids under column mapping).
    :param table: the table's Delta schema, configuration and partition columns, for the statistics.
    """

    def __init__(
        self,
        fs: Any,
        root: str,
        rel_path: str,
        partition_values: dict[str, str | None],
        schema: pa.Schema,
        table: tuple[dict, dict[str, str], tuple[str, ...]],
        row_group_bytes: int = ROW_GROUP_BYTES,
    ) -> None:
        self.rel_path, self.partition_values, self.table = rel_path, partition_values, table
        self.row_group_bytes = row_group_bytes
        full = posixpath.join(root, rel_path)
        protocols = fs.protocol if isinstance(fs.protocol, tuple | list) else (fs.protocol,)
        if "file" in protocols or "local" in protocols:  # object stores have no folders to create
            fs.makedirs(posixpath.dirname(full), exist_ok=True)
        self.handle = fs.open(full, "wb")
        self.writer = pq.ParquetWriter(self.handle, schema, compression="snappy",
                                       use_dictionary=dictionary_columns(schema))  # fmt: skip
        self.pending: list[pa.Table] = []
        self.pending_rows = 0
        self.pending_bytes = 0
        self.rows = 0

    @property
    def written_bytes(self) -> int:
        return self.handle.tell()

    def write(self, table: pa.Table) -> None:
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
        schema, configuration, partition_columns = self.table
        return AddFile(
            path=self.rel_path,
            size=size,
            partition_values=dict(self.partition_values),
            modification_time=int(time.time() * 1000),
            data_change=True,
            stats=file_stats(footer, schema, configuration, partition_columns),
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
    md = snap.metadata
    return AddFile(
        path=path,
        size=info.size,
        partition_values=dict(partition_values or {}),
        modification_time=info.modification_time,
        data_change=data_change,
        stats=file_stats(footer, md.schema, md.configuration, md.partition_columns),
        tags=tags,
    )
