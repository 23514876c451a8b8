"""Version checksums (``NNN.crc``, "Version Checksum File"): written after each commit, read by snapshots.

Each test builds a real table on the local filesystem and checks what the log says: every checksum we
write agrees with the state its version replays to (``validate_checksum``), a cold reader takes its
protocol, metadata and app transactions from the newest checksum and the commits after it without opening
the checkpoint (the storage calls are recorded by wrapping the table's ``LogStore``), and a checksum that
is malformed, stale or wrong is ignored with a warning naming it, or refused by name where the caller
validates or checkpoints.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
from dataclasses import replace
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from airflow_provider_delta.log import ChecksumError, DeltaError, DeltaTable, RemoveFile
from airflow_provider_delta.log.files.storage import LogStore
from airflow_provider_delta.log.files.version_checksum import (
    FILE_SIZE_BOUNDARIES,
    FileSizeHistogram,
    parse_checksum,
)

SCHEMA = pa.schema([("id", pa.int64()), ("p", pa.string())])
GOLDEN = Path(__file__).resolve().parents[2].parent / "shared" / "golden"


def crc_path(root: Path, version: int) -> Path:
    return root / "_delta_log" / f"{version:020d}.crc"


def crc_of(root: Path, version: int) -> dict[str, Any]:
    return json.loads(crc_path(root, version).read_text())


def rows(n: int, start: int = 0, p: str = "a") -> pa.Table:
    return pa.table({"id": list(range(start, start + n)), "p": [p] * n})


class Recorded:
    """The storage calls a table's ``LogStore`` makes: listings, log-file reads and opened files."""

    def __init__(self, store: LogStore, monkeypatch: pytest.MonkeyPatch) -> None:
        self.calls: list[tuple[str, str]] = []
        self.inside = False
        for name in ("list_log", "read_log_file", "read_log_files", "open_input_file"):
            real = getattr(store, name)
            monkeypatch.setattr(store, name, self._wrap(name, real))
        # Local checkpoints are opened by path with pyarrow; record those opens too.
        import pyarrow.parquet as pq

        real_pf = pq.ParquetFile

        def parquet_file(source: Any, *args: Any, **kwargs: Any) -> Any:
            self.calls.append(("parquet", str(getattr(source, "path", source))))
            return real_pf(source, *args, **kwargs)

        monkeypatch.setattr(pq, "ParquetFile", parquet_file)

    def _wrap(self, name: str, real: Any) -> Any:
        def call(arg: Any = None, *args: Any, **kwargs: Any) -> Any:
            if self.inside:  # a read within a recorded read (read_log_files reads one file so)
                return real(arg, *args, **kwargs)
            if name == "read_log_files":
                arg = list(arg)
                self.calls.extend((name, a) for a in arg)
            else:
                self.calls.append((name, str(arg)))
            self.inside = True
            try:
                return real(arg, *args, **kwargs) if arg is not None else real(*args, **kwargs)
            finally:
                self.inside = False

        return call

    def read(self) -> list[str]:
        """Names of the log files read or opened, in order."""
        return [os.path.basename(p) for kind, p in self.calls if kind != "list_log"]


def test_every_commit_writes_a_checksum_that_agrees_with_the_log(tmp_path: Path):
    t = DeltaTable.create(str(tmp_path), SCHEMA, partition_by=["p"],
                          configuration={"delta.enableDeletionVectors": "true"})  # fmt: skip
    t.write(rows(10, p="a"))
    t.write(rows(5, 10, p="b"), app_id="loader", app_version=7)
    t.write(rows(3, 20, p="a"), mode="overwrite", replace_where="p = 'a'")
    live = t.snapshot().files.column("path").to_pylist()
    txn = t.transaction()
    txn.delete_rows({live[0]: [0]})  # a deletion vector on one file
    txn.commit("DELETE")
    md = t.snapshot().metadata
    new_md = replace(md, configuration={**md.configuration, "delta.appendOnly": "false"})
    t.transaction().update_metadata(new_md).commit("SET TBLPROPERTIES")
    t.optimize()
    latest = t.version()
    for v in range(latest + 1):
        crc = t.validate_checksum(v)  # raises ChecksumError on any disagreement
        assert crc.totals is not None
    last = crc_of(tmp_path, latest)
    snap = DeltaTable(str(tmp_path)).snapshot()
    assert last["numFiles"] == snap.files.num_rows == snap.num_files
    assert last["tableSizeBytes"] == sum(snap.files.column("size").to_pylist())
    assert [(s["appId"], s["version"]) for s in last["setTransactions"]] == [("loader", 7)]
    assert last["numMetadata"] == last["numProtocol"] == 1
    hist = FileSizeHistogram.from_json(last["fileSizeHistogram"])
    assert hist.boundaries == FILE_SIZE_BOUNDARIES and sum(hist.file_counts) == last["numFiles"]
    assert "histogramOpt" not in last  # the spec's name is written


def test_a_cold_commit_opens_no_checkpoint(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    t = DeltaTable.create(str(tmp_path), SCHEMA)
    for i in range(12):  # a checkpoint at 10, commits 11 and 12 after it, each with its checksum
        t.write(rows(2, 2 * i))
    assert (tmp_path / "_delta_log" / f"{10:020d}.checkpoint.parquet").exists()
    cold = DeltaTable(str(tmp_path))
    seen = Recorded(cold.store, monkeypatch)
    result = cold.write(rows(1, 100), app_id="job", app_version=1)
    assert result.version == 13
    read = seen.read()
    assert not any(".checkpoint." in name for name in read), read
    assert read.count(f"{12:020d}.crc") == 1
    assert crc_path(tmp_path, 13).exists() and cold.validate_checksum(13).totals.num_files == 13


def test_an_app_transaction_lookup_reads_the_newest_checksum_and_the_commits_after_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    t = DeltaTable.create(str(tmp_path), SCHEMA)
    for i in range(11):
        t.write(rows(1, i), app_id="job", app_version=i)
    # A commit after the newest checksum (another writer that writes none).
    t.write(rows(1, 50), app_id="other", app_version=3)
    crc_path(tmp_path, 12).unlink()
    cold = DeltaTable(str(tmp_path))
    seen = Recorded(cold.store, monkeypatch)
    snap = cold.snapshot()
    assert snap.app_transactions == {"job": 10, "other": 3} and snap.version == 12
    assert seen.read() == ["_last_checkpoint", f"{11:020d}.crc", f"{12:020d}.json"], seen.calls
    assert snap.checksum is not None and snap.checksum.totals.num_files == 12  # carried over commit 12
    assert snap.num_files == 12 and not snap.files_loaded


def test_without_any_checksum_only_the_small_columns_of_the_checkpoint_are_read(tmp_path: Path):
    t = DeltaTable.create(str(tmp_path), SCHEMA)
    for i in range(11):
        t.write(rows(1, i), app_id="job", app_version=i)
    for f in (tmp_path / "_delta_log").glob("*.crc"):
        f.unlink()  # a table as delta-rs writes it
    snap = DeltaTable(str(tmp_path)).snapshot()
    assert snap.checksum is None and not snap.files_loaded
    assert snap.app_transactions == {"job": 10} and snap.num_files == 11
    # A writer that reads the file list anyway leaves the next checksum behind.
    DeltaTable(str(tmp_path)).write(rows(1, 99), mode="overwrite")
    assert DeltaTable(str(tmp_path)).validate_checksum().totals.num_files == 1


@pytest.mark.parametrize(
    "content",
    [b"", b"garbage", b"[]", b'{"numFiles":1}', b'{"tableSizeBytes":1,"numFiles":-1,"numMetadata":1}'],
)
def test_a_malformed_checksum_is_ignored_with_a_warning_naming_it(tmp_path: Path, content: bytes, caplog):
    t = DeltaTable.create(str(tmp_path), SCHEMA)
    t.write(rows(3), app_id="job", app_version=1)
    path = crc_path(tmp_path, 1)
    path.unlink()
    path.write_bytes(content)
    with caplog.at_level(logging.WARNING):
        snap = DeltaTable(str(tmp_path)).snapshot()
    assert str(path) in caplog.text
    assert snap.checksum is None and snap.app_transactions == {"job": 1} and snap.num_files == 1
    with pytest.raises(ChecksumError) as caught:
        DeltaTable(str(tmp_path)).validate_checksum(1)
    assert caught.value.path == str(path)


def test_a_wrong_checksum_is_reported_and_stops_a_checkpoint(tmp_path: Path, caplog):
    t = DeltaTable.create(str(tmp_path), SCHEMA)
    t.write(rows(3))
    t.write(rows(3, 3))
    path = crc_path(tmp_path, 2)
    body = json.loads(path.read_text())
    body["numFiles"] += 5
    mtime = path.stat().st_mtime
    path.write_text(json.dumps(body))
    os.utime(path, (mtime, mtime))
    snap = DeltaTable(str(tmp_path)).snapshot()
    assert snap.num_files == 7  # what the checksum says, until the file list is read
    with caplog.at_level(logging.WARNING):
        assert snap.files.num_rows == 2
    assert str(path) in caplog.text and "numFiles" in caplog.text
    with pytest.raises(ChecksumError, match="numFiles") as caught:
        DeltaTable(str(tmp_path)).validate_checksum()
    assert caught.value.path == str(path)
    with pytest.raises(ChecksumError, match="cannot checkpoint"):
        DeltaTable(str(tmp_path)).checkpoint()
    assert not (tmp_path / "_delta_log" / f"{2:020d}.checkpoint.parquet").exists()


def _snapshot_with_checksum_moved_back(tmp_path: Path, caplog, seconds: float):
    """A table at version 1 whose checksum's modification time is ``seconds`` before its commit's, read."""
    t = DeltaTable.create(str(tmp_path), SCHEMA)
    t.write(rows(3), app_id="job", app_version=1)
    commit = tmp_path / "_delta_log" / f"{1:020d}.json"
    crc = crc_path(tmp_path, 1)
    os.utime(crc, (commit.stat().st_mtime - seconds,) * 2)
    with caplog.at_level(logging.WARNING):
        snap = DeltaTable(str(tmp_path)).snapshot()
    assert snap.app_transactions == {"job": 1}
    return snap, crc


def test_a_checksum_older_than_its_commit_is_not_used(tmp_path: Path, caplog):
    """A checksum left from an earlier table at the same place (its commit was written again after it)."""
    snap, crc = _snapshot_with_checksum_moved_back(tmp_path, caplog, 60)
    assert snap.checksum is None and "older than its commit" in caplog.text and str(crc) in caplog.text


def test_a_copied_table_whose_checksum_landed_a_moment_before_its_commit_uses_it(tmp_path: Path, caplog):
    """A copy (cp, provisioning, a restore from backup) writes a table's files in any order: a checksum a
    moment older than its commit is still its own (``../shared/golden`` arrives that way)."""
    snap, _ = _snapshot_with_checksum_moved_back(tmp_path, caplog, 0.5)
    assert snap.checksum is not None and "older than its commit" not in caplog.text


def test_an_existing_checksum_is_never_overwritten(tmp_path: Path):
    t = DeltaTable.create(str(tmp_path), SCHEMA)
    t.write(rows(1))
    before = crc_path(tmp_path, 1).read_bytes()
    t.checkpoint()  # has the file list in memory, and a checksum of the version is there already
    assert crc_path(tmp_path, 1).read_bytes() == before


def test_a_checksum_that_cannot_be_written_does_not_fail_the_commit(tmp_path: Path, monkeypatch, caplog):
    from airflow_provider_delta.log.files import version_checksum

    t = DeltaTable.create(str(tmp_path), SCHEMA)

    def refuse(store: Any, name: str, data: bytes, **kwargs: Any) -> None:
        raise PermissionError(f"no write access to {name}")

    monkeypatch.setattr(version_checksum, "put_if_absent", refuse)
    with caplog.at_level(logging.WARNING):
        assert t.write(rows(2)).version == 1
    assert "could not write" in caplog.text and not crc_path(tmp_path, 1).exists()
    assert DeltaTable(str(tmp_path)).snapshot().num_files == 1


def test_app_transactions_are_left_out_when_they_expire(tmp_path: Path):
    retention = {"delta.setTransactionRetentionDuration": "interval 1 days"}
    t = DeltaTable.create(str(tmp_path), SCHEMA, configuration=retention)
    t.write(rows(1), app_id="job", app_version=1)
    assert "setTransactions" not in crc_of(tmp_path, 1)
    snap = DeltaTable(str(tmp_path)).snapshot()
    assert snap.checksum is None and snap.app_transactions == {"job": 1}  # read from the log


def test_removes_and_deletion_vectors_are_counted(tmp_path: Path):
    t = DeltaTable.create(str(tmp_path), SCHEMA, configuration={"delta.enableDeletionVectors": "true"})
    t.write(rows(10))
    t.write(rows(10, 10))
    first = t.snapshot().files.column("path").to_pylist()[0]
    txn = t.transaction()
    txn.delete_rows({first: [1, 2, 3]})
    txn.commit("DELETE")
    crc = crc_of(tmp_path, 3)
    assert crc["numDeletedRecordsOpt"] == 3 and crc["numDeletionVectorsOpt"] == 1
    assert crc["deletedRecordCountsHistogramOpt"]["deletedRecordCounts"][:2] == [1, 1]
    t.transaction().remove_files([RemoveFile(first, 1)]).commit("DELETE")
    t.validate_checksum()


@pytest.mark.parametrize(
    "name",
    sorted(
        str(p.parents[2].relative_to(GOLDEN))
        for p in GOLDEN.glob("*/*/delta/_delta_log/*.crc")
        if "crc-full" not in str(p)  # delta-kernel-rs's checksum that deliberately says more than its log
    ),
)
def test_checksums_of_other_writers_read_as_the_log_says(name: str, tmp_path: Path):
    """Delta Spark's, delta-rs's and delta-kernel-rs's checksums (the golden tables): a snapshot that starts
    from the newest checksum reads as the same table with its checksums removed, or fails as it does."""
    source = GOLDEN / name / "delta"
    bare = tmp_path / "bare"
    shutil.copytree(source, bare)
    for f in (bare / "_delta_log").glob("*.crc"):
        f.unlink()

    def read(root: Path) -> Any:
        try:
            snap = DeltaTable(str(root)).snapshot()
            files = sorted(snap.files.column("path").to_pylist())
            return (snap.version, snap.protocol, snap.metadata, snap.app_transactions,
                    snap.domain_metadata, files, snap.num_files)  # fmt: skip
        except DeltaError as exc:
            return type(exc)

    assert read(source) == read(bare)


def test_a_checksum_that_says_more_than_its_log_is_reported(caplog):
    """delta-kernel-rs's ``crc-full``: its checksum names app transactions and domains its one commit does
    not hold. A reader takes them (as delta-kernel-rs and Delta Spark do), the file list reports the
    disagreement, and validation and checkpoints refuse by name."""
    root = GOLDEN / "delta-kernel-rs/crc-full/delta"
    snap = DeltaTable(str(root)).snapshot()
    assert snap.checksum is not None
    assert snap.app_transactions == {"spark-app-1": 42, "streaming-job-abc": 100}
    with caplog.at_level(logging.WARNING):
        snap.files  # noqa: B018
    assert "disagrees with the log" in caplog.text and "00000000000000000000.crc" in caplog.text
    with pytest.raises(ChecksumError, match="setTransactions"):
        DeltaTable(str(root)).validate_checksum()


def test_the_histogram_matches_delta_sparks_bins():
    spark = GOLDEN / "delta-spark/variant-stats-no-checkpoint/delta/_delta_log/00000000000000000001.crc"
    body = json.loads(spark.read_text())
    crc = parse_checksum(json.dumps(body).encode(), 1, "crc")
    assert crc.totals.histogram.boundaries == FILE_SIZE_BOUNDARIES
