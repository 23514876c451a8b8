"""Log segments and replay on hand-made logs: the cases real tables rarely show but readers must survive.

Each log is written action by action from the spec's examples, so the expected state is known without
running the code under test. ("Delta Log Entries", "Checkpoints", "Last Checkpoint File",
"Action Reconciliation").
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from airflow_provider_delta.log import (
    CorruptLogError,
    DeltaTable,
    TableNotFoundError,
    UnsupportedFeatureError,
    VersionNotFoundError,
)
from airflow_provider_delta.log.files.last_checkpoint import (
    canonicalize,
    json_checksum,
    parse_last_checkpoint,
)
from airflow_provider_delta.log.files.segment import reconstructable_commits
from airflow_provider_delta.log.files.storage import FileMeta

SCHEMA = json.dumps(
    {"type": "struct", "fields": [{"name": "id", "type": "long", "nullable": True, "metadata": {}}]}
)
PROTOCOL = {"protocol": {"minReaderVersion": 1, "minWriterVersion": 2}}
METADATA = {
    "metaData": {
        "id": "11111111-2222-3333-4444-555555555555",
        "format": {"provider": "parquet", "options": {}},
        "schemaString": SCHEMA,
        "partitionColumns": [],
        "configuration": {},
    }
}


def add(path: str, size: int = 10, **extra) -> dict:
    return {
        "add": {
            "path": path,
            "partitionValues": {},
            "size": size,
            "modificationTime": 1,
            "dataChange": True,
            **extra,
        }
    }


def remove(path: str, ts: int, **extra) -> dict:
    return {"remove": {"path": path, "deletionTimestamp": ts, "dataChange": True, **extra}}


def write_commit(root: Path, version: int, actions: list[dict], mtime_ms: int | None = None) -> Path:
    log = root / "_delta_log"
    log.mkdir(parents=True, exist_ok=True)
    p = log / f"{version:020d}.json"
    p.write_text("\n".join(json.dumps(a) for a in actions) + "\n")
    if mtime_ms is not None:
        os.utime(p, (mtime_ms / 1000, mtime_ms / 1000))
    return p


def write_checkpoint(root: Path, version: int, actions: list[dict], parts: int | None = None) -> list[Path]:
    """A classic (or multi-part) checkpoint with the spec's column layout, one action per row."""
    add_t = pa.struct(
        [
            ("path", pa.string()),
            ("partitionValues", pa.map_(pa.string(), pa.string())),
            ("size", pa.int64()),
            ("modificationTime", pa.int64()),
            ("dataChange", pa.bool_()),
        ]
    )
    rem_t = pa.struct([("path", pa.string()), ("deletionTimestamp", pa.int64()), ("dataChange", pa.bool_())])
    meta_t = pa.struct(
        [
            ("id", pa.string()),
            (
                "format",
                pa.struct([("provider", pa.string()), ("options", pa.map_(pa.string(), pa.string()))]),
            ),
            ("schemaString", pa.string()),
            ("partitionColumns", pa.list_(pa.string())),
            ("configuration", pa.map_(pa.string(), pa.string())),
        ]
    )
    prot_t = pa.struct([("minReaderVersion", pa.int32()), ("minWriterVersion", pa.int32())])
    txn_t = pa.struct([("appId", pa.string()), ("version", pa.int64())])
    schema = pa.schema(
        [("txn", txn_t), ("add", add_t), ("remove", rem_t), ("metaData", meta_t), ("protocol", prot_t)]
    )
    rows = []
    for a in actions:
        ((name, body),) = a.items()
        body = dict(body)
        for k in ("partitionValues", "configuration"):
            if k in body:
                body[k] = list(body[k].items())
        if name == "metaData":
            body["format"] = {"provider": "parquet", "options": []}
        rows.append({name: body})
    table = pa.Table.from_pylist(rows, schema=schema)
    log = root / "_delta_log"
    if parts is None:
        paths = [log / f"{version:020d}.checkpoint.parquet"]
        pq.write_table(table, paths[0])
        return paths
    paths = []
    per = -(-table.num_rows // parts)
    for i in range(parts):
        p = log / f"{version:020d}.checkpoint.{i + 1:010d}.{parts:010d}.parquet"
        pq.write_table(table.slice(i * per, per), p)
        paths.append(p)
    return paths


def write_last_checkpoint(root: Path, version: int, *, checksum: bool = True, **fields) -> None:
    body = {"version": version, "size": 1, **fields}
    if checksum:
        body["checksum"] = json_checksum(body)
    (root / "_delta_log" / "_last_checkpoint").write_text(json.dumps(body))


def paths(snapshot) -> set[str]:
    return set(snapshot.files.column("path").to_pylist())


@pytest.fixture
def table10(tmp_path: Path) -> Path:
    """Versions 0..10: v0 creates, v1..v10 each add f{v}; v5 removes f1."""
    write_commit(tmp_path, 0, [PROTOCOL, METADATA])
    for v in range(1, 11):
        acts = [add(f"f{v}.parquet", size=v)]
        if v == 5:
            acts.append(remove("f1.parquet", ts=2**62))
        write_commit(tmp_path, v, acts)
    return tmp_path


def expected_files(version: int) -> set[str]:
    live = {f"f{v}.parquet" for v in range(1, version + 1)}
    return live - {"f1.parquet"} if version >= 5 else live


# -- JSON checksum ("JSON checksum") ---------------------------------------------------------------------
def test_checksum_matches_the_spec_test_vector():
    sample = json.loads(
        '{"k0":"\'v 0\'", "checksum": "adsaskfljadfkjadfkj", "k1":{"k2": 2, "k3": ["v3", [1, 2], '
        '{"k4": "v4", "k5": ["v5", "v6", "v7"]}]}}'
    )
    assert canonicalize(sample) == (
        '"k0"="%27v%200%27","k1"+"k2"=2,"k1"+"k3"+0="v3","k1"+"k3"+1+0=1,"k1"+"k3"+1+1=2,'
        '"k1"+"k3"+2+"k4"="v4","k1"+"k3"+2+"k5"+0="v5","k1"+"k3"+2+"k5"+1="v6","k1"+"k3"+2+"k5"+2="v7"'
    )
    assert json_checksum(sample) == "6a92d155a59bf2eecbd4b4ec7fd1f875"


def test_last_checkpoint_with_wrong_checksum_or_duplicate_keys_is_ignored():
    assert parse_last_checkpoint(b'{"version": 3, "size": 4, "checksum": "00"}') is None
    assert parse_last_checkpoint(b'{"version": 3, "version": 4}') is None
    assert parse_last_checkpoint(b"{not json") is None
    good = {"version": 3, "size": 4}
    good["checksum"] = json_checksum(good)
    assert parse_last_checkpoint(json.dumps(good).encode()).version == 3


# -- replay ----------------------------------------------------------------------------------------------
def test_every_version_of_a_json_only_log(table10: Path):
    t = DeltaTable(str(table10))
    for v in range(11):
        assert paths(t.snapshot(version=v)) == expected_files(v)
    latest = t.snapshot()
    assert latest.version == 10
    assert latest.tombstones.column("path").to_pylist() == ["f1.parquet"]


def test_re_add_after_remove_and_latest_add_wins(tmp_path: Path):
    write_commit(tmp_path, 0, [PROTOCOL, METADATA, add("a.parquet", size=1)])
    write_commit(tmp_path, 1, [remove("a.parquet", ts=2**62)])
    write_commit(tmp_path, 2, [add("a.parquet", size=3)])
    write_commit(tmp_path, 3, [add("a.parquet", size=4, dataChange=False)])
    s = DeltaTable(str(tmp_path)).snapshot()
    assert s.files.select(["path", "size"]).to_pylist() == [{"path": "a.parquet", "size": 4}]
    assert s.tombstones.num_rows == 0


def test_paths_are_uri_decoded_and_reconciled_by_decoded_path(tmp_path: Path):
    write_commit(tmp_path, 0, [PROTOCOL, METADATA, add("p=a%20b/x%25y.parquet")])
    write_commit(tmp_path, 1, [add("p=c/z.parquet")])
    write_commit(tmp_path, 2, [remove("p=a b/x%y.parquet", ts=2**62)])
    s = DeltaTable(str(tmp_path)).snapshot()
    assert paths(s) == {"p=c/z.parquet"}
    assert s.tombstones.column("path").to_pylist() == ["p=a b/x%y.parquet"]


def test_deletion_vector_adds_are_keyed_by_path_and_dv_id(tmp_path: Path):
    dv1 = {
        "storageType": "u",
        "pathOrInlineDv": "ab^-aqEH.-t@S}K{vb[*k^",
        "offset": 1,
        "sizeInBytes": 36,
        "cardinality": 2,
    }
    dv2 = dict(dv1, offset=40, cardinality=3)
    write_commit(tmp_path, 0, [PROTOCOL, METADATA, add("a.parquet")])
    write_commit(tmp_path, 1, [remove("a.parquet", ts=2**62), add("a.parquet", deletionVector=dv1)])
    write_commit(
        tmp_path, 2, [remove("a.parquet", ts=2**62, deletionVector=dv1), add("a.parquet", deletionVector=dv2)]
    )
    s = DeltaTable(str(tmp_path)).snapshot()
    assert s.files.num_rows == 1
    assert s.files.column("deletionVector").to_pylist()[0]["cardinality"] == 3
    # the two removes are distinct tombstones: one without DV (v1), one with dv1 (v2)
    assert sorted((r["deletionVector"] or {}).get("offset", 0) for r in s.tombstones.to_pylist()) == [0, 1]


def test_expired_tombstones_are_dropped(tmp_path: Path):
    write_commit(tmp_path, 0, [PROTOCOL, METADATA, add("a.parquet"), add("b.parquet")])
    write_commit(tmp_path, 1, [remove("a.parquet", ts=1), remove("b.parquet", ts=2**62)])
    assert DeltaTable(str(tmp_path)).snapshot().tombstones.column("path").to_pylist() == ["b.parquet"]


def test_latest_protocol_metadata_and_txn_win(tmp_path: Path):
    meta2 = json.loads(json.dumps(METADATA))
    meta2["metaData"]["configuration"] = {"delta.appendOnly": "true"}
    write_commit(tmp_path, 0, [PROTOCOL, METADATA, {"txn": {"appId": "a", "version": 1}}])
    write_commit(
        tmp_path, 1, [meta2, {"txn": {"appId": "a", "version": 5}}, {"txn": {"appId": "b", "version": 2}}]
    )
    write_commit(
        tmp_path,
        2,
        [{"protocol": {"minReaderVersion": 1, "minWriterVersion": 3}}, {"txn": {"appId": "a", "version": 3}}],
    )
    s = DeltaTable(str(tmp_path)).snapshot()
    assert s.protocol.min_writer_version == 3
    assert s.metadata.configuration == {"delta.appendOnly": "true"}
    assert s.app_transactions == {"a": 3, "b": 2}  # latest seen wins, not the largest


def test_unknown_actions_and_fields_are_ignored(tmp_path: Path):
    write_commit(
        tmp_path,
        0,
        [PROTOCOL, METADATA, {"futureAction": {"x": 1}}, add("a.parquet", futureField={"y": [1]})],
    )
    assert paths(DeltaTable(str(tmp_path)).snapshot()) == {"a.parquet"}


# -- checkpoints and _last_checkpoint --------------------------------------------------------------------
def test_checkpoint_then_commits(table10: Path):
    write_checkpoint(
        table10,
        6,
        [PROTOCOL, METADATA]
        + [add(f"f{v}.parquet", size=v) for v in range(2, 7)]
        + [remove("f1.parquet", ts=2**62)],
    )
    write_last_checkpoint(table10, 6)
    (table10 / "_delta_log" / f"{3:020d}.json").unlink()  # commits before the checkpoint are not needed
    t = DeltaTable(str(table10))
    assert paths(t.snapshot()) == expected_files(10)
    assert t.snapshot().segment.checkpoint_version == 6
    assert paths(t.snapshot(version=6)) == expected_files(6)
    with pytest.raises(CorruptLogError, match="gap"):
        t.snapshot(version=4)  # needs commit 3, which is gone, and no checkpoint at or before 4


def test_stale_last_checkpoint_is_only_a_hint(table10: Path):
    write_checkpoint(table10, 4, [PROTOCOL, METADATA] + [add(f"f{v}.parquet", size=v) for v in range(1, 5)])
    write_checkpoint(
        table10,
        8,
        [PROTOCOL, METADATA]
        + [add(f"f{v}.parquet", size=v) for v in range(2, 9)]
        + [remove("f1.parquet", ts=2**62)],
    )
    write_last_checkpoint(table10, 4)  # stale: a newer checkpoint exists
    s = DeltaTable(str(table10)).snapshot()
    assert s.segment.checkpoint_version == 8 and paths(s) == expected_files(10)


@pytest.mark.parametrize("hint", ["missing-version", "bad-checksum", "garbage", "beyond-end"])
def test_untrustworthy_last_checkpoint_falls_back_to_listing(table10: Path, hint: str):
    write_checkpoint(table10, 4, [PROTOCOL, METADATA] + [add(f"f{v}.parquet", size=v) for v in range(1, 5)])
    lc = table10 / "_delta_log" / "_last_checkpoint"
    if hint == "missing-version":
        write_last_checkpoint(table10, 7)  # no checkpoint 7 exists
    elif hint == "bad-checksum":
        lc.write_text(json.dumps({"version": 9, "size": 1, "checksum": "0" * 32}))
    elif hint == "garbage":
        lc.write_bytes(b"\x00\x01 not json")
    else:
        write_last_checkpoint(table10, 40)
    s = DeltaTable(str(table10)).snapshot()
    assert s.version == 10 and paths(s) == expected_files(10)


def test_incomplete_multipart_checkpoint_uses_the_previous_complete_one(table10: Path):
    write_checkpoint(
        table10, 4, [PROTOCOL, METADATA] + [add(f"f{v}.parquet", size=v) for v in range(1, 5)], parts=2
    )
    parts8 = write_checkpoint(
        table10,
        8,
        [PROTOCOL, METADATA]
        + [add(f"f{v}.parquet", size=v) for v in range(2, 9)]
        + [remove("f1.parquet", ts=2**62)],
        parts=3,
    )
    parts8[1].unlink()
    write_last_checkpoint(table10, 8, parts=3)
    s = DeltaTable(str(table10)).snapshot()
    assert s.segment.checkpoint_version == 4
    assert s.segment.checkpoint.kind == "multi-part"
    assert paths(s) == expected_files(10)


def test_truncated_checkpoint_falls_back_to_an_older_one_or_json(table10: Path):
    (cp,) = write_checkpoint(
        table10,
        8,
        [PROTOCOL, METADATA]
        + [add(f"f{v}.parquet", size=v) for v in range(2, 9)]
        + [remove("f1.parquet", ts=2**62)],
    )
    cp.write_bytes(cp.read_bytes()[: cp.stat().st_size // 2])
    write_last_checkpoint(table10, 8)
    before = {p.name: p.read_bytes() for p in (table10 / "_delta_log").iterdir()}
    s = DeltaTable(str(table10)).snapshot()
    assert s.segment.checkpoint is None and paths(s) == expected_files(10)
    assert {p.name: p.read_bytes() for p in (table10 / "_delta_log").iterdir()} == before  # nothing written


def test_table_with_only_a_checkpoint(tmp_path: Path):
    write_commit(tmp_path, 0, [PROTOCOL, METADATA])
    write_checkpoint(tmp_path, 3, [PROTOCOL, METADATA, add("x.parquet")])
    (tmp_path / "_delta_log" / f"{0:020d}.json").unlink()
    t = DeltaTable(str(tmp_path))
    assert t.snapshot().version == 3 and paths(t.snapshot()) == {"x.parquet"}
    with pytest.raises(VersionNotFoundError):
        t.snapshot(version=2)


# -- bad input --------------------------------------------------------------------------------------------
def test_malformed_json_names_file_and_line(table10: Path):
    p = table10 / "_delta_log" / f"{7:020d}.json"
    p.write_text(p.read_text() + '{"add": {"path": "broken.parquet", \n')
    with pytest.raises(CorruptLogError) as err:
        DeltaTable(str(table10)).snapshot()
    assert p.name in str(err.value) and "line 2" in str(err.value)
    assert err.value.line == 2


def test_gap_in_versions_is_an_error(table10: Path):
    (table10 / "_delta_log" / f"{6:020d}.json").unlink()
    with pytest.raises(CorruptLogError, match="commit 6 is missing"):
        DeltaTable(str(table10)).snapshot()
    assert paths(DeltaTable(str(table10)).snapshot(version=5)) == expected_files(5)


def test_log_that_starts_after_zero_without_checkpoint(table10: Path):
    for v in range(3):
        (table10 / "_delta_log" / f"{v:020d}.json").unlink()
    with pytest.raises(VersionNotFoundError):
        DeltaTable(str(table10)).snapshot()


def test_version_beyond_the_end(table10: Path):
    with pytest.raises(VersionNotFoundError) as err:
        DeltaTable(str(table10)).snapshot(version=11)
    assert err.value.latest == 10


def test_not_a_table(tmp_path: Path):
    with pytest.raises(TableNotFoundError):
        DeltaTable(str(tmp_path)).snapshot()


@pytest.mark.parametrize(
    ("protocol", "named"),
    [
        ({"minReaderVersion": 4, "minWriterVersion": 7}, "reader version 4"),
        (
            {
                "minReaderVersion": 3,
                "minWriterVersion": 7,
                "readerFeatures": ["deletionVectors", "fancyNewThing"],
                "writerFeatures": ["deletionVectors", "fancyNewThing"],
            },
            "fancyNewThing",
        ),
    ],
)
def test_unsupported_protocols_name_the_feature(tmp_path: Path, protocol: dict, named: str):
    write_commit(tmp_path, 0, [{"protocol": protocol}, METADATA])
    with pytest.raises(UnsupportedFeatureError) as err:
        DeltaTable(str(tmp_path)).snapshot()
    assert err.value.features == (named.replace("reader version ", "readerVersion"),)
    assert named in str(err.value)


# -- time travel and history ------------------------------------------------------------------------------
def test_timestamps_never_go_backwards(tmp_path: Path):
    base = 1_700_000_000_000
    mtimes = [base, base + 1000, base + 500, base + 3000]  # commit 2 has an mtime before commit 1
    write_commit(tmp_path, 0, [PROTOCOL, METADATA], mtime_ms=mtimes[0])
    for v in range(1, 4):
        write_commit(tmp_path, v, [add(f"f{v}.parquet")], mtime_ms=mtimes[v])
    t = DeltaTable(str(tmp_path))
    assert [h.timestamp for h in reversed(t.history())] == [base, base + 1000, base + 1001, base + 3000]
    assert t.version_at(base + 1000) == 1
    assert t.version_at(base + 1001) == 2
    assert t.version_at(base + 2999) == 2
    assert t.version_at(base + 10**9) == 3
    assert t.snapshot(timestamp="2023-11-14T22:13:20.500Z").version == 0  # base + 500 ms, ISO form
    with pytest.raises(VersionNotFoundError):
        t.snapshot(timestamp=base - 1)


def test_in_commit_timestamps_win_over_mtimes(tmp_path: Path):
    meta = json.loads(json.dumps(METADATA))
    meta["metaData"]["configuration"] = {"delta.enableInCommitTimestamps": "true"}
    ict = 1_600_000_000_000
    p3 = {"protocol": {"minReaderVersion": 1, "minWriterVersion": 7, "writerFeatures": ["inCommitTimestamp"]}}
    write_commit(
        tmp_path, 0, [{"commitInfo": {"inCommitTimestamp": ict, "operation": "CREATE TABLE"}}, p3, meta]
    )
    for v in range(1, 4):
        write_commit(
            tmp_path,
            v,
            [{"commitInfo": {"inCommitTimestamp": ict + v * 10, "operation": "WRITE"}}, add(f"f{v}.parquet")],
        )
    t = DeltaTable(str(tmp_path))
    assert t.snapshot().timestamp == ict + 30
    assert t.snapshot(version=1).timestamp == ict + 10
    assert t.version_at(ict + 25) == 2
    assert [(h.version, h.timestamp, h.operation) for h in t.history(limit=2)] == [
        (3, ict + 30, "WRITE"),
        (2, ict + 20, "WRITE"),
    ]


def test_memory_filesystem(table10: Path):
    import fsspec

    fs = fsspec.filesystem("memory")
    for p in (table10 / "_delta_log").iterdir():
        fs.pipe(f"/t10/_delta_log/{p.name}", p.read_bytes())
    s = DeltaTable("memory://t10").snapshot()
    assert s.version == 10 and paths(s) == expected_files(10)


def test_a_handle_reads_only_new_commits_and_agrees_with_a_full_load(table10: Path):
    t = DeltaTable(str(table10))
    first = t.snapshot()
    assert t.snapshot() is first  # nothing new: the same snapshot, after one listing
    write_commit(table10, 11, [add("f11.parquet"), remove("f2.parquet", ts=2**62)])
    write_commit(table10, 12, [add("f2.parquet", size=99), {"txn": {"appId": "a", "version": 3}}])
    updated = t.snapshot()
    assert updated.version == 12 and [f.name for f in updated.segment.commits][-2:] == [
        f"{11:020d}.json",
        f"{12:020d}.json",
    ]
    full = DeltaTable(str(table10)).snapshot()
    rows = lambda s: sorted(s.files.select(["path", "size"]).to_pylist(), key=str)  # noqa: E731
    assert rows(updated) == rows(full)
    assert updated.app_transactions == full.app_transactions == {"a": 3}
    assert updated.tombstones.column("path").to_pylist() == full.tombstones.column("path").to_pylist()


@pytest.mark.parametrize(
    ("names", "expected"),
    [
        # A cleaned log: the cut-off checkpoint's commit and its successors.
        (["5.checkpoint.parquet", "5", "6", "7"], [5, 6, 7]),
        # Orphans a stale writer put below the gap (one, or two in a row) are no versions of the table.
        (["3", "5.checkpoint.parquet", "5", "6"], [5, 6]),
        (["3", "4", "5.checkpoint.parquet", "5", "6"], [5, 6]),
        # A checkpoint whose own commit was deleted roots the next one.
        (["2", "5.checkpoint.parquet", "6", "7"], [6, 7]),
        # A gap in a log that reads from 0 and again from a checkpoint keeps both runs (delta-rs's
        # errlogs-table_g), as does a multi-part checkpoint complete by its parts.
        (["0", "1", "9.checkpoint.0000000001.0000000001.parquet", "9"], [0, 1, 9]),
    ],
)
def test_only_commits_a_reader_can_reconstruct_are_versions(names: list[str], expected: list[int]) -> None:
    version_and_rest = (n.partition(".") for n in names)
    files = sorted(
        (FileMeta(f"{int(v):020d}.{rest or 'json'}", 1, 0) for v, _, rest in version_and_rest),
        key=lambda f: f.name,
    )
    assert [int(f.name[:20]) for f in reconstructable_commits(files)] == expected
