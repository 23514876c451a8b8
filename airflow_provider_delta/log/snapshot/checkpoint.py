"""Writing checkpoints: the reconciled state of a version as Parquet, then ``_last_checkpoint``.

Spec: "Checkpoints", "Checkpoint Format", "Checkpoint Schema", "Last Checkpoint File", and V2 checkpoints
(``v2Checkpoint``: a UUID-named top-level file with ``checkpointMetadata`` and ``sidecar`` actions whose
sidecar files hold the file actions). Built column-wise from the snapshot's Arrow tables: each action
column is one struct array, null on the rows of other actions; no Python loop per file.
"""

from __future__ import annotations

import dataclasses
import io
import logging
import math
import uuid
from collections.abc import Iterator

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ..actions.actions import ADD, DELETION_VECTOR, REMOVE, STRING_MAP
from ..base.arguments import int_arg
from ..base.arrow_utils import encode_uri_paths
from ..base.errors import ChecksumError, CorruptLogError
from ..features.configuration import TableConfiguration
from ..files.last_checkpoint import LAST_CHECKPOINT, LastCheckpoint
from ..files.segment import read_last_checkpoint
from ..files.storage import LogStore
from ..files.version_checksum import checksum_name, checksum_of_state, write_checksum
from ..schema.partition_values import typed_partition_values
from ..schema.schema import physical_partition_names
from ..schema.stats import typed_file_stats
from .replay import TableState
from .snapshot import Snapshot
from .table_context import TableContext

log = logging.getLogger(__name__)

DEFAULT_PART_SIZE = 2_000_000  # actions per part before a checkpoint is split (delta.checkpoint.partSize)

PROTOCOL_T = pa.struct(
    [
        ("minReaderVersion", pa.int32()),
        ("minWriterVersion", pa.int32()),
        ("readerFeatures", pa.list_(pa.string())),
        ("writerFeatures", pa.list_(pa.string())),
    ]
)
METADATA_T = pa.struct(
    [
        ("id", pa.string()),
        ("name", pa.string()),
        ("description", pa.string()),
        ("format", pa.struct([("provider", pa.string()), ("options", STRING_MAP)])),
        ("schemaString", pa.string()),
        ("partitionColumns", pa.list_(pa.string())),
        ("configuration", STRING_MAP),
        ("createdTime", pa.int64()),
    ]
)
TXN_T = pa.struct([("appId", pa.string()), ("version", pa.int64()), ("lastUpdated", pa.int64())])
DOMAIN_T = pa.struct([("domain", pa.string()), ("configuration", pa.string()), ("removed", pa.bool_())])
CHECKPOINT_METADATA_T = pa.struct([("version", pa.int64()), ("tags", STRING_MAP)])
SIDECAR_T = pa.struct(
    [
        ("path", pa.string()),
        ("sizeInBytes", pa.int64()),
        ("modificationTime", pa.int64()),
        ("tags", STRING_MAP),
    ]
)
_REMOVE_FIELDS = [f for f in REMOVE if f.name != "stats"]  # tombstones carry no stats in checkpoints
_COLUMN_ORDER = ("txn", "add", "remove", "metaData", "protocol", "domainMetadata")  # as Delta Spark's
# File actions per batch (and Parquet row group) of a streamed checkpoint: about 40 MB of adds with stats.
_BATCH_ROWS = 131_072


def _small_actions(state: TableState) -> dict[str, pa.Array]:
    md = state.metadata
    p = state.protocol
    protocol = pa.array([p.to_json()], PROTOCOL_T)
    meta = {
        **md.to_json(),
        "format": {"provider": md.format.provider, "options": list(md.format.options.items())},
        "configuration": list(md.configuration.items()),
    }
    txns = [t.to_json() for t in state.txns.values()]
    domains = [d.to_json() for d in state.domains.values()]
    return {
        "protocol": protocol,
        "metaData": pa.array([meta], METADATA_T),
        "txn": pa.array(txns, TXN_T),
        "domainMetadata": pa.array(domains, DOMAIN_T),
    }


def _file_struct(table: pa.Table, fields: list[pa.Field], extra: dict[str, pa.Array]) -> pa.StructArray:
    arrays = []
    names = []
    for f in fields:
        if f.name in table.column_names:
            col = table.column(f.name)
            col = col.chunk(0) if col.num_chunks == 1 else col.combine_chunks()
        else:
            col = pa.nulls(len(table), f.type)
        if f.name == "path":
            col = encode_uri_paths(col)  # the log stores URIs ("Add File and Remove File")
        if f.name == "deletionVector":
            col = col.cast(DELETION_VECTOR)
        arrays.append(col)
        names.append(f.name)
    for name, arr in extra.items():
        arrays.append(arr)
        names.append(name)
    return pa.StructArray.from_arrays(arrays, names=names)


def _add_struct(config: TableConfiguration, files: pa.Table) -> pa.StructArray:
    md = config.metadata
    fields = [f for f in ADD if config.checkpoint_stats_as_json or f.name != "stats"]
    extra: dict[str, pa.Array] = {}
    if config.checkpoint_stats_as_struct:
        # Typed copies of partition values and stats, keyed by physical names ("Checkpoint Format").
        columns = list(md.partition_columns)
        if columns:
            typed = typed_partition_values(md, files, config.column_mapping_mode)
            physical = physical_partition_names(md.schema, columns, config.column_mapping_mode)
            extra["partitionValues_parsed"] = pa.StructArray.from_arrays(
                [typed.column(c).combine_chunks() for c in columns], names=[physical[c] for c in columns]
            )
        extra["stats_parsed"] = typed_file_stats(config.stats_schema, files)
    return _file_struct(files, fields, extra)


def checkpoint_table(state: TableState) -> pa.Table:
    """Every action of a reconciled state as one checkpoint table ("Checkpoint Schema")."""
    return pa.concat_tables(list(checkpoint_batches(state)))


def checkpoint_batches(state: TableState, rows: int = _BATCH_ROWS) -> Iterator[pa.Table]:
    """The rows of ``checkpoint_table`` as tables of at most ``rows`` file actions (the first holds the
    small actions), built one at a time: a streamed write never holds the whole checkpoint besides the
    snapshot it is made from."""
    if not state.fields.complete:
        # A projected replay (VACUUM's) lacks stats and partition values: a checkpoint of it would lose them.
        raise ValueError("a checkpoint needs every field of file actions; this state was replayed with fewer")
    small = _small_actions(state)
    config = TableConfiguration(state.protocol, state.metadata)
    files, tombstones = state.files, state.tombstones
    types = {
        **{name: arr.type for name, arr in small.items()},
        "add": _add_struct(config, files.slice(0, 0)).type,
        "remove": _file_struct(tombstones.slice(0, 0), _REMOVE_FIELDS, {}).type,
    }

    def rows_of(name: str, values: pa.Array) -> pa.Table:
        n = len(values)
        return pa.table({c: values if c == name else pa.nulls(n, types[c]) for c in _COLUMN_ORDER})

    yield pa.concat_tables(
        [rows_of(n, small[n]) for n in ("protocol", "metaData", "txn", "domainMetadata") if len(small[n])]
    )
    for group in _groups(files, rows):
        yield pa.concat_tables([rows_of("add", _add_struct(config, part)) for part in group])
    for group in _groups(tombstones, rows):
        yield pa.concat_tables([rows_of("remove", _file_struct(part, _REMOVE_FIELDS, {})) for part in group])


def _groups(table: pa.Table, rows: int) -> Iterator[list[pa.Table]]:
    """``table`` in groups of about ``rows`` rows, each a list of single-chunk tables: views of the
    snapshot's own chunks (no copy of a file list that is already in memory once)."""
    group: list[pa.Table] = []
    size = 0
    for batch in table.to_batches():
        for start in range(0, batch.num_rows, rows):
            part = batch.slice(start, rows)
            group.append(pa.Table.from_batches([part]))
            size += part.num_rows
            if size >= rows:
                yield group
                group, size = [], 0
    if group:
        yield group


def parquet_bytes(table: pa.Table, config: TableConfiguration) -> bytes:
    """A checkpoint file's bytes, with the table's codec and data page version ("Table Properties": the
    ``delta.parquet.*`` properties apply to checkpoint files too)."""
    sink = io.BytesIO()
    codec, page_version = config.parquet_compression, config.parquet_data_page_version
    pq.write_table(table, sink, compression=codec, data_page_version=page_version)
    return sink.getvalue()


def write_checkpoint(
    table: TableContext, version: int | None = None, parts: int | None = None, *, part_size: int | None = None
) -> LastCheckpoint:
    """Write a checkpoint of ``version`` (latest by default), then point ``_last_checkpoint`` at it.

    Classic single file by default; multi-part when ``parts`` > 1 or when the actions exceed
    ``delta.checkpoint.partSize``; V2 (UUID-named, file actions in sidecars) when the table's
    ``delta.checkpointPolicy`` is ``v2``. The checkpoint only ever follows its commit: the snapshot is
    built from the commit first.
    """
    int_arg(version, "version", minimum=0, optional=True)
    int_arg(parts, "parts", minimum=1, optional=True)
    int_arg(part_size, "part_size", minimum=1, optional=True)
    snap = table.snapshot(version)
    store = table.store
    # A checkpoint is written state: the writer must implement every writer feature ("Table Features").
    snap.table_configuration.check_write(f"checkpoint of {store.uri}")
    if snap.vacuum_started is not None and snap.vacuum_started > 0:
        # A checkpoint past an unfinished VACUUM START would hide it from writers that start from the
        # checkpoint, and they must see it to refuse files it may delete: stop just before it.
        log.warning(
            "a VACUUM of %s started at version %d and has not ended: writing the checkpoint at version %d "
            "instead of %d (a VACUUM that was killed leaves this until the next VACUUM ends)",
            store.uri,
            snap.vacuum_started,
            snap.vacuum_started - 1,
            snap.version,
        )
        snap = table.snapshot(snap.vacuum_started - 1)
    if wrong := snap.checksum_disagreement():
        # As Delta Spark validates before it checkpoints: the checkpoint would carry the checksum's small
        # state into the log, so a checksum that the log contradicts stops it, by name.
        raise ChecksumError(
            f"cannot checkpoint {store.uri} at version {snap.version}: the version checksum it was read from "
            f"disagrees with the log on {', '.join(wrong)}; delete or fix the checksum file and try again",
            path=snap.checksum_source,
        )
    config = snap.table_configuration
    size_limit = part_size or config.checkpoint_part_size or DEFAULT_PART_SIZE
    # A table with the v2Checkpoint feature gets V2 checkpoints (UUID-named, checkpointMetadata, sidecars).
    if config.v2_checkpoints:
        return _write_v2(table, snap, parts or 1)
    state = snap.state()
    total = 2 + len(state.txns) + len(state.domains) + snap.files.num_rows + snap.tombstones.num_rows
    n_parts = parts or max(1, math.ceil(total / size_limit))
    if n_parts == 1:
        pointer = _write_classic(store, snap.version, state, total)
        _point_to(table, pointer)
        _checksum_too(table.store, snap)
        log.info("wrote checkpoint of %s at version %d", table.uri, snap.version)
        return pointer
    whole = _clustered(checkpoint_table(state))
    written = 0
    rows_per = math.ceil(whole.num_rows / n_parts)
    for i in range(n_parts):
        chunk = whole.slice(i * rows_per, rows_per)
        name = f"{snap.version:020d}.checkpoint.{i + 1:010d}.{n_parts:010d}.parquet"
        data = parquet_bytes(chunk, snap.table_configuration)
        store.write_replace(store.log_file(name), data)
        _verify_written(store, store.log_file(name), chunk.num_rows)
        written += len(data)
    pointer = LastCheckpoint(
        version=snap.version,
        size=whole.num_rows,
        parts=n_parts,
        size_in_bytes=written,
        num_of_add_files=snap.files.num_rows,
    )
    _point_to(table, pointer)
    _checksum_too(table.store, snap)
    log.info("wrote %d-part checkpoint of %s at version %d", n_parts, table.uri, snap.version)
    return pointer


def _write_classic(store: LogStore, version: int, state: TableState, total: int) -> LastCheckpoint:
    """One checkpoint file, streamed batch by batch into the file that replaces it whole at the end."""
    path = store.log_file(f"{version:020d}.checkpoint.parquet")
    batches = checkpoint_batches(state)
    first = next(batches)
    config = TableConfiguration(state.protocol, state.metadata)
    with store.replacing(path) as fh:
        with pq.ParquetWriter(fh, first.schema, compression=config.parquet_compression,
                              data_page_version=config.parquet_data_page_version) as writer:  # fmt: skip
            writer.write_table(first)
            for batch in batches:
                writer.write_table(batch)
        written = fh.tell()
    _verify_written(store, path, total)
    return LastCheckpoint(
        version=version, size=total, size_in_bytes=written, num_of_add_files=state.files.num_rows
    )


def _clustered(table: pa.Table) -> pa.Table:
    """Sort file actions by path so each part's content is deterministic across attempts ("Checkpoints")."""
    key = pc.coalesce(
        pc.struct_field(table.column("add"), "path"), pc.struct_field(table.column("remove"), "path"), ""
    )
    return table.take(pc.sort_indices(key))


def _write_v2(table: TableContext, snap: Snapshot, n_sidecars: int) -> LastCheckpoint:
    store = table.store
    whole = checkpoint_table(snap.state())
    is_file = pc.or_(whole.column("add").is_valid(), whole.column("remove").is_valid())
    file_rows = _clustered(whole.filter(is_file)).select(["add", "remove"])
    other = whole.filter(pc.invert(is_file))
    sidecars = []
    rows_per = max(1, math.ceil(file_rows.num_rows / n_sidecars))
    for i in range(n_sidecars if file_rows.num_rows else 0):
        data = parquet_bytes(file_rows.slice(i * rows_per, rows_per), snap.table_configuration)
        name = f"{uuid.uuid4()}.parquet"
        path = store.log_file(f"_sidecars/{name}")
        store.write_replace(path, data)
        _verify_written(store, path, min(rows_per, file_rows.num_rows - i * rows_per))
        sidecars.append(
            {"path": name, "sizeInBytes": len(data), "modificationTime": store.info(path).modification_time}
        )
    n_other = other.num_rows
    top = other.append_column("checkpointMetadata", pa.nulls(n_other, CHECKPOINT_METADATA_T)).append_column(
        "sidecar", pa.nulls(n_other, SIDECAR_T)
    )
    extra = pa.table(
        {name: pa.nulls(1 + len(sidecars), top.schema.field(name).type) for name in top.column_names}
    )
    meta_col = pa.array(
        [{"version": snap.version, "tags": []}] + [None] * len(sidecars), CHECKPOINT_METADATA_T
    )
    side_col = pa.array([None] + [{**s, "tags": []} for s in sidecars], SIDECAR_T)
    extra = extra.set_column(extra.column_names.index("checkpointMetadata"), "checkpointMetadata", meta_col)
    extra = extra.set_column(extra.column_names.index("sidecar"), "sidecar", side_col)
    final = pa.concat_tables([top, extra])
    data = parquet_bytes(final, snap.table_configuration)
    name = f"{snap.version:020d}.checkpoint.{uuid.uuid4()}.parquet"
    store.write_replace(store.log_file(name), data)
    _verify_written(store, store.log_file(name), final.num_rows)
    top = {
        "path": name,
        "sizeInBytes": len(data),
        "modificationTime": store.info(store.log_file(name)).modification_time,
    }
    pointer = LastCheckpoint(
        version=snap.version,
        size=final.num_rows + file_rows.num_rows,
        size_in_bytes=len(data) + sum(s["sizeInBytes"] for s in sidecars),
        num_of_add_files=snap.files.num_rows,
        # Names the top-level file, so a reader prefers it to any other V2 checkpoint of the same version.
        raw={"v2Checkpoint": top},
    )
    _point_to(table, pointer)
    _checksum_too(table.store, snap)
    return pointer


def _verify_written(store: LogStore, path: str, rows: int) -> None:
    """Read back the footer of a checkpoint file just written: ``_last_checkpoint`` only ever points at a
    checkpoint whose every file is there, whole, with the rows written (a store that lost or cut a write
    would otherwise leave readers a checkpoint they must skip, and cleanup one it must not cut at)."""
    try:
        with store.open_input_file(path) as fh:
            found = pq.read_metadata(fh).num_rows
    except (OSError, pa.ArrowException) as exc:
        raise CorruptLogError(
            f"the checkpoint file just written cannot be read back: {exc}", path=path
        ) from exc
    if found != rows:
        raise CorruptLogError(f"the checkpoint file just written holds {found} rows, not {rows}", path=path)


def _checksum_too(store: LogStore, snap: Snapshot) -> None:
    """The checkpoint's version gets its checksum too when it has none: the file list is in memory, so a
    table written by a client that writes none (delta-rs) gets one here, and later commits go on from it."""
    if snap.fields.complete and not store.log_file_exists(checksum_name(snap.version)):
        info = snap.commit_info or {}
        ict = info.get("inCommitTimestamp")
        crc = checksum_of_state(snap.version, snap.protocol, snap.metadata, snap.files,
                                snap.app_transaction_actions, snap.domain_metadata,
                                ict if isinstance(ict, int) else None)  # fmt: skip
        if snap.table_configuration.set_transaction_retention_ms is not None:
            crc = dataclasses.replace(crc, set_transactions=None)
        write_checksum(store, crc)


def _point_to(table: TableContext, pointer: LastCheckpoint) -> None:
    """Move ``_last_checkpoint`` forward only: a slower writer must not point readers back in time."""
    current = read_last_checkpoint(table.store)
    if current is not None and current.version > pointer.version:
        return
    table.store.write_replace(table.store.log_file(LAST_CHECKPOINT), pointer.to_json().encode())
