"""Writing checkpoints: the reconciled state of a version as Parquet, then ``_last_checkpoint``.

Spec: "Checkpoints", "Checkpoint Format", "Checkpoint Schema", "Last Checkpoint File", and V2 checkpoints
(``v2Checkpoint``: a UUID-named top-level file with ``checkpointMetadata`` and ``sidecar`` actions whose
sidecar files hold the file actions). Built column-wise from the snapshot's Arrow tables: each action
column is one struct array, null on the rows of other actions; no Python loop per file.
"""

from __future__ import annotations

import contextlib
import io
import logging
import math
import uuid
import zlib
from collections.abc import Iterable, Iterator, Mapping
from types import SimpleNamespace
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ..actions.actions import ADD, DELETION_VECTOR, REMOVE, STRING_MAP
from ..base.arguments import int_arg
from ..base.arrow_utils import empty_table, encode_uri_paths, from_numpy
from ..base.errors import ChecksumError, CorruptLogError
from ..features.configuration import TableConfiguration
from ..files.last_checkpoint import LAST_CHECKPOINT, LastCheckpoint
from ..files.segment import read_last_checkpoint
from ..files.storage import TRANSIENT_ERRORS, LogStore
from ..files.version_checksum import TotalsBuilder, VersionChecksum, checksum_name, write_checksum
from ..schema.partition_values import typed_partition_values
from ..schema.schema import physical_partition_names
from ..schema.stats import typed_file_stats
from .replay import CheckpointReadError, TableState
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


def _small_actions(state: Any) -> dict[str, pa.Array]:
    """The small actions of ``state`` (anything with protocol, metadata, txns and domains) as arrays."""
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
        # Parquet has no struct without fields: minValues, maxValues or nullCount with no indexed column
        # under it (delta.dataSkippingNumIndexedCols = 0, stats columns without min/max) is left out.
        kept = [f for f in config.stats_schema if not (pa.types.is_struct(f.type) and f.type.num_fields == 0)]
        extra["stats_parsed"] = typed_file_stats(pa.struct(kept), files)
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
    return checkpoint_rows(state, [("add", state.files), ("remove", state.tombstones)], rows)


def checkpoint_rows(
    small_state: Any, pieces: Iterable[tuple[str, pa.Table]], rows: int = _BATCH_ROWS
) -> Iterator[pa.Table]:
    """Checkpoint rows ("Checkpoint Schema"): the small actions of ``small_state`` first, then each piece
    of file actions (``("add" | "remove", table)``, as ``Snapshot.stream_file_actions`` gives them) as
    tables of at most ``rows`` actions, built one at a time."""
    small = _small_actions(small_state)
    config = TableConfiguration(small_state.protocol, small_state.metadata)
    types = {
        **{name: arr.type for name, arr in small.items()},
        "add": _add_struct(config, empty_table(pa.schema(list(ADD)))).type,
        "remove": _file_struct(empty_table(pa.schema(list(REMOVE))), _REMOVE_FIELDS, {}).type,
    }

    def rows_of(name: str, values: pa.Array) -> pa.Table:
        n = len(values)
        return pa.table({c: values if c == name else pa.nulls(n, types[c]) for c in _COLUMN_ORDER})

    yield pa.concat_tables(
        [rows_of(n, small[n]) for n in ("protocol", "metaData", "txn", "domainMetadata") if len(small[n])]
    )
    for kind, table in pieces:
        for group in _groups(table, rows):
            if kind == "add":
                yield pa.concat_tables([rows_of("add", _add_struct(config, part)) for part in group])
            else:
                removes = [rows_of("remove", _file_struct(part, _REMOVE_FIELDS, {})) for part in group]
                yield pa.concat_tables(removes)


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
    _check_checksum(snap)
    try:
        return _write(table, snap, parts, part_size)
    except (CheckpointReadError, FileNotFoundError) as exc:
        # The checkpoint being streamed from turned out broken, or log cleanup deleted a file under the
        # stream: the whole replay, with its fallbacks (an older checkpoint, listing again).
        log.warning("%s; writing the checkpoint from the whole replay instead", exc)
        snap.files  # noqa: B018 - read whole, with the fallbacks
        return _write(table, snap, parts, part_size)


def _check_checksum(snap: Snapshot) -> None:
    """As Delta Spark validates before it checkpoints: a checkpoint would carry the checksum's small state
    into the log, so a checksum the log contradicts stops it, by name. The small actions are compared
    here (a read of the log's small actions); the file totals as the file actions stream by."""
    if snap.checksum is None:
        return
    if snap.files_loaded:
        wrong = snap.checksum_disagreement()
    else:
        protocol, metadata, txns, domains = snap.log_small_state()
        pairs = (("protocol", snap.protocol, protocol), ("metadata", snap.metadata, metadata),
                 ("setTransactions", snap.checksum.set_transactions, txns),
                 ("domainMetadata", snap.checksum.domain_metadata, domains))  # fmt: skip
        wrong = [name for name, mine, theirs in pairs if mine is not None and _plain(mine) != _plain(theirs)]
    if wrong:
        raise _disagreement(snap, wrong)


def _plain(value: Any) -> Any:
    return dict(value) if isinstance(value, Mapping) else value


def _disagreement(snap: Snapshot, wrong: list[str]) -> ChecksumError:
    return ChecksumError(
        f"cannot checkpoint {snap.store.uri} at version {snap.version}: the version checksum it was read "
        f"from disagrees with the log on {', '.join(wrong)}; delete or fix the checksum file and try again",
        path=snap.checksum_source,
    )


class _Tally:
    """What a streamed checkpoint wrote: rows, adds, removes, and the file totals of its adds (checked
    against the snapshot's checksum before the checkpoint is made visible, and the checksum written
    with it when the version has none)."""

    def __init__(self, snap: Snapshot) -> None:
        self.snap = snap
        self.totals = TotalsBuilder()
        self.removes = 0

    def pieces(self) -> Iterator[tuple[str, pa.Table]]:
        for kind, table in self.snap.stream_file_actions():
            if kind == "add":
                self.totals.add(table)
            else:
                self.removes += table.num_rows
            yield kind, table

    @property
    def adds(self) -> int:
        return self.totals.num_files

    def rows(self, small: int) -> int:
        return small + self.adds + self.removes

    def check(self) -> None:
        """Raise (inside the writers' context, so nothing is made visible) when the file totals written
        disagree with the checksum the snapshot started from."""
        crc = self.snap.checksum
        if crc is None or crc.totals is None:
            return
        found = self.totals.totals()
        pairs = (("numFiles", crc.totals.num_files, found.num_files),
                 ("tableSizeBytes", crc.totals.table_size_bytes, found.table_size_bytes))  # fmt: skip
        wrong = [name for name, a, b in pairs if a != b]
        if wrong:
            raise _disagreement(self.snap, wrong)


def _estimated_actions(snap: Snapshot) -> int:
    """How many actions the checkpoint will hold, to choose its parts: exact when the file list is in
    memory, else the checksum's file count (tombstones unknown: the parts' size is a soft limit). The file
    list is read when neither is there."""
    small = 2 + len(snap.app_transaction_actions) + len(snap.domain_metadata)
    if not snap.files_loaded and snap.checksum is not None and snap.checksum.totals is not None:
        return small + snap.checksum.totals.num_files
    return small + snap.files.num_rows + snap.tombstones.num_rows


def _write(table: TableContext, snap: Snapshot, parts: int | None, part_size: int | None) -> LastCheckpoint:
    store = table.store
    config = snap.table_configuration
    size_limit = part_size or config.checkpoint_part_size or DEFAULT_PART_SIZE
    estimate = _estimated_actions(snap)
    tally = _Tally(snap)
    batches = checkpoint_rows(_small_of(snap), tally.pieces())
    if config.v2_checkpoints:
        # A table with the v2Checkpoint feature gets V2 checkpoints (checkpointMetadata, sidecars).
        pointer = _write_v2(store, snap, parts or 1, batches, tally, estimate)
        kind = "V2 checkpoint"
    else:
        n_parts = parts or max(1, math.ceil(estimate / size_limit))
        if n_parts == 1:
            pointer = _write_classic(store, snap.version, config, batches, tally)
            kind = "checkpoint"
        else:
            pointer = _write_multi_part(store, snap.version, config, batches, tally, n_parts)
            kind = f"{n_parts}-part checkpoint"
    _point_to(table, pointer)
    _checksum_too(store, snap, tally)
    log.info("wrote %s of %s at version %d", kind, table.uri, snap.version)
    return pointer


def _small_of(snap: Snapshot) -> SimpleNamespace:
    return SimpleNamespace(protocol=snap.protocol, metadata=snap.metadata, txns=snap.app_transaction_actions,
                           domains=snap.domain_metadata)  # fmt: skip


def _write_classic(
    store: LogStore, version: int, config: TableConfiguration, batches: Iterator[pa.Table], tally: _Tally
) -> LastCheckpoint:
    """One checkpoint file, streamed batch by batch into the file that replaces it whole at the end."""
    path = store.log_file(f"{version:020d}.checkpoint.parquet")
    first = next(batches)
    with store.replacing(path) as fh:
        with pq.ParquetWriter(fh, first.schema, compression=config.parquet_compression,
                              data_page_version=config.parquet_data_page_version) as writer:  # fmt: skip
            writer.write_table(first)
            for batch in batches:
                writer.write_table(batch)
        tally.check()
        written = fh.tell()
    total = tally.rows(first.num_rows)
    _verify_written(store, path, total)
    return LastCheckpoint(version=version, size=total, size_in_bytes=written, num_of_add_files=tally.adds)


def _write_multi_part(
    store: LogStore,
    version: int,
    config: TableConfiguration,
    batches: Iterator[pa.Table],
    tally: _Tally,
    parts: int,
) -> LastCheckpoint:
    """A multi-part checkpoint, streamed batch by batch into its parts: the small actions go to the first
    part, each file action to the part its path's CRC-32 names. The parts of two writers of the same
    checkpoint then hold the same actions whatever order their file lists were in, so a reader never mixes
    parts that lose or repeat a file (each part file is replaced whole, and writers may race on them)."""
    names = [f"{version:020d}.checkpoint.{i + 1:010d}.{parts:010d}.parquet" for i in range(parts)]
    paths = [store.log_file(n) for n in names]
    rows = [0] * parts
    with contextlib.ExitStack() as stack:
        handles = [stack.enter_context(store.replacing(p)) for p in paths]
        writers: list[pq.ParquetWriter] = []
        for batch in batches:
            if not writers:
                options = {"compression": config.parquet_compression,
                           "data_page_version": config.parquet_data_page_version}  # fmt: skip
                writers = [
                    stack.enter_context(pq.ParquetWriter(fh, batch.schema, **options)) for fh in handles
                ]
            part = _parts_of(batch, parts)
            for i in range(parts):
                chunk = batch.filter(from_numpy(part == i))
                if chunk.num_rows:
                    writers[i].write_table(chunk)
                    rows[i] += chunk.num_rows
        for writer in writers:
            writer.close()
        tally.check()
    for path, n in zip(paths, rows, strict=True):
        _verify_written(store, path, n)
    return LastCheckpoint(
        version=version,
        size=sum(rows),
        parts=parts,
        size_in_bytes=sum(store.info(p).size for p in paths),
        num_of_add_files=tally.adds,
    )


def _parts_of(batch: pa.Table, parts: int) -> np.ndarray:
    """The part of each row: 0 for the small actions, else the CRC-32 of the file action's path."""
    add, remove = batch.column("add"), batch.column("remove")
    path = pc.coalesce(pc.struct_field(add, "path"), pc.struct_field(remove, "path"))
    out = np.zeros(batch.num_rows, dtype=np.int64)
    valid = path.is_valid().to_numpy(zero_copy_only=False)
    names = path.filter(path.is_valid()).to_pylist()
    hashes = (zlib.crc32(n.encode()) % parts for n in names)
    out[valid] = np.fromiter(hashes, dtype=np.int64, count=len(names))
    return out


def _write_v2(
    store: LogStore,
    snap: Snapshot,
    n_sidecars: int,
    batches: Iterator[pa.Table],
    tally: _Tally,
    estimate: int,
) -> LastCheckpoint:
    """A V2 checkpoint: the file actions streamed into about ``n_sidecars`` UUID-named sidecars (each
    attempt writes its own), then the top-level file with the small actions and one ``sidecar`` action
    each."""
    config = snap.table_configuration
    other = next(batches)  # the small actions come first
    rows_per = max(1, math.ceil(max(estimate - other.num_rows, 1) / n_sidecars))
    sidecars: list[dict] = []
    pending = _rebatched((b.select(["add", "remove"]) for b in batches), rows_per)
    for chunk in pending:
        name = f"{uuid.uuid4()}.parquet"
        path = store.log_file(f"_sidecars/{name}")
        with store.replacing(path) as fh:
            with pq.ParquetWriter(fh, chunk[0].schema, compression=config.parquet_compression,
                                  data_page_version=config.parquet_data_page_version) as writer:  # fmt: skip
                for part in chunk:
                    writer.write_table(part)
            size = fh.tell()
        _verify_written(store, path, sum(p.num_rows for p in chunk))
        mtime = store.info(path).modification_time
        sidecars.append({"path": name, "sizeInBytes": size, "modificationTime": mtime})
    tally.check()  # before the top-level file makes any of it visible
    file_rows = tally.adds + tally.removes
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
        size=final.num_rows + file_rows,
        size_in_bytes=len(data) + sum(s["sizeInBytes"] for s in sidecars),
        num_of_add_files=tally.adds,
        # Names the top-level file, so a reader prefers it to any other V2 checkpoint of the same version.
        raw={"v2Checkpoint": top},
    )
    return pointer


def _rebatched(tables: Iterator[pa.Table], rows: int) -> Iterator[list[pa.Table]]:
    """``tables`` regrouped into lists of exactly ``rows`` rows (the last may hold fewer), slicing across
    them: what one sidecar holds."""
    group: list[pa.Table] = []
    size = 0
    for table in tables:
        start = 0
        while start < table.num_rows:
            take = min(rows - size, table.num_rows - start)
            group.append(table.slice(start, take))
            size += take
            start += take
            if size == rows:
                yield group
                group, size = [], 0
    if group:
        yield group


_READ_BACK_TRIES = 3


def _verify_written(store: LogStore, path: str, rows: int) -> None:
    """Read back the footer of a checkpoint file just written: ``_last_checkpoint`` only ever points at a
    checkpoint whose every file is there, whole, with the rows written (a store that lost or cut a write
    would otherwise leave readers a checkpoint they must skip, and cleanup one it must not cut at)."""
    for attempt in range(1, _READ_BACK_TRIES + 1):
        try:
            with store.open_input_file(path) as fh:
                found = pq.read_metadata(fh).num_rows
            break
        except TRANSIENT_ERRORS:
            # The store was not reached, which says nothing of the file: try again, then give up with
            # that error (``_last_checkpoint`` is not written), not with a corrupt log.
            if attempt == _READ_BACK_TRIES:
                raise
        except (OSError, pa.ArrowException) as exc:
            raise CorruptLogError(
                f"the checkpoint file just written cannot be read back: {exc}", path=path
            ) from exc
    if found != rows:
        raise CorruptLogError(f"the checkpoint file just written holds {found} rows, not {rows}", path=path)


def _checksum_too(store: LogStore, snap: Snapshot, tally: _Tally) -> None:
    """The checkpoint's version gets its checksum too when it has none: its file totals were counted as
    it was written, so a table written by a client that writes none (delta-rs) gets one here, and later
    commits go on from it."""
    if not snap.fields.complete or store.log_file_exists(checksum_name(snap.version)):
        return
    info = snap.commit_info or {}
    ict = info.get("inCommitTimestamp")
    crc = VersionChecksum(
        version=snap.version,
        protocol=snap.protocol,
        metadata=snap.metadata,
        totals=tally.totals.totals(),
        set_transactions=None if snap.table_configuration.set_transaction_retention_ms is not None
        else dict(snap.app_transaction_actions),
        domain_metadata=dict(snap.domain_metadata),
        in_commit_timestamp=ict if isinstance(ict, int) else None,
    )  # fmt: skip
    write_checksum(store, crc)


def _point_to(table: TableContext, pointer: LastCheckpoint) -> None:
    """Move ``_last_checkpoint`` forward only: a slower writer must not point readers back in time."""
    current = read_last_checkpoint(table.store)
    if current is not None and current.version > pointer.version:
        return
    table.store.write_replace(table.store.log_file(LAST_CHECKPOINT), pointer.to_json().encode())
