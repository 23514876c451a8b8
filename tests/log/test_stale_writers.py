"""Transactions that outlive log cleanup: a commit is either visible to every reader or refused by name.

Metadata cleanup deletes commits below a checkpoint, so a transaction that read version 3 can find ``4.json``
free again after others committed 4-6, checkpointed 6 and cleaned up 0-5: put-if-absent succeeds, and no
reader would ever see the commit (they start from checkpoint 6). These tests build exactly that interleaving
on real storage (cleanup with zero retention and the clock a day ahead stands in for a transaction open
longer than ``delta.logRetentionDuration``) and check the outcome: the commit lands visibly on the latest
version, or a named error says why nothing was committed.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import deltalake
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from airflow_provider_delta.log import (
    AddFile,
    CorruptLogError,
    DeltaTable,
    MetadataChangedError,
    StaleSnapshotError,
    UnsupportedFeatureError,
    VersionNotFoundError,
    add_file_from_parquet,
)
from airflow_provider_delta.log.actions.actions import Protocol
from airflow_provider_delta.log.commits import atomic_commit
from airflow_provider_delta.log.files.segment import commit_name
from airflow_provider_delta.log.files.storage import LogStore, put_if_absent

SCHEMA = pa.schema([("id", pa.int64()), ("p", pa.string())])
DAY_MS = 86_400_000


def _file(table: DeltaTable, name: str, p: str = "a") -> AddFile:
    root = table.store.root
    os.makedirs(f"{root}/p={p}", exist_ok=True)
    pq.write_table(pa.table({"id": [int(time.time_ns() % 10**9)]}), f"{root}/p={p}/{name}.parquet")
    return add_file_from_parquet(table, f"p={p}/{name}.parquet", {"p": p})


def _advance_and_clean(table: DeltaTable, commits: int = 3, tag: str = "other") -> int:
    """Other writers commit ``commits`` versions, then a checkpoint of the latest and a log cleanup with zero
    retention delete every commit before it. Returns the checkpoint's version."""
    for i in range(commits):
        table.transaction().add_files([_file(table, f"{tag}-{i}")]).commit()
    version = table.checkpoint().version
    table.cleanup_expired_logs(retention_ms=0, now_ms=int(time.time() * 1000) + DAY_MS)
    return version


def _log_names(table: DeltaTable) -> set[str]:
    return {f.name for f in table.store.list_log(0)}


@pytest.fixture
def table(tmp_path: Path) -> DeltaTable:
    t = DeltaTable.create(str(tmp_path / "t"), SCHEMA, partition_by=["p"])
    for i in range(3):
        t.transaction().add_files([_file(t, f"base-{i}")]).commit()
    return t


def _readers_see(table: DeltaTable) -> list[str]:
    """Live files as a fresh handle and delta-rs read them (they must agree)."""
    ours = sorted(DeltaTable(table.uri).snapshot().file_paths())
    theirs = sorted(deltalake.DeltaTable(table.uri).file_uris())
    assert [os.path.relpath(p, table.store.root) for p in theirs] == ours
    return ours


def test_the_issue_case_lands_visibly_on_the_latest_version(table: DeltaTable):
    stale = DeltaTable(table.uri)
    txn = stale.transaction()  # reads version 3
    txn.add_files([_file(stale, "late")]).set_app_transaction("A", 1)
    checkpoint = _advance_and_clean(table)
    assert checkpoint == 6 and commit_name(3) not in _log_names(table)

    result = txn.commit()

    assert (result.version, result.already_committed) == (7, False)
    snap = DeltaTable(table.uri).snapshot()
    assert snap.version == 7 and snap.app_transactions == {"A": 1}
    assert "p=a/late.parquet" in _readers_see(table)
    # Nothing was written into the cleaned-up prefix.
    assert not any(table.store.log_file_exists(commit_name(v)) for v in range(6))


def test_a_stale_transaction_that_read_data_is_refused_and_writes_nothing(table: DeltaTable):
    stale = DeltaTable(table.uri)
    txn = stale.transaction()
    victim = AddFile.from_dict(txn.snapshot.files.slice(0, 1).to_pylist()[0])
    txn.remove_files([victim]).add_files([_file(stale, "rewrite")])
    _advance_and_clean(table)
    before = _log_names(table)

    with pytest.raises(StaleSnapshotError, match="log cleanup|no longer in the log") as info:
        txn.commit()

    assert info.value.read_version == 3 and info.value.latest_version == 6
    assert _log_names(table) == before
    assert victim.path in _readers_see(table)


def test_a_stale_transaction_whose_app_id_was_committed_meanwhile_reports_it(table: DeltaTable):
    stale = DeltaTable(table.uri)
    txn = stale.transaction()
    txn.add_files([_file(stale, "dup")]).set_app_transaction("job", 7)
    table.transaction().add_files([_file(table, "first")]).set_app_transaction("job", 7).commit()
    _advance_and_clean(table, commits=2)

    result = txn.commit()

    assert result.already_committed
    assert "p=a/dup.parquet" not in _readers_see(table)
    assert DeltaTable(table.uri).snapshot().app_transactions == {"job": 7}


def test_a_stale_transaction_is_refused_when_the_metadata_changed(table: DeltaTable):
    stale = DeltaTable(table.uri)
    txn = stale.transaction().add_files([_file(stale, "late")])
    snap = table.snapshot()
    new_md = replace(snap.metadata, configuration={**snap.metadata.configuration, "k": "v"})
    table.transaction().update_metadata(new_md).commit("SET TBLPROPERTIES")
    _advance_and_clean(table, commits=2)

    with pytest.raises(MetadataChangedError, match="log cleanup"):
        txn.commit()


def _race_cleanup_into_the_put(
    monkeypatch: pytest.MonkeyPatch, table: DeltaTable, after_put: Callable[[], None] | None = None
) -> dict[str, Any]:
    """Let log cleanup run between a transaction's check of the log and its put (the first put only):
    the interleaving the check before the put cannot see, which the check after it must catch."""
    seen: dict[str, Any] = {"puts": [], "others": False}

    def racing_put(store: Any, name: str, data: bytes, **kwargs: Any) -> None:
        if seen["others"]:  # the other writers' own puts go straight through
            return put_if_absent(store, name, data, **kwargs)
        if not seen["puts"]:
            seen["others"] = True
            seen["checkpoint"] = _advance_and_clean(table)
            seen["others"] = False
        seen["puts"].append(name)
        put_if_absent(store, name, data, **kwargs)
        if after_put is not None and len(seen["puts"]) == 1:
            after_put()

    monkeypatch.setattr(atomic_commit, "put_if_absent", racing_put)
    return seen


def test_a_put_into_a_cleaned_up_prefix_is_detected_and_replayed(table: DeltaTable, monkeypatch):
    stale = DeltaTable(table.uri)
    txn = stale.transaction().add_files([_file(stale, "late")]).set_app_transaction("A", 1)
    seen = _race_cleanup_into_the_put(monkeypatch, table)

    result = txn.commit()

    # The first put created 4.json in the deleted prefix (invisible); the transaction saw it and committed
    # again after the checkpoint.
    assert seen["puts"] == [commit_name(4), commit_name(7)] and seen["checkpoint"] == 6
    assert result.version == 7
    snap = DeltaTable(table.uri).snapshot()
    assert snap.version == 7 and snap.app_transactions == {"A": 1}
    assert _readers_see(table).count("p=a/late.parquet") == 1


def test_the_orphan_a_stale_put_leaves_is_no_version_of_the_table(table: DeltaTable, monkeypatch):
    stale = DeltaTable(table.uri)
    txn = stale.transaction().add_files([_file(stale, "late")])
    _race_cleanup_into_the_put(monkeypatch, table)
    txn.commit()
    monkeypatch.undo()
    # The stale put's 4.json stays below the gap at 5 until the next cleanup (the log is append-only).
    assert commit_name(4) in _log_names(table) and commit_name(5) not in _log_names(table)

    fresh = DeltaTable(table.uri)
    assert [h.version for h in fresh.history()] == [7, 6]
    with pytest.raises(VersionNotFoundError, match=r"available versions are 6\.\.7"):
        fresh.snapshot(version=4)
    with pytest.raises(VersionNotFoundError, match=r"earliest available commit \(version 6 .*6\.\.7"):
        fresh.version_at(0)
    # Commit 4's (late, adjusted) time does not push the table's own commits later.
    info = {f.name: f.modification_time for f in table.store.list_log(0)}
    assert fresh.history()[-1].timestamp == info[commit_name(6)]


def test_a_non_replayable_put_into_a_cleaned_up_prefix_is_refused(table: DeltaTable, monkeypatch):
    stale = DeltaTable(table.uri)
    txn = stale.transaction().read_whole_table().add_files([_file(stale, "overwrite")])
    _race_cleanup_into_the_put(monkeypatch, table)

    with pytest.raises(StaleSnapshotError, match="does not hold this commit|written before"):
        txn.commit()

    assert "p=a/overwrite.parquet" not in _readers_see(table)
    assert DeltaTable(table.uri).version() == 6


def test_equal_modification_times_are_settled_by_the_checkpoint_content(table: DeltaTable, monkeypatch):
    """On stores whose clock resolution is a second, the checkpoint and the commit can have the same mtime;
    the checkpoint's content then decides (it does not hold the stale commit)."""
    stale = DeltaTable(table.uri)
    txn = stale.transaction().add_files([_file(stale, "late")]).set_app_transaction("A", 1)

    def same_mtime() -> None:
        log_dir = Path(table.store.log_path)
        mtime = (log_dir / commit_name(4)).stat().st_mtime_ns
        for cp in log_dir.glob("*.checkpoint.parquet"):
            os.utime(cp, ns=(mtime, mtime))

    seen = _race_cleanup_into_the_put(monkeypatch, table, after_put=same_mtime)
    result = txn.commit()
    assert seen["puts"] == [commit_name(4), commit_name(7)] and result.version == 7
    assert DeltaTable(table.uri).snapshot().app_transactions == {"A": 1}


def test_a_checkpoint_written_right_after_our_commit_is_not_mistaken_for_cleanup(
    table: DeltaTable, monkeypatch: pytest.MonkeyPatch
):
    """A checkpoint above our version with the same mtime, built *through* our commit: content says ours."""
    txn = DeltaTable(table.uri).transaction().add_files([_file(table, "mine")]).set_app_transaction("A", 1)
    puts: list[str] = []

    def put_then_others_checkpoint(store: Any, name: str, data: bytes, **kwargs: Any) -> None:
        put_if_absent(store, name, data, **kwargs)
        if puts:  # the other writer's own put
            return
        puts.append(name)
        table.transaction().add_files([_file(table, "next")]).commit()
        table.checkpoint()
        mtime = (Path(table.store.log_path) / name).stat().st_mtime_ns
        for cp in Path(table.store.log_path).glob("*.checkpoint.parquet"):
            os.utime(cp, ns=(mtime, mtime))

    monkeypatch.setattr(atomic_commit, "put_if_absent", put_then_others_checkpoint)
    result = txn.commit(auto_checkpoint=False)
    assert puts == [commit_name(4)] and result.version == 4
    assert DeltaTable(table.uri).snapshot().app_transactions == {"A": 1}


# -- readers ---------------------------------------------------------------------------------------------
def test_an_incremental_update_does_not_apply_a_commit_written_into_a_cleaned_up_prefix(table: DeltaTable):
    handle = DeltaTable(table.uri)
    assert handle.snapshot().version == 3
    _advance_and_clean(table)  # 4..6, checkpoint 6, commits 0..5 deleted
    # A writer that does not check (another implementation) then fills version 4 of the deleted prefix.
    put_if_absent(
        table.store,
        commit_name(4),
        b'{"commitInfo":{"operation":"WRITE"}}\n{"add":{"path":"bogus.parquet",'
        b'"partitionValues":{"p":"a"},"size":1,"modificationTime":1,"dataChange":true}}\n',
    )

    snap = handle.snapshot()

    assert snap.version == 6 and "bogus.parquet" not in snap.file_paths()
    assert sorted(snap.file_paths()) == _readers_see(table)


def test_an_incremental_update_does_not_apply_a_refilled_commit_right_after_it(table: DeltaTable):
    """The chaos run's case (S3, seed 1): the hole is the very next version and the commit at the checkpoint
    is still there, so the commits after the snapshot look complete; the checkpoint must win. Before the
    fix a writer's retry saw its own invisible commit's app version and acknowledged a batch no reader had."""
    handle = DeltaTable(table.uri)
    assert handle.snapshot().version == 3
    _advance_and_clean(table, commits=2)  # 4, 5, checkpoint 5, commits 0..4 deleted
    assert commit_name(4) not in _log_names(table) and commit_name(5) in _log_names(table)
    put_if_absent(
        table.store,
        commit_name(4),
        b'{"commitInfo":{"operation":"WRITE"}}\n{"txn":{"appId":"stale","version":15}}\n'
        b'{"add":{"path":"bogus.parquet","partitionValues":{"p":"a"},"size":1,"modificationTime":1,'
        b'"dataChange":true}}\n',
    )

    snap = handle.snapshot()

    assert snap.version == 5 and "bogus.parquet" not in snap.file_paths()
    assert "stale" not in snap.app_transactions
    assert sorted(snap.file_paths()) == _readers_see(table)


def test_an_incremental_update_reloads_when_the_commits_after_it_are_gone(table: DeltaTable):
    handle = DeltaTable(table.uri)
    assert handle.snapshot().version == 3
    _advance_and_clean(table, commits=4)  # 4..7, checkpoint 7, commits 0..6 deleted
    snap = handle.snapshot()
    assert snap.version == 7 and sorted(snap.file_paths()) == _readers_see(table)


def test_a_reader_relists_when_cleanup_deletes_what_it_just_listed(table: DeltaTable, monkeypatch):
    _advance_and_clean(table, commits=0)  # checkpoint 3; commits 0-2 deleted
    for i in range(4):
        table.transaction().add_files([_file(table, f"after-{i}")]).commit(auto_checkpoint=False)
    expected = sorted(DeltaTable(table.uri).snapshot().file_paths())
    for name in _log_names(table):  # a log without checksums (as delta-rs writes): the commits are read
        if name.endswith(".crc"):
            os.remove(table.store.log_file(name))
    reader = DeltaTable(table.uri)
    real = reader.store.read_log_files
    calls = {"n": 0}

    def cleanup_between_list_and_read(names: Any) -> list[bytes]:
        calls["n"] += 1
        if calls["n"] == 1:  # another process checkpoints and cleans up right after our listing
            table.checkpoint()
            table.cleanup_expired_logs(retention_ms=0, now_ms=int(time.time() * 1000) + DAY_MS)
        return real(names)

    monkeypatch.setattr(reader.store, "read_log_files", cleanup_between_list_and_read)
    snap = reader.snapshot()
    assert calls["n"] >= 2 and snap.version == 7 and sorted(snap.file_paths()) == expected


# -- writes refuse features they do not know ---------------------------------------------------------------
@pytest.mark.parametrize("operation", ["checkpoint", "cleanup", "vacuum", "commit"])
def test_every_write_refuses_an_unknown_writer_feature(table: DeltaTable, operation: str):
    snap = table.snapshot()
    protocol = Protocol(1, 7, None, ("appendOnly", "someFutureFeature"))
    # Written as another implementation would: our own commits refuse to write this protocol.
    body = (
        '{"commitInfo":{"operation":"UPGRADE PROTOCOL"}}\n'
        + json.dumps({"protocol": protocol.to_json()})
        + "\n"
    )
    put_if_absent(table.store, commit_name(snap.version + 1), body.encode())
    before = _log_names(table)
    with pytest.raises(UnsupportedFeatureError, match="someFutureFeature"):
        if operation == "checkpoint":
            table.checkpoint()
        elif operation == "cleanup":
            table.cleanup_expired_logs(retention_ms=0, now_ms=int(time.time() * 1000) + DAY_MS)
        elif operation == "vacuum":
            table.vacuum(retention_hours=0, enforce_retention_duration=False, dry_run=False)
        else:
            table.transaction().add_files([_file(table, "y")]).commit()
    assert _log_names(table) == before


# -- readers racing cleanup on every store -----------------------------------------------------------------
def _store(request: pytest.FixtureRequest, backend: str, name: str) -> tuple[str, dict[str, Any]]:
    """(uri, storage options) of a new table on the S3 server or a cloud emulator."""
    if backend == "s3":
        s3, bucket = request.getfixturevalue("s3_server"), request.getfixturevalue("s3_bucket")
        return f"s3://{bucket}/{name}-{time.time_ns()}", s3.storage_options
    emulator = request.getfixturevalue(f"{backend}_emulator")
    return emulator.uri(f"{name}-{time.time_ns()}"), emulator.storage_options


@pytest.mark.parametrize("backend", ["s3", "gcs", "azure"])
def test_a_checkpoint_deleted_after_the_reader_opened_it_is_listed_again(
    request: pytest.FixtureRequest, backend: str, monkeypatch: pytest.MonkeyPatch
):
    """Log cleanup deletes the checkpoint a reader has just opened: every store reports "not found" alike
    (adlfs raises Azure's own error from range reads) and the reader lists again."""
    uri, options = _store(request, backend, "race")
    t = DeltaTable.create(uri, pa.schema([("a", pa.int64())]), storage_options=options)
    for i in range(3):
        t.transaction().add_files([AddFile(f"f{i}.parquet", 1)]).commit()
    t.checkpoint()
    real_open = LogStore.open_input_file

    def open_then_deleted(store: LogStore, path: str) -> Any:
        fh = real_open(store, path)
        store.fs.rm_file(path)
        return fh

    monkeypatch.setattr(LogStore, "open_input_file", open_then_deleted)
    snap = DeltaTable(uri, options).snapshot()
    assert snap.version == 3 and len(snap.file_paths()) == 3


@pytest.mark.s3
@pytest.mark.parametrize("backend", ["s3", "gcs", "azure"])
def test_a_checkpoint_rewritten_while_read_is_read_again(
    request: pytest.FixtureRequest, backend: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another writer checkpoints the same version while the reader reads it (checkpoints may be written
    again): the reader reads the new file, with nothing older to fall back to (the commits before it are
    cleaned up). s3fs sees the ETag change and raises EBUSY; gcsfs and adlfs read the new object's bytes at
    the old one's offsets, which fails to decode, and the file's size and time, no longer those listed, tell
    the reader it was replaced rather than corrupt."""
    uri, options = _store(request, backend, "rewritten")
    t = DeltaTable.create(uri, pa.schema([("a", pa.int64())]), storage_options=options)
    for i in range(3):
        t.transaction().add_files([AddFile(f"f{i}.parquet", 1)]).commit()
    t.checkpoint()
    t.cleanup_expired_logs(retention_ms=0, now_ms=int(time.time() * 1000) + DAY_MS)
    real_open = LogStore.open_input_file
    rewritten: list[str] = []

    def open_then_rewritten(store: LogStore, path: str) -> Any:
        fh = real_open(store, path)
        if not rewritten and ".checkpoint." in path:
            # The same state in other bytes (another codec): a new ETag, as another writer's checkpoint.
            with store.fs.open(path, "rb") as old:
                state = pq.read_table(old)
            sink = pa.BufferOutputStream()
            pq.write_table(state, sink, compression="gzip")
            store.fs.pipe_file(path, sink.getvalue().to_pybytes())
            rewritten.append(path)
        return fh

    monkeypatch.setattr(LogStore, "open_input_file", open_then_rewritten)
    snap = DeltaTable(uri, options).snapshot()
    assert rewritten and snap.version == 3 and len(snap.file_paths()) == 3


def test_a_transient_error_reading_the_newest_checkpoint_is_retried(monkeypatch: pytest.MonkeyPatch):
    uri = f"memory://transient-{time.time_ns()}/t"  # not local disk, which reads checkpoints directly
    t = DeltaTable.create(uri, pa.schema([("a", pa.int64())]))
    for i in range(3):
        t.transaction().add_files([AddFile(f"f{i}.parquet", 1)]).commit()
    t.checkpoint()
    t.cleanup_expired_logs(retention_ms=0, now_ms=int(time.time() * 1000) + DAY_MS)  # nothing to fall back to
    real_open = LogStore.open_input_file
    calls: list[str] = []

    def flaky(store: LogStore, path: str) -> Any:
        calls.append(path)
        if len(calls) == 1:
            raise ConnectionResetError("injected: connection reset")
        return real_open(store, path)

    monkeypatch.setattr(LogStore, "open_input_file", flaky)
    snap = DeltaTable(uri).snapshot()
    assert snap.version == 3 and len(calls) == 2


def test_an_unreadable_checkpoint_with_nothing_to_fall_back_to_is_named_corrupt(tmp_path: Path):
    t = DeltaTable.create(str(tmp_path / "t"), pa.schema([("a", pa.int64())]))
    for i in range(3):
        t.transaction().add_files([AddFile(f"f{i}.parquet", 1)]).commit()
    t.checkpoint()
    t.cleanup_expired_logs(retention_ms=0, now_ms=int(time.time() * 1000) + DAY_MS)
    (tmp_path / "t" / "_delta_log" / f"{3:020d}.checkpoint.parquet").write_bytes(b"garbage")
    with pytest.raises(CorruptLogError, match="checkpoint.*cleaned up"):
        DeltaTable(str(tmp_path / "t")).snapshot()
