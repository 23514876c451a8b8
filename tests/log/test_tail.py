"""Tailing the log cheaply: an idle check is one storage request, whatever the log's length.

This is what DeltaVersionSensor pokes and DeltaVersionTrigger polls with ("readers can tail the log").
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest

from airflow_provider_delta.log import AddFile, DeltaTable
from airflow_provider_delta.log.tail import commits_after, latest_after

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
