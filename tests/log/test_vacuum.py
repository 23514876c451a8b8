"""VACUUM: what it must never delete, what it must delete, and agreement with deltalake (delta-rs).

File ages are set with os.utime and the clock is injected with ``now_ms``, so no test sleeps.
"""

from __future__ import annotations

import json
import os
import shutil
import time
import urllib.parse
import uuid
from pathlib import Path
from typing import Any

import deltalake
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from delta_kernel_rust_sharing_wrapper import PythonInterface, ScanBuilder, Table

from airflow_provider_delta.log import (
    AddFile,
    DataFileNotFoundError,
    DeltaTable,
    RemoveFile,
    UnsupportedFeatureError,
    add_file_from_parquet,
)
from airflow_provider_delta.log.actions.actions import FileFields
from airflow_provider_delta.log.maintenance.vacuum import (
    VACUUM_FIELDS,
    RetentionTooShortError,
    VacuumReport,
    is_hidden,
    vacuum,
)
from airflow_provider_delta.log.snapshot.checkpoint import checkpoint_table
from airflow_provider_delta.log.snapshot.snapshot import load_snapshot, update_snapshot

GOLDEN = Path(os.environ["DELTA_SHARED_DIR"]) / "golden"
SCHEMA = pa.schema([("id", pa.int64()), ("p", pa.string())])
HOUR = 3_600_000
DAY = 24 * HOUR
NOW = 1_780_000_000_000  # injected clock (2026-05-28)


def write(
    root: Path, rel: str, ids: list[int] | None = None, *, age_ms: int = 30 * DAY, now: int = NOW
) -> str:
    """Write a Parquet file (or a few bytes for non-Parquet names) aged ``age_ms`` before ``now``."""
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    if rel.endswith(".parquet"):
        pq.write_table(pa.table({"id": ids or [1]}), path)
    else:
        path.write_bytes(b"x" * 7)
    age(path, age_ms, now)
    return rel


def age(path: Path, age_ms: int, now: int = NOW) -> None:
    t = (now - age_ms) / 1000
    os.utime(path, (t, t))


def existing(root: Path) -> set[str]:
    return {p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file()}


def data_files(root: Path) -> set[str]:
    """What exists outside the log (vacuum's own START/END commits are checked elsewhere)."""
    return {p for p in existing(root) if not p.startswith("_delta_log/")}


def add(t: DeltaTable, rel: str, p: str = "a") -> AddFile:
    return add_file_from_parquet(t, rel, {"p": p})


@pytest.fixture
def root(tmp_path: Path) -> Path:
    return tmp_path / "table"


def build_mixed(
    root: Path, configuration: dict[str, str] | None = None, now: int = NOW
) -> tuple[DeltaTable, set[str]]:
    """A table holding every kind of file vacuum must tell apart; returns it and what vacuum must delete."""
    t = DeltaTable.create(str(root), SCHEMA, partition_by=["p"], configuration=configuration)
    live = write(root, "p=a/live.parquet", [1], now=now)
    gone_old = write(root, "p=a/removed-long-ago.parquet", [2], now=now)
    gone_new = write(root, "p=a/removed-yesterday.parquet", [3], now=now)
    t.transaction().add_files([add(t, live), add(t, gone_old), add(t, gone_new)]).commit()
    t.transaction().remove_files(
        [
            RemoveFile(gone_old, now - 8 * DAY, partition_values={"p": "a"}),
            RemoveFile(gone_new, now - 1 * DAY, partition_values={"p": "a"}),
        ]
    ).commit("DELETE")
    # Files the log references outside the root: absolutely, and through "..".
    outside = root.parent / "outside"
    write(outside.parent, "outside/abs.parquet", [4], now=now)
    write(outside.parent, "outside/rel.parquet", [5], now=now)
    t.transaction().add_files(
        [
            AddFile((outside / "abs.parquet").as_uri(), 10, {"p": "b"}),
            AddFile("../outside/rel.parquet", 10, {"p": "b"}),
        ]
    ).commit()
    for rel in (
        ".hidden/x.parquet",
        "_tmp/y.parquet",
        "p=a/.live.parquet.crc",
        "_SUCCESS",
        "metadata/v1.json",
    ):
        write(root, rel, now=now)
    write(root, "_delta_log/stray.parquet", now=now)
    for f in (root / "_delta_log").iterdir():
        age(f, 400 * DAY, now)
    write(root, "p=a/orphan-recent.parquet", age_ms=1 * HOUR, now=now)
    write(root, "_change_data/cdc-recent.parquet", age_ms=1 * DAY, now=now)
    doomed = {
        gone_old,
        write(root, "p=a/orphan-old.parquet", now=now),
        write(root, "p=b/nested/deeper/orphan.parquet", now=now),
        write(root, "top-level-orphan.txt", age_ms=8 * DAY, now=now),
        write(root, "_change_data/cdc-old.parquet", age_ms=9 * DAY, now=now),
        write(root, "_delta_index/bloom-old.bin", age_ms=9 * DAY, now=now),
    }
    return t, doomed


def test_vacuum_deletes_exactly_orphans_and_expired_tombstones(root: Path):
    t, doomed = build_mixed(root)
    before = existing(root)
    outside_before = existing(root.parent / "outside")

    dry = vacuum(t, now_ms=NOW)
    assert isinstance(dry, VacuumReport) and dry.dry_run and dry.retention_hours == 168
    assert set(dry.files) == doomed and dry.files == sorted(dry.files)
    assert dry.bytes == sum((root / f).stat().st_size for f in doomed)
    assert existing(root) == before  # a dry run deletes nothing

    real = vacuum(t, dry_run=False, now_ms=NOW)
    assert real.files == dry.files and real.bytes == dry.bytes and not real.dry_run
    assert data_files(root) == {p for p in before if not p.startswith("_delta_log/")} - doomed
    # VACUUM START and END, each with its version checksum.
    assert existing(root) - before == {
        f"_delta_log/{v:020d}.{ext}" for v in (t.version() - 1, t.version()) for ext in ("json", "crc")
    }
    assert existing(root.parent / "outside") == outside_before
    assert vacuum(t, now_ms=NOW).files == []  # nothing left to do


def test_vacuum_keeps_what_the_snapshot_and_the_window_need(root: Path):
    t, _ = build_mixed(root)
    vacuum(t, dry_run=False, now_ms=NOW)
    left = existing(root)
    for kept in (
        "p=a/live.parquet",
        "p=a/removed-yesterday.parquet",  # tombstone still within the 7-day window
        "p=a/orphan-recent.parquet",  # untracked but modified within the window
        "_change_data/cdc-recent.parquet",
        ".hidden/x.parquet",
        "_tmp/y.parquet",
        "p=a/.live.parquet.crc",
        "_SUCCESS",
        "metadata/v1.json",
        "_delta_log/stray.parquet",
        "_delta_log/00000000000000000000.json",
    ):
        assert kept in left, kept
    assert t.snapshot().num_files == 3
    assert deltalake.DeltaTable(str(root)).version() == t.version()


def test_a_longer_retention_keeps_more(root: Path):
    t, doomed = build_mixed(root)
    report = vacuum(t, retention_hours=24 * 10, now_ms=NOW)
    # removed-long-ago (8 days) and the 8/9-day-old files are inside a 10-day window.
    assert set(report.files) == {"p=a/orphan-old.parquet", "p=b/nested/deeper/orphan.parquet"}
    assert report.retention_hours == 240


def test_partition_columns_starting_with_underscore_are_not_hidden(root: Path):
    t = DeltaTable.create(
        str(root), pa.schema([("id", pa.int64()), ("_p", pa.string())]), partition_by=["_p"]
    )
    live = write(root, "_p=1/live.parquet")
    t.transaction().add_files([add_file_from_parquet(t, live, {"_p": "1"})]).commit()
    orphan = write(root, "_p=1/orphan.parquet")
    write(root, "_q=1/not-a-partition.parquet")
    write(root, "_p/no-equals.parquet")
    assert vacuum(t, now_ms=NOW).files == [orphan]


def test_hidden_rule_is_delta_sparks_per_component():
    cols = ("p", "_p")
    assert is_hidden("_delta_log", cols) and is_hidden(".x", cols) and is_hidden("_SUCCESS", cols)
    assert is_hidden("metadata", cols) and is_hidden("_q=1", cols)
    assert not is_hidden("_p=1", cols) and not is_hidden("p=1", cols) and not is_hidden("part.parquet", cols)
    assert not is_hidden("_change_data", cols) and not is_hidden("_delta_index", cols)


# -- deletion vectors ---------------------------------------------------------------------------------------
def copy_golden(name: str, dest: Path) -> Path:
    shutil.copytree(GOLDEN / name / "delta", dest)
    for p in dest.rglob("*"):
        if p.is_file():
            p.chmod(0o644)
            age(p, 400 * DAY, now=int(time.time() * 1000))
    return dest


def rows(root: Path) -> int:
    """Rows the kernel (delta-kernel-rs) reads, deletion vectors applied; deltalake refuses DV tables."""
    url = root.resolve().as_uri() + "/"
    engine = PythonInterface(url)
    snap = Table(url).snapshot(engine)
    return ScanBuilder(snap).build().execute(engine).read_all().num_rows


@pytest.mark.parametrize("name", ["delta-golden/dv-with-columnmapping", "dat/deletion_vectors"])
def test_live_deletion_vector_files_are_kept(tmp_path: Path, name: str):
    root = copy_golden(name, tmp_path / "t")
    n_rows = rows(root)
    t = DeltaTable(str(root))
    dvs = {f for f in existing(root) if f.endswith(".bin")}
    live = {
        "deletion_vector_" + _uuid_of(dv["pathOrInlineDv"]) + ".bin"
        for dv in t.snapshot().files.column("deletionVector").to_pylist()
        if dv is not None
    }
    assert live and live <= dvs

    report = vacuum(t, retention_hours=0, dry_run=False, enforce_retention_duration=False)
    assert not live & set(report.files)
    assert {f for f in existing(root) if f.endswith(".bin")} == live
    assert rows(root) == n_rows  # deltalake still applies every live deletion vector
    assert t.snapshot().num_files > 0


def _uuid_of(z85: str) -> str:
    """Reference Z85 decoder, written independently of the module's vectorised one."""
    alphabet = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#"
    out = b""
    for i in range(0, 20, 5):
        value = 0
        for ch in z85[-20:][i : i + 5]:
            value = value * 85 + alphabet.index(ch)
        out += value.to_bytes(4, "big")
    h = out.hex()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def test_dv_files_with_a_prefix_folder_and_absolute_dv_paths_are_kept(root: Path):
    t = DeltaTable.create(
        str(root), SCHEMA, partition_by=["p"], configuration={"delta.enableDeletionVectors": "true"}
    )
    a, b = write(root, "p=a/one.parquet", [1, 2]), write(root, "p=a/two.parquet", [3, 4])
    prefixed = "ab/deletion_vector_8aebe228-b96c-4831-b0b6-22882eb9a3d3.bin"
    absolute = "dv folder/deletion_vector_0c8a2f63-0000-4000-8000-000000000001.bin"
    write(root, prefixed)
    write(root, absolute)
    orphan_dv = write(root, "deletion_vector_11111111-2222-4333-8444-555555555555.bin")
    dv_u = {
        "storageType": "u",
        "pathOrInlineDv": "abITfmIXOK!>U^L:if1E+a",
        "offset": 1,
        "sizeInBytes": 36,
        "cardinality": 1,
    }
    abs_uri = urllib.parse.quote((root / absolute).as_posix())
    dv_p = {
        "storageType": "p",
        "pathOrInlineDv": "file://" + abs_uri,
        "offset": 1,
        "sizeInBytes": 36,
        "cardinality": 1,
    }
    stats = '{"numRecords":2,"tightBounds":false}'  # a file with a vector must say its row count
    t.transaction().add_files(
        [
            AddFile(a, (root / a).stat().st_size, {"p": "a"}, stats=stats, deletion_vector=dv_u),
            AddFile(b, (root / b).stat().st_size, {"p": "a"}, stats=stats, deletion_vector=dv_p),
        ]
    ).commit()
    assert vacuum(t, now_ms=NOW).files == [orphan_dv]


# -- agreement with deltalake -------------------------------------------------------------------------------
def delta_rs_vacuum(root: Path, hours: int) -> set[str]:
    listed = deltalake.DeltaTable(str(root)).vacuum(
        retention_hours=hours, dry_run=True, enforce_retention_duration=False, full=True
    )
    return {urllib.parse.unquote(p) for p in listed}


def test_same_list_as_deltalake_on_a_table_deltalake_wrote(tmp_path: Path):
    root = tmp_path / "t"
    now = int(time.time() * 1000)
    for i in range(4):
        data = pa.table({"id": [i, i + 10], "p": ["x y", "50%"]})
        deltalake.write_deltalake(
            str(root), data, mode="overwrite" if i == 2 else "append", partition_by=["p"]
        )
    for f in existing(root):
        if not f.startswith("_delta_log"):
            age(root / f, 10 * DAY, now)
    write(root, "p=x y/orphan.parquet", age_ms=5 * DAY, now=now)
    write(root, "p=x y/orphan-new.parquet", age_ms=1 * HOUR, now=now)
    write(root, "orphan-top.parquet", age_ms=3 * DAY, now=now)
    write(root, "_change_data/old.parquet", age_ms=3 * DAY, now=now)
    ours = set(vacuum(DeltaTable(str(root)), retention_hours=2, enforce_retention_duration=False).files)
    assert "p=x y/orphan.parquet" in ours and "p=x y/orphan-new.parquet" not in ours
    assert ours == delta_rs_vacuum(root, 2)


def test_same_list_as_deltalake_with_expired_tombstones(root: Path):
    now = int(time.time() * 1000)  # deltalake reads the real clock
    t, doomed = build_mixed(root, now=now)
    ours = set(vacuum(t, retention_hours=48, enforce_retention_duration=False).files)
    # A 2-day window also expires the tombstone of 8 days ago and the 8- and 9-day-old files.
    assert ours == doomed
    # delta-rs tests only the first path component for hiddenness (Delta Spark tests each one) and does
    # not hide UniForm's metadata/ folder: those two files are the only difference.
    assert delta_rs_vacuum(root, 48) == ours | {"metadata/v1.json", "p=a/.live.parquet.crc"}


# -- retention ------------------------------------------------------------------------------------------
def test_a_retention_below_the_tables_is_refused_and_deletes_nothing(root: Path):
    t, _ = build_mixed(root)
    before = existing(root)
    for dry_run in (True, False):
        with pytest.raises(RetentionTooShortError) as err:
            vacuum(t, retention_hours=24, dry_run=dry_run, now_ms=NOW)
        assert "168 hours" in str(err.value) and "enforce_retention_duration=False" in str(err.value)
    assert existing(root) == before
    report = vacuum(t, retention_hours=24, dry_run=False, enforce_retention_duration=False, now_ms=NOW)
    # Boundaries, as Delta Spark: a tombstone deleted exactly at the cut-off is kept (deletionTimestamp >=
    # cut-off), and so is a file modified exactly at it (only modificationTime < cut-off is deleted).
    assert "p=a/removed-yesterday.parquet" not in report.files
    assert "_change_data/cdc-recent.parquet" not in report.files
    assert "p=a/orphan-recent.parquet" not in report.files
    assert set(report.files) == {
        "p=a/removed-long-ago.parquet",
        "p=a/orphan-old.parquet",
        "p=b/nested/deeper/orphan.parquet",
        "top-level-orphan.txt",
        "_change_data/cdc-old.parquet",
        "_delta_index/bloom-old.bin",
    }
    later = vacuum(t, retention_hours=24, enforce_retention_duration=False, now_ms=NOW + 1)
    assert later.files == ["_change_data/cdc-recent.parquet", "p=a/removed-yesterday.parquet"]
    assert data_files(root) == {p for p in before if not p.startswith("_delta_log/")} - set(report.files)


def test_the_tables_own_retention_property_is_honoured(root: Path):
    t, _ = build_mixed(root, {"delta.deletedFileRetentionDuration": "interval 2 days"})
    report = vacuum(t, retention_hours=48, now_ms=NOW)  # not below the property: allowed
    assert report.retention_hours == 48 and vacuum(t, now_ms=NOW).files == report.files
    with pytest.raises(RetentionTooShortError):
        vacuum(t, retention_hours=47, now_ms=NOW)
    with pytest.raises(ValueError):
        vacuum(t, retention_hours=-1, enforce_retention_duration=False, now_ms=NOW)


def test_a_table_with_vacuum_protocol_check_is_vacuumed(root: Path):
    t, doomed = build_mixed(root, {"delta.feature.vacuumProtocolCheck": "supported"})
    protocol = t.snapshot().protocol
    assert "vacuumProtocolCheck" in (protocol.reader_features or ()) + (protocol.writer_features or ())
    assert set(vacuum(t, dry_run=False, now_ms=NOW).files) == doomed


def test_a_table_we_cannot_write_is_not_vacuumed(root: Path):
    t, _ = build_mixed(root)
    protocol = {"minReaderVersion": 1, "minWriterVersion": 7, "writerFeatures": ["icebergCompatV9"]}
    (root / "_delta_log" / f"{t.version() + 1:020d}.json").write_text(
        json.dumps({"protocol": protocol}) + "\n"
    )
    before = existing(root)
    with pytest.raises(UnsupportedFeatureError):
        vacuum(t, dry_run=False, now_ms=NOW)
    assert existing(root) == before


# -- interruption and progress ------------------------------------------------------------------------------
class FailingFS:
    """Wraps a filesystem; ``rm_file`` fails once ``budget`` files were deleted."""

    def __init__(self, inner: Any, budget: int) -> None:
        self.inner, self.budget, self.deleted = inner, budget, 0

    def rm_file(self, path: str) -> None:
        if self.deleted >= self.budget:
            raise PermissionError(f"simulated failure deleting {path}")
        self.inner.rm_file(path)
        self.deleted += 1

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def test_an_interrupted_vacuum_leaves_a_readable_table_and_a_rerun_finishes(root: Path):
    t = DeltaTable.create(str(root), SCHEMA, partition_by=["p"])
    live = [write(root, f"p=a/live-{i}.parquet", [i]) for i in range(5)]
    t.transaction().add_files([add(t, f) for f in live]).commit()
    orphans = {write(root, f"p=a/orphan-{i}.parquet") for i in range(40)}
    expected_rows = deltalake.DeltaTable(str(root)).to_pyarrow_table().num_rows

    real_fs = t.store.fs
    t.store.fs = FailingFS(real_fs, budget=15)
    with pytest.raises(PermissionError):
        vacuum(t, dry_run=False, now_ms=NOW, max_workers=1)
    left = existing(root)
    assert len(orphans & left) == 25 and set(f"{f}" for f in live) <= left
    assert t.snapshot().num_files == 5
    assert deltalake.DeltaTable(str(root)).to_pyarrow_table().num_rows == expected_rows

    t.store.fs = real_fs
    seen: list[tuple[int, int]] = []
    report = vacuum(t, dry_run=False, now_ms=NOW, progress=lambda done, total: seen.append((done, total)))
    assert set(report.files) == orphans & left and not orphans & existing(root)
    assert seen[-1] == (25, 25) and [d for d, _ in seen] == sorted(d for d, _ in seen)
    assert deltalake.DeltaTable(str(root)).to_pyarrow_table().num_rows == expected_rows


# -- recording in the log ---------------------------------------------------------------------------------
def test_vacuum_start_and_end_commits_when_logging_is_enabled(root: Path):
    t, doomed = build_mixed(root, {"delta.vacuum.logging.enabled": "true"})
    v = t.version()
    vacuum(t, now_ms=NOW)  # a dry run records nothing
    assert t.version() == v
    vacuum(t, retention_hours=200, dry_run=False, now_ms=NOW)
    assert t.version() == v + 2
    end, start = t.history(limit=2)
    assert (start.operation, end.operation) == ("VACUUM START", "VACUUM END")
    assert start.commit_info["operationParameters"] == {
        "retentionCheckEnabled": "true",
        "defaultRetentionMillis": str(7 * DAY),
        "specifiedRetentionMillis": str(200 * HOUR),
    }
    assert end.commit_info["operationParameters"] == {"status": "COMPLETED"}
    theirs = [h["operation"] for h in deltalake.DeltaTable(str(root)).history(2)]
    assert theirs == ["VACUUM END", "VACUUM START"]
    assert t.snapshot().num_files == 3


def test_logging_is_on_by_default_and_off_with_the_property(root: Path):
    """Delta Spark logs VACUUM START/END unless vacuum.logging.enabled=false (on stores with safe commits)."""
    t, _ = build_mixed(root)
    v = t.version()
    assert vacuum(t, dry_run=False, now_ms=NOW).files
    assert [h.operation for h in t.history(limit=2)] == ["VACUUM END", "VACUUM START"]
    assert t.version() == v + 2
    off, _ = build_mixed(root.parent / "off", {"delta.vacuum.logging.enabled": "false"})
    v = off.version()
    assert vacuum(off, dry_run=False, now_ms=NOW).files
    assert off.version() == v


def test_vacuum_records_operation_metrics(root: Path):
    t, doomed = build_mixed(root, {"delta.vacuum.logging.enabled": "true"})
    size = sum((root / f).stat().st_size for f in doomed)
    vacuum(t, dry_run=False, now_ms=NOW)
    end, start = t.history(limit=2)
    assert start.commit_info["operationMetrics"] == {
        "numFilesToDelete": str(len(doomed)),
        "sizeOfDataToDelete": str(size),
    }
    assert end.commit_info["operationMetrics"]["numDeletedFiles"] == str(len(doomed))


def test_vacuum_on_another_fsspec_backend():
    uri = f"memory://vacuum-{uuid.uuid4().hex}"
    t = DeltaTable.create(uri, SCHEMA)
    fs, base = t.store.fs, t.store.root
    try:
        for name in ("live.parquet", "orphan.parquet", "_x/hidden.parquet", "a/b/orphan.parquet"):
            with fs.open(f"{base}/{name}", "wb") as fh:
                pq.write_table(pa.table({"id": [1]}), fh)
        t.transaction().add_files([add_file_from_parquet(t, "live.parquet")]).commit()
        later = int(time.time() * 1000) + 10 * DAY
        assert vacuum(t, dry_run=False, now_ms=later).files == ["a/b/orphan.parquet", "orphan.parquet"]
        left = {p[len(base) + 1 :] for p in fs.find(base) if "/_delta_log/" not in p}
        assert left == {"live.parquet", "_x/hidden.parquet"}
    finally:
        fs.rm(base, recursive=True)


# -- S3 ---------------------------------------------------------------------------------------------------
@pytest.mark.s3
def test_vacuum_on_s3_deletes_the_right_objects(s3_server: Any, s3_bucket: str):
    fs = s3_server.filesystem()
    uri = f"s3://{s3_bucket}/t"
    t = DeltaTable.create(uri, SCHEMA, partition_by=["p"], storage_options=s3_server.storage_options)

    def put(rel: str) -> str:
        with fs.open(f"{s3_bucket}/t/{rel}", "wb") as fh:
            pq.write_table(pa.table({"id": [1]}), fh)
        return rel

    live, removed = put("p=a/x1.parquet"), put("p=a/removed.parquet")
    t.transaction().add_files([add(t, live), add(t, removed)]).commit()
    t.transaction().remove_files([RemoveFile(removed, 1, partition_values={"p": "a"})]).commit("DELETE")
    # "x[1]" as a glob would match the live "x1": the delete must treat keys literally.
    orphans = {put("p=a/x[1].parquet"), put("p=a/x*.parquet"), put("orphan.parquet"), removed}
    put("_tmp/hidden.parquet")
    fs.pipe(f"{s3_bucket}/sibling/outside.parquet", b"x")
    log_before = set(fs.find(f"{s3_bucket}/t/_delta_log"))
    later = int(time.time() * 1000) + 10 * DAY  # every object is 10 days old by then

    assert set(vacuum(t, now_ms=later).files) == orphans
    s3_server.requests.clear()
    report = vacuum(t, dry_run=False, now_ms=later)
    assert set(report.files) == orphans
    deletes = [r for r in s3_server.requests.requests if r.method == "POST" and "delete" in r.params]
    assert len(deletes) == 1  # one DeleteObjects request for all four keys
    fs.invalidate_cache()
    left = {k.split("/t/", 1)[1] for k in fs.find(f"{s3_bucket}/t") if "/_delta_log/" not in k}
    assert left == {live, "_tmp/hidden.parquet"}
    log_after = set(fs.find(f"{s3_bucket}/t/_delta_log"))
    # VACUUM START and END, each with its version checksum.
    assert log_before <= log_after and len(log_after - log_before) == 4
    assert fs.exists(f"{s3_bucket}/sibling/outside.parquet")
    assert t.snapshot().file_paths() == [live]


def test_directories_left_empty_are_removed_as_delta_spark_does(root: Path):
    """Delta Spark's VACUUM deletes the directories it empties; hidden ones and the root stay."""
    t = DeltaTable.create(str(root), SCHEMA, partition_by=["p"])
    gone = write(root, "p=a/nested/gone.parquet", [1], now=NOW)
    live = write(root, "p=b/live.parquet", [2], now=NOW)
    t.transaction().add_files([add(t, gone, "a"), add(t, live, "b")]).commit()
    t.transaction().remove_files([RemoveFile(gone, NOW - 8 * DAY, partition_values={"p": "a"})]).commit()
    (root / "empty-before").mkdir()
    (root / "_hidden_empty").mkdir()
    assert vacuum(t, dry_run=False, now_ms=NOW + 8 * DAY).files == [gone]
    assert not (root / "p=a").exists() and not (root / "empty-before").exists()
    assert (root / "p=b" / "live.parquet").exists() and (root / "_hidden_empty").is_dir()
    assert t.snapshot().file_paths() == [live]


# -- what VACUUM reads: a projected replay ------------------------------------------------------------------
def _z85_id(u: uuid.UUID) -> str:
    """Reference Z85 encoder of a UUID, the inverse of ``_uuid_of``."""
    alphabet = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#"
    out = ""
    for i in range(0, 16, 4):
        value = int.from_bytes(u.bytes[i : i + 4], "big")
        out += "".join(alphabet[value // 85**k % 85] for k in range(4, -1, -1))
    return out


DV_STATS = '{"numRecords":2,"tightBounds":false}'


def _dv(root: Path, *, prefix: str = "", now: int) -> dict[str, Any]:
    """A deletion vector stored in its own file under the root (vacuum only needs the file to exist)."""
    u = uuid.uuid4()
    z85 = _z85_id(u)
    assert _uuid_of(z85) == str(u)
    write(root, f"{prefix + '/' if prefix else ''}deletion_vector_{u}.bin", now=now)
    return {
        "storageType": "u",
        "pathOrInlineDv": prefix + z85,
        "offset": 1,
        "sizeInBytes": 7,
        "cardinality": 1,
    }


def _referenced(snap: Any, cutoff: int) -> set[str]:
    """What the full replay says VACUUM must keep: live files, tombstones deleted at or after ``cutoff``, and
    the deletion-vector files of both (the rule of Delta Spark's VACUUM, written out row by row)."""
    tombstones = [r for r in snap.tombstones.to_pylist() if (r["deletionTimestamp"] or 0) >= cutoff]
    keep = set()
    for row in snap.files.to_pylist() + tombstones:
        keep.add(row["path"])
        dv = row["deletionVector"]
        if dv and dv["storageType"] == "u":
            prefix, z85 = dv["pathOrInlineDv"][:-20], dv["pathOrInlineDv"][-20:]
            keep.add(f"{prefix + '/' if prefix else ''}deletion_vector_{_uuid_of(z85)}.bin")
    return keep


def build_dv_checkpoint_table(root: Path, kind: str, now: int) -> DeltaTable:
    """Deletion vectors added, replaced and removed before and after a classic, multi-part or V2 (sidecars)
    checkpoint, tombstones 1 and 3 days old, a file that no commit after its add touches, orphans old and
    new: 3 deletion-vector files VACUUM (48 hours) deletes and 6 it keeps."""
    config = {"delta.enableDeletionVectors": "true"}
    if kind == "v2":
        config |= {"delta.checkpointPolicy": "v2", "delta.feature.v2Checkpoint": "supported"}
    t = DeltaTable.create(str(root), SCHEMA, partition_by=["p"], configuration=config)

    def with_dv(f: AddFile, prefix: str = "") -> AddFile:
        dv = _dv(root, prefix=prefix, now=now)  # a file with a vector must give its row count
        return AddFile(f.path, f.size, {"p": "a"}, stats=DV_STATS, deletion_vector=dv)

    def removed(f: AddFile, age_ms: int) -> RemoveFile:
        return RemoveFile(
            f.path, now - age_ms, partition_values={"p": "a"}, deletion_vector=f.deletion_vector
        )

    files = {n: AddFile(write(root, f"p=a/{n}.parquet", now=now), 10, {"p": "a"}) for n in "ABCDEFGH"}
    files |= {n: with_dv(files[n], prefix="q" if n == "B" else "") for n in "ABDF"}
    t.transaction().add_files([files[n] for n in "ABCDEFH"]).commit()
    t.transaction().remove_files([removed(files["C"], 3 * DAY), removed(files["D"], 1 * DAY)]).commit()
    # A new deletion vector for a file: its old (path, DV) is removed, the same path added with the new one.
    for n, age_ms in (("A", 3 * DAY), ("B", 1 * DAY)):
        old, files[n] = files[n], with_dv(files[n])
        t.transaction().remove_files([removed(old, age_ms)]).add_files([files[n]]).commit()
    t.checkpoint(parts=3 if kind == "multi-part" else 2 if kind == "v2" else None)
    # After the checkpoint, commits touch checkpointed keys (replay drops those from the checkpoint).
    old, files["F"], files["G"] = files["F"], with_dv(files["F"]), with_dv(files["G"], prefix="xy")
    t.transaction().remove_files([removed(old, 3 * DAY), removed(files["E"], 3 * DAY)]).add_files(
        [files["F"], files["G"]]
    ).commit()
    write(root, "p=a/orphan.parquet", now=now)
    write(root, f"deletion_vector_{uuid.uuid4()}.bin", now=now)
    write(root, "p=a/orphan-new.parquet", age_ms=1 * HOUR, now=now)
    return t


@pytest.mark.parametrize("kind", ["classic", "multi-part", "v2"])
def test_vacuum_keeps_what_the_full_replay_references_after_a_checkpoint(tmp_path: Path, kind: str):
    """Deletion vectors added, replaced and removed before and after a classic, multi-part or V2 (sidecars)
    checkpoint: VACUUM, which replays only paths, DVs and deletion timestamps, keeps exactly what the full
    replay (every field, every tombstone: what VACUUM read before) references."""
    root = tmp_path / "t"
    now = int(time.time() * 1000)  # the checkpoint keeps tombstones within the table's retention of now
    t = build_dv_checkpoint_table(root, kind, now)

    log_dir = root / "_delta_log"
    cp = {
        "classic": "*.checkpoint.parquet",
        "multi-part": "*.checkpoint.0000000003.0000000003.parquet",
        "v2": "_sidecars/*.parquet",
    }[kind]
    assert len(list(log_dir.glob(cp))) >= 1
    cutoff = now - 48 * HOUR
    full = load_snapshot(t.store, now_ms=0)  # every field, every tombstone
    assert full.segment.checkpoint is not None and full.segment.checkpoint.kind == kind
    doomed = {f for f in data_files(root) if os.stat(root / f).st_mtime * 1000 < cutoff} - _referenced(
        full, cutoff
    )
    kept_dvs = {f for f in data_files(root) - doomed if f.endswith(".bin")}
    assert len([f for f in doomed if f.endswith(".bin")]) == 3 and len(kept_dvs) == 6  # not a trivial table

    before = data_files(root)
    report = vacuum(t, retention_hours=48, enforce_retention_duration=False, dry_run=False, now_ms=now)
    assert set(report.files) == doomed
    assert data_files(root) == before - doomed
    assert {f for f in data_files(root) if f.endswith(".bin")} == kept_dvs


def test_a_projected_snapshot_stays_projected_and_is_never_checkpointed(root: Path):
    t, _ = build_mixed(root)
    snap = load_snapshot(t.store, fields=VACUUM_FIELDS, keep_expired_tombstones=True)
    more = write(root, "p=b/more.parquet", [6])
    t.transaction().add_files([add(t, more, "b")]).commit()
    later = update_snapshot(snap)  # the new commit only, with the same fields and tombstones
    full = load_snapshot(t.store, now_ms=0)
    assert later.version == full.version and later.keep_expired_tombstones
    assert later.files.column_names == ["path", "deletionVector"]
    assert sorted(later.file_paths()) == sorted(full.file_paths())
    assert sorted(later.tombstones.column("path").to_pylist()) == sorted(
        full.tombstones.column("path").to_pylist()
    )
    with pytest.raises(ValueError, match="every field"):
        checkpoint_table(later.state())  # it would lose the stats and partition values
    with pytest.raises(ValueError, match="no field"):
        FileFields(add=("stat",))
    assert FileFields(add=(), remove=()).add == ("path", "deletionVector")  # the reconciliation key stays


def test_a_version_whose_files_were_vacuumed_is_refused_by_name(tmp_path):
    """Reading a version VACUUM took files from names the version and the file (DataFileNotFoundError, also
    a FileNotFoundError), with or without deletion vectors; the latest version reads as before."""
    for dv in (False, True):
        root = str(tmp_path / f"dv-{dv}")
        table = DeltaTable.create(root, pa.schema([("a", pa.int64())]),
                                  configuration={"delta.enableDeletionVectors": str(dv).lower()})  # fmt: skip
        table.write(pa.table({"a": [1, 2, 3]}))
        table.delete("a = 2")  # a vector (dv) or a rewrite: either way version 1's state is gone at 3
        table.write(pa.table({"a": [9]}), mode="overwrite")
        later = int(time.time() * 1000) + DAY  # a clock a day on: every removed file is past the retention
        table.vacuum(retention_hours=0, dry_run=False, enforce_retention_duration=False, now_ms=later)
        for version in (1, 2):
            refused = f"version {version} of {root} cannot be read"
            with pytest.raises(DataFileNotFoundError, match=refused) as e:
                table.to_pyarrow_table(version=version)
            assert e.value.version == version and isinstance(e.value, FileNotFoundError)
            assert e.value.path in str(e.value) and "deletedFileRetentionDuration" in str(e.value)
        assert table.to_pyarrow_table().to_pylist() == [{"a": 9}]
