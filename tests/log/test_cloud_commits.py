"""Commits on Google Cloud Storage (fake-gcs-server) and Azure Blob Storage (Azurite) through gcsfs and adlfs.

Delta's mutual exclusion rests on put-if-absent ("Creation of New Log Entries"): on both clouds a commit file
that exists must make the writer fail with FileExistsError and keep its content, and racing writers must
land every commit at a distinct, contiguous version. deltalake (delta-rs, talking to the same emulator) is
the oracle for what we committed.
"""

from __future__ import annotations

import threading
import urllib.parse
import uuid
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import aiohttp
import deltalake
import fsspec
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from fsspec.implementations.memory import MemoryFileSystem

from airflow_provider_delta.log import AddFile, DeltaTable, UnsafeStorageError, add_file_from_parquet
from airflow_provider_delta.log.files.storage import LogStore, put_if_absent

if TYPE_CHECKING:
    from emulators import Emulator  # tests/emulators.py

SCHEMA = pa.schema([("id", pa.int64()), ("p", pa.string())])
WRITERS, COMMITS_EACH = 4, 20


def _table_path() -> str:
    return f"t-{uuid.uuid4().hex[:10]}"


def _write_parquet(table: DeltaTable, rel: str, ids: list[int]) -> None:
    with table.store.fs.open(table.store.table_file(rel), "wb") as fh:
        pq.write_table(pa.table({"id": pa.array(ids, pa.int64())}), fh)


def _append(table: DeltaTable, p: str, ids: list[int]) -> int:
    rel = f"p={p}/part-{uuid.uuid4().hex}.parquet"
    _write_parquet(table, rel, ids)
    return table.transaction().add_files([add_file_from_parquet(table, rel, {"p": p})]).commit().version


def _ours(table: DeltaTable) -> tuple[int, dict[str, int], dict[str, dict]]:
    s = table.snapshot()
    rows = s.files.select(["path", "size", "partitionValues"]).to_pylist()
    return (
        s.version,
        {r["path"]: r["size"] for r in rows},
        {r["path"]: dict(r["partitionValues"]) for r in rows},
    )


def _delta_rs(dt: deltalake.DeltaTable) -> tuple[int, dict[str, int], dict[str, dict]]:
    adds = pa.table(dt.get_add_actions(flatten=False)).to_pylist()
    return (
        dt.version(),
        {urllib.parse.unquote(a["path"]): a["size_bytes"] for a in adds},
        {urllib.parse.unquote(a["path"]): dict(a.get("partition") or {}) for a in adds},
    )


@pytest.fixture
def http_requests(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, str]]:
    """(method, url) of every HTTP request gcsfs and the Azure SDK send: both go through aiohttp."""
    seen: list[tuple[str, str]] = []
    original = aiohttp.ClientSession._request

    async def counting(self: aiohttp.ClientSession, method: str, url: Any, *args: Any, **kwargs: Any):
        query = urllib.parse.urlencode(kwargs.get("params") or {})  # gcsfs passes the query apart
        seen.append((method, f"{url}?{query}" if query else str(url)))
        return await original(self, method, url, *args, **kwargs)

    monkeypatch.setattr(aiohttp.ClientSession, "_request", counting)
    return seen


def test_create_commit_and_read_back_agree_with_deltalake(emulator: Emulator):
    path = _table_path()
    table = DeltaTable.create(
        emulator.uri(path), SCHEMA, partition_by=["p"], storage_options=emulator.storage_options
    )
    assert _append(table, "a", [1, 2, 3]) == 1
    assert _append(table, "b", [4]) == 2

    again = DeltaTable(emulator.uri(path), storage_options=emulator.storage_options)
    version, sizes, partitions = _ours(again)
    assert version == 2 and len(sizes) == 2
    assert sorted(v["p"] for v in partitions.values()) == ["a", "b"]

    dt = deltalake.DeltaTable(emulator.delta_uri(path), storage_options=emulator.delta_storage_options)
    assert _delta_rs(dt) == (version, sizes, partitions)
    assert sorted(dt.to_pyarrow_table().column("id").to_pylist()) == [1, 2, 3, 4]


def test_put_if_absent_refuses_an_existing_commit_and_keeps_its_content(emulator: Emulator):
    table = DeltaTable.create(emulator.uri(_table_path()), SCHEMA, storage_options=emulator.storage_options)
    name = "00000000000000000000.json"
    before = table.store.read_log_file(name)
    # Also from another filesystem instance (another process): nothing cached may decide the outcome.
    for store in (table.store, LogStore(table.uri, filesystem=emulator.filesystem())):
        with pytest.raises(FileExistsError):
            put_if_absent(store, name, b'{"commitInfo":{"operation":"HIJACK"}}\n')
        assert store.read_log_file(name) == before

    put_if_absent(table.store, "00000000000000000001.json", b"x\n")
    with pytest.raises(FileExistsError):
        put_if_absent(table.store, "00000000000000000001.json", b"y\n")
    assert table.store.read_log_file("00000000000000000001.json") == b"x\n"


def test_concurrent_writers_land_every_commit_at_contiguous_versions(emulator: Emulator):
    path = _table_path()
    DeltaTable.create(
        emulator.uri(path), SCHEMA, partition_by=["p"], storage_options=emulator.storage_options
    )
    versions: list[int] = []
    errors: list[BaseException] = []
    lock = threading.Lock()

    def writer(w: int) -> None:
        # One filesystem per writer, as separate processes would have (no shared listing cache).
        table = DeltaTable(
            emulator.uri(path), storage_options={**emulator.storage_options, "skip_instance_cache": True}
        )
        try:
            for i in range(COMMITS_EACH):
                add = AddFile(f"p={w}/w{w}-{i}.parquet", 100 + i, {"p": str(w)})
                v = table.transaction().add_files([add]).commit().version
                with lock:
                    versions.append(v)
        except BaseException as exc:  # surfaced below: a thread's exception would otherwise vanish
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(WRITERS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    total = WRITERS * COMMITS_EACH
    assert sorted(versions) == list(range(1, total + 1))

    table = DeltaTable(emulator.uri(path), storage_options=emulator.storage_options)
    version, sizes, partitions = _ours(table)
    assert version == total and len(sizes) == total
    commits = [f.name for f in table.store.list_log() if f.name.endswith(".json")]
    assert commits == [f"{v:020d}.json" for v in range(total + 1)]
    # Automatic checkpoints (every 10 versions) went through write_replace on this backend.
    assert table.store.log_file_exists(f"{total:020d}.checkpoint.parquet")
    dt = deltalake.DeltaTable(emulator.delta_uri(path), storage_options=emulator.delta_storage_options)
    assert _delta_rs(dt) == (version, sizes, partitions)


def test_listing_from_a_version_existence_and_replacing(emulator: Emulator, http_requests: list):
    table = DeltaTable.create(emulator.uri(_table_path()), SCHEMA, storage_options=emulator.storage_options)
    for i in range(1, 6):
        table.transaction().add_files([AddFile(f"f{i}.parquet", i)]).commit()
    store = LogStore(table.uri, filesystem=emulator.filesystem())
    store.write_replace(store.log_file("_last_checkpoint"), b"old")
    store.write_replace(store.log_file("_last_checkpoint"), b"new")
    store.fs.pipe_file(store.log_file("_sidecars/s.parquet"), b"")  # a sub-folder is not part of the listing

    names = [f.name for f in store.list_log(3)]
    # Each commit is followed by its version checksum.
    assert names == [f"{v:020d}.{ext}" for v in (3, 4, 5) for ext in ("crc", "json")] + ["_last_checkpoint"]
    assert [f.name for f in store.list_log()][:3] == [f"{0:020d}.crc", f"{0:020d}.json", f"{1:020d}.crc"]
    assert all(f.size > 0 and f.modification_time > 0 for f in store.list_log(3))
    assert store.read_log_file("_last_checkpoint") == b"new"

    http_requests.clear()
    assert store.log_file_exists(f"{5:020d}.json")
    assert not store.log_file_exists(f"{6:020d}.json")
    # One request each, whatever the log's length: a missing file must not list the prefix.
    assert len(http_requests) == 2, http_requests
    http_requests.clear()
    assert store.read_log_file(f"{5:020d}.json").startswith(b"{")
    assert len(http_requests) == 1, http_requests


def test_gcs_lists_from_the_start_version_page_by_page(
    gcs_emulator: Emulator, http_requests: list, monkeypatch: pytest.MonkeyPatch
):
    table = DeltaTable.create(
        gcs_emulator.uri(_table_path()), SCHEMA, storage_options=gcs_emulator.storage_options
    )
    for i in range(1, 6):
        table.transaction().add_files([AddFile(f"f{i}.parquet", i)]).commit()
    store = LogStore(table.uri, filesystem=gcs_emulator.filesystem())
    call, pages = store.fs.call, []

    def two_per_page(*args: Any, **kwargs: Any) -> Any:
        page = call(*args, maxResults=2, **kwargs)
        pages.append([item["name"].rsplit("/", 1)[1] for item in page.get("items", [])])
        return page

    monkeypatch.setattr(store.fs, "call", two_per_page)
    http_requests.clear()
    listed = [f"{v:020d}.{ext}" for v in range(2, 6) for ext in ("crc", "json")]  # commits and checksums
    assert [f.name for f in store.list_log(2)] == listed
    # The server starts at version 2 ("startOffset"): versions 0 and 1 never cross the wire.
    assert pages[:4] == [listed[0:2], listed[2:4], listed[4:6], listed[6:8]]
    assert all("startOffset=" in url for _, url in http_requests), http_requests


class _NoCreateFileSystem(MemoryFileSystem):
    """A backend without an atomic create-if-absent (its pipe_file ignores mode="create")."""

    protocol = "nocreate"
    root_marker = "/"
    store: dict = {}  # its own files, not memory://'s
    pseudo_dirs = [""]


@pytest.fixture
def nocreate() -> Iterator[str]:
    fsspec.register_implementation("nocreate", _NoCreateFileSystem, clobber=True)
    yield f"nocreate://t-{uuid.uuid4().hex[:10]}"
    _NoCreateFileSystem.store.clear()


def test_a_backend_without_atomic_create_is_refused_unless_allowed(nocreate: str):
    with pytest.raises(UnsafeStorageError, match="nocreate"):
        DeltaTable.create(nocreate, SCHEMA)
    table = DeltaTable.create(nocreate, SCHEMA, allow_unsafe_storage=True)
    with pytest.raises(UnsafeStorageError):
        table.transaction().add_files([AddFile("a.parquet", 1)]).commit()
    assert (
        table.transaction(allow_unsafe_storage=True).add_files([AddFile("a.parquet", 1)]).commit().version
        == 1
    )
    with pytest.raises(FileExistsError):  # the best effort a single writer gets: check, then write
        put_if_absent(table.store, "00000000000000000001.json", b"x\n", allow_unsafe=True)
