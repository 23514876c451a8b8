"""Deleting rows with deletion vectors through the core (``Transaction.delete_rows``): the remove/add pairs,
inline and stored vectors (several per file, a random-prefix folder when the table asks), merging with a
file's vector, whole files becoming plain removes, row indexes checked against the file, tables that do not
allow vectors, concurrent writers touching the same file, the writer rules for adds with vectors, and what
delta-kernel-rs reads of the result. Delta Spark reading ours is in tests/oracle/test_row_deletes_agree.py.
"""

from __future__ import annotations

import json
from decimal import Decimal
from pathlib import Path

import fsspec
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from delta_kernel_rust_sharing_wrapper import PythonInterface, ScanBuilder, Table

from airflow_provider_delta.log import (
    AddFile,
    ConcurrentDeleteReadError,
    DeltaTable,
    FileNotLiveError,
    InvalidCommitError,
    UnsupportedFeatureError,
)
from airflow_provider_delta.log.commits.row_deletion import wide_bounds
from airflow_provider_delta.log.commits.visibility import holds_effects
from airflow_provider_delta.log.files.deletion_vectors import (
    DeletionVectorDescriptor,
    deleted_rows,
    inline_descriptor,
)
from airflow_provider_delta.log.snapshot.replay import TableState

SEED = 7013
LOCAL = fsspec.filesystem("file")
SCHEMA = pa.schema([("id", pa.int64()), ("name", pa.string()), ("p", pa.string())])
DV_ON = {"delta.enableDeletionVectors": "true"}


def _table(root: Path, files: dict[str, int], configuration: dict | None = None) -> DeltaTable:
    """A table partitioned by p, each file ``p=<x>/<name>`` holding ids 0..n-1 in row order."""
    t = DeltaTable.create(
        str(root), SCHEMA, partition_by=["p"], configuration=DV_ON if configuration is None else configuration
    )
    adds = []
    for rel, n in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(pa.table({"id": np.arange(n), "name": [f"n{i}" for i in range(n)]}), root / rel)
        adds.append(t.add_file(rel, {"p": rel.split("/")[0].split("=")[1]}, tags={"origin": "test"}))
    t.transaction().add_files(adds).commit()
    return t


def _commit_lines(root: Path, version: int) -> list[dict]:
    return [json.loads(x) for x in (root / "_delta_log" / f"{version:020d}.json").read_text().splitlines()]


def _live(t: DeltaTable) -> dict[str, dict]:
    return {f["path"]: f for f in t.snapshot().files.to_pylist()}


def _deleted(t: DeltaTable, path: str) -> list[int]:
    dv = _live(t)[path]["deletionVector"]
    return [] if dv is None else deleted_rows(dv, t.store.root, LOCAL, data_file=path).tolist()


def _kernel_ids(root: Path) -> list[int]:
    url = root.resolve().as_uri() + "/"
    engine = PythonInterface(url)
    table = ScanBuilder(Table(url).snapshot(engine)).build().execute(engine).read_all()
    return sorted(table.column("id").to_pylist())


def test_a_delete_commits_the_pair_the_spec_requires(tmp_path: Path):
    root = tmp_path / "t"
    t = _table(root, {"p=a/f.parquet": 100, "p=b/g.parquet": 10})
    before = _live(t)["p=a/f.parquet"]
    t.transaction().delete_rows({"p=a/f.parquet": [3, 1, 2, 3]}).commit("DELETE")
    lines = _commit_lines(root, 2)
    info = lines[0]["commitInfo"]
    assert info["operationMetrics"] == {"numDeletedRows": "3", "numRemovedFiles": "0",
                                        "numDeletionVectorsAdded": "1", "numDeletionVectorsRemoved": "0",
                                        "numDeletionVectorsUpdated": "0"}  # fmt: skip
    (add,) = [x["add"] for x in lines if "add" in x]
    (remove,) = [x["remove"] for x in lines if "remove" in x]
    assert add["path"] == remove["path"] == "p=a/f.parquet"
    assert add["dataChange"] is remove["dataChange"] is True
    assert "deletionVector" not in remove  # the file had none
    assert add["deletionVector"]["storageType"] == "i" and add["deletionVector"]["cardinality"] == 3
    assert "maxRowIndex" not in add["deletionVector"]  # never written to the log, as Delta Spark
    assert add["partitionValues"] == remove["partitionValues"] == {"p": "a"}
    assert add["tags"] == remove["tags"] == {"origin": "test"}
    assert add["size"] == before["size"] and add["modificationTime"] == before["modificationTime"]
    stats = json.loads(add["stats"])
    assert stats == {**json.loads(before["stats"]), "tightBounds": False}
    assert json.loads(remove["stats"]) == json.loads(before["stats"])
    assert _deleted(t, "p=a/f.parquet") == [1, 2, 3]
    assert _kernel_ids(root) == sorted([i for i in range(100) if i not in (1, 2, 3)] + list(range(10)))


def test_small_vectors_go_inline_large_ones_share_a_file_and_merge_with_the_old(tmp_path: Path):
    rng = np.random.default_rng(SEED)
    print(f"seed {SEED}")
    root = tmp_path / "t"
    t = _table(root, {"p=a/f.parquet": 5000, "p=a/g.parquet": 300_000, "p=b/h.parquet": 20})
    big = np.unique(np.concatenate([np.arange(10_000), rng.choice(300_000, 5000, replace=False)]))
    t.transaction().delete_rows({"p=a/f.parquet": range(0, 5000, 7), "p=a/g.parquet": big,
                                 "p=b/h.parquet": [19]}).commit("DELETE")  # fmt: skip
    dvs = {p: f["deletionVector"] for p, f in _live(t).items()}
    assert dvs["p=b/h.parquet"]["storageType"] == "i"
    assert dvs["p=a/f.parquet"]["storageType"] == dvs["p=a/g.parquet"]["storageType"] == "u"
    # Two vectors packed in one file, as Delta Spark packs them: same id, different offsets.
    assert dvs["p=a/f.parquet"]["pathOrInlineDv"] == dvs["p=a/g.parquet"]["pathOrInlineDv"]
    assert dvs["p=a/f.parquet"]["offset"] != dvs["p=a/g.parquet"]["offset"]
    assert len(list(root.glob("deletion_vector_*.bin"))) == 1
    # More rows, in two calls of one transaction: merged with each file's vector (inline -> stored too).
    txn = t.transaction().delete_rows({"p=b/h.parquet": range(0, 10)})
    txn.delete_rows([("p=b/h.parquet", [10, 11]), (_live(t)["p=a/f.parquet"], [1, 2])]).commit("DELETE")
    assert _deleted(t, "p=b/h.parquet") == [*range(12), 19]
    assert _deleted(t, "p=a/f.parquet") == sorted({*range(0, 5000, 7), 1, 2})
    assert _deleted(t, "p=a/g.parquet") == big.tolist()
    metrics = _commit_lines(root, 3)[0]["commitInfo"]["operationMetrics"]
    assert metrics["numDeletedRows"] == "14" and metrics["numDeletionVectorsUpdated"] == "2"
    # The remove of each pair carries the vector the file had.
    removes = {x["remove"]["path"]: x["remove"] for x in _commit_lines(root, 3) if "remove" in x}
    assert removes["p=b/h.parquet"]["deletionVector"] == {
        k: v for k, v in dvs["p=b/h.parquet"].items() if v is not None
    }
    expected = [*(i for i in range(5000) if i % 7 and i not in (1, 2)),
                *np.setdiff1d(np.arange(300_000), big).tolist(), *range(12, 19)]  # fmt: skip
    assert _kernel_ids(root) == sorted(expected)


def test_random_prefix_folders_when_the_table_asks(tmp_path: Path):
    root = tmp_path / "t"
    config = {**DV_ON, "delta.randomizeFilePrefixes": "true", "delta.randomPrefixLength": "3"}
    t = _table(root, {"p=a/f.parquet": 1000}, config)
    t.transaction().delete_rows({"p=a/f.parquet": range(500)}).commit("DELETE")
    dv = _live(t)["p=a/f.parquet"]["deletionVector"]
    assert dv["storageType"] == "u" and len(dv["pathOrInlineDv"]) == 23
    (stored,) = root.glob("*/deletion_vector_*.bin")
    assert stored.parent.name == dv["pathOrInlineDv"][:3]
    assert _deleted(t, "p=a/f.parquet") == list(range(500))


def test_a_file_whose_every_row_is_deleted_becomes_a_plain_remove(tmp_path: Path):
    root = tmp_path / "t"
    t = _table(root, {"p=a/f.parquet": 10, "p=a/g.parquet": 10})
    t.transaction().delete_rows({"p=a/f.parquet": range(5)}).commit("DELETE")
    old = _live(t)["p=a/f.parquet"]["deletionVector"]
    t.transaction().delete_rows({"p=a/f.parquet": range(3, 10), "p=a/g.parquet": [0, 1]}).commit("DELETE")
    lines = _commit_lines(root, 3)
    removes = {x["remove"]["path"]: x["remove"] for x in lines if "remove" in x}
    assert [x["add"]["path"] for x in lines if "add" in x] == ["p=a/g.parquet"]
    assert DeletionVectorDescriptor.from_json(removes["p=a/f.parquet"]["deletionVector"]).unique_id == (
        DeletionVectorDescriptor.from_json(old).unique_id
    )
    assert lines[0]["commitInfo"]["operationMetrics"]["numRemovedFiles"] == "1"
    assert lines[0]["commitInfo"]["operationMetrics"]["numDeletionVectorsRemoved"] == "1"
    assert set(_live(t)) == {"p=a/g.parquet"}
    assert _kernel_ids(root) == list(range(2, 10))


def test_rows_deleted_already_change_nothing(tmp_path: Path):
    root = tmp_path / "t"
    t = _table(root, {"p=a/f.parquet": 10})
    t.transaction().delete_rows({"p=a/f.parquet": [1, 2]}).commit("DELETE")
    dv = _live(t)["p=a/f.parquet"]["deletionVector"]
    t.transaction().delete_rows({"p=a/f.parquet": [2, 1]}).commit("DELETE")
    assert not [x for x in _commit_lines(root, 3) if "add" in x or "remove" in x]
    assert _live(t)["p=a/f.parquet"]["deletionVector"] == dv


def test_row_indexes_beyond_the_file_are_refused_at_the_call(tmp_path: Path):
    root = tmp_path / "t"
    t = _table(root, {"p=a/f.parquet": 10})
    txn = t.transaction()
    with pytest.raises(InvalidCommitError, match=r"row index 10 of p=a/f\.parquet: the file has 10 rows"):
        txn.delete_rows({"p=a/f.parquet": [0, 10]})
    for bad, error in (([-1], InvalidCommitError), (["x"], TypeError), ("0", TypeError), ([0.5], TypeError)):
        with pytest.raises(error):
            txn.delete_rows({"p=a/f.parquet": bad})
    with pytest.raises(FileNotLiveError, match="nope.parquet") as caught:
        txn.delete_rows({"nope.parquet": [0]})
    assert caught.value.path == "nope.parquet"
    assert not txn.row_deletes and not list(root.glob("deletion_vector_*"))
    assert t.version() == 1


def test_stats_without_num_records_are_taken_from_the_footer(tmp_path: Path):
    root = tmp_path / "t"
    t = DeltaTable.create(str(root), SCHEMA, partition_by=["p"], configuration=DV_ON)
    (root / "p=a").mkdir()
    pq.write_table(pa.table({"id": np.arange(7), "name": ["x"] * 7}), root / "p=a/f.parquet")
    size = (root / "p=a/f.parquet").stat().st_size
    t.transaction().add_files([AddFile("p=a/f.parquet", size, {"p": "a"}, modification_time=1)]).commit()
    with pytest.raises(InvalidCommitError, match="the file has 7 rows"):
        t.transaction().delete_rows({"p=a/f.parquet": [7]})
    t.transaction().delete_rows({"p=a/f.parquet": [6]}).commit("DELETE")
    stats = json.loads(_live(t)["p=a/f.parquet"]["stats"])
    assert (
        stats["numRecords"] == 7
        and stats["tightBounds"] is False
        and stats["maxValues"] == {"id": 6, "name": "x"}
    )
    assert _kernel_ids(root) == list(range(6))


def test_tables_that_do_not_allow_vectors_are_refused_by_name(tmp_path: Path):
    plain = _table(tmp_path / "plain", {"p=a/f.parquet": 5}, {})
    with pytest.raises(UnsupportedFeatureError, match="deletionVectors") as caught:
        plain.transaction().delete_rows({"p=a/f.parquet": [0]})
    assert caught.value.features == ("deletionVectors",)
    off = {"delta.feature.deletionVectors": "supported", "delta.enableDeletionVectors": "false"}
    disabled = _table(tmp_path / "off", {"p=a/f.parquet": 5}, off)
    with pytest.raises(UnsupportedFeatureError, match="delta.enableDeletionVectors"):
        disabled.transaction().delete_rows({"p=a/f.parquet": [0]})
    assert plain.version() == disabled.version() == 1


def test_two_writers_deleting_rows_of_the_same_file_conflict(tmp_path: Path):
    root = tmp_path / "t"
    t = _table(root, {"p=a/f.parquet": 10, "p=a/g.parquet": 10})
    first, second, elsewhere = t.transaction(), t.transaction(), t.transaction()
    first.delete_rows({"p=a/f.parquet": [0]})
    second.delete_rows({"p=a/f.parquet": [1]})
    elsewhere.delete_rows({"p=a/g.parquet": [2]})
    assert first.commit("DELETE").version == 2
    with pytest.raises(ConcurrentDeleteReadError, match=r"p=a/f\.parquet was removed"):
        second.commit("DELETE")
    # A change of another file does not conflict: the retry commits on top of it.
    assert elsewhere.commit("DELETE").version == 3
    assert _deleted(t, "p=a/f.parquet") == [0] and _deleted(t, "p=a/g.parquet") == [2]
    # Removing a file whose vector changed concurrently conflicts too, and so does the other way round.
    stale = t.transaction().remove_files("p=a/g.parquet")
    t.transaction().delete_rows({"p=a/g.parquet": [3]}).commit("DELETE")
    with pytest.raises(ConcurrentDeleteReadError):
        stale.commit("DELETE")
    late = t.transaction().delete_rows({"p=a/g.parquet": [4]})
    t.transaction().remove_files(["p=a/g.parquet"]).commit("DELETE")
    with pytest.raises(ConcurrentDeleteReadError):
        late.commit("DELETE")
    assert set(_live(t)) == {"p=a/f.parquet"}
    assert _kernel_ids(root) == list(range(1, 10))


def test_a_file_is_removed_or_has_rows_deleted_not_both(tmp_path: Path):
    t = _table(tmp_path / "t", {"p=a/f.parquet": 10})
    with pytest.raises(InvalidCommitError, match="not both"):
        t.transaction().delete_rows({"p=a/f.parquet": [1]}).remove_files("p=a/f.parquet")
    with pytest.raises(InvalidCommitError, match="removed by this transaction"):
        t.transaction().remove_files("p=a/f.parquet").delete_rows({"p=a/f.parquet": [1]})


def test_removing_a_file_with_a_vector_reconciles_whatever_object_names_it(tmp_path: Path):
    """A tombstone built from a stale AddFile (no vector) would leave the file live: the core builds it
    from the live add."""
    root = tmp_path / "t"
    t = _table(root, {"p=a/f.parquet": 10, "p=a/g.parquet": 10})
    stale = AddFile.from_dict(_live(t)["p=a/f.parquet"])
    t.transaction().delete_rows({"p=a/f.parquet": [1], "p=a/g.parquet": [2]}).commit("DELETE")
    t.transaction().remove_files([stale, _live(t)["p=a/g.parquet"]]).commit("DELETE")
    assert _live(t) == {}


def test_the_effects_of_a_vector_update_are_told_from_the_state_before_it(tmp_path: Path):
    """After a lost acknowledgement the core asks whether its commit landed; a commit that only gives a
    live file a new vector re-adds a path that was there before, so paths alone would say yes."""
    root = tmp_path / "t"
    t = _table(root, {"p=a/f.parquet": 10})
    before = t.snapshot()
    txn = t.transaction().delete_rows({"p=a/f.parquet": [1]})
    txn._prepare()
    state = before.state()
    assert not holds_effects(state, txn.adds, txn.removes, None, None)
    txn.commit("DELETE")
    after = t.snapshot().state()
    assert holds_effects(after, txn.adds, txn.removes, None, None)
    assert isinstance(after, TableState)


def test_writer_rules_for_adds_that_carry_a_vector(tmp_path: Path):
    root = tmp_path / "t"
    t = _table(root, {"p=a/f.parquet": 10})
    t.transaction().delete_rows({"p=a/f.parquet": [1]}).commit("DELETE")
    live = AddFile.from_dict(_live(t)["p=a/f.parquet"])
    dv = DeletionVectorDescriptor.from_json(live.deletion_vector).to_json()
    new_dv = inline_descriptor([1, 2]).to_json()
    no_count = AddFile(
        live.path, live.size, {"p": "a"}, stats='{"tightBounds":false}', deletion_vector=new_dv
    )
    with pytest.raises(InvalidCommitError, match="numRecords"):
        t.transaction().remove_files(live).add_files(no_count).commit()
    tight = AddFile(live.path, live.size, {"p": "a"}, stats='{"numRecords":10}', deletion_vector=new_dv)
    with pytest.raises(InvalidCommitError, match="tightBounds"):
        t.transaction().remove_files(live).add_files(tight).commit()
    # The same vector re-added without a data change (a metadata-only update) needs neither rule. It
    # replaces the live add; a remove of the same (path, vector) with it would cancel it out.
    same = AddFile(live.path, live.size, {"p": "a"}, stats='{"numRecords":10}', deletion_vector=dv,
                   data_change=False, tags={"retagged": "1"})  # fmt: skip
    with pytest.raises(InvalidCommitError, match="more than one file action"):
        t.transaction().remove_files(live, data_change=False).add_files(same).commit("RETAG")
    t.transaction().add_files(same).commit("RETAG")
    assert dict(_live(t)["p=a/f.parquet"]["tags"]) == {"retagged": "1"}
    assert t.version() == 3


def test_wide_bounds_mark_all_null_columns_by_the_physical_count_and_keep_decimals():
    tight = '{"numRecords":10,"minValues":{"d":1.10,"s":{"x":12345678901234567890.123}},' \
            '"nullCount":{"a":7,"s":{"x":7,"y":0}},"tightBounds":true}'  # fmt: skip
    out = json.loads(wide_bounds(tight, 3), parse_float=Decimal)
    assert out["tightBounds"] is False
    assert out["nullCount"] == {"a": 10, "s": {"x": 10, "y": 0}}  # 7 == 10 - 3 live rows: all null
    assert out["minValues"]["s"]["x"] == Decimal("12345678901234567890.123")
    assert '"d":1.10' in wide_bounds(tight, 3)
    # Bounds not known to be tight keep their null counts; wide ones are left as they are.
    assert json.loads(wide_bounds('{"numRecords":10,"nullCount":{"a":7}}', 3))["nullCount"] == {"a": 7}
    already = '{"numRecords":10,"tightBounds":false}'
    assert wide_bounds(already, 3) == already
