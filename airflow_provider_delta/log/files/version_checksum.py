"""Version checksum files (``NNN.crc``): a table's protocol, metadata, app transactions, domains and file
totals at one version, in one small JSON object.

Spec: "Version Checksum File". Writers SHOULD write one after each commit; readers MAY use it. This client
does both: a reader takes the protocol, metadata, ``txn`` and ``domainMetadata`` of the newest checksum at
or below a version and replays only the commits after it, so a cold task never opens a checkpoint of
millions of files to learn a table's schema or an application's last version (as delta-kernel-rs does,
``kernel/src/crc/``). A checksum is computed without replaying the table: from the previous version's
checksum and one commit's own actions (``advance``), or from a replayed state when one is at hand
(``checksum_of_state``).

The arithmetic of ``advance`` holds when each add of a commit names a file that was not live and each
remove names one that was, which every operation that writes new files respects. Operations known to
re-add live files (Delta Spark's statistics recomputation and row-tracking backfill) and removes without a
``size`` make the file totals unknown (``totals`` is ``None``) rather than wrong: the next checksum is then
written only from a replayed state. Delta Spark writes the histogram as ``histogramOpt``; the spec's name
``fileSizeHistogram`` is written and both are read.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..actions.actions import DomainMetadata, FileFields, Metadata, Protocol, SetTransaction
from ..base.arrow_utils import int64_scalar, to_numpy
from ..base.errors import ChecksumError, shown
from .commit_json import Actions, parse_json_actions
from .storage import LogStore, put_if_absent

log = logging.getLogger(__name__)

CHECKSUM_RE = re.compile(r"^(\d{20})\.crc$")

# Delta Spark's bins ("File Size Histogram Schema": the first is 0, each is the start of a bin): 8 KiB, then
# powers of two to 8 MiB, then steps that widen with the size, to 256 GiB. The same boundaries as Delta
# Spark's, so that its validation compares like with like and its incremental commits can go on from ours.
_MIB = 1 << 20
FILE_SIZE_BOUNDARIES: tuple[int, ...] = (
    0,
    *(8192 << k for k in range(11)),  # 8 KiB .. 8 MiB
    *(m * _MIB for m in range(12, 41, 4)),  # 12 .. 40 MiB
    *(m * _MIB for m in range(48, 121, 8)),  # 48 .. 120 MiB
    *(m * _MIB for m in range(124, 145, 4)),  # 124 .. 144 MiB
    *(m * _MIB for m in range(160, 577, 16)),  # 160 .. 576 MiB
    *(m * _MIB for m in range(640, 1409, 64)),  # 640 MiB .. 1.375 GiB
    *(m * _MIB for m in range(1536, 2049, 128)),  # 1.5 .. 2 GiB
    *(m * _MIB for m in range(2304, 4097, 256)),  # 2.25 .. 4 GiB
    *(8 << 30 << k for k in range(6)),  # 8 .. 256 GiB
)
# "Deleted Record Counts Histogram Schema": ten bins by powers of ten, the last from Int.MaxValue.
_DELETED_RECORD_BOUNDARIES = (0, 1, 10, 100, 1_000, 10_000, 100_000, 1_000_000, 10_000_000, 2_147_483_647)

# Operations whose adds re-add live files (Delta Spark's ``RecordChecksum``: statistics recomputation,
# row-tracking backfill, dropping a feature): counting their adds would count files twice.
_READDING_OPERATIONS = frozenset(
    {"COMPUTE STATS", "ROW TRACKING BACKFILL", "ROW TRACKING UNBACKFILL", "DROP FEATURE"}
)
# Removes that only protect deletion vectors from VACUUM, not files leaving the table.
_TOMBSTONE_ONLY_OPERATIONS = frozenset({"DELETION VECTORS TOMBSTONES"})
# What a checksum reads of a commit's file actions: keys, sizes and deletion-vector cardinalities.
_ZERO = int64_scalar(0)  # a Python 0 would make pyarrow look for pandas
_FIELDS = FileFields(add=("path", "size", "deletionVector"), remove=("path", "size", "deletionVector"))


def checksum_name(version: int) -> str:
    return f"{version:020d}.crc"


def checksum_version(name: str) -> int | None:
    m = CHECKSUM_RE.match(name)
    return int(m.group(1)) if m else None


@dataclass(frozen=True)
class FileSizeHistogram:
    """Counts and bytes of live files per size bin ("File Size Histogram Schema")."""

    boundaries: tuple[int, ...]
    file_counts: tuple[int, ...]
    total_bytes: tuple[int, ...]

    @classmethod
    def of_sizes(
        cls, sizes: np.ndarray, boundaries: tuple[int, ...] = FILE_SIZE_BOUNDARIES
    ) -> FileSizeHistogram:
        bins = np.searchsorted(np.asarray(boundaries, dtype=np.int64), sizes, side="right") - 1
        n = len(boundaries)
        counts = np.bincount(bins, minlength=n)[:n]
        total = np.bincount(bins, weights=sizes.astype(np.float64), minlength=n)[:n]
        # Weighted bincount sums in float64: exact up to 2**53 bytes per bin, far above any table.
        return cls(boundaries, tuple(int(c) for c in counts), tuple(int(t) for t in total))

    def moved(self, added: np.ndarray, removed: np.ndarray) -> FileSizeHistogram | None:
        """This histogram with ``added`` sizes in and ``removed`` out; ``None`` if a bin would go negative
        (the histogram it started from was not this table's)."""
        plus = FileSizeHistogram.of_sizes(added, self.boundaries)
        minus = FileSizeHistogram.of_sizes(removed, self.boundaries)
        counts = [
            a + b - c for a, b, c in zip(self.file_counts, plus.file_counts, minus.file_counts, strict=True)
        ]
        total = [
            a + b - c for a, b, c in zip(self.total_bytes, plus.total_bytes, minus.total_bytes, strict=True)
        ]
        if min(counts) < 0 or min(total) < 0:
            return None
        return FileSizeHistogram(self.boundaries, tuple(counts), tuple(total))

    def to_json(self) -> dict[str, Any]:
        return {
            "sortedBinBoundaries": list(self.boundaries),
            "fileCounts": list(self.file_counts),
            "totalBytes": list(self.total_bytes),
        }

    @classmethod
    def from_json(cls, d: Any) -> FileSizeHistogram:
        if not isinstance(d, dict):
            raise ValueError(f"the file size histogram must be an object, not {shown(d)}")
        arrays = [_longs(d.get(k), k) for k in ("sortedBinBoundaries", "fileCounts", "totalBytes")]
        bounds, counts, total = arrays
        if not bounds or bounds[0] != 0 or any(b <= a for a, b in zip(bounds, bounds[1:], strict=False)):
            raise ValueError("sortedBinBoundaries must start at 0 and increase")
        if not len(bounds) == len(counts) == len(total):
            raise ValueError("fileCounts and totalBytes must have one entry per bin boundary")
        return cls(tuple(bounds), tuple(counts), tuple(total))


@dataclass(frozen=True)
class FileTotals:
    """The file figures of a checksum: live files, their bytes, and (when known) their size histogram and
    the rows their deletion vectors remove."""

    num_files: int
    table_size_bytes: int
    histogram: FileSizeHistogram | None = None
    num_deleted_records: int | None = None
    num_deletion_vectors: int | None = None
    deleted_record_counts: tuple[int, ...] | None = None


@dataclass(frozen=True)
class VersionChecksum:
    """The content of ``NNN.crc``. ``set_transactions``/``domain_metadata`` are ``None`` when the file
    leaves them out (they are optional: a reader then finds them in the log); ``totals`` is ``None`` for a
    checksum carried over a commit whose file effect could not be counted (never written then)."""

    version: int
    protocol: Protocol
    metadata: Metadata
    totals: FileTotals | None
    set_transactions: Mapping[str, SetTransaction] | None = None
    domain_metadata: Mapping[str, DomainMetadata] | None = None
    in_commit_timestamp: int | None = None
    txn_id: str | None = None

    @property
    def complete(self) -> bool:
        """Whether it names every live ``txn`` and domain, so a reader needs nothing else of the log
        before this version."""
        return self.set_transactions is not None and self.domain_metadata is not None

    def to_json(self) -> bytes:
        if self.totals is None:
            raise ValueError(f"the checksum of version {self.version} has no file totals to write")
        t = self.totals
        body: dict[str, Any] = {}
        if self.txn_id is not None:
            body["txnId"] = self.txn_id
        body.update(tableSizeBytes=t.table_size_bytes, numFiles=t.num_files, numMetadata=1, numProtocol=1)
        if self.in_commit_timestamp is not None:
            body["inCommitTimestampOpt"] = self.in_commit_timestamp
        if self.set_transactions is not None:
            body["setTransactions"] = [s.to_json() for s in self.set_transactions.values()]
        if self.domain_metadata is not None:
            body["domainMetadata"] = [d.to_json() for d in self.domain_metadata.values()]
        body["metadata"] = self.metadata.to_json()
        body["protocol"] = self.protocol.to_json()
        if t.histogram is not None:
            body["fileSizeHistogram"] = t.histogram.to_json()
        if t.num_deleted_records is not None and t.num_deletion_vectors is not None:
            body["numDeletedRecordsOpt"] = t.num_deleted_records
            body["numDeletionVectorsOpt"] = t.num_deletion_vectors
        if t.deleted_record_counts is not None:
            body["deletedRecordCountsHistogramOpt"] = {"deletedRecordCounts": list(t.deleted_record_counts)}
        return json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode()

    def mismatches(self, other: VersionChecksum) -> list[str]:
        """What of this checksum disagrees with ``other`` (one computed by replaying the log), field by
        field as the spec lists them ("State Validation"); optional fields only when both have them."""
        out = []
        if self.protocol != other.protocol:
            out.append("protocol")
        if self.metadata != other.metadata:
            out.append("metadata")
        if self.totals is not None and other.totals is not None:
            a, b = self.totals, other.totals
            for name in ("num_files", "table_size_bytes", "num_deleted_records", "num_deletion_vectors"):
                x, y = getattr(a, name), getattr(b, name)
                if x is not None and y is not None and x != y:
                    out.append(_JSON_NAMES[name])
            if a.histogram is not None and b.histogram is not None and a.histogram != b.histogram:
                out.append("fileSizeHistogram")
        for name, mine, theirs in (
            ("setTransactions", self.set_transactions, other.set_transactions),
            ("domainMetadata", self.domain_metadata, other.domain_metadata),
        ):
            if mine is not None and theirs is not None and dict(mine) != dict(theirs):
                out.append(name)
        return out


_JSON_NAMES = {
    "num_files": "numFiles",
    "table_size_bytes": "tableSizeBytes",
    "num_deleted_records": "numDeletedRecordsOpt",
    "num_deletion_vectors": "numDeletionVectorsOpt",
}


def parse_checksum(data: bytes, version: int, where: str) -> VersionChecksum:
    """A checksum file's content; ``ChecksumError`` naming ``where`` when it is not one ("Version
    Checksum File Schema": one JSON object, the required fields typed, one metadata and one protocol)."""
    try:
        obj = json.loads(data.decode("utf-8"))  # strictly: encoded surrogates are no text
        if not isinstance(obj, dict):
            raise ValueError("a checksum file holds one JSON object")
        for key in ("numMetadata", "numProtocol"):
            if _long(obj.get(key), key) != 1:
                raise ValueError(f"{key} must be 1, not {shown(obj.get(key))}")
        if "fileSizeHistogram" in obj and "histogramOpt" in obj:
            raise ValueError("it has both fileSizeHistogram and histogramOpt")
        hist = obj.get("fileSizeHistogram", obj.get("histogramOpt"))
        deleted = obj.get("deletedRecordCountsHistogramOpt")
        totals = FileTotals(
            num_files=_long(obj.get("numFiles"), "numFiles", minimum=0),
            table_size_bytes=_long(obj.get("tableSizeBytes"), "tableSizeBytes", minimum=0),
            histogram=None if hist is None else FileSizeHistogram.from_json(hist),
            num_deleted_records=_opt_long(obj, "numDeletedRecordsOpt"),
            num_deletion_vectors=_opt_long(obj, "numDeletionVectorsOpt"),
            deleted_record_counts=None if not isinstance(deleted, dict)
            else tuple(_longs(deleted.get("deletedRecordCounts"), "deletedRecordCounts")),
        )  # fmt: skip
        txns = obj.get("setTransactions")
        domains = obj.get("domainMetadata")
        for name, value in (("setTransactions", txns), ("domainMetadata", domains)):
            if value is not None and not (
                isinstance(value, list) and all(isinstance(v, dict) for v in value)
            ):
                raise ValueError(f"{name} must be a list of objects")
        if not isinstance(obj.get("protocol"), dict) or not isinstance(obj.get("metadata"), dict):
            raise ValueError("protocol and metadata must be objects")
        ict = _opt_long(obj, "inCommitTimestampOpt")
        txn_id = obj.get("txnId")
        return VersionChecksum(
            version=version,
            protocol=Protocol.from_json(obj["protocol"]),
            metadata=Metadata.from_json(obj["metadata"]),
            totals=totals,
            set_transactions=None if txns is None else _by_key(SetTransaction.from_json(t) for t in txns),
            domain_metadata=None if domains is None
            else {d.domain: d for d in map(DomainMetadata.from_json, domains) if not d.removed},
            in_commit_timestamp=ict,
            txn_id=txn_id if isinstance(txn_id, str) else None,
        )  # fmt: skip
    except (ValueError, TypeError, RecursionError) as exc:
        raise ChecksumError(f"not a valid version checksum: {exc}", path=where) from None


def _by_key(txns: Iterable[SetTransaction]) -> dict[str, SetTransaction]:
    return {t.app_id: t for t in txns}


def _long(value: Any, name: str, *, minimum: int | None = None) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not -(2**63) <= value < 2**63:
        raise ValueError(f"{name} must be a long, not {shown(value)}")
    if minimum is not None and value < minimum:
        raise ValueError(f"{name} must be at least {minimum}, not {value}")
    return value


def _opt_long(obj: dict[str, Any], name: str) -> int | None:
    value = obj.get(name)
    return None if value is None else _long(value, name)


def _longs(value: Any, name: str) -> list[int]:
    if not isinstance(value, list):
        raise ValueError(f"{name} must be an array of longs, not {shown(value)}")
    return [_long(v, name, minimum=0) for v in value]


# -- computing checksums ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class CommitEffect:
    """What one commit changes of a checksum: its small actions and its file actions' sizes."""

    version: int
    actions: Actions
    add_sizes: np.ndarray
    add_deleted: np.ndarray  # rows each add's deletion vector removes (0 without one)
    remove_sizes: np.ndarray | None  # None: a remove without a size
    remove_deleted: np.ndarray
    operation: str | None
    commit_info: dict[str, Any] | None


def commit_effect(version: int, data: bytes, path: str) -> CommitEffect:
    """Parse one commit for a checksum: small actions whole, file actions as sizes only."""
    acc = Actions(fields=_FIELDS)
    parse_json_actions(acc, [(version, path, data)])
    adds = _concat(acc.adds)
    removes = _concat(acc.removes)
    info = acc.commit_infos.get(version)
    operation = info.get("operation") if info else None
    if removes is None:
        remove_sizes: np.ndarray | None = np.zeros(0, dtype=np.int64)
    else:  # a remove without a size makes the totals unknown (None)
        size = removes.column("size")
        remove_sizes = None if size.null_count else to_numpy(size.combine_chunks())
    add_sizes = (
        np.zeros(0, dtype=np.int64)
        if adds is None
        else to_numpy(pc.fill_null(adds.column("size"), _ZERO).combine_chunks())
    )
    return CommitEffect(
        version,
        acc,
        add_sizes,
        _cardinalities(adds),
        remove_sizes,
        _cardinalities(removes),
        operation if isinstance(operation, str) else None,
        info,
    )


def _concat(tables: list[pa.Table]) -> pa.Table | None:
    tables = [t for t in tables if t.num_rows]
    return pa.concat_tables(tables) if tables else None


def _cardinalities(table: pa.Table | None) -> np.ndarray:
    if table is None or not table.num_rows:
        return np.zeros(0, dtype=np.int64)
    dv = table.column("deletionVector").combine_chunks()
    card = pc.fill_null(pc.struct_field(dv, "cardinality"), _ZERO)
    return to_numpy(pc.if_else(dv.is_valid(), card, _ZERO))


def _deleted_histogram(counts: np.ndarray) -> np.ndarray:
    bins = np.searchsorted(np.asarray(_DELETED_RECORD_BOUNDARIES, dtype=np.int64), counts, side="right") - 1
    return np.bincount(bins, minlength=len(_DELETED_RECORD_BOUNDARIES))[: len(_DELETED_RECORD_BOUNDARIES)]


def advance(crc: VersionChecksum, effect: CommitEffect) -> VersionChecksum:
    """The checksum after ``effect``'s commit, from the one of the version before it (``Crc::apply`` in
    delta-kernel-rs, ``incrementallyDeriveChecksum`` in Delta Spark)."""
    if effect.version != crc.version + 1:
        raise ValueError(f"commit {effect.version} does not follow checksum version {crc.version}")
    acc = effect.actions
    txns = None if crc.set_transactions is None else {**crc.set_transactions, **acc.txns}
    domains = None
    if crc.domain_metadata is not None:
        domains = dict(crc.domain_metadata)
        for name, d in acc.domains.items():
            if d.removed:
                domains.pop(name, None)
            else:
                domains[name] = d
    ict = effect.commit_info.get("inCommitTimestamp") if effect.commit_info else None
    return VersionChecksum(
        version=effect.version,
        protocol=acc.protocol or crc.protocol,
        metadata=acc.metadata or crc.metadata,
        totals=_advance_totals(crc.totals, effect),
        set_transactions=txns,
        domain_metadata=domains,
        in_commit_timestamp=ict if isinstance(ict, int) else None,
        txn_id=_txn_id(effect.commit_info),
    )


def first_checksum(effect: CommitEffect) -> VersionChecksum | None:
    """The checksum of version 0 from its commit alone (every file it adds is new to the table)."""
    acc = effect.actions
    if effect.version != 0 or acc.protocol is None or acc.metadata is None:
        return None
    empty = FileTotals(0, 0, FileSizeHistogram.of_sizes(np.zeros(0, np.int64)), 0, 0,
                       tuple(0 for _ in _DELETED_RECORD_BOUNDARIES))  # fmt: skip
    start = VersionChecksum(-1, acc.protocol, acc.metadata, empty, {}, {})
    return advance(start, effect)


def _advance_totals(totals: FileTotals | None, effect: CommitEffect) -> FileTotals | None:
    if totals is None or effect.remove_sizes is None:
        return None
    has_files = len(effect.add_sizes) or len(effect.remove_sizes)
    if has_files and (
        effect.operation in _READDING_OPERATIONS or effect.operation in _TOMBSTONE_ONLY_OPERATIONS
    ):
        return None
    added, removed = effect.add_sizes, effect.remove_sizes
    num_files = totals.num_files + len(added) - len(removed)
    size = totals.table_size_bytes + int(added.sum()) - int(removed.sum())
    if num_files < 0 or size < 0:
        return None
    histogram = None if totals.histogram is None else totals.histogram.moved(added, removed)
    deleted = vectors = counts = None
    if totals.num_deleted_records is not None and totals.num_deletion_vectors is not None:
        deleted = (
            totals.num_deleted_records + int(effect.add_deleted.sum()) - int(effect.remove_deleted.sum())
        )
        vectors = (
            totals.num_deletion_vectors
            + int((effect.add_deleted > 0).sum())
            - int((effect.remove_deleted > 0).sum())
        )
    if totals.deleted_record_counts is not None:
        moved = (
            np.asarray(totals.deleted_record_counts, dtype=np.int64)
            + _deleted_histogram(effect.add_deleted)
            - _deleted_histogram(effect.remove_deleted)
        )
        counts = tuple(int(c) for c in moved) if moved.min(initial=0) >= 0 else None
    return FileTotals(num_files, size, histogram, deleted, vectors, counts)


def _txn_id(info: dict[str, Any] | None) -> str | None:
    value = (info or {}).get("txnId")
    return value if isinstance(value, str) else None


class TotalsBuilder:
    """File totals gathered over pieces of a file list (a streamed one): ``add`` each, then ``totals``."""

    def __init__(self) -> None:
        self.num_files = 0
        self.size = 0
        self.counts = np.zeros(len(FILE_SIZE_BOUNDARIES), dtype=np.int64)
        self.bytes = np.zeros(len(FILE_SIZE_BOUNDARIES), dtype=np.int64)
        self.deleted = 0
        self.vectors = 0
        self.deleted_counts = np.zeros(len(_DELETED_RECORD_BOUNDARIES), dtype=np.int64)

    def add(self, files: pa.Table) -> None:
        part = totals_of_files(files)
        assert part.histogram is not None and part.deleted_record_counts is not None
        self.num_files += part.num_files
        self.size += part.table_size_bytes
        self.counts += np.asarray(part.histogram.file_counts, dtype=np.int64)
        self.bytes += np.asarray(part.histogram.total_bytes, dtype=np.int64)
        self.deleted += part.num_deleted_records or 0
        self.vectors += part.num_deletion_vectors or 0
        self.deleted_counts += np.asarray(part.deleted_record_counts, dtype=np.int64)

    def totals(self) -> FileTotals:
        histogram = FileSizeHistogram(
            FILE_SIZE_BOUNDARIES, tuple(int(c) for c in self.counts), tuple(int(b) for b in self.bytes)
        )
        counts = tuple(int(c) for c in self.deleted_counts)
        return FileTotals(self.num_files, self.size, histogram, self.deleted, self.vectors, counts)


def totals_of_files(files: pa.Table) -> FileTotals:
    """The file totals of a reconciled file list (``Snapshot.files``): what ``advance`` keeps up."""
    sizes = (
        to_numpy(pc.fill_null(files.column("size"), _ZERO).combine_chunks())
        if files.num_rows
        else np.zeros(0, np.int64)
    )
    deleted = _cardinalities(files)
    return FileTotals(
        num_files=files.num_rows,
        table_size_bytes=int(sizes.sum()),
        histogram=FileSizeHistogram.of_sizes(sizes),
        num_deleted_records=int(deleted.sum()),
        num_deletion_vectors=int((deleted > 0).sum()),
        deleted_record_counts=tuple(int(c) for c in _deleted_histogram(deleted)),
    )


def checksum_of_state(
    version: int,
    protocol: Protocol,
    metadata: Metadata,
    files: pa.Table,
    txns: Mapping[str, SetTransaction],
    domains: Mapping[str, DomainMetadata],
    in_commit_timestamp: int | None,
    txn_id: str | None = None,
) -> VersionChecksum:
    """The checksum of a replayed version (files reconciled, tombstones of domains dropped)."""
    return VersionChecksum(
        version=version,
        protocol=protocol,
        metadata=metadata,
        totals=totals_of_files(files),
        set_transactions=dict(txns),
        domain_metadata={k: v for k, v in domains.items() if not v.removed},
        in_commit_timestamp=in_commit_timestamp,
        txn_id=txn_id,
    )


def write_checksum(store: LogStore, crc: VersionChecksum) -> bool:
    """Write ``crc`` as its version's checksum file unless one is there ("Writers MUST NOT overwrite
    existing Version Checksum files"). Never raises: the commit it describes has landed, and a missing
    checksum only costs a later reader a replay. True when written."""
    name = checksum_name(crc.version)
    try:
        # Without an atomic create on a backend, two writers of the same version's checksum write the same
        # state: the check-then-write that ``allow_unsafe`` does is enough here.
        put_if_absent(store, name, crc.to_json(), allow_unsafe=True)
    except FileExistsError:
        return False
    except Exception as exc:  # noqa: BLE001 - a checksum must never fail the commit before it
        log.warning("could not write %s (%s); readers replay the log instead", store.log_file(name), exc)
        return False
    return True
