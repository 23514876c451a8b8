"""One data file read as its logical rows: the per-file half of a scan, shared by every reader.

Spec: "Requirements for Readers". For one ``add`` this resolves column mapping (physical names, or Parquet
field ids in ``id`` mode), widens types to the table's ("Type Widening"), fills columns the file predates
with nulls, materialises partition columns typed from the log (never from folder names), drops the rows its
deletion vector marks ("Deletion Vectors"), computes the ``_metadata`` columns asked for (file path, row
index, and on row-tracking tables row id and row commit version, "Row Tracking"), then filters rows. The
Arrow scan runs it in threads, the Spark reader on executors; both hand it a picklable :class:`ReadSpec`.
"""

from __future__ import annotations

import posixpath
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import fsspec
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from .actions import Metadata, Protocol
from .deletion_vectors import deleted_rows
from .errors import UnsupportedFeatureError
from .evaluate import predicate_mask
from .expressions import Expr, as_expr
from .partition_values import parse_partition_value
from .physical_columns import find_field, logical_type, resolve_column
from .row_tracking import MATERIALIZED_ROW_COMMIT_VERSION, MATERIALIZED_ROW_ID, is_enabled
from .schema import column_mapping_mode, physical_name
from .sql_parser import parse

METADATA_FIELDS = {
    "file_path": pa.string(), "row_index": pa.int64(), "row_id": pa.int64(), "row_commit_version": pa.int64(),
}  # fmt: skip
METADATA_COLUMN = "_metadata"
ROW_ID_COLUMN = MATERIALIZED_ROW_ID
ROW_VERSION_COLUMN = MATERIALIZED_ROW_COMMIT_VERSION
THREADED_ROW_GROUP_ROWS = 64 * 1024  # row groups at least this long are decoded on Arrow's threads


def check_metadata_fields(fields: Sequence[str], protocol: Protocol, metadata: Metadata, where: str) -> None:
    """Refuse ``_metadata`` fields that do not exist, and row ids on a table that does not track rows (as
    Delta Spark: readers may rely on row ids only once ``delta.enableRowTracking`` is true)."""
    unknown = [m for m in fields if m not in METADATA_FIELDS]
    if unknown:
        raise ValueError(f"unknown _metadata field(s) {unknown}; known: {list(METADATA_FIELDS)}")
    if {"row_id", "row_commit_version"} & set(fields) and not is_enabled(protocol, metadata):
        raise UnsupportedFeatureError(
            f"{where} does not enable row tracking (delta.enableRowTracking): its rows have no row_id or "
            "row_commit_version to read", features=("rowTracking",),
        )  # fmt: skip


@dataclass(frozen=True)
class ReadSpec:
    """What reading files of one snapshot needs; picklable, so Spark executors get it whole.

    ``read_columns`` are the logical columns read (the output ``columns`` and those the filter needs);
    ``metadata`` the ``_metadata`` fields asked for; ``filter`` a tree applied with Spark's semantics and
    ``arrow_filter`` a ``pyarrow.compute.Expression`` applied as Arrow does.
    """

    schema: dict
    mode: str
    partition_columns: tuple[str, ...]
    columns: tuple[str, ...]
    read_columns: tuple[str, ...]
    metadata: tuple[str, ...] = ()
    filter: Expr | None = None
    arrow_filter: Any = None
    row_id_column: str | None = None
    row_version_column: str | None = None
    storage_options: dict[str, Any] = field(default_factory=dict, repr=False)  # never in a repr or log

    def output_schema(self) -> pa.Schema:
        by_name = {f["name"]: f for f in self.schema["fields"]}
        fields = [pa.field(c, logical_type(by_name[c]["type"]), by_name[c].get("nullable", True))
                  for c in self.columns]  # fmt: skip
        if self.metadata:
            fields.append(
                pa.field(METADATA_COLUMN, pa.struct([(m, METADATA_FIELDS[m]) for m in self.metadata]))
            )
        return pa.schema(fields)


def read_spec_of(
    metadata: Metadata,
    columns: Sequence[str] | None = None,
    storage_options: dict[str, Any] | None = None,
    filter: Any = None,
) -> ReadSpec:
    """The spec that reads ``columns`` (all, by default, in table order; logical names as the schema
    spells them) of a table with ``metadata``, rows where ``filter`` (SQL text, DNF tuples or a
    ``pyarrow.compute.Expression``, as ``Scan`` takes) holds: what readers that plan their own files
    (change reads) hand ``read_data_file``."""
    schema = metadata.schema
    names = tuple(columns) if columns is not None else tuple(f["name"] for f in schema["fields"])
    by_lower = {f["name"].lower(): f["name"] for f in schema["fields"]}
    arrow_filter = filter if isinstance(filter, pc.Expression) else None
    expr = parse(filter) if isinstance(filter, str) else as_expr(filter)
    needed = [by_lower.get(str(c[0]).lower(), c[0]) for c in (expr.columns() if expr is not None else ())]
    filter = None if arrow_filter is not None else expr
    config = metadata.configuration
    return ReadSpec(
        schema=schema, mode=column_mapping_mode(config), partition_columns=tuple(metadata.partition_columns),
        columns=names, read_columns=(*names, *(c for c in dict.fromkeys(needed) if c not in names)),
        filter=filter, arrow_filter=arrow_filter, row_id_column=config.get(ROW_ID_COLUMN),
        row_version_column=config.get(ROW_VERSION_COLUMN), storage_options=dict(storage_options or {}),
    )  # fmt: skip


@dataclass(frozen=True)
class FileTask:
    """One file to read: what reading it needs from the log.

    ``deletion_vector`` marks the rows not read. ``selected_rows``, a deletion vector too, restricts the
    read to the rows it marks (less those of ``deletion_vector``): a change read reads, of a file whose
    vector grew, only the rows the new vector added ("Deletion Vectors" seen as changes).
    """

    path: str
    partition_values: dict[str, str | None]
    deletion_vector: dict[str, Any] | None = None
    base_row_id: int | None = None
    default_row_commit_version: int | None = None
    selected_rows: dict[str, Any] | None = None


def open_data_file(path: str, fs: Any, root: str, storage_options: dict[str, Any]) -> tuple[Any, str]:
    """The file system and path of a data file: relative to the root, or an absolute URI in the log."""
    if "://" in path or path.startswith("file:"):
        return fsspec.core.url_to_fs(path, **storage_options)
    return fs, posixpath.join(root, path)


def read_data_file(task: FileTask, spec: ReadSpec, fs: Any, root: str) -> Iterator[pa.RecordBatch]:
    """The logical rows of one data file, a row group at a time, in the spec's output schema."""
    file_fs, path = open_data_file(task.path, fs, root, spec.storage_options)
    deleted = None
    if task.deletion_vector is not None:
        deleted = deleted_rows(task.deletion_vector, root, fs, data_file=task.path)
    selected = None
    if task.selected_rows is not None:
        selected = deleted_rows(task.selected_rows, root, fs, data_file=task.path)
        if deleted is not None:
            selected, deleted = np.setdiff1d(selected, deleted, assume_unique=True), None
    local = "file" in (file_fs.protocol if isinstance(file_fs.protocol, tuple) else (file_fs.protocol,))
    source = path if local else file_fs.open(path, "rb")
    try:
        # Pre-buffering coalesces reads into few large requests: worth it on object stores, a cost on disk.
        pf = pq.ParquetFile(source, pre_buffer=not local)
        file_fields = list(pf.schema_arrow)
        wanted = _file_columns(file_fields, spec)
        names = sorted({file_fields[i].name for i in wanted.values()})
        first_row = 0
        for rg in range(pf.num_row_groups):
            n = pf.metadata.row_group(rg).num_rows
            # Decoding a small row group on Arrow's thread pool costs more than it saves (a table of many
            # small files is read a few files at a time in threads already).
            data = pf.read_row_group(rg, columns=names, use_threads=n >= THREADED_ROW_GROUP_ROWS)
            batch = _logical_batch(data, n, first_row, wanted, file_fields, task, spec)
            if deleted is not None:
                batch = _drop_deleted(batch, deleted, first_row)
            if selected is not None:
                batch = _keep_selected(batch, selected, first_row)
            first_row += n
            batch = _filtered(batch, spec)
            if batch.num_rows:
                yield batch
    finally:
        if not local:
            source.close()


def _file_columns(file_fields: list[pa.Field], spec: ReadSpec) -> dict[str, int]:
    """Logical name (or a materialized row-tracking column's role) -> index of the file field holding it."""
    partitions = {c.lower() for c in spec.partition_columns}
    by_name = {f["name"]: f for f in spec.schema["fields"]}
    found = {}
    for name in spec.read_columns:
        if name.lower() in partitions:
            continue
        i = find_field(file_fields, by_name[name], spec.mode)
        if i is not None:
            found[name] = i
    for role, column in (("row_id", spec.row_id_column), ("row_commit_version", spec.row_version_column)):
        if column and role in spec.metadata:
            i = next((j for j, f in enumerate(file_fields) if f.name == column), None)
            if i is not None:
                found[f"\0{role}"] = i
    return found


def _logical_batch(
    data: pa.Table, n: int, first_row: int, wanted: dict[str, int], file_fields: list[pa.Field],
    task: FileTask, spec: ReadSpec,
) -> pa.RecordBatch:  # fmt: skip
    partitions = {c.lower() for c in spec.partition_columns}
    by_name = {f["name"]: f for f in spec.schema["fields"]}
    arrays, names = [], []
    for name in spec.read_columns:
        f = by_name[name]
        if name.lower() in partitions:
            raw = task.partition_values.get(physical_name(f, spec.mode))
            value = parse_partition_value(raw, f["type"])
            arrays.append(pa.repeat(pa.scalar(value, logical_type(f["type"])), n))
        else:
            i = wanted.get(name)
            column = None if i is None else data.column(file_fields[i].name)
            arrays.append(resolve_column(column, n, f["type"], spec.mode))
        names.append(name)
    if spec.metadata:
        arrays.append(_metadata(data, n, first_row, wanted, file_fields, task, spec))
        names.append(METADATA_COLUMN)
    if not arrays:  # a projection of nothing (a row count): n rows, no columns
        return pa.RecordBatch.from_struct_array(pa.repeat(pa.scalar({}, pa.struct([])), n))
    return pa.RecordBatch.from_arrays(arrays, names=names)


def _metadata(
    data: pa.Table, n: int, first_row: int, wanted: dict[str, int], file_fields: list[pa.Field],
    task: FileTask, spec: ReadSpec,
) -> pa.StructArray:  # fmt: skip
    index = pa.array(np.arange(first_row, first_row + n, dtype=np.int64))
    children = []
    for role in spec.metadata:
        if role == "file_path":
            children.append(pa.repeat(pa.scalar(task.path, pa.string()), n))
        elif role == "row_index":
            children.append(index)
        else:
            # "Row Tracking": a materialized value wins; else the fresh id is baseRowId + row index, the
            # fresh commit version the file's defaultRowCommitVersion.
            base = task.base_row_id if role == "row_id" else task.default_row_commit_version
            fresh = (pc.add(index, base) if role == "row_id" else pa.repeat(pa.scalar(base, pa.int64()), n)) \
                if base is not None else pa.nulls(n, pa.int64())  # fmt: skip
            i = wanted.get(f"\0{role}")
            if i is not None:
                fresh = pc.coalesce(data.column(file_fields[i].name).combine_chunks().cast(pa.int64()), fresh)
            children.append(fresh)
    return pa.StructArray.from_arrays(children, names=list(spec.metadata))


def _drop_deleted(batch: pa.RecordBatch, deleted: np.ndarray, first_row: int) -> pa.RecordBatch:
    """Drop rows whose file row index (``first_row`` + position) is in the deletion vector."""
    n = batch.num_rows
    local = deleted[(deleted >= first_row) & (deleted < first_row + n)].astype(np.int64) - first_row
    if not len(local):
        return batch
    keep = np.ones(n, dtype=bool)
    keep[local] = False
    return batch.filter(pa.array(keep))


def _keep_selected(batch: pa.RecordBatch, selected: np.ndarray, first_row: int) -> pa.RecordBatch:
    """Keep only rows whose file row index (``first_row`` + position) is in ``selected``."""
    n = batch.num_rows
    local = selected[(selected >= first_row) & (selected < first_row + n)].astype(np.int64) - first_row
    keep = np.zeros(n, dtype=bool)
    keep[local] = True
    return batch.filter(pa.array(keep))


def _filtered(batch: pa.RecordBatch, spec: ReadSpec) -> pa.RecordBatch:
    if spec.filter is not None or spec.arrow_filter is not None:
        table = pa.Table.from_batches([batch])
        if spec.filter is not None:
            table = table.filter(predicate_mask(spec.filter, table))
        if spec.arrow_filter is not None:
            table = table.filter(spec.arrow_filter)
        batch = table.combine_chunks().to_batches()[0] if table.num_rows else batch.slice(0, 0)
    if len(spec.read_columns) != len(spec.columns):
        batch = batch.select([*spec.columns, *([METADATA_COLUMN] if spec.metadata else [])])
    return batch
