"""RESTORE: bring a table back to an earlier version, as one new commit (Delta Spark's RESTORE TABLE).

A log-only operation: no data file is written. The commit re-adds every file the target version had that
the latest has not (``dataChange=true``), removes every file the latest has that the target had not, and
restores the target's metadata; files are told apart by path and deletion vector ("Action
Reconciliation"), so a file whose deletion vector changed since is swapped back too. As in Delta Spark:

- the protocol is never downgraded: the commit carries the merge of the target's and the latest protocol
  (``protocol.merge_protocols``), since readers time-travelling before the restore still need it;
- identity columns keep their high-water marks (a restore must not hand out values again), and the
  ``delta.clustering`` domain takes the target's clustering columns (empty when it was not clustered);
  other domains are left as they are (a row-tracking high-water mark must not go back);
- a target older than ``delta.deletedFileRetentionDuration`` is refused, and so is one whose data files (or
  deletion-vector files) are gone from storage, naming them: VACUUM deleted what it needs;
- the commit reads the whole table, so any concurrent data or metadata change makes it fail
  (``ConcurrentModificationError``) rather than restore over it.

Beyond Delta Spark: the in-commit-timestamp properties of the latest metadata are kept (restoring an older
metadata must not switch in-commit timestamps off or on half-way through the log's history).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from ..actions.actions import AddFile, DomainMetadata, Metadata, Protocol
from ..base.errors import RestoreMissingFilesError, RestoreTargetError, VersionNotFoundError
from ..commits.transaction import CommitResult, Transaction
from ..features.properties import (
    DELETED_FILE_RETENTION,
    ENABLE_IN_COMMIT_TIMESTAMPS,
    ICT_ENABLEMENT_TIMESTAMP,
    ICT_ENABLEMENT_VERSION,
)
from ..features.protocol import merge_protocols, protocol_features
from ..files.deletion_vectors import stored_dv_paths
from ..snapshot.history import timestamp_ms, version_at_timestamp
from ..snapshot.replay import reconciliation_keys
from ..snapshot.snapshot import Snapshot, load_snapshot
from ..snapshot.table_context import TableContext

log = logging.getLogger(__name__)
CLUSTERING_DOMAIN = "delta.clustering"
MISSING_FILES_LISTED = 100  # as Delta Spark's error lists them
_EXISTS_THREADS = 16
_ICT_PROPERTIES = (ENABLE_IN_COMMIT_TIMESTAMPS, ICT_ENABLEMENT_VERSION, ICT_ENABLEMENT_TIMESTAMP)
_IDENTITY_HWM = "delta.identity.highWaterMark"
_IDENTITY_STEP = "delta.identity.step"


@dataclass(frozen=True)
class RestoreResult:
    """What a RESTORE did: the version it committed and Delta Spark's RESTORE metrics."""

    version: int  # the commit that holds the restore
    restored_version: int
    table_size_after_restore: int
    num_of_files_after_restore: int
    num_removed_files: int
    num_restored_files: int
    removed_files_size: int
    restored_files_size: int

    def metrics(self) -> dict[str, int]:
        """``operationMetrics`` as Delta Spark names them."""
        return {
            "numRestoredFiles": self.num_restored_files, "removedFilesSize": self.removed_files_size,
            "numRemovedFiles": self.num_removed_files, "restoredFilesSize": self.restored_files_size,
            "numOfFilesAfterRestore": self.num_of_files_after_restore,
            "tableSizeAfterRestore": self.table_size_after_restore,
        }  # fmt: skip


def restore(
    table: TableContext,
    version: int | None = None,
    timestamp: int | float | str | datetime | None = None,
    *,
    enforce_retention_duration: bool = True,
    ignore_missing_files: bool = False,
    progress: Callable[[str, int, int], None] | None = None,
) -> RestoreResult:
    """Restore ``table`` to ``version``, or to the latest version committed at or before ``timestamp``.

    :param enforce_retention_duration: refuse a target older than ``delta.deletedFileRetentionDuration``
        (Delta Spark's default); VACUUM may have deleted its files.
    :param ignore_missing_files: restore even when files the target needs are gone (Spark's
        ``spark.sql.files.ignoreMissingFiles``): readers will then fail on them.
    :param progress: ``progress(step, done, total)`` while files are checked ("check files").
    :raises RestoreTargetError: the target is the latest version or later, or no longer in the log, or
        older than the retention.
    :raises RestoreMissingFilesError: files the target needs are gone; nothing was committed.
    """
    if (version is None) == (timestamp is None):
        raise ValueError("pass a version or a timestamp to restore to, not both and not neither")
    latest = table.snapshot()
    target_version = version if version is not None else _version_at(table, latest, timestamp)
    where = f"{table.uri} (latest version {latest.version})"
    if target_version < 0 or target_version >= latest.version:
        raise RestoreTargetError(
            f"cannot restore {where} to version {target_version}: the target must be an earlier version",
            earliest=None, latest=latest.version,
        )  # fmt: skip
    try:
        target = load_snapshot(table.store, target_version)
    except VersionNotFoundError as exc:
        raise RestoreTargetError(
            f"cannot restore {where} to version {target_version}: {exc}",
            earliest=exc.earliest, latest=exc.latest,
        ) from exc  # fmt: skip
    if enforce_retention_duration:
        _check_retention(latest, target, where)
    adds, removes = _difference(target.files, latest.files)
    if not ignore_missing_files:
        _check_files_exist(table, adds, target_version, progress)
    now = int(time.time() * 1000)
    restored = [dataclasses.replace(a, data_change=True) for a in AddFile.from_table(adds)]
    removed = [a.remove(now, data_change=True) for a in AddFile.from_table(removes)]
    result = RestoreResult(
        version=-1,
        restored_version=target_version,
        table_size_after_restore=_size(target.files),
        num_of_files_after_restore=target.num_files,
        num_removed_files=len(removed),
        num_restored_files=len(restored),
        removed_files_size=_size(removes),
        restored_files_size=_size(adds),
    )
    # Delta Spark commits RESTORE as Serializable, reading the whole table: any data change since conflicts.
    txn = Transaction(table, latest, isolation="Serializable").read_whole_table()
    txn.update_metadata(restored_metadata(target.metadata, latest.metadata))
    protocol = restored_protocol(target.protocol, latest.protocol)
    if protocol is not None:
        txn.update_protocol(protocol)
    for domain in restored_domains(target, latest):
        txn.set_domain_metadata(domain.domain, domain.configuration, removed=domain.removed)
    txn.add_files(restored, constraints_checked=True)  # these rows were in the table before
    txn.remove_files(removed)
    params = {"version": version, "timestamp": None if timestamp is None else _timestamp_text(timestamp)}
    committed: CommitResult = txn.commit("RESTORE", params, operation_metrics=result.metrics())
    log.info("restored %s to version %d as version %d: %d file(s) restored, %d removed", table.uri,
             target_version, committed.version, len(restored), len(removed))  # fmt: skip
    return dataclasses.replace(result, version=committed.version)


def _version_at(table: TableContext, latest: Snapshot, timestamp: Any) -> int:
    ict_from = latest.table_configuration.in_commit_timestamps_from
    try:
        return version_at_timestamp(table.store, ict_from, timestamp)
    except VersionNotFoundError as exc:
        raise RestoreTargetError(
            f"cannot restore {table.uri} to {timestamp!r}: {exc}", earliest=exc.earliest, latest=exc.latest
        ) from exc


def _timestamp_text(timestamp: Any) -> str:
    """The timestamp as ``operationParameters.timestamp`` records it: ISO-8601 in UTC."""
    return datetime.fromtimestamp(timestamp_ms(timestamp) / 1000, UTC).isoformat(timespec="milliseconds")


def _check_retention(latest: Snapshot, target: Snapshot, where: str) -> None:
    """Delta Spark refuses to time-travel (and restore) beyond ``delta.deletedFileRetentionDuration``:
    VACUUM may have deleted files only such versions need."""
    retention = latest.table_configuration.deleted_file_retention_ms
    now = int(time.time() * 1000)
    if target.timestamp < now - retention:
        raise RestoreTargetError(
            f"cannot restore {where} to version {target.version}: it is older than the table's "
            f"{DELETED_FILE_RETENTION} ({retention / 3_600_000:g} hours), so VACUUM may have deleted its "
            "files; pass enforce_retention_duration=False to restore anyway after checking",
            earliest=None, latest=latest.version,
        )  # fmt: skip


# -- which files ------------------------------------------------------------------------------------------
def _difference(target: pa.Table, latest: pa.Table) -> tuple[pa.Table, pa.Table]:
    """(files of the target not live now: to re-add, live files not in the target: to remove)."""
    target_keys, latest_keys = reconciliation_keys(target), reconciliation_keys(latest)
    adds = target.filter(pc.invert(pc.is_in(target_keys, value_set=latest_keys)))
    removes = latest.filter(pc.invert(pc.is_in(latest_keys, value_set=target_keys)))
    return adds, removes


def _size(files: pa.Table) -> int:
    return int(pc.sum(files.column("size")).as_py() or 0) if files.num_rows else 0


def _check_files_exist(
    table: TableContext, adds: pa.Table, version: int, progress: Callable[[str, int, int], None] | None
) -> None:
    """Every data file to re-add, and every deletion-vector file it uses, must still be in storage."""
    store = table.store
    wanted = adds.column("path").to_pylist()
    if adds.num_rows:
        for paths in stored_dv_paths(adds.column("deletionVector").combine_chunks()):
            wanted += paths.to_pylist()
    wanted = list(dict.fromkeys(wanted))
    done = 0

    def exists(path: str) -> bool:
        full = path if "://" in path or path.startswith("/") else store.table_file(path)
        return store.exists(full)

    missing = []
    with ThreadPoolExecutor(_EXISTS_THREADS) as pool:
        for path, present in zip(wanted, pool.map(exists, wanted), strict=True):
            done += 1
            if not present:
                missing.append(path)
            if progress is not None and (done % 1000 == 0 or done == len(wanted)):
                progress("check files", done, len(wanted))
    if missing:
        shown = missing[:MISSING_FILES_LISTED]
        more = f" (and {len(missing) - len(shown)} more)" if len(missing) > len(shown) else ""
        raise RestoreMissingFilesError(
            f"cannot restore {table.uri} to version {version}: {len(missing)} file(s) it needs are gone from "
            f"storage (VACUUM deleted them?): {', '.join(shown)}{more}",
            version=version, files=tuple(shown),
        )  # fmt: skip


# -- metadata, protocol and domains -------------------------------------------------------------------------
def restored_metadata(target: Metadata, latest: Metadata) -> Metadata:
    """The target's metadata, with the latest identity high-water marks and in-commit-timestamp settings."""
    schema = target.schema
    marks = {f["name"]: f.get("metadata", {}) for f in latest.schema.get("fields", [])}
    changed = False
    for field in schema.get("fields", []):
        meta = field.get("metadata") or {}
        newer = marks.get(field["name"], {}).get(_IDENTITY_HWM)
        if _IDENTITY_HWM not in meta and newer is None or _IDENTITY_STEP not in meta:
            continue
        candidates = [v for v in (meta.get(_IDENTITY_HWM), newer) if v is not None]
        mark = max(candidates) if int(meta[_IDENTITY_STEP]) > 0 else min(candidates)
        if meta.get(_IDENTITY_HWM) != mark:
            field["metadata"] = {**meta, _IDENTITY_HWM: mark}
            changed = True
    config = {k: v for k, v in target.configuration.items() if k not in _ICT_PROPERTIES}
    config.update({k: v for k, v in latest.configuration.items() if k in _ICT_PROPERTIES})
    return dataclasses.replace(
        target,
        schema_string=json.dumps(schema, separators=(",", ":")) if changed else target.schema_string,
        configuration=config,
    )


def restored_protocol(target: Protocol, latest: Protocol) -> Protocol | None:
    """The protocol RESTORE commits: the merge of both, never a downgrade; ``None`` when the latest already
    supports exactly the merged features (then it stays as it is)."""
    merged = merge_protocols(target, latest)
    if protocol_features(merged) == protocol_features(latest):
        return None
    return merged


def restored_domains(target: Snapshot, latest: Snapshot) -> list[DomainMetadata]:
    """Domain metadata RESTORE commits, as Delta Spark decides: the clustering domain takes the target's
    clustering columns (none if it was not clustered) when the latest has one; a target's clustering domain
    the result lacks is removed; every other domain stays as the latest has it."""
    new: list[DomainMetadata] = []
    if CLUSTERING_DOMAIN in latest.domain_metadata:
        clustered = target.table_configuration.clustered
        old = target.domain_metadata.get(CLUSTERING_DOMAIN)
        config = old.configuration if clustered and old is not None else json.dumps({"clusteringColumns": []})
        new.append(DomainMetadata(CLUSTERING_DOMAIN, config))
    names = {d.domain for d in new}
    gone = [DomainMetadata(d.domain, d.configuration, removed=True) for d in target.domain_metadata.values()
            if d.domain == CLUSTERING_DOMAIN and d.domain not in names]  # fmt: skip
    return gone + new
