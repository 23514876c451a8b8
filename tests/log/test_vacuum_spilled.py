"""VACUUM of a big table: the keep set and the listing split into buckets spilled to disk (issue 35).

The bounded path runs only from ``vacuum.SPILL_FILES`` live files; here the threshold is lowered so that it
runs on small tables, with ``BUCKET_FILES`` small enough for many buckets, and every test compares it with
the in-memory path on the same table: a dry run of each names the same files, and the deleting run of the
spilled path deletes exactly those. File ages are set with os.utime and the clock is injected, as in
``test_vacuum``, whose table builders are reused.
"""

from __future__ import annotations

import time
import uuid
from pathlib import Path
from typing import Any

import deltalake
import numpy as np
import pyarrow as pa
import pytest
from test_vacuum import (
    DAY,
    HOUR,
    NOW,
    SCHEMA,
    _dv,
    add,
    age,
    build_dv_checkpoint_table,
    build_mixed,
    copy_golden,
    data_files,
    write,
)

from airflow_provider_delta.log import AddFile, DeltaTable, RemoveFile
from airflow_provider_delta.log.maintenance import vacuum as vacuum_module
from airflow_provider_delta.log.maintenance.vacuum import VACUUM_FIELDS, vacuum
from airflow_provider_delta.log.snapshot.replay import CheckpointReadError
from airflow_provider_delta.log.snapshot.snapshot import Snapshot, load_snapshot, update_snapshot


@pytest.fixture
def root(tmp_path: Path) -> Path:
    return tmp_path / "table"


@pytest.fixture
def spy(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts the spilled anti-joins, and how many buckets each used."""
    buckets: list[int] = []
    real = vacuum_module._spill

    def counting(folder: str, name: str, k: int, *args: Any) -> list[str]:
        if name == "listed":
            buckets.append(k)
        return real(folder, name, k, *args)

    monkeypatch.setattr(vacuum_module, "_spill", counting)
    return buckets


def in_memory(t: DeltaTable, monkeypatch: pytest.MonkeyPatch, **kwargs: Any) -> list[str]:
    monkeypatch.setattr(vacuum_module, "SPILL_FILES", 10**12)
    return vacuum(t, **kwargs).files


def spilled(t: DeltaTable, monkeypatch: pytest.MonkeyPatch, bucket_files: int = 2, **kwargs: Any) -> Any:
    monkeypatch.setattr(vacuum_module, "SPILL_FILES", 0)
    monkeypatch.setattr(vacuum_module, "BUCKET_FILES", bucket_files)
    return vacuum(t, **kwargs)


def both_agree(root: Path, t: DeltaTable, monkeypatch: pytest.MonkeyPatch, spy: list[int],
               **kwargs: Any) -> list[str]:  # fmt: skip
    """Dry runs of both paths name the same files; the spilled deleting run deletes exactly those."""
    expected = in_memory(t, monkeypatch, **kwargs)
    assert spilled(t, monkeypatch, **kwargs).files == expected
    before = data_files(root)
    report = spilled(t, monkeypatch, dry_run=False, **kwargs)
    assert report.files == expected and not report.dry_run
    assert data_files(root) == before - set(expected)
    assert spy and min(spy) >= 2  # the spilled path ran, with more than one bucket
    return expected


def test_the_mixed_table_the_same_on_both_paths(root: Path, monkeypatch, spy):
    """Orphans, hidden paths, files outside the root, recent files, _change_data: the same verdicts."""
    t, doomed = build_mixed(root)
    outside = data_files(root.parent / "outside")
    assert set(both_agree(root, t, monkeypatch, spy, now_ms=NOW)) == doomed
    assert data_files(root.parent / "outside") == outside
    kept = [
        "p=a/live.parquet",
        "p=a/removed-yesterday.parquet",
        "_tmp/y.parquet",
        "metadata/v1.json",
        "p=a/orphan-recent.parquet",
        "_change_data/cdc-recent.parquet",
        "_delta_log/stray.parquet",
    ]
    assert all((root / f).exists() for f in kept)


@pytest.mark.parametrize("hours", [20, 200])
def test_tombstones_within_and_after_the_retention(root: Path, monkeypatch, spy, hours: int):
    """Tombstones 1 and 8 days old: a 20-hour window lets both go, a 200-hour one keeps both."""
    t, _ = build_mixed(root)
    files = both_agree(root, t, monkeypatch, spy, now_ms=NOW, retention_hours=hours,
                       enforce_retention_duration=False)  # fmt: skip
    gone = {"p=a/removed-long-ago.parquet", "p=a/removed-yesterday.parquet"} & set(files)
    assert len(gone) == (2 if hours == 20 else 0)


@pytest.mark.parametrize("name", ["delta-golden/dv-with-columnmapping", "dat/deletion_vectors"])
def test_deletion_vector_files_of_golden_tables(tmp_path: Path, monkeypatch, spy, name: str):
    root = copy_golden(name, tmp_path / "t")
    t = DeltaTable(str(root))
    live_dvs = {f for f in data_files(root) if f.endswith(".bin")}
    orphans = {write(root, f"deletion_vector_{uuid.uuid4()}.bin", age_ms=DAY, now=int(time.time() * 1000)),
               write(root, "orphan.parquet", age_ms=DAY, now=int(time.time() * 1000))}  # fmt: skip
    files = both_agree(root, t, monkeypatch, spy, retention_hours=0, enforce_retention_duration=False)
    assert orphans <= set(files) and {f for f in data_files(root) if f.endswith(".bin")} <= live_dvs
    assert t.snapshot().num_files > 0 and all((root / p).exists() for p in t.snapshot().file_paths())


@pytest.mark.parametrize("kind", ["classic", "multi-part", "v2"])
def test_deletion_vectors_before_and_after_a_checkpoint(tmp_path: Path, monkeypatch, spy, kind: str):
    """The spilled path streams the checkpoint (classic, parts, V2 sidecars) and the commits after it, which
    replace checkpointed files' deletion vectors and remove some: the same files as the whole replay."""
    root = tmp_path / "t"
    now = int(time.time() * 1000)
    t = build_dv_checkpoint_table(root, kind, now)
    assert load_snapshot(t.store).segment.checkpoint.kind == kind

    files = both_agree(root, t, monkeypatch, spy, retention_hours=48, enforce_retention_duration=False,
                       now_ms=now)  # fmt: skip
    assert len([f for f in files if f.endswith(".bin")]) == 3 and "p=a/orphan.parquet" in files
    assert "p=a/orphan-new.parquet" not in files and "p=a/D.parquet" in data_files(root)


def test_url_encoded_partition_directories(tmp_path: Path, monkeypatch, spy):
    """deltalake escapes partition values in directory names and URL-encodes the paths in the log."""
    root = tmp_path / "t"
    now = int(time.time() * 1000)
    for i in range(3):
        values = ["x y", "50%", "a:b", "ü/é", "x y"]
        data = pa.table({"id": list(range(i * 5, i * 5 + 5)), "p": values})
        deltalake.write_deltalake(
            str(root), data, mode="overwrite" if i == 1 else "append", partition_by=["p"]
        )
    dirs = {f.split("/")[0] for f in data_files(root)}
    assert "p=50%25" in dirs and "p=a%3Ab" in dirs  # escaped on disk, and the log's paths encode the escapes
    for f in data_files(root):
        age(root / f, 10 * DAY, now)
    orphans = {write(root, f"{d}/orphan.parquet", age_ms=5 * DAY, now=now) for d in dirs}
    recent = write(root, "p=a%3Ab/orphan-new.parquet", age_ms=1 * HOUR, now=now)
    t = DeltaTable(str(root))
    files = both_agree(root, t, monkeypatch, spy, retention_hours=2, enforce_retention_duration=False)
    assert orphans <= set(files) and recent not in files
    assert all((root / p).exists() for p in t.snapshot().file_paths())
    assert deltalake.DeltaTable(str(root)).to_pyarrow_table().num_rows == 10


def test_a_table_without_a_checksum_is_measured_by_its_checkpoint(root: Path, monkeypatch, spy):
    """Without a version checksum the live files are estimated from the checkpoint's Parquet footers (no
    replay): the path is chosen by that count."""
    t = DeltaTable.create(str(root), SCHEMA, partition_by=["p"])
    t.transaction().add_files([add(t, write(root, f"p=a/f{i}.parquet", [i])) for i in range(6)]).commit()
    t.checkpoint()
    write(root, "p=a/orphan.parquet")
    for crc in (root / "_delta_log").glob("*.crc"):
        crc.unlink()
    snap = load_snapshot(t.store, fields=VACUUM_FIELDS, keep_expired_tombstones=True)
    rows = vacuum_module._expected_files(snap)
    assert snap.checksum is None and not snap.files_loaded and rows >= 8  # 6 adds, protocol, metaData
    monkeypatch.setattr(vacuum_module, "SPILL_FILES", rows + 1)
    assert vacuum(t, now_ms=NOW).files == ["p=a/orphan.parquet"] and not spy
    monkeypatch.setattr(vacuum_module, "SPILL_FILES", rows)
    assert vacuum(t, now_ms=NOW).files == ["p=a/orphan.parquet"] and spy


def test_a_broken_checkpoint_stream_falls_back_to_the_replay(root: Path, monkeypatch, spy):
    t, doomed = build_mixed(root)
    t.checkpoint()
    real = Snapshot.stream_file_actions

    broken: list[bool] = []

    def breaks_midway(self: Snapshot):
        pieces = real(self)
        yield next(pieces)
        broken.append(True)
        raise CheckpointReadError("simulated: the checkpoint turned out truncated")

    monkeypatch.setattr(Snapshot, "stream_file_actions", breaks_midway)
    # The checkpoint, written by the real clock, dropped both tombstones (NOW is months before it).
    named = both_agree(root, t, monkeypatch, spy, now_ms=NOW)
    assert set(named) == doomed | {"p=a/removed-yesterday.parquet"}
    assert broken == [True, True]  # both spilled runs hit the broken stream


def test_small_chunks_and_hash_slices_change_nothing(root: Path, monkeypatch, spy):
    t, doomed = build_mixed(root)
    for i in range(30):
        write(root, f"p=c/orphan-{i}.parquet")
    monkeypatch.setattr(vacuum_module, "_CHUNK_ROWS", 3)
    monkeypatch.setattr(vacuum_module, "_HASH_ROWS", 2)
    files = both_agree(root, t, monkeypatch, spy, now_ms=NOW)
    assert set(files) == doomed | {f"p=c/orphan-{i}.parquet" for i in range(30)}


# -- files committed while VACUUM runs ----------------------------------------------------------------------
def test_a_file_committed_between_the_listing_and_vacuum_start_is_kept(root: Path, monkeypatch, spy):
    t, doomed = build_mixed(root)
    racing = write(root, "p=a/racing.parquet")
    real_commit = vacuum_module._commit

    def writer_commits_first(table: Any, snap: Any, operation: str, *args: Any) -> None:
        if operation == "VACUUM START":  # VACUUM has listed the root and named racing.parquet
            DeltaTable(str(root)).transaction().add_files([add(t, racing)]).commit()
        real_commit(table, snap, operation, *args)

    assert racing in spilled(t, monkeypatch, now_ms=NOW).files  # the dry run names it
    monkeypatch.setattr(vacuum_module, "_commit", writer_commits_first)
    report = spilled(t, monkeypatch, now_ms=NOW, dry_run=False)
    assert set(report.files) == doomed and (root / racing).exists()
    assert racing in DeltaTable(str(root)).snapshot().file_paths()


def _commit_changes(t: DeltaTable, root: Path) -> str:
    """Commits after a snapshot: an add, an add with a deletion vector, a recent tombstone of a live file,
    and a file added then removed with a tombstone past the retention (returned)."""
    new, dv = write(root, "p=a/new.parquet"), write(root, "p=a/with-dv.parquet")
    t.transaction().add_files([add(t, new)]).commit()
    stats = '{"numRecords":2,"tightBounds":false}'
    t.transaction().add_files(
        [AddFile(dv, 10, {"p": "a"}, stats=stats, deletion_vector=_dv(root, now=NOW))]
    ).commit()
    t.transaction().remove_files(
        [RemoveFile("p=a/live.parquet", NOW - DAY, partition_values={"p": "a"})]
    ).commit()
    flip = write(root, "p=a/flip.parquet")
    t.transaction().add_files([add(t, flip)]).commit()
    t.transaction().remove_files([RemoveFile(flip, NOW - 9 * DAY, partition_values={"p": "a"})]).commit()
    return flip


@pytest.mark.parametrize("cleaned_up", [False, True])
def test_commits_made_while_vacuum_ran_protect_what_the_replay_protects(root: Path, cleaned_up: bool):
    """The spilled path's check of the commits made while it ran reads those commits alone (or, when log
    cleanup took them, streams the newer snapshot): of the files the older snapshot does not keep (the only
    ones VACUUM may be about to delete), it protects those the whole replay of the newer one protects."""
    t, _ = build_mixed(root, {"delta.enableDeletionVectors": "true"})
    before = load_snapshot(t.store, fields=VACUUM_FIELDS, keep_expired_tombstones=True)
    cutoff = NOW - 7 * DAY
    # From a snapshot of its own: VACUUM's stays without its file list, as ``before`` must here.
    same = load_snapshot(t.store, fields=VACUUM_FIELDS, keep_expired_tombstones=True)
    kept_before = set(vacuum_module._keep(same, cutoff).to_pylist())
    flip = _commit_changes(t, root)
    if cleaned_up:
        t.checkpoint()
        t.cleanup_expired_logs(retention_ms=0, now_ms=int(time.time() * 1000) + DAY)
        assert not (root / "_delta_log" / f"{before.version + 1:020d}.json").exists()
    after = update_snapshot(before)
    assert after.version > before.version and not after.files_loaded
    candidates = pa.array(sorted(data_files(root) - kept_before), pa.string())
    names = candidates.to_pylist()
    since = vacuum_module._referenced_since(before, after, candidates, cutoff).to_pylist()
    full = load_snapshot(t.store, fields=VACUUM_FIELDS, keep_expired_tombstones=True)
    replayed = vacuum_module._referenced_by_replay(before, full, candidates, cutoff).to_pylist()
    protected = {n for n, hit in zip(names, replayed, strict=True) if hit}
    assert {"p=a/new.parquet", "p=a/with-dv.parquet"} < protected and any(
        n.endswith(".bin") for n in protected
    )
    # A file added and removed again while VACUUM ran, its tombstone already past the retention: the commits
    # name it, and reading them alone keeps it too (the safe side); the streamed snapshot does not.
    extra = set() if cleaned_up else {flip}
    assert {n for n, hit in zip(names, since, strict=True) if hit} == protected | extra


# -- the bucket function ------------------------------------------------------------------------------------
def test_buckets_are_a_function_of_the_path_alone():
    rng = np.random.default_rng(7)
    names = [f"p={rng.integers(100)}/{uuid.UUID(int=int(rng.integers(2**62)))}.parquet" for _ in range(5000)]
    names += ["", "ü/é.parquet", "a", "a" * 300]
    arr = pa.array(names, pa.string())
    whole = vacuum_module._buckets(arr, 7)
    assert whole.min() >= 0 and whole.max() < 7
    sliced = vacuum_module._buckets(arr.slice(1000, 3000), 7)  # an array with an offset
    assert (sliced == whole[1000:4000]).all()
    shuffled = rng.permutation(len(names))
    again = vacuum_module._buckets(pa.array([names[i] for i in shuffled], pa.string()), 7)
    assert (again == whole[shuffled]).all()


def test_buckets_spread_paths_evenly():
    """Paths as writers name them (a partition folder, a UUID) and as sequences: no bucket much above the
    mean, so that no bucket holds a large share of a big table."""
    rng = np.random.default_rng(11)
    uuids = [f"region=r{rng.integers(100):03d}/{uuid.UUID(int=int(rng.integers(2**62)))}.parquet"
             for _ in range(40_000)]  # fmt: skip
    numbered = [f"date=2026-01-{d:02d}/part-{i:05d}-c000.snappy.parquet" for d in range(1, 21)
                for i in range(2000)]  # fmt: skip
    for names in (uuids, numbered):
        counts = np.bincount(vacuum_module._buckets(pa.array(names, pa.string()), 40), minlength=40)
        assert counts.max() <= 1.25 * len(names) / 40, counts
