"""OPTIMIZE on Spark: executors read and write, the driver commits; local[2] and the standalone cluster.

Tables are written by the core (many small files, deletion vectors, column mapping); after OPTIMIZE the
rows read by delta-kernel-rs (a reader that is not ours) are the rows before, the files are fewer, and
the commit says what Delta Spark's would.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from delta_kernel_rust_sharing_wrapper import PythonInterface, ScanBuilder, Table

from airflow_provider_delta.log import DeltaTable, add_file_from_parquet
from airflow_provider_delta.log.base.errors import ZOrderColumnError
from airflow_provider_delta.spark import optimize, write
from airflow_provider_delta.spark.read import SLICE_BYTES, read_slices, task_frame

SCHEMA = pa.schema([("id", pa.int64()), ("x", pa.int32()), ("y", pa.int32()), ("p", pa.string())])


def _table(root: Path, files_per_partition: int, rows: int = 20, config: dict | None = None) -> DeltaTable:
    """Small files in partitions a and b; x and y spread evenly, in random order (seeded)."""
    table = DeltaTable.create(str(root), SCHEMA, partition_by=["p"], configuration=config)
    rng = np.random.default_rng(5)
    adds = []
    for p in ("a", "b"):
        for i in range(files_per_partition):
            first = len(adds) * rows
            rel = f"p={p}/part-{i:04d}.parquet"
            (root / f"p={p}").mkdir(exist_ok=True)
            pq.write_table(pa.table({
                "id": pa.array(range(first, first + rows), pa.int64()),
                "x": pa.array(rng.integers(0, 1000, rows), pa.int32()),
                "y": pa.array(rng.integers(0, 1000, rows), pa.int32()),
            }), root / rel)  # fmt: skip
            adds.append(add_file_from_parquet(table, rel, {"p": p}))
    table.transaction().add_files(adds).commit()
    return table


def kernel_rows(root: Path) -> list[tuple]:
    """The rows as delta-kernel-rs reads them (deletion vectors applied), sorted."""
    url = root.resolve().as_uri() + "/"
    engine = PythonInterface(url)
    t = ScanBuilder(Table(url).snapshot(engine)).build().execute(engine).read_all()
    return sorted(zip(*(t.column(c).to_pylist() for c in ("id", "x", "y", "p")), strict=True))


def test_compaction_on_spark_rewrites_small_files_into_one_per_partition(spark, tmp_path: Path):
    table = _table(tmp_path / "t", 12)
    before = kernel_rows(tmp_path / "t")
    metrics = optimize(spark, table.uri)
    assert kernel_rows(tmp_path / "t") == before
    snap = table.snapshot()
    assert snap.num_files == 2 and metrics.num_files_added == 2 and metrics.num_files_removed == 24
    assert metrics.versions == [2] and metrics.partitions_optimized == 2 and metrics.num_bins == 2
    info = table.history(1)[0].commit_info
    assert info["operation"] == "OPTIMIZE" and info["isolationLevel"] == "SnapshotIsolation"
    assert info["operationParameters"] == {"predicate": "[]", "zOrderBy": "[]", "clusterBy": "[]",
                                           "auto": "false"}  # fmt: skip
    assert info["operationMetrics"]["numAddedFiles"] == "2"
    assert info["operationMetrics"]["numRemovedFiles"] == "24"
    log = (tmp_path / "t" / "_delta_log" / f"{2:020d}.json").read_text().splitlines()
    actions = [json.loads(line) for line in log[1:]]
    assert all(not next(iter(a.values()))["dataChange"] for a in actions)
    # Nothing left to do: a second OPTIMIZE commits nothing.
    assert optimize(spark, table.uri).versions == []


def test_deletion_vectors_are_applied_and_files_in_batches(spark, tmp_path: Path):
    table = _table(tmp_path / "t", 3, config={"delta.enableDeletionVectors": "true"})
    table.transaction().delete_rows({table.snapshot().file_paths()[0]: [0, 5, 7]}).commit("DELETE")
    before = kernel_rows(tmp_path / "t")
    assert len(before) == 6 * 20 - 3
    metrics = optimize(spark, table.uri, batch_size=1)  # every bin its own commit
    assert metrics.versions == [3, 4] and metrics.num_batches == 2
    assert metrics.num_deletion_vectors_removed == 1
    assert kernel_rows(tmp_path / "t") == before
    assert table.snapshot().files.column("deletionVector").null_count == 2


def test_zorder_on_spark_narrows_each_files_ranges(spark, tmp_path: Path):
    table = _table(tmp_path / "t", 20, rows=200)
    before = kernel_rows(tmp_path / "t")
    size = int(pc.sum(table.snapshot().files.column("size")).as_py()) // 2  # per partition
    metrics = optimize(spark, table.uri, zorder_by=["x", "y"], max_file_size=size // 4)
    assert kernel_rows(tmp_path / "t") == before
    assert metrics.zorder_stats["numOutputCubes"] == 2
    files = table.snapshot().files
    # About 4 per partition (cut_keys places a cut only where a block of the curve begins near it); each
    # file the plan cuts is a Spark partition of its own, never merged with the next.
    assert files.num_rows >= 6
    stats = [json.loads(s) for s in files.column("stats").to_pylist()]
    # Each file holds a stretch of the Z-curve: together their boxes cover a fraction of what files of
    # randomly ordered rows would (each about the whole 1000 x 1000 square).
    areas = [(s["maxValues"]["x"] - s["minValues"]["x"]) * (s["maxValues"]["y"] - s["minValues"]["y"])
             for s in stats]  # fmt: skip
    assert sum(areas) < 0.7 * len(areas) * 1000 * 1000, areas
    info = table.history(1)[0].commit_info
    assert info["operationParameters"]["zOrderBy"] == '["x", "y"]'


def test_column_mapping_tables_keep_their_physical_names(spark, tmp_path: Path):
    config = {"delta.columnMapping.mode": "name", "delta.minReaderVersion": "2",
              "delta.minWriterVersion": "5"}  # fmt: skip
    root = tmp_path / "t"
    table = DeltaTable.create(str(root), SCHEMA, partition_by=["p"], configuration=config)
    for i in range(4):
        rows = [(i * 10 + k, k, k, "a") for k in range(10)]
        df = spark.createDataFrame(rows, "id long, x int, y int, p string")
        write(df, table.uri)
    before = kernel_rows(root)
    optimize(spark, table.uri)
    assert table.snapshot().num_files == 1
    assert kernel_rows(root) == before
    schema = pq.read_schema(root / table.snapshot().file_paths()[0])
    assert not set(schema.names) & {"id", "x", "y"}  # physical names, not the logical ones


def test_bad_zorder_column_writes_nothing(spark, tmp_path: Path):
    table = _table(tmp_path / "t", 2)
    files = sorted(p for p in (tmp_path / "t").rglob("*.parquet"))
    with pytest.raises(ZOrderColumnError):
        optimize(spark, table.uri, zorder_by=["p"])
    assert sorted(p for p in (tmp_path / "t").rglob("*.parquet")) == files and table.version() == 1


def test_a_failing_job_leaves_no_files(spark, tmp_path: Path):
    table = _table(tmp_path / "t", 3)
    victim = tmp_path / "t" / table.snapshot().file_paths()[-1]
    victim.write_bytes(b"not parquet")
    data = sorted(p for p in (tmp_path / "t").rglob("*.parquet"))
    with pytest.raises(Exception, match="(?i)parquet|magic"):
        optimize(spark, table.uri)
    assert sorted(p for p in (tmp_path / "t").rglob("*.parquet")) == data and table.version() == 1


def test_row_ids_and_commit_versions_are_kept(spark, tmp_path: Path):
    from airflow_provider_delta.spark.read import read

    config = {"delta.enableRowTracking": "true", "delta.enableDeletionVectors": "true"}
    table = _table(tmp_path / "t", 1, config=config)
    for i in range(3):  # more commits: rows of several versions
        rows = pa.table({"id": pa.array(range(1000 + 10 * i, 1010 + 10 * i), pa.int64()),
                         "x": pa.array([i] * 10, pa.int32()), "y": pa.array([i] * 10, pa.int32()),
                         "p": ["a"] * 5 + ["b"] * 5})  # fmt: skip
        table.write(rows)
    table.transaction().delete_rows({table.snapshot().file_paths()[0]: [1, 4]}).commit("DELETE")

    def tracked() -> list[tuple]:
        df = read(spark, table.uri, metadata=["row_id", "row_commit_version"])
        return sorted(df.selectExpr("id", "_metadata.row_id", "_metadata.row_commit_version").collect())

    before = tracked()
    assert len(before) == 40 + 30 - 2 and len({r[1] for r in before}) == len(before)
    metrics = optimize(spark, table.uri, zorder_by=["x"])
    assert metrics.num_files_removed == 8 and table.snapshot().num_files == 2
    assert tracked() == before
    # The new files got fresh base ids above every id handed out; the rows keep theirs.
    assert min(table.snapshot().files.column("baseRowId").to_pylist()) > max(r[1] for r in before)


@pytest.mark.parametrize(
    ("files", "size", "expected"),
    [
        (10_000, 2_600, 2),  # many small files: one task per core
        (1, 10**9, 1),  # never more tasks than files
        (3, 10**9, 3),
        (100, 100 * 2**20, 8),  # a big bin: about SLICE_BYTES a task, at most four per core
        (40, SLICE_BYTES, 8),
        (5, SLICE_BYTES, 5),
        (0, 0, 1),
    ],
)
def test_a_bin_is_read_by_one_task_per_core_unless_its_bytes_call_for_more(files, size, expected) -> None:
    table = pa.table({"size": pa.array([size] * files, pa.int64())})
    assert read_slices(table, parallelism=2) == expected


@pytest.mark.parametrize("rows, slices, expected", [(10, 3, 3), (10, 2, 2), (2, 8, 2), (1, 1, 1)])
def test_task_frame_gives_a_partition_per_slice(spark, rows, slices, expected):
    # Two chunks, as a table of files often is: the partitions follow the slices, not the chunks, and every
    # row is in one of them.
    half = rows // 2
    schema = pa.schema([("path", pa.string())])
    tasks = pa.concat_tables([pa.table({"path": [f"f{i}" for i in range(a, b)]}, schema=schema)
                              for a, b in ((0, half), (half, rows))])  # fmt: skip
    frame = task_frame(spark, tasks, slices)
    parts = frame.rdd.glom().map(lambda rows: [r["path"] for r in rows]).collect()
    assert len(parts) == expected and all(parts)
    assert sorted(p for part in parts for p in part) == sorted(f"f{i}" for i in range(rows))
