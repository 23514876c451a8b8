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
from functools import cached_property
from typing import Any

import fsspec
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from ..base.arrow_utils import (
    copied,
    fitting_row_ranges,
    from_numpy,
    int64_scalar,
    rows_pool,
    scalar,
    single,
    string_scalar,
)
from ..base.errors import GONE_BECAUSE, DataFileNotFoundError, UnsupportedFeatureError
from ..expressions.evaluate import predicate_mask
from ..expressions.expressions import Expr, as_expr
from ..expressions.sql_parser import parse
from ..features.configuration import TableConfiguration
from ..files.deletion_vectors import deleted_rows
from ..schema.partition_values import parse_partition_value
from ..schema.physical_columns import find_field, logical_type, resolve_column
from ..schema.schema import physical_name

METADATA_FIELDS = {
    "file_path": pa.string(), "row_index": pa.int64(), "row_id": pa.int64(), "row_commit_version": pa.int64(),
}  # fmt: skip
METADATA_COLUMN = "_metadata"
THREADED_ROW_GROUP_ROWS = 64 * 1024  # row groups at least this long are decoded on Arrow's threads
NESTED_BATCH_ROWS = 64 * 1024  # rows a batch of a row group pyarrow cannot read whole (see ``_row_group``)
# Row groups at least this long have their columns copied into compact buffers (see ``_logical_batch``);
# shorter ones are used as decoded (a table of many small files: copying only cost time there).
COMPACT_ROW_GROUP_ROWS = 4 * 1024
# A string or binary column is read as a dictionary when its dictionary page is less than this share of the
# column's bytes, until a row group turns out to hold more distinct values than the second share of its
# rows (see ``_dictionary_columns``).
DICTIONARY_PAGE_SHARE = 0.25
DISTINCT_SHARE = 0.5
_LOCAL = pafs.LocalFileSystem()


def check_metadata_fields(fields: Sequence[str], config: TableConfiguration, where: str) -> None:
    """Refuse ``_metadata`` fields that do not exist, and row ids on a table that does not track rows (as
    Delta Spark: readers may rely on row ids only once ``delta.enableRowTracking`` is true)."""
    unknown = [m for m in fields if m not in METADATA_FIELDS]
    if unknown:
        raise ValueError(f"unknown _metadata field(s) {unknown}; known: {list(METADATA_FIELDS)}")
    if {"row_id", "row_commit_version"} & set(fields) and not config.row_tracking_enabled:
        raise UnsupportedFeatureError(
            f"{where} does not enable row tracking (delta.enableRowTracking): its rows have no row_id or "
            "row_commit_version to read", features=("rowTracking",),
        )  # fmt: skip


@dataclass(frozen=True)
class _Column:
    name: str
    field: dict
    partition: bool
    target: pa.DataType
    primitive: bool  # a file column already of ``target`` is the logical column (no mapping, no widening)


@dataclass(frozen=True)
class _Layout:
    """Where a file of one schema holds each read column: ``wanted`` maps a logical name (or a row-tracking
    role) to a file field, ``names`` are the file columns to read."""

    file_fields: list[pa.Field]
    wanted: dict[str, int]
    names: list[str]
    # When every output column is a file column used as read (no partition column, mapping, widening or
    # missing column, no ``_metadata``): the position of each in the table read. Files written by one
    # writer are mostly like this, and skip the per-column work.
    direct: tuple[int, ...] | None = None
    # Read string and binary columns used as read: file column name -> its Parquet leaf index.
    strings: dict[str, int] = field(default_factory=dict)


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
    # How files of one Arrow schema map to the read columns, worked out once per schema (``_layout``)
    layouts: dict[pa.Schema, _Layout] = field(default_factory=dict, init=False, repr=False, compare=False)
    # The layout used last, checked before the dict: comparing two schemas is cheaper than hashing one.
    recent: list[tuple[pa.Schema, _Layout]] = field(
        default_factory=list, init=False, repr=False, compare=False
    )
    # File columns found to hold mostly distinct values, read as plain values from then on.
    plain: set[str] = field(default_factory=set, init=False, repr=False, compare=False)

    @cached_property
    def plan(self) -> tuple[_Column, ...]:
        """Each read column with what every file needs of it: its field, whether it is a partition
        column, its logical type, and whether a file column of that type is used as it is."""
        partitions = {c.lower() for c in self.partition_columns}
        by_name = {f["name"]: f for f in self.schema["fields"]}
        return tuple(
            _Column(name, by_name[name], name.lower() in partitions, logical_type(by_name[name]["type"]),
                    isinstance(by_name[name]["type"], str) and by_name[name]["type"] != "variant")
            for name in self.read_columns
        )  # fmt: skip

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
    config: TableConfiguration,
    columns: Sequence[str] | None = None,
    storage_options: dict[str, Any] | None = None,
    filter: Any = None,
) -> ReadSpec:
    """The spec that reads ``columns`` (all, by default, in table order; logical names as the schema
    spells them) of a table with ``metadata``, rows where ``filter`` (SQL text, DNF tuples or a
    ``pyarrow.compute.Expression``, as ``Scan`` takes) holds: what readers that plan their own files
    (change reads) hand ``read_data_file``."""
    metadata = config.metadata
    schema = metadata.schema
    names = tuple(columns) if columns is not None else tuple(f["name"] for f in schema["fields"])
    by_lower = {f["name"].lower(): f["name"] for f in schema["fields"]}
    arrow_filter = filter if isinstance(filter, pc.Expression) else None
    expr = parse(filter) if isinstance(filter, str) else as_expr(filter)
    needed = [by_lower.get(str(c[0]).lower(), c[0]) for c in (expr.columns() if expr is not None else ())]
    filter = None if arrow_filter is not None else expr
    return ReadSpec(
        schema=schema, mode=config.column_mapping_mode, partition_columns=tuple(metadata.partition_columns),
        columns=names, read_columns=(*names, *(c for c in dict.fromkeys(needed) if c not in names)),
        filter=filter, arrow_filter=arrow_filter, row_id_column=config.materialized_row_id_column,
        row_version_column=config.materialized_row_commit_version_column,
        storage_options=dict(storage_options or {}),
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


# The columns of ``Snapshot.files`` a read needs of each file (what executors are sent, too).
TASK_FIELDS = ("path", "partitionValues", "deletionVector", "baseRowId", "defaultRowCommitVersion")


def file_tasks(files: pa.Table | pa.RecordBatch) -> list[FileTask]:
    """A task per row of ``files`` (rows of ``Snapshot.files``, or just its ``TASK_FIELDS``), built a
    column at a time: a table of many small files has thousands of rows."""
    n = files.num_rows
    names = set(files.schema.names)
    path, values, dv, base, version = (
        files.column(f).to_pylist() if f in names else [None] * n for f in TASK_FIELDS
    )
    rows = zip(path, values, dv, base, version, strict=True)
    return [FileTask(p, dict(v or []), d, b, c) for p, v, d, b, c in rows]


def open_data_file(path: str, fs: Any, root: str, storage_options: dict[str, Any]) -> tuple[Any, str]:
    """The file system and path of a data file: relative to the root, or an absolute URI in the log."""
    if "://" in path or path.startswith("file:"):
        return fsspec.core.url_to_fs(path, **storage_options)
    return fs, posixpath.join(root, path)


def read_data_file(
    task: FileTask, spec: ReadSpec, fs: Any, root: str, pool: pa.MemoryPool | None = None
) -> Iterator[pa.RecordBatch]:
    """The logical rows of one data file, a row group at a time, in the spec's output schema, allocated
    from ``pool`` (by default ``arrow_utils.rows_pool``)."""
    pool = pool or rows_pool()
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
    # A local file opened directly: handing pyarrow the path makes it resolve a file system for every
    # file, a fifth of the cost of reading a small one.
    try:
        source = _LOCAL.open_input_file(path) if local else file_fs.open(path, "rb")
    except FileNotFoundError:
        raise DataFileNotFoundError(
            f"the data file {task.path} is gone from {root} ({GONE_BECAUSE})", path=task.path
        ) from None
    try:
        # Pre-buffering coalesces reads into few large requests: worth it on object stores, a cost on disk.
        pf = pq.ParquetFile(source, pre_buffer=not local)
        footer = pf.metadata
        layout = _layout(pf.schema_arrow, spec)
        dictionary = _dictionary_columns(footer, layout, spec)
        if dictionary:  # opened again to read those as dictionaries (a large file: the footer is kept)
            leaves = [*dictionary.values()]
            pf = pq.ParquetFile(source, metadata=footer, pre_buffer=not local, read_dictionary=leaves)
        first_row = 0
        for rg in range(footer.num_row_groups):
            n = footer.row_group(rg).num_rows
            data = _row_group(pf, rg, layout.names, n)
            keep = _kept(n, first_row, deleted, selected)
            # A row group is one batch, unless a string column holds more than one Arrow array can.
            for start, stop in fitting_row_ranges(data):
                whole = (start, stop) == (0, n)
                part = data if whole else data.slice(start, stop - start)
                index = _row_index(spec, first_row + start, first_row + stop)
                rows = _RowGroup(part, stop - start, index, frozenset())
                if keep is not None:
                    # The vector's rows go before anything is built of them (partition columns,
                    # ``_metadata``, the values of dictionary-encoded columns).
                    rows = rows.kept(keep if whole else keep[start:stop], pool)
                rows = rows.decoded(dictionary, spec, pool)
                batch = _filtered(_logical_batch(rows, layout, task, spec, pool), spec, pool)
                if batch.num_rows:
                    yield batch
            first_row += n
    finally:
        source.close()


def _row_group(pf: pq.ParquetFile, rg: int, columns: list[str], n: int) -> pa.Table:
    """Row group ``rg``'s ``columns`` (``n`` rows) as read.

    pyarrow cannot return a nested column holding more than 2 GiB of values in one read ("Nested data
    conversions not implemented for chunked array outputs"): such a row group is read in batches instead,
    whose chunks ``fitting_row_ranges`` then keeps apart.
    """
    # Decoding a small row group on Arrow's thread pool costs more than it saves (a table of many small
    # files is read a few files at a time in threads already).
    threads = n >= THREADED_ROW_GROUP_ROWS
    try:
        return pf.read_row_group(rg, columns=columns, use_threads=threads)
    except pa.ArrowNotImplementedError as exc:
        if "chunked array outputs" not in str(exc):
            raise
    batches = pf.iter_batches(NESTED_BATCH_ROWS, row_groups=[rg], columns=columns, use_threads=threads)
    return pa.Table.from_batches(list(batches))


def _row_index(spec: ReadSpec, start: int, stop: int) -> np.ndarray | None:
    """The file's row indexes ``start``...``stop - 1``, when ``_metadata`` is read."""
    return np.arange(start, stop, dtype=np.int64) if spec.metadata else None


@dataclass(frozen=True)
class _RowGroup:
    """The columns read of one row group (or of a range of its rows), their number of rows and, when
    ``_metadata`` is read, each row's index in the file."""

    data: pa.Table
    rows: int
    index: np.ndarray | None
    # The file columns already in compact buffers of their own (see ``_logical_batch``)
    compact: frozenset[str]

    def kept(self, keep: np.ndarray, pool: pa.MemoryPool) -> _RowGroup:
        """The rows where ``keep`` is true, in fresh compact buffers."""
        index = self.index[keep] if self.index is not None else None
        data = pc.filter(self.data, from_numpy(keep), memory_pool=pool)
        return _RowGroup(data, int(keep.sum()), index, frozenset(data.column_names))

    def decoded(self, dictionary: dict[str, int], spec: ReadSpec, pool: pa.MemoryPool) -> _RowGroup:
        """The columns read as dictionaries (``_dictionary_columns``) as plain values, in fresh compact
        buffers. A column whose dictionary turns out to hold mostly distinct values is read plain from the
        next file on: its plain pages had to be hashed into the dictionary."""
        if not dictionary:
            return self
        data = self.data
        for name in dictionary:
            i = data.schema.get_field_index(name)
            read = data.column(i)
            distinct = sum(len(c.dictionary) for c in read.chunks)
            if self.rows >= COMPACT_ROW_GROUP_ROWS and distinct > DISTINCT_SHARE * self.rows:
                spec.plain.add(name)
            values = pc.cast(read, read.type.value_type, memory_pool=pool)
            data = data.set_column(i, data.field(i).with_type(values.type), values)
        return _RowGroup(data, self.rows, self.index, self.compact.union(dictionary))


def _dictionary_columns(footer: pq.FileMetaData, layout: _Layout, spec: ReadSpec) -> dict[str, int]:
    """The string and binary columns of a file to read as dictionaries, by name, with their leaf index.

    A dictionary-encoded column read as plain values costs pyarrow about 17 ns a value (each is appended
    to a builder); read as a dictionary and then decoded, about half that, and the decoded buffers need no
    compacting copy. But pyarrow builds a dictionary of a column's plain pages (those written after the
    writer's dictionary grew past its page limit) by hashing every value, at about twice the cost of
    reading them plain. So a column is read as a dictionary only where its values repeat: its dictionary
    page is a small part of it (a column of distinct values is mostly dictionary page, or a full one and
    plain pages), and no row group read so far was mostly distinct (``ReadSpec.plain``, which catches a
    long row group's plain pages). Small files are read as they are: there the extra step only costs."""
    if not layout.strings or footer.num_rows < COMPACT_ROW_GROUP_ROWS:
        return {}
    groups = [footer.row_group(rg) for rg in range(footer.num_row_groups)]
    return {
        name: leaf
        for name, leaf in layout.strings.items()
        if name not in spec.plain and all(_repeats(g.column(leaf)) for g in groups)
    }


def _repeats(chunk: pq.ColumnChunkMetaData) -> bool:
    """Whether a column chunk is dictionary-encoded with a dictionary page (compressed: the page before the
    first data page) under ``DICTIONARY_PAGE_SHARE`` of its bytes, or of under a byte per eight values: a
    codec such as zstd squeezes the indexes of a few repeated values to almost nothing, leaving the small
    dictionary page the larger part."""
    if not chunk.has_dictionary_page or chunk.data_page_offset <= chunk.dictionary_page_offset:
        return False
    page = chunk.data_page_offset - chunk.dictionary_page_offset
    return page < DICTIONARY_PAGE_SHARE * chunk.total_compressed_size or page * 8 < chunk.num_values


def _kept(
    n: int, first_row: int, deleted: np.ndarray | None, selected: np.ndarray | None
) -> np.ndarray | None:
    """Which of a row group's ``n`` rows (file rows ``first_row``...) to keep: those the deletion vector
    does not mark, or only those ``selected`` marks; ``None`` to keep all."""
    if deleted is None and selected is None:
        return None
    marked = deleted if selected is None else selected
    local = marked[(marked >= first_row) & (marked < first_row + n)].astype(np.int64) - first_row
    if selected is None and not len(local):
        return None
    keep = np.full(n, selected is None)
    keep[local] = selected is not None
    return keep


def _layout(file_schema: pa.Schema, spec: ReadSpec) -> _Layout:
    """The layout of files with ``file_schema``, worked out once per schema: a table of many small files
    has one or a few. Not cached under column mapping by ``id``: schemas compare without their field
    ids, which that mode goes by."""
    if spec.mode == "id":
        return _new_layout(file_schema, spec)
    recent = spec.recent[0] if spec.recent else None
    if recent is not None and recent[0].equals(file_schema):
        return recent[1]
    layout = spec.layouts.get(file_schema)
    if layout is None:
        layout = spec.layouts[file_schema] = _new_layout(file_schema, spec)
    spec.recent[:] = [(file_schema, layout)]  # one item replaced at once: scan threads share the spec
    return layout


def _new_layout(file_schema: pa.Schema, spec: ReadSpec) -> _Layout:
    file_fields = list(file_schema)
    wanted = _file_columns(file_fields, spec)
    names = sorted({file_fields[i].name for i in wanted.values()})
    direct = None
    if (
        spec.plan
        and not spec.metadata
        and all(
            c.name in wanted and c.primitive and file_fields[wanted[c.name]].type == c.target
            for c in spec.plan
        )
    ):
        position = {name: j for j, name in enumerate(names)}
        direct = tuple(position[file_fields[wanted[c.name]].name] for c in spec.plan)
    leaves = np.cumsum([0] + [_leaf_count(f.type) for f in file_fields])
    strings = {
        file_fields[wanted[c.name]].name: int(leaves[wanted[c.name]])
        for c in spec.plan
        if c.name in wanted and c.primitive and c.target in (pa.string(), pa.binary())
        and file_fields[wanted[c.name]].type == c.target
    }  # fmt: skip
    return _Layout(file_fields, wanted, names, direct, strings)


def _leaf_count(t: pa.DataType) -> int:
    """How many Parquet leaf columns hold an Arrow type."""
    if isinstance(t, pa.BaseExtensionType):
        return _leaf_count(t.storage_type)
    if pa.types.is_struct(t):
        return sum(_leaf_count(t.field(i).type) for i in range(t.num_fields))
    if pa.types.is_map(t):
        return _leaf_count(t.key_type) + _leaf_count(t.item_type)
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        return _leaf_count(t.value_type)
    return 1


def _file_columns(file_fields: list[pa.Field], spec: ReadSpec) -> dict[str, int]:
    """Logical name (or a materialized row-tracking column's role) -> index of the file field holding it."""
    found = {}
    for column in spec.plan:
        if column.partition:
            continue
        i = find_field(file_fields, column.field, spec.mode)
        if i is not None:
            found[column.name] = i
    for role, column in (("row_id", spec.row_id_column), ("row_commit_version", spec.row_version_column)):
        if column and role in spec.metadata:
            i = next((j for j, f in enumerate(file_fields) if f.name == column), None)
            if i is not None:
                found[f"\0{role}"] = i
    return found


def _logical_batch(
    group: _RowGroup, layout: _Layout, task: FileTask, spec: ReadSpec, pool: pa.MemoryPool
) -> pa.RecordBatch:
    """The logical columns of one row group. A column used as read is copied into compact buffers (see
    below) unless it is in them already, or its row group is small; else its single chunk is used as it
    is."""
    data, n = group.data, group.rows
    copy = set() if n < COMPACT_ROW_GROUP_ROWS else set(data.column_names) - group.compact
    if layout.direct is not None and not copy and n:
        columns = [data.column(j) for j in layout.direct]
        if all(c.num_chunks == 1 for c in columns):
            return pa.RecordBatch.from_arrays([c.chunk(0) for c in columns], names=list(spec.read_columns))
    arrays, names = [], []
    for column in spec.plan:
        f = column.field
        if column.partition:
            raw = task.partition_values.get(physical_name(f, spec.mode))
            value = parse_partition_value(raw, f["type"])
            arrays.append(pa.repeat(scalar(value, column.target), n, memory_pool=pool))
        else:
            i = layout.wanted.get(column.name)
            name = None if i is None else layout.file_fields[i].name
            read = None if name is None else data.column(name)
            if read is not None and column.primitive and read.type == column.target:
                # Copied, not kept as read: the copy is compact where the decoder's buffers are not
                # (rows_10m read whole, row groups of 50,000 rows: 80-100 MiB less peak RSS, and less
                # system time). A small row group's buffers are small: copying them is only work.
                keep_as_read = read.num_chunks == 1 and name not in copy
                arrays.append(read.chunk(0) if keep_as_read else copied(read, pool))
            else:
                arrays.append(resolve_column(read, n, f["type"], spec.mode, pool))
        names.append(column.name)
    if spec.metadata:
        arrays.append(_metadata(group, layout, task, spec))
        names.append(METADATA_COLUMN)
    if not arrays:  # a projection of nothing (a row count): n rows, no columns
        return pa.RecordBatch.from_struct_array(pa.nulls(n, pa.struct([])))
    return pa.RecordBatch.from_arrays(arrays, names=names)


def _metadata(group: _RowGroup, layout: _Layout, task: FileTask, spec: ReadSpec) -> pa.StructArray:
    data, n = group.data, group.rows
    index = from_numpy(group.index)
    children = []
    for role in spec.metadata:
        if role == "file_path":
            children.append(pa.repeat(string_scalar(task.path), n))
        elif role == "row_index":
            children.append(index)
        else:
            # "Row Tracking": a materialized value wins; else the fresh id is baseRowId + row index, the
            # fresh commit version the file's defaultRowCommitVersion.
            base = task.base_row_id if role == "row_id" else task.default_row_commit_version
            if base is None:
                fresh = pa.nulls(n, pa.int64())
            elif role == "row_id":
                fresh = pc.add(index, int64_scalar(base))
            else:
                fresh = pa.repeat(int64_scalar(base), n)
            i = layout.wanted.get(f"\0{role}")
            if i is not None:
                materialized = single(data.column(layout.file_fields[i].name)).cast(pa.int64())
                fresh = pc.coalesce(materialized, fresh)
            children.append(fresh)
    return pa.StructArray.from_arrays(children, names=list(spec.metadata))


def _filtered(batch: pa.RecordBatch, spec: ReadSpec, pool: pa.MemoryPool) -> pa.RecordBatch:
    if spec.filter is not None or spec.arrow_filter is not None:
        table = pa.Table.from_batches([batch])
        if spec.filter is not None:
            table = pc.filter(table, predicate_mask(spec.filter, table), memory_pool=pool)
        if spec.arrow_filter is not None:
            # Table.filter takes no pool (pyarrow evaluates the expression with Acero, imported on first
            # use: a second, which a module-level import would cost every process): the kept rows are
            # copied into it.
            kept = table.filter(spec.arrow_filter)
            table = pa.Table.from_arrays([copied(c, pool) for c in kept.columns], schema=kept.schema)
        batches = table.to_batches()
        if not table.num_rows:
            batch = batch.slice(0, 0)
        elif len(batches) == 1:
            batch = batches[0]
        else:
            batch = table.combine_chunks().to_batches()[0]
    if len(spec.read_columns) != len(spec.columns):
        batch = batch.select([*spec.columns, *([METADATA_COLUMN] if spec.metadata else [])])
    return batch
