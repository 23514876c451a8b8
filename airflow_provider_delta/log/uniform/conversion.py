"""A Delta version converted to Iceberg metadata, from the last version converted: UniForm's conversion.

As Delta Spark's ``IcebergConverter``: the newest Iceberg metadata says which Delta version it holds
(``delta-version``); the commits since are applied one by one, each as its own Iceberg snapshot (an
append, a delete, an overwrite, or a replace for a rewrite that changed no data), with a schema change as
a new Iceberg schema. When there is no metadata yet, when more than ``MAX_COMMITS_TO_CONVERT`` commits are
missing, when their commit files are gone (log cleanup) or a commit cannot be applied file by file, the
whole file list of the version becomes one snapshot instead, streamed from the checkpoint. The metadata
records ``delta-version``, ``delta-timestamp`` (the version's commit timestamp: in-commit timestamp when
the table has them) and the name mapping, as Delta Spark's does.

Publishing is ``metadata/v<N+1>.metadata.json`` created only if absent, then ``version-hint.text``. A
converter that loses the race for ``N+1`` removes what it wrote, reads the winner, and goes on only if the
winner holds an older Delta version than its own. A failure after a commit never fails the commit
(``convert_after_commit``): the next commit, or an explicit ``convert_to_iceberg``, catches up.
"""

from __future__ import annotations

import contextlib
import logging
import time
import uuid
from collections.abc import Iterator
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc

from ...extras import require
from ..base.arrow_utils import TRUE, empty_table, from_strings
from ..base.errors import UniformError
from ..features.configuration import TableConfiguration
from ..files.commit_json import Actions, parse_json_actions
from ..files.segment import commit_name
from ..files.storage import LogStore
from ..snapshot.replay import CheckpointReadError
from ..snapshot.snapshot import Snapshot
from ..snapshot.table_context import TableContext
from .data_files import DataFileBuilder, file_location
from .file_io import table_file_io
from .iceberg_schema import iceberg_schema, name_mapping_json, partition_spec
from .metadata_files import (
    DELTA_TIMESTAMP,
    DELTA_VERSION,
    METADATA_DIR,
    NewestMetadata,
    fs_path,
    location_of,
    metadata_file_name,
    newest_metadata,
    write_version_hint,
)
from .snapshots import FilesNotInIceberg, IcebergMetadata
from .status import IcebergStatus, iceberg_status, record_failure, record_success, uniform_iceberg

if TYPE_CHECKING:
    from pyiceberg.io import FileIO
    from pyiceberg.table.metadata import TableMetadata

log = logging.getLogger(__name__)
# Delta Spark's default (spark.databricks.delta.uniform.iceberg.maxCommitsToConvert): beyond it, the whole
# file list is converted instead of the commits.
MAX_COMMITS_TO_CONVERT = 100
MAX_ATTEMPTS = 50  # races lost in a row before giving up (each one means another converter went ahead)
NAME_MAPPING = "schema.name-mapping.default"
# Iceberg snapshots kept in the metadata at most (besides those past VACUUM's horizon, which go anyway): the
# metadata file is written again by every conversion, so its size must not grow with the table's history.
MAX_SNAPSHOTS = 500


class _WholeFileList(Exception):
    """The commits since the last conversion cannot be applied one by one: convert the file list."""


def convert_to_iceberg(table: TableContext, snapshot: Snapshot | None = None) -> IcebergStatus:
    """Write the Iceberg metadata of ``snapshot`` (the latest version by default), catching up from the
    version last converted; a no-op when the metadata already holds it or a newer one. Returns the status.

    Raises :class:`UniformError` when the table does not enable UniForm iceberg or holds what Iceberg
    cannot (deletion vectors, a changed partitioning, a type Iceberg lacks), and ``MissingExtraError`` when
    pyiceberg (the ``iceberg`` extra) is not installed.
    """
    snap = snapshot if snapshot is not None else table.snapshot()
    where = f"table {table.uri} at version {snap.version}"
    if not uniform_iceberg(snap.table_configuration):
        raise UniformError(
            f"{where} does not enable UniForm iceberg: set delta.universalFormat.enabledFormats=iceberg "
            "(with column mapping, e.g. delta.enableIcebergCompatV2=true) to keep Iceberg metadata",
            rule="notEnabled",
        )
    try:
        require("pyiceberg")
        _convert(table.store, snap, where)
    except Exception as exc:
        record_failure(table.uri, snap.version, exc)
        raise
    record_success(table.uri, snap.version)
    return iceberg_status(table)


def convert_after_commit(table: TableContext, version: int, config: TableConfiguration | None) -> None:
    """After a commit landed as ``version`` with the table configuration ``config``: convert it when the
    table keeps Iceberg metadata (decided from ``config``, so other tables' commits read nothing more). Any
    failure is logged as a warning and recorded for the status, never raised: the commit stands."""
    if config is not None and not uniform_iceberg(config):
        return
    try:
        snap = table.snapshot(version)
        if uniform_iceberg(snap.table_configuration):
            convert_to_iceberg(table, snap)
    except Exception as exc:
        log.warning(
            "UniForm: the Iceberg metadata of %s could not be written for version %d (%s); the commit "
            "stands, and the next commit or DeltaTable.convert_to_iceberg() catches up",
            table.uri, version, exc, exc_info=log.isEnabledFor(logging.DEBUG),
        )  # fmt: skip


def _convert(store: LogStore, snap: Snapshot, where: str) -> None:
    for _ in range(MAX_ATTEMPTS):
        newest = newest_metadata(store)
        converted = newest.delta_version if newest is not None else None
        if converted is not None and converted >= snap.version:
            return  # this version, or a newer one, is already there
        io = table_file_io(store)
        number = newest.number + 1 if newest is not None else 1
        try:
            metadata = _build(store, io, snap, newest, where)
        except BaseException:
            _discard(io, io.written)
            raise
        # A failure while publishing leaves the manifests alone: the file may have landed all the same.
        location = location_of(store, f"{METADATA_DIR}/{metadata_file_name(number)}")
        if not _publish(metadata, io, store, location):
            log.info("UniForm: another converter published %s first; reading it", metadata_file_name(number))
            _discard(io, io.written)  # nothing refers to what this attempt wrote
            continue
        try:
            write_version_hint(store, number)
        except OSError as exc:  # published all the same: readers and converters probe past an old hint
            log.warning("UniForm: %s was published, but %s/version-hint.text was not updated: %s",
                        metadata_file_name(number), METADATA_DIR, exc)  # fmt: skip
        log.info("UniForm: %s converted to Iceberg as %s", where, metadata_file_name(number))
        return
    raise UniformError(f"{where}: gave up converting to Iceberg after losing {MAX_ATTEMPTS} races with other "
                       "converters; run DeltaTable.convert_to_iceberg() again", rule="conflict")  # fmt: skip


def _publish(metadata: TableMetadata, io: FileIO, store: LogStore, location: str) -> bool:
    """Create the metadata file at ``location`` unless it exists: ``False`` when another converter's file
    is there. A file equal to ours is ours (a retried request whose first answer was lost)."""
    from pyiceberg.serializers import ToOutputFile

    out = io.new_output(location)
    try:
        ToOutputFile.table_metadata(metadata, out, overwrite=False)
    except FileExistsError:
        try:
            return store.fs.cat_file(fs_path(store, location)) == out.attempted
        except FileNotFoundError:
            return False
    return True


def _discard(io: FileIO, written: list[str]) -> None:
    """Remove manifests and lists no published metadata refers to (best effort: orphans are harmless)."""
    for location in list(written):
        with contextlib.suppress(Exception):
            io.delete(location)
    written.clear()


def _build(
    store: LogStore, io: FileIO, snap: Snapshot, newest: NewestMetadata | None, where: str
) -> TableMetadata:
    """The table metadata holding ``snap``: from ``newest`` by its commits since, or whole."""
    from pyiceberg.table.metadata import TableMetadataUtil

    config = snap.table_configuration
    schema = iceberg_schema(snap.metadata, where)
    spec = partition_spec(snap.metadata, schema, where)
    files = DataFileBuilder(store, config, where)
    if newest is None:
        uid = _table_uuid(snap.metadata.id)
        table = IcebergMetadata.new(store, io, schema, spec, uid, config.max_column_id)
        _whole(table, snap, files, schema, spec, where)
    else:
        base = TableMetadataUtil.parse_raw(newest.data)
        table = IcebergMetadata(store, io, base, previous=newest.location)
        done = newest.delta_version
        try:
            if done is None or snap.version - done > MAX_COMMITS_TO_CONVERT:
                raise _WholeFileList(f"{'no' if done is None else snap.version - done} commits to apply")
            _commits(table, store, snap, done, files, where)
        except (_WholeFileList, FilesNotInIceberg, FileNotFoundError) as why:
            log.info("UniForm: converting the whole file list of %s (%s)", where, why)
            _discard(io, io.written)
            table = IcebergMetadata(store, io, base, previous=newest.location)
            _whole(table, snap, files, schema, spec, where)
    table.use_schema(schema, spec, where)
    table.set_properties({DELTA_VERSION: str(snap.version), DELTA_TIMESTAMP: str(snap.timestamp),
                          NAME_MAPPING: name_mapping_json(table.metadata.schema())})  # fmt: skip
    # Iceberg time travel reaches as far back as VACUUM leaves files (delta.deletedFileRetentionDuration),
    # and at most MAX_SNAPSHOTS conversions back, so that each conversion's cost stays bounded.
    table.expire_snapshots(int(time.time() * 1000) - config.deleted_file_retention_ms, MAX_SNAPSHOTS)
    return table.metadata


def _whole(table: IcebergMetadata, snap: Snapshot, files: DataFileBuilder, schema, spec, where: str) -> None:
    """One snapshot with every live file of ``snap``, streamed (checkpoint batches as they are read)."""
    table.use_schema(schema, spec, where)
    operation = "append" if table.metadata.current_snapshot() is None else "overwrite"
    try:
        table.add_snapshot(operation, snap.version, _streamed(snap, files), whole=True)
    except CheckpointReadError as exc:  # a broken checkpoint: its whole replay, with its fallbacks
        log.info("UniForm: streaming the file list of %s failed (%s); reading it whole", where, exc)
        table.add_snapshot(operation, snap.version, [files.data_files(snap.files)], whole=True)


def _streamed(snap: Snapshot, files: DataFileBuilder) -> Iterator[list]:
    for kind, actions in snap.stream_file_actions():
        if kind == "add":
            yield files.data_files(actions)


def _commits(table: IcebergMetadata, store: LogStore, snap: Snapshot, done: int, files: DataFileBuilder,
             where: str) -> None:  # fmt: skip
    """Apply commits ``done + 1`` .. ``snap.version``, each as a snapshot (none for a commit that changes no
    file). ``FileNotFoundError`` when log cleanup removed one of them."""
    versions = list(range(done + 1, snap.version + 1))
    datas = store.read_log_files([commit_name(v) for v in versions])
    for version, data in zip(versions, datas, strict=True):
        acc = Actions()
        parse_json_actions(acc, [(version, store.log_file(commit_name(version)), data)])
        here = f"table {store.uri} at version {version}"
        if acc.metadata is not None:  # the schema its files were written with
            schema = iceberg_schema(acc.metadata, here)
            table.use_schema(schema, partition_spec(acc.metadata, schema, here), here)
        if acc.adds:  # a file re-added with a vector is dropped from the changes below: check it first
            files.check_no_deletion_vectors(pa.concat_tables(acc.adds))
        adds, removes = _file_changes(acc)
        operation = _operation(adds, removes)
        if operation is not None:
            removed = {file_location(store, p) for p in removes.column("path").to_pylist()}
            table.add_snapshot(operation, version, [files.data_files(adds)], removed)


def _file_changes(acc: Actions) -> tuple[pa.Table, pa.Table]:
    """The commit's adds and removes, less the files it both removes and adds (a file re-added with new
    statistics or tags is the same data file to Iceberg)."""
    adds = pa.concat_tables(acc.adds) if acc.adds else None
    removes = pa.concat_tables(acc.removes) if acc.removes else None
    add_paths = adds.column("path") if adds is not None else from_strings([])
    remove_paths = removes.column("path") if removes is not None else from_strings([])
    both = pc.is_in(add_paths, value_set=pc.unique(remove_paths)) if len(remove_paths) else None
    if adds is not None and both is not None:
        adds = adds.filter(pc.invert(both))
    if removes is not None and adds is not None and len(add_paths):
        removes = removes.filter(pc.invert(pc.is_in(removes.column("path"), value_set=pc.unique(add_paths))))
    empty = empty_table(pa.schema([("path", pa.string()), ("dataChange", pa.bool_())]))
    return (adds if adds is not None else empty), (removes if removes is not None else empty)


def _operation(adds: pa.Table, removes: pa.Table) -> str | None:
    """Iceberg's operation for a commit's file changes, as Delta Spark's converter chooses it; ``None`` for
    none. Files added without a data change and nothing removed (a re-add Delta Spark skips, but maybe a
    new file), or a mix of data and non-data changes, are converted as the whole file list."""
    if adds.num_rows == 0 and removes.num_rows == 0:
        return None
    changes = pa.concat_arrays([_data_change(adds), _data_change(removes)])
    every = pc.all(changes).as_py()
    none = not pc.any(changes).as_py()
    if adds.num_rows and not removes.num_rows:
        if every:
            return "append"
        raise _WholeFileList("files added without a data change")
    if not adds.num_rows:
        return "delete"
    if every:
        return "overwrite"
    if none:
        return "replace"
    raise _WholeFileList("a commit that mixes data and non-data changes")


def _data_change(files: pa.Table) -> pa.Array:
    column = files.column("dataChange").combine_chunks()
    return pc.fill_null(column, TRUE)  # type: ignore[arg-type]


def _table_uuid(delta_table_id: str) -> uuid.UUID:
    """The Iceberg table's UUID: the Delta table's id, which is one."""
    try:
        return uuid.UUID(delta_table_id)
    except ValueError:
        return uuid.uuid5(uuid.NAMESPACE_URL, delta_table_id)
