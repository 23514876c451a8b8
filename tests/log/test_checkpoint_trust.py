"""Maintenance trusts only what the reader accepts: a broken checkpoint is skipped by readers, never cut at
by log cleanup, and never read as "no files".

Each table is built, then damaged as a crashed or careless writer would leave it (a garbage classic
checkpoint, a multi-part checkpoint with a bad part, a V2 checkpoint with a missing or foreign sidecar, a
stale copy of another version's V2 checkpoint), and each case checks the same thing: the table reads as the
intact table does, log cleanup (zero retention, clock two days ahead) leaves it readable at the same version
with the same files, and a checkpoint written afterwards holds the intact state.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from airflow_provider_delta.log import DeltaTable, add_file_from_parquet
from airflow_provider_delta.log.files.segment import commit_name

SCHEMA = pa.schema([("id", pa.int64())])
TWO_DAYS_MS = 2 * 86_400_000
GOLDEN_V2 = (
    Path(__file__).resolve().parents[3] / "shared" / "golden" / "delta-golden" / "v2-checkpoint-parquet"
)


def _cp(version: int) -> str:
    return f"{version:020d}.checkpoint.parquet"


def _build(root: Path, configuration: dict[str, str] | None = None) -> DeltaTable:
    """Commits 0-14, one file each (checkpoints at 10 only: automatic ones are off)."""
    cfg = {"delta.checkpointInterval": "1000", **(configuration or {})}
    t = DeltaTable.create(str(root), SCHEMA, configuration=cfg)
    for v in range(1, 15):
        pq.write_table(pa.table({"id": [v]}), root / f"f{v}.parquet")
        t.transaction().add_files([add_file_from_parquet(t, f"f{v}.parquet")]).commit(auto_checkpoint=False)
        if v == 10:
            t.checkpoint()
    return t


def _state(root: Path) -> tuple[int, list[str]]:
    snap = DeltaTable(str(root)).snapshot()
    return snap.version, sorted(snap.file_paths())


def _clean(root: Path) -> list[str]:
    return DeltaTable(str(root)).cleanup_expired_logs(
        retention_ms=0, now_ms=int(time.time() * 1000) + TWO_DAYS_MS
    )


def _assert_maintenance_keeps(root: Path, intact: tuple[int, list[str]]) -> list[str]:
    """Read, clean up, read, checkpoint, read: the state stays the intact one throughout."""
    assert _state(root) == intact
    deleted = _clean(root)
    assert _state(root) == intact
    DeltaTable(str(root)).checkpoint()
    assert _state(root) == intact
    return deleted


def test_cleanup_after_a_garbage_newest_checkpoint_cuts_at_the_older_one(tmp_path: Path):
    root = tmp_path / "t"
    _build(root)
    intact = _state(root)
    (root / "_delta_log" / _cp(14)).write_bytes(b"PAR1 half a checkpoint")  # a killed writer's leftover

    deleted = _assert_maintenance_keeps(root, intact)

    assert [n for n in deleted if n.endswith(".json")] == [commit_name(v) for v in range(10)]
    assert (root / "_delta_log" / _cp(10)).exists()


def test_cleanup_after_a_multi_part_checkpoint_with_a_bad_part(tmp_path: Path):
    root = tmp_path / "t"
    t = _build(root)
    intact = _state(root)
    t.checkpoint(parts=2)  # 14 in two parts
    (root / "_delta_log" / _cp(14)).unlink(missing_ok=True)
    part2 = root / "_delta_log" / f"{14:020d}.checkpoint.0000000002.0000000002.parquet"
    part2.write_bytes(part2.read_bytes()[:40])  # cut short

    deleted = _assert_maintenance_keeps(root, intact)
    assert commit_name(10) not in deleted and commit_name(9) in deleted


@pytest.mark.parametrize("damage", ["missing", "foreign"])
def test_a_v2_checkpoint_with_a_missing_or_foreign_sidecar_is_not_used(tmp_path: Path, damage: str):
    root = tmp_path / "t"
    t = _build(root, {"delta.checkpointPolicy": "v2"})
    intact = _state(root)
    t.checkpoint()  # V2 at 14, its adds in a sidecar
    (top,) = (root / "_delta_log").glob(f"{14:020d}.checkpoint.*.parquet")
    (name,) = pq.read_table(top, columns=["sidecar"]).column("sidecar").drop_null().to_pylist()
    sidecar = root / "_delta_log" / "_sidecars" / name["path"]
    if damage == "missing":
        sidecar.unlink()
    else:  # a Parquet file of another schema under the sidecar's name: it must not read as "no files"
        pq.write_table(pa.table({"x": [1, 2, 3]}), sidecar)

    deleted = _assert_maintenance_keeps(root, intact)
    assert commit_name(10) not in deleted


def test_a_stale_copy_of_another_versions_v2_checkpoint_is_not_trusted(tmp_path: Path):
    root = tmp_path / "t"
    t = _build(root, {"delta.checkpointPolicy": "v2"})
    t.checkpoint(12)
    log_dir = root / "_delta_log"
    (v12,) = log_dir.glob(f"{12:020d}.checkpoint.*.parquet")
    intact = _state(root)
    # A copy of checkpoint 12 under a name of version 14 (e.g. a backup restored to the wrong place): it
    # has 12's files, so trusting it would lose files 13 and 14.
    shutil.copy(v12, log_dir / f"{14:020d}.checkpoint.00000000-0000-0000-0000-000000000000.parquet")
    assert _state(root) == intact
    _assert_maintenance_keeps(root, intact)


def test_the_v2_checkpoint_last_checkpoint_names_wins_over_another_of_its_version(tmp_path: Path):
    root = tmp_path / "t"
    t = _build(root, {"delta.checkpointPolicy": "v2"})
    intact = _state(root)
    log_dir = root / "_delta_log"
    # An earlier, half-done attempt at checkpoint 14 that holds 13's state but claims version 14, whose name
    # sorts first; then the real checkpoint of 14, which _last_checkpoint names.
    t.checkpoint(13)
    (v13,) = log_dir.glob(f"{13:020d}.checkpoint.*.parquet")
    table = pq.read_table(v13)
    meta = table.column("checkpointMetadata").to_pylist()
    fixed = [None if m is None else {**m, "version": 14} for m in meta]
    table = table.set_column(
        table.column_names.index("checkpointMetadata"),
        "checkpointMetadata",
        pa.array(fixed, table.schema.field("checkpointMetadata").type),
    )
    pq.write_table(table, log_dir / f"{14:020d}.checkpoint.00000000-0000-0000-0000-000000000000.parquet")
    v13.unlink()
    t.checkpoint(14)
    pointer = json.loads((log_dir / "_last_checkpoint").read_text())
    assert pointer["version"] == 14 and pointer["v2Checkpoint"]["path"].startswith(f"{14:020d}.checkpoint.")
    assert _state(root) == intact


def test_cleanup_deletes_nothing_when_the_commits_after_the_cut_are_not_all_there(tmp_path: Path):
    """Commit 11 is gone (deleted by hand, say): the table reads at 14 through checkpoint 14, but the only
    checkpoint old enough to cut at is 10, and 10 no longer leads to 14: nothing is deleted."""
    root = tmp_path / "t"
    t = _build(root)
    t.checkpoint(14)
    log_dir = root / "_delta_log"
    (log_dir / commit_name(11)).unlink()
    old = time.time() - 10 * 86_400
    for f in log_dir.iterdir():
        if f.is_file() and f.name[:20].isdigit() and int(f.name[:20]) <= 12:
            os.utime(f, (old, old))
    before = sorted(p.name for p in log_dir.iterdir())
    assert _state(root)[0] == 14

    assert DeltaTable(str(root)).cleanup_expired_logs(retention_ms=0, now_ms=int(time.time() * 1000)) == []
    assert sorted(p.name for p in log_dir.iterdir()) == before


def test_a_golden_delta_spark_v2_table_with_a_foreign_sidecar_reads_as_the_intact_table(tmp_path: Path):
    if not GOLDEN_V2.exists():
        pytest.fail(f"golden table missing: {GOLDEN_V2} (../shared must be beside the repository)")
    root = tmp_path / "t"
    shutil.copytree(GOLDEN_V2 / "delta", root)
    for p in root.rglob("*"):
        p.chmod(0o755 if p.is_dir() else 0o644)
    intact = _state(root)
    sidecars = sorted((root / "_delta_log" / "_sidecars").glob("*.parquet"))
    assert sidecars
    for sidecar in sidecars:
        pq.write_table(pa.table({"unrelated": ["x"]}), sidecar)
    # Every V2 checkpoint is now unusable; the JSON commits hold the same state.
    assert _state(root) == intact
