"""VACUUM: delete files under the table root that no version within the retention window needs.

Delta Spark's VACUUM (FULL): list every file under the root except hidden paths, keep those the latest
snapshot references (live adds, their deletion-vector files, tombstones still within the retention) and
any file modified within the retention; delete the rest ("Data Files": "can be lazily deleted by the
vacuum command after a user-specified retention period"). Candidates come only from listing the root, so
a path in the log that points elsewhere (absolute, ``..``, another bucket) can never be deleted. On local
disk, directories left empty (an emptied partition) are removed too, as Delta Spark does; object stores
have no directories to remove.

A table of ``SPILL_FILES`` live files or more is never held whole: its file actions are streamed from the
checkpoint and its listing is read directory by directory, both split by a hash of the path into buckets
spilled to a local temporary directory, and each bucket anti-joined on its own (a grace hash join), so
the peak is a bucket's, not the table's (issue 35).
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import math
import os
import posixpath
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ..actions.actions import FileFields
from ..base.arguments import bool_arg, callable_arg, int_arg, number_arg
from ..base.arrow_utils import from_numpy, from_strings, int64_scalar, single
from ..base.errors import DeltaError, RetentionTooShortError
from ..commits.transaction import Transaction
from ..features.properties import DELETED_FILE_RETENTION
from ..files.commit_json import Actions, parse_json_actions
from ..files.deletion_vectors import stored_dv_paths
from ..files.segment import commit_name
from ..files.storage import LogStore, delete_files, mtime_of
from ..schema.schema import physical_partition_names
from ..snapshot.replay import CheckpointReadError
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
# Live files from which the keep set and the listing are spilled to disk in buckets: below, both fit in
# memory (about 550 MiB at 1,000,000 files of 56-character paths) and one in-memory anti-join is fastest.
SPILL_FILES = 1_000_000
# Keep-set paths per bucket: a bucket's anti-join holds them, their hash set and their share of the
# listing, about 60 MiB at 56-character paths. Each bucket is an open file while spilling: at most 256.
BUCKET_FILES = 250_000
_MAX_BUCKETS = 256
_CHUNK_ROWS = 65_536  # listing rows per Arrow chunk, and rows gathered before a spill's write
_HASH_ROWS = 16_384  # paths hashed at once: the hash's temporaries are 8 bytes per character
_LISTING = pa.schema([("path", pa.string()), ("size", pa.int64()), ("mtime", pa.int64())])
_KEEP = pa.schema([("path", pa.string())])


@dataclass(frozen=True)
class VacuumReport:
    """What VACUUM deleted (or, with ``dry_run``, would delete): paths relative to the table root."""

    files: list[str]
    bytes: int
    seconds: float
    dry_run: bool
    retention_hours: float


# A check of which paths commits after a snapshot reference: (before, after, paths, cutoff) -> mask.
Referenced = Callable[[Snapshot, Snapshot, pa.Array, int], pa.Array]


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
    partition_columns = _partition_dir_names(snap)
    expected = _expected_files(snap)
    referenced: Referenced
    # A small table's keep set and listing fit in memory: one anti-join. A big one's are spilled in buckets,
    # and the commits made while it runs are read alone: its whole file list is never in memory.
    if expected < SPILL_FILES:
        listed = _list_candidates(store, partition_columns, dirs)
        doomed = _doomed(listed, _keep(snap, cutoff), cutoff).sort_by("path")
        referenced, listed_dirs = _referenced_by_replay, (lambda: _dir_count(listed.column("path")))
    else:
        doomed, n_dirs = _spilled_doomed(snap, partition_columns, dirs, cutoff, expected)
        referenced, listed_dirs = _referenced_since, (lambda: n_dirs)
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
    doomed, fresh = _without_files_committed_meanwhile(snap, doomed, cutoff, referenced)
    files = doomed.column("path").to_pylist()
    size = int(pc.sum(doomed.column("size")).as_py() or 0)
    log.info("VACUUM of %s: deleting %d files (%d bytes)", store.uri, len(files), size)
    try:
        full = [f"{store.root}/{f}" for f in files]
        delete_files(store, full, store.root, max_workers=max_workers, progress=progress)
        _remove_empty_dirs(store.root, dirs)
    except Exception:
        if logged:
            _end(table, update_snapshot(fresh), "FAILED", 0, listed_dirs())
        raise
    after = update_snapshot(fresh)
    _report_files_committed_while_deleting(fresh, after, doomed, cutoff, referenced)
    if logged:
        _end(table, after, "COMPLETED", len(files), listed_dirs())
    return VacuumReport(files, size, time.monotonic() - started, False, hours)


def _doomed(listed: pa.Table, keep: pa.Array, cutoff: int) -> pa.Table:
    """The listed files older than ``cutoff`` whose path is not in ``keep``."""
    kept = pc.is_in(listed.column("path"), value_set=keep)
    old = pc.less(listed.column("mtime"), int64_scalar(cutoff))
    return listed.filter(pc.and_(old, pc.invert(kept)))


def _without_files_committed_meanwhile(
    snap: Snapshot, doomed: pa.Table, cutoff: int, referenced: Referenced
) -> tuple[pa.Table, Snapshot]:
    """``doomed`` less the files that commits since ``snap`` reference, and the snapshot that says so.

    Read after VACUUM START, which orders VACUUM among writers: a commit before it is seen here; a writer
    committing after it sees START (as a conflicting winner, or in its snapshot) and refuses to add files
    older than the cut-off (``ConcurrentVacuumError``), so no commit references a file deleted here.
    """
    fresh = update_snapshot(snap)
    if fresh.version == snap.version:
        return doomed, fresh
    late = referenced(snap, fresh, doomed.column("path"), cutoff)
    if pc.any(late).as_py():
        log.info("VACUUM of %s: keeping %d files committed meanwhile", snap.store.uri, pc.sum(late).as_py())
        doomed = doomed.filter(pc.invert(late))
    return doomed, fresh


def _report_files_committed_while_deleting(
    before: Snapshot, after: Snapshot, doomed: pa.Table, cutoff: int, referenced: Referenced
) -> None:
    """A commit that landed while VACUUM deleted and that references a deleted file slipped past every
    guard (e.g. its writer's snapshot started from a checkpoint that hid VACUUM START): say so loudly."""
    if after.version == before.version or not doomed.num_rows:
        return
    hit = doomed.filter(referenced(before, after, doomed.column("path"), cutoff))
    if hit.num_rows:
        log.error(
            "VACUUM of %s deleted %d files that commits %d..%d, made while it ran, reference: %s",
            before.store.uri,
            hit.num_rows,
            before.version + 1,
            after.version,
            hit.column("path").to_pylist()[:20],
        )


def _referenced_by_replay(before: Snapshot, after: Snapshot, paths: pa.Array, cutoff: int) -> pa.Array:
    """Which of ``paths`` ``after`` keeps, from its file list (carried forward from ``before``'s)."""
    return pc.is_in(paths, value_set=_keep(after, cutoff))


def _referenced_since(before: Snapshot, after: Snapshot, paths: pa.Array, cutoff: int) -> pa.Array:
    """Which of ``paths`` the commits after ``before`` up to ``after`` name as ``_keep`` would: all that
    ``after`` keeps beyond what ``before`` kept, read from those commits alone, since a table VACUUM
    spills for must never be replayed whole. When one of them is gone (log cleanup, and ``after`` loaded
    afresh), ``after``'s file actions are streamed past ``paths`` instead."""
    store = after.store
    versions = range(before.version + 1, after.version + 1)
    known = after.known_commits
    names = [commit_name(v) for v in versions if v not in known]
    try:
        read = dict(zip(names, store.read_log_files(names), strict=True)) if names else {}
        acc = Actions(fields=VACUUM_FIELDS)
        chunks = [(v, store.log_file(commit_name(v)), known.get(v) or read[commit_name(v)]) for v in versions]
        parse_json_actions(acc, chunks)
        return _named_by(paths, [("add", t) for t in acc.adds] + [("remove", t) for t in acc.removes],
                         store.root, cutoff)  # fmt: skip
    except FileNotFoundError:
        pass
    try:
        return _named_by(paths, after.stream_file_actions(), store.root, cutoff)
    except (CheckpointReadError, FileNotFoundError):
        return _named_by(paths, [("add", after.files), ("remove", after.tombstones)], store.root, cutoff)


def _named_by(paths: pa.Array, pieces: Iterable[tuple[str, pa.Table]], root: str, cutoff: int) -> pa.Array:
    """Which of ``paths`` the file actions ``pieces`` keep, one piece at a time."""
    hit = np.zeros(len(paths), dtype=bool)
    for kind, table in pieces:
        for part in _paths_named(kind, table, cutoff):
            hit |= pc.is_in(paths, value_set=_relative(part, root)).to_numpy(zero_copy_only=False)
    return from_numpy(hit)


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
    parts = [p for kind, t in (("add", snap.files), ("remove", snap.tombstones)) for p in
             _paths_named(kind, t, cutoff)]  # fmt: skip
    root = snap.store.root
    return pc.unique(pa.concat_arrays([_relative(p, root) for p in parts]))


def _paths_named(kind: str, table: pa.Table, cutoff: int) -> list[pa.Array]:
    """The paths file actions name that VACUUM keeps (as written in the log): an add's, a tombstone's
    deleted at or after ``cutoff``, and the deletion-vector files of both."""
    if kind == "remove" and table.num_rows:
        deleted = pc.fill_null(table.column("deletionTimestamp"), int64_scalar(0))
        table = table.filter(pc.greater_equal(deleted, int64_scalar(cutoff)))
    paths = single(table.column("path")).cast(pa.string())
    return [paths, *stored_dv_paths(single(table.column("deletionVector")))]


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


# -- a big table: the anti-join in buckets spilled to disk ---------------------------------------------------
def _expected_files(snap: Snapshot) -> int:
    """About how many paths the keep set will hold, without replaying the file list: the checksum's live
    files, the file list's when it is in memory, else the rows of the checkpoint's Parquet files (adds
    and tombstones: read from their footers). 0 when none tells, or a footer cannot be read (the replay,
    with its fallbacks, then decides). A V2 checkpoint's sidecars are not counted."""
    if snap.files_loaded or (snap.checksum is not None and snap.checksum.totals is not None):
        return snap.num_files
    checkpoint = snap.segment.checkpoint
    if checkpoint is None:
        return 0
    store, rows = snap.store, 0
    for f in checkpoint.files:
        if not f.name.endswith(".parquet"):
            continue
        path = store.log_file(f.name)
        try:
            source = path if store.protocol in ("file", "local") else store.open_input_file(path)
            rows += pq.ParquetFile(source).metadata.num_rows
        except (OSError, pa.ArrowException):
            return 0
    return rows


def _spilled_doomed(
    snap: Snapshot, partition_columns: tuple[str, ...], dirs: list[str], cutoff: int, expected: int
) -> tuple[pa.Table, int]:
    """``_doomed`` of a table too big to hold (a grace hash join), and the number of directories listed.

    The keep set is streamed from the snapshot's file actions (the checkpoint batch by batch), the listing
    from the walk directory by directory; each row goes to the bucket its path hashes to (``_buckets``), a
    file of a local temporary directory. Equal paths share a bucket, so each bucket's anti-join alone is
    exact, and only one bucket is in memory at a time. Files modified within the retention are never
    doomed: they are left out before they are spilled.
    """
    k = min(_MAX_BUCKETS, max(2, math.ceil(expected / BUCKET_FILES)))
    root = snap.store.root
    parents: set[str] = set()
    with tempfile.TemporaryDirectory(prefix="delta-vacuum-") as tmp:
        try:
            keep = _spill(tmp, "keep", k, _KEEP, _keep_tables(snap.stream_file_actions(), root, cutoff))
        except (CheckpointReadError, FileNotFoundError) as exc:
            # A broken checkpoint, or one deleted under the stream: the whole replay, with its fallbacks.
            log.info(
                "streaming the file actions of %s failed (%s); replaying them whole", snap.store.uri, exc
            )
            replayed = [("add", snap.files), ("remove", snap.tombstones)]
            keep = _spill(tmp, "keep-replayed", k, _KEEP, _keep_tables(replayed, root, cutoff))
        # The checkpoint's batches leave freed pages in the pool, which the walk's Python strings cannot use.
        pa.default_memory_pool().release_unused()

        def old(chunks: Iterator[pa.Table]) -> Iterator[pa.Table]:
            for chunk in chunks:
                parents.update(_parents(chunk.column("path")))
                yield chunk.filter(pc.less(chunk.column("mtime"), int64_scalar(cutoff)))

        listed = _spill(
            tmp, "listed", k, _LISTING, old(_candidate_chunks(snap.store, partition_columns, dirs))
        )
        pa.default_memory_pool().release_unused()
        doomed = []
        for keep_file, listed_file in zip(keep, listed, strict=True):
            paths = _read(keep_file).column("path").combine_chunks()
            doomed.append(_doomed(_read(listed_file), paths, cutoff))
    doomed_files = pa.concat_tables(doomed).combine_chunks().sort_by("path")
    return doomed_files, max(1, len(parents))


def _keep_tables(pieces: Iterable[tuple[str, pa.Table]], root: str, cutoff: int) -> Iterator[pa.Table]:
    """``_keep`` piece by piece, as tables of root-relative paths (not deduplicated: a bucket's is_in does
    not need it, and a set of every path is what the spilled path avoids)."""
    for kind, table in pieces:
        for part in _paths_named(kind, table, cutoff):
            if len(part):
                yield pa.table({"path": _relative(part, root)}, schema=_KEEP)


def _spill(folder: str, name: str, k: int, schema: pa.Schema, tables: Iterable[pa.Table]) -> list[str]:
    """Write the rows of ``tables`` into ``k`` Arrow IPC files by the bucket of their ``path``, gathering
    small tables first (a directory of a few files, a commit's actions) so that each write is worth its
    framing. Returns the files, bucket by bucket."""
    files = [os.path.join(folder, f"{name}-{b:03d}.arrow") for b in range(k)]
    with contextlib.ExitStack() as stack:
        writers = [stack.enter_context(pa.ipc.new_stream(f, schema)) for f in files]
        pending: list[pa.Table] = []
        rows = 0
        for table in itertools.chain(tables, [None]):
            if table is not None:
                pending.append(table)
                rows += table.num_rows
            if rows and (rows >= _CHUNK_ROWS or table is None):
                batch = pa.concat_tables(pending).combine_chunks()
                pending, rows = [], 0
                bucket = _buckets(batch.column("path").chunk(0), k)
                order = np.argsort(bucket, kind="stable")
                batch = batch.take(from_numpy(order))
                start = 0
                for b, n in enumerate(np.bincount(bucket, minlength=k).tolist()):
                    if n:
                        writers[b].write_table(batch.slice(start, n))
                        start += n
    return files


def _read(path: str) -> pa.Table:
    with pa.ipc.open_stream(path) as reader:
        return reader.read_all()


# Per-position multipliers of the path hash (odd, from a fixed seed: the same buckets in every process).
_WEIGHTS = np.random.default_rng(20_261_128).integers(1, 2**32, size=64, dtype=np.uint32) | np.uint32(1)


def _buckets(paths: pa.Array, k: int) -> np.ndarray:
    """The bucket (``0 .. k-1``) of each path: a hash of its UTF-8 bytes, computed over the string array's
    offsets and data buffers with numpy (pyarrow has no hash kernel), ``_HASH_ROWS`` paths at a time so
    that its temporaries stay small. Only the spread matters: equal paths always share a bucket."""
    paths = paths.cast(pa.string())
    n = len(paths)
    out = np.empty(n, dtype=np.int64)
    if n == 0:
        return out
    offsets = np.frombuffer(paths.buffers()[1], dtype=np.int32)[paths.offset : paths.offset + n + 1]
    data_buffer = paths.buffers()[2]
    data = np.frombuffer(data_buffer, dtype=np.uint8) if data_buffer is not None else np.zeros(0, np.uint8)
    for lo in range(0, n, _HASH_ROWS):
        bounds = offsets[lo : min(n, lo + _HASH_ROWS) + 1] - offsets[lo]
        chars = data[offsets[lo] : offsets[lo] + bounds[-1]]
        # Each byte times the multiplier of its position in its path, then a running sum (modulo 2**32):
        # a path's hash is the difference of the sums at its ends. Two arrays of 4 bytes per character.
        position = np.arange(len(chars), dtype=np.int32)
        position -= np.repeat(bounds[:-1], np.diff(bounds))
        position &= len(_WEIGHTS) - 1
        sums = np.zeros(len(chars) + 1, dtype=np.uint32)
        np.take(_WEIGHTS, position, out=sums[1:], mode="clip")  # in range: "clip" skips a buffered copy
        del position
        sums[1:] *= chars
        np.cumsum(sums, dtype=np.uint32, out=sums)
        h = sums[bounds[1:]] - sums[bounds[:-1]]
        h ^= h >> np.uint32(16)  # spread the high bits into the low ones the modulo looks at
        h *= np.uint32(0x45D9F3B)
        h ^= h >> np.uint32(16)
        out[lo : lo + len(h)] = h % np.uint32(k)
    return out


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
    chunks = list(_candidate_chunks(store, partition_columns, dirs))
    return pa.concat_tables(chunks) if chunks else _listing([], [], [])


def _candidate_chunks(
    store: LogStore, partition_columns: tuple[str, ...], dirs: list[str]
) -> Iterator[pa.Table]:
    """``_list_candidates`` as chunks of up to ``_CHUNK_ROWS`` rows."""
    if store.protocol in ("file", "local"):
        # The walk skips hidden directories and files itself: splitting 100,000 paths into their
        # components again would cost VACUUM about 20 MiB more at its peak.
        chunks = _walk_local(store.root, partition_columns, dirs)
    else:
        # fsspec's find returns the whole listing at once: only what follows it is chunked.
        visible = _visible(_listing(*_find(store)), partition_columns)
        chunks = (visible.slice(i, _CHUNK_ROWS) for i in range(0, visible.num_rows, _CHUNK_ROWS))
    for chunk in chunks:
        if pc.any(pc.starts_with(chunk.column("path"), "_delta_log/")).as_py():
            raise AssertionError("refusing to vacuum: a candidate lies inside _delta_log")
        yield chunk


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


def _walk_local(root: str, partition_columns: tuple[str, ...], dirs: list[str]) -> Iterator[pa.Table]:
    """os.scandir walk that never enters hidden directories (``_delta_log`` ...), never lists hidden files
    (``.crc``, ``_SUCCESS``) and never follows symlinks: a symlink is neither listed nor descended into, so
    nothing outside the root can be reached. The directories walked (root-relative, parents first) go to
    ``dirs``.

    Files become Arrow chunks as they are read, ``_CHUNK_ROWS`` at most: Python lists of the whole listing
    (100,000 path strings and boxed integers) were a third of a large VACUUM's peak memory."""
    stack = [""]
    while stack:
        rel_dir = stack.pop()
        try:
            entries = os.scandir(os.path.join(root, rel_dir) if rel_dir else root)
        except FileNotFoundError:
            continue
        paths: list[str] = []
        sizes: list[int] = []
        mtimes: list[int] = []
        with entries:
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
                    if len(paths) == _CHUNK_ROWS:
                        yield _listing(paths, sizes, mtimes)
                        paths, sizes, mtimes = [], [], []
        if paths:
            yield _listing(paths, sizes, mtimes)


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


def _parents(paths: pa.Array | pa.ChunkedArray) -> list[str]:
    """The distinct directories (root-relative, ``""`` for the root) of ``paths``."""
    return pc.unique(pc.replace_substring_regex(paths, r"/?[^/]*$", "")).to_pylist()


def _dir_count(paths: pa.ChunkedArray) -> int:
    return len(_parents(paths.combine_chunks())) if len(paths) else 1


# -- recording in the log ------------------------------------------------------------------------------
def _commit(
    table: TableContext, snap: Snapshot, operation: str, params: dict[str, Any], metrics: dict[str, Any]
) -> None:
    """An empty commit (commitInfo only) with operationMetrics, as Delta Spark writes VACUUM START/END.

    It starts from VACUUM's own snapshot: a commit without file actions needs only the version, protocol
    and metadata, and ``table.transaction()`` would load the full snapshot, stats and all, just for this.
    """
    Transaction(table, snap).commit(operation, params, operation_metrics=metrics, auto_checkpoint=False)


def _end(table: TableContext, latest: Snapshot, status: str, deleted: int, dirs: int) -> None:
    """Record VACUUM END from ``latest`` (VACUUM's snapshot brought up to date, START among its commits)."""
    metrics = {"numDeletedFiles": deleted, "numVacuumedDirectories": dirs}
    try:
        _commit(table, latest, "VACUUM END", {"status": status}, metrics)
    except DeltaError:
        if status == "COMPLETED":
            raise
        log.warning("could not record VACUUM END (%s) in %s", status, table.uri, exc_info=True)
