"""RESTORE in the core: which files come back and go, metrics, protocol and metadata, and every refusal.

Rows are read back with delta-kernel-rs, a reader that is not ours (and that applies deletion vectors).
Commit ages are set with os.utime, so no test sleeps.
"""

from __future__ import annotations

import dataclasses
import json
import os
import time
from pathlib import Path

import deltalake
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from delta_kernel_rust_sharing_wrapper import PythonInterface, ScanBuilder, Table

from airflow_provider_delta.log import (
    AddFile,
    ConcurrentDeleteReadError,
    DeltaTable,
    Metadata,
    Protocol,
    add_file_from_parquet,
)
from airflow_provider_delta.log.base.errors import RestoreMissingFilesError, RestoreTargetError
from airflow_provider_delta.log.features.protocol import merge_protocols
from airflow_provider_delta.log.maintenance import restore as restore_module
from airflow_provider_delta.log.maintenance.restore import restored_metadata

SCHEMA = pa.schema([("id", pa.int64()), ("p", pa.string())])
_ids = iter(range(1, 1_000_000))


def _file(table: DeltaTable, p: str = "a", rows: int = 3) -> AddFile:
    first = next(_ids) * 100
    rel = f"p={p}/part-{first}.parquet"
    path = Path(table.uri) / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table({"id": pa.array(range(first, first + rows), pa.int64())}), path)
    return add_file_from_parquet(table, rel, {"p": p})


def _rows(path: Path, version: int | None = None) -> list[tuple[int, str]]:
    """The rows as delta-kernel-rs reads them (the latest version, or ``version`` via deltalake)."""
    if version is not None:
        t = deltalake.DeltaTable(str(path), version=version).to_pyarrow_table()
    else:
        url = path.resolve().as_uri() + "/"
        engine = PythonInterface(url)
        t = ScanBuilder(Table(url).snapshot(engine)).build().execute(engine).read_all()
    return sorted(zip(t.column("id").to_pylist(), t.column("p").to_pylist(), strict=True))


def _live(table: DeltaTable, version: int | None = None) -> set[tuple[str, str | None]]:
    files = table.snapshot(version).files.select(["path", "deletionVector"]).to_pylist()
    return {(f["path"], json.dumps(f["deletionVector"], sort_keys=True)) for f in files}


@pytest.fixture
def history(tmp_path: Path) -> tuple[DeltaTable, list[AddFile]]:
    """v0 create, v1 add A B, v2 add C, v3 remove A, v4 add D and remove B."""
    table = DeltaTable.create(str(tmp_path / "t"), SCHEMA, partition_by=["p"])
    a, b, c, d = (_file(table, p) for p in "abab")
    table.transaction().add_files([a, b]).commit()
    table.transaction().add_files([c]).commit()
    table.transaction().remove_files([a]).commit("DELETE")
    table.transaction().add_files([d]).remove_files([b]).commit("WRITE")
    return table, [a, b, c, d]


def test_restore_brings_back_the_files_and_rows_of_the_version(history):
    table, (a, b, c, d) = history
    before = _rows(Path(table.uri), 2)
    result = table.restore(2)
    assert result.version == 5 and result.restored_version == 2
    assert _live(table) == _live(table, 2)
    assert _rows(Path(table.uri)) == before
    # Delta Spark's metrics: A and B come back, D goes; the table as it was at version 2.
    assert (result.num_restored_files, result.num_removed_files) == (2, 1)
    assert result.restored_files_size == a.size + b.size and result.removed_files_size == d.size
    assert result.num_of_files_after_restore == 3
    assert result.table_size_after_restore == a.size + b.size + c.size
    info = table.history(1)[0].commit_info
    assert info["operation"] == "RESTORE"
    assert info["operationParameters"] == {"version": "2", "timestamp": None}
    assert info["isolationLevel"] == "Serializable" and info["isBlindAppend"] is False
    assert info["operationMetrics"] == {k: str(v) for k, v in result.metrics().items()}
    log = (Path(table.uri) / "_delta_log" / f"{5:020d}.json").read_text().splitlines()
    actions = [json.loads(line) for line in log]
    assert all(x["add"]["dataChange"] for x in actions if "add" in x)
    assert all(x["remove"]["dataChange"] for x in actions if "remove" in x)
    assert any("metaData" in x for x in actions)


def test_restore_to_a_timestamp_picks_the_version_committed_at_or_before_it(history):
    table, _ = history
    log = Path(table.uri) / "_delta_log"
    base = time.time() - 3600
    for v in range(5):  # commits a minute apart, an hour ago
        os.utime(log / f"{v:020d}.json", (base + 60 * v, base + 60 * v))
    result = table.restore(timestamp=int((base + 60 * 3 + 30) * 1000))
    assert result.restored_version == 3
    assert _live(table) == _live(table, 3)
    assert table.history(1)[0].commit_info["operationParameters"]["timestamp"].startswith("20")


@pytest.mark.parametrize("target", ["latest", "after latest", "negative"])
def test_restore_to_the_latest_or_later_is_refused_and_writes_nothing(history, target):
    table, _ = history
    version = {"latest": 4, "after latest": 9, "negative": -1}[target]
    with pytest.raises(RestoreTargetError, match="must be an earlier version"):
        table.restore(version)
    assert table.version() == 4


def test_restore_to_a_timestamp_outside_the_log_is_refused(history):
    table, _ = history
    log = Path(table.uri) / "_delta_log"
    base = time.time() - 3600
    for v in range(5):
        os.utime(log / f"{v:020d}.json", (base + 60 * v, base + 60 * v))
    with pytest.raises(RestoreTargetError, match="before the earliest"):
        table.restore(timestamp=int((base - 600) * 1000))
    with pytest.raises(RestoreTargetError, match="must be an earlier version"):  # resolves to the latest
        table.restore(timestamp=int(time.time() * 1000))
    assert table.version() == 4


def test_restore_before_the_oldest_kept_version_is_refused(history):
    table, _ = history
    table.checkpoint(3)
    for v in range(3):
        (Path(table.uri) / "_delta_log" / f"{v:020d}.json").unlink()
    with pytest.raises(RestoreTargetError, match="version 1") as caught:
        table.restore(1)
    assert caught.value.earliest == 3
    assert table.version() == 4
    assert table.restore(3).version == 5  # the checkpoint's version is still there


def test_restore_older_than_the_retention_is_refused_unless_told(history):
    table, _ = history
    log = Path(table.uri) / "_delta_log"
    old = time.time() - 8 * 24 * 3600  # beyond the default 7 days of delta.deletedFileRetentionDuration
    for v in range(3):
        os.utime(log / f"{v:020d}.json", (old + v, old + v))
    with pytest.raises(RestoreTargetError, match="deletedFileRetentionDuration"):
        table.restore(2)
    assert table.version() == 4
    assert table.restore(2, enforce_retention_duration=False).version == 5


def test_restore_refuses_when_vacuum_deleted_the_files_it_needs(history):
    table, (a, b, _, _) = history
    for f in (a, b):
        (Path(table.uri) / f.path).unlink()
    with pytest.raises(RestoreMissingFilesError) as caught:
        table.restore(2)
    assert sorted(caught.value.files) == sorted([a.path, b.path])
    assert a.path in str(caught.value) and b.path in str(caught.value)
    assert table.version() == 4
    # Told to ignore them (Spark's ignoreMissingFiles), it restores the log anyway.
    assert table.restore(2, ignore_missing_files=True).num_restored_files == 2


def test_restore_swaps_back_a_files_deletion_vector(tmp_path):
    table = DeltaTable.create(
        str(tmp_path / "t"), SCHEMA, partition_by=["p"], configuration={"delta.enableDeletionVectors": "true"}
    )
    f = _file(table, "a", rows=5)
    table.transaction().add_files([f]).commit()
    table.transaction().delete_rows({f.path: [1, 3]}, inline_max_bytes=0).commit("DELETE")  # a vector file
    assert len(_rows(Path(table.uri))) == 3
    result = table.restore(1)
    assert (result.num_restored_files, result.num_removed_files) == (1, 1)
    assert _live(table) == _live(table, 1)
    assert len(_rows(Path(table.uri))) == 5
    # Forward again needs the vector's file too: gone, the restore is refused, naming it.
    dv_file = next(p for p in Path(table.uri).glob("deletion_vector_*.bin"))
    hidden = dv_file.rename(dv_file.with_name("hidden.bin"))
    with pytest.raises(RestoreMissingFilesError, match=dv_file.name):
        table.restore(2)
    hidden.rename(dv_file)
    assert table.restore(2).num_restored_files == 1
    assert len(_rows(Path(table.uri))) == 3


def test_restore_brings_back_metadata_but_never_downgrades_the_protocol(tmp_path):
    table = DeltaTable.create(str(tmp_path / "t"), SCHEMA, partition_by=["p"])
    table.transaction().add_files([_file(table)]).commit()
    snap = table.snapshot()
    upgraded = Protocol(3, 7, ("deletionVectors",), ("appendOnly", "deletionVectors", "invariants"))
    md = dataclasses.replace(snap.metadata, configuration={"delta.enableDeletionVectors": "true",
                                                           "custom.owner": "team"})  # fmt: skip
    table.transaction().update_protocol(upgraded).update_metadata(md).commit("SET TBLPROPERTIES")
    table.restore(1)
    restored = table.snapshot()
    assert restored.metadata.configuration == {}
    assert restored.metadata.id == snap.metadata.id
    assert restored.protocol == upgraded  # Delta Spark merges the protocols: no downgrade


def test_protocol_merge_is_delta_sparks():
    legacy = Protocol(1, 2)
    assert merge_protocols(legacy, Protocol(1, 4)) == Protocol(1, 4)
    assert merge_protocols(Protocol(2, 3)) == Protocol(1, 3)  # normalised: reader 2 needs column mapping
    dv = Protocol(3, 7, ("deletionVectors",), ("deletionVectors",))
    merged = Protocol(3, 7, ("deletionVectors",), ("appendOnly", "deletionVectors", "invariants"))
    assert merge_protocols(legacy, dv) == merged
    assert merge_protocols(Protocol(1, 7, None, ("appendOnly", "invariants"))) == legacy
    assert merge_protocols(Protocol(2, 5), Protocol(1, 7, None, ("domainMetadata",))) == Protocol(
        2, 7, None, ("appendOnly", "changeDataFeed", "checkConstraints", "columnMapping", "domainMetadata",
                     "generatedColumns", "invariants"))  # fmt: skip


def test_identity_high_water_marks_never_go_back():
    def md(mark: int | None) -> Metadata:
        meta = {"delta.identity.start": 1, "delta.identity.step": 1}
        if mark is not None:
            meta["delta.identity.highWaterMark"] = mark
        schema = {"type": "struct", "fields": [{"name": "id", "type": "long", "nullable": True,
                                                "metadata": meta}]}  # fmt: skip
        return Metadata("x", json.dumps(schema))

    merged = restored_metadata(md(5), md(40))
    assert merged.schema["fields"][0]["metadata"]["delta.identity.highWaterMark"] == 40
    assert restored_metadata(md(None), md(7)).schema["fields"][0]["metadata"][
        "delta.identity.highWaterMark"] == 7  # fmt: skip


def test_a_concurrent_change_fails_the_restore(history, monkeypatch):
    table, (_, _, c, _) = history
    real = restore_module.Transaction.commit

    def commit_after_a_delete(self, *args, **kwargs):
        # The RESTORE read its snapshot; a DELETE lands before its first attempt.
        real(DeltaTable(table.uri).transaction().remove_files([c]), "DELETE")
        return real(self, *args, **kwargs)

    monkeypatch.setattr(restore_module.Transaction, "commit", commit_after_a_delete)
    with pytest.raises(ConcurrentDeleteReadError):
        table.restore(2)
    assert table.snapshot().commit_info["operation"] == "DELETE"
