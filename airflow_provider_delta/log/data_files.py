"""Data files: the ``add`` action of a Parquet file a writer has put under the table root.

Spec: "Data Files" and "Add File and Remove File". A writer that produced a file (Spark's own Parquet
writer, pyarrow in a task, an upstream job) commits it with an ``add`` that carries its size, its
modification time and per-file statistics; the statistics come from the Parquet footer (``stats``), so no
data page is read.
"""

from __future__ import annotations

import posixpath

import pyarrow.parquet as pq

from .actions import AddFile
from .errors import InvalidCommitError
from .snapshot import Snapshot
from .stats import file_stats
from .table_context import TableContext


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
