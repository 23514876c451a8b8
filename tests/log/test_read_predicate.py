"""``Transaction.read_predicate``: the read set of DELETE, UPDATE and MERGE, judged as Delta Spark's conflict
checker judges read predicates: a concurrent append conflicts when its partition values may hold rows the
predicate matches (data columns cannot be judged from an add, so they may); a concurrent remove conflicts
only with the files read (``read_files``)."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from airflow_provider_delta.log import ConcurrentAppendError, ConcurrentDeleteReadError, DeltaTable


def _table(path: Path, partitioned: bool = True) -> DeltaTable:
    table = DeltaTable(str(path))
    rows = pa.table({"id": pa.array(range(6), pa.int64()), "p": ["a", "b", "c"] * 2})
    table.write(rows, partition_by=["p"] if partitioned else None)
    return table


def _append(table: DeltaTable, part: str) -> None:
    table.write(pa.table({"id": pa.array([100], pa.int64()), "p": [part]}))


@pytest.mark.parametrize(("predicate", "appended", "conflicts"), [
    ("p = 'a' AND id > 1", "b", False),  # another partition: Delta Spark lets it pass
    ("p = 'a' AND id > 1", "a", True),  # the partition read: a row there may match
    ("p IN ('a', 'c')", "c", True),
    ("id > 1", "c", True),  # no partition part: every partition may hold matching rows
    ("p <> 'a'", "a", False),
])  # fmt: skip
def test_a_concurrent_append_conflicts_only_where_the_predicate_can_match(
    tmp_path: Path, predicate: str, appended: str, conflicts: bool
):
    table = _table(tmp_path / "t")
    txn = table.transaction("Serializable").read_predicate(predicate)
    victim = next(f for f in table.snapshot().files.to_pylist() if f["partitionValues"][0][1] == "a")
    txn.remove_files(victim["path"])
    _append(table, appended)
    if conflicts:
        with pytest.raises(ConcurrentAppendError):
            txn.commit("DELETE")
        assert table.version() == 1
    else:
        assert txn.commit("DELETE").version == 2


def test_a_concurrent_remove_conflicts_only_with_the_files_read(tmp_path: Path):
    table = _table(tmp_path / "t")
    files = {dict(f["partitionValues"])["p"]: f["path"] for f in table.snapshot().files.to_pylist()}
    ours = table.transaction().read_predicate("p = 'a'").read_files([files["a"]])
    table.transaction().remove_files(files["b"]).commit("DELETE")  # a file we did not read
    ours.remove_files(files["a"])
    assert ours.commit("DELETE").version == 2
    ours = table.transaction().read_predicate("p = 'c'").read_files([files["c"]])
    table.transaction().remove_files(files["c"]).commit("DELETE")
    with pytest.raises(ConcurrentDeleteReadError, match="was removed"):
        ours.commit("DELETE")


def test_a_predicate_the_parser_does_not_support_reads_the_whole_table(tmp_path: Path):
    table = _table(tmp_path / "t")
    txn = table.transaction("Serializable").read_predicate("p = 'a' AND some_udf(id)")
    txn.remove_files(table.snapshot().file_paths()[0])
    _append(table, "b")
    with pytest.raises(ConcurrentAppendError):
        txn.commit("DELETE")
