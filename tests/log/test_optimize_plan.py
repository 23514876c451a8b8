"""OPTIMIZE's shared planning: space-filling curves, which files, bins and batches, and bad input by name.

The tables are written by the core (files with footer statistics); no data is rewritten here (the engines'
tests do that), so every case is fast.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from airflow_provider_delta.log import AddFile, DeltaTable, DomainMetadata, add_file_from_parquet
from airflow_provider_delta.log.base.errors import OptimizeError, PartitionFilterError, ZOrderColumnError
from airflow_provider_delta.log.maintenance.optimize_plan import (
    DEFAULT_MAX_FILE_SIZE,
    DEFAULT_MIN_FILE_SIZE,
    clustering_columns,
    plan_optimize,
)
from airflow_provider_delta.log.maintenance.space_filling_curves import (
    curve_keys,
    hilbert,
    interleave,
    range_boundaries,
    range_ids,
)

SCHEMA = pa.schema([("x", pa.int64()), ("y", pa.string()), ("s", pa.struct([("z", pa.int32())])),
                    ("p", pa.string())])  # fmt: skip
_n = itertools.count()


def _file(table: DeltaTable, p: str, rows: int = 10, pad: int = 0) -> AddFile:
    i = next(_n)
    rel = f"p={p}/f-{i}.parquet"
    path = Path(table.uri) / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    xs = np.arange(i * rows, i * rows + rows)
    pq.write_table(pa.table({
        "x": xs, "y": [f"y{v}" + "#" * pad for v in xs], "s": [{"z": int(v)} for v in xs],
    }), path)  # fmt: skip
    return add_file_from_parquet(table, rel, {"p": p})


def _table(tmp_path: Path, sizes: dict[str, int], configuration: dict[str, str] | None = None) -> DeltaTable:
    table = DeltaTable.create(str(tmp_path / "t"), SCHEMA, partition_by=["p"], configuration=configuration)
    files = [_file(table, p) for p, n in sizes.items() for _ in range(n)]
    table.transaction().add_files(files).commit()
    return table


# -- curves --------------------------------------------------------------------------------------------------
def test_range_ids_rank_values_and_nulls_rank_first():
    values = pa.array([0, 1, 3, 15, 36, 99, None])
    ids = range_ids(values, range_boundaries(values, 3))
    assert ids.tolist() == [0, 0, 0, 1, 1, 2, 0]
    strings = pa.array(["b", None, "a", "zz", "é"])  # ordered by UTF-8 bytes, as Spark compares strings
    assert range_ids(strings, range_boundaries(strings, 8)).tolist() == [1, 0, 0, 2, 3]


def test_interleave_is_delta_sparks_bit_order():
    # InterleaveBits: bit 31..0 of each column in turn, first column first; with 2 bits per id the high
    # (all-zero) bits are left out, which keeps the order.
    keys = interleave([np.array([1, 2, 3]), np.array([0, 3, 1])], 2)
    assert [k.hex() for k in keys.to_pylist()] == ["20", "d0", "b0"]
    full = [format(1, "032b"), format(0, "032b")]
    bits = "".join(a + b for a, b in zip(*full, strict=True))
    assert bits.lstrip("0") == "10"  # the same bits, less leading zeros: order kept


def test_hilbert_keys_walk_neighbouring_cells():
    cells = list(itertools.product(range(8), range(8)))
    xs, ys = (np.array(c, dtype=np.uint32) for c in zip(*cells, strict=True))
    order = pc.sort_indices(hilbert([xs, ys], 3)).to_numpy()
    path = [cells[i] for i in order]
    assert len(set(path)) == 64
    assert all(abs(a[0] - b[0]) + abs(a[1] - b[1]) == 1 for a, b in itertools.pairwise(path))


def test_zorder_keys_cluster_both_columns():
    rng = np.random.default_rng(3)
    x, y = pa.array(rng.integers(0, 1000, 4096)), pa.array(rng.integers(0, 1000, 4096))
    keys = curve_keys([x, y], [range_boundaries(x, 16), range_boundaries(y, 16)], "zorder", 16)
    order = pc.sort_indices(keys).to_numpy()
    # Four files of consecutive keys: each covers a quarter of one column's range, not all of it.
    spans = []
    for part in np.array_split(order, 4):
        xs, ys = x.to_numpy()[part], y.to_numpy()[part]
        spans.append((xs.max() - xs.min()) * (ys.max() - ys.min()))
    assert max(spans) < 0.6 * 1000 * 1000


# -- compaction ----------------------------------------------------------------------------------------------
def test_defaults_are_delta_sparks_or_the_tables_target_file_size(tmp_path):
    table = _table(tmp_path, {"a": 3})
    plan = plan_optimize(table.snapshot())
    assert (plan.min_file_size, plan.max_file_size) == (DEFAULT_MIN_FILE_SIZE, DEFAULT_MAX_FILE_SIZE) == (
        1024**3, 1024**3)  # fmt: skip
    md = table.snapshot().metadata
    table.transaction().update_metadata(dataclasses.replace(
        md, configuration={"delta.targetFileSize": "128mb"})).commit("SET TBLPROPERTIES")  # fmt: skip
    plan = plan_optimize(table.snapshot())
    assert (plan.min_file_size, plan.max_file_size) == (128 * 1024**2, 128 * 1024**2)


def test_small_files_are_packed_per_partition_into_bins_of_the_target_size(tmp_path):
    table = _table(tmp_path, {"a": 5, "b": 1, "c": 3})
    sizes = table.snapshot().files.column("size").to_pylist()
    assert max(sizes) - min(sizes) < min(sizes) // 2
    plan = plan_optimize(table.snapshot(), max_file_size=2 * max(sizes), min_file_size=10 * max(sizes))
    assert plan.mode == "compaction"
    # a: 5 files in bins of 2, 2, 1 (the single file left alone); b: one file (nothing to do); c: 2 + 1.
    assert sorted((b.partition_values["p"], b.files.num_rows) for b in plan.bins) == [("a", 2), ("a", 2),
                                                                                      ("c", 2)]  # fmt: skip
    assert plan.considered_files == 9 and plan.num_files == 6
    assert plan.batches == ((0, 1, 2),)


def test_large_files_are_left_and_deleted_rows_bring_files_back(tmp_path):
    table = _table(tmp_path, {"a": 3}, {"delta.enableDeletionVectors": "true"})
    snap = table.snapshot()
    size = snap.files.column("size")[0].as_py()
    assert plan_optimize(snap, min_file_size=size).bins == ()  # none is below the minimum
    f = AddFile.from_dict(snap.files.to_pylist()[0])
    table.transaction().delete_rows({f.path: [0, 1]}).commit("DELETE")  # 2 of 10 rows: 20% > 5%
    g = AddFile.from_dict(snap.files.to_pylist()[1])
    table.transaction().delete_rows({g.path: [0]}).commit("DELETE")  # 1 of 10
    plan = plan_optimize(table.snapshot(), min_file_size=size, max_deleted_rows_ratio=0.15)
    assert plan.bins == ()  # f alone is over the ratio: a bin of one file is left alone
    plan = plan_optimize(table.snapshot(), min_file_size=size, max_deleted_rows_ratio=0.05)
    rewritten = sorted(p for b in plan.bins for p in b.files.column("path").to_pylist())
    assert rewritten == sorted([f.path, g.path])


def test_batches_group_bins_by_input_size(tmp_path):
    table = _table(tmp_path, {"a": 2, "b": 2, "c": 2, "d": 2})
    size = table.snapshot().files.column("size")[0].as_py()
    plan = plan_optimize(table.snapshot(), batch_size=4 * size)
    assert sorted(len(b) for b in plan.batches) == [2, 2]
    assert sorted(i for b in plan.batches for i in b) == [0, 1, 2, 3]


def test_partition_filter_selects_whole_partitions(tmp_path):
    table = _table(tmp_path, {"a": 2, "b": 2, "c": 2})
    plan = plan_optimize(table.snapshot(), partition_filter=[("p", "in", ["a", "c"])])
    assert sorted(b.partition_values["p"] for b in plan.bins) == ["a", "c"]
    assert plan.considered_files == 4
    assert plan.predicate == ("p in ['a', 'c']",)


# -- Z-order and bad input -----------------------------------------------------------------------------------
def test_zorder_takes_every_file_of_a_partition_even_alone(tmp_path):
    table = _table(tmp_path, {"a": 3, "b": 1})
    plan = plan_optimize(table.snapshot(), zorder_by=["Y", "x"], min_file_size=0)
    assert plan.mode == "zorder" and plan.columns == ("y", "x") and plan.curve == "zorder"
    assert sorted((b.partition_values["p"], b.files.num_rows) for b in plan.bins) == [("a", 3), ("b", 1)]
    nested = plan_optimize(table.snapshot(), zorder_by=["s.z"])
    assert nested.columns == ("s.z",)


@pytest.mark.parametrize(
    ("columns", "message"),
    [(["nope"], "not in the schema"), (["p"], "partition column"), (["s"], "no order"),
     (["x", "X"], "twice")],
)  # fmt: skip
def test_bad_zorder_columns_are_refused_by_name(tmp_path, columns, message):
    table = _table(tmp_path, {"a": 2})
    with pytest.raises(ZOrderColumnError, match=message):
        plan_optimize(table.snapshot(), zorder_by=columns)


def test_a_zorder_column_without_statistics_is_refused(tmp_path):
    table = _table(tmp_path, {"a": 2}, {"delta.dataSkippingNumIndexedCols": "1"})
    plan_optimize(table.snapshot(), zorder_by=["x"])
    with pytest.raises(ZOrderColumnError, match="no statistics") as caught:
        plan_optimize(table.snapshot(), zorder_by=["y"])
    assert caught.value.column == "y"


def test_a_filter_on_a_data_column_is_refused(tmp_path):
    table = _table(tmp_path, {"a": 2})
    with pytest.raises(PartitionFilterError, match=r"only partition columns.*\['x'\]") as caught:
        plan_optimize(table.snapshot(), partition_filter=[("x", ">", 3)])
    assert caught.value.columns == ("x",)


@pytest.mark.parametrize("option", [{"min_file_size": -1}, {"max_deleted_rows_ratio": 2}, {"batch_size": 0}])
def test_bad_sizes_are_refused(tmp_path, option):
    table = _table(tmp_path, {"a": 2})
    with pytest.raises(OptimizeError):
        plan_optimize(table.snapshot(), **option)


def test_clustering_columns_come_from_the_domain(tmp_path):
    table = _table(tmp_path, {"a": 1})
    domain = DomainMetadata("delta.clustering", json.dumps({"clusteringColumns": [["x"], ["s", "z"]]}))
    clustered = dataclasses.replace(table.snapshot(), domain_metadata={"delta.clustering": domain})
    assert clustering_columns(clustered) == ["x", "s.z"]
