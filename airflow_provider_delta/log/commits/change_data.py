"""Change data files ("Change Data Files", "Add CDC File"): the rows a commit changed, with ``_change_type``,
written where Delta Spark writes them, for tables with ``delta.enableChangeDataFeed=true``.

When a commit holds ``cdc`` actions, a change-data-feed reader (Delta Spark's ``table_changes``) reads only
those files for it and ignores its adds and removes; without them it infers the changes: rows of added
files are ``insert``, rows of removed files ``delete``, and for a file whose deletion vector changed, the
rows the new vector adds are ``delete``. So Delta Spark writes change data only where inference would be
wrong: when it rewrites files (a copy-on-write DELETE's rows dropped, UPDATE's pre- and post-images, MERGE),
never for appends, whole-file removes or deletes by deletion vector. The core follows the same rule: its
``delete_rows``, ``remove_files`` and ``add_files`` write none, and a caller that rewrites rows gives the
change data of the commit, all of it, to ``Transaction.add_change_data``.

Files are laid out as Delta Spark's: ``_change_data/<partition folders>/cdc-<n>-<uuid>.c000.<codec>.parquet``
or, under column mapping (or ``delta.randomizeFilePrefixes``), ``<random prefix>/cdc-...`` as its data
files; columns are the table's (physical names and Parquet field ids under column mapping, partition
columns included as Delta Spark 4 writes them) and ``_change_type``; the action's ``partitionValues`` are
keyed by physical name.
"""

from __future__ import annotations

import posixpath
import secrets
import string
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from ..actions.actions import AddCDCFile, Metadata
from ..base.errors import InvalidCommitError, UnsupportedFeatureError
from ..features.configuration import TableConfiguration
from ..files.storage import LogStore
from ..schema.partition_values import serialize_partition_value
from ..schema.schema import delta_schema_to_arrow, physical_name

CHANGE_TYPE = "_change_type"
CHANGE_TYPES = ("insert", "delete", "update_preimage", "update_postimage")
CHANGE_DATA_DIR = "_change_data"
_PREFIX_CHARS = string.ascii_letters + string.digits


def check_change_data_writable(config: TableConfiguration, where: str) -> None:
    """``cdc`` actions need the ``changeDataFeed`` feature and the table asking for change data."""
    if not config.change_data_feed:
        raise UnsupportedFeatureError(
            f"{where} does not record change data: set delta.enableChangeDataFeed=true (which adds the "
            "changeDataFeed table feature) before committing change data",
            features=("changeDataFeed",),
        )


def write_change_data(store: LogStore, config: TableConfiguration | None, rows: Any) -> list[AddCDCFile]:
    """Write ``rows`` (the table's columns by logical name, and ``_change_type``) as change data of a commit
    under ``config`` (the commit's effective table configuration), one file per partition; returns their
    ``cdc`` actions. The table must record change data; every column is checked before a file is written."""
    if config is None:
        raise InvalidCommitError("set the new table's protocol and metadata before its change data")
    check_change_data_writable(config, f"table {store.uri}")
    metadata = config.metadata
    table = _aligned(metadata, rows)
    if table.num_rows == 0:
        return []
    mode = config.column_mapping_mode
    physical = config.physical_schema
    fields = {f["name"]: f for f in metadata.schema["fields"]}
    partitions = [fields[c] for c in metadata.partition_columns]
    prefix_length = config.file_prefix_length
    layout = config.file_layout()
    out = []
    for number, (values, part) in enumerate(_by_partition(table, partitions, mode)):
        columns = [_to_physical(part.column(i), physical.field(i).type) for i in range(len(physical))]
        schema = pa.schema([*physical, pa.field(CHANGE_TYPE, pa.string())])
        data = pa.Table.from_arrays([*columns, part.column(CHANGE_TYPE)], schema=schema)
        name = layout.file_name(number, prefix="cdc")
        if prefix_length is not None:
            folder = "".join(secrets.choice(_PREFIX_CHARS) for _ in range(prefix_length))
        else:
            folder = "/".join([CHANGE_DATA_DIR, *([layout.partition_dir(values)] if values else [])])
        relative = f"{folder}/{name}"
        full = store.table_file(relative)
        if store.protocol in ("file", "local"):  # object stores have no folders to create
            store.fs.makedirs(posixpath.dirname(full), exist_ok=True)
        with store.fs.open(full, "wb") as fh, layout.parquet_writer(fh, data.schema) as writer:
            writer.write_table(data)
        out.append(AddCDCFile(relative, store.info(full).size, values))
    return out


def _aligned(metadata: Metadata, rows: Any) -> pa.Table:
    """``rows`` as the table's logical columns in table order, then ``_change_type``; refused naming the
    column that is missing, extra, or of a type the table's cannot hold."""
    if isinstance(rows, pa.RecordBatch):
        rows = pa.Table.from_batches([rows])
    if not isinstance(rows, pa.Table):
        raise TypeError(f"change data must be a pyarrow Table or RecordBatch, not {type(rows).__name__}")
    logical = delta_schema_to_arrow(metadata.schema)
    given = {name.lower(): name for name in rows.column_names}
    wanted = [*logical.names, CHANGE_TYPE]
    missing = [n for n in wanted if n.lower() not in given]
    extra = sorted(set(given) - {n.lower() for n in wanted})
    if missing or extra:
        raise InvalidCommitError(
            f"change data must have the table's columns and {CHANGE_TYPE}: "
            + "; ".join(
                x for x in (missing and f"missing {missing}", extra and f"not in the table {extra}") if x
            )
        )
    columns = []
    for field in logical:
        column = rows.column(given[field.name.lower()])
        try:
            columns.append(column.cast(field.type))
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
            raise InvalidCommitError(f"change data column {field.name!r} ({column.type}) does not fit the "
                                     f"table's type {field.type}: {exc}") from None  # fmt: skip
    kinds = rows.column(given[CHANGE_TYPE]).cast(pa.string())
    bad = pc.unique(kinds.drop_null().filter(pc.invert(pc.is_in(kinds.drop_null(), pa.array(CHANGE_TYPES)))))
    if kinds.null_count or len(bad):
        shown = [*sorted(bad.to_pylist()), *(["null"] if kinds.null_count else [])]
        raise InvalidCommitError(f"{CHANGE_TYPE} must be one of {list(CHANGE_TYPES)}, not {shown}")
    return pa.Table.from_arrays([*columns, kinds], names=wanted)


def _by_partition(
    table: pa.Table, partitions: list[dict], mode: str
) -> list[tuple[dict[str, str | None], pa.Table]]:
    """Rows grouped by partition values, each group with its serialised values keyed by physical name."""
    if not partitions:
        return [({}, table)]
    names = [f["name"] for f in partitions]
    groups = table.select(names).group_by(names, use_threads=False).aggregate([])
    out = []
    for combo in groups.to_pylist():
        mask = None
        for name in names:
            column = table.column(name)
            hit = (
                pc.is_null(column)
                if combo[name] is None
                else pc.fill_null(pc.equal(column, combo[name]), False)
            )
            mask = hit if mask is None else pc.and_(mask, hit)
        values = {
            physical_name(f, mode): serialize_partition_value(combo[f["name"]], f["type"]) for f in partitions
        }
        out.append((values, table.filter(mask)))
    return out


def _to_physical(array: pa.Array | pa.ChunkedArray, target: pa.DataType) -> pa.Array:
    """A logical column rebuilt, by position, with the physical names and field ids of ``target``."""
    if isinstance(array, pa.ChunkedArray):
        array = array.combine_chunks()
    mask = array.is_null() if array.null_count else None
    if pa.types.is_struct(target):
        children = [_to_physical(array.field(i), target.field(i).type) for i in range(target.num_fields)]
        return pa.StructArray.from_arrays(children, fields=list(target), mask=mask)
    if pa.types.is_list(target):
        values = _to_physical(array.values, target.value_type)
        return pa.ListArray.from_arrays(array.offsets, values, type=target, mask=mask)
    if pa.types.is_map(target):
        keys, items = _to_physical(array.keys, target.key_type), _to_physical(array.items, target.item_type)
        return pa.MapArray.from_arrays(array.offsets, keys, items, type=target, mask=mask)
    return array if array.type == target else array.cast(target)
