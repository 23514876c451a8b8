"""An open snapshot catches up with new commits in one listing and one read per new commit, whatever the
size of the checkpoint it was loaded from: the checkpoint is never read again (``update_snapshot``).

The storage calls are counted by an fsspec memory filesystem that records every call that reaches storage
(a real filesystem, wrapped only to count; the local one is read with ``os`` calls fsspec never sees).
"""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest
from fsspec.implementations.memory import MemoryFileSystem

from airflow_provider_delta.log import DeltaTable

SCHEMA = json.dumps(
    {"type": "struct", "fields": [{"name": "id", "type": "long", "nullable": True, "metadata": {}}]}
)
PROTOCOL = {"protocol": {"minReaderVersion": 1, "minWriterVersion": 2}}
METADATA = {
    "metaData": {
        "id": "11111111-2222-3333-4444-555555555555",
        "format": {"provider": "parquet", "options": {}},
        "schemaString": SCHEMA,
        "partitionColumns": [],
        "configuration": {},
    }
}


class CountingMemoryFileSystem(MemoryFileSystem):
    """The memory filesystem, recording ``(call, path)`` for each call that lists, reads or asks."""

    protocol = ("countingmemory",)
    cachable = False
    calls: list[tuple[str, str]] = []

    def ls(self, path: str, detail: bool = True, **kwargs: Any) -> Any:
        self.calls.append(("ls", path))
        return super().ls(path, detail=detail, **kwargs)

    def cat_file(self, path: str, start: int | None = None, end: int | None = None, **kwargs: Any) -> bytes:
        self.calls.append(("cat_file", path))
        return super().cat_file(path, start=start, end=end, **kwargs)

    def _open(self, path: str, mode: str = "rb", **kwargs: Any) -> Any:
        if "r" in mode:
            self.calls.append(("open", path))
        return super()._open(path, mode=mode, **kwargs)

    def info(self, path: str, **kwargs: Any) -> dict[str, Any]:
        self.calls.append(("info", path))
        return super().info(path, **kwargs)

    def exists(self, path: str, **kwargs: Any) -> bool:
        self.calls.append(("exists", path))
        return super().exists(path, **kwargs)


def _commit(fs: MemoryFileSystem, root: str, version: int, actions: list[dict]) -> None:
    fs.pipe_file(f"{root}/_delta_log/{version:020d}.json", "\n".join(map(json.dumps, actions)).encode())


def _add(path: str) -> dict:
    return {
        "add": {"path": path, "partitionValues": {}, "size": 1, "modificationTime": 1, "dataChange": True}
    }


@pytest.fixture
def table() -> tuple[DeltaTable, CountingMemoryFileSystem, str]:
    """Version 0 creates, 1..3 add 100 files each, a checkpoint at 3, commits 4 and 5 add one more."""
    fs = CountingMemoryFileSystem()
    root = f"/update-calls-{uuid.uuid4().hex}"
    _commit(fs, root, 0, [PROTOCOL, METADATA])
    for v in range(1, 4):
        _commit(fs, root, v, [_add(f"v{v}-{i}.parquet") for i in range(100)])
    DeltaTable(root, filesystem=fs).checkpoint()
    for v in (4, 5):
        _commit(fs, root, v, [_add(f"v{v}.parquet")])
    yield DeltaTable(root, filesystem=fs), fs, root
    fs.rm(root, recursive=True)


def test_one_new_commit_costs_one_listing_and_one_read(table):
    dt, fs, root = table
    first = dt.snapshot()
    assert first.version == 5 and first.num_files == 302
    assert first.segment.checkpoint is not None and first.segment.checkpoint.version == 3
    _commit(fs, root, 6, [_add("v6.parquet"), {"remove": {"path": "v1-0.parquet", "dataChange": True}}])
    fs.calls.clear()
    updated = dt.snapshot()
    assert updated.version == 6 and updated.num_files == 302
    assert "v6.parquet" in updated.file_paths() and "v1-0.parquet" not in updated.file_paths()
    log = f"{root}/_delta_log"
    assert fs.calls == [("ls", log), ("cat_file", f"{log}/{6:020d}.json")]


def test_three_new_commits_cost_one_listing_and_a_read_each(table):
    dt, fs, root = table
    assert dt.snapshot().files.num_rows == 302  # the file list, read once, is carried forward
    for v in (6, 7, 8):
        _commit(fs, root, v, [_add(f"v{v}.parquet")])
    fs.calls.clear()
    assert dt.snapshot().num_files == 305
    log = f"{root}/_delta_log"
    assert fs.calls[0] == ("ls", log)
    assert sorted(fs.calls[1:]) == [("cat_file", f"{log}/{v:020d}.json") for v in (6, 7, 8)]


def test_nothing_new_costs_one_listing(table):
    dt, fs, root = table
    first = dt.snapshot()
    fs.calls.clear()
    assert dt.snapshot() is first
    assert fs.calls == [("ls", f"{root}/_delta_log")]
