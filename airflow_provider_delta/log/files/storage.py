"""Storage behind one small interface: the only module that knows which backend a table lives on.

As in delta-kernel-rs, everything above this module sees a :class:`LogStore` that lists the log from a
version, reads files and answers existence; local, memory, S3, GCS and Azure differ only here.
"""

from __future__ import annotations

import contextlib
import io
import logging
import math
import os
import posixpath
import threading
import uuid
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from datetime import datetime
from typing import Any, BinaryIO

import fsspec
from fsspec.asyn import sync

from ..base.errors import TableNotFoundError, UnsafeStorageError

log = logging.getLogger(__name__)

LOG_DIR = "_delta_log"
_GCS = frozenset({"gs", "gcs"})
_AZURE = frozenset({"abfs", "abfss", "az"})
# Parallel reads of small log files: object stores answer each in tens of milliseconds.
_READ_THREADS = 16


@dataclass(frozen=True)
class FileMeta:
    """One file of the log as a listing reports it."""

    name: str  # file name inside _delta_log (or a path relative to it, e.g. "_sidecars/x.parquet")
    size: int
    modification_time: int  # ms since the epoch

    def replaced_by(self, now: FileMeta) -> bool:
        """Whether ``now`` (the same name, looked up later) is another object than the one listed: another
        size or another second (S3 lists milliseconds but answers a HEAD in seconds)."""
        return self.size != now.size or self.modification_time // 1000 != now.modification_time // 1000


def _to_ms(value: Any) -> int:
    """Normalise the modification times fsspec backends report (float seconds, datetime, str)."""
    if value is None:
        return 0
    if hasattr(value, "timestamp"):
        return int(value.timestamp() * 1000)
    if isinstance(value, int | float):
        return int(value * 1000)
    return int(datetime.fromisoformat(str(value).replace("Z", "+00:00")).timestamp() * 1000)


# Errors of a call that did not reach the store (or whose answer was lost): they say nothing about the
# file, so a read failing with one is tried again rather than taken for a broken file.
TRANSIENT_ERRORS = (ConnectionError, TimeoutError)


def mtime_of(info: dict[str, Any]) -> int:
    for key in ("mtime", "LastModified", "last_modified", "created", "updated"):
        if key in info and info[key] is not None:
            return _to_ms(info[key])
    return 0


class LogStore:
    """Access to one table's root and ``_delta_log`` over an fsspec filesystem.

    :param uri: table root: a local path, ``file://``, ``memory://``, ``s3://``, ``gs://``, ``abfs://``
        (``az://``) or any fsspec URL.
    :param storage_options: passed to the fsspec filesystem (credentials, endpoint, ...).
    :param filesystem: an fsspec filesystem to use instead of building one from ``storage_options``.
    """

    def __init__(
        self,
        uri: str,
        storage_options: dict[str, Any] | None = None,
        filesystem: fsspec.AbstractFileSystem | None = None,
    ) -> None:
        options = dict(storage_options or {})
        if filesystem is not None:
            # A filesystem built elsewhere (e.g. by Airflow's object storage from a connection).
            fs, root = filesystem, filesystem._strip_protocol(str(uri))
        else:
            fs, root = fsspec.core.url_to_fs(str(uri), **options)
        self.fs = fs
        self.uri = str(uri)
        self.root = root.rstrip("/") if root not in ("/", "") else root
        self.log_path = posixpath.join(self.root, LOG_DIR)
        self.storage_options = options
        protocol = fs.protocol if isinstance(fs.protocol, str) else fs.protocol[0]
        self.protocol = protocol

    # -- paths --------------------------------------------------------------------------------------------
    def log_file(self, name: str) -> str:
        return posixpath.join(self.log_path, name)

    def table_file(self, relative: str) -> str:
        return posixpath.join(self.root, relative)

    # -- listing ------------------------------------------------------------------------------------------
    def list_log(self, start_version: int = 0) -> list[FileMeta]:
        """All files of ``_delta_log`` whose name sorts at or after ``start_version``, sorted by name.

        Names in the log are zero-padded to 20 digits, so a lexicographic start position is a version
        position ("Last Checkpoint File"). S3 lists with ``StartAfter`` and GCS with ``startOffset`` so a
        long log is not listed whole; other backends (Azure included) list the directory and filter.
        """
        start_key = f"{start_version:020d}"
        try:
            if self.protocol in ("s3", "s3a") and hasattr(self.fs, "call_s3"):
                files = self._list_s3(start_key)
            elif self.protocol in _GCS and hasattr(self.fs, "call"):
                files = self._list_gcs(start_key)
            else:
                files = self._list_generic()
        except FileNotFoundError as exc:
            # A listing under a prefix finds nothing; only a missing bucket is "not found" (s3fs, gcsfs). Not
            # a file deleted under a reader (which the snapshot lists again for), but no table at all.
            raise TableNotFoundError(f"no Delta table at {self.uri}: {exc}") from exc
        out = [f for f in files if f.name >= start_key]
        out.sort(key=lambda f: f.name)
        return out

    def _list_generic(self) -> list[FileMeta]:
        if self.protocol in ("file", "local"):
            return self._list_local()
        try:
            if self.protocol in _AZURE:  # adlfs ignores refresh=; a cached listing would hide new commits
                entries = self.fs.ls(self.log_path, detail=True, invalidate_cache=True)
            else:
                entries = self.fs.ls(self.log_path, detail=True, refresh=True)
        except TypeError:
            entries = self.fs.ls(self.log_path, detail=True)
        except FileNotFoundError:
            return []
        out = []
        for e in entries:
            if e.get("type") == "directory":
                continue
            name = posixpath.basename(e["name"].rstrip("/"))
            out.append(FileMeta(name, int(e.get("size") or 0), mtime_of(e)))
        return out

    def _list_local(self) -> list[FileMeta]:
        # os.scandir is several times faster than fsspec's local ls on logs of 10,000+ files.
        try:
            it = os.scandir(self.log_path)
        except (FileNotFoundError, NotADirectoryError):
            return []
        out = []
        with it:
            for e in it:
                try:
                    if e.is_file():
                        st = e.stat()
                        out.append(FileMeta(e.name, st.st_size, st.st_mtime_ns // 1_000_000))
                except FileNotFoundError:
                    continue  # a concurrent writer's temporary file, renamed away since the scan
        return out

    def _list_s3(self, start_key: str) -> list[FileMeta]:
        bucket, _, key = self.log_path.partition("/")
        prefix = key.rstrip("/") + "/"
        out: list[FileMeta] = []
        kwargs: dict[str, Any] = {"Bucket": bucket, "Prefix": prefix, "StartAfter": prefix + start_key}
        while True:
            resp = self.fs.call_s3("list_objects_v2", **kwargs)
            for obj in resp.get("Contents", []):
                name = obj["Key"][len(prefix) :]
                if "/" in name:
                    continue
                out.append(FileMeta(name, int(obj.get("Size", 0)), _to_ms(obj.get("LastModified"))))
            if not resp.get("IsTruncated"):
                return out
            kwargs["ContinuationToken"] = resp["NextContinuationToken"]

    def _list_gcs(self, start_key: str) -> list[FileMeta]:
        # The JSON API's objects.list through gcsfs's raw ``call``: gcsfs's own ls has no start offset.
        bucket, _, key = self.log_path.partition("/")
        prefix = key.rstrip("/") + "/"
        out: list[FileMeta] = []
        params: dict[str, Any] = {"prefix": prefix, "delimiter": "/", "startOffset": prefix + start_key}
        while True:
            page = self.fs.call("GET", "b/{}/o", bucket, json_out=True, **params)
            for obj in page.get("items", []):
                name = obj["name"][len(prefix) :]
                out.append(FileMeta(name, int(obj.get("size") or 0), _to_ms(obj.get("updated"))))
            if not page.get("nextPageToken"):
                return out
            params["pageToken"] = page["nextPageToken"]

    # -- reading ------------------------------------------------------------------------------------------
    def read_log_file(self, name: str) -> bytes:
        return self.fs.cat_file(self.log_file(name), **self._cat_kwargs)

    @property
    def _cat_kwargs(self) -> dict[str, Any]:
        # s3fs sizes a file with a HEAD before a GET unless told not to split reads: one request per read
        # matters for sensors that poll the log.
        return {"max_concurrency": 1} if self.protocol in ("s3", "s3a") else {}

    def read_log_files(self, names: Iterable[str]) -> list[bytes]:
        """Read many small log files concurrently, preserving order."""
        names = list(names)
        if len(names) <= 1:
            return [self.read_log_file(n) for n in names]
        if self.protocol in ("file", "local"):
            paths = [self.log_file(n) for n in names]
            if len(paths) < 64:
                return [_read_local(p) for p in paths]
            # A task per file costs more in the pool than the read itself (page-cached commits): each thread
            # reads a run of files, which still overlaps the reads of a cold disk.
            size = -(-len(paths) // _READ_THREADS)
            runs = _threaded(_read_locals, [paths[i : i + size] for i in range(0, len(paths), size)])
            return [data for run in runs for data in run]
        return _threaded(self.read_log_file, names)

    def write_replace(self, path: str, data: bytes) -> None:
        """Write a whole file that may be replaced (checkpoints, ``_last_checkpoint``), never partially
        visible: local disk writes a temporary file and renames it; object stores put in one request."""
        if self.protocol in ("file", "local"):
            os.makedirs(posixpath.dirname(path), exist_ok=True)
            tmp = posixpath.join(
                posixpath.dirname(path), f".{posixpath.basename(path)}.{uuid.uuid4().hex}.tmp"
            )
            with open(tmp, "wb") as fh:
                fh.write(data)
                fh.flush()
                os.fdatasync(fh.fileno())
            os.replace(tmp, path)
            return
        self.fs.pipe_file(path, data)
        # adlfs keeps a listing cache that does not learn of the write: reading the file back (checkpoint
        # writers verify what they wrote) would then miss it.
        self.fs.invalidate_cache(posixpath.dirname(path))

    @contextlib.contextmanager
    def replacing(self, path: str) -> Iterator[BinaryIO]:
        """A file to write that replaces ``path`` whole once the block ends without an error, as
        ``write_replace`` does, for content too big to hold twice (a checkpoint of millions of files).

        Local disk streams into a hidden temporary file that is renamed over ``path`` at the end (and
        removed on an error); object stores gather the bytes and put them in one request at the end, since
        their streaming uploads would leave an object behind when the writer fails half-way.
        """
        if self.protocol not in ("file", "local"):
            buf = io.BytesIO()
            yield buf
            self.write_replace(path, buf.getvalue())
            return
        os.makedirs(posixpath.dirname(path), exist_ok=True)
        tmp = posixpath.join(posixpath.dirname(path), f".{posixpath.basename(path)}.{uuid.uuid4().hex}.tmp")
        try:
            with open(tmp, "wb") as fh:
                yield fh
                fh.flush()
                os.fdatasync(fh.fileno())
            os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
            raise

    def log_file_exists(self, name: str) -> bool:
        """Whether ``_delta_log/name`` exists, in exactly one storage request.

        S3 uses a single HEAD, GCS a single metadata GET, Azure a single Get Blob Properties: the fsspec
        ``exists`` of all three would also list the prefix (as a "directory") when the file is missing,
        and an idle sensor poke must cost one request whatever the log's length.
        """
        path = self.log_file(name)
        if self.protocol in ("s3", "s3a") and hasattr(self.fs, "call_s3"):
            bucket, _, key = path.partition("/")
            try:
                self.fs.call_s3("head_object", Bucket=bucket, Key=key)
                return True
            except FileNotFoundError:
                return False
        if self.protocol in _GCS and hasattr(self.fs, "call"):
            bucket, _, key = path.partition("/")
            try:
                self.fs.call("GET", "b/{}/o/{}", bucket, key, json_out=True)
                return True
            except FileNotFoundError:
                return False
        if self.protocol in _AZURE and hasattr(self.fs, "service_client"):
            return sync(self.fs.loop, _azure_blob_exists, self.fs, path)
        if self.protocol in ("file", "local"):
            return os.path.exists(path)
        return self.fs.exists(path)

    def log_file_now(self, name: str) -> FileMeta | None:
        """``_delta_log/name`` as storage holds it now (size and time), or None when it is gone: asked of
        the store, not of the file system's cache of listings (adlfs and s3fs answer ``info`` from it)."""
        path = self.log_file(name)
        self.fs.invalidate_cache(posixpath.dirname(path))  # adlfs finds a file in its folder's listing
        self.fs.invalidate_cache(path)
        try:
            return self.info(path)
        except (FileNotFoundError, *_azure_not_found()):
            return None

    def exists(self, path: str) -> bool:
        return self.fs.exists(path)

    def info(self, path: str) -> FileMeta:
        info = self.fs.info(path)
        return FileMeta(posixpath.basename(path), int(info.get("size") or 0), mtime_of(info))

    def open_input_file(self, path: str) -> Any:
        """A seekable file object for Parquet readers; a file deleted under it raises FileNotFoundError
        on every backend (adlfs raises Azure's own ResourceNotFoundError from range reads)."""
        try:
            fh = self.fs.open(path, "rb")
        except _azure_not_found() as exc:
            raise FileNotFoundError(path) from exc
        return _NotFoundTranslated(fh, path) if self.protocol in _AZURE else fh


def _azure_not_found() -> tuple[type[Exception], ...]:
    try:  # an optional dependency: only Azure tables need it
        from azure.core.exceptions import ResourceNotFoundError
    except ImportError:
        return ()
    return (ResourceNotFoundError,)


class _NotFoundTranslated:
    """A file object whose reads turn a backend's "not found" into FileNotFoundError, so a reader racing
    log cleanup handles a deleted checkpoint alike on every store (it lists again)."""

    def __init__(self, fh: Any, path: str) -> None:
        self._fh = fh
        self._path = path

    def read(self, *args: Any) -> bytes:
        try:
            return self._fh.read(*args)
        except _azure_not_found() as exc:
            raise FileNotFoundError(self._path) from exc

    def __getattr__(self, name: str) -> Any:
        return getattr(self._fh, name)

    def __enter__(self) -> _NotFoundTranslated:
        return self

    def __exit__(self, *exc: Any) -> None:
        self._fh.close()


# Backends whose fsspec ``pipe_file(..., mode="create")`` is an atomic create-if-absent: S3 and Azure (adlfs:
# overwrite=False) send ``If-None-Match: *``, GCS ``ifGenerationMatch=0`` (gcsfs and adlfs since 2024.12 map
# the 412/409 to FileExistsError); memory checks under a lock. Local disk hard-links (see put_if_absent).
_MEMORY_CREATE_LOCK = threading.Lock()
_ATOMIC_CREATE = frozenset({"s3", "s3a", "memory"} | _GCS | _AZURE)


def put_if_absent(store: LogStore, name: str, data: bytes, *, allow_unsafe: bool = False) -> None:
    """Create ``_delta_log/name`` with ``data`` unless it exists: raise ``FileExistsError`` if it does.

    Delta's mutual exclusion rests on this ("Creation of New Log Entries": never overwrite an entry).
    Local disk: write a hidden temporary file, then ``os.link`` it to the final name, which fails if the
    name exists, so readers never see a partial commit. A backend without an atomic create is refused
    unless ``allow_unsafe`` (e.g. a single writer that the caller guarantees).
    """
    create_if_absent(store, store.log_file(name), data, allow_unsafe=allow_unsafe)


def create_if_absent(store: LogStore, path: str, data: bytes, *, allow_unsafe: bool = False) -> None:
    """Create the file ``path`` (a full path on the store's filesystem) with ``data`` unless it exists, as
    ``put_if_absent`` does for the log: ``FileExistsError`` if it does. UniForm's Iceberg metadata files are
    published this way. A folder on the way that is a file is ``NotADirectoryError``, never taken for a
    lost race."""
    if store.protocol in ("file", "local"):
        folder = posixpath.dirname(path)
        try:
            os.makedirs(folder, exist_ok=True)
        except FileExistsError as exc:  # exist_ok does not cover a file standing where the folder goes
            raise NotADirectoryError(f"{folder} is a file, not a folder") from exc
        tmp = posixpath.join(folder, f".{posixpath.basename(path)}.{uuid.uuid4().hex}.tmp")
        with open(tmp, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fdatasync(fh.fileno())
        try:
            os.link(tmp, path)
        finally:
            os.unlink(tmp)
        # The commit's modification time must not precede the moment it appeared: whether a checkpoint was
        # written before or after a commit is read from these times (see ``visibility``).
        os.utime(path)
        return
    if store.protocol == "memory":
        # fsspec's memory filesystem checks and stores in two steps: one process-wide lock makes it atomic.
        with _MEMORY_CREATE_LOCK:
            store.fs.pipe_file(path, data, mode="create")
        return
    if store.protocol in _ATOMIC_CREATE:
        store.fs.pipe_file(path, data, mode="create")
        return
    if not allow_unsafe:
        raise UnsafeStorageError(
            f"storage backend {store.protocol!r} offers no atomic create-if-absent through fsspec here, so "
            "two concurrent commits could overwrite each other; pass allow_unsafe_storage=True only if a "
            "single writer commits to this table"
        )
    if store.fs.exists(path):
        raise FileExistsError(path)
    store.fs.pipe_file(path, data)


async def _azure_blob_exists(fs: Any, path: str) -> bool:
    container, key, _ = fs.split_path(path)
    async with fs.service_client.get_blob_client(container, key) as blob:
        return await blob.exists()


def _read_local(path: str) -> bytes:
    with open(path, "rb") as fh:
        return fh.read()


def _read_locals(paths: list[str]) -> list[bytes]:
    return [_read_local(p) for p in paths]


def _threaded(fn, items: list) -> list:
    with ThreadPoolExecutor(max_workers=min(_READ_THREADS, len(items))) as pool:
        return list(pool.map(fn, items))


# -- deleting (vacuum, log cleanup) ---------------------------------------------------------------------
_S3_BATCH = 1000  # DeleteObjects takes at most 1000 keys


def delete_files(
    store: LogStore,
    paths: list[str],
    under: str,
    *,
    max_workers: int = 8,
    progress: Callable[[int, int], None] | None = None,
) -> None:
    """Delete ``paths`` (full paths, each under the folder ``under``) in batches, ``max_workers`` at a
    time, in list order when ``max_workers`` is 1. S3 deletes 1000 keys per DeleteObjects request; other
    stores per file. A file already gone counts as deleted; any other failure stops the run and is raised."""
    prefix = under.rstrip("/") + "/"
    bad = [p for p in paths if not p.startswith(prefix) or "/../" in p[len(prefix) - 1 :]]
    if bad:
        raise AssertionError(f"refusing to delete {bad[0]}: not under {under}")
    total = len(paths)
    s3 = store.protocol in ("s3", "s3a") and hasattr(store.fs, "call_s3")
    size = _S3_BATCH if s3 else max(1, min(1000, math.ceil(total / (max_workers * 8))))
    batches = [paths[i : i + size] for i in range(0, total, size)]
    done = 0
    with ThreadPoolExecutor(max_workers=max(1, min(max_workers, len(batches)))) as pool:
        futures = [pool.submit(_s3_delete if s3 else _delete_each, store, b) for b in batches]
        try:
            for fut in as_completed(futures):
                done += fut.result()
                log.debug("deleted %d of %d files under %s", done, total, under)
                if progress is not None:
                    progress(done, total)
        except BaseException:
            pool.shutdown(wait=True, cancel_futures=True)
            raise
    if store.protocol not in ("file", "local"):
        store.fs.invalidate_cache(under)
    log.info("deleted %d files under %s", total, under)


def _delete_each(store: LogStore, batch: list[str]) -> int:
    for path in batch:
        with contextlib.suppress(FileNotFoundError):
            store.fs.rm_file(path)
    return len(batch)


def _s3_delete(store: LogStore, batch: list[str]) -> int:
    # DeleteObjects directly: fs.rm would expand glob characters ("[", "*", "?") in keys into other keys.
    bucket = batch[0].split("/", 1)[0]
    objects = [{"Key": p.split("/", 1)[1]} for p in batch]
    resp = store.fs.call_s3("delete_objects", Bucket=bucket, Delete={"Objects": objects, "Quiet": True})
    errors = resp.get("Errors") or []
    if errors:
        e = errors[0]
        raise OSError(
            f"S3 did not delete {len(errors)} of {len(batch)} objects, e.g. {e.get('Key')}: "
            f"{e.get('Code')} {e.get('Message')}"
        )
    return len(batch)
