"""An immutable snapshot: the state of a table at one version ("Delta Table Specification").

Built from a log segment by replay. If the segment's checkpoint proves unreadable (truncated, half
written), the snapshot is rebuilt from an older checkpoint or the JSON commits, as readers must survive
a checkpoint that a crashed writer left behind.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from ..actions.actions import ALL_FILE_FIELDS, DomainMetadata, FileFields, Metadata, Protocol, SetTransaction
from ..actions.commit_info import VACUUM_END, vacuum_cutoff
from ..base.arrow_utils import int64_scalar
from ..base.errors import CorruptLogError, VersionNotFoundError
from ..features.configuration import TableConfiguration
from ..features.protocol import check_read_supported
from ..files.segment import LogSegment, SegmentBuilder, commit_name, commit_version, group_checkpoints
from ..files.storage import FileMeta, LogStore
from ..schema.partition_values import typed_partition_values
from ..schema.schema import delta_schema_to_arrow
from ..schema.stats import typed_file_stats
from .history import read_commit_info
from .replay import CheckpointReadError, TableState, apply_commits, replay

log = logging.getLogger(__name__)
_MAX_CHECKPOINT_FALLBACKS = 5
_MAX_RELISTS = 10
_MAX_TRANSIENT_RETRIES = 3
_TRANSIENT = (ConnectionError, TimeoutError)


@dataclass(frozen=True, eq=False)
class Snapshot:
    """The table at ``version``. ``files`` has one row per live AddFile; paths are decoded.

    ``fields`` are the add/remove fields ``files`` and ``tombstones`` hold (all, unless the snapshot was
    loaded for a caller that needs fewer); ``keep_expired_tombstones`` says whether tombstones past the
    table's retention were kept. Updates of the snapshot keep both.
    """

    store: LogStore
    segment: LogSegment
    version: int
    timestamp: int
    protocol: Protocol
    metadata: Metadata
    files: pa.Table
    tombstones: pa.Table
    app_transaction_actions: dict[str, SetTransaction]
    domain_metadata: dict[str, DomainMetadata]
    commit_info: dict[str, Any] | None
    fields: FileFields = ALL_FILE_FIELDS
    keep_expired_tombstones: bool = False
    # A VACUUM START among the commits this snapshot read, with no VACUUM END after it: its version, and the
    # modification time below which it may be deleting unreferenced files (``commit_info.vacuum_cutoff``).
    vacuum_started: int | None = None
    vacuum_cutoff: int | None = None

    @property
    def app_transactions(self) -> dict[str, int]:
        """appId -> latest version ("Transaction Identifiers")."""
        return {k: v.version for k, v in self.app_transaction_actions.items()}

    @property
    def partition_columns(self) -> list[str]:
        return list(self.metadata.partition_columns)

    @property
    def configuration(self) -> dict[str, str]:
        return dict(self.metadata.configuration)

    @cached_property
    def table_configuration(self) -> TableConfiguration:
        """The protocol and metadata of this version with the feature registry's answers, read once."""
        return TableConfiguration(self.protocol, self.metadata)

    @cached_property
    def schema(self) -> pa.Schema:
        """The table schema as Arrow (logical names)."""
        return delta_schema_to_arrow(self.metadata.schema)

    @property
    def num_files(self) -> int:
        return self.files.num_rows

    def file_paths(self) -> list[str]:
        """Decoded paths of live files, relative to the table root unless absolute in the log."""
        return self.files.column("path").to_pylist()

    def partition_values(self) -> pa.Table:
        """Typed partition values of ``files``, row-aligned, one column per partition column."""
        return typed_partition_values(self.metadata, self.files, self.table_configuration.column_mapping_mode)

    def file_stats(self) -> pa.StructArray:
        """Per-file statistics of ``files`` parsed into typed structs ("Per-file Statistics")."""
        return typed_file_stats(self.table_configuration.stats_schema, self.files)

    def state(self) -> TableState:
        """The reconciled state behind this snapshot (what checkpoints are written from)."""
        return TableState(
            self.protocol,
            self.metadata,
            self.app_transaction_actions,
            self.domain_metadata,
            self.files,
            self.tombstones,
            {} if self.commit_info is None else {self.version: self.commit_info},
            self.fields,
        )

    def __repr__(self) -> str:
        return f"Snapshot(uri={self.store.uri!r}, version={self.version}, files={self.num_files})"


def load_snapshot(
    store: LogStore,
    version: int | None = None,
    *,
    now_ms: int | None = None,
    fields: FileFields = ALL_FILE_FIELDS,
    keep_expired_tombstones: bool = False,
) -> Snapshot:
    """Build the snapshot at ``version`` (latest when ``None``).

    :param now_ms: the current time, against which tombstones and app transactions expire.
    :param fields: the add/remove fields to read and keep (all by default); callers that need only a few
        (VACUUM) save reading and holding the rest, ``stats`` above all.
    :param keep_expired_tombstones: keep every tombstone, also those past the table's
        ``delta.deletedFileRetentionDuration`` (VACUUM applies a retention of its own).
    """
    builder = SegmentBuilder(store)
    excluded: set[int | tuple[str, ...]] = set()
    broken: list[CheckpointReadError] = []
    relists = transient = 0
    while True:
        try:
            segment = builder.build(version, frozenset(excluded))
            commit_data = store.read_log_files(f.name for f in segment.commits)
            state = replay(store, segment, commit_data, fields)
        except FileNotFoundError as exc:
            # Log cleanup deleted a file between the listing and the read: list again, the newer
            # checkpoint it keeps is then found ("Metadata Cleanup" deletes only below a checkpoint).
            relists = _relist(store, relists, exc)
            continue
        except CheckpointReadError as exc:
            assert segment.checkpoint is not None
            if isinstance(exc.__cause__, _TRANSIENT) and transient < _MAX_TRANSIENT_RETRIES:
                # A dropped connection says nothing about the checkpoint: read it again, do not skip it.
                transient += 1
                log.info("reading a checkpoint of %s failed (%s); trying again", store.uri, exc)
                continue
            if not all(store.log_file_exists(f.name) for f in segment.checkpoint.files):
                relists = _relist(store, relists, exc)
                continue
            log.warning("%s; falling back to an older checkpoint or the JSON log", exc)
            excluded.add(segment.checkpoint.names)
            broken.append(exc)
            if len(excluded) > _MAX_CHECKPOINT_FALLBACKS:
                raise CorruptLogError(
                    f"no readable checkpoint for {store.uri} after {len(excluded)} attempts"
                ) from exc
            continue
        except VersionNotFoundError as exc:
            if not broken:
                raise
            # Without the checkpoints that could not be read, the version is not reconstructable: that is
            # what to report, not "version not found" of a table whose log is there.
            raise CorruptLogError(
                f"{store.uri} cannot be read at version {version if version is not None else 'latest'}: "
                f"{broken[-1]}, and the commits before it were cleaned up, so there is nothing to fall back "
                "to"
            ) from exc
        return _from_state(store, segment, state, now_ms, keep_expired_tombstones, (None, None))


def _relist(store: LogStore, relists: int, exc: Exception) -> int:
    if relists >= _MAX_RELISTS:
        raise CorruptLogError(
            f"the log of {store.uri} kept changing under the reader ({exc}); {_MAX_RELISTS} listings in a "
            "row named files that were gone when read"
        ) from exc
    log.info("a log file of %s was deleted while being read (%s); listing again", store.uri, exc)
    return relists + 1


def update_snapshot(snap: Snapshot, *, now_ms: int | None = None) -> Snapshot:
    """The latest snapshot, built from ``snap`` plus the commits after it (only those are read).

    One listing from ``snap.version`` when nothing is new. The snapshot is trusted only while the log still
    agrees with it: when the commit it ends with is now a different file (a writer filled a prefix that log
    cleanup had deleted), the commits after it are not all there (cleanup is deleting them), or that commit
    is gone and a checkpoint was written after it (cleanup ran past the snapshot, and a commit below the
    checkpoint may have been filled again by a stale writer), the table is loaded afresh from its newest
    checkpoint.
    """
    store = snap.store
    listed = store.list_log(snap.version)
    commits = {v: f for f in listed if (v := commit_version(f.name)) is not None}
    own = snap.segment.commits[-1] if snap.segment.commits else None
    changed = (
        own is not None
        and snap.version in commits
        and own.name == commits[snap.version].name
        and not _same_file(own, commits[snap.version])
    )
    later = sorted(v for v in commits if v > snap.version)
    new = [commits[v] for i, v in enumerate(later) if v == snap.version + 1 + i]
    # The snapshot's own commit gone and a checkpoint after it: log cleanup deleted the commits below that
    # checkpoint, and a stale writer may have filled one of them again (a file no reader that starts from
    # the checkpoint sees), so the commits up to it are not applied on top of what the snapshot had.
    overtaken = snap.version not in commits and any(v > snap.version for v in group_checkpoints(listed))
    if changed or len(new) != len(later) or overtaken:
        if changed:
            log.warning("%s changed since it was read; loading %s afresh", own.name, store.uri)
        return load_snapshot(
            store, now_ms=now_ms, fields=snap.fields, keep_expired_tombstones=snap.keep_expired_tombstones
        )
    if not new:
        return snap
    try:
        datas = store.read_log_files(f.name for f in new)
    except FileNotFoundError:
        return load_snapshot(
            store, now_ms=now_ms, fields=snap.fields, keep_expired_tombstones=snap.keep_expired_tombstones
        )
    return extend_snapshot(snap, new, datas, now_ms=now_ms)


def extend_snapshot(
    snap: Snapshot, commits: Sequence[FileMeta], datas: Sequence[bytes], *, now_ms: int | None = None
) -> Snapshot:
    """``snap`` with the commits right after it applied, given their listing entries and contents: the
    incremental step of ``update_snapshot``, also taken by a transaction that has just read and written
    those commits, so that the next snapshot need not read them again."""
    expected = list(range(snap.version + 1, snap.version + 1 + len(commits)))
    if [commit_version(f.name) for f in commits] != expected:
        raise ValueError(f"commits after version {snap.version} must follow it without a gap")
    state = apply_commits(snap.state(), snap.store, tuple(commits), list(datas))
    segment = LogSegment(
        snap.version + len(commits), snap.segment.checkpoint, snap.segment.commits + tuple(commits)
    )
    vacuum = (snap.vacuum_started, snap.vacuum_cutoff)
    return _from_state(snap.store, segment, state, now_ms, snap.keep_expired_tombstones, vacuum)


def _same_file(a: FileMeta, b: FileMeta) -> bool:
    return a.size == b.size and a.modification_time == b.modification_time


def _from_state(
    store: LogStore,
    segment: LogSegment,
    state: TableState,
    now_ms: int | None,
    keep_expired_tombstones: bool,
    vacuum_before: tuple[int | None, int | None],
) -> Snapshot:
    where = f"table {store.uri} at version {segment.version}"
    if state.protocol is None:
        raise CorruptLogError(f"{where} has no protocol action", path=store.log_path)
    check_read_supported(state.protocol, where=where)
    if state.metadata is None:
        raise CorruptLogError(f"{where} has no metaData action", path=store.log_path)
    config = TableConfiguration(state.protocol, state.metadata)
    now = int(time.time() * 1000) if now_ms is None else now_ms
    retention = config.deleted_file_retention_ms
    tombstones = state.tombstones
    if tombstones.num_rows and not keep_expired_tombstones:
        # A tombstone expires once its deletion timestamp falls out of the retention window ("Add File and
        # Remove File"); a missing timestamp counts as 0, i.e. expired, as in Delta Spark.
        ts = pc.fill_null(tombstones.column("deletionTimestamp"), int64_scalar(0))
        tombstones = tombstones.filter(pc.greater(ts, int64_scalar(now - retention)))
    info = state.commit_infos.get(segment.version)
    txns = state.txns
    txn_retention = config.set_transaction_retention_ms
    if txn_retention is not None:
        # delta.setTransactionRetentionDuration: a txn last updated before the window is forgotten, as in
        # Delta Spark and delta-kernel-rs; one without lastUpdated never expires.
        oldest = now - txn_retention
        txns = {k: t for k, t in txns.items() if t.last_updated is None or t.last_updated > oldest}
    snap = Snapshot(
        store=store,
        segment=segment,
        version=segment.version,
        timestamp=_version_timestamp(store, segment, config, info),
        protocol=state.protocol,
        metadata=state.metadata,
        files=state.files,
        tombstones=tombstones,
        app_transaction_actions=txns,
        domain_metadata=state.domains,
        commit_info=info,
        fields=state.fields,
        keep_expired_tombstones=keep_expired_tombstones,
        **_vacuum_in_progress(vacuum_before, state.commit_infos),
    )
    object.__setattr__(snap, "table_configuration", config)  # read once per version
    return snap


def _vacuum_in_progress(
    before: tuple[int | None, int | None], commit_infos: dict[int, dict[str, Any]]
) -> dict[str, int | None]:
    """The last VACUUM STARTed and not ENDed (version and cut-off), reading ``commit_infos`` in order."""
    started, cutoff = before
    for version in sorted(commit_infos):
        info = commit_infos[version]
        if info.get("operation") == VACUUM_END:
            started, cutoff = None, None
        elif (at := vacuum_cutoff(info)) is not None:
            started, cutoff = version, at
    return {"vacuum_started": started, "vacuum_cutoff": cutoff}


def _version_timestamp(
    store: LogStore, segment: LogSegment, config: TableConfiguration, info: dict | None
) -> int:
    """In-commit timestamp when the table enables it at this version, else the commit file's mtime."""
    enabled_from = config.in_commit_timestamps_from
    if enabled_from is not None and segment.version >= enabled_from:
        if info is None and segment.checkpoint_version == segment.version:
            info = _commit_info_of(store, segment.version)
        if info is not None and info.get("inCommitTimestamp") is not None:
            return int(info["inCommitTimestamp"])
    if segment.commits and segment.commits[-1].name == commit_name(segment.version):
        return segment.commits[-1].modification_time
    try:
        return store.info(store.log_file(commit_name(segment.version))).modification_time
    except FileNotFoundError:
        assert segment.checkpoint is not None
        return segment.checkpoint.files[0].modification_time


def _commit_info_of(store: LogStore, version: int) -> dict | None:
    try:
        return read_commit_info(store, version)
    except FileNotFoundError:
        return None
