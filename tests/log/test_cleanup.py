"""Metadata cleanup: which log files expire, and that every retained version still reads identically.

Log file ages are set with os.utime and the clock is injected with ``now_ms``, so no test sleeps.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import time
import urllib.parse
from pathlib import Path
from typing import Any

import deltalake
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from airflow_provider_delta.log import DeltaTable, VersionNotFoundError, add_file_from_parquet
from airflow_provider_delta.log.files.storage import FileMeta
from airflow_provider_delta.log.maintenance.cleanup import cleanup_expired_logs, cutoff_checkpoint

SCHEMA = pa.schema([("id", pa.int64())])
DAY = 86_400_000
NOW = 1_780_000_000_000  # injected clock
OLD, NEW = 40 * DAY, 1 * DAY  # against the default 30-day delta.logRetentionDuration
_VERSION = re.compile(r"^(\d{20})\.")


def build(
    root: Path, commits: int, configuration: dict[str, str] | None = None, *, checksums: bool = False
) -> DeltaTable:
    """``commits`` versions (0 = create), one small file appended by each; the core checkpoints every 10.
    Without ``checksums`` the ``.crc`` files the core writes are removed: a log as delta-rs leaves it,
    so that each test names exactly the files it is about."""
    t = DeltaTable.create(str(root), SCHEMA, configuration=configuration)
    for v in range(1, commits):
        rel = f"part-{v:05d}.parquet"
        pq.write_table(pa.table({"id": [v]}), root / rel)
        t.transaction().add_files([add_file_from_parquet(t, rel)]).commit()
    if not checksums:
        for f in (root / "_delta_log").glob("*.crc"):
            f.unlink()
    return DeltaTable(str(root))


def age_log(root: Path, age_of: Any, now: int = NOW) -> None:
    """Set the mtime of every versioned log file to ``now - age_of(version)``, one second per version
    apart so commit times increase with versions."""
    for f in (root / "_delta_log").iterdir():
        m = _VERSION.match(f.name)
        if m:
            v = int(m.group(1))
            t = (now - age_of(v)) / 1000 + v
            os.utime(f, (t, t))


def log_names(root: Path) -> set[str]:
    return {
        p.relative_to(root / "_delta_log").as_posix() for p in (root / "_delta_log").rglob("*") if p.is_file()
    }


def state(t: DeltaTable, version: int) -> tuple[int, list[str]]:
    snap = t.snapshot(version)
    return snap.version, sorted(snap.file_paths())


def commit(v: int) -> str:
    return f"{v:020d}.json"


def test_cleanup_deletes_up_to_the_newest_checkpoint_before_the_cutoff(tmp_path: Path):
    t = build(tmp_path, 25)  # checkpoints at 10 and 20
    age_log(tmp_path, lambda v: OLD if v <= 14 else NEW)
    before = {v: state(t, v) for v in range(25)}
    names_before = log_names(tmp_path)

    deleted = cleanup_expired_logs(t, now_ms=NOW)
    # The cut-off commit is 14; the newest checkpoint at or before it is 10: everything before 10 goes.
    assert deleted == [commit(v) for v in range(10)]
    assert log_names(tmp_path) == names_before - set(deleted)
    for v in range(10):
        with pytest.raises(VersionNotFoundError):
            t.snapshot(v)
    for v in range(10, 25):
        assert state(t, v) == before[v]
    dt = deltalake.DeltaTable(str(tmp_path))
    assert dt.version() == 24
    assert sorted(urllib.parse.unquote(p) for p in dt.file_uris()) == [
        (tmp_path / p).as_posix() for p in before[24][1]
    ]
    assert cleanup_expired_logs(t, now_ms=NOW) == []  # idempotent


def test_checksums_expire_with_their_commits(tmp_path: Path):
    t = build(tmp_path, 25, checksums=True)  # a checksum per version, checkpoints at 10 and 20
    age_log(tmp_path, lambda v: OLD if v <= 14 else NEW)
    deleted = cleanup_expired_logs(t, now_ms=NOW)
    assert deleted == sorted(n for v in range(10) for n in (commit(v), f"{v:020d}.crc"))
    left = log_names(tmp_path)
    assert {f"{v:020d}.crc" for v in range(10, 25)} <= left
    assert t.snapshot().checksum is not None and t.snapshot().num_files == 24


def test_the_newest_checkpoint_and_everything_after_it_remain(tmp_path: Path):
    t = build(tmp_path, 25)
    age_log(tmp_path, lambda v: OLD)  # every version has expired
    before = {v: state(t, v) for v in range(20, 25)}
    deleted = cleanup_expired_logs(t, now_ms=NOW)
    assert deleted == sorted([commit(v) for v in range(20)] + [f"{10:020d}.checkpoint.parquet"])
    left = log_names(tmp_path)
    assert f"{20:020d}.checkpoint.parquet" in left and "_last_checkpoint" in left
    assert {commit(v) for v in range(20, 25)} <= left
    with pytest.raises(VersionNotFoundError):
        t.snapshot(19)
    assert {v: state(t, v) for v in range(20, 25)} == before
    assert deltalake.DeltaTable(str(tmp_path)).version() == 24


def test_disabled_cleanup_and_longer_retention_delete_nothing(tmp_path: Path):
    t = build(tmp_path, 12, {"delta.enableExpiredLogCleanup": "false"})
    age_log(tmp_path, lambda v: OLD)
    names = log_names(tmp_path)
    assert cleanup_expired_logs(t, now_ms=NOW) == []
    assert cleanup_expired_logs(t, now_ms=NOW, retention_ms=DAY) == []
    assert log_names(tmp_path) == names

    other = build(tmp_path / "other", 12, {"delta.logRetentionDuration": "interval 60 days"})
    age_log(tmp_path / "other", lambda v: OLD)
    assert cleanup_expired_logs(other, now_ms=NOW) == []
    assert cleanup_expired_logs(other, now_ms=NOW, retention_ms=35 * DAY) == [commit(v) for v in range(10)]


def test_a_table_without_a_checkpoint_keeps_its_whole_log(tmp_path: Path):
    t = build(tmp_path, 6)
    age_log(tmp_path, lambda v: OLD)
    names = log_names(tmp_path)
    assert cleanup_expired_logs(t, now_ms=NOW) == []
    assert log_names(tmp_path) == names
    assert state(t, 0)[0] == 0


def test_files_newer_than_the_retention_are_never_deleted(tmp_path: Path):
    t = build(tmp_path, 15)
    t.checkpoint(5)
    (tmp_path / "_delta_log" / f"{3:020d}.crc").write_text("{}")
    (tmp_path / "_delta_log" / f"{12:020d}.crc").write_text("{}")
    # Commit 8 is recent, so 9..14 count as recent too (timestamps are made monotonic), however old
    # their mtimes look: the cut-off commit is 7 and the boundary checkpoint 5.
    age_log(tmp_path, lambda v: NEW if v == 8 else OLD)
    before = {v: state(t, v) for v in range(5, 15)}

    deleted = cleanup_expired_logs(t, now_ms=NOW)
    assert deleted == sorted([commit(v) for v in range(5)] + [f"{3:020d}.crc"])
    left = log_names(tmp_path)
    assert {commit(8), f"{10:020d}.checkpoint.parquet", f"{12:020d}.crc"} <= left
    assert {v: state(t, v) for v in range(5, 15)} == before
    with pytest.raises(VersionNotFoundError):
        t.snapshot(4)


def test_a_recent_file_of_an_old_version_stops_the_cleanup_there(tmp_path: Path):
    t = build(tmp_path, 15)
    t.checkpoint(2)
    age_log(tmp_path, lambda v: OLD)
    recent = tmp_path / "_delta_log" / f"{2:020d}.checkpoint.parquet"
    os.utime(recent, ((NOW - NEW) / 1000,) * 2)
    before = {v: state(t, v) for v in range(2, 15)}
    # The boundary is checkpoint 10, but version 2 holds a recent file: only 0 and 1 may go.
    assert cleanup_expired_logs(t, now_ms=NOW) == [commit(0), commit(1)]
    assert {v: state(t, v) for v in range(2, 15)} == before
    assert recent.exists()


def test_a_fresh_checkpoint_of_old_commits_is_a_boundary(tmp_path: Path):
    t = build(tmp_path, 4)
    age_log(tmp_path, lambda v: OLD)
    assert cleanup_expired_logs(t, now_ms=NOW) == []  # no checkpoint yet
    t.checkpoint()  # written now; the spec bounds the cleanup by commit times only
    assert cleanup_expired_logs(t, now_ms=NOW) == [commit(v) for v in range(3)]
    assert state(t, 3)[0] == 3


def test_multi_part_checkpoints_checksums_and_compactions_expire(tmp_path: Path):
    t = build(tmp_path, 15)
    t.checkpoint(7, parts=2)
    log_dir = tmp_path / "_delta_log"
    (log_dir / f"{3:020d}.crc").write_text("{}")
    (log_dir / f"{1:020d}.{3:020d}.compacted.json").write_text("")
    (log_dir / f"{11:020d}.{13:020d}.compacted.json").write_text("")
    age_log(tmp_path, lambda v: OLD if v <= 12 else NEW)
    deleted = cleanup_expired_logs(t, now_ms=NOW)
    parts = [f"{7:020d}.checkpoint.{i:010d}.0000000002.parquet" for i in (1, 2)]
    compacted = f"{1:020d}.{3:020d}.compacted.json"
    # The checkpoint at 7 brought a checksum of its version (its file list was read for it).
    crcs = [f"{3:020d}.crc", f"{7:020d}.crc"]
    assert deleted == sorted([commit(v) for v in range(10)] + parts + crcs + [compacted])
    assert f"{11:020d}.{13:020d}.compacted.json" in log_names(tmp_path)  # starts after the boundary
    assert state(t, 10)[0] == 10


def test_v2_checkpoints_and_unreferenced_sidecars_expire(tmp_path: Path):
    t = build(tmp_path, 25, {"delta.checkpointPolicy": "v2"})
    sidecars = tmp_path / "_delta_log" / "_sidecars"
    orphan_old, orphan_new = sidecars / "orphan-old.parquet", sidecars / "orphan-new.parquet"
    for orphan, age_ms in ((orphan_old, OLD), (orphan_new, NEW)):
        orphan.write_bytes(b"x")
        os.utime(orphan, ((NOW - age_ms) / 1000,) * 2)
    age_log(tmp_path, lambda v: OLD)
    referenced_by = {}
    for cp in (tmp_path / "_delta_log").glob("*.checkpoint.*"):
        table = pq.read_table(cp, columns=["sidecar"]) if cp.suffix == ".parquet" else None
        paths = [s["path"] for s in table.column("sidecar").to_pylist() if s] if table else []
        referenced_by[int(cp.name[:20])] = {os.path.basename(p) for p in paths}
    assert referenced_by[10] and referenced_by[20]
    for name in referenced_by[10] | referenced_by[20]:
        os.utime(sidecars / name, ((NOW - OLD) / 1000,) * 2)
    before = {v: state(t, v) for v in range(20, 25)}

    deleted = set(cleanup_expired_logs(t, now_ms=NOW))
    assert {f"_sidecars/{n}" for n in referenced_by[10]} | {"_sidecars/orphan-old.parquet"} <= deleted
    assert not {f"_sidecars/{n}" for n in referenced_by[20]} & deleted
    assert orphan_new.exists() and not orphan_old.exists()
    assert not any(n.startswith(f"{10:020d}.checkpoint") for n in log_names(tmp_path))
    assert {v: state(t, v) for v in range(20, 25)} == before


class FailingFS:
    def __init__(self, inner: Any, budget: int) -> None:
        self.inner, self.budget = inner, budget

    def rm_file(self, path: str) -> None:
        if self.budget == 0:
            raise PermissionError(path)
        self.budget -= 1
        self.inner.rm_file(path)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def test_an_interrupted_cleanup_leaves_a_contiguous_log(tmp_path: Path):
    t = build(tmp_path, 25)
    age_log(tmp_path, lambda v: OLD if v <= 14 else NEW)
    before = {v: state(t, v) for v in range(10, 25)}
    real = t.store.fs
    t.store.fs = FailingFS(real, budget=4)
    with pytest.raises(PermissionError):
        cleanup_expired_logs(t, now_ms=NOW)
    # Oldest first: 0..3 are gone and 4..9 remain, so no gap; 4..9 are unreadable, as after a full run.
    assert {commit(v) for v in range(4, 25)} <= log_names(tmp_path)
    assert not {commit(v) for v in range(4)} & log_names(tmp_path)
    with pytest.raises(VersionNotFoundError):
        t.snapshot(6)
    assert {v: state(t, v) for v in range(10, 25)} == before
    assert deltalake.DeltaTable(str(tmp_path)).version() == 24
    t.store.fs = real
    assert cleanup_expired_logs(t, now_ms=NOW) == [commit(v) for v in range(4, 10)]
    assert {v: state(t, v) for v in range(10, 25)} == before


@pytest.mark.s3
def test_cleanup_on_s3(s3_server: Any, s3_bucket: str):
    uri = f"s3://{s3_bucket}/t"
    opts = s3_server.storage_options
    t = DeltaTable.create(uri, SCHEMA, storage_options=opts)
    for _ in range(12):
        t.transaction().commit("OPTIMIZE")  # checkpoint at 10
    later = int(time.time() * 1000) + OLD  # every object is 40 days old by then
    deleted = cleanup_expired_logs(t, now_ms=later)
    assert deleted == sorted(n for v in range(10) for n in (commit(v), f"{v:020d}.crc"))
    fs = s3_server.filesystem()
    left = sorted(os.path.basename(k) for k in fs.find(f"{s3_bucket}/t/_delta_log"))
    assert left == sorted(
        [f"{10:020d}.checkpoint.parquet", "_last_checkpoint", commit(10), commit(11), commit(12)]
        + [f"{v:020d}.crc" for v in (10, 11, 12)]
    )
    assert t.version() == 12
    with pytest.raises(VersionNotFoundError):
        t.snapshot(9)


def test_the_cutoff_is_midnight_utc_of_now_minus_the_retention(tmp_path: Path):
    assert NOW % DAY > DAY // 2  # the injected clock is in the evening (UTC)
    t = build(tmp_path, 12)
    age_log(tmp_path, lambda v: 30 * DAY + DAY // 2)  # older than 30 days, but after that day's midnight
    assert cleanup_expired_logs(t, now_ms=NOW) == []
    age_log(tmp_path, lambda v: 31 * DAY)
    assert cleanup_expired_logs(t, now_ms=NOW) == [commit(v) for v in range(10)]


def test_a_commit_older_than_one_before_it_counts_as_newer():
    """Clock skew: commit timestamps are made increasing in version order, as Delta Spark's cleanup does."""
    cutoff = NOW - 30 * DAY
    files = [FileMeta(commit(v), 1, cutoff - 100 + v) for v in range(9)]
    files += [FileMeta(commit(9), 1, cutoff), FileMeta(f"{10:020d}.checkpoint.parquet", 1, cutoff - 900)]
    files += [FileMeta(commit(11), 1, cutoff - 400)]
    assert cutoff_checkpoint(files + [FileMeta(commit(10), 1, cutoff - 500)], cutoff) is None
    assert cutoff_checkpoint(files + [FileMeta(commit(10), 1, cutoff)], cutoff) is None  # cutoff + 1
    files[9] = FileMeta(commit(9), 1, cutoff - 600)
    assert cutoff_checkpoint(files + [FileMeta(commit(10), 1, cutoff - 500)], cutoff) == 10


def test_a_sidecar_path_that_is_not_a_string_keeps_every_sidecar(tmp_path: Path, caplog):
    """A V2 checkpoint (JSON) whose sidecar ``path`` is a number cannot say which sidecars it needs: cleanup
    keeps them all, with a warning, instead of failing with a TypeError (found by make fuzz, seed 4949)."""
    golden = Path(os.environ["DELTA_SHARED_DIR"]) / "golden" / "delta-kernel-java"
    shutil.copytree(golden / "kernel-pagination-v2-checkpoint-json" / "delta", tmp_path / "t")
    log = tmp_path / "t" / "_delta_log"
    (checkpoint,) = log.glob(f"{4:020d}.checkpoint.*.json")
    actions = [json.loads(line) for line in checkpoint.read_text().splitlines() if line.strip()]
    assert any("sidecar" in a for a in actions)
    for a in actions:
        if "sidecar" in a:
            a["sidecar"]["path"] = 7
    checkpoint.write_text("".join(json.dumps(a) + "\n" for a in actions))
    for f in log.rglob("*"):
        os.utime(f, ((NOW - 40 * DAY) / 1000,) * 2)  # everything past the retention
    sidecars = sorted(p.name for p in (log / "_sidecars").iterdir())
    deleted = cleanup_expired_logs(DeltaTable(str(tmp_path / "t")), now_ms=NOW)
    assert not [d for d in deleted if d.startswith("_sidecars/")]
    assert sorted(p.name for p in (log / "_sidecars").iterdir()) == sidecars
    assert "keeping every sidecar" in caplog.text
