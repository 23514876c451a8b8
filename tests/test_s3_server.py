"""The S3 fixtures behave like S3 where our code depends on it: put-if-absent, request counting, deltalake."""

from __future__ import annotations

import os

import pyarrow as pa
import pytest

pytestmark = pytest.mark.s3


def test_put_and_get(s3_server, s3_bucket):
    fs = s3_server.filesystem()
    fs.pipe_file(f"{s3_bucket}/dir/a.txt", b"hello")
    assert fs.cat_file(f"{s3_bucket}/dir/a.txt") == b"hello"
    assert fs.ls(f"{s3_bucket}/dir", detail=False) == [f"{s3_bucket}/dir/a.txt"]


def test_put_if_absent_is_enforced(s3_server, s3_bucket):
    # A Delta commit is a put of NNN.json that must fail if the file exists ("Delta Log Entries");
    # the fixture server must refuse the second put as S3 does for If-None-Match: *.
    fs = s3_server.filesystem()
    path = f"{s3_bucket}/_delta_log/00000000000000000000.json"
    fs.pipe_file(path, b"first", mode="create")
    with pytest.raises(FileExistsError):
        fs.pipe_file(path, b"second", mode="create")
    assert fs.cat_file(path) == b"first"


def test_request_counter_counts_each_request(s3_server, s3_bucket, request_counter):
    fs = s3_server.filesystem()
    assert len(request_counter) == 0  # bucket creation is not counted

    fs.pipe_file(f"{s3_bucket}/k", b"x", mode="create")
    # s3fs's cat_file sends a HEAD (for the size) before the GET unless max_concurrency is 1.
    fs.cat_file(f"{s3_bucket}/k", max_concurrency=1)

    assert [(r.method, r.bucket, r.key) for r in request_counter.requests] == [
        ("PUT", s3_bucket, "k"),
        ("GET", s3_bucket, "k"),
    ]
    assert request_counter.requests[0].headers.get("if-none-match") == "*"
    assert request_counter.count(method="GET") == 1
    assert request_counter.counts() == {("PUT", f"/{s3_bucket}/k"): 1, ("GET", f"/{s3_bucket}/k"): 1}

    request_counter.clear()
    fs.ls(s3_bucket, refresh=True)
    (listing,) = request_counter.requests
    assert (listing.method, listing.bucket, listing.key) == ("GET", s3_bucket, "")
    assert listing.params.get("list-type") == "2"


def test_buckets_are_fresh(s3_server, s3_bucket):
    assert s3_server.filesystem().ls(s3_bucket) == []


def test_machine_aws_settings_do_not_leak(s3_server):
    assert os.environ["AWS_ACCESS_KEY_ID"] == "testing"
    assert "AWS_PROFILE" not in os.environ
    assert "AWS_SESSION_TOKEN" not in os.environ


def test_deltalake_writes_and_reads_on_the_server(s3_server, s3_bucket, request_counter):
    deltalake = pytest.importorskip("deltalake")
    uri = f"s3://{s3_bucket}/t"
    opts = s3_server.delta_storage_options

    deltalake.write_deltalake(uri, pa.table({"id": [1, 2]}), storage_options=opts)
    deltalake.write_deltalake(uri, pa.table({"id": [3]}), storage_options=opts, mode="append")

    table = deltalake.DeltaTable(uri, storage_options=opts)
    assert table.version() == 1
    assert sorted(table.to_pyarrow_table().column("id").to_pylist()) == [1, 2, 3]
    # deltalake committed through this server, with put-if-absent on each commit file.
    commits = [r for r in request_counter.requests if r.method == "PUT" and r.key.endswith(".json")]
    assert [r.key for r in commits] == [
        "t/_delta_log/00000000000000000000.json",
        "t/_delta_log/00000000000000000001.json",
    ]
    assert all(r.headers.get("if-none-match") == "*" for r in commits)
    # Our side (s3fs) sees the same log.
    fs = s3_server.filesystem()
    assert fs.exists(f"{s3_bucket}/t/_delta_log/00000000000000000001.json")
