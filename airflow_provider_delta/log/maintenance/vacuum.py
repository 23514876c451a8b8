"""VACUUM: delete files under the table root that no version within the retention window needs.

Delta Spark's VACUUM (FULL): list every file under the root except hidden paths, keep those the latest
snapshot references (live adds, their deletion-vector files, tombstones still within the retention) and
any file modified within the retention; delete the rest ("Data Files": "can be lazily deleted by the
vacuum command after a user-specified retention period"). Candidates come only from listing the root, so
a path in the log that points elsewhere (absolute, ``..``, another bucket) can never be deleted. On local
disk, directories left empty (an emptied partition) are removed too, as Delta Spark does; object stores
have no directories to remove.
"""

from __future__ import annotations

import logging
import os
import posixpath
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..actions.actions import FileFields
from ..base.arguments import bool_arg, callable_arg, int_arg, number_arg
from ..base.arrow_utils import from_numpy, from_strings, int64_scalar, single
from ..base.errors import DeltaError, RetentionTooShortError
from ..commits.transaction import Transaction
from ..features.properties import DELETED_FILE_RETENTION
from ..files.deletion_vectors import stored_dv_paths
from ..files.storage import LogStore, delete_files, mtime_of
from ..schema.schema import physical_partition_names
from ..snapshot.snapshot import Snapshot, load_snapshot, update_snapshot
from ..snapshot.table_context import TableContext

log = logging.getLogger(__name__)

VACUUM_LOGGING = "delta.vacuum.logging.enabled"
_HOUR_MS = 3_600_000
_SCHEME = r"^[A-Za-z][A-Za-z0-9+.\-]*:"
_DOT_SEGMENTS = r"(^|/)\.\.?(/|$)|//"
# All VACUUM reads of file actions: the paths and deletion vectors it keeps, and the deletion timestamps
# its retention compares; not the stats, partition values and tags that make up most of a checkpoint.
VACUUM_FIELDS = FileFields(
    add=("path", "deletionVector"), remove=("path", "deletionTimestamp", "deletionVector")
)


@dataclass(frozen=True)
class VacuumReport:
    """What VACUUM deleted (or, with ``dry_run``, would delete): paths relative to the table root."""

    files: list[str]
    bytes: int
    seconds: float
    dry_run: bool
    retention_hours: float


def vacuum(
    table: TableContext,
    retention_hours: float | None = None,
    dry_run: bool = True,
    enforce_retention_duration: bool = True,
    *,
    now_ms: int | None = None,
    max_workers: int = 8,
    progress: Callable[[int, int], None] | None = None,
) -> VacuumReport:
    """Delete unreferenced files older than the retention (``delta.deletedFileRetentionDuration``).

    :param retention_hours: keep files needed by versions of the last this-many hours; default: the
        table's property (7 days). Shorter than the property raises :class:`RetentionTooShortError` unless
        ``enforce_retention_duration=False``.
    :param dry_run: only list what would be deleted.
    :param now_ms: the current time (ms since the epoch), for tests and replays.
    :param max_workers: deletions in flight (S3: DeleteObjects requests of 1000 keys; else files).
    :param progress: called as ``progress(deleted, total)`` after each deleted batch.
    """
    number_arg(retention_hours, "retention_hours", minimum=0, optional=True)
    bool_arg(dry_run, "dry_run")
    bool_arg(enforce_retention_duration, "enforce_retention_duration")
    int_arg(now_ms, "now_ms", optional=True)
    int_arg(max_workers, "max_workers", minimum=1)
    callable_arg(progress, "progress", optional=True)
    started = time.monotonic()
    store = table.store
    # Every tombstone: the vacuum's own retention, not the table's, decides which ones still count.
    snap = load_snapshot(store, fields=VACUUM_FIELDS, keep_expired_tombstones=True)
    # Reading the checkpoint takes Arrow buffers of several times the state it leaves (32 MiB for 75,000
    # files, 6 MiB kept); the pool keeps the freed pages, which the listing's Python strings cannot use.
    # Handing them back (a few ms, once) cut a 100,000-file VACUUM's peak by a fifth.
    pa.default_memory_pool().release_unused()
    # Delta Spark requires writer support (and, with vacuumProtocolCheck, reader support too, which
    # check_write_supported always includes) before deleting anything.
    snap.table_configuration.check_write(f"VACUUM of {store.uri}")
    retention_ms = _retention_ms(snap, retention_hours, enforce_retention_duration)
    now = int(time.time() * 1000) if now_ms is None else int(now_ms)
    cutoff = now - retention_ms
    dirs: list[str] = []
    listed = _list_candidates(store, _partition_dir_names(snap), dirs)
    kept = pc.is_in(listed.column("path"), value_set=_keep(snap, cutoff))
    old = pc.less(listed.column("mtime"), int64_scalar(cutoff))
    doomed = listed.filter(pc.and_(old, pc.invert(kept))).sort_by("path")
    size = int(pc.sum(doomed.column("size")).as_py() or 0)
    hours = retention_ms / _HOUR_MS
    if dry_run:
        files = doomed.column("path").to_pylist()
        log.info("VACUUM DRY RUN of %s: %d files (%d bytes) would be deleted", store.uri, len(files), size)
        return VacuumReport(files, size, time.monotonic() - started, True, hours)
    # Delta Spark logs by default on stores that take concurrent commits safely; ours all do.
    logged = snap.table_configuration.vacuum_logging
    if logged:
        params = {
            "retentionCheckEnabled": enforce_retention_duration,
            "defaultRetentionMillis": _table_retention_ms(snap),
        }
        if retention_hours is not None:
            params["specifiedRetentionMillis"] = retention_ms
        metrics = {"numFilesToDelete": doomed.num_rows, "sizeOfDataToDelete": size}
        _commit(table, snap, "VACUUM START", params, metrics)
    doomed, fresh = _without_files_committed_meanwhile(snap, doomed, cutoff)
    files = doomed.column("path").to_pylist()
    size = int(pc.sum(doomed.column("size")).as_py() or 0)
    log.info("VACUUM of %s: deleting %d files (%d bytes)", store.uri, len(files), size)
    try:
        full = [f"{store.root}/{f}" for f in files]
        delete_files(store, full, store.root, max_workers=max_workers, progress=progress)
        _remove_empty_dirs(store.root, dirs)
    except Exception:
        if logged:
            _end(table, update_snapshot(fresh), "FAILED", 0, listed)
        raise
    after = update_snapshot(fresh)
    _report_files_committed_while_deleting(fresh, after, doomed, cutoff)
    if logged:
        _end(table, after, "COMPLETED", len(files), listed)
    return VacuumReport(files, size, time.monotonic() - started, False, hours)


def _without_files_committed_meanwhile(
    snap: Snapshot, doomed: pa.Table, cutoff: int
) -> tuple[pa.Table, Snapshot]:
    """``doomed`` less the files that commits since ``snap`` reference, and the snapshot that says so.

    Read after VACUUM START, which orders VACUUM among writers: a commit before it is seen here; a writer
    committing after it sees START (as a conflicting winner, or in its snapshot) and refuses to add files
    older than the cut-off (``ConcurrentVacuumError``), so no commit references a file deleted here.
    """
    fresh = update_snapshot(snap)
    if fresh.version == snap.version:
        return doomed, fresh
    late = pc.is_in(doomed.column("path"), value_set=_keep(fresh, cutoff))
    if pc.any(late).as_py():
        log.info("VACUUM of %s: keeping %d files committed meanwhile", snap.store.uri, pc.sum(late).as_py())
        doomed = doomed.filter(pc.invert(late))
    return doomed, fresh


def _report_files_committed_while_deleting(
    before: Snapshot, after: Snapshot, doomed: pa.Table, cutoff: int
) -> None:
    """A commit that landed while VACUUM deleted and that references a deleted file slipped past every
    guard (e.g. its writer's snapshot started from a checkpoint that hid VACUUM START): say so loudly."""
    if after.version == before.version or not doomed.num_rows:
        return
    hit = doomed.filter(pc.is_in(doomed.column("path"), value_set=_keep(after, cutoff)))
    if hit.num_rows:
        log.error(
            "VACUUM of %s deleted %d files that commits %d..%d, made while it ran, reference: %s",
            before.store.uri,
            hit.num_rows,
            before.version + 1,
            after.version,
            hit.column("path").to_pylist()[:20],
        )


# -- retention ------------------------------------------------------------------------------------------
def _table_retention_ms(snap: Snapshot) -> int:
    return snap.table_configuration.deleted_file_retention_ms


def _retention_ms(snap: Snapshot, retention_hours: float | None, enforce: bool) -> int:
    minimum = _table_retention_ms(snap)
    if retention_hours is None:
        return minimum
    if retention_hours < 0:
        raise ValueError(f"retention_hours must not be negative, got {retention_hours}")
    wanted = int(round(retention_hours * _HOUR_MS))
    if enforce and wanted < minimum:
        raise RetentionTooShortError(
            f"VACUUM retention of {retention_hours:g} hours is shorter than the table's "
            f"{DELETED_FILE_RETENTION} ({minimum / _HOUR_MS:g} hours): files that readers of recent versions "
            "or concurrent writers still need could be deleted. Use retention_hours >= "
            f"{minimum / _HOUR_MS:g}, or pass enforce_retention_duration=False if you are sure that no "
            "reader or writer needs them."
        )
    return wanted


# -- what to keep -----------------------------------------------------------------------------------------
def _keep(snap: Snapshot, cutoff: int) -> pa.Array:
    """Root-relative paths the table still needs: live files, tombstones deleted at or after ``cutoff``
    (Delta Spark keeps a tombstone until its deletionTimestamp leaves the window), and their DV files."""
    tombs = snap.tombstones
    if tombs.num_rows:
        deleted = pc.fill_null(tombs.column("deletionTimestamp"), int64_scalar(0))
        tombs = tombs.filter(pc.greater_equal(deleted, int64_scalar(cutoff)))
    parts = []
    for t in (snap.files, tombs):
        parts.append(single(t.column("path")).cast(pa.string()))
        parts.extend(stored_dv_paths(single(t.column("deletionVector"))))
    root = snap.store.root
    return pc.unique(pa.concat_arrays([_relative(p, root) for p in parts]))


def _relative(paths: pa.Array, root: str) -> pa.Array:
    """Paths as the root-relative form the listing produces; paths outside the root are dropped.

    Only protects (a keep-set entry never causes a deletion), so mapping any scheme generously is safe.
    """
    paths = paths.drop_null()
    absolute = pc.or_(pc.match_substring_regex(paths, _SCHEME), pc.starts_with(paths, "/"))
    rel = paths.filter(pc.invert(absolute))
    out = [rel]
    abs_paths = paths.filter(absolute)
    if len(abs_paths):
        stripped = pc.replace_substring_regex(abs_paths, r"^file:/*", "/")
        stripped = pc.replace_substring_regex(stripped, _SCHEME + "//", "")
        if root.startswith("/"):
            stripped = pc.replace_substring_regex(stripped, r"^/*", "/")
        inside = stripped.filter(pc.starts_with(stripped, root.rstrip("/") + "/"))
        out.append(pc.utf8_slice_codeunits(inside, len(root.rstrip("/")) + 1))
    joined = pa.concat_arrays([a.cast(pa.string()) for a in out])
    odd = pc.match_substring_regex(joined, _DOT_SEGMENTS)
    if pc.any(odd).as_py():  # "a/../b", "./x", "p=1//x": rare; normalise those rows in Python
        fixed = [posixpath.normpath(p) for p in joined.filter(odd).to_pylist()]
        fixed = [p for p in fixed if p != ".." and not p.startswith("../")]
        joined = pa.concat_arrays([joined.filter(pc.invert(odd)), pa.array(fixed, pa.string())])
    return joined


# -- what exists ------------------------------------------------------------------------------------------
def _partition_dir_names(snap: Snapshot) -> tuple[str, ...]:
    cols = snap.partition_columns
    mode = snap.table_configuration.column_mapping_mode
    physical = physical_partition_names(snap.metadata.schema, cols, mode)
    return tuple(sorted(set(cols) | set(physical.values())))


def is_hidden(name: str, partition_columns: tuple[str, ...]) -> bool:
    """Delta Spark's ``isHiddenDirectory``, applied to every path component: ``.x`` and ``_x`` are never
    vacuumed, except ``_change_data`` and ``_delta_index`` (aged out like data) and ``<partition col>=``
    directories; ``metadata`` holds UniForm's Iceberg metadata."""
    if name == "metadata":
        return True
    if not name.startswith((".", "_")):
        return False
    if name.startswith(("_change_data", "_delta_index")):
        return False
    return not any(name.startswith(c + "=") for c in partition_columns)


def _list_candidates(store: LogStore, partition_columns: tuple[str, ...], dirs: list[str]) -> pa.Table:
    """Every file under the root that is not hidden: ``path`` (root-relative), ``size``, ``mtime`` (ms).
    On local disk, the visible directories are appended to ``dirs``."""
    if store.protocol in ("file", "local"):
        # The walk skips hidden directories and files itself: splitting 100,000 paths into their
        # components again would cost VACUUM about 20 MiB more at its peak.
        visible = _walk_local(store.root, partition_columns, dirs)
    else:
        visible = _visible(_listing(*_find(store)), partition_columns)
    if pc.any(pc.starts_with(visible.column("path"), "_delta_log/")).as_py():
        raise AssertionError("refusing to vacuum: a candidate lies inside _delta_log")
    return visible


def _listing(paths: list[str], sizes: list[int], mtimes: list[int]) -> pa.Table:
    return pa.table(
        {
            "path": from_strings(paths),
            "size": from_numpy(np.array(sizes, dtype=np.int64)),
            "mtime": from_numpy(np.array(mtimes, dtype=np.int64)),
        }
    )


def _visible(listed: pa.Table, partition_columns: tuple[str, ...]) -> pa.Table:
    """The rows of a flat listing none of whose path components is hidden (``is_hidden``)."""
    comps = pc.split_pattern(listed.column("path").combine_chunks(), "/")
    hit = _hidden_components(pc.list_flatten(comps), partition_columns).to_numpy(zero_copy_only=False)
    parents = pc.list_parent_indices(comps).to_numpy()
    hidden = np.bincount(parents[hit], minlength=listed.num_rows) > 0
    return listed.filter(pa.array(~hidden))


def _hidden_components(names: pa.Array, partition_columns: tuple[str, ...]) -> pa.Array:
    """``is_hidden`` over an Arrow array of path components."""
    underscore = pc.starts_with(names, "_")
    for allowed in ("_change_data", "_delta_index", *(c + "=" for c in partition_columns)):
        underscore = pc.and_(underscore, pc.invert(pc.starts_with(names, allowed)))
    return pc.or_(pc.or_(pc.starts_with(names, "."), underscore), pc.equal(names, "metadata"))


def _walk_local(root: str, partition_columns: tuple[str, ...], dirs: list[str]) -> pa.Table:
    """os.scandir walk that never enters hidden directories (``_delta_log`` ...), never lists hidden files
    (``.crc``, ``_SUCCESS``) and never follows symlinks: a symlink is neither listed nor descended into, so
    nothing outside the root can be reached. The directories walked (root-relative, parents first) go to
    ``dirs``.

    Each directory's files become Arrow as soon as it is read: Python lists of the whole listing (100,000
    path strings and boxed integers) were a third of a large VACUUM's peak memory."""
    chunks: list[pa.Table] = []
    stack = [""]
    while stack:
        rel_dir = stack.pop()
        try:
            entries = list(os.scandir(os.path.join(root, rel_dir) if rel_dir else root))
        except FileNotFoundError:
            continue
        paths: list[str] = []
        sizes: list[int] = []
        mtimes: list[int] = []
        for e in entries:
            if e.is_symlink():
                continue
            rel = f"{rel_dir}/{e.name}" if rel_dir else e.name
            if e.is_dir(follow_symlinks=False):
                if not is_hidden(e.name, partition_columns):
                    stack.append(rel)
                    dirs.append(rel)
            elif e.is_file(follow_symlinks=False) and not is_hidden(e.name, partition_columns):
                try:
                    st = e.stat(follow_symlinks=False)
                except FileNotFoundError:  # deleted since the directory was read
                    continue
                paths.append(rel)
                sizes.append(st.st_size)
                mtimes.append(st.st_mtime_ns // 1_000_000)
        if paths:
            chunks.append(_listing(paths, sizes, mtimes))
    return pa.concat_tables(chunks) if chunks else _listing([], [], [])


def _remove_empty_dirs(root: str, dirs: list[str]) -> None:
    """Remove the walked directories that are empty now, deepest first (a parent empties when its last
    child goes). ``rmdir`` only ever removes an empty directory, so a file written meanwhile is safe; a
    writer that made a directory and has not yet written into it may have to make it again."""
    for rel in sorted(dirs, key=lambda d: d.count("/"), reverse=True):
        try:
            os.rmdir(os.path.join(root, rel))
        except OSError:  # not empty (the usual case), or gone already
            continue


def _find(store: LogStore) -> tuple[list[str], list[int], list[int]]:
    """One recursive listing (for S3 a paginated ListObjectsV2 without delimiter)."""
    prefix = store.root.rstrip("/") + "/"
    store.fs.invalidate_cache(store.root)
    found = store.fs.find(store.root, withdirs=False, detail=True)
    paths, sizes, mtimes = [], [], []
    for name, info in found.items():
        if not name.startswith(prefix):
            raise AssertionError(f"refusing to vacuum: listing {store.root} returned {name}")
        if name.endswith("/") or info.get("type") == "directory":
            continue
        paths.append(name[len(prefix) :])
        sizes.append(int(info.get("size") or 0))
        mtimes.append(mtime_of(info))
    return paths, sizes, mtimes


# -- recording in the log ------------------------------------------------------------------------------
def _commit(
    table: TableContext, snap: Snapshot, operation: str, params: dict[str, Any], metrics: dict[str, Any]
) -> None:
    """An empty commit (commitInfo only) with operationMetrics, as Delta Spark writes VACUUM START/END.

    It starts from VACUUM's own snapshot: a commit without file actions needs only the version, protocol
    and metadata, and ``table.transaction()`` would load the full snapshot, stats and all, just for this.
    """
    Transaction(table, snap).commit(operation, params, operation_metrics=metrics, auto_checkpoint=False)


def _end(table: TableContext, latest: Snapshot, status: str, deleted: int, listed: pa.Table) -> None:
    """Record VACUUM END from ``latest`` (VACUUM's snapshot brought up to date, START among its commits)."""
    parents = pc.replace_substring_regex(listed.column("path"), r"/?[^/]*$", "")
    dirs = len(pc.unique(parents.combine_chunks())) if listed.num_rows else 1
    metrics = {"numDeletedFiles": deleted, "numVacuumedDirectories": dirs}
    try:
        _commit(table, latest, "VACUUM END", {"status": status}, metrics)
    except DeltaError:
        if status == "COMPLETED":
            raise
        log.warning("could not record VACUUM END (%s) in %s", status, table.uri, exc_info=True)
