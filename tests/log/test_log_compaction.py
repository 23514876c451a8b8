"""Log compaction files (``x.y.compacted.json``, "Log Compaction Files"): read in place of the commits
they cover, and written by ``DeltaTable.compact_log``.

Every check compares the table read with its compactions against the same table with them removed: the
compaction must change how many files a reader reads, never what it reads.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from airflow_provider_delta.log import DeltaTable, InvalidCommitError

SCHEMA = pa.schema([("id", pa.int64()), ("p", pa.string())])
GOLDEN = Path(__file__).resolve().parents[2].parent / "shared" / "golden"


def state(root: Path, version: int | None = None) -> tuple:
    snap = DeltaTable(str(root)).snapshot(version)
    files = sorted(snap.files.column("path").to_pylist())
    tombstones = sorted(DeltaTable(str(root)).snapshot(version).tombstones.column("path").to_pylist())
    return (snap.version, snap.protocol, snap.metadata, snap.app_transactions, snap.domain_metadata, files,
            tombstones)  # fmt: skip


def without(root: Path, tmp: Path, pattern: str) -> Path:
    copy = tmp / f"without-{pattern.replace('*', '')}"
    shutil.copytree(root, copy)
    for f in (copy / "_delta_log").glob(pattern):
        f.unlink()
    return copy


def build(root: Path, commits: int) -> DeltaTable:
    t = DeltaTable.create(str(root), SCHEMA, partition_by=["p"],
                          configuration={"delta.checkpointInterval": "1000"})  # fmt: skip
    for i in range(commits):
        mode = "overwrite" if i % 4 == 3 else "append"
        t.write(pa.table({"id": [i], "p": [f"p{i % 3}"]}), mode=mode,
                replace_where=f"p = 'p{i % 3}'" if mode == "overwrite" else None,
                app_id=f"job{i % 2}", app_version=i)  # fmt: skip
    return t


def test_delta_kernel_rs_compactions_read_as_their_commits(tmp_path: Path):
    root = GOLDEN / "delta-kernel-rs/compacted-log-files-table/delta"
    snap = DeltaTable(str(root)).snapshot()
    cover = [f.name for _, f in snap.segment.commit_cover()]
    assert any(n.endswith(".compacted.json") for n in cover)
    bare = without(root, tmp_path, "*.compacted.json")
    for version in (None, 5, 10, 15, 20):
        assert state(root, version) == state(bare, version)


def test_a_written_compaction_reads_as_its_commits_and_spares_the_reads(tmp_path: Path, monkeypatch):
    root = tmp_path / "t"
    t = build(root, 30)
    name = t.compact_log()
    assert name == f"{0:020d}.{30:020d}.compacted.json"
    body = [json.loads(line) for line in (root / "_delta_log" / name).read_text().splitlines()]
    kinds = [next(iter(line)) for line in body]
    assert "commitInfo" not in kinds and kinds.count("protocol") == kinds.count("metaData") == 1
    assert sorted(t["txn"]["appId"] for t in body if "txn" in t) == ["job0", "job1"]
    plain = without(root, tmp_path, "*.crc")  # no checksum: the reader replays the log
    compacted_only = state(plain)
    assert compacted_only == state(without(plain, tmp_path, "*.compacted.json"))
    reads: list[str] = []
    table = DeltaTable(str(plain))
    real = table.store.read_log_files

    def record(names: Any) -> list[bytes]:
        names = list(names)
        reads.extend(names)
        return real(names)

    monkeypatch.setattr(table.store, "read_log_files", record)
    assert sorted(table.snapshot().file_paths()) == compacted_only[5]
    assert reads == [name, name]  # the small state, then the file list: one file each, not 31


def test_compaction_of_a_range_and_time_travel_inside_it(tmp_path: Path):
    root = tmp_path / "t"
    t = build(root, 12)
    assert t.compact_log(3, 9) == f"{3:020d}.{9:020d}.compacted.json"
    assert t.compact_log(3, 9) is None  # written once, never replaced
    bare = without(root, tmp_path, "*.compacted.json")
    for version in range(13):  # inside the range a reader uses the commits, after it the compaction
        assert state(root, version) == state(bare, version)


def test_nothing_to_compact_and_commits_cleaned_up_are_said(tmp_path: Path):
    root = tmp_path / "t"
    t = build(root, 9)
    assert t.compact_log(2, 2) is None  # one commit: nothing to gain
    t.checkpoint(5)
    for v in range(5):  # as log cleanup leaves it: the checkpoint at 5 and the commits after it
        (root / "_delta_log" / f"{v:020d}.json").unlink()
    with pytest.raises(InvalidCommitError, match="commit 2 is not in the log"):
        t.compact_log(2, 8)
    assert t.compact_log() == f"{6:020d}.{9:020d}.compacted.json"  # after the checkpoint, by default
