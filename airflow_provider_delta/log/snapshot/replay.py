"""Replay: turn the files of a log segment into table state ("Action Reconciliation").

Vectorised with Arrow: checkpoints are read as Arrow tables and add/remove actions of JSON commits are
parsed by Arrow's JSON reader. Reconciliation is a hash lookup of the (few) keys touched by commits
against the checkpoint's (many) files, then a group-by over the commits' own actions, never a Python loop
per action. The small actions (protocol, metaData, txn, domainMetadata, commitInfo) are parsed in Python.

A replay keeps the fields of file actions its ``FileFields`` name (all by default): checkpoints are read
with Parquet column projection and commits' lines lose the other fields as they are parsed, through the
same code whatever is kept.
"""

from __future__ import annotations

import posixpath
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ..actions.actions import ALL_FILE_FIELDS, DomainMetadata, FileFields, Metadata, Protocol, SetTransaction
from ..base.arrow_utils import (
    EMPTY_STRING,
    conform,
    empty_table,
    from_numpy,
    from_strings,
    single,
    to_numpy,
    true_rows,
)
from ..base.errors import CorruptLogError
from ..features.properties import check_properties
from ..files.commit_json import Actions, parse_json_actions, struct_to_table
from ..files.segment import Checkpoint, LogSegment
from ..files.storage import FileMeta, LogStore
from ..schema.schema import check_partition_columns, parse_schema_string

_KEY_SEP = from_strings(["\x00"])[0]  # separates path and deletion-vector id in a file's reconciliation key
_AT = from_strings(["@"])[0]
# Chunks the file list of an updated snapshot may have before it is compacted into one (a full copy): each
# update adds a few (the new files, and the slices around the files it removed).
_MAX_CHUNKS = 512
# Up to this many rows are dropped by slicing around them (no copy of the others); more, by a filter.
_MAX_SLICED = 64


class CheckpointReadError(Exception):
    """A checkpoint file could not be read; the snapshot falls back to an older checkpoint or JSON."""


@dataclass(frozen=True)
class TableState:
    """The reconciled state at one version; ``files``/``tombstones`` are Arrow tables of the ADD/REMOVE
    fields that ``fields`` keeps (all of them unless a caller asked for fewer)."""

    protocol: Protocol | None
    metadata: Metadata | None
    txns: dict[str, SetTransaction]
    domains: dict[str, DomainMetadata]
    files: pa.Table
    tombstones: pa.Table
    commit_infos: dict[int, dict[str, Any]]
    fields: FileFields = ALL_FILE_FIELDS


# -- checkpoints ----------------------------------------------------------------------------------------
_CHECKPOINT_COLUMNS = (
    "add", "remove", "metaData", "protocol", "txn", "domainMetadata", "sidecar", "checkpointMetadata"
)  # fmt: skip
# Chooses the row groups of a checkpoint Parquet file to read for its files (None: all of them).
RowGroupChooser = Callable[[pq.ParquetFile], "list[int] | None"]
_SMALL_COLUMNS = ("metaData", "protocol", "txn", "domainMetadata", "sidecar", "checkpointMetadata")
_SIDECAR_COLUMNS = ("add", "remove")
_BATCH_ROWS = 65_536


def _parquet_steps(
    acc: Actions,
    store: LogStore,
    path: str,
    wanted: tuple[str, ...],
    version: int,
    touched: pa.Array | None,
    *,
    sidecar: bool = False,
    small_only: bool = False,
    row_groups: RowGroupChooser | None = None,
) -> Iterator[None]:
    """Stream one checkpoint Parquet file into ``acc``, batch by batch, yielding after each (with
    ``small_only``, only the row groups that may hold one of the ``wanted`` small actions, as their
    statistics tell; with ``row_groups``, only the row groups it chooses for their files and those that
    may hold a small action).

    Files that a later commit touches are dropped per batch, so the whole checkpoint is never held twice:
    a checkpoint of millions of files costs about one copy of its live file list. A sidecar must have the
    checkpoint schema's ``add``/``remove`` structs: any other file there would otherwise read as "no files".
    """
    try:
        if store.protocol in ("file", "local"):
            pf = pq.ParquetFile(path)
        else:
            pf = pq.ParquetFile(store.open_input_file(path))
        schema = pf.schema_arrow
        if sidecar and not any(
            n in schema.names and pa.types.is_struct(schema.field(n).type) for n in _SIDECAR_COLUMNS
        ):
            raise CheckpointReadError(
                f"sidecar {path} is not a checkpoint file: it has no add or remove struct column "
                f"(columns: {', '.join(schema.names[:10])})"
            )
        columns = _projected_columns(schema, wanted, acc.fields)
        # A projected read decodes a few small columns: decoding threads gain nothing there (0.18-0.21 s
        # without them, 0.23-0.60 s with, for the paths of 1,000,000 adds) and each thread's allocator heap
        # keeps 10-15 MiB after it. A full read keeps them: its stats columns are worth decoding in parallel.
        threads = acc.fields.complete and not small_only
        groups = row_groups_with_small_actions(pf, wanted) if small_only else None
        if row_groups is not None and not small_only:
            groups = _chosen(pf, row_groups, sidecar)
        if groups == []:
            return
        # One reader per row group: a single reader over several keeps every row group it has read until
        # it ends (pyarrow 26: 12.5 MiB per batch of 65,536 adds, 1.8 GiB over a checkpoint of 10,000,000),
        # where one per row group holds only the row group at hand.
        for rg in range(pf.metadata.num_row_groups) if groups is None else groups:
            for batch in pf.iter_batches(batch_size=_BATCH_ROWS, columns=columns, use_threads=threads,
                                         row_groups=[rg]):  # fmt: skip
                apply_checkpoint_batch(acc, batch, version, touched, path)
                yield
    except CheckpointReadError:
        raise
    except (OSError, pa.ArrowException, ValueError, TypeError) as exc:
        raise CheckpointReadError(f"cannot read checkpoint file {path}: {exc}") from exc


def _chosen(pf: pq.ParquetFile, row_groups: RowGroupChooser, sidecar: bool) -> list[int] | None:
    """The row groups ``row_groups`` chooses, and (in a checkpoint, not a sidecar) every one that may hold
    a small action: a checkpoint is validated by its protocol and metaData wherever they are."""
    chosen = row_groups(pf)
    if chosen is None or sidecar:
        return chosen
    small = row_groups_with_small_actions(pf, _SMALL_COLUMNS)
    if small is None:
        return None
    return sorted(set(chosen) | set(small))


def _projected_columns(schema: pa.Schema, wanted: tuple[str, ...], fields: FileFields) -> list[str]:
    """The Parquet columns to read: small actions whole, file actions only as the leaves ``fields`` keeps
    (``add.path``, ``add.deletionVector`` ...), so pyarrow never decodes the others (``stats``)."""
    columns = []
    for name in wanted:
        if name not in schema.names:
            continue
        kept, type_ = fields.kept(name), schema.field(name).type
        if kept is None or not pa.types.is_struct(type_):
            columns.append(name)
        else:
            columns.extend(f"{name}.{f.name}" for f in type_ if f.name in kept)
    return columns


# A required leaf of each small action: a row group whose statistics count it null on every row holds none.
_REQUIRED_LEAF = {
    "protocol": "protocol.minReaderVersion",
    "metaData": "metaData.id",
    "txn": "txn.appId",
    "domainMetadata": "domainMetadata.domain",
    "sidecar": "sidecar.path",
    "checkpointMetadata": "checkpointMetadata.version",
}


def row_groups_with_small_actions(pf: pq.ParquetFile, wanted: tuple[str, ...]) -> list[int] | None:
    """Row groups that may hold one of the ``wanted`` actions (``None``: all of them). Writers put the
    few small actions together (ours and Delta Spark's), so a checkpoint of millions of files is mostly
    row groups of file actions only, skipped here without being read."""
    md = pf.metadata
    leaves = {_REQUIRED_LEAF[n] for n in wanted if n in _REQUIRED_LEAF and n in pf.schema_arrow.names}
    columns = [i for i in range(md.num_columns) if md.schema.column(i).path in leaves]
    if len(columns) != len(leaves):
        return None
    out = []
    for rg in range(md.num_row_groups):
        group = md.row_group(rg)
        for i in columns:
            stats = group.column(i).statistics
            if stats is None or not stats.has_null_count or stats.null_count < group.num_rows:
                out.append(rg)
                break
    return out


def apply_checkpoint_batch(
    acc: Actions, batch: pa.RecordBatch, version: int, touched: pa.Array | None, path: str = "checkpoint"
) -> None:
    names = batch.schema.names
    for name in ("protocol", "metaData", "txn", "domainMetadata", "sidecar", "checkpointMetadata"):
        if name in names:
            col = batch.column(name)
            if col.null_count < len(col):
                for body in col.filter(col.is_valid()).to_pylist(maps_as_pydicts="lossy"):
                    if not isinstance(body, dict):
                        raise CheckpointReadError(f"{path}: the {name} column is not a struct")
                    try:
                        acc.apply_small(name, body, version, (path, None))
                    except ValueError as exc:
                        raise CheckpointReadError(f"{path}: {exc}") from exc
    targets = (("add", acc.fields.add_type, acc.adds), ("remove", acc.fields.remove_type, acc.removes))
    for name, target, bucket in targets:
        if name not in names:
            continue
        col = batch.column(name)
        if col.null_count == len(col):
            continue
        # conform() also reshapes what legacy writers stored (maps as structs, missing fields). Most
        # batches of a big checkpoint hold file actions only: no copy of them then.
        actions = conform(col if col.null_count == 0 else col.filter(col.is_valid()), target)
        _check_utf8(actions, name, path)
        table = struct_to_table(actions)
        if touched is not None:
            table = _drop_keys(table, touched)
        if table.num_rows:
            bucket.append(table)


# Parquet readers do not check that strings are UTF-8; these fields are the ones turned into Python strings
# (paths, partition values) and must not fail later, in whatever reads them. The rest (stats above all,
# most of a checkpoint's bytes) is left unchecked to keep the read fast.
_UTF8_CHECKED = ("path", "partitionValues")


def _check_utf8(actions: pa.StructArray, kind: str, path: str) -> None:
    for name in _UTF8_CHECKED:
        if actions.type.get_field_index(name) >= 0:
            try:
                actions.field(name).validate(full=True)
            except pa.ArrowInvalid as exc:
                raise CheckpointReadError(f"{path}: {kind}.{name} is not valid UTF-8: {exc}") from None


def read_checkpoint(
    acc: Actions,
    store: LogStore,
    segment: LogSegment,
    touched: pa.Array | None = None,
    *,
    small_only: bool = False,
) -> None:
    """Read the segment's checkpoint into ``acc`` (see ``checkpoint_steps``)."""
    for _ in checkpoint_steps(acc, store, segment, touched, small_only=small_only):
        pass


def checkpoint_steps(
    acc: Actions,
    store: LogStore,
    segment: LogSegment,
    touched: pa.Array | None = None,
    *,
    small_only: bool = False,
    row_groups: RowGroupChooser | None = None,
) -> Iterator[None]:
    """Read the segment's checkpoint into ``acc``, leaving out files whose keys are in ``touched``,
    yielding after each batch (a caller may take ``acc.adds`` away there: a streamed file list).

    A checkpoint is used only when it is complete and valid (``CheckpointReadError`` otherwise, and the
    reader falls back to an older checkpoint or the JSON commits): every file readable, exactly one
    protocol and one metaData, and for a V2 checkpoint exactly one ``checkpointMetadata`` of its own version
    and every sidecar present with the checkpoint schema ("V2 Checkpoint", "Sidecar Files"). A file that
    is not what it claims is never read as "no actions". With ``small_only`` the file actions are left
    out (no ``add``/``remove`` column, no sidecar is read): what a snapshot needs before its file list.
    """
    cp = segment.checkpoint
    if cp is None:
        return
    for f in cp.files:
        path = store.log_file(f.name)
        if f.name.endswith(".json"):
            _read_json_checkpoint(acc, store, path, f.name, cp.version, touched)
            yield
        else:
            wanted = _SMALL_COLUMNS if small_only else _CHECKPOINT_COLUMNS
            yield from _parquet_steps(acc, store, path, wanted, cp.version, touched, small_only=small_only,
                                      row_groups=row_groups)  # fmt: skip
    where = f"checkpoint {', '.join(store.log_file(n) for n in cp.names)}"
    if acc.protocol is None or acc.metadata is None:
        missing = " and ".join(
            n for n, a in (("protocol", acc.protocol), ("metaData", acc.metadata)) if a is None
        )
        raise CheckpointReadError(f"{where} holds no {missing} action: it is not a complete checkpoint")
    _check_checkpoint_metadata(acc, cp.kind == "v2", cp.version, where)
    if small_only:
        acc.sidecars.clear()
        return
    # V2 checkpoints keep their file actions in sidecar files ("V2 Checkpoint", "Sidecar Files").
    for rel in acc.sidecars:
        path = store.log_file(posixpath.join("_sidecars", rel)) if "/" not in rel else _resolve(store, rel)
        yield from _parquet_steps(acc, store, path, _SIDECAR_COLUMNS, cp.version, touched, sidecar=True,
                                  row_groups=row_groups)  # fmt: skip
    acc.sidecars.clear()


def _read_json_checkpoint(
    acc: Actions, store: LogStore, path: str, name: str, version: int, touched: pa.Array | None
) -> None:
    try:
        data = store.read_log_file(name)
    except OSError as exc:
        raise CheckpointReadError(f"cannot read checkpoint file {path}: {exc}") from exc
    try:
        parse_json_actions(acc, [(version, path, data)])
    except CorruptLogError as exc:
        raise CheckpointReadError(str(exc)) from exc
    keep = (lambda t: t) if touched is None else (lambda t: _drop_keys(t, touched))
    acc.adds = [keep(t.drop_columns(["_version"])) for t in acc.adds]
    acc.removes = [keep(t.drop_columns(["_version"])) for t in acc.removes]


def _check_checkpoint_metadata(acc: Actions, v2: bool, version: int, where: str) -> None:
    """A V2 checkpoint carries exactly one ``checkpointMetadata`` naming its own version; a stale copy of
    another version's checkpoint under this name must not be trusted ("V2 Checkpoint")."""
    found = acc.checkpoint_metadata
    if not v2 and not found and not acc.sidecars:
        return
    if len(found) != 1:
        raise CheckpointReadError(
            f"{where} holds {len(found)} checkpointMetadata actions; a V2 checkpoint has one"
        )
    claimed = found[0].get("version")
    if not isinstance(claimed, int) or isinstance(claimed, bool) or claimed != version:
        raise CheckpointReadError(
            f"{where} is named for version {version} but its checkpointMetadata says version {claimed!r}"
        )
    acc.checkpoint_metadata.clear()


def check_checkpoint(
    store: LogStore, checkpoint: Checkpoint, fields: FileFields = ALL_FILE_FIELDS
) -> TableState:
    """Read ``checkpoint`` whole, as the reader would, and return its state; ``CheckpointReadError`` when it
    is not a complete, valid checkpoint. The one notion of "valid" for the reader, log cleanup's cut-off
    and checkpoint writers (see ``read_checkpoint``)."""
    return replay(store, LogSegment(checkpoint.version, checkpoint, ()), [], fields)


def _resolve(store: LogStore, rel: str) -> str:
    if "://" in rel:
        return rel.split("://", 1)[1]
    return store.log_file(rel)


# -- reconciliation -------------------------------------------------------------------------------------
def reconciliation_keys(table: pa.Table) -> pa.Array:
    """Reconciliation key: decoded path, plus the deletion vector's unique id when one is attached."""
    paths = single(table.column("path"))
    dv = single(table.column("deletionVector"))
    if dv.null_count == len(dv):
        return paths
    dv_id = pc.binary_join_element_wise(
        dv.field("storageType"),
        dv.field("pathOrInlineDv"),
        pc.if_else(
            dv.field("offset").is_null(),
            EMPTY_STRING,
            pc.binary_join_element_wise(_AT, dv.field("offset").cast(pa.string()), EMPTY_STRING),
        ),
        EMPTY_STRING,
    )
    return pc.if_else(dv.is_valid(), pc.binary_join_element_wise(paths, dv_id, _KEY_SEP), paths)


def concat_file_actions(tables: list[pa.Table], target: pa.StructType, *, versioned: bool = True) -> pa.Table:
    """One table of file actions (with their ``_version`` unless not ``versioned``), empty when none."""
    tables = [t for t in tables if t.num_rows]
    if not tables:
        fields = list(target) + ([pa.field("_version", pa.int64())] if versioned else [])
        return empty_table(pa.schema(fields))
    return pa.concat_tables(tables) if len(tables) > 1 else tables[0]


def _drop_keys(table: pa.Table, keys: pa.Array) -> pa.Table:
    """Rows whose key is not in ``keys``. No copy when none is (appends touch only new paths), nor when a
    few are (a commit that removes some of a million files): the rest is kept as slices of ``table``."""
    if table.num_rows == 0:
        return table
    hit = pc.is_in(_chunked_keys(table), value_set=keys)
    rows = true_rows(hit).astype(np.int64)
    if len(rows) == 0:
        return table
    if len(rows) > _MAX_SLICED:
        return table.filter(pc.invert(hit))
    starts = np.concatenate([[0], rows + 1])
    stops = np.concatenate([rows, [table.num_rows]])
    pieces = [table.slice(a, b - a) for a, b in zip(starts.tolist(), stops.tolist(), strict=True) if b > a]
    return pa.concat_tables(pieces) if pieces else table.slice(0, 0)


def _chunked_keys(table: pa.Table) -> pa.ChunkedArray | pa.Array:
    """``reconciliation_keys`` without first copying a big file list into one array when it has no
    deletion vectors."""
    dv = table.column("deletionVector")
    return table.column("path") if dv.null_count == len(dv) else reconciliation_keys(table)


def reconcile(adds: pa.Table, removes: pa.Table) -> tuple[pa.Table, pa.Table]:
    """Latest action per key wins among the commits' own file actions ("Action Reconciliation")."""
    if adds.num_rows + removes.num_rows == 0:
        return adds, removes
    add_keys, remove_keys = reconciliation_keys(adds), reconciliation_keys(removes)
    n_add = adds.num_rows
    versions = pa.concat_arrays([single(adds.column("_version")), single(removes.column("_version"))])
    position = np.arange(len(versions), dtype=np.int64)
    order = to_numpy(versions) * (len(versions) + 1) + position
    # The action with the highest (version, position) of each key wins: sort by key, then order, and take
    # the last of each key's run.
    codes = to_numpy(pc.dictionary_encode(pa.concat_arrays([add_keys, remove_keys])).indices)
    ranked = np.lexsort((order, codes))
    sorted_codes = codes[ranked]
    last = np.ones(len(ranked), dtype=bool)
    last[:-1] = sorted_codes[1:] != sorted_codes[:-1]
    winners = np.sort(ranked[last])
    win_adds = winners[winners < n_add]
    win_removes = winners[winners >= n_add] - n_add
    return adds.take(from_numpy(win_adds)), removes.take(from_numpy(win_removes))


def _parse_commits(
    store: LogStore, commits: tuple[FileMeta, ...], datas: list[bytes], fields: FileFields
) -> Actions:
    new = Actions(fields=fields)
    chunks = [
        (_commit_version(f), store.log_file(f.name), data) for f, data in zip(commits, datas, strict=True)
    ]
    parse_json_actions(new, chunks)
    return new


def _touched(adds: pa.Table, removes: pa.Table) -> pa.Array | None:
    if adds.num_rows + removes.num_rows == 0:
        return None
    return pa.concat_arrays([reconciliation_keys(adds), reconciliation_keys(removes)]).unique()


def check_metadata(metadata: Metadata) -> None:
    """Raise ``ValueError`` unless a reader can use ``metadata``: its schema, partition columns and the
    table properties the core interprets. Only the metaData that wins is checked, as only it is used."""
    schema = parse_schema_string(metadata.schema_string)
    check_partition_columns(schema, metadata.partition_columns)
    check_properties(metadata.configuration)


def _merge(base: Actions, new: Actions, commit_adds: pa.Table, commit_removes: pa.Table) -> TableState:
    """``base`` (reconciled, without the keys the commits touch) overlaid with the commits' actions."""
    if new.metadata is not None:
        # Checked here, as the snapshot is built, with the file and line the winning metaData came from.
        try:
            check_metadata(new.metadata)
        except ValueError as exc:
            path, line = new.metadata_origin or (None, None)
            raise CorruptLogError(f"invalid metaData: {exc}", path=path, line=line) from None
    win_adds, win_removes = reconcile(commit_adds, commit_removes)
    fields = base.fields
    files = concat_file_actions(
        [*base.adds, win_adds.drop_columns(["_version"])], fields.add_type, versioned=False
    )
    tombstones = concat_file_actions(
        [*base.removes, win_removes.drop_columns(["_version"])], fields.remove_type, versioned=False
    )
    domains = {**base.domains, **new.domains}
    return TableState(
        protocol=new.protocol or base.protocol,
        metadata=new.metadata or base.metadata,
        txns={**base.txns, **new.txns},
        domains={k: v for k, v in domains.items() if not v.removed},
        files=files,
        tombstones=tombstones,
        commit_infos=new.commit_infos,
        fields=fields,
    )


def replay(
    store: LogStore,
    segment: LogSegment,
    commit_data: list[bytes],
    fields: FileFields = ALL_FILE_FIELDS,
    cover: Sequence[FileMeta] | None = None,
) -> TableState:
    """Reconstruct the state of ``segment``; ``commit_data`` holds the bytes of its commit files, in order,
    or of ``cover`` when given (``LogSegment.commit_cover``: log compactions in place of their commits).

    The commits are read first (they are small): the keys they touch let the checkpoint be streamed and
    filtered as it is read, as delta-kernel-rs does, instead of being materialised and filtered after.
    Only the file-action ``fields`` asked for are read and kept.
    """
    new = _parse_commits(store, tuple(segment.commits if cover is None else cover), commit_data, fields)
    commit_adds = concat_file_actions(new.adds, fields.add_type)
    commit_removes = concat_file_actions(new.removes, fields.remove_type)
    base = Actions(fields=fields)
    read_checkpoint(base, store, segment, _touched(commit_adds, commit_removes))
    if new.metadata is None and base.metadata is not None:
        # The checkpoint's metaData wins: a bad one makes the checkpoint unreadable, so the snapshot falls
        # back to an older checkpoint or the commits, as for any checkpoint that cannot be read.
        try:
            check_metadata(base.metadata)
        except ValueError as exc:
            where = base.metadata_origin[0] if base.metadata_origin else "checkpoint"
            raise CheckpointReadError(f"invalid metaData in {where}: {exc}") from None
    return _merge(base, new, commit_adds, commit_removes)


def apply_commits(
    state: TableState, store: LogStore, commits: tuple[FileMeta, ...], commit_data: list[bytes]
) -> TableState:
    """The state after further ``commits``, from an already reconciled ``state`` (incremental update);
    the same file-action fields are kept as in ``state``."""
    fields = state.fields
    new = _parse_commits(store, commits, commit_data, fields)
    commit_adds = concat_file_actions(new.adds, fields.add_type)
    commit_removes = concat_file_actions(new.removes, fields.remove_type)
    touched = _touched(commit_adds, commit_removes)
    drop = (lambda t: t) if touched is None else (lambda t: _drop_keys(t, touched))
    base = Actions(
        adds=[drop(state.files)],
        removes=[drop(state.tombstones)],
        protocol=state.protocol,
        metadata=state.metadata,
        txns=dict(state.txns),
        domains=dict(state.domains),
        fields=fields,
    )
    state = _merge(base, new, commit_adds, commit_removes)
    if state.files.num_columns and state.files.column(0).num_chunks > _MAX_CHUNKS:
        # Each update appends chunks; compact now and then so lookups stay one pass over one array.
        state = replace(state, files=state.files.combine_chunks())
    return state


def _commit_version(f: FileMeta) -> int:
    return int(f.name.split(".", 1)[0])


def stream_live_files(
    store: LogStore,
    segment: LogSegment,
    commit_data: list[bytes],
    cover: Sequence[FileMeta],
    fields: FileFields,
    keep: Callable[[pa.Table], pa.Table],
    row_groups: RowGroupChooser | None = None,
) -> Iterator[pa.Table]:
    """The live files of ``segment`` as a stream of tables, each already cut down by ``keep`` (a filter of
    the rows a caller wants): only what ``keep`` keeps is ever held, so a filtered scan of a table of
    millions of files holds its matches, not the table (see ``stream_file_actions``). ``row_groups``
    chooses the checkpoint's row groups to read (those it leaves out must hold no file ``keep`` keeps)."""
    for kind, table in stream_file_actions(store, segment, commit_data, cover, fields, row_groups=row_groups):
        if kind == "add" and (kept := keep(table)).num_rows:
            yield kept


def stream_file_actions(
    store: LogStore,
    segment: LogSegment,
    commit_data: list[bytes],
    cover: Sequence[FileMeta],
    fields: FileFields,
    *,
    removes: bool = False,
    row_groups: RowGroupChooser | None = None,
) -> Iterator[tuple[str, pa.Table]]:
    """The reconciled file actions of ``segment`` as a stream of ``("add" | "remove", table)``: the
    checkpoint is read batch by batch and nothing is held but the batch at hand and the commits' own
    actions. The same reconciliation as ``replay``: the commits (``cover``, with ``commit_data``) are read
    first, and their keys dropped from the checkpoint's rows as they stream by. Tombstones only with
    ``removes``. ``CheckpointReadError`` may come after some tables were yielded: a caller falls back to
    ``replay``."""
    new = _parse_commits(store, tuple(cover), commit_data, fields)
    commit_adds = concat_file_actions(new.adds, fields.add_type)
    commit_removes = concat_file_actions(new.removes, fields.remove_type)
    acc = Actions(fields=fields)
    touched = _touched(commit_adds, commit_removes)
    for _ in checkpoint_steps(acc, store, segment, touched, row_groups=row_groups):
        for table in acc.adds:
            yield "add", table
        if removes:
            for table in acc.removes:
                yield "remove", table
        acc.adds.clear()
        acc.removes.clear()
    win_adds, win_removes = reconcile(commit_adds, commit_removes)
    if win_adds.num_rows:
        yield "add", win_adds.drop_columns(["_version"])
    if removes and win_removes.num_rows:
        yield "remove", win_removes.drop_columns(["_version"])
