"""Metadata cleanup: delete ``_delta_log`` files older than ``delta.logRetentionDuration`` that no retained
version needs (Delta Spark's MetadataCleanup; PROTOCOL.md "Metadata Cleanup").

1. The cut-off is midnight UTC of ``now - retention``; the *cut-off commit* is the newest commit not newer
   than it, commit timestamps first made increasing (as Delta Spark does, so a clock-skewed commit never
   lets a newer one expire).
2. The *cut-off checkpoint* is the newest complete checkpoint at or before the cut-off commit. It, its
   commit and everything after it are kept, so every retained version stays reconstructable.
3. Versions before it are deleted oldest first (commits, checksums, checkpoints), stopping at the first
   version with a file newer than the cut-off, as Delta Spark's BufferingLogDeletionIterator: what goes
   is always a prefix of the log, never a hole in it, even when interrupted. Log compactions starting at
   or before the first kept version go too.
4. Sidecars of V2 checkpoints that no remaining checkpoint references are deleted once past the cut-off.
"""

from __future__ import annotations

import json
import logging
import posixpath
import re
import time
from urllib.parse import unquote

import pyarrow.parquet as pq

from ..base.arguments import int_arg
from ..files.segment import CLASSIC_RE, COMMIT_RE, MULTI_RE, V2_RE, group_checkpoints
from ..files.storage import FileMeta, LogStore, delete_files, mtime_of
from ..snapshot.replay import CheckpointReadError, check_checkpoint
from ..snapshot.snapshot import load_snapshot
from ..snapshot.table_context import TableContext

log = logging.getLogger(__name__)

ENABLE_EXPIRED_LOG_CLEANUP = "delta.enableExpiredLogCleanup"
SIDECARS = "_sidecars"
_DAY_MS = 86_400_000
_CRC = re.compile(r"^(\d{20})\.crc$")
_COMPACTED = re.compile(r"^(\d{20})\.(\d{20})\.compacted\.json$")



def cleanup_expired_logs(
    table: TableContext, *, now_ms: int | None = None, retention_ms: int | None = None
) -> list[str]:
    """Delete expired log files; return their names (relative to ``_delta_log``), sorted.

    :param now_ms: the current time (ms since the epoch); for tests and replays.
    :param retention_ms: overrides ``delta.logRetentionDuration`` (default 30 days).
    """
    int_arg(now_ms, "now_ms", optional=True)
    int_arg(retention_ms, "retention_ms", minimum=0, optional=True)
    store = table.store
    snap = load_snapshot(store)
    # Deleting log files is writing to the table: only a writer of all its features may ("Table Features").
    config = snap.table_configuration
    config.check_write(f"log cleanup of {store.uri}")
    if not config.expired_log_cleanup:
        log.info("%s is false for %s: no log cleanup", ENABLE_EXPIRED_LOG_CLEANUP, store.uri)
        return []
    now = int(time.time() * 1000) if now_ms is None else int(now_ms)
    retention = config.log_retention_ms if retention_ms is None else int(retention_ms)
    cutoff = _midnight_utc(now - (retention or 0))
    files = store.list_log(0)
    boundary = readable_boundary(store, files, cutoff, snap.version)
    if boundary is None:
        return []
    names = expired_files(files, boundary, cutoff)
    # Oldest first, one batch at a time: an interruption leaves a suffix of the log.
    delete_files(store, [store.log_file(n) for n in names], store.log_path, max_workers=1)
    gone = set(names)
    remaining = [f for f in files if f.name not in gone]
    sidecars = _expired_sidecars(store, remaining, min(cutoff, _midnight_utc(now) - _DAY_MS))
    delete_files(store, [store.log_file(n) for n in sidecars], store.log_path, max_workers=1)
    log.info(
        "log cleanup of %s: deleted %d files before checkpoint %d (cut-off %d)",
        store.uri,
        len(names) + len(sidecars),
        boundary,
        cutoff,
    )
    return sorted(names + sidecars)


def _midnight_utc(ms: int) -> int:
    return ms - ms % _DAY_MS


def readable_boundary(store: LogStore, files: list[FileMeta], cutoff: int, latest: int) -> int | None:
    """The version to clean up to: the newest checkpoint at or before the cut-off commit that the reader
    can read completely (``check_checkpoint``: every part and sidecar, schema, ``checkpointMetadata``),
    followed by every commit up to ``latest``. ``None``, with the reason logged, when there is none: then
    nothing is deleted, so the latest version stays reconstructable whatever state a crashed writer left.
    """
    commit = cutoff_commit(files, cutoff)
    if commit is None:
        log.info("no commit of %s is old enough to clean up the log before it", store.uri)
        return None
    commits = {v for f in files if (v := _version(COMMIT_RE, f.name)) is not None}
    for version, candidates in sorted(group_checkpoints(files).items(), reverse=True):
        if version > commit:
            continue
        if missing := [v for v in range(version + 1, latest + 1) if v not in commits][:1]:
            log.warning(
                "log cleanup of %s deletes nothing: commit %d is missing after checkpoint %d, so the log "
                "before it may be needed",
                store.uri,
                missing[0],
                version,
            )
            return None
        for cp in candidates:
            try:
                check_checkpoint(store, cp)
            except CheckpointReadError as exc:
                log.warning("log cleanup of %s: not cutting at checkpoint %d, it cannot be read: %s",
                            store.uri, version, exc)  # fmt: skip
                continue
            return version
    log.warning(
        "log cleanup of %s deletes nothing: no readable checkpoint at or before commit %d", store.uri, commit
    )
    return None


def cutoff_checkpoint(files: list[FileMeta], cutoff: int) -> int | None:
    """Version of the newest complete checkpoint at or before the newest commit not newer than ``cutoff``
    (complete by name: every part is listed; ``readable_boundary`` also reads it)."""
    commit = cutoff_commit(files, cutoff)
    if commit is None:
        return None
    return max((v for v in group_checkpoints(files) if v <= commit), default=None)


def cutoff_commit(files: list[FileMeta], cutoff: int) -> int | None:
    """The newest commit not newer than ``cutoff``, commit times first made increasing (as Delta Spark)."""
    commits = sorted(
        (v, f.modification_time) for f in files if (v := _version(COMMIT_RE, f.name)) is not None
    )
    newest, previous = None, None
    for version, mtime in commits:
        adjusted = mtime if previous is None else max(mtime, previous + 1)
        if adjusted > cutoff:
            break
        newest, previous = version, adjusted
    return newest


def expired_files(files: list[FileMeta], boundary: int, cutoff: int) -> list[str]:
    """Names to delete, oldest version first: the longest prefix of versions before ``boundary`` whose
    files are all not newer than ``cutoff``, and the log compactions no remaining checkpoint can use."""
    by_version: dict[int, list[FileMeta]] = {}
    for f in files:
        v = _file_version(f.name)
        if v is not None and v < boundary:
            by_version.setdefault(v, []).append(f)
    names: list[str] = []
    first_kept = boundary
    for v in sorted(by_version):
        if any(f.modification_time > cutoff for f in by_version[v]):
            first_kept = v
            break
        names.extend(sorted(f.name for f in by_version[v]))
    # A reader uses a compaction only after a checkpoint older than its start: none remains for these.
    names.extend(
        f.name
        for f in files
        if (m := _COMPACTED.match(f.name)) and int(m.group(1)) <= first_kept and f.modification_time <= cutoff
    )
    return names


def _version(pattern: re.Pattern[str], name: str) -> int | None:
    m = pattern.match(name)
    return int(m.group(1)) if m else None


def _file_version(name: str) -> int | None:
    for pattern in (COMMIT_RE, _CRC, CLASSIC_RE, MULTI_RE, V2_RE):
        if (v := _version(pattern, name)) is not None:
            return v
    return None


def _expired_sidecars(store: LogStore, remaining: list[FileMeta], cutoff: int) -> list[str]:
    """``_sidecars/<name>`` files past ``cutoff`` that no remaining checkpoint references."""
    folder = store.log_file(SIDECARS)
    try:
        entries = store.fs.ls(folder, detail=True)
    except FileNotFoundError:
        return []
    old = {
        posixpath.basename(e["name"].rstrip("/"))
        for e in entries
        if e.get("type") != "directory" and mtime_of(e) <= cutoff
    }
    if not old:
        return []
    referenced = _referenced_sidecars(store, remaining)
    if referenced is None:
        return []
    return [f"{SIDECARS}/{name}" for name in sorted(old - referenced)]


def _referenced_sidecars(store: LogStore, files: list[FileMeta]) -> set[str] | None:
    """File names of the sidecars that checkpoints in ``files`` reference (V2 checkpoints, or classic-named
    ones that a V2 table may write); ``None`` when a checkpoint cannot be read, so that none is deleted."""
    names: set[str] = set()
    try:
        for f in files:
            if V2_RE.match(f.name) and f.name.endswith(".json"):
                for line in store.read_log_file(f.name).splitlines():
                    body = json.loads(line).get("sidecar") if line.strip() else None
                    if isinstance(body, dict):
                        names.add(body["path"])
            elif V2_RE.match(f.name) or CLASSIC_RE.match(f.name):
                pf = pq.ParquetFile(store.open_input_file(store.log_file(f.name)))
                if "sidecar" in pf.schema_arrow.names:
                    column = pf.read(columns=["sidecar"]).column("sidecar").combine_chunks()
                    names.update(column.field("path").drop_null().to_pylist())
        # A path that is not a string (a malformed checkpoint) fails here, inside the guard.
        return {posixpath.basename(unquote(n)) for n in names}
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        log.warning("cannot read the checkpoints of %s (%s): keeping every sidecar", store.uri, exc)
        return None


# -- deleting (shared with vacuum) ------------------------------------------------------------------------
