"""Tailing the log cheaply: an idle check is one storage request, whatever the log's length.

This is what DeltaVersionSensor pokes and DeltaVersionTrigger polls with ("readers can tail the log").
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest

from airflow_provider_delta.log import AddFile, CorruptLogError, DeltaTable, VersionNotFoundError
from airflow_provider_delta.log.commits.tail import (
    NO_TABLE,
    Observation,
    VersionCondition,
    commits_after,
    current_version,
    latest_after,
    observe,
)

PROTOCOL = {"protocol": {"minReaderVersion": 1, "minWriterVersion": 2}}
METADATA = {
    "metaData": {
        "id": "t",
        "format": {"provider": "parquet", "options": {}},
        "schemaString": json.dumps({"type": "struct", "fields": []}),
        "partitionColumns": [],
        "configuration": {},
    }
}


def commit_bytes(version: int, *, data_change: bool = True, operation: str = "WRITE") -> bytes:
    lines = [{"commitInfo": {"operation": operation}}]
    if version == 0:
        lines += [PROTOCOL, METADATA]
    lines.append(
        {
            "add": {
                "path": f"f{version}.parquet",
                "partitionValues": {},
                "size": 1,
                "modificationTime": 1,
                "dataChange": data_change,
            }
        }
    )
    return ("\n".join(json.dumps(x) for x in lines) + "\n").encode()


def test_latest_after_on_local_disk(tmp_path: Path):
    t = DeltaTable.create(str(tmp_path), pa.schema([("a", pa.int64())]))
    assert latest_after(t, 0) is None
    for i in range(3):
        t.transaction().add_files([AddFile(f"f{i}.parquet", 1)]).commit()
    assert latest_after(t, 0) == 3 and latest_after(t, 2) == 3 and latest_after(t, 3) is None


def test_data_changes_are_told_apart_from_rearrangements(tmp_path: Path):
    log = tmp_path / "_delta_log"
    log.mkdir()
    (log / f"{0:020d}.json").write_bytes(commit_bytes(0))
    (log / f"{1:020d}.json").write_bytes(commit_bytes(1, data_change=False, operation="OPTIMIZE"))
    (log / f"{2:020d}.json").write_bytes(commit_bytes(2))
    (log / f"{3:020d}.json").write_bytes(b'{"commitInfo": {"operation": "SET TBLPROPERTIES"}}\n')
    t = DeltaTable(str(tmp_path))
    found = commits_after(t, 0, classify=True)
    assert (found.latest, found.data_versions) == (3, (2,))
    assert commits_after(t, 2, classify=True).data_versions == ()


# 1,100: more commits than one S3 listing page holds (1,000 keys), so a listing from the start would take
# several requests: the idle check must still cost one.
@pytest.mark.parametrize("n_commits", [10, 1100])
def test_idle_check_costs_one_request_on_s3(s3_server, s3_bucket, request_counter, n_commits: int):
    fs = s3_server.filesystem()
    root = f"{s3_bucket}/t"
    fs.pipe({f"{root}/_delta_log/{v:020d}.json": commit_bytes(v) for v in range(n_commits)})
    t = DeltaTable(f"s3://{root}", storage_options=s3_server.storage_options)
    request_counter.clear()
    assert latest_after(t, n_commits - 1) is None
    assert [(r.method, r.key) for r in request_counter.requests] == [
        ("HEAD", f"t/_delta_log/{n_commits:020d}.json")
    ]
    request_counter.clear()
    assert latest_after(t, n_commits - 3) == n_commits - 1
    listings = [r for r in request_counter.requests if r.method == "GET" and not r.key]
    start = f"t/_delta_log/{n_commits - 2:020d}"
    assert listings and all(r.params.get("start-after", "") >= start for r in listings)


# -- a table that does not exist yet -------------------------------------------------------------------------


def add(t: DeltaTable, name: str, app: tuple[str, int] | None = None) -> int:
    txn = t.transaction().add_files([AddFile(f"{name}.parquet", 1)])
    if app:
        txn.set_app_transaction(*app)
    return txn.commit().version


# How each location looks before the table is created: nothing at all, data files but no log (a writer that
# has not committed yet), a log directory with no commit in it.
BEFORE = {
    "nothing": lambda root: None,
    "files_no_log": lambda root: (root / "part-0.parquet").write_bytes(b"PAR1"),
    "empty_log": lambda root: (root / "_delta_log").mkdir(),
    "log_with_temp_file": lambda root: (
        (root / "_delta_log").mkdir(),
        (root / "_delta_log" / ".0.json.tmp").touch(),
    ),
}
# condition: (observations expected after creating the table, then after each of two appends)
AFTER_CREATE = {
    "min_version": (VersionCondition(min_version=1), [(False, 0), (True, 1)]),
    "baseline": (VersionCondition(newer_than=NO_TABLE), [(True, 0)]),
    "baseline_data_changes": (
        VersionCondition(newer_than=NO_TABLE, data_changes_only=True),
        [(False, 0), (True, 1)],
    ),
    "app_id": (VersionCondition(app_id="ingest", app_version=2), [(False, 0), (False, 1), (True, 2)]),
}


@pytest.mark.parametrize("before", list(BEFORE))
@pytest.mark.parametrize("case", list(AFTER_CREATE))
def test_observe_waits_for_a_table_that_does_not_exist_yet(tmp_path: Path, before: str, case: str):
    root = tmp_path / "t"
    root.mkdir()
    BEFORE[before](root)
    condition, expected = AFTER_CREATE[case]
    reader = DeltaTable(str(root))  # one handle across checks, as a trigger keeps it
    assert current_version(reader) == NO_TABLE
    first = observe(reader, condition, None)
    assert first == Observation(False, NO_TABLE)
    assert observe(reader, condition, first.cursor) == Observation(False, NO_TABLE)
    writer = DeltaTable.create(str(root), pa.schema([("a", pa.int64())]))
    seen, cursor = [], first.cursor
    for i in range(len(expected)):
        out = observe(reader, condition, cursor)
        seen.append((out.satisfied, out.cursor))
        cursor = out.cursor
        add(writer, f"f{i}", app=("ingest", i + 1))
    assert seen == expected
    assert current_version(reader) == writer.version()


def test_a_table_that_appears_with_a_checkpoint_and_no_commit_0_is_seen(tmp_path: Path):
    """A table copied in after log cleanup starts at a checkpoint: existence of 0.json is not the test."""
    source = DeltaTable.create(str(tmp_path / "src"), pa.schema([("a", pa.int64())]))
    for i in range(2):
        add(source, f"f{i}")
    source.checkpoint(2)
    for v in range(3):
        (tmp_path / "src" / "_delta_log" / f"{v:020d}.json").unlink()
    reader = DeltaTable(str(tmp_path / "t"))
    condition = VersionCondition(newer_than=NO_TABLE)
    assert observe(reader, condition, None) == Observation(False, NO_TABLE)
    (tmp_path / "src").rename(tmp_path / "t")
    assert observe(reader, condition, NO_TABLE) == Observation(True, 2)


@pytest.mark.parametrize("cursor", [None, NO_TABLE])
def test_a_log_that_cannot_be_read_is_an_error_not_a_missing_table(tmp_path: Path, cursor: int | None):
    """Only "no commit and no checkpoint" is waited for: a broken log fails, as waiting will not mend it."""
    broken = tmp_path / "broken" / "_delta_log"
    broken.mkdir(parents=True)
    (broken / f"{0:020d}.json").write_bytes(b'{"commitInfo": {"operation": "WRITE"}\n')  # cut short
    with pytest.raises(CorruptLogError, match="malformed JSON"):
        observe(DeltaTable(str(broken.parent)), VersionCondition(min_version=0), cursor)
    with pytest.raises(CorruptLogError):
        current_version(DeltaTable(str(broken.parent)))
    cleaned = tmp_path / "cleaned" / "_delta_log"  # commits 0 and 1 gone, no checkpoint to start from
    cleaned.mkdir(parents=True)
    for v in (2, 3):
        (cleaned / f"{v:020d}.json").write_bytes(commit_bytes(v))
    with pytest.raises(VersionNotFoundError, match="cannot be reconstructed"):
        observe(DeltaTable(str(cleaned.parent)), VersionCondition(newer_than=NO_TABLE), cursor)


def test_idle_check_of_a_missing_table_costs_one_listing_on_s3(s3_server, s3_bucket, request_counter):
    condition = VersionCondition(min_version=0)
    for where in (f"{s3_bucket}/t", "no-such-bucket-here/t"):  # a missing bucket is waited for too
        t = DeltaTable(f"s3://{where}", storage_options=s3_server.storage_options)
        assert observe(t, condition, None) == Observation(False, NO_TABLE)
        request_counter.clear()
        assert observe(t, condition, NO_TABLE) == Observation(False, NO_TABLE)
        assert [(r.method, r.key) for r in request_counter.requests] == [("GET", "")]
    s3_server.filesystem().pipe({f"{s3_bucket}/t/_delta_log/{0:020d}.json": commit_bytes(0)})
    t = DeltaTable(f"s3://{s3_bucket}/t", storage_options=s3_server.storage_options)
    assert observe(t, condition, NO_TABLE) == Observation(True, 0)
