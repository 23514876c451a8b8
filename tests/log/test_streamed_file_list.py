"""A filtered scan streams the file list: the checkpoint is read batch by batch and only the files the
filter may match are kept, so the snapshot's whole file list is never built ("a lazy snapshot").

Each test compares the streamed plan with the plan over the whole file list (``Snapshot.files``), on a
table with a checkpoint, commits after it that add and remove files, and deletion vectors.
"""

from __future__ import annotations

import logging
from pathlib import Path

import pyarrow as pa
import pytest

from airflow_provider_delta.log import DeltaTable
from airflow_provider_delta.log.scans.scan import Scan

SCHEMA = pa.schema([("id", pa.int64()), ("p", pa.string())])
FILTERS = [
    [("p", "=", "p1")],
    "p IN ('p0', 'p3') AND id > 40",
    [("id", "<", 10)],
    "id = 1000",  # matches nothing
]


def build(root: Path) -> DeltaTable:
    t = DeltaTable.create(str(root), SCHEMA, partition_by=["p"],
                          configuration={"delta.enableDeletionVectors": "true"})  # fmt: skip
    for i in range(24):  # a checkpoint at 10 and 20
        t.write(pa.table({"id": [i, i + 100], "p": [f"p{i % 4}"] * 2}))
    t.write(pa.table({"id": [7], "p": ["p1"]}), mode="overwrite", replace_where="p = 'p1'")
    live = t.snapshot().files.column("path").to_pylist()
    txn = t.transaction()
    txn.delete_rows({next(p for p in live if "p=p2" in p): [0]})
    txn.commit("DELETE")
    return t


def plan(snapshot, flt) -> tuple[list[str], int]:
    scan = Scan(snapshot, filter=flt)
    return sorted(scan.files.column("path").to_pylist()), scan.candidates


@pytest.mark.parametrize("flt", FILTERS, ids=str)
def test_a_filtered_plan_streams_and_agrees_with_the_whole_list(tmp_path: Path, flt):
    t = build(tmp_path / "t")
    cold = DeltaTable(t.uri).snapshot()
    streamed = plan(cold, flt)
    assert not cold.files_loaded  # the whole file list was never built
    whole = DeltaTable(t.uri).snapshot()
    whole.files  # noqa: B018 - loaded: the plan over the whole list
    assert streamed == plan(whole, flt)
    rows = DeltaTable(t.uri).to_pyarrow_table(filter=flt).sort_by("id")
    everything = DeltaTable(t.uri).to_pyarrow_table().sort_by("id")
    assert rows.num_rows <= everything.num_rows


def test_a_broken_checkpoint_falls_back_to_the_whole_replay(tmp_path: Path, caplog):
    t = build(tmp_path / "t")
    expected = plan(DeltaTable(t.uri).snapshot(), [("p", "=", "p3")])
    cold = DeltaTable(t.uri).snapshot()  # read before the checkpoint breaks
    cp = tmp_path / "t" / "_delta_log" / f"{20:020d}.checkpoint.parquet"
    data = cp.read_bytes()
    cp.write_bytes(data[: len(data) // 2])  # cut short, as a crashed writer on a store without atomic puts
    with caplog.at_level(logging.WARNING):
        assert plan(cold, [("p", "=", "p3")]) == expected
