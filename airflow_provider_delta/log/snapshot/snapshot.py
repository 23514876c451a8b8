"""An immutable snapshot: the state of a table at one version ("Delta Table Specification").

A snapshot is cheap: its log segment, protocol, metadata, app transactions and domain metadata, read from
the newest version checksum (``NNN.crc``) and the commits after it, or when there is none, from the
checkpoint's small-action columns (row groups of file actions skipped by their statistics) and the commits
after it. The file list (``files``, ``tombstones``) is replayed only when a caller asks for it, as
delta-kernel-rs builds a snapshot (``kernel/src/snapshot/``): a blind append, an app-transaction look-up,
a sensor's poke or the history never pays for millions of live files.

If the segment's checkpoint proves unreadable (truncated, half written), the snapshot is rebuilt from an
older checkpoint or the JSON commits, as readers must survive a checkpoint that a crashed writer left
behind. A checksum that is malformed, older than its commit, or that disagrees with the replayed state is
ignored with a warning naming it (``validate_checksum`` raises instead).
"""

from __future__ import annotations

import errno
import logging
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from ..actions.actions import ALL_FILE_FIELDS, DomainMetadata, FileFields, Metadata, Protocol, SetTransaction
from ..actions.commit_info import VACUUM_END, vacuum_cutoff
from ..base.arrow_utils import int64_scalar
from ..base.errors import ChecksumError, CorruptLogError, StaleSnapshotError, VersionNotFoundError
from ..features.configuration import TableConfiguration
from ..features.protocol import check_read_supported
from ..files.commit_json import Actions, parse_json_actions
from ..files.segment import LogSegment, SegmentBuilder, commit_name, commit_version, group_checkpoints
from ..files.storage import TRANSIENT_ERRORS, FileMeta, LogStore
from ..files.version_checksum import (
    CommitEffect,
    VersionChecksum,
    advance,
    checksum_of_state,
    checksum_version,
    commit_effect,
    parse_checksum,
)
from ..schema.partition_values import typed_partition_values
from ..schema.schema import delta_schema_to_arrow
from ..schema.stats import typed_file_stats
from .history import read_commit_info
from .replay import (
    CheckpointReadError,
    RowGroupChooser,
    TableState,
    apply_commits,
    check_metadata,
    concat_file_actions,
    read_checkpoint,
    replay,
    stream_file_actions,
    stream_live_files,
)

log = logging.getLogger(__name__)
_MAX_CHECKPOINT_FALLBACKS = 5
# What a snapshot's small state reads of the commits' file actions: only their keys (they are parsed anyway).
_KEYS_ONLY = FileFields(add=("path",), remove=("path",))
_MAX_RELISTS = 10
_MAX_TRANSIENT_RETRIES = 3


@dataclass(frozen=True, eq=False)
class Snapshot:
    """The table at ``version``. ``files`` has one row per live AddFile (paths decoded), replayed on first
    use; everything else is known without it.

    ``fields`` are the add/remove fields ``files`` and ``tombstones`` hold (all, unless the snapshot was
    loaded for a caller that needs fewer); ``keep_expired_tombstones`` says whether tombstones past the
    table's retention were kept. Updates of the snapshot keep both. ``checksum`` is this version's
    checksum as read or carried forward from an older one (its ``totals`` ``None`` when a commit in
    between could not be counted); ``None`` when the log offered none to start from.
    """

    store: LogStore
    segment: LogSegment
    version: int
    timestamp: int
    protocol: Protocol
    metadata: Metadata
    app_transaction_actions: dict[str, SetTransaction]
    domain_metadata: dict[str, DomainMetadata]
    fields: FileFields = ALL_FILE_FIELDS
    keep_expired_tombstones: bool = False
    checksum: VersionChecksum | None = None
    now_ms: int = 0
    # Commits whose bytes or commitInfo were read while the snapshot was built (by version): the file
    # list's replay and the VACUUM check do not read them again.
    known_commits: Mapping[int, bytes] = field(default_factory=dict, repr=False)
    commit_infos: Mapping[int, dict[str, Any]] = field(default_factory=dict, repr=False)
    # The reconciled state when the snapshot was built from one (an update of a snapshot whose files
    # were read): ``files`` comes from it instead of a replay.
    built_state: TableState | None = field(default=None, repr=False)

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

    # -- the file list, replayed on first use ------------------------------------------------------------
    @property
    def files_loaded(self) -> bool:
        """Whether the file list is in memory (asking for ``files`` then costs nothing)."""
        return self.built_state is not None or "_replayed" in self.__dict__

    @cached_property
    def _replayed(self) -> TableState:
        if self.built_state is not None:
            return self.built_state
        try:
            _, state = replay_version(self.store, self.version, self.fields, self.known_commits)
        except VersionNotFoundError as exc:
            # Log cleanup removed what this version is made of since the snapshot was taken (a task that
            # stayed open past delta.logRetentionDuration): the snapshot is stale, as for a commit.
            raise StaleSnapshotError(
                f"the file list of {self.store.uri} at version {self.version} cannot be read any more: log "
                f"cleanup removed the files it is made of since this snapshot was taken ({exc}); nothing "
                "was written: re-read the table and run the operation again",
                read_version=self.version,
                latest_version=exc.latest,
            ) from exc
        self.__dict__["_disagreement"] = wrong = self.checksum_disagreement(state)  # read once per snapshot
        if wrong:
            log.warning(
                "the version checksum %s disagrees with the log of %s at version %d (%s)",
                self.checksum_source or "carried from an older checksum",
                self.store.uri,
                self.version,
                ", ".join(wrong),
            )
        return state

    @property
    def files(self) -> pa.Table:
        return self._replayed.files

    @cached_property
    def tombstones(self) -> pa.Table:
        return self._unexpired(self._replayed.tombstones)

    def _unexpired(self, tombstones: pa.Table) -> pa.Table:
        if tombstones.num_rows and not self.keep_expired_tombstones:
            # A tombstone expires once its deletion timestamp falls out of the retention window ("Add File
            # and Remove File"); a missing timestamp counts as 0, i.e. expired, as in Delta Spark.
            retention = self.table_configuration.deleted_file_retention_ms
            ts = pc.fill_null(tombstones.column("deletionTimestamp"), int64_scalar(0))
            tombstones = tombstones.filter(pc.greater(ts, int64_scalar(self.now_ms - retention)))
        return tombstones

    def checksum_disagreement(self, state: TableState | None = None) -> list[str]:
        """The fields in which the checksum this snapshot started from disagrees with the replayed log
        (``state``, else the file list's); empty when they agree or there was no checksum."""
        if state is None:
            state = self._replayed  # compares once as it replays, whose answer is kept
            if "_disagreement" in self.__dict__:
                return self.__dict__["_disagreement"]
            return self.checksum_disagreement(state)
        crc = self.checksum
        if crc is None or state.protocol is None or state.metadata is None:
            return []
        if "size" not in state.files.column_names:  # a projected replay: only what it has is compared
            pairs = (("protocol", crc.protocol, state.protocol), ("metadata", crc.metadata, state.metadata))
            return [name for name, mine, theirs in pairs if mine != theirs]
        found = checksum_of_state(self.version, state.protocol, state.metadata, state.files, state.txns,
                                  state.domains, crc.in_commit_timestamp)  # fmt: skip
        return crc.mismatches(found)

    @property
    def checksum_source(self) -> str | None:
        """The checksum file this snapshot's small state started from, if any."""
        f = self.segment.checksum
        return self.store.log_file(f.name) if f is not None and self.checksum is not None else None

    @property
    def num_files(self) -> int:
        """Live files: from the checksum when it counts them, else from the file list."""
        if not self.files_loaded and self.checksum is not None and self.checksum.totals is not None:
            return self.checksum.totals.num_files
        return self.files.num_rows

    @property
    def table_size_bytes(self) -> int:
        """Bytes of live files: from the checksum when it counts them, else from the file list."""
        if not self.files_loaded and self.checksum is not None and self.checksum.totals is not None:
            return self.checksum.totals.table_size_bytes
        return int(pc.sum(self.files.column("size")).as_py() or 0)

    def filtered_files(
        self, keep: Callable[[pa.Table], pa.Table], row_groups: RowGroupChooser | None = None
    ) -> tuple[pa.Table, int]:
        """The live files ``keep`` keeps (a function cutting a table of ``files`` rows down to the wanted
        ones), and how many live files it was given. When the file list is not in memory it is streamed:
        the checkpoint batch by batch, each cut down as it is read, so a filtered scan of a table of
        millions of files holds only its matches (delta-kernel-rs's scan over log replay). ``row_groups``
        chooses the checkpoint row groups worth reading (the files of the others are not counted)."""
        if not self.files_loaded:
            try:
                return self._streamed(keep, row_groups)
            except (CheckpointReadError, FileNotFoundError) as exc:
                # A broken checkpoint or one deleted under the reader: the whole replay, with its fallbacks.
                log.info("streaming the file list of %s failed (%s); replaying it whole", self.store.uri, exc)
        files = self.files
        return keep(files), files.num_rows

    def _streamed(
        self, keep: Callable[[pa.Table], pa.Table], row_groups: RowGroupChooser | None
    ) -> tuple[pa.Table, int]:
        seen = 0

        def counted(table: pa.Table) -> pa.Table:
            nonlocal seen
            seen += table.num_rows
            return keep(table)

        cover = [f for _, f in self.segment.commit_cover()]
        known = self.known_commits
        names = [f.name for f in cover if commit_version(f.name) not in known]
        read = dict(zip(names, self.store.read_log_files(names), strict=True)) if names else {}
        datas = [known.get(commit_version(f.name)) or read[f.name] for f in cover]  # type: ignore[index]
        tables = list(stream_live_files(self.store, self.segment, datas, cover, self.fields, counted,
                                        row_groups))  # fmt: skip
        if not tables:
            return concat_file_actions([], self.fields.add_type, versioned=False), seen
        return (pa.concat_tables(tables) if len(tables) > 1 else tables[0]), seen

    def stream_file_actions(self) -> Iterator[tuple[str, pa.Table]]:
        """The file actions of this version as ``("add" | "remove", table)`` pieces, tombstones past the
        retention left out as in ``tombstones``: from memory when the file list is there, else streamed
        from the checkpoint batch by batch (what a checkpoint of millions of files is written from).
        ``CheckpointReadError`` may come after some pieces: a caller starts again from ``files``."""
        if self.files_loaded:
            yield "add", self.files
            yield "remove", self.tombstones
            return
        cover = [f for _, f in self.segment.commit_cover()]
        known = self.known_commits
        names = [f.name for f in cover if commit_version(f.name) not in known]
        read = dict(zip(names, self.store.read_log_files(names), strict=True)) if names else {}
        datas = [known.get(commit_version(f.name)) or read[f.name] for f in cover]  # type: ignore[index]
        pieces = stream_file_actions(self.store, self.segment, datas, cover, self.fields, removes=True)
        for kind, table in pieces:
            yield kind, (table if kind == "add" else self._unexpired(table))

    def log_small_state(
        self,
    ) -> tuple[Protocol, Metadata, dict[str, SetTransaction], dict[str, DomainMetadata]]:
        """Protocol, metadata, app transactions and domains of this version as the log says them, without
        a checksum (what a checksum is checked against): the checkpoint's small actions and the commits."""
        store = self.store
        _, small = _with_fallbacks(
            store, self.version, lambda segment: _read_small_state(store, segment, use_checksum=False)
        )
        small.check_metadata()
        assert small.protocol is not None and small.metadata is not None
        return small.protocol, small.metadata, small.txns, small.domains

    def file_paths(self) -> list[str]:
        """Decoded paths of live files, relative to the table root unless absolute in the log."""
        return self.files.column("path").to_pylist()

    def partition_values(self) -> pa.Table:
        """Typed partition values of ``files``, row-aligned, one column per partition column."""
        return typed_partition_values(self.metadata, self.files, self.table_configuration.column_mapping_mode)

    def file_stats(self) -> pa.StructArray:
        """Per-file statistics of ``files`` parsed into typed structs ("Per-file Statistics")."""
        return typed_file_stats(self.table_configuration.stats_schema, self.files)

    # -- commit information, read on first use -----------------------------------------------------------
    @cached_property
    def commit_info(self) -> dict[str, Any] | None:
        """The ``commitInfo`` of this version's commit (``None`` when it has none or was cleaned up)."""
        if self.version in self.commit_infos:
            return self.commit_infos[self.version]
        return _commit_info_of(self.store, self.version)

    @cached_property
    def _vacuum(self) -> dict[str, int | None]:
        infos = dict(self.commit_infos)
        missing = [f for f in self.segment.commits if commit_version(f.name) not in infos]
        try:
            datas: list[bytes | None] = list(self.store.read_log_files(f.name for f in missing))
        except FileNotFoundError:
            datas = [None] * len(missing)  # one was cleaned up: each is read on its own below
        for f, data in zip(missing, datas, strict=True):
            v = commit_version(f.name)
            assert v is not None
            try:
                info = read_commit_info(self.store, v, data)
            except FileNotFoundError:
                # Log cleanup deleted it (it deletes only below a newer checkpoint, and no checkpoint is
                # written past an unfinished VACUUM START): a writer from this snapshot is stale, and
                # checks the VACUUM state again on the latest snapshot when it rebases.
                continue
            if info is not None:
                infos[v] = info
        first = self.segment.commits[0].name if self.segment.commits else None
        wanted = {v: i for v, i in infos.items() if first is not None and v >= int(first[:20])}
        return _vacuum_in_progress((None, None), wanted)

    @property
    def vacuum_started(self) -> int | None:
        """A VACUUM START among this segment's commits with no VACUUM END after it: its version."""
        return self._vacuum["vacuum_started"]

    @property
    def vacuum_cutoff(self) -> int | None:
        """That VACUUM's cut-off: the modification time below which it may be deleting unreferenced files
        (``commit_info.vacuum_cutoff``)."""
        return self._vacuum["vacuum_cutoff"]

    def state(self) -> TableState:
        """The reconciled state behind this snapshot (what checkpoints are written from)."""
        info = self.commit_info
        return TableState(
            self.protocol,
            self.metadata,
            self.app_transaction_actions,
            self.domain_metadata,
            self.files,
            self.tombstones,
            {} if info is None else {self.version: info},
            self.fields,
        )

    def __repr__(self) -> str:
        return f"Snapshot(uri={self.store.uri!r}, version={self.version})"


# -- loading ----------------------------------------------------------------------------------------------
def load_snapshot(
    store: LogStore,
    version: int | None = None,
    *,
    now_ms: int | None = None,
    fields: FileFields = ALL_FILE_FIELDS,
    keep_expired_tombstones: bool = False,
) -> Snapshot:
    """The snapshot at ``version`` (latest when ``None``), without its file list.

    :param now_ms: the current time, against which tombstones and app transactions expire.
    :param fields: the add/remove fields to read and keep when the file list is replayed (all by
        default); callers that need only a few (VACUUM) save reading and holding the rest, ``stats``.
    :param keep_expired_tombstones: keep every tombstone, also those past the table's
        ``delta.deletedFileRetentionDuration`` (VACUUM applies a retention of its own).
    """
    segment, small = _with_fallbacks(store, version, lambda s: _read_small_state(store, s))
    return _snapshot(store, segment, small, now_ms, fields, keep_expired_tombstones)


def replay_version(
    store: LogStore,
    version: int,
    fields: FileFields = ALL_FILE_FIELDS,
    known: Mapping[int, bytes] | None = None,
) -> tuple[LogSegment, TableState]:
    """The reconciled state of ``version`` (its file list): the segment replayed, with the fallbacks."""
    known = known or {}

    def full(segment: LogSegment) -> TableState:
        cover = [f for _, f in segment.commit_cover()]
        names = [f.name for f in cover if commit_version(f.name) not in known]
        read = dict(zip(names, store.read_log_files(names), strict=True)) if names else {}
        datas = [known.get(commit_version(f.name), read.get(f.name)) for f in cover]  # type: ignore[arg-type]
        return replay(store, segment, datas, fields, cover)  # type: ignore[arg-type]

    return _with_fallbacks(store, version, full)


def _with_fallbacks(store: LogStore, version: int | None, read: Any) -> tuple[LogSegment, Any]:
    """``read(segment)`` of the segment of ``version``, listing again when log cleanup deleted a file
    under the reader, and falling back to an older checkpoint when one cannot be read."""
    builder = SegmentBuilder(store)
    excluded: set[int | tuple[str, ...]] = set()
    broken: list[CheckpointReadError] = []
    relists = transient = 0
    while True:
        try:
            segment = builder.build(version, frozenset(excluded))
            return segment, read(segment)
        except FileNotFoundError as exc:
            # Log cleanup deleted a file between the listing and the read: list again, the newer
            # checkpoint it keeps is then found ("Metadata Cleanup" deletes only below a checkpoint).
            relists = _relist(store, relists, exc)
            continue
        except CheckpointReadError as exc:
            assert segment.checkpoint is not None
            if _read_again(exc.__cause__) and transient < _MAX_TRANSIENT_RETRIES:
                # A dropped connection, or the file replaced while read (another writer's checkpoint of
                # the same version), says nothing about the checkpoint: read it again, do not skip it.
                transient += 1
                log.info("reading a checkpoint of %s failed (%s); trying again", store.uri, exc)
                continue
            listed = segment.checkpoint.files
            now = [store.log_file_now(f.name) for f in listed]
            if None in now:
                relists = _relist(store, relists, exc)
                continue
            replaced = any(f.replaced_by(n) for f, n in zip(listed, now, strict=True))
            if replaced and transient < _MAX_TRANSIENT_RETRIES:
                # Replaced since the listing (another writer's checkpoint of the same version) on a store
                # whose reads do not pin the object (gcsfs, adlfs): the read mixed two files' bytes.
                transient += 1
                log.info("a checkpoint of %s was replaced while read (%s); reading it again", store.uri, exc)
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


@dataclass
class _SmallState:
    """What a snapshot holds before its file list: the small actions, and where they were read."""

    protocol: Protocol | None
    metadata: Metadata | None
    txns: dict[str, SetTransaction]
    domains: dict[str, DomainMetadata]
    checksum: VersionChecksum | None
    known: dict[int, bytes]
    commit_infos: dict[int, dict[str, Any]]
    metadata_origin: tuple[str, int | None] | None = None
    metadata_checked: bool = True

    def check_metadata(self) -> None:
        """Only the metaData that wins is checked, as only it is used, at the file and line it came from."""
        if self.metadata is not None and not self.metadata_checked:
            try:
                check_metadata(self.metadata)
            except ValueError as exc:
                path, line = self.metadata_origin or (None, None)
                raise CorruptLogError(f"invalid metaData: {exc}", path=path, line=line) from None
            self.metadata_checked = True


def _read_small_state(store: LogStore, segment: LogSegment, *, use_checksum: bool = True) -> _SmallState:
    """The segment's small actions: from its newest checksum and the commits after it, else from the
    checkpoint's small-action columns and the commits after it."""
    crc = read_usable_checksum(store, segment) if use_checksum else None
    if crc is not None:  # the commits after it, one by one (the checksum is carried over each)
        versions = [(commit_version(f.name), f) for f in segment.commits]
        tail = [(v, f) for v, f in versions if v is not None and v > crc.version]
    else:  # after the checkpoint, log compactions in place of the commits they cover
        tail = segment.commit_cover()
    datas = store.read_log_files(f.name for _, f in tail)
    if crc is not None:
        small = _SmallState(crc.protocol, crc.metadata, dict(crc.set_transactions or {}),
                            dict(crc.domain_metadata or {}), crc, {}, {})  # fmt: skip
        for (v, f), data in zip(tail, datas, strict=True):
            _apply_effect(small, commit_effect(v, data, store.log_file(f.name)), data)
        return small
    # No checksum to carry forward: the commits (and compactions) after the checkpoint in one parse.
    commits = Actions(fields=_KEYS_ONLY)
    chunks = [(v, store.log_file(f.name), d) for (v, f), d in zip(tail, datas, strict=True)]
    parse_json_actions(commits, chunks)
    base = Actions()
    read_checkpoint(base, store, segment, small_only=True)
    if base.metadata is not None and commits.metadata is None:
        try:
            check_metadata(base.metadata)
        except ValueError as exc:
            where = base.metadata_origin[0] if base.metadata_origin else "checkpoint"
            raise CheckpointReadError(f"invalid metaData in {where}: {exc}") from None
    small = _SmallState(base.protocol, base.metadata, dict(base.txns),
                        {k: v for k, v in base.domains.items() if not v.removed}, None,
                        {}, {}, base.metadata_origin)  # fmt: skip
    _apply_actions(small, commits)
    small.commit_infos.update(commits.commit_infos)
    small.known.update(
        (v, d) for (v, f), d in zip(tail, datas, strict=True) if commit_version(f.name) is not None
    )
    return small


def _apply_actions(small: _SmallState, acc: Actions) -> None:
    """The small actions of later commits over ``small``: the latest protocol, metaData, txn per app and
    domain win ("Action Reconciliation"); a removed domain goes."""
    if acc.metadata is not None:
        small.metadata, small.metadata_origin = acc.metadata, acc.metadata_origin
        small.metadata_checked = False
    small.protocol = acc.protocol or small.protocol
    small.txns.update(acc.txns)
    for name, d in acc.domains.items():
        if d.removed:
            small.domains.pop(name, None)
        else:
            small.domains[name] = d


def _apply_effect(small: _SmallState, effect: CommitEffect, data: bytes | None) -> None:
    """Apply one commit (``data``: its bytes, kept for the file list's replay) or one log compaction
    (``data`` None: not a commit, and no checksum goes on over it)."""
    _apply_actions(small, effect.actions)
    if data is None:
        small.checksum = None
        return
    if effect.commit_info is not None:
        small.commit_infos[effect.version] = effect.commit_info
    small.known[effect.version] = data
    if small.checksum is not None:
        small.checksum = advance(small.checksum, effect)


# A checksum written before its commit was left by an earlier table at the same place. Copies of a table
# (cp, provisioning, a restore from backup) write its files in any order within moments of each other, so only
# a checksum older than its commit by more than this is taken for such a leftover.
STALE_CHECKSUM_MARGIN_MS = 2_000
def read_usable_checksum(store: LogStore, segment: LogSegment) -> VersionChecksum | None:
    """The segment's newest checksum when a reader can start from it: well formed, not older than its
    commit, naming every ``txn`` and domain, with metadata a reader can use. Otherwise ``None``, with a
    warning naming the file when it is there but not usable."""
    f = segment.checksum
    if f is None:
        return None
    version = checksum_version(f.name)
    assert version is not None
    where = store.log_file(f.name)
    own = next((c for c in segment.commits if commit_version(c.name) == version), None)
    if own is not None and f.modification_time < own.modification_time - STALE_CHECKSUM_MARGIN_MS:
        log.warning("ignoring %s: it is older than its commit, so it was not written for it", where)
        return None
    try:
        crc = parse_checksum(store.read_log_file(f.name), version, where)
        check_metadata(crc.metadata)
    except FileNotFoundError:
        return None
    except ChecksumError as exc:
        log.warning("ignoring %s", exc)
        return None
    except ValueError as exc:
        log.warning("ignoring %s: invalid metadata: %s", where, exc)
        return None
    except OSError as exc:
        log.warning("cannot read %s (%s); reading the log instead", where, exc)
        return None
    if not crc.complete:
        return None  # it leaves out app transactions or domains: the log has them
    return crc


def _snapshot(
    store: LogStore,
    segment: LogSegment,
    small: _SmallState,
    now_ms: int | None,
    fields: FileFields,
    keep_expired_tombstones: bool,
    built_state: TableState | None = None,
) -> Snapshot:
    small.check_metadata()
    where = f"table {store.uri} at version {segment.version}"
    if small.protocol is None:
        raise CorruptLogError(f"{where} has no protocol action", path=store.log_path)
    check_read_supported(small.protocol, where=where)
    if small.metadata is None:
        raise CorruptLogError(f"{where} has no metaData action", path=store.log_path)
    config = TableConfiguration(small.protocol, small.metadata)
    now = int(time.time() * 1000) if now_ms is None else now_ms
    txns = small.txns
    txn_retention = config.set_transaction_retention_ms
    if txn_retention is not None:
        # delta.setTransactionRetentionDuration: a txn last updated before the window is forgotten, as in
        # Delta Spark and delta-kernel-rs; one without lastUpdated never expires.
        oldest = now - txn_retention
        txns = {k: t for k, t in txns.items() if t.last_updated is None or t.last_updated > oldest}
    crc = small.checksum
    snap = Snapshot(
        store=store,
        segment=segment,
        version=segment.version,
        timestamp=_version_timestamp(store, segment, config, small.commit_infos.get(segment.version), crc),
        protocol=small.protocol,
        metadata=small.metadata,
        app_transaction_actions=txns,
        domain_metadata=small.domains,
        fields=fields,
        keep_expired_tombstones=keep_expired_tombstones,
        checksum=crc if crc is not None and crc.version == segment.version else None,
        now_ms=now,
        known_commits=small.known,
        commit_infos=small.commit_infos,
        built_state=built_state,
    )
    object.__setattr__(snap, "table_configuration", config)  # read once per version
    return snap


def validate_checksum(snap: Snapshot) -> VersionChecksum:
    """Compare the checksum file of ``snap``'s version with the state its log replays to ("State
    Validation"): the checksum when they agree, ``ChecksumError`` naming the file and the fields that
    differ when they do not, or when there is no checksum file of that version or it cannot be read."""
    store = snap.store
    name = f"{snap.version:020d}.crc"
    where = store.log_file(name)
    try:
        data = store.read_log_file(name)
    except FileNotFoundError:
        raise ChecksumError(
            f"version {snap.version} of {store.uri} has no checksum file", path=where
        ) from None
    crc = parse_checksum(data, snap.version, where)
    segment, state = replay_version(store, snap.version, ALL_FILE_FIELDS, snap.known_commits)
    assert state.protocol is not None and state.metadata is not None
    found = checksum_of_state(snap.version, state.protocol, state.metadata, state.files, state.txns,
                              state.domains, crc.in_commit_timestamp)  # fmt: skip
    if wrong := crc.mismatches(found):
        raise ChecksumError(
            f"the checksum of version {snap.version} disagrees with the log on {', '.join(wrong)}", path=where
        )
    return crc


def _read_again(cause: BaseException | None) -> bool:
    """Whether a checkpoint read that failed with ``cause`` is worth repeating as it is: a transient
    network error, or the object replaced between its opening and a read (s3fs raises ``EBUSY`` when the
    ETag changed: checkpoints may be written again at the same version, "Checkpoints")."""
    return isinstance(cause, TRANSIENT_ERRORS) or (isinstance(cause, OSError) and cause.errno == errno.EBUSY)


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
    those commits, so that the next snapshot need not read them again. The file list is carried forward
    when ``snap`` had it in memory, else left to be replayed when asked for."""
    expected = list(range(snap.version + 1, snap.version + 1 + len(commits)))
    if [commit_version(f.name) for f in commits] != expected:
        raise ValueError(f"commits after version {snap.version} must follow it without a gap")
    store = snap.store
    # Commits' bytes are kept for a file list still to be replayed; one carried forward needs none.
    known = {} if snap.files_loaded else dict(snap.known_commits)
    small = _SmallState(
        snap.protocol, snap.metadata, dict(snap.app_transaction_actions), dict(snap.domain_metadata),
        snap.checksum, known, dict(snap.commit_infos),
    )  # fmt: skip
    for f, data in zip(commits, datas, strict=True):
        v = commit_version(f.name)
        assert v is not None
        _apply_effect(small, commit_effect(v, data, store.log_file(f.name)), data)
    if snap.files_loaded:
        small.known.clear()
    built = None
    if snap.files_loaded:
        built = apply_commits(snap._replayed, store, tuple(commits), list(datas))
    segment = LogSegment(
        snap.version + len(commits),
        snap.segment.checkpoint,
        snap.segment.commits + tuple(commits),
        snap.segment.checksum,
    )
    return _snapshot(store, segment, small, now_ms, snap.fields, snap.keep_expired_tombstones, built)


def after_commit_checksum(snap: Snapshot) -> VersionChecksum | None:
    """The checksum of ``snap``'s version for a writer that just committed it: carried forward from an
    older checksum when every commit since could be counted, else computed from the file list when that
    is in memory anyway; ``None`` when neither (a replay only for a checksum would cost every commit
    what the checksum saves readers). With ``delta.setTransactionRetentionDuration`` set, app
    transactions are left out: which have expired depends on when the file is read."""
    crc = snap.checksum
    if (crc is None or crc.totals is None) and snap.files_loaded and snap.fields.complete:
        state = snap._replayed
        info = snap.commit_info or {}
        crc = checksum_of_state(
            snap.version, snap.protocol, snap.metadata, state.files, state.txns, state.domains,
            info.get("inCommitTimestamp") if isinstance(info.get("inCommitTimestamp"), int) else None,
        )  # fmt: skip
    if crc is None or crc.totals is None:
        return None
    if snap.table_configuration.set_transaction_retention_ms is not None:
        crc = replace(crc, set_transactions=None)
    return crc


def _same_file(a: FileMeta, b: FileMeta) -> bool:
    return a.size == b.size and a.modification_time == b.modification_time


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
    store: LogStore,
    segment: LogSegment,
    config: TableConfiguration,
    info: dict | None,
    crc: VersionChecksum | None,
) -> int:
    """In-commit timestamp when the table enables it at this version (from the commit, else from the
    checksum of this version), else the commit file's mtime."""
    enabled_from = config.in_commit_timestamps_from
    if enabled_from is not None and segment.version >= enabled_from:
        crc_ict = crc.in_commit_timestamp if crc is not None and crc.version == segment.version else None
        if info is None and crc_ict is not None:
            return crc_ict
        if info is None:
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
