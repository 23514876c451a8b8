"""checkpoint_with_spark against the core's single-machine checkpoint of the same table, row for row.

Each table is copied twice; the core checkpoints one copy, Spark the other, and the two checkpoints'
action rows (sorted, nulls dropped) must be equal. The tables mix what reconciliation must get right: a
previous checkpoint, removes and re-adds, deletion-vector updates of the same path, expired and live
tombstones, app transactions (one expired), domain metadata, escaped paths and partitions.
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import deltalake
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from airflow_provider_delta.log import AddFile, DeltaTable, RemoveFile
from airflow_provider_delta.spark import checkpoint_with_spark

DAY_MS = 86_400_000


def checkpoint_rows(root: Path, version: int) -> list[str]:
    out = []
    for f in sorted((root / "_delta_log").glob(f"{version:020d}.checkpoint*.parquet")):
        for row in pq.read_table(f).to_pylist(maps_as_pydicts="strict"):
            out.append(json.dumps(_drop_nulls(row), sort_keys=True, default=str))
    return sorted(out)


def _deltalake_files(root: Path) -> list[str]:
    return sorted(uri.split(str(root) + "/", 1)[1] for uri in deltalake.DeltaTable(str(root)).file_uris())


def _drop_nulls(value):
    if isinstance(value, dict):
        return {k: _drop_nulls(v) for k, v in value.items() if v is not None}
    return value


def _both(root: Path, tmp_path: Path) -> tuple[Path, Path]:
    core, spark = tmp_path / "core", tmp_path / "spark"
    shutil.copytree(root, core)
    shutil.copytree(root, spark)
    version = DeltaTable(str(core)).version()
    for copy in (core, spark):  # checkpoint the latest version afresh in both copies
        for f in (copy / "_delta_log").glob(f"{version:020d}.checkpoint*"):
            f.unlink()
    return core, spark


def _compare(spark_session, root: Path, tmp_path: Path, parts: int | None) -> tuple[Path, int, int]:
    core, ours = _both(root, tmp_path)
    version = DeltaTable(str(core)).version()
    DeltaTable(str(core)).checkpoint()
    pointer = checkpoint_with_spark(spark_session, str(ours), parts=parts)
    assert pointer.version == version
    expected = checkpoint_rows(core, version)
    assert checkpoint_rows(ours, version) == expected
    names = sorted(f.name for f in (ours / "_delta_log").glob(f"{version:020d}.checkpoint*.parquet"))
    assert len(names) == (parts or 1)
    assert pointer.size == len(expected) and pointer.parts == (parts if parts and parts > 1 else None)
    return ours, version, pointer.num_of_add_files


def _add(path: str, part: str, dv: dict | None = None) -> AddFile:
    stats = {"numRecords": 3, "minValues": {"id": 1}, "maxValues": {"id": 3}, "nullCount": {"id": 0}}
    if dv is not None:
        stats["tightBounds"] = False  # a file with a deletion vector has wide bounds
    stats = json.dumps(stats)
    return AddFile(path, 100, {"part": part}, 1_700_000_000_000, True, stats, deletion_vector=dv)


def _dv(n: int) -> dict:
    return {"storageType": "u", "pathOrInlineDv": f"ab{n:018d}", "offset": 1, "sizeInBytes": 36,
            "cardinality": n}  # fmt: skip


def _build_table(uri: str, configuration: dict[str, str] | None = None) -> None:
    config = {
        "delta.enableDeletionVectors": "true",
        "delta.feature.domainMetadata": "supported",
        "delta.setTransactionRetentionDuration": "interval 2 days",
        **(configuration or {}),
    }
    schema = pa.schema([("id", pa.int64()), ("part", pa.string())])
    table = DeltaTable.create(uri, schema, partition_by=["part"], configuration=config)
    for v in range(1, 12):  # crosses the automatic checkpoint at version 10
        txn = table.transaction()
        txn.add_files(
            [
                _add(f"part=p{v % 3}/f{v}.parquet", f"p{v % 3}"),
                _add(f"part=p{v % 3}/a b%{v}.parquet", f"p{v % 3}"),
            ]
        )
        txn.set_app_transaction(f"app-{v % 4}", v)
        if v == 4:
            txn.set_domain_metadata("example.domain", '{"v": 4}')
        if v == 5:
            txn.remove_files([_add("part=p1/f1.parquet", "p1")])
        txn.commit()
    snap = DeltaTable(uri).snapshot()  # a fresh handle: the one above updates its snapshot incrementally
    assert snap.segment.checkpoint_version == 10
    # A deletion vector replaces another on the same path; then the file is removed and added back.
    first, second = _add("part=p2/f2.parquet", "p2", _dv(1)), _add("part=p2/f2.parquet", "p2", _dv(2))
    table.transaction().remove_files([_add("part=p2/f2.parquet", "p2")]).add_files([first]).commit("DELETE")
    table.transaction().remove_files([first]).add_files([second]).commit("DELETE")
    table.transaction().remove_files([_add("part=p0/f3.parquet", "p0")]).commit("DELETE")
    table.transaction().add_files([_add("part=p1/f1.parquet", "p1")]).commit()
    # Hand-written: an expired tombstone and an expired app transaction.
    old = int(time.time() * 1000) - 30 * DAY_MS
    lines = [
        {"commitInfo": {"operation": "MANUAL"}},
        {"remove": RemoveFile("part=p1/f4.parquet", old, True, True, {"part": "p1"}, 100).to_json()},
        {"txn": {"appId": "old-app", "version": 7, "lastUpdated": old}},
        {"domainMetadata": {"domain": "example.domain", "configuration": '{"v": 16}', "removed": False}},
    ]
    (Path(uri) / "_delta_log" / "00000000000000000016.json").write_text(
        "\n".join(map(json.dumps, lines)) + "\n"
    )


@pytest.mark.parametrize("parts", [None, 3])
def test_same_rows_as_the_core_checkpoint(spark, tmp_path, parts):
    _build_table(str(tmp_path / "t"))
    ours, version, adds = _compare(spark, tmp_path / "t", tmp_path, parts)
    assert version == 16
    rows = checkpoint_rows(ours, version)
    assert not any('"old-app"' in r for r in rows) and any('"app-3"' in r for r in rows)
    assert not any("f4.parquet" in r for r in rows)  # the expired tombstone
    assert any("a%20b%25" in r for r in rows)  # paths re-encoded as URIs
    # Readers use the new checkpoint: the core and deltalake see the same files as from the JSON log.
    snap = DeltaTable(str(ours)).snapshot()
    assert snap.segment.checkpoint_version == 16 and snap.num_files == adds
    from_json = DeltaTable(str(tmp_path / "t")).snapshot()
    assert sorted(snap.file_paths()) == sorted(from_json.file_paths())
    assert snap.app_transactions == from_json.app_transactions
    assert _deltalake_files(ours) == _deltalake_files(tmp_path / "t")


def test_checkpoint_on_top_of_a_multi_part_checkpoint(spark, tmp_path):
    _build_table(str(tmp_path / "t"))
    ours, _, _ = _compare(spark, tmp_path / "t", tmp_path, 3)
    core = tmp_path / "core"
    now = int(time.time() * 1000)
    lines = [
        {"commitInfo": {"operation": "MANUAL"}},
        {"remove": RemoveFile("part=p2/f5.parquet", now, True, True, {"part": "p2"}, 100).to_json()},
        {"add": _add("part=p2/f17.parquet", "p2").to_json()},
        {"txn": {"appId": "app-1", "version": 17, "lastUpdated": now}},
    ]
    for root in (core, ours):
        (root / "_delta_log" / "00000000000000000017.json").write_text(
            "\n".join(map(json.dumps, lines)) + "\n"
        )
    DeltaTable(str(core)).checkpoint()
    checkpoint_with_spark(spark, str(ours), parts=2)  # reads the 3-part checkpoint of version 16
    assert checkpoint_rows(ours, 17) == checkpoint_rows(core, 17)
    assert any("f17.parquet" in r for r in checkpoint_rows(ours, 17))


def test_stats_as_struct_like_the_core(spark, tmp_path):
    _build_table(str(tmp_path / "t"), {"delta.checkpoint.writeStatsAsStruct": "true"})
    ours, version, _ = _compare(spark, tmp_path / "t", tmp_path, 2)
    assert any(
        '"stats_parsed"' in r and '"partitionValues_parsed"' in r for r in checkpoint_rows(ours, version)
    )


@pytest.mark.parametrize(
    "name",
    [
        "delta-golden/checkpoint",  # a previous checkpoint plus commits
        "delta-golden/dv-with-columnmapping",
        "delta-golden/log-replay-dv-key-cases",
        "delta-kernel-rs/app-txn-checkpoint",
    ],
)
def test_golden_tables(spark, golden_copy, tmp_path, name):
    _compare(spark, golden_copy(name), tmp_path, 2)
