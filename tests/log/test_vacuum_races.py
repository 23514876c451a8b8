"""VACUUM racing writers: no commit ever references a file that VACUUM deleted.

A file written but not yet committed is unreferenced, so a VACUUM with a retention shorter than a writer's
time between writing and committing (zero, here) lists it as garbage. VACUUM START orders the two: commits
before it are re-read by VACUUM before it deletes anything; a writer committing after it sees it and refuses
to add files older than its cut-off, by name, so it can write them again. Interleavings are forced on
local storage by running one side inside the other's storage calls.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from airflow_provider_delta.log import ConcurrentVacuumError, DeltaTable, add_file_from_parquet
from airflow_provider_delta.log.maintenance import vacuum

SCHEMA = pa.schema([("id", pa.int64())])


def _write(table: DeltaTable, name: str, *, age_s: float = 0) -> str:
    path = Path(table.store.root) / name
    pq.write_table(pa.table({"id": [1]}), path)
    if age_s:
        past = time.time() - age_s
        os.utime(path, (past, past))
    return name


def _vacuum_now(table: DeltaTable) -> Any:
    return table.vacuum(retention_hours=0, enforce_retention_duration=False, dry_run=False)


@pytest.fixture
def table(tmp_path: Path) -> DeltaTable:
    t = DeltaTable.create(str(tmp_path / "t"), SCHEMA)
    t.transaction().add_files([add_file_from_parquet(t, _write(t, "base.parquet"))]).commit()
    return t


def test_a_writer_that_read_before_vacuum_started_is_refused_and_can_retry(table: DeltaTable):
    add = add_file_from_parquet(table, _write(table, "pending.parquet", age_s=5))
    txn = DeltaTable(table.uri).transaction().add_files([add])  # read before VACUUM
    report = _vacuum_now(table)
    assert "pending.parquet" in report.files  # unreferenced, so VACUUM deleted it

    with pytest.raises(ConcurrentVacuumError, match="write them again") as info:
        txn.commit()
    assert info.value.winning_operation == "VACUUM START"
    assert "pending.parquet" not in DeltaTable(table.uri).snapshot().file_paths()

    # The writer's retry: the file again, a new transaction (its snapshot has START and END: no vacuum runs).
    retry = add_file_from_parquet(table, _write(table, "pending.parquet"))
    table.transaction().add_files([retry]).commit()
    snap = DeltaTable(table.uri).snapshot()
    assert "pending.parquet" in snap.file_paths()
    assert all((Path(table.store.root) / p).exists() for p in snap.file_paths())


def test_a_writer_whose_snapshot_holds_an_unfinished_vacuum_refuses_old_files(table: DeltaTable):
    # A VACUUM that committed START and is still deleting (or died before END).
    table.transaction().commit(
        "VACUUM START",
        {"retentionCheckEnabled": False, "specifiedRetentionMillis": 0, "defaultRetentionMillis": 0},
    )
    old = add_file_from_parquet(table, _write(table, "old.parquet", age_s=60))
    with pytest.raises(ConcurrentVacuumError, match="in progress"):
        table.transaction().add_files([old]).commit()
    # A file written after the VACUUM started is not at risk.
    new = add_file_from_parquet(table, _write(table, "new.parquet"))
    table.transaction().add_files([new]).commit()
    # Once VACUUM END is in the log, old files may be committed again.
    table.transaction().commit("VACUUM END", {"status": "COMPLETED"})
    table.transaction().add_files([old]).commit()
    assert {"old.parquet", "new.parquet"} <= set(DeltaTable(table.uri).snapshot().file_paths())


def test_vacuum_keeps_files_committed_between_its_listing_and_its_start(table: DeltaTable, monkeypatch):
    add = add_file_from_parquet(table, _write(table, "racing.parquet", age_s=5))
    real_commit = vacuum._commit

    def writer_commits_first(t: Any, snap: Any, operation: str, *args: Any) -> None:
        if operation == "VACUUM START":  # VACUUM has listed the root; a writer commits before START
            DeltaTable(table.uri).transaction().add_files([add]).commit()
        real_commit(t, snap, operation, *args)

    monkeypatch.setattr(vacuum, "_commit", writer_commits_first)
    report = _vacuum_now(table)
    assert "racing.parquet" not in report.files
    snap = DeltaTable(table.uri).snapshot()
    assert "racing.parquet" in snap.file_paths()
    assert all((Path(table.store.root) / p).exists() for p in snap.file_paths())


def test_a_stale_append_whose_file_vacuum_deleted_is_refused(table: DeltaTable):
    """The log that held the VACUUM (START and END) was cleaned up while the transaction was open: only
    storage can tell that its file is gone."""
    add = add_file_from_parquet(table, _write(table, "f.parquet", age_s=5))
    txn = DeltaTable(table.uri).transaction().add_files([add]).set_app_transaction("w", 0)
    other = DeltaTable(table.uri)
    for i in range(3):
        other.transaction().set_app_transaction("other", i).commit()
    other.checkpoint()
    other.cleanup_expired_logs(retention_ms=0, now_ms=int(time.time() * 1000) + 86_400_000)
    _vacuum_now(other)  # deletes f.parquet, then log cleanup hides its START/END
    other.checkpoint()
    other.cleanup_expired_logs(retention_ms=0, now_ms=int(time.time() * 1000) + 86_400_000)

    with pytest.raises(ConcurrentVacuumError, match="no longer exist"):
        txn.commit()
    snap = DeltaTable(table.uri).snapshot()
    assert "f.parquet" not in snap.file_paths() and "w" not in snap.app_transactions


def test_checkpoints_stop_before_an_unfinished_vacuum_start(table: DeltaTable, monkeypatch):
    """A writer opening the table from a checkpoint must still see VACUUM START, so checkpoints written
    while a VACUUM deletes stay below START; the writer then refuses the file VACUUM is deleting."""
    _write(table, "f.parquet", age_s=5)  # written, not yet committed: VACUUM will delete it
    real_delete = vacuum.delete_files
    out: dict[str, Any] = {}

    def others_act_while_vacuum_deletes(store: Any, paths: Any, under: str, **kw: Any) -> None:
        other = DeltaTable(table.uri)
        other.transaction().set_app_transaction("other", 1).commit()
        out["checkpoint"] = other.checkpoint().version  # an automatic checkpoint, say
        writer = DeltaTable(table.uri).transaction()
        try:
            out["writer"] = writer.add_files([add_file_from_parquet(writer.snapshot, "f.parquet")]).commit()
        except ConcurrentVacuumError as exc:
            out["writer"] = exc
        real_delete(store, paths, under, **kw)

    monkeypatch.setattr(vacuum, "delete_files", others_act_while_vacuum_deletes)
    report = _vacuum_now(table)

    assert "f.parquet" in report.files
    start = next(e.version for e in DeltaTable(table.uri).history() if e.operation == "VACUUM START")
    assert out["checkpoint"] == start - 1
    assert isinstance(out["writer"], ConcurrentVacuumError)
    snap = DeltaTable(table.uri).snapshot()
    assert all((Path(table.store.root) / p).exists() for p in snap.file_paths())
    # Once VACUUM END is in, checkpoints go to the latest version again.
    assert table.checkpoint().version == snap.version
