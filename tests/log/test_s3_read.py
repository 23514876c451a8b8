"""Our core on tables that deltalake (delta-rs) wrote to S3 (moto's server), compared with deltalake's reads.

Also pins the cost the style guide asks for: with ``_last_checkpoint`` present, the log is listed from the
checkpoint on ("Last Checkpoint File"), never from version 0.
"""

from __future__ import annotations

import datetime as dt
import json
import random
import uuid
from typing import Any
from urllib.parse import unquote

import deltalake
import pyarrow as pa
import pytest
from deltalake import CommitProperties, Transaction

from airflow_provider_delta.log import DeltaTable, Snapshot, VersionNotFoundError

pytestmark = pytest.mark.s3

SEED = 7
APPS = ("app-a", "app-b")
STRINGS = [None, "plain", "with space", "50%", "a/b", "k=v", "ünï ☃"]
INTS = [None, -1, 0, 7]
LATEST = 13
CHECKPOINTS = [3, 7, 11]  # deltalake checkpoints after every 4 commits


def _rows(rng: random.Random, first_id: int, n: int) -> pa.Table:
    return pa.table(
        {
            "id": pa.array(range(first_id, first_id + n), pa.int64()),
            "s": pa.array([rng.choice(STRINGS) for _ in range(n)], pa.string()),
            "n": pa.array([rng.choice(INTS) for _ in range(n)], pa.int32()),
            "x": pa.array([rng.random() for _ in range(n)], pa.float64()),
        }
    )


def _txn(*pairs: tuple[str, int]) -> CommitProperties:
    return CommitProperties(app_transactions=[Transaction(app, version) for app, version in pairs])


def build_table(uri: str, options: dict[str, str]) -> None:
    """14 commits (0..13) deltalake writes straight to S3: appends, deletes, an overwrite, a compaction."""
    rng = random.Random(SEED)

    def append(version: int, **kwargs: Any) -> None:
        deltalake.write_deltalake(
            uri, _rows(rng, 100 * version, 4), mode="append", storage_options=options, **kwargs
        )

    def table() -> deltalake.DeltaTable:
        return deltalake.DeltaTable(uri, storage_options=options)

    deltalake.write_deltalake(
        uri,
        _rows(rng, 0, 8),
        partition_by=["s", "n"],
        configuration={"delta.checkpointInterval": "4"},
        storage_options=options,
        commit_properties=_txn(("app-a", 0)),
    )
    steps = {
        2: lambda: table().delete("id < 3"),
        4: lambda: append(4, commit_properties=_txn(("app-a", 1), ("app-b", 50))),
        6: lambda: deltalake.write_deltalake(
            uri, _rows(rng, 600, 10), mode="overwrite", storage_options=options
        ),
        8: lambda: table().optimize.compact(),
        10: lambda: table().delete("s = 'with space'"),
        12: lambda: append(12, commit_properties=_txn(("app-b", 51))),
    }
    for version in range(1, LATEST + 1):
        steps.get(version, lambda v=version: append(v))()
        assert table().version() == version, "every step must commit exactly once"


def _partition_string(value: Any) -> str | None:
    return None if value is None else str(value)


def oracle_state(uri: str, version: int, raw_adds: dict[str, dict], options: dict[str, str]) -> dict:
    """deltalake's reading of ``version``; dataChange, which it does not expose, comes from the raw log."""
    table = deltalake.DeltaTable(uri, version=version, storage_options=options)
    files = {}
    for row in pa.table(table.get_add_actions(flatten=False)).to_pylist():
        path = unquote(row["path"])
        files[path] = {
            "size": row["size_bytes"],
            "modificationTime": row["modification_time"],
            "partitionValues": {k: _partition_string(v) for k, v in (row.get("partition") or {}).items()},
            "dataChange": raw_adds[path]["dataChange"],
        }
    protocol, metadata = table.protocol(), table.metadata()
    return {
        "version": table.version(),
        "files": files,
        "protocol": (protocol.min_reader_version, protocol.min_writer_version),
        "features": tuple(
            None if f is None else sorted(f) for f in (protocol.reader_features, protocol.writer_features)
        ),
        "metadata": (metadata.id, list(metadata.partition_columns), dict(metadata.configuration)),
        "schema": json.loads(table.schema().to_json()),
        "txns": {app: v for app in APPS if (v := table.transaction_version(app)) is not None},
    }


def our_state(snapshot: Snapshot) -> dict:
    files = {
        row["path"]: {
            "size": row["size"],
            "modificationTime": row["modificationTime"],
            "partitionValues": dict(row["partitionValues"] or []),
            "dataChange": row["dataChange"],
        }
        for row in snapshot.files.to_pylist()
    }
    p, m = snapshot.protocol, snapshot.metadata
    features = (
        None if p.reader_features is None else sorted(p.reader_features),
        None if p.writer_features is None else sorted(p.writer_features),
    )
    return {
        "version": snapshot.version,
        "files": files,
        "protocol": (p.min_reader_version, p.min_writer_version),
        "features": features,
        "metadata": (m.id, list(m.partition_columns), dict(m.configuration)),
        "schema": json.loads(m.schema_string),
        "txns": dict(snapshot.app_transactions),
    }


def assert_same_state(ours: dict, oracle: dict, version: int) -> None:
    for key in oracle:
        if key == "files":
            assert sorted(ours["files"]) == sorted(oracle["files"]), f"file set at version {version}"
            for path, expected in oracle["files"].items():
                assert ours["files"][path] == expected, f"{path} at version {version}"
        else:
            assert ours[key] == oracle[key], f"{key} at version {version}"


@pytest.fixture(scope="module")
def s3_table(s3_server) -> dict[str, Any]:
    """One table for the module (written once: each deltalake commit is several requests)."""
    bucket = f"delta-read-{uuid.uuid4().hex[:12]}"
    s3_server.client().create_bucket(Bucket=bucket)
    uri = f"s3://{bucket}/tables/t"
    build_table(uri, s3_server.delta_storage_options)
    client = s3_server.client()
    listing = client.list_objects_v2(Bucket=bucket, Prefix="tables/t/_delta_log/")["Contents"]
    raw_adds, mtimes, checkpoints = {}, {}, []
    for obj in listing:
        name = obj["Key"].rsplit("/", 1)[1]
        if name.endswith(".checkpoint.parquet"):
            checkpoints.append(int(name[:20]))
        if not name.endswith(".json"):
            continue
        mtimes[int(name[:20])] = int(obj["LastModified"].timestamp() * 1000)
        body = client.get_object(Bucket=bucket, Key=obj["Key"])["Body"].read().decode()
        for line in body.splitlines():
            if line.strip() and "add" in (action := json.loads(line)):
                raw_adds[unquote(action["add"]["path"])] = action["add"]
    assert sorted(checkpoints) == CHECKPOINTS
    last_cp = json.loads(
        client.get_object(Bucket=bucket, Key="tables/t/_delta_log/_last_checkpoint")["Body"].read()
    )
    return {
        "uri": uri,
        "bucket": bucket,
        "raw_adds": raw_adds,
        "mtimes": mtimes,
        "last_checkpoint": last_cp["version"],
    }


def test_every_version_matches_deltalake(s3_server, s3_table):
    ours = DeltaTable(s3_table["uri"], storage_options=s3_server.storage_options)
    opts = s3_server.delta_storage_options
    for v in range(LATEST + 1):
        oracle = oracle_state(s3_table["uri"], v, s3_table["raw_adds"], opts)
        assert_same_state(our_state(ours.snapshot(version=v)), oracle, v)
    latest = oracle_state(s3_table["uri"], LATEST, s3_table["raw_adds"], opts)
    assert_same_state(our_state(ours.snapshot()), latest, LATEST)
    # the scenario exercises what it should, seen from deltalake's side
    assert latest["txns"] == {"app-a": 1, "app-b": 51}
    assert {a["dataChange"] for a in s3_table["raw_adds"].values()} == {True, False}
    assert any("%25" in p for p in s3_table["raw_adds"])


def test_version_beyond_the_end(s3_server, s3_table):
    with pytest.raises(VersionNotFoundError):
        DeltaTable(s3_table["uri"], storage_options=s3_server.storage_options).snapshot(version=LATEST + 1)


def _local_copy_of_log(s3_server, s3_table, tmp_path) -> str:
    """The table's _delta_log downloaded with boto3, for deltalake's history() to read locally.

    deltalake 1.6.6's history() hangs against the test server (its second listing, on a kept-alive
    connection, reaches the server only after the client times out), so the oracle reads the same bytes here.
    """
    client = s3_server.client()
    prefix = "tables/t/_delta_log/"
    log_dir = tmp_path / "t" / "_delta_log"
    log_dir.mkdir(parents=True)
    for obj in client.list_objects_v2(Bucket=s3_table["bucket"], Prefix=prefix)["Contents"]:
        body = client.get_object(Bucket=s3_table["bucket"], Key=obj["Key"])["Body"].read()
        (log_dir / obj["Key"][len(prefix) :]).write_bytes(body)
    return str(tmp_path / "t")


def test_history_matches_deltalake(s3_server, s3_table, tmp_path):
    ours = DeltaTable(s3_table["uri"], storage_options=s3_server.storage_options)
    theirs = deltalake.DeltaTable(_local_copy_of_log(s3_server, s3_table, tmp_path))
    expected = [(h["version"], h["operation"]) for h in theirs.history()]
    assert [v for v, _ in expected] == list(range(LATEST, -1, -1))
    assert [(h.version, h.operation) for h in ours.history()] == expected
    assert [(h.version, h.operation) for h in ours.history(limit=3)] == expected[:3]


def test_time_travel_matches_s3_last_modified(s3_server, s3_table):
    # Commit timestamps are the objects' LastModified (read here with boto3; moto keeps whole seconds),
    # adjusted so they never go backwards: commits within one second get previous + 1 ms (Delta Spark's rule).
    mtimes = s3_table["mtimes"]
    adjusted, previous = {}, None
    for v in range(LATEST + 1):
        adjusted[v] = previous = mtimes[v] if previous is None else max(mtimes[v], previous + 1)
    ours = DeltaTable(s3_table["uri"], storage_options=s3_server.storage_options)
    assert [h.timestamp for h in ours.history()] == [adjusted[v] for v in range(LATEST, -1, -1)]
    for v, ts in adjusted.items():
        assert ours.snapshot(timestamp=ts).version == v, f"timestamp of version {v}"
        if v > 0:
            assert ours.snapshot(timestamp=ts - 1).version == v - 1, f"just before version {v}"
    with pytest.raises(VersionNotFoundError):
        ours.snapshot(timestamp=adjusted[0] - 1)
    # deltalake 1.6.6 does not adjust equal timestamps (among commits of one second it picks any), so it is
    # an oracle only for the last commit of each second, where both rules agree.
    last_of_second = [v for v in range(LATEST + 1) if v == LATEST or mtimes[v + 1] > mtimes[v]]
    for v in last_of_second:
        theirs = deltalake.DeltaTable(s3_table["uri"], storage_options=s3_server.delta_storage_options)
        theirs.load_as_version(dt.datetime.fromtimestamp(adjusted[v] / 1000, dt.UTC))
        assert (ours.version_at(adjusted[v]), theirs.version()) == (v, v)


def _log_listings(requests: list, bucket: str) -> list[dict[str, str]]:
    return [
        r.params
        for r in requests
        if r.method == "GET" and r.bucket == bucket and r.key == "" and r.params.get("list-type") == "2"
    ]


@pytest.mark.parametrize("version", [None, CHECKPOINTS[-1], LATEST - 1])
def test_listing_starts_at_the_checkpoint(s3_server, s3_table, request_counter, version):
    cp = s3_table["last_checkpoint"]
    assert cp == CHECKPOINTS[-1]  # deltalake wrote _last_checkpoint for its latest checkpoint
    snapshot = DeltaTable(s3_table["uri"], storage_options=s3_server.storage_options).snapshot(
        version=version
    )
    assert snapshot.version == (LATEST if version is None else version)

    listings = _log_listings(request_counter.requests, s3_table["bucket"])
    assert listings, "the snapshot must list the log"
    first_key = f"tables/t/_delta_log/{cp:020d}"
    for params in listings:
        assert params.get("prefix") == "tables/t/_delta_log/"
        assert params.get("start-after", "") >= first_key, params
        assert params["start-after"] < f"tables/t/_delta_log/{cp:020d}.checkpoint", params  # keeps cp's files


def test_listing_before_the_checkpoint_reads_from_the_start(s3_server, s3_table, request_counter):
    # A version older than _last_checkpoint cannot start there; it must still read as deltalake reads it.
    ours = DeltaTable(s3_table["uri"], storage_options=s3_server.storage_options)
    oracle = oracle_state(s3_table["uri"], 5, s3_table["raw_adds"], s3_server.delta_storage_options)
    request_counter.clear()
    assert_same_state(our_state(ours.snapshot(version=5)), oracle, 5)
    assert _log_listings(request_counter.requests, s3_table["bucket"])
