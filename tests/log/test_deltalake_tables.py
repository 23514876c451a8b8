"""Our core against deltalake (delta-rs) on tables deltalake itself writes.

deltalake is the oracle: every version of a partitioned table with checkpoints, overwrite, deletes,
compaction, a protocol upgrade and app transactions must read as deltalake reads it. Time travel and history
follow the spec's commit timestamps (file mtimes, never going backwards). Damaged logs either still read the
same (a bad checkpoint or ``_last_checkpoint``) or fail naming the damage.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import random
import shutil
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import deltalake
import fsspec
import pyarrow as pa
import pytest
from deltalake import CommitProperties, TableFeatures, Transaction

from airflow_provider_delta.log import CorruptLogError, DeltaTable, Snapshot, VersionNotFoundError

SEED = int(os.environ.get("DELTA_TEST_SEED", "20250611"))
APPS = ("app-a", "app-b")
# Partition values that need escaping in paths or in the log: spaces, '%', '/', '=', non-ASCII, null.
STRINGS = [None, "plain", "with space", "50%", "a/b", "k=v", "ünï ☃"]
INTS = [None, -1, 0, 7]
DATES = [None, dt.date(2024, 2, 29), dt.date(1970, 1, 1)]
N_COMMITS = 31
# Commit mtimes: 1 s apart from here, except that OUT_OF_ORDER is set before its predecessor.
BASE_MS = 1_700_000_000_000
OUT_OF_ORDER = 12


# -- the oracle's view and ours, in one comparable shape -----------------------------------------------------
def _partition_string(value: Any) -> str | None:
    """A typed partition value from deltalake in the log's form ("Partition Value Serialization")."""
    if value is None:
        return None
    if isinstance(value, dt.date):
        return value.isoformat()
    return str(value)


def oracle_state(uri: str, version: int, raw_adds: dict[str, dict], options: dict | None = None) -> dict:
    """What deltalake reads at ``version``. ``raw_adds`` (decoded path -> add action, read from the JSON log
    with ``json``) supplies dataChange, which deltalake's API does not expose."""
    table = deltalake.DeltaTable(uri, version=version, storage_options=options)
    adds = pa.table(table.get_add_actions(flatten=False)).to_pylist()
    files = {}
    for row in adds:
        path = unquote(row["path"])
        files[path] = {
            "size": row["size_bytes"],
            "modificationTime": row["modification_time"],
            "partitionValues": {k: _partition_string(v) for k, v in (row.get("partition") or {}).items()},
            "dataChange": raw_adds[path]["dataChange"],
            "numRecords": row["num_records"],
        }
    protocol = table.protocol()
    metadata = table.metadata()
    return {
        "version": table.version(),
        "files": files,
        "protocol": (
            protocol.min_reader_version,
            protocol.min_writer_version,
            None if protocol.reader_features is None else sorted(protocol.reader_features),
            None if protocol.writer_features is None else sorted(protocol.writer_features),
        ),
        "metadata": (metadata.id, list(metadata.partition_columns), dict(metadata.configuration)),
        "schema": json.loads(table.schema().to_json()),
        "txns": {app: v for app in APPS if (v := table.transaction_version(app)) is not None},
    }


def our_state(snapshot: Snapshot) -> dict:
    files = {}
    for row in snapshot.files.to_pylist():
        files[row["path"]] = {
            "size": row["size"],
            "modificationTime": row["modificationTime"],
            "partitionValues": dict(row["partitionValues"] or []),
            "dataChange": row["dataChange"],
            "numRecords": json.loads(row["stats"])["numRecords"] if row["stats"] else None,
        }
    p, m = snapshot.protocol, snapshot.metadata
    return {
        "version": snapshot.version,
        "files": files,
        "protocol": (
            p.min_reader_version,
            p.min_writer_version,
            None if p.reader_features is None else sorted(p.reader_features),
            None if p.writer_features is None else sorted(p.writer_features),
        ),
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


def raw_add_actions(log_dir: Path) -> dict[str, dict]:
    """Every add action of the JSON commits, by decoded path (deltalake never re-adds a path)."""
    out = {}
    for commit in sorted(log_dir.glob("*.json")):
        for line in commit.read_text().splitlines():
            if line.strip() and "add" in (action := json.loads(line)):
                out[unquote(action["add"]["path"])] = action["add"]
    return out


# -- the table -----------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Built:
    path: Path
    latest: int
    checkpoints: list[int]
    mtimes: dict[int, int]  # version -> commit file mtime (ms) as set by the test
    raw_adds: dict[str, dict]

    @property
    def uri(self) -> str:
        return str(self.path)

    def commit(self, version: int) -> Path:
        return self.path / "_delta_log" / f"{version:020d}.json"

    def adjusted(self) -> dict[int, int]:
        """Commit timestamps per the spec: file mtime, each at least 1 ms after the previous."""
        out, previous = {}, None
        for v in range(self.latest + 1):
            ts = self.mtimes[v] if previous is None else max(self.mtimes[v], previous + 1)
            out[v] = previous = ts
        return out


def _rows(rng: random.Random, next_id: int, n: int) -> pa.Table:
    return pa.table(
        {
            "id": pa.array(range(next_id, next_id + n), pa.int64()),
            "s": pa.array([rng.choice(STRINGS) for _ in range(n)], pa.string()),
            "n": pa.array([rng.choice(INTS) for _ in range(n)], pa.int32()),
            "d": pa.array([rng.choice(DATES) for _ in range(n)], pa.date32()),
            "x": pa.array([rng.random() for _ in range(n)], pa.float64()),
        }
    )


def _txn(*pairs: tuple[str, int]) -> CommitProperties:
    return CommitProperties(app_transactions=[Transaction(app, version) for app, version in pairs])


def build_table(path: Path, rng: random.Random) -> None:
    """31 commits (0..30): appends, deletes, an overwrite, compactions, a protocol upgrade, txns of two apps.

    With checkpointInterval 7 deltalake checkpoints after every 7 commits (at 6, 13, 20, 27); an explicit
    checkpoint is added at 10.
    """
    uri, next_id = str(path), 0

    def append(**kwargs: Any) -> None:
        nonlocal next_id
        n = rng.randint(2, 6)
        deltalake.write_deltalake(uri, _rows(rng, next_id, n), mode="append", **kwargs)
        next_id += n

    deltalake.write_deltalake(
        uri,
        _rows(rng, 0, 8),
        partition_by=["s", "n", "d"],
        configuration={"delta.checkpointInterval": "7"},
        commit_properties=_txn(("app-a", 0)),
    )
    next_id = 8
    steps = {
        3: lambda: deltalake.DeltaTable(uri).delete("id < 4"),  # rewrites files: removes and adds
        5: lambda: append(commit_properties=_txn(("app-a", 1), ("app-b", 100))),
        8: lambda: deltalake.DeltaTable(uri).delete("s = 'with space'"),  # whole partition: removes only
        11: lambda: deltalake.write_deltalake(uri, _rows(rng, 1000, 12), mode="overwrite"),
        13: lambda: deltalake.DeltaTable(uri).optimize.compact(),  # dataChange=false adds
        15: lambda: deltalake.DeltaTable(uri).alter.add_feature(
            TableFeatures.TimestampWithoutTimezone, allow_protocol_versions_increase=True
        ),
        17: lambda: append(commit_properties=_txn(("app-b", 101))),
        20: lambda: deltalake.DeltaTable(uri).delete("x > 0.5"),
        23: lambda: append(commit_properties=_txn(("app-a", 2))),
        24: lambda: deltalake.DeltaTable(uri).optimize.compact(),
        26: lambda: deltalake.DeltaTable(uri).delete("n IS NULL"),
    }
    for version in range(1, N_COMMITS):
        steps.get(version, append)()
        if version == 10:
            deltalake.DeltaTable(uri).create_checkpoint()
        assert deltalake.DeltaTable(uri).version() == version, "every step must commit exactly once"


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Built:
    print(f"test_deltalake_tables seed: {SEED} (set DELTA_TEST_SEED to replay)")
    path = tmp_path_factory.mktemp("deltalake") / "table"
    build_table(path, random.Random(SEED))
    log_dir = path / "_delta_log"
    mtimes = {v: BASE_MS + 1000 * v for v in range(N_COMMITS)}
    mtimes[OUT_OF_ORDER] = mtimes[OUT_OF_ORDER - 1] - 400  # goes backwards: the spec adjusts it to prev + 1
    for v, ms in mtimes.items():
        os.utime(log_dir / f"{v:020d}.json", ns=(ms * 1_000_000, ms * 1_000_000))
    checkpoints = sorted(int(p.name[:20]) for p in log_dir.glob("*.checkpoint.parquet"))
    assert checkpoints == [6, 10, 13, 20, 27]
    return Built(path, N_COMMITS - 1, checkpoints, mtimes, raw_add_actions(log_dir))


@pytest.fixture
def copy(built: Built, tmp_path: Path) -> Built:
    """A copy of the table (mtimes kept) that a test may damage."""
    target = tmp_path / "copy"
    shutil.copytree(built.path, target)
    return Built(target, built.latest, built.checkpoints, built.mtimes, built.raw_adds)


def assert_reads_like_oracle(ours: DeltaTable, built: Built, versions: range | list[int]) -> None:
    """``ours`` reads each version as deltalake reads the undamaged table ``built``."""
    for v in versions:
        assert_same_state(our_state(ours.snapshot(version=v)), oracle_state(built.uri, v, built.raw_adds), v)
    assert_same_state(
        our_state(ours.snapshot()), oracle_state(built.uri, built.latest, built.raw_adds), built.latest
    )


# -- every version -------------------------------------------------------------------------------------------
def test_the_table_exercises_what_it_should(built: Built):
    # Guards the scenario itself, from deltalake's side: escaped partition paths, null partitions, both
    # dataChange values, a protocol upgrade with features, and both apps' transactions.
    latest = oracle_state(built.uri, built.latest, built.raw_adds)
    assert any("%25" in p for p in built.raw_adds)  # '%' escaped twice: in the file name and in the log path
    assert any(a["partitionValues"]["s"] == "ünï ☃" for a in built.raw_adds.values())
    assert any(v is None for f in latest["files"].values() for v in f["partitionValues"].values())
    assert {a["dataChange"] for a in built.raw_adds.values()} == {True, False}
    assert oracle_state(built.uri, 14, built.raw_adds)["protocol"][:2] == (1, 2)
    assert latest["protocol"][:2] == (3, 7) and latest["protocol"][2] == ["timestampNtz"]
    assert latest["txns"] == {"app-a": 2, "app-b": 101}


def test_every_version_matches_deltalake(built: Built):
    table = DeltaTable(built.uri)
    for v in range(built.latest + 1):
        assert_same_state(our_state(table.snapshot(version=v)), oracle_state(built.uri, v, built.raw_adds), v)


def test_latest_and_file_uri_match_deltalake(built: Built):
    oracle = oracle_state(built.uri, built.latest, built.raw_adds)
    assert_same_state(our_state(DeltaTable(built.uri).snapshot()), oracle, built.latest)
    assert_same_state(our_state(DeltaTable(built.path.as_uri()).snapshot()), oracle, built.latest)


def test_version_beyond_the_end_is_not_found(built: Built):
    with pytest.raises(VersionNotFoundError):
        DeltaTable(built.uri).snapshot(version=built.latest + 1)
    with pytest.raises(deltalake.exceptions.DeltaError):  # the oracle agrees that it does not exist
        deltalake.DeltaTable(built.uri, version=built.latest + 1)


def test_date_partition_values_read_as_logged(tmp_path: Path):
    # Arrow's JSON reader infers strings like "2024-02-29" as timestamps when every value of a key in a batch
    # parses as one; partitionValues must still come back exactly as logged, not as "2024-02-29 00:00:00".
    uri = str(tmp_path / "dates")
    data = pa.table(
        {
            "id": pa.array([1, 2, 3], pa.int64()),
            "d": pa.array([dt.date(2024, 2, 29), dt.date(1970, 1, 1), None], pa.date32()),
            "label": pa.array(["2024-01-01", "2024-01-01 10:00:00", None]),  # strings that look like times
        }
    )
    deltalake.write_deltalake(uri, data, partition_by=["d", "label"])
    raw_adds = raw_add_actions(tmp_path / "dates" / "_delta_log")
    ours = our_state(DeltaTable(uri).snapshot())
    assert {p: f["partitionValues"] for p, f in ours["files"].items()} == {
        p: a["partitionValues"] for p, a in raw_adds.items()
    }
    assert_same_state(ours, oracle_state(uri, 0, raw_adds), 0)


# -- time travel ---------------------------------------------------------------------------------------------
def _deltalake_version_at(uri: str, ms: int) -> int:
    table = deltalake.DeltaTable(uri)
    table.load_as_version(dt.datetime.fromtimestamp(ms / 1000, dt.UTC))
    return table.version()


def test_time_travel_by_timestamp(built: Built):
    table = DeltaTable(built.uri)
    adjusted = built.adjusted()
    assert adjusted[OUT_OF_ORDER] == adjusted[OUT_OF_ORDER - 1] + 1 != built.mtimes[OUT_OF_ORDER]
    for v, ts in adjusted.items():
        assert table.snapshot(timestamp=ts).version == v, f"timestamp of version {v}"
        assert table.version_at(ts) == v
        assert _deltalake_version_at(built.uri, ts) == v
        if v > 0:
            assert table.snapshot(timestamp=ts - 1).version == v - 1, f"just before version {v}"
            assert _deltalake_version_at(built.uri, ts - 1) == v - 1
    # The raw (backwards) mtime of OUT_OF_ORDER is before its adjusted time: it still picks the predecessor's
    # predecessor, as deltalake does.
    raw = built.mtimes[OUT_OF_ORDER]
    assert table.version_at(raw) == _deltalake_version_at(built.uri, raw) == OUT_OF_ORDER - 2
    # Before the first commit the spec (and Delta Spark) refuse; deltalake 1.6.6 instead returns version 0,
    # so here ours is checked against the spec only.
    with pytest.raises(VersionNotFoundError):
        table.snapshot(timestamp=adjusted[0] - 1)
    beyond = adjusted[built.latest] + 86_400_000
    assert (
        table.snapshot(timestamp=beyond).version == built.latest == _deltalake_version_at(built.uri, beyond)
    )


def test_time_travel_accepts_datetimes_and_iso_strings(built: Built):
    table = DeltaTable(built.uri)
    ts = built.adjusted()[20]
    moment = dt.datetime.fromtimestamp(ts / 1000, dt.UTC)
    assert table.snapshot(timestamp=moment).version == 20
    assert table.snapshot(timestamp=moment.isoformat()).version == 20
    assert table.snapshot(timestamp=(moment - dt.timedelta(milliseconds=1)).isoformat()).version == 19


def test_snapshot_timestamp_is_the_commit_files_mtime(built: Built):
    table = DeltaTable(built.uri)
    for v in (0, 7, 10, 11, built.latest):  # in-order commits, checkpoint versions included
        assert table.snapshot(version=v).timestamp == built.mtimes[v]


# -- history -------------------------------------------------------------------------------------------------
def test_history_matches_deltalake(built: Built):
    ours = DeltaTable(built.uri).history()
    theirs = deltalake.DeltaTable(built.uri).history()
    assert [(h.version, h.operation) for h in ours] == [(h["version"], h["operation"]) for h in theirs]
    assert {h.operation for h in ours} >= {"WRITE", "DELETE", "OPTIMIZE", "ADD FEATURE"}
    adjusted = built.adjusted()
    assert [h.timestamp for h in ours] == [adjusted[v] for v in range(built.latest, -1, -1)]


@pytest.mark.parametrize("limit", [1, 5, N_COMMITS, N_COMMITS + 10])
def test_history_limit(built: Built, limit: int):
    ours = DeltaTable(built.uri).history(limit=limit)
    theirs = deltalake.DeltaTable(built.uri).history(limit)
    assert [(h.version, h.operation) for h in ours] == [(h["version"], h["operation"]) for h in theirs]
    assert len(ours) == min(limit, N_COMMITS)


# -- log cleanup ---------------------------------------------------------------------------------------------
def test_after_cleanup_metadata(tmp_path: Path):
    # A table of its own: on the main table, deltalake 1.6.6's set_table_properties adds the variantType
    # reader feature to the protocol, which this core refuses to read.
    uri, rng = str(tmp_path / "cleaned"), random.Random(SEED)
    config = {"delta.checkpointInterval": "100", "delta.logRetentionDuration": "interval 0 seconds"}
    deltalake.write_deltalake(uri, _rows(rng, 0, 6), partition_by=["s", "n"], configuration=config)
    for i in range(1, 7):  # 1..6
        deltalake.write_deltalake(
            uri, _rows(rng, 10 * i, 3), mode="append", commit_properties=_txn(("app-a", i))
        )
    deltalake.DeltaTable(uri).delete("id < 12")  # 7
    raw_adds = raw_add_actions(tmp_path / "cleaned" / "_delta_log")  # while commits 0..6 still exist
    deltalake.DeltaTable(uri).create_checkpoint()  # at 7
    for i in range(8, 11):  # 8..10; with no retention, deltalake's post-commit hook may clean up already
        deltalake.write_deltalake(uri, _rows(rng, 10 * i, 3), mode="append")
        raw_adds.update(raw_add_actions(tmp_path / "cleaned" / "_delta_log"))
    deltalake.DeltaTable(uri).cleanup_metadata()
    left = sorted(int(p.name[:20]) for p in (tmp_path / "cleaned" / "_delta_log").glob("*.json"))
    assert left == [7, 8, 9, 10], "deltalake's cleanup did not run as the scenario needs"

    ours = DeltaTable(uri)
    for v in range(11):
        try:
            oracle = oracle_state(uri, v, raw_adds)
        except deltalake.exceptions.DeltaError:  # deltalake cannot read it either
            assert v < 7
            with pytest.raises(VersionNotFoundError):
                ours.snapshot(version=v)
            continue
        assert v >= 7
        assert_same_state(our_state(ours.snapshot(version=v)), oracle, v)
    assert_same_state(our_state(ours.snapshot()), oracle_state(uri, 10, raw_adds), 10)
    assert [h.version for h in ours.history()] == [h["version"] for h in deltalake.DeltaTable(uri).history()]


# -- memory:// -----------------------------------------------------------------------------------------------
def test_memory_filesystem_reads_identically(built: Built):
    fs = fsspec.filesystem("memory")
    root = f"/delta-{uuid.uuid4().hex}/table"
    fs.put(str(built.path), root, recursive=True)
    try:
        table = DeltaTable(f"memory://{root}")
        for v in range(built.latest + 1):
            assert_same_state(
                our_state(table.snapshot(version=v)), oracle_state(built.uri, v, built.raw_adds), v
            )
        assert [h.version for h in table.history()] == list(range(built.latest, -1, -1))
    finally:
        fs.rm(root.rsplit("/", 1)[0], recursive=True)


# -- damage --------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "bad", [b"this is not json", b'{"add": {"path": "x.parquet", "size": ', b'{"txn": {"ap']
)
def test_malformed_line_names_file_and_line(copy: Built, bad: bytes):
    commit = copy.commit(copy.latest)  # after the last checkpoint, so every read of the latest replays it
    lines = commit.read_bytes().splitlines()
    commit.write_bytes(b"\n".join([*lines, bad]) + b"\n")
    with pytest.raises(CorruptLogError) as info:
        DeltaTable(copy.uri).snapshot()
    message = str(info.value)
    assert commit.name in message, message
    assert f"line {len(lines) + 1}" in message, message
    # Versions that do not include the damaged commit still read.
    assert_same_state(
        our_state(DeltaTable(copy.uri).snapshot(version=copy.latest - 1)),
        oracle_state(str(copy.path), copy.latest - 1, copy.raw_adds),
        copy.latest - 1,
    )


def test_gap_in_the_log_is_corrupt(copy: Built):
    gap = copy.checkpoints[-1] + 1
    assert gap < copy.latest
    copy.commit(gap).unlink()
    with pytest.raises(deltalake.exceptions.DeltaError):  # deltalake refuses too
        deltalake.DeltaTable(copy.uri, version=copy.latest)
    with pytest.raises(CorruptLogError, match=f"{gap:020d}.json"):
        DeltaTable(copy.uri).snapshot()
    with pytest.raises(CorruptLogError):
        DeltaTable(copy.uri).snapshot(version=gap)


@pytest.mark.parametrize("which", ["latest", "all"])
def test_truncated_checkpoint_falls_back(built: Built, copy: Built, which: str):
    log_dir = copy.path / "_delta_log"
    checkpoints = sorted(log_dir.glob("*.checkpoint.parquet"))
    for cp in checkpoints[-1:] if which == "latest" else checkpoints:
        data = cp.read_bytes()
        cp.write_bytes(data[: len(data) // 2])
    assert_reads_like_oracle(DeltaTable(copy.uri), built, range(copy.checkpoints[0], copy.latest + 1))


def _last_checkpoint_pointing_at(version: int, checksum: str | None) -> bytes:
    body: dict[str, Any] = {"version": version, "size": 10}
    if checksum is not None:
        body["checksum"] = checksum
    return json.dumps(body).encode()


@pytest.mark.parametrize(
    "content",
    [
        _last_checkpoint_pointing_at(10_000, None),  # a version that never existed
        _last_checkpoint_pointing_at(24, None),  # a commit without a checkpoint
        _last_checkpoint_pointing_at(27, "0" * 32),  # the real checkpoint, with a wrong checksum
        _last_checkpoint_pointing_at(29, "0" * 32),  # no checkpoint there, and a wrong checksum
        b'{"version": 27, "size"',  # torn write
    ],
    ids=["missing-version", "no-checkpoint-there", "bad-checksum", "bad-checksum-no-checkpoint", "torn"],
)
def test_bad_last_checkpoint_still_reads(built: Built, copy: Built, content: bytes):
    (copy.path / "_delta_log" / "_last_checkpoint").write_bytes(content)
    assert_reads_like_oracle(DeltaTable(copy.uri), built, [0, 9, 10, 24, 26, 27, 29, copy.latest])
