"""OPTIMIZE with pyarrow in the task (``log.optimize``, ``DeltaTable.optimize``): the shared plan run bin by
bin, read with the scan, written with the Arrow writer, committed with Delta Spark's rules.

Tables are written by the core's Arrow writer (one small file per partition per append); the rows after
OPTIMIZE are read by delta-kernel-rs (a reader that is not ours) and compared with the rows before.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from delta_kernel_rust_sharing_wrapper import PythonInterface, ScanBuilder, Table

from airflow_provider_delta.log import DeltaTable
from airflow_provider_delta.log.base.errors import OptimizeError, PartitionFilterError, ZOrderColumnError
from airflow_provider_delta.log.features.row_tracking import (
    MATERIALIZED_ROW_COMMIT_VERSION,
    MATERIALIZED_ROW_ID,
)
from airflow_provider_delta.log.maintenance.optimize import describe, optimize

SEED = 5


def _rows(first: int, n: int, rng: np.random.Generator, parts: tuple[str, ...] = ("a", "b")) -> pa.Table:
    return pa.table({
        "id": pa.array(range(first, first + n), pa.int64()),
        "x": pa.array(rng.integers(0, 1000, n), pa.int32()),
        "y": pa.array(rng.integers(0, 1000, n), pa.int32()),
        "s": pa.array([{"z": int(v)} for v in rng.integers(0, 50, n)], pa.struct([("z", pa.int32())])),
        "p": pa.array([parts[i % len(parts)] for i in range(n)], pa.string()),
    })  # fmt: skip


def _table(root: Path, appends: int, rows: int = 20, config: dict | None = None) -> DeltaTable:
    """``appends`` commits of ``rows`` rows each, partitioned by p: one small file per partition each."""
    print(f"seed {SEED}")
    rng = np.random.default_rng(SEED)
    table = DeltaTable(str(root))
    for i in range(appends):
        table.write(_rows(i * rows, rows, rng), partition_by=["p"], configuration=config if i == 0 else None)
    return table


def theirs(root: Path) -> list[tuple]:
    """The rows as delta-kernel-rs reads them (deletion vectors applied), sorted."""
    url = root.resolve().as_uri() + "/"
    engine = PythonInterface(url)
    t = ScanBuilder(Table(url).snapshot(engine)).build().execute(engine).read_all()
    return sorted(zip(*(t.column(c).to_pylist() for c in ("id", "x", "y", "p")), strict=True))


def _data_files(root: Path) -> list[Path]:
    return sorted(root.rglob("*.parquet"))


def test_compaction_rewrites_small_files_into_one_per_partition(tmp_path: Path):
    table = _table(tmp_path / "t", 12)
    before = theirs(tmp_path / "t")
    reports: list[dict] = []
    metrics = table.optimize(progress=reports.append)
    assert theirs(tmp_path / "t") == before
    snap = table.snapshot()
    assert snap.num_files == 2 and metrics.num_files_added == 2 and metrics.num_files_removed == 24
    assert metrics.versions == [12] and metrics.partitions_optimized == 2 and metrics.num_bins == 2
    info = table.history(1)[0].commit_info
    assert info["operation"] == "OPTIMIZE" and info["isolationLevel"] == "SnapshotIsolation"
    assert info["operationParameters"] == {"predicate": "[]", "zOrderBy": "[]", "clusterBy": "[]",
                                           "auto": "false"}  # fmt: skip
    assert info["operationMetrics"]["numAddedFiles"] == "2"
    assert info["operationMetrics"]["numRemovedFiles"] == "24"
    log = (tmp_path / "t" / "_delta_log" / f"{12:020d}.json").read_text().splitlines()
    actions = [json.loads(line) for line in log[1:]]
    assert all(not next(iter(a.values()))["dataChange"] for a in actions)
    stats = [json.loads(s) for s in snap.files.column("stats").to_pylist()]
    assert sorted(s["numRecords"] for s in stats) == [120, 120] and all(s["minValues"] for s in stats)
    # Progress: planned once, bins counted up, bytes only growing, a final report of everything.
    assert reports[0]["files_planned"] == 24 and reports[0]["bins_done"] == 0
    assert [r["bins_done"] for r in reports] == sorted(r["bins_done"] for r in reports)
    final = reports[-1]
    assert final["final"] and final["bins_done"] == 2 and final["commits"] == 1
    assert final["bytes_read"] == final["bytes_planned"] == metrics.files_removed.total_size
    assert final["bytes_written"] == metrics.files_added.total_size
    assert "bins 2/2" in describe(final) and "done" in describe(final)
    # Nothing left to do: a second OPTIMIZE commits nothing.
    assert table.optimize().versions == [] and table.version() == 12


def test_deletion_vectors_are_applied_and_bins_commit_in_batches(tmp_path: Path):
    table = _table(tmp_path / "t", 3, config={"delta.enableDeletionVectors": "true"})
    path = table.snapshot().file_paths()[0]
    table.transaction().delete_rows({path: [0, 5, 7]}).commit("DELETE")
    before = theirs(tmp_path / "t")
    assert len(before) == 3 * 20 - 3
    metrics = optimize(table, batch_size=1)  # every bin its own commit
    assert metrics.versions == [4, 5] and metrics.num_batches == 2
    assert metrics.num_deletion_vectors_removed == 1
    assert theirs(tmp_path / "t") == before
    assert table.snapshot().files.column("deletionVector").null_count == 2


def test_partition_filter_compacts_only_the_partitions_it_selects(tmp_path: Path):
    table = _table(tmp_path / "t", 4)
    metrics = table.optimize(partition_filter=[("p", "=", "a")])
    assert metrics.num_files_removed == 4 and metrics.num_files_added == 1
    parts = [dict(v)["p"] for v in table.snapshot().files.column("partitionValues").to_pylist()]
    assert sorted(parts) == ["a", "b", "b", "b", "b"]
    assert table.history(1)[0].commit_info["operationParameters"]["predicate"] == '["p = \'a\'"]'


def test_zorder_narrows_each_files_ranges(tmp_path: Path):
    table = _table(tmp_path / "t", 20, rows=400)
    before = theirs(tmp_path / "t")
    size = int(pc.sum(table.snapshot().files.column("size")).as_py()) // 2  # per partition
    metrics = table.optimize(zorder_by=["x", "y"], max_file_size=size // 4)
    assert theirs(tmp_path / "t") == before
    assert metrics.zorder_stats["numOutputCubes"] == 2
    files = table.snapshot().files
    assert files.num_rows >= 6  # about 4 per partition
    stats = [json.loads(s) for s in files.column("stats").to_pylist()]
    # Each file holds a stretch of the Z-curve: together their boxes cover a fraction of what files of
    # randomly ordered rows would (each about the whole 1000 x 1000 square).
    areas = [(s["maxValues"]["x"] - s["minValues"]["x"]) * (s["maxValues"]["y"] - s["minValues"]["y"])
             for s in stats]  # fmt: skip
    assert sum(areas) < 0.7 * len(areas) * 1000 * 1000, areas
    assert table.history(1)[0].commit_info["operationParameters"]["zOrderBy"] == '["x", "y"]'


def test_zorder_by_a_nested_column(tmp_path: Path):
    table = _table(tmp_path / "t", 6, rows=300)
    before = theirs(tmp_path / "t")
    size = int(pc.sum(table.snapshot().files.column("size")).as_py()) // 2
    table.optimize(zorder_by=["s.z"], max_file_size=size // 3)
    assert theirs(tmp_path / "t") == before
    stats = [json.loads(s) for s in table.snapshot().files.column("stats").to_pylist()]
    spans = [s["maxValues"]["s"]["z"] - s["minValues"]["s"]["z"] for s in stats]
    assert len(spans) >= 4 and sum(spans) < 0.7 * len(spans) * 49, spans


def test_column_mapping_tables_keep_their_physical_names(tmp_path: Path):
    config = {"delta.columnMapping.mode": "name", "delta.minReaderVersion": "2",
              "delta.minWriterVersion": "5"}  # fmt: skip
    table = _table(tmp_path / "t", 4, config=config)
    before = theirs(tmp_path / "t")
    table.optimize()
    assert table.snapshot().num_files == 2
    assert theirs(tmp_path / "t") == before
    schema = pq.read_schema(tmp_path / "t" / table.snapshot().file_paths()[0])
    assert not set(schema.names) & {"id", "x", "y", "s"}  # physical names, not the logical ones


def test_row_ids_and_commit_versions_are_kept(tmp_path: Path):
    config = {"delta.enableRowTracking": "true", "delta.enableDeletionVectors": "true"}
    table = _table(tmp_path / "t", 5, config=config)
    path = table.snapshot().file_paths()[1]
    table.transaction().delete_rows({path: [2, 3]}).commit("DELETE")
    meta = ["row_id", "row_commit_version"]

    def tracked() -> list[tuple]:
        t = table.scan(["id"], metadata=meta).to_table()
        m = t.column("_metadata").combine_chunks()
        return sorted(zip(t.column("id").to_pylist(), m.field("row_id").to_pylist(),
                          m.field("row_commit_version").to_pylist(), strict=True))  # fmt: skip

    before = tracked()
    assert len({r[1] for r in before}) == len(before) == 98 and {r[2] for r in before} == {0, 1, 2, 3, 4}
    metrics = table.optimize(zorder_by=["x"])
    assert metrics.num_files_removed == 10 and tracked() == before
    # The ids live in the materialized columns the configuration names; the new files got fresh base ids
    # above every id handed out before (the high-water mark moved on), as Delta Spark's OPTIMIZE does.
    config = table.snapshot().metadata.configuration
    names = pq.read_schema(tmp_path / "t" / table.snapshot().file_paths()[0]).names
    assert config[MATERIALIZED_ROW_ID] in names and config[MATERIALIZED_ROW_COMMIT_VERSION] in names
    bases = table.snapshot().files.column("baseRowId").to_pylist()
    assert min(bases) > max(r[1] for r in before)
    # A row appended next gets a fresh id, unique in the table.
    table.write(_rows(1000, 1, np.random.default_rng(SEED)))
    ids = [r[1] for r in tracked()]
    assert len(ids) == len(set(ids)) == 99


def test_a_clustered_table_is_clustered_by_its_columns_and_files_carry_their_cube(tmp_path: Path):
    from airflow_provider_delta.log.maintenance.optimize_plan import ZCUBE_ID, ZCUBE_ZORDER_BY

    config = {"delta.feature.clustering": "supported", "delta.columnMapping.mode": "name"}
    rng = np.random.default_rng(SEED)
    table = DeltaTable(str(tmp_path / "t"))
    table.write(_rows(0, 300, rng), configuration=config)
    table.transaction().set_clustering_columns(["x", "y"]).commit("CLUSTER BY")
    for i in range(1, 6):
        table.write(_rows(i * 300, 300, rng))
    before = theirs(tmp_path / "t")
    size = int(pc.sum(table.snapshot().files.column("size")).as_py())
    metrics = table.optimize(max_file_size=size // 3)
    assert theirs(tmp_path / "t") == before and metrics.clustering_columns == ("x", "y")
    files = table.snapshot().files
    assert files.num_rows >= 2 and set(files.column("clusteringProvider").to_pylist()) == {"liquid"}
    tags = [dict(t) for t in files.column("tags").to_pylist()]
    assert len({t[ZCUBE_ID] for t in tags}) == 1 and {t[ZCUBE_ZORDER_BY] for t in tags} == {'["x","y"]'}
    info = table.history(1)[0].commit_info["operationParameters"]
    assert info["clusterBy"] == '["x", "y"]' and info["zOrderBy"] == "[]"
    assert table.optimize().versions == []  # one cube, already clustered: nothing to do


@pytest.mark.parametrize(
    ("options", "error", "message"),
    [
        ({"zorder_by": ["nope"]}, ZOrderColumnError, "'nope' is not in the schema"),
        ({"zorder_by": ["p"]}, ZOrderColumnError, "partition column"),
        ({"partition_filter": [("x", "=", 1)]}, PartitionFilterError, r"only partition columns .* \['x'\]"),
        ({"max_file_size": -1}, OptimizeError, "max_file_size"),
    ],
)
def test_bad_input_is_refused_by_name_and_nothing_is_written(tmp_path: Path, options, error, message):
    table = _table(tmp_path / "t", 3)
    files = _data_files(tmp_path / "t")
    with pytest.raises(error, match=message):
        table.optimize(**options)
    assert _data_files(tmp_path / "t") == files and table.version() == 2


def test_a_failing_bin_leaves_no_files(tmp_path: Path):
    table = _table(tmp_path / "t", 3)
    victim = tmp_path / "t" / table.snapshot().file_paths()[-1]
    victim.write_bytes(b"not parquet")
    data = _data_files(tmp_path / "t")
    with pytest.raises(Exception, match="(?i)parquet|magic"):
        table.optimize()
    assert _data_files(tmp_path / "t") == data and table.version() == 2


def test_a_concurrent_delete_fails_the_batch_deletes_its_files_and_keeps_earlier_batches(tmp_path: Path):
    from airflow_provider_delta.log import AddFile
    from airflow_provider_delta.log.base.errors import ConcurrentDeleteReadError

    table = _table(tmp_path / "t", 3)
    deleted: list[str] = []

    def concurrent_delete(report: dict) -> None:
        # The first batch is committed and the second bin written: a DELETE of one of its files lands
        # before the second commit, as another writer's would.
        if report["commits"] == 1 and report["bins_done"] == 2 and not deleted:
            # One of the files of the partition the first batch did not compact (bins are ordered by their
            # files' sizes, which the codec decides): three files still, where the compacted one has one.
            files = table.snapshot().files
            values = pc.map_lookup(files.column("partitionValues"), "p", "first")
            pending = next(p for p in ("a", "b") if pc.sum(pc.equal(values, p).cast("int64")).as_py() == 3)
            row = files.filter(pc.equal(values, pending)).to_pylist()[0]
            deleted.append(row["path"])
            table.transaction().remove_files([AddFile.from_dict(row).remove(0)]).commit("DELETE")

    with pytest.raises(ConcurrentDeleteReadError):
        table.optimize(batch_size=1, progress=concurrent_delete)
    snap = table.snapshot()
    assert deleted and snap.version == 4 and snap.num_files == 3  # one partition compacted, one less a file
    assert table.history(2)[1].operation == "OPTIMIZE"
    live_or_removed = set(snap.file_paths()) | {r["path"] for r in table.snapshot(2).files.to_pylist()}
    assert {p.relative_to(tmp_path / "t").as_posix() for p in _data_files(tmp_path / "t")} == live_or_removed


# -- deltalog optimize -------------------------------------------------------------------------------------
def test_deltalog_optimize_plans_compacts_and_refuses_by_name(tmp_path: Path, capsys):
    from airflow_provider_delta.log.cli.main import main

    table = _table(tmp_path / "t", 5)
    files = _data_files(tmp_path / "t")
    assert main(["optimize", table.uri, "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "would optimize" in out and "10 of 10 file(s)" in out and "2 bin(s) and 1 commit(s)" in out
    assert _data_files(tmp_path / "t") == files and table.version() == 4
    assert main(["optimize", table.uri, "--zorder-by", "nope"]) == 1
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "'nope'" in err and "not in the schema" in err
    assert main(["optimize", table.uri, "--partition", "p=a", "--progress"]) == 0
    out, err = capsys.readouterr()
    assert "optimized" in out and "version(s) 5" in out and "files removed" in out
    assert "optimizing [" in err and "100%" in err  # the progress bar on stderr
    assert table.snapshot().num_files == 6
    assert main(["optimize", table.uri, "--json", "--max-file-size", "1m"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["metrics"]["numFilesRemoved"] == 5 and doc["metrics"]["versions"] == [6]


# -- bounded memory ----------------------------------------------------------------------------------------
_MEMORY_CHILD = """
import json, sys, numpy as np, pyarrow as pa
from airflow_provider_delta.log import DeltaTable

def high_water():
    with open("/proc/self/status") as fh:
        return next(int(line.split()[1]) * 1024 for line in fh if line.startswith("VmHWM:"))

uri, files, rows, seed = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
if sys.argv[5] == "write":
    rng = np.random.default_rng(seed)
    table = DeltaTable(uri)
    for _ in range(files):  # one commit, one incompressible file each
        table.write(pa.table({"a": rng.integers(0, 2**62, rows), "b": rng.integers(0, 2**62, rows)}))
    print(json.dumps({"version": table.version()}))
    sys.exit()
pa.array([1]).sum(); np.random.default_rng(0)  # warm up what the work would import
before = high_water()
metrics = DeltaTable(uri).optimize(max_file_size=sys.maxsize)  # every file below 1 GiB: one bin, one file
print(json.dumps({"peak": high_water() - before, "removed": metrics.num_files_removed,
                  "added": metrics.num_files_added, "bytes": metrics.files_removed.total_size}))
"""
MEMORY_LIMIT = 128 * 1024 * 1024  # what OPTIMIZE may add to its resident memory
MEMORY_FILES, MEMORY_ROWS = 24, 640 * 1024  # 10 MiB of int64 pairs per file: 240 MiB in all


def test_a_bin_is_streamed_in_bounded_memory(tmp_path: Path):
    """The table is twice the limit and compacted into one file: OPTIMIZE must stream the bin."""
    print(f"seed {SEED}")
    uri = str(tmp_path / "big")

    def child(step: str) -> dict:
        args = [uri, str(MEMORY_FILES), str(MEMORY_ROWS), str(SEED), step]
        proc = subprocess.run([sys.executable, "-c", _MEMORY_CHILD, *args], capture_output=True, text=True,
                              timeout=600)  # fmt: skip
        assert proc.returncode == 0, proc.stderr[-3000:]
        return json.loads(proc.stdout.strip().splitlines()[-1])

    assert child("write")["version"] == MEMORY_FILES - 1
    result = child("optimize")
    print(f"OPTIMIZE of {result['bytes'] >> 20} MiB in {MEMORY_FILES} files: peak {result['peak'] >> 20} MiB "
          f"over imports (limit {MEMORY_LIMIT >> 20} MiB)")
    assert result["removed"] == MEMORY_FILES and result["added"] == 1
    assert result["bytes"] > 1.5 * MEMORY_LIMIT
    assert result["peak"] < MEMORY_LIMIT, f"OPTIMIZE held {result['peak'] >> 20} MiB"
    assert DeltaTable(uri).scan(["a"]).count() == MEMORY_FILES * MEMORY_ROWS
