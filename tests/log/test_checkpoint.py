"""Checkpoints we write: readers (ours, delta-rs, the kernel) reconstruct the same snapshot from them.

Spec: "Checkpoints", "Checkpoint Format", "Last Checkpoint File"; V2 checkpoints with sidecars.
"""

from __future__ import annotations

import json
import os
import shutil
import urllib.parse
import zlib
from pathlib import Path

import deltalake
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from delta_kernel_rust_sharing_wrapper import PythonInterface, ScanBuilder, Table

from airflow_provider_delta.log import AddFile, DeltaTable
from airflow_provider_delta.log.files.last_checkpoint import json_checksum
from airflow_provider_delta.log.files.storage import LogStore

GOLDEN = Path(os.environ["DELTA_SHARED_DIR"]) / "golden"
# Tables covering partitions (escaped values, nulls), deletion vectors, column mapping, txns and CDF.
GOLDEN_TABLES = [
    "dat/multi_partitioned",
    "dat/partitioned_with_null",
    "dat/deletion_vectors",
    "delta-golden/dv-with-columnmapping",
    "delta-golden/data-reader-partition-values",
    "delta-kernel-rs/app-txn-no-checkpoint",
    "delta-kernel-rs/cdf-table",
    "delta-rs/delta-0.8.0-special-partition",
]
SCHEMA = pa.schema([("id", pa.int64()), ("p", pa.string())])


def copy_table(name: str, tmp_path: Path) -> Path:
    dst = tmp_path / "t"
    shutil.copytree(GOLDEN / name / "delta", dst)
    return dst


def state(snap) -> tuple:
    files = snap.files.select(["path", "size", "partitionValues", "deletionVector"]).to_pylist()
    files = sorted(
        (f["path"], f["size"], sorted(f["partitionValues"]), json.dumps(f["deletionVector"])) for f in files
    )
    return (snap.version, files, snap.protocol, snap.metadata, snap.app_transactions)


def delta_rs_state(root: Path) -> tuple[int, list]:
    dt = deltalake.DeltaTable(str(root))
    adds = pa.table(dt.get_add_actions(flatten=False))
    return dt.version(), sorted(
        (urllib.parse.unquote(p), s)
        for p, s in zip(adds.column("path").to_pylist(), adds.column("size_bytes").to_pylist(), strict=True)
    )


def kernel_version_rows(root: Path) -> tuple[int, int]:
    url = root.resolve().as_uri() + "/"
    engine = PythonInterface(url)
    snap = Table(url).snapshot(engine)
    return snap.version(), ScanBuilder(snap).build().execute(engine).read_all().num_rows


def kernel_version(root: Path) -> int:
    url = root.resolve().as_uri() + "/"
    return Table(url).snapshot(PythonInterface(url)).version()


def uses_checkpoint(root: Path, version: int) -> None:
    """Prove readers must use the checkpoint: hide every commit at or before it."""
    for f in (root / "_delta_log").glob("*.json"):
        if int(f.name.split(".")[0]) <= version:
            f.rename(f.with_name("." + f.name + ".hidden"))


@pytest.mark.parametrize("name", GOLDEN_TABLES)
@pytest.mark.parametrize("kind", ["classic", "multi-part", "stats-as-struct"])
def test_our_checkpoint_reads_back_identically_everywhere(tmp_path: Path, name: str, kind: str):
    root = copy_table(name, tmp_path)
    before = DeltaTable(str(root)).snapshot()
    delta_rs_before = delta_rs_state(root)
    if kind == "stats-as-struct":
        cfg = dict(before.metadata.configuration, **{"delta.checkpoint.writeStatsAsStruct": "true"})
        md = type(before.metadata)(**{**before.metadata.__dict__, "configuration": cfg})
        DeltaTable(str(root)).transaction().update_metadata(md).commit(
            "SET TBLPROPERTIES", auto_checkpoint=False
        )
        before = DeltaTable(str(root)).snapshot()
        delta_rs_before = delta_rs_state(root)
    kernel_before = kernel_version_rows(root) if "dv" not in name else None
    pointer = DeltaTable(str(root)).checkpoint(parts=3 if kind == "multi-part" else None)
    assert pointer.version == before.version and pointer.num_of_add_files == before.num_files
    uses_checkpoint(root, before.version)
    after = DeltaTable(str(root)).snapshot()
    assert after.segment.checkpoint_version == before.version and not after.segment.commits
    assert state(after) == state(before)
    assert delta_rs_state(root) == delta_rs_before
    if kernel_before is not None:
        assert kernel_version_rows(root) == kernel_before
    if kind == "stats-as-struct":
        cp = pq.read_table(root / "_delta_log" / f"{before.version:020d}.checkpoint.parquet")
        assert "stats_parsed" in cp.schema.field("add").type.names
        assert after.file_stats().to_pylist() == before.file_stats().to_pylist()


def test_last_checkpoint_carries_a_valid_checksum(tmp_path: Path):
    root = copy_table("dat/multi_partitioned", tmp_path)
    DeltaTable(str(root)).checkpoint(parts=2)
    body = json.loads((root / "_delta_log" / "_last_checkpoint").read_text())
    assert body["checksum"] == json_checksum(body)
    assert body["parts"] == 2 and body["numOfAddFiles"] == DeltaTable(str(root)).snapshot().num_files
    parts = sorted((root / "_delta_log").glob("*.checkpoint.*.parquet"))
    assert [p.name.split(".")[2:4] for p in parts] == [
        ["0000000001", "0000000002"],
        ["0000000002", "0000000002"],
    ]
    assert body["size"] == sum(pq.ParquetFile(p).metadata.num_rows for p in parts)


def test_multi_part_content_is_deterministic(tmp_path: Path):
    root = copy_table("dat/multi_partitioned", tmp_path)
    DeltaTable(str(root)).checkpoint(parts=2)
    first = [pq.read_table(p) for p in sorted((root / "_delta_log").glob("*.checkpoint.*.parquet"))]
    DeltaTable(str(root)).checkpoint(parts=2)  # a second attempt rewrites the same parts
    second = [pq.read_table(p) for p in sorted((root / "_delta_log").glob("*.checkpoint.*.parquet"))]
    assert [t.to_pylist() for t in first] == [t.to_pylist() for t in second]


def build(tmp_path: Path, configuration: dict[str, str] | None = None, commits: int = 12) -> DeltaTable:
    t = DeltaTable.create(str(tmp_path / "t"), SCHEMA, partition_by=["p"], configuration=configuration or {})
    for i in range(1, commits + 1):
        txn = t.transaction().add_files([AddFile(f"p={i % 3}/f{i}.parquet", 100 + i, {"p": str(i % 3)})])
        if i % 4 == 0:
            victim = AddFile.from_dict(t.snapshot().files.to_pylist()[0])
            txn.remove_files([victim])
        txn.set_app_transaction("app", i).commit(auto_checkpoint=False)
    return t


def test_checkpoint_of_an_older_version_and_tombstones(tmp_path: Path):
    t = build(tmp_path)
    old = t.snapshot(version=8)
    assert old.tombstones.num_rows == 2
    t.checkpoint(version=8)
    cp = pq.read_table(Path(t.uri) / "_delta_log" / f"{8:020d}.checkpoint.parquet")
    assert cp.column("remove").drop_null().to_pylist()[0]["path"] in old.tombstones.column("path").to_pylist()
    assert state(t.snapshot(version=8)) == state(old)
    assert t.snapshot(version=8).segment.checkpoint_version == 8
    fresh = DeltaTable(t.uri).snapshot()  # a new handle lists afresh; ``t`` reads only what is new
    assert fresh.version == 12 and fresh.segment.checkpoint_version == 8
    assert state(t.snapshot()) == state(fresh)


def test_pointer_never_moves_backwards(tmp_path: Path):
    t = build(tmp_path)
    t.checkpoint(version=10)
    t.checkpoint(version=5)
    assert json.loads((Path(t.uri) / "_delta_log" / "_last_checkpoint").read_text())["version"] == 10


def test_automatic_checkpoint_every_interval(tmp_path: Path):
    t = DeltaTable.create(
        str(tmp_path / "t"), SCHEMA, partition_by=["p"], configuration={"delta.checkpointInterval": "5"}
    )
    for i in range(1, 12):
        t.transaction().add_files([AddFile(f"p=a/f{i}.parquet", 1, {"p": "a"})]).commit()
    names = sorted(p.name for p in (Path(t.uri) / "_delta_log").glob("*.checkpoint.parquet"))
    assert names == [f"{5:020d}.checkpoint.parquet", f"{10:020d}.checkpoint.parquet"]
    assert delta_rs_state(Path(t.uri))[0] == 11


def test_expired_app_transactions_are_dropped(tmp_path: Path):
    t = build(tmp_path, {"delta.setTransactionRetentionDuration": "interval 1 days"}, commits=2)
    log = Path(t.uri) / "_delta_log"
    (log / f"{3:020d}.json").write_text(
        json.dumps({"txn": {"appId": "stale", "version": 9, "lastUpdated": 1000}}) + "\n"
    )
    assert "stale" not in t.snapshot().app_transactions
    t.checkpoint()
    txns = pq.read_table(log / f"{3:020d}.checkpoint.parquet").column("txn").drop_null().to_pylist()
    assert {x["appId"] for x in txns} == {"app"}


def test_v2_checkpoint_with_sidecars(tmp_path: Path):
    t = build(tmp_path, {"delta.checkpointPolicy": "v2", "delta.feature.v2Checkpoint": "supported"})
    assert "v2Checkpoint" in t.snapshot().protocol.reader_features
    before = t.snapshot()
    t.checkpoint(parts=2)
    root = Path(t.uri)
    tops = list((root / "_delta_log").glob(f"{before.version:020d}.checkpoint.*-*.parquet"))
    assert len(tops) == 1 and len(list((root / "_delta_log" / "_sidecars").glob("*.parquet"))) == 2
    uses_checkpoint(root, before.version)
    after = DeltaTable(str(root)).snapshot()
    assert after.segment.checkpoint.kind == "v2" and state(after) == state(before)
    assert kernel_version(root) == before.version  # its data files are not written: the log alone is read
    assert delta_rs_state(root) == (before.version, sorted((p, s) for p, s, *_ in state(before)[1]))


def test_interrupted_checkpoints_never_break_readers(tmp_path: Path):
    t = build(tmp_path)
    root = Path(t.uri)
    expected = state(t.snapshot())
    t.checkpoint(version=6)
    pointer_at_6 = (root / "_delta_log" / "_last_checkpoint").read_bytes()
    # A crash between parts: part 2 of 3 never landed and _last_checkpoint was never moved.
    t.checkpoint(version=12, parts=3)
    (root / "_delta_log" / f"{12:020d}.checkpoint.0000000002.0000000003.parquet").unlink()
    (root / "_delta_log" / "_last_checkpoint").write_bytes(pointer_at_6)
    assert state(DeltaTable(str(root)).snapshot()) == expected
    assert DeltaTable(str(root)).snapshot().segment.checkpoint_version == 6
    assert delta_rs_state(root)[0] == 12
    assert kernel_version(root) == 12
    # A crash after the checkpoint but before _last_checkpoint: the stale pointer is only a hint.
    t.checkpoint(version=12)
    (root / "_delta_log" / "_last_checkpoint").write_text(json.dumps({"version": 6, "size": 1}))
    assert DeltaTable(str(root)).snapshot().segment.checkpoint_version == 12
    assert state(DeltaTable(str(root)).snapshot()) == expected
    # Storage that tore a file (our own writes are atomic, but a copy tool may truncate): we fall back.
    single = root / "_delta_log" / f"{12:020d}.checkpoint.parquet"
    single.write_bytes(single.read_bytes()[:100])
    assert state(DeltaTable(str(root)).snapshot()) == expected


def test_a_transient_error_reading_a_written_checkpoint_back_is_not_a_corrupt_log(monkeypatch):
    # memory://, not local disk: its checkpoints are read back through open_input_file like any store's.
    uri = f"memory://read-back-{os.getpid()}-{id(monkeypatch)}/t"
    t = DeltaTable.create(uri, pa.schema([("a", pa.int64())]))
    for i in range(3):
        t.transaction().add_files([AddFile(f"f{i}.parquet", 1)]).commit()
    real_open = LogStore.open_input_file
    failures = {"left": 1}

    def flaky(store: LogStore, path: str):
        if ".checkpoint." in path and failures["left"]:
            failures["left"] -= 1
            raise ConnectionResetError("injected: connection reset")
        return real_open(store, path)

    monkeypatch.setattr(LogStore, "open_input_file", flaky)
    assert t.checkpoint().version == 3  # read back again after the reset
    # A store that keeps failing: the error says so, and _last_checkpoint stays where it was.
    t.transaction().add_files([AddFile("f3.parquet", 1)]).commit()
    failures["left"] = 99
    with pytest.raises(ConnectionResetError):
        t.checkpoint()
    assert DeltaTable(t.uri).snapshot().segment.checkpoint_version == 3


def test_multi_part_parts_follow_the_crc32_of_each_path(tmp_path: Path):
    """Each file action lands in the part its path's CRC-32 names, the small actions in the first: two
    writers of the same checkpoint write the same parts whatever order their file lists are in."""
    t = build(tmp_path, commits=20)
    t.checkpoint(parts=3)
    parts = sorted((tmp_path / "t" / "_delta_log").glob(f"{20:020d}.checkpoint.*.parquet"))
    assert len(parts) == 3
    for i, part in enumerate(parts):
        table = pq.read_table(part)
        for row in table.to_pylist():
            action = row["add"] or row["remove"]
            if action is None:
                assert i == 0, row  # protocol, metaData, txn
            else:
                assert zlib.crc32(action["path"].encode()) % 3 == i
    read_back = DeltaTable(str(tmp_path / "t")).snapshot()
    assert sorted(read_back.file_paths()) == sorted(t.snapshot().file_paths())


@pytest.mark.parametrize("parts", [None, 2])
@pytest.mark.parametrize("policy", ["classic", "v2"])
def test_a_checkpoint_streams_from_the_previous_one(tmp_path: Path, monkeypatch, parts, policy):
    """With a version checksum, a checkpoint is written from the previous checkpoint and the commits as
    they stream by: the file list is never replayed whole, and what is written reads back as the log."""
    v2 = {"delta.checkpointPolicy": "v2", "delta.feature.v2Checkpoint": "supported"}
    config = v2 if policy == "v2" else {}
    t = build(tmp_path, configuration=config, commits=12)
    t.checkpoint(10)
    expected = (sorted(t.snapshot().file_paths()), t.snapshot().app_transactions)
    from airflow_provider_delta.log.snapshot import snapshot as snapshot_module

    def no_whole_replay(*args, **kwargs):
        raise AssertionError("the file list was replayed whole")

    monkeypatch.setattr(snapshot_module, "replay_version", no_whole_replay)
    cold = DeltaTable(str(tmp_path / "t"))
    pointer = cold.checkpoint(parts=parts)
    assert pointer.version == 12 and pointer.num_of_add_files == len(expected[0])
    monkeypatch.undo()
    snap = DeltaTable(str(tmp_path / "t")).snapshot()
    assert snap.segment.checkpoint is not None and snap.segment.checkpoint.version == 12
    assert (sorted(snap.file_paths()), snap.app_transactions) == expected
    dt = deltalake.DeltaTable(str(tmp_path / "t"))
    if policy == "classic":
        assert sorted(dt.file_uris()) == sorted(str(tmp_path / "t" / p) for p in expected[0])


@pytest.mark.parametrize(
    ("configuration", "parsed"),
    [
        ({"delta.dataSkippingNumIndexedCols": "0"}, ["numRecords", "tightBounds"]),
        ({"delta.dataSkippingStatsColumns": "b"}, ["numRecords", "nullCount", "tightBounds"]),  # no min/max
    ],
)
def test_stats_as_struct_without_indexed_columns(tmp_path: Path, configuration: dict, parsed: list):
    """``stats_parsed`` leaves out minValues, maxValues or nullCount when no indexed column falls under it:
    Parquet has no empty struct, and checkpoint() failed with ArrowNotImplementedError (found by make fuzz,
    seed 5050, on a table partitioned by its only column)."""
    config = {**configuration, "delta.checkpoint.writeStatsAsStruct": "true"}
    schema = pa.schema([("a", pa.int64()), ("b", pa.bool_())])
    t = DeltaTable.create(str(tmp_path), schema, configuration=config)
    t.write(pa.table({"a": [1, 2], "b": [True, None]}))
    assert t.checkpoint().version == 1
    written = pq.read_schema(tmp_path / "_delta_log" / f"{1:020d}.checkpoint.parquet")
    assert [f.name for f in written.field("add").type.field("stats_parsed").type] == parsed
    fresh = DeltaTable(str(tmp_path))
    assert fresh.scan(filter="a > 1").to_table().to_pylist() == [{"a": 2, "b": None}]
    assert fresh.scan(filter="b IS NULL").to_table().num_rows == 1
    assert deltalake.DeltaTable(str(tmp_path)).to_pyarrow_table().num_rows == 2
