"""Conflict detection between a transaction and the commits that won the race for its version.

Follows Delta Spark's ``ConflictChecker`` for its isolation levels: a protocol or metadata change always
conflicts; files added by a winner conflict only if this transaction read the data they fall in (under
WriteSerializable only if the winner was not a blind append; under SnapshotIsolation, which Delta Spark uses
for transactions that change no data, never); removed files conflict with files this transaction read or
removed, and with partitions it read; app ids this transaction depends on must not move. A metadata change
that only moves identity high-water marks passes a transaction that changes no metadata; two commits that
set the same metadata domain conflict, except ``delta.rowTracking``, whose ids the loser reassigns.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote

from ..actions.actions import AddFile, DomainMetadata, SetTransaction, check_commit_info
from ..actions.commit_info import VACUUM_START, identity_only_update, vacuum_cutoff
from ..base.errors import (
    ConcurrentAppendError,
    ConcurrentDeleteDeleteError,
    ConcurrentDeleteReadError,
    ConcurrentTransactionError,
    ConcurrentVacuumError,
    CorruptLogError,
    MetadataChangedError,
    ProtocolChangedError,
    shown,
)
from ..features.row_tracking import DOMAIN as ROW_TRACKING_DOMAIN
from ..files.commit_json import action_lines
from ..snapshot.snapshot import Snapshot


@dataclass
class WinningCommit:
    """What a concurrent commit did, as far as conflict detection needs to know."""

    version: int
    operation: str | None = None
    txn_id: str | None = None
    blind_append: bool = False
    changed_protocol: bool = False
    changed_metadata: bool = False
    data_adds: list[dict[str, Any]] = field(default_factory=list)  # adds with dataChange=true
    removed: dict[str, Mapping[str, str | None] | None] = field(default_factory=dict)  # path -> partition
    app_ids: dict[str, int] = field(default_factory=dict)
    vacuum_cutoff: int | None = None  # a VACUUM START: it may delete unreferenced files older than this
    identity_only: bool = False  # its metaData only moves identity high-water marks (commitInfo.tags)
    domains: dict[str, str] = field(default_factory=dict)  # domain -> configuration it set

    @classmethod
    def parse(cls, version: int, data: bytes, *, path: str) -> WinningCommit:
        """Read a commit that won a race; a line a reader could not interpret names its file and line."""
        win = cls(version)
        for lineno, obj in action_lines(data, path):
            for name, body in obj.items():
                if body is None:
                    continue
                try:
                    win._take(name, body)
                except ValueError as exc:
                    raise CorruptLogError(f"invalid {name} action: {exc}", path=path, line=lineno) from None
        return win

    def _take(self, name: str, body: Any) -> None:
        if name in _FILE_ACTIONS:
            _check_file_action(name, body)
        elif name in ("commitInfo", "txn", "domainMetadata") and not isinstance(body, dict):
            raise ValueError(f"{name} must be a JSON object, not {shown(body)}")
        if name == "commitInfo":
            check_commit_info(body)
            self.operation = body.get("operation")
            self.txn_id = body.get("txnId")
            self.blind_append = bool(body.get("isBlindAppend"))
            self.vacuum_cutoff = vacuum_cutoff(body)
            self.identity_only = identity_only_update(body)
        elif name == "protocol":
            self.changed_protocol = True
        elif name == "metaData":
            self.changed_metadata = True
        elif name == "add" and body.get("dataChange", True):
            self.data_adds.append(body)
        elif name == "remove":  # dataChange=false too: a compaction removes what others read
            self.removed[unquote(body["path"])] = body.get("partitionValues")
        elif name == "txn":
            txn = SetTransaction.from_json(body)
            self.app_ids[txn.app_id] = txn.version
        elif name == "domainMetadata":
            domain = DomainMetadata.from_json(body)
            self.domains[domain.domain] = domain.configuration


_FILE_ACTIONS = ("add", "remove")


def _check_file_action(name: str, body: Any) -> None:
    """What conflict detection reads of a file action: its path and partition values."""
    if not isinstance(body, dict) or not isinstance(body.get("path"), str):
        raise ValueError(f"{name} must be a JSON object with a string path, not {shown(body)}")
    values = body.get("partitionValues")
    if values is not None and not isinstance(values, dict):
        raise ValueError(f"{name}.partitionValues must be an object, not {shown(values)}")


@dataclass
class ReadSet:
    """What a transaction read: it decides which concurrent changes invalidate it.

    ``whole_table`` for a read without a partition filter (e.g. an overwrite); ``partitions`` for reads
    restricted to partitions (each a mapping of partition column -> serialised value); ``predicates`` for
    reads by a predicate (each tells whether serialised partition values can hold rows it matches: Delta
    Spark's read predicates, of which its checker evaluates the partition part on concurrent adds);
    ``files`` for the paths read (every removed file was read); ``app_ids`` for the application ids checked.
    """

    whole_table: bool = False
    partitions: list[Mapping[str, str | None]] = field(default_factory=list)
    files: set[str] = field(default_factory=set)
    app_ids: set[str] = field(default_factory=set)
    predicates: list[Callable[[Mapping[str, str | None]], bool]] = field(default_factory=list)

    def is_blind(self) -> bool:
        return not (self.whole_table or self.partitions or self.files or self.predicates)

    def covers(self, partition_values: Mapping[str, str | None]) -> bool:
        if self.whole_table:
            return True
        if any(all(partition_values.get(k) == v for k, v in p.items()) for p in self.partitions):
            return True
        return any(matches(partition_values) for matches in self.predicates)


def check_conflicts(
    win: WinningCommit,
    read: ReadSet,
    removed: set[str],
    *,
    isolation: str,
    changes_metadata: bool,
    oldest_add_ms: int | None = None,
    domains: frozenset[str] = frozenset(),
) -> None:
    """Raise the ``ConcurrentModificationError`` subclass Delta Spark would raise, else return.

    Beyond Delta Spark: a concurrent ``VACUUM START`` conflicts with a commit adding files older than its
    cut-off (``oldest_add_ms``, the oldest added file's modification time): VACUUM listed them unreferenced
    and may be deleting them, so committing them would reference missing files.
    """
    kw = {"winning_version": win.version, "winning_operation": win.operation}
    if win.vacuum_cutoff is not None and oldest_add_ms is not None and oldest_add_ms < win.vacuum_cutoff:
        raise ConcurrentVacuumError(
            "a VACUUM started concurrently and may delete the files this transaction adds (they were written "
            "before its cut-off and unreferenced when it listed them): write them again and retry",
            **kw,
        )
    if win.changed_protocol:
        raise ProtocolChangedError("the protocol of the table changed since this transaction read it", **kw)
    if win.changed_metadata and (changes_metadata or not win.identity_only):
        raise MetadataChangedError("the table metadata changed since this transaction read it", **kw)
    if hit := sorted((win.domains.keys() & domains) - {ROW_TRACKING_DOMAIN}):
        raise ConcurrentTransactionError(f"metadata domain {hit[0]!r} was set concurrently", **kw)
    # WriteSerializable lets blind appends pass unless this transaction changes the metadata;
    # SnapshotIsolation (a transaction that changes no data) lets every append pass.
    sees_appends = isolation == "Serializable" or changes_metadata or not win.blind_append
    if win.data_adds and not read.is_blind() and sees_appends and isolation != "SnapshotIsolation":
        for add in win.data_adds:
            if read.covers(add.get("partitionValues") or {}):
                where = add.get("partitionValues") or "the table"
                raise ConcurrentAppendError(f"files were added to {where} that this transaction read", **kw)
    if win.removed:
        if read.whole_table:
            raise ConcurrentDeleteReadError("a file this transaction read was removed", **kw)
        if hit := sorted(win.removed.keys() & read.files):
            raise ConcurrentDeleteReadError(f"{hit[0]} was removed but this transaction read it", **kw)
        for path, values in sorted(win.removed.items()):
            # A remove without partitionValues may be in any partition this transaction read.
            if read.partitions and (values is None or read.covers(values)):
                raise ConcurrentDeleteReadError(
                    f"{path} was removed from a partition this transaction read", **kw
                )
        if hit := sorted(win.removed.keys() & removed):
            raise ConcurrentDeleteDeleteError(f"{hit[0]} was removed by both transactions", **kw)
    if hit := sorted(set(win.app_ids) & read.app_ids):
        raise ConcurrentTransactionError(f"application id {hit[0]!r} committed concurrently", **kw)


def oldest_modification(adds: Sequence[AddFile]) -> int | None:
    """The oldest modification time among files a commit adds: what a concurrent VACUUM could have found
    unreferenced (and deleted, when older than its cut-off)."""
    return min((a.modification_time for a in adds), default=None)


def check_vacuum_in_progress(snapshot: Snapshot, adds: Sequence[AddFile], uri: str) -> None:
    """Refuse to add files that a VACUUM which started before ``snapshot`` (and has not ended in it) may be
    deleting: files older than its cut-off (see ``commit_info.vacuum_cutoff``)."""
    oldest = oldest_modification(adds)
    if snapshot.vacuum_cutoff is None or oldest is None or oldest >= snapshot.vacuum_cutoff:
        return
    raise ConcurrentVacuumError(
        f"a VACUUM of {uri} is in progress (started before version {snapshot.version}, not ended) and may "
        "delete the files this transaction adds: they were written before its cut-off. Write them again "
        "and retry",
        winning_version=snapshot.version,
        winning_operation=VACUUM_START,
    )
