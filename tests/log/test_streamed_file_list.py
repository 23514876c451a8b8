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


def build(root: Path, **configuration: str) -> DeltaTable:
    t = DeltaTable.create(str(root), SCHEMA, partition_by=["p"],
                          configuration={"delta.enableDeletionVectors": "true", **configuration})  # fmt: skip
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


def _regroup(checkpoint: Path, rows_per_group: int, *, sort: bool = True) -> int:
    """Rewrite a checkpoint as another writer may lay it out: its rows in row groups of ``rows_per_group``
    (Delta Spark writes a checkpoint of millions of files in many row groups), sorted by partition so that
    row groups hold few partitions. The same rows; its row-group count."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    table = pq.read_table(checkpoint)
    if sort:
        parsed = pc.struct_field(table.column("add"), ["partitionValues_parsed", "p"])
        table = table.take(pc.sort_indices(pa.table({"k": parsed}), [("k", "ascending")]))
    pq.write_table(table, checkpoint, row_group_size=rows_per_group)
    return pq.ParquetFile(checkpoint).metadata.num_row_groups


@pytest.mark.parametrize("flt", [*FILTERS, "p > 'p1'", "p IS NULL", "NOT p = 'p0'"], ids=str)
def test_checkpoint_row_groups_the_filter_rules_out_are_not_read(tmp_path: Path, flt, monkeypatch):
    """The statistics of ``add.partitionValues_parsed`` in each row group decide whether it is read; the
    plan is the same as over the whole file list, and the files of skipped row groups still count as
    candidates."""
    import pyarrow.parquet as pq

    # Parsed partition values in the checkpoint, as Delta Spark writes them by default.
    t = build(tmp_path / "t", **{"delta.checkpoint.writeStatsAsStruct": "true"})
    cp = tmp_path / "t" / "_delta_log" / f"{20:020d}.checkpoint.parquet"
    groups = _regroup(cp, 3)
    assert groups > 4
    read: list[list[int] | None] = []
    real = pq.ParquetFile.iter_batches

    def recording(self, *args, **kwargs):
        if "add" in (kwargs.get("columns") or []):
            read.append(kwargs.get("row_groups"))
        return real(self, *args, **kwargs)

    monkeypatch.setattr(pq.ParquetFile, "iter_batches", recording)
    cold = DeltaTable(t.uri).snapshot()
    streamed = plan(cold, flt)
    whole = DeltaTable(t.uri).snapshot()
    whole.files  # noqa: B018 - loaded: the plan over the whole list
    assert streamed == plan(whole, flt)  # the same files, and the live count from the checksum
    (tmp_path / "t" / "_delta_log" / f"{whole.version:020d}.crc").unlink()
    files, candidates = plan(DeltaTable(t.uri).snapshot(), flt)
    assert files == streamed[0] and candidates >= streamed[1]  # without one: an upper bound
    if isinstance(flt, list) and flt[0][0] == "p":  # a partition filter: some row groups are not read
        assert read and read[0] is not None and len(read[0]) < groups, (read, groups)
