"""Transactions: optimistic commits with put-if-absent, conflict checks, and exactly-once app ids.

Spec: "Requirements for Writers", "Transaction Identifiers"; the commit protocol of the Delta paper
(002): write ``N.json`` only if absent; on losing the race, read the winners, check for conflicts, and
retry at the next version. Every commit carries a unique ``txnId`` in its commitInfo, so that a commit
whose acknowledgement was lost (timeout, reset connection) is recognised instead of written twice
(``atomic_commit``). The bytes of each attempt are ``commit_file``'s.
"""

from __future__ import annotations

import logging
import random
import time
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from ..actions.actions import (
    AddCDCFile,
    AddFile,
    DomainMetadata,
    Metadata,
    Protocol,
    RemoveFile,
    SetTransaction,
)
from ..actions.commit_file import Actions, Provenance, commit_bytes, now_ms
from ..actions.commit_info import VACUUM_START, commit_info_args, in_commit_timestamp_of
from ..base.arguments import bool_arg, int_arg, str_arg, str_map_arg
from ..base.arrow_utils import from_strings
from ..base.errors import (
    CommitFailedError,
    ConcurrentTransactionError,
    ConcurrentVacuumError,
    DeltaError,
    InvalidCommitError,
    MetadataChangedError,
    ProtocolChangedError,
    StaleSnapshotError,
)
from ..expressions.expressions import Expr
from ..expressions.skipping import partition_matcher
from ..expressions.sql_parser import UnsupportedExpressionError, parse
from ..features.clustering import domain_for
from ..features.configuration import DEFAULT_ISOLATION, ISOLATION_LEVELS, TableConfiguration
from ..features.identity import with_high_water_marks
from ..features.row_tracking import DOMAIN as ROW_TRACKING_DOMAIN
from ..features.row_tracking import RowIdAssignment, plan_row_ids
from ..files.segment import commit_name, commit_version
from ..files.storage import FileMeta
from ..files.version_checksum import VersionChecksum, commit_effect, first_checksum, write_checksum
from ..snapshot.checkpoint import write_checkpoint
from ..snapshot.file_references import FileRef, file_refs, live_files, new_adds, tombstone
from ..snapshot.history import locate_app_transaction
from ..snapshot.replay import TableState
from ..snapshot.snapshot import Snapshot, after_commit_checksum, extend_snapshot, load_snapshot
from ..snapshot.table_context import TableContext
from .change_data import write_change_data
from .committer import Committer, committer_for
from .conflicts import (
    ReadSet,
    WinningCommit,
    check_conflicts,
    check_vacuum_in_progress,
    oldest_modification,
)
from .row_deletion import INLINE_MAX_BYTES, RowDeletes
from .visibility import holds_effects
from .writer_rules import (
    check_table_writable,
    checked_metadata,
    checked_protocol,
    domain_metadata,
    validate_commit,
)

log = logging.getLogger(__name__)
DEFAULT_MAX_ATTEMPTS = 200


@dataclass(frozen=True)
class CommitResult:
    """``version`` holds the data; ``already_committed`` when the app transaction was already there."""

    version: int
    already_committed: bool = False
    attempts: int = 1
    txn_id: str | None = None


class Transaction:
    """Collects actions against a read snapshot and commits them atomically as the next version.

    :param table: the table to commit to.
    :param snapshot: the snapshot this transaction read; ``None`` only when creating a table.
    :param isolation: ``"Serializable"`` or ``"WriteSerializable"``; by default the table's
        ``delta.isolationLevel`` (Serializable when unset), as Delta Spark decides. A transaction that
        changes no data (only ``dataChange=false`` files, e.g. a compaction) is checked with
        SnapshotIsolation, as Delta Spark does, so concurrent appends never fail it.
    :param allow_unsafe_storage: commit on a backend without atomic create-if-absent (single writer only).
    :param committer: where the commit goes (``committer.Committer``); by default the one the table's
        configuration asks for: put-if-absent on its storage.
    """

    def __init__(
        self,
        table: TableContext,
        snapshot: Snapshot | None,
        *,
        isolation: str | None = None,
        allow_unsafe_storage: bool = False,
        committer: Committer | None = None,
    ) -> None:
        if isolation is not None and isolation not in ISOLATION_LEVELS[:2]:
            raise ValueError(f"isolation must be one of {ISOLATION_LEVELS[:2]}, not {isolation!r}")
        if not isinstance(table, TableContext):
            raise TypeError(f"table must be a DeltaTable (a TableContext), not {type(table).__name__}")
        if snapshot is not None and not isinstance(snapshot, Snapshot):
            raise TypeError(f"snapshot must be a Snapshot or None, not {type(snapshot).__name__}")
        if snapshot is not None:
            check_table_writable(snapshot, f"table {table.uri}")
        self.table = table
        self.snapshot = snapshot
        self.isolation = isolation
        self.allow_unsafe_storage = bool_arg(allow_unsafe_storage, "allow_unsafe_storage")
        self.adds: list[AddFile] = []
        self.removes: list[RemoveFile] = []
        self.app_transaction: SetTransaction | None = None
        self.metadata: Metadata | None = None
        self.protocol: Protocol | None = None
        self.domains: list[DomainMetadata] = []
        self.read = ReadSet()
        self.row_deletes = RowDeletes()
        self.cdc_files: list[AddCDCFile] = []
        self.constraints_checked = False
        self.identity_high_water_marks: dict[str, int] = {}
        self.committed_adds: list[AddFile] = []  # the adds as committed: with row ids, once committed
        self._identity_only: bool | None = None  # the metaData only moves identity marks (commitInfo.tags)
        self._row_ids: RowIdAssignment | None = None
        self._attempts: dict[int, list[AddFile]] = {}  # version -> the adds that attempt wrote
        self._committed = False
        self._committer: Committer | None = committer  # chosen from the configuration at commit when None
        # The commits that won against this transaction since ``snapshot``, as listed and read: with its own
        # commit file once visible, what the snapshot after the commit is built from (``_hand_off``).
        self._winners: list[tuple[FileMeta, bytes]] = []
        self._configuration: TableConfiguration | None = None

    @property
    def configuration(self) -> TableConfiguration | None:
        """The table configuration this commit writes under: its pending protocol and metadata applied to
        the snapshot's (``None`` while a new table has neither). Read once per change of either."""
        snap = self.snapshot
        protocol = self.protocol or (snap.protocol if snap else None)
        metadata = self.metadata or (snap.metadata if snap else None)
        if protocol is None or metadata is None:
            return None
        if snap is not None and protocol is snap.protocol and metadata is snap.metadata:
            return snap.table_configuration
        cached = self._configuration
        if cached is None or cached.protocol is not protocol or cached.metadata is not metadata:
            cached = self._configuration = TableConfiguration(protocol, metadata)
        return cached

    # -- building -----------------------------------------------------------------------------------------
    # Arguments are checked at the call (a wrong type is a TypeError, a file that is not live a
    # FileNotLiveError naming it); nothing is written before commit().
    def add_files(
        self, files: Iterable[AddFile] | AddFile, *, constraints_checked: bool = False
    ) -> Transaction:
        """Add files (``AddFile`` actions or their JSON bodies); ``constraints_checked=True`` states their
        rows satisfy the table's invariants, CHECK constraints and generated columns (the core cannot
        evaluate SQL)."""
        self._check_open()
        checked = bool_arg(constraints_checked, "constraints_checked")
        self.adds.extend(new_adds(files))
        self.constraints_checked = self.constraints_checked or checked
        return self

    def remove_files(self, files: Iterable[FileRef] | FileRef, *, data_change: bool = True) -> Transaction:
        """Remove live files, named by path (relative to the root), rows of ``Snapshot.files``, or
        ``AddFile``/``RemoveFile``: each remove is built from the live add, its deletion vector included,
        so that it reconciles (a ``RemoveFile``'s own timestamp and dataChange are kept). Removed files
        count as read."""
        self._check_open()
        data_change = bool_arg(data_change, "data_change")
        refs = file_refs(files, "files")
        now = now_ms()
        for ref, live in zip(refs, live_files(self.snapshot, refs, what="remove"), strict=True):
            self.row_deletes.check_not_deleting(live.path)
            self.removes.append(tombstone(live, now, data_change=data_change, like=ref))
            self.read.files.add(live.path)
        return self

    def delete_rows(
        self,
        rows: Mapping[str, Any] | Iterable[tuple[FileRef, Any]],
        *,
        inline_max_bytes: int = INLINE_MAX_BYTES,
    ) -> Transaction:
        """Mark rows of live files deleted with deletion vectors (``row_deletion``): ``{path: row indexes}``
        or (file, row indexes) pairs, a row index being a row's 0-based position in its Parquet file; rows
        given in several calls add up. Vectors up to ``inline_max_bytes`` go inline in the log. Needs
        ``delta.enableDeletionVectors=true``; an index beyond a file's rows is refused here. The files
        count as read."""
        self._check_open()
        removed = {r.path for r in self.removes}
        self.read.files.update(self.row_deletes.add(self, removed, rows, inline_max_bytes))
        return self

    def add_change_data(self, rows: pa.Table | pa.RecordBatch) -> Transaction:
        """Record change data with this commit (``change_data``): the table's columns by logical name and
        ``_change_type``. Written now, as data files are before their commit. A commit with change data
        is read only through it by change-data-feed readers, so it must describe every row the commit
        changes; needs ``delta.enableChangeDataFeed=true``."""
        self._check_open()
        store = self.table.store
        self.cdc_files.extend(write_change_data(store, self.configuration, rows))
        return self

    def set_app_transaction(self, app_id: str, version: int) -> Transaction:
        """Record ``app_id`` at ``version`` atomically with this commit ("Transaction Identifiers")."""
        self._check_open()
        app_id = str_arg(app_id, "app_id", empty=False)
        self.app_transaction = SetTransaction(app_id, int_arg(version, "version", minimum=0), now_ms())
        self.read.app_ids.add(app_id)
        return self

    def update_metadata(self, metadata: Metadata) -> Transaction:
        self._check_open()
        self.metadata = checked_metadata(metadata, f"table {self.table.uri}")
        return self

    def update_protocol(self, protocol: Protocol) -> Transaction:
        self._check_open()
        self.protocol = checked_protocol(protocol, f"table {self.table.uri}")
        return self

    def set_domain_metadata(
        self, domain: str, configuration: str | Mapping[str, Any], *, removed: bool = False
    ) -> Transaction:
        """Set (or remove) a domain's configuration: a string, or a mapping stored as its JSON."""
        self._check_open()
        self.domains.append(domain_metadata(domain, configuration, removed))
        return self

    def set_identity_high_water_marks(self, marks: Mapping[str, int]) -> Transaction:
        """Move identity columns' high-water marks past the values this commit's files hold (column ->
        the furthest value written), in the schema committed with it ("Identity Columns"); generate the
        values with ``identity.IdentityValues`` or ``identity.columns_to_generate``."""
        self._check_open()
        for name, value in marks.items():
            self.identity_high_water_marks[name] = int(value)
        return self

    def set_clustering_columns(self, columns: Sequence[str]) -> Transaction:
        """Make ``columns`` (logical names) the table's clustering columns ("Clustered Table")."""
        self._check_open()
        config = self.configuration
        if config is None:
            raise InvalidCommitError("set the table's protocol and metadata before its clustering columns")
        self.domains.append(domain_for(config.metadata, columns))
        return self

    def read_whole_table(self) -> Transaction:
        """Declare a read of all data (e.g. an overwrite): any concurrent data change then conflicts."""
        self._check_open()
        self.read.whole_table = True
        return self

    def read_partitions(self, *partitions: Mapping[str, str | None]) -> Transaction:
        """Declare reads restricted to partitions, given as serialised partition values."""
        self._check_open()
        self.read.partitions.extend(str_map_arg(p, "partition", null_values=True) for p in partitions)
        return self

    def read_files(self, paths: Iterable[str]) -> Transaction:
        """Declare live files read (e.g. those a predicate's skipping kept): a concurrent remove of one of
        them conflicts (``ConcurrentDeleteReadError``), as in Delta Spark's ``readFiles``."""
        self._check_open()
        self.read.files.update(str_arg(p, "path", empty=False) for p in paths)
        return self

    def read_predicate(self, predicate: str | Expr) -> Transaction:
        """Declare a read of the rows matching ``predicate`` (Spark SQL text or a parsed tree), as Delta
        Spark's DELETE, UPDATE and MERGE record it: a concurrent append conflicts when its partition values
        may hold such rows (data columns cannot be judged from them, so on an unpartitioned table every
        append does). A predicate the parser does not support reads the whole table."""
        self._check_open()
        if self.snapshot is None:
            raise InvalidCommitError("a transaction that creates a table reads nothing")
        try:
            expr = parse(predicate) if isinstance(predicate, str) else predicate
        except UnsupportedExpressionError:
            self.read.whole_table = True
            return self
        config = self.snapshot.table_configuration
        self.read.predicates.append(partition_matcher(config.metadata, expr, config.column_mapping_mode))
        return self

    def _check_open(self) -> None:
        if self._committed:
            raise DeltaError("this transaction was already committed; start a new one")

    def _prepare(self) -> None:
        """Once, before the first attempt: the vectors of ``delete_rows`` written, their actions added."""
        if (done := self.row_deletes.actions(self, now_ms())) is not None:
            self.adds.extend(done.adds)
            self.removes.extend(done.removes)

    # -- committing ---------------------------------------------------------------------------------------
    def commit(
        self,
        operation: str = "WRITE",
        operation_parameters: Mapping[str, Any] | None = None,
        *,
        max_attempts: int = DEFAULT_MAX_ATTEMPTS,
        user_metadata: str | None = None,
        auto_checkpoint: bool = True,
        operation_metrics: Mapping[str, Any] | None = None,
    ) -> CommitResult:
        """Commit as the next version; retry past concurrent commits that do not conflict.

        With ``auto_checkpoint``, a commit whose version is a multiple of ``delta.checkpointInterval``
        (default 10) is followed by a checkpoint, as Delta Spark does; a failure there is logged, never
        raised, since the commit itself has landed.
        """
        self._check_open()
        operation, operation_parameters, operation_metrics, user_metadata = commit_info_args(
            operation, operation_parameters, operation_metrics, user_metadata
        )
        max_attempts = int_arg(max_attempts, "max_attempts", minimum=1)
        auto_checkpoint = bool_arg(auto_checkpoint, "auto_checkpoint")
        snap = self.snapshot
        if snap is not None and (done := self._already_committed(snap.app_transactions, snap.version)):
            return done
        self._prepare()
        if not operation_metrics and self.row_deletes.metrics is not None:
            operation_metrics = self.row_deletes.metrics  # Delta Spark's DELETE metrics
        self._apply_identity_marks()
        validate_commit(self)
        committer = self._committer_for_commit()
        self._check_vacuum_in_progress()
        self._row_ids = self._plan_row_ids()
        txn_id = str(uuid.uuid4())
        version = 0 if snap is None else snap.version + 1
        previous_ict = _ict_of(snap)
        attempts = 0
        base_seen = False  # the log was just listed up to version - 1 (the last attempt's winners)
        while True:
            attempts += 1
            ict = None
            if self._ict_enabled():  # each in-commit timestamp must exceed the previous one
                ict = now_ms() if previous_ict is None else max(now_ms(), previous_ict + 1)
            adds, domains = self._file_actions(version)
            provenance = Provenance(
                operation=operation, parameters=operation_parameters, metrics=operation_metrics,
                user_metadata=user_metadata, txn_id=txn_id,
                read_version=self.snapshot.version if self.snapshot is not None else None,
                isolation_level=self.isolation_level(), blind_append=self._is_blind_append(),
                identity_only=bool(self._identity_only),
            )  # fmt: skip
            actions = Actions(
                protocol=self.protocol, metadata=self.metadata, txn=self.app_transaction, domains=domains,
                adds=adds, removes=self.removes, cdc=self.cdc_files,
            )  # fmt: skip
            data = commit_bytes(provenance, actions, ict)
            outcome, why = committer.commit(version, data, txn_id, base_seen=base_seen)
            if outcome == "ours":
                self._committed = True
                self.committed_adds = adds
                log.info("committed version %d of %s (%s)", version, self.table.uri, operation)
                self._hand_off(version, data)
                if auto_checkpoint:
                    self._maybe_checkpoint(version)
                self.table.after_commit(version, self.configuration)
                return CommitResult(version, False, attempts, txn_id)
            if snap is None:
                raise InvalidCommitError(f"a table already exists at {self.table.uri} (version 0 is taken)")
            base_seen = outcome != "stale"
            if outcome == "stale":
                done, latest, previous_ict = self._rebase(version, why)
            else:
                done, latest, previous_ict = self._resolve_conflicts(version, txn_id, previous_ict)
            if done is not None:
                self._committed = True
                self.committed_adds = [] if done.already_committed else self._attempts.get(done.version, [])
                return CommitResult(done.version, done.already_committed, attempts, txn_id)
            snap = self.snapshot
            if attempts >= max_attempts:
                raise CommitFailedError(
                    f"gave up committing to {self.table.uri} after {attempts} attempts; the table is at "
                    f"version {latest} and holds nothing of this transaction"
                )
            version = latest + 1
            # A loser has just read the winners, so it retries at once; under sustained contention a small
            # jitter, growing linearly, spreads the writers out without idling the table.
            if attempts > 2:
                time.sleep(random.uniform(0, min(0.05, 0.001 * attempts)))

    def _maybe_checkpoint(self, version: int) -> None:
        config = self.configuration
        interval = config.checkpoint_interval if config is not None else 10
        if version == 0 or interval <= 0 or version % interval:
            return
        try:
            write_checkpoint(self.table, version)
        except Exception:  # the commit stands; a missing checkpoint only costs readers time
            log.warning(
                "automatic checkpoint of %s at version %d failed", self.table.uri, version, exc_info=True
            )

    def _already_committed(self, app_versions: Mapping[str, int], at_version: int) -> CommitResult | None:
        txn = self.app_transaction
        if txn is None or app_versions.get(txn.app_id, -1) < txn.version:
            return None
        holder = locate_app_transaction(self.table.store, txn.app_id, at_version)
        log.info(
            "app transaction %s version %d is already in %s (version %d): nothing to commit",
            txn.app_id,
            txn.version,
            self.table.uri,
            holder,
        )
        self._committed = True
        return CommitResult(holder, already_committed=True, attempts=0)

    def _hand_off(self, version: int, data: bytes) -> None:
        """Give the table the snapshot after this commit, built from the snapshot read, the winning commits
        read while retrying and this commit as written, as Delta Spark updates its log after a commit: the
        next ``transaction()`` then lists the log without reading those commits again (on object stores,
        a GET each). Skipped, at no cost to correctness, whenever that chain is not whole."""
        snap, own = self.snapshot, self._committer.own_file if self._committer else None
        if snap is None and version == 0:
            self._write_checksum(
                first_checksum(commit_effect(0, data, self.table.store.log_file(commit_name(0))))
            )
        if snap is None or own is None or own.name != commit_name(version):
            return
        files = [f for f, _ in self._winners] + [own]
        try:
            after = extend_snapshot(snap, files, [d for _, d in self._winners] + [data])
        except (ValueError, DeltaError) as exc:  # not whole, or not readable: the next snapshot reads
            log.debug("no snapshot handed over after version %d of %s: %s", version, self.table.uri, exc)
            return
        self.table.advance(after)
        self._write_checksum(after_commit_checksum(after))

    def _write_checksum(self, crc: VersionChecksum | None) -> None:
        """Write the version checksum of the commit that just landed ("Writers SHOULD produce a Version
        Checksum file for each commit"), when it could be computed without replaying the table."""
        if crc is not None and crc.totals is not None:
            write_checksum(self.table.store, crc)

    def _effects_in(self, state: TableState) -> bool:
        return holds_effects(state, self.adds, self.removes, self.app_transaction, self.metadata)

    def _new_files(self) -> list[AddFile]:
        """Adds of files new to the table: a file re-added with a new deletion vector (removed in the same
        commit) is live, so no VACUUM may delete it; only its vector file is new, written just now."""
        removed = {r.path for r in self.removes}
        return [a for a in self.adds if a.path not in removed]

    def _check_vacuum_in_progress(self) -> None:
        if self.snapshot is not None:
            check_vacuum_in_progress(self.snapshot, self._new_files(), self.table.uri)

    def _rebasable(self) -> bool:
        """Whether the commit means the same on any later snapshot with the same protocol and metadata: a
        blind append (reads nothing, removes nothing, changes no metadata, protocol or domain)."""
        return (
            self.read.is_blind()
            and not self.removes
            and self.metadata is None
            and self.protocol is None
            and not self.domains
        )

    def _rebase(self, version: int, why: str) -> tuple[CommitResult | None, int, int | None]:
        """After log cleanup removed what this transaction read: replay it on the latest snapshot when its
        meaning cannot have changed (``_rebasable``), else raise ``StaleSnapshotError``."""
        store = self.table.store
        read = self.snapshot
        assert read is not None
        latest = load_snapshot(store)
        txn = self.app_transaction
        if txn is not None and latest.app_transactions.get(txn.app_id, -1) >= txn.version:
            return self._already_committed(latest.app_transactions, latest.version), latest.version, None
        if (
            self._committer is not None
            and self._committer.maybe_landed
            and self.adds
            and self._effects_in(latest.state())
        ):
            # An earlier attempt whose acknowledgement was lost landed after all.
            return CommitResult(latest.version, already_committed=True), latest.version, None
        where = f"{self.table.uri} (read at version {read.version}, now at version {latest.version})"
        if not self._rebasable():
            raise StaleSnapshotError(
                f"cannot commit to {where}: {why}. This transaction reads or changes data, so the commits it "
                "must be checked against are gone; nothing of it was committed: re-read the table and run "
                "the operation again",
                read_version=read.version,
                latest_version=latest.version,
            )
        operation = (latest.commit_info or {}).get("operation")
        kw = {"winning_version": latest.version, "winning_operation": operation}
        if latest.protocol != read.protocol:
            raise ProtocolChangedError(f"the protocol of {where} changed while log cleanup ran", **kw)
        if latest.metadata != read.metadata:
            raise MetadataChangedError(f"the metadata of {where} changed while log cleanup ran", **kw)
        # The commits removed by cleanup may have held a whole VACUUM (START and END): whether it deleted
        # files this commit adds can only be seen in storage now. A VACUUM still running shows in ``latest``.
        relative = [a.path for a in self.adds if "://" not in a.path and not a.path.startswith("/")]
        if missing := [p for p in relative if not store.exists(store.table_file(p))]:
            raise ConcurrentVacuumError(
                f"{len(missing)} file(s) this transaction adds to {where} no longer exist (e.g. "
                f"{missing[0]}): a VACUUM deleted them while it was open. Write them again and retry",
                winning_version=latest.version,
                winning_operation=VACUUM_START,
            )
        log.warning("%s; committing on the latest snapshot of %s instead", why, where)
        self.snapshot = latest
        self._winners = []
        if self._row_ids is not None and ROW_TRACKING_DOMAIN in latest.domain_metadata:
            self._row_ids.observe(latest.domain_metadata[ROW_TRACKING_DOMAIN].configuration)
        self._check_vacuum_in_progress()
        return None, latest.version, _ict_of(latest)

    def _resolve_conflicts(
        self, version: int, txn_id: str, previous_ict: int | None
    ) -> tuple[CommitResult | None, int, int | None]:
        """Read the commits that won from ``version`` on and decide: done, conflict (raise), or retry."""
        store = self.table.store
        winners = [f for f in store.list_log(version) if commit_version(f.name) is not None]
        contiguous = [f for i, f in enumerate(winners) if commit_version(f.name) == version + i]
        if len(contiguous) != len(winners) or not winners:
            # The winners are not all there to be checked against: log cleanup is deleting them.
            return self._rebase(version, f"commits from version {version} on were removed by log cleanup")
        try:
            datas = store.read_log_files(f.name for f in winners)
        except FileNotFoundError:
            return self._rebase(version, f"commits from version {version} on were removed by log cleanup")
        latest = version - 1
        for f, data in zip(winners, datas, strict=True):
            v = commit_version(f.name)
            assert v is not None
            win = WinningCommit.parse(v, data, path=store.log_file(f.name))
            if win.txn_id == txn_id:  # our own commit, whose acknowledgement was lost earlier
                return CommitResult(v), v, previous_ict
            txn = self.app_transaction
            if txn is not None and txn.app_id in win.app_ids:
                if win.app_ids[txn.app_id] >= txn.version:
                    return CommitResult(v, already_committed=True), v, previous_ict
                raise ConcurrentTransactionError(
                    f"application id {txn.app_id!r} moved to {win.app_ids[txn.app_id]} concurrently",
                    winning_version=v,
                    winning_operation=win.operation,
                )
            check_conflicts(
                win,
                self.read,
                {r.path for r in self.removes},
                isolation=self.isolation_level(),
                changes_metadata=self.metadata is not None,
                oldest_add_ms=oldest_modification(self._new_files()),
                domains=frozenset(d.domain for d in self.domains),
            )
            if self._row_ids is not None:  # ids up to the winner's mark are taken: the retry goes above
                self._row_ids.observe(win.domains.get(ROW_TRACKING_DOMAIN))
            previous_ict = in_commit_timestamp_of(data) or previous_ict
            latest = v
        self._winners.extend(zip(winners, datas, strict=True))
        return None, latest, previous_ict

    def _committer_for_commit(self) -> Committer:
        """The committer the commit goes through: the caller's, else the one the configuration asks for
        (put-if-absent on the table's storage; a catalog-managed table is refused by name)."""
        if self._committer is None:
            config = self.configuration
            assert config is not None  # validate_commit checked
            self._committer = committer_for(
                config,
                self.table.store,
                self.table.uri,
                self._effects_in,
                allow_unsafe=self.allow_unsafe_storage,
            )
        return self._committer

    # -- the actions of an attempt ------------------------------------------------------------------------
    def _ict_enabled(self) -> bool:
        config = self.configuration
        return config is not None and config.in_commit_timestamps_from is not None

    def _apply_identity_marks(self) -> None:
        """Fold the identity marks into the metadata committed (Delta Spark's
        ``precommitUpdateSchemaWithIdentityHighWaterMarks``); remember whether that is its only change."""
        base = self.metadata or (self.snapshot.metadata if self.snapshot else None)
        if not self.identity_high_water_marks or base is None:
            return
        moved = with_high_water_marks(base, self.identity_high_water_marks)
        if self._identity_only is None:
            self._identity_only = self.metadata is None and moved is not base
        self.metadata = moved if moved is not base else self.metadata

    def _plan_row_ids(self) -> RowIdAssignment | None:
        snap, config = self.snapshot, self.configuration
        assert config is not None  # validate_commit checked
        # A recommitted file keeps its ids; a blind append adds files new to the table, so it does not
        # read the file list to look for them (unless it is in memory anyway). Only the adds' own live rows
        # are looked up (streamed when the list is not in memory), and none without adds or row tracking:
        # VACUUM START of a table of 10,000,000 files must not read them all.
        live = None
        wanted = snap is not None and self.adds and config.row_tracking_supported
        if wanted and (snap.files_loaded or not self._is_blind_append()):
            paths = from_strings([a.path for a in self.adds])
            live, _ = snap.filtered_files(lambda t: t.filter(pc.is_in(t.column("path"), value_set=paths)))
        return plan_row_ids(config.protocol, config.metadata, snap.domain_metadata if snap else {},
                            live, self.adds, f"table {self.table.uri}")  # fmt: skip

    def _file_actions(self, version: int) -> tuple[list[AddFile], list[DomainMetadata]]:
        """The adds and domains of the attempt at ``version``: row ids above the mark as last seen."""
        if self._row_ids is None:
            adds, domains = list(self.adds), list(self.domains)
        else:
            adds, mark = self._row_ids.actions(self.adds, version)
            domains = [*self.domains, *([mark] if mark is not None else [])]
        self._attempts[version] = adds
        return adds, domains

    def isolation_level(self) -> str:
        """The level this commit is checked with (and records in commitInfo), as Delta Spark picks it:
        SnapshotIsolation when no file action changes data, else the requested or the table's level."""
        if not any(f.data_change for f in (*self.adds, *self.removes)):
            return "SnapshotIsolation"
        if self.isolation is not None:
            return self.isolation
        config = self.configuration
        return config.isolation_level if config is not None else DEFAULT_ISOLATION

    def _is_blind_append(self) -> bool:
        return (
            bool(self.adds)
            and not self.removes
            and self.read.is_blind()
            and all(a.data_change for a in self.adds)
        )


def _ict_of(snapshot: Snapshot | None) -> int | None:
    """The previous commit's in-commit timestamp when the table enables them (each must exceed it)."""
    if snapshot is None:
        return None
    enabled_from = snapshot.table_configuration.in_commit_timestamps_from
    if enabled_from is None:
        return None
    return snapshot.timestamp
