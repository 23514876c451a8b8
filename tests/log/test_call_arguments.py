"""Bad input fails at the call that received it, named, with nothing written (issue 13, item 7).

Every public write entry point of the core is given what users naturally pass (a path, a row of
``Snapshot.files``, an ``AddFile``/``RemoveFile``) and what they pass by mistake: a wrong type is a
``TypeError`` naming the parameter, a file that is not live a ``FileNotLiveError`` naming it, a table
feature this client does not know an ``UnsupportedFeatureError`` naming it; and the table is unchanged
afterwards (same version, same files on disk).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from airflow_provider_delta.log import (
    AddFile,
    DeltaError,
    DeltaTable,
    FileNotLiveError,
    InvalidCommitError,
    Metadata,
    Protocol,
    RemoveFile,
    UnsupportedFeatureError,
)

SCHEMA = pa.schema([("id", pa.int64()), ("p", pa.string())])


def _files(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()}


@pytest.fixture
def table(tmp_path: Path) -> DeltaTable:
    root = tmp_path / "t"
    t = DeltaTable.create(str(root), SCHEMA, partition_by=["p"])
    adds = []
    for name in ("a", "b", "c"):
        (root / f"p={name}").mkdir()
        pq.write_table(pa.table({"id": np.arange(3)}), root / f"p={name}/f.parquet")
        adds.append(t.add_file(f"p={name}/f.parquet", {"p": name}))
    t.transaction().add_files(adds).commit()
    return t


class Unchanged:
    """The table's version and files, to check that a refused call wrote nothing."""

    def __init__(self, table: DeltaTable) -> None:
        self.table, self.root = table, Path(table.store.root)
        self.version, self.files = table.version(), _files(self.root)

    def check(self) -> None:
        assert self.table.version() == self.version
        assert _files(self.root) == self.files


def test_remove_files_takes_what_users_hold(table: DeltaTable):
    snap = table.snapshot()
    rows = {r["path"]: r for r in snap.files.to_pylist()}
    # A single path (the example), a Snapshot.files row and a RemoveFile, in one transaction.
    txn = table.transaction().remove_files("p=a/f.parquet")
    txn.remove_files([rows["p=b/f.parquet"], RemoveFile("p=c/f.parquet", deletion_timestamp=5)])
    assert [r.path for r in txn.removes] == ["p=a/f.parquet", "p=b/f.parquet", "p=c/f.parquet"]
    assert txn.removes[2].deletion_timestamp == 5 and txn.removes[0].partition_values == {"p": "a"}
    assert txn.removes[0].size == rows["p=a/f.parquet"]["size"]
    txn.commit("DELETE")
    assert table.snapshot().num_files == 0


def test_remove_files_takes_full_paths_under_the_root_and_filtered_tables(table: DeltaTable):
    root = table.store.root
    snap = table.snapshot()
    txn = table.transaction().remove_files(f"{root}/p=a/f.parquet")
    txn.remove_files(snap.files.filter(pa.compute.equal(snap.files.column("path"), "p=b/f.parquet")))
    txn.remove_files(AddFile.from_dict(snap.files.to_pylist()[2]))
    assert sorted(r.path for r in txn.removes) == ["p=a/f.parquet", "p=b/f.parquet", "p=c/f.parquet"]


@pytest.mark.parametrize(
    "given",
    ["p=z/f.parquet", ["p=a/f.parquet", "p=a/missing.parquet"], AddFile("gone.parquet", 1),
     {"path": "p=a/other.parquet"}, RemoveFile("p=q/x.parquet")],
)  # fmt: skip
def test_removing_a_file_that_is_not_live_names_it(table: DeltaTable, given):
    unchanged = Unchanged(table)
    txn = table.transaction()
    with pytest.raises(FileNotLiveError, match="not a live file") as caught:
        txn.remove_files(given)
    assert caught.value.path in str(caught.value) and "parquet" in caught.value.path
    assert not txn.removes and not txn.read.files
    txn.commit()  # the transaction is still usable: it commits nothing of the refused call
    assert [r.path for r in txn.removes] == []
    assert table.version() == unchanged.version + 1


def test_a_file_removed_already_is_not_live(table: DeltaTable):
    table.transaction().remove_files("p=a/f.parquet").commit("DELETE")
    with pytest.raises(FileNotLiveError, match=r"'p=a/f\.parquet'.*version 2"):
        table.transaction().remove_files("p=a/f.parquet")


@pytest.mark.parametrize("given", [3, None, b"p=a/f.parquet", {"size": 3}, object(), [1.5], [None]])
def test_remove_files_refuses_other_types_at_the_call(table: DeltaTable, given):
    unchanged = Unchanged(table)
    with pytest.raises(TypeError):
        table.transaction().remove_files(given)
    unchanged.check()


def test_add_files_checks_each_field_at_the_call(table: DeltaTable):
    unchanged = Unchanged(table)
    good = AddFile("p=a/new.parquet", 10, {"p": "a"})
    bad = [
        ("p=a/new.parquet", "is a path: add_files.. takes AddFile"),
        (AddFile(Path("p=a/x.parquet"), 10, {"p": "a"}), "path must be a string"),  # type: ignore[arg-type]
        (AddFile("x.parquet", "10", {"p": "a"}), r"size must be an integer"),  # type: ignore[arg-type]
        (AddFile("x.parquet", -1, {"p": "a"}), "size must be at least 0"),
        (AddFile("x.parquet", 1, {"p": 1}), r"partition_values\['p'\] must be a string"),  # type: ignore[dict-item]
        (AddFile("x.parquet", 1, {"p": "a"}, data_change="yes"), "data_change must be True or False"),  # type: ignore[arg-type]
        (AddFile("x.parquet", 1, {"p": "a"}, stats="{not json"), "stats is not JSON"),
        (AddFile("x.parquet", 1, {"p": "a"}, tags={"k": 1}), r"tags\['k'\]"),  # type: ignore[dict-item]
        (AddFile("x.parquet", 1, {"p": "a"}, deletion_vector={"storageType": "i"}), "deletion_vector"),
        (AddFile("x.parquet", 1, {"p": "a"}, base_row_id=-3), "base_row_id must be at least 0"),
        ({"path": "x.parquet"}, "needs 'path' and 'size'"),
        (42, "must be an AddFile"),
    ]  # fmt: skip
    for value, message in bad:
        txn = table.transaction()
        with pytest.raises((TypeError, ValueError), match=message):
            txn.add_files([good, value])
        assert txn.adds == []  # nothing of a refused call is kept
    # A JSON body and a single AddFile are accepted as they are.
    txn = table.transaction().add_files(good).add_files([{"path": "p=b/y.parquet", "size": 3,
                                                          "partitionValues": {"p": "b"}}])  # fmt: skip
    assert [a.path for a in txn.adds] == ["p=a/new.parquet", "p=b/y.parquet"]
    unchanged.check()


def test_the_other_builders_check_their_arguments(table: DeltaTable):
    unchanged = Unchanged(table)
    txn = table.transaction()
    cases = [
        (lambda: txn.set_app_transaction(7, 1), TypeError, "app_id must be a string"),
        (lambda: txn.set_app_transaction("", 1), ValueError, "app_id must not be empty"),
        (lambda: txn.set_app_transaction("app", "3"), TypeError, "version must be an integer"),
        (lambda: txn.set_app_transaction("app", True), TypeError, "version must be an integer"),
        (lambda: txn.set_app_transaction("app", -1), ValueError, "version must be at least 0"),
        (lambda: txn.set_domain_metadata("d", 5), TypeError, "configuration must be a string"),
        (lambda: txn.set_domain_metadata(None, "{}"), TypeError, "domain must be a string"),
        (lambda: txn.set_domain_metadata("d", {"k": object()}), TypeError, "JSON-serialisable"),
        (lambda: txn.set_domain_metadata("d", "{}", removed="no"), TypeError, "removed must be True"),
        (lambda: txn.update_metadata({"id": "x"}), TypeError, "must be a Metadata action"),
        (lambda: txn.update_metadata(Metadata("x", "not json")), InvalidCommitError, "unreadable"),
        (lambda: txn.update_protocol((1, 2)), TypeError, "must be a Protocol action"),
        (lambda: txn.update_protocol(Protocol(3, 7, (), ("fancyNewFeature",))), UnsupportedFeatureError,
         "fancyNewFeature"),
        (lambda: txn.read_partitions("p=a"), TypeError, "partition must be a mapping"),
        (lambda: txn.add_files([], constraints_checked="yes"), TypeError, "constraints_checked"),
        (lambda: txn.remove_files([], data_change=None), TypeError, "data_change"),
        (lambda: txn.delete_rows({"p=a/f.parquet": [0]}, inline_max_bytes="9"), TypeError,
         "inline_max_bytes"),
        (lambda: txn.delete_rows("p=a/f.parquet"), TypeError, "delete_rows"),
    ]  # fmt: skip
    for call, error, message in cases:
        with pytest.raises(error, match=message):
            call()
    assert txn.app_transaction is None and txn.metadata is None and txn.protocol is None
    assert txn.domains == [] and txn.read.is_blind()
    # A mapping as domain configuration is stored as its JSON.
    txn.set_domain_metadata("app.settings", {"b": 1, "a": [True]})
    assert txn.domains[0].configuration == '{"b":1,"a":[true]}'
    unchanged.check()


def test_commit_arguments_are_checked_before_anything_is_written(table: DeltaTable):
    unchanged = Unchanged(table)
    add = table.add_file("p=a/f.parquet", {"p": "a"})
    cases = [
        ({"operation": 5}, TypeError, "operation must be a string"),
        ({"operation": ""}, ValueError, "operation must not be empty"),
        ({"operation_parameters": ["x"]}, TypeError, "operation_parameters must be a mapping"),
        ({"operation_parameters": {1: "x"}}, TypeError, "string keys"),
        ({"operation_parameters": {"when": object()}}, TypeError, r"operation_parameters\['when'\]"),
        ({"operation_metrics": {"rows": float("nan")}}, TypeError, "operation_metrics"),
        ({"max_attempts": 0}, ValueError, "max_attempts must be at least 1"),
        ({"max_attempts": "3"}, TypeError, "max_attempts must be an integer"),
        ({"user_metadata": {"a": 1}}, TypeError, "user_metadata must be a string"),
        ({"auto_checkpoint": "false"}, TypeError, "auto_checkpoint must be True or False"),
    ]
    for kwargs, error, message in cases:
        txn = table.transaction().add_files([AddFile("p=a/g.parquet", add.size, {"p": "a"})])
        with pytest.raises(error, match=message):
            txn.commit(**kwargs)
    unchanged.check()


def test_a_committed_transaction_refuses_more_actions(table: DeltaTable):
    txn = table.transaction()
    txn.commit()
    for call in (lambda: txn.remove_files("p=a/f.parquet"), lambda: txn.set_app_transaction("a", 1),
                 lambda: txn.read_whole_table(), lambda: txn.delete_rows({})):  # fmt: skip
        with pytest.raises(DeltaError, match="already committed"):
            call()


def test_create_checks_its_arguments_and_unknown_features(tmp_path: Path):
    uri = str(tmp_path / "new")
    cases = [
        ({"schema": ["id"]}, TypeError, "schema must be a pyarrow.Schema"),
        ({"partition_by": [1]}, TypeError, "partition_by must be a list of strings"),
        ({"partition_by": "nope"}, InvalidCommitError, "partition column 'nope'"),
        ({"configuration": ["a"]}, TypeError, "configuration must be a mapping"),
        ({"configuration": {"delta.appendOnly": object()}}, TypeError, "delta.appendOnly"),
        ({"configuration": {"delta.feature.timeMachine": "supported"}}, UnsupportedFeatureError,
         "timeMachine"),
        ({"name": 3}, TypeError, "name must be a string"),
        ({"storage_options": "x"}, TypeError, "storage_options must be a mapping"),
        ({"allow_unsafe_storage": 1}, TypeError, "allow_unsafe_storage"),
    ]  # fmt: skip
    for kwargs, error, message in cases:
        args = {"schema": SCHEMA, **kwargs}
        with pytest.raises(error, match=message):
            DeltaTable.create(uri, **args)
        assert not (tmp_path / "new" / "_delta_log").exists() or not list((tmp_path / "new").rglob("*.json"))
    with pytest.raises(TypeError, match="uri must be a string or path"):
        DeltaTable.create(42, SCHEMA)  # type: ignore[arg-type]
    # What users naturally write: one partition column as a string, booleans as properties.
    t = DeltaTable.create(Path(uri), SCHEMA, partition_by="p", configuration={"delta.appendOnly": True})
    snap = t.snapshot()
    assert snap.partition_columns == ["p"] and snap.configuration["delta.appendOnly"] == "true"


def test_maintenance_and_reads_check_their_arguments(table: DeltaTable):
    unchanged = Unchanged(table)
    cases = [
        (lambda: table.checkpoint(version="1"), TypeError, "version must be an integer"),
        (lambda: table.checkpoint(parts=0), ValueError, "parts must be at least 1"),
        (lambda: table.vacuum(retention_hours="168"), TypeError, "retention_hours must be a number"),
        (lambda: table.vacuum(retention_hours=-1), ValueError, "retention_hours"),
        (lambda: table.vacuum(dry_run="no"), TypeError, "dry_run must be True or False"),
        (lambda: table.vacuum(max_workers=0), ValueError, "max_workers"),
        (lambda: table.vacuum(progress="print"), TypeError, "progress must be callable"),
        (lambda: table.cleanup_expired_logs(retention_ms="1 day"), TypeError, "retention_ms"),
        (lambda: table.snapshot(version="2"), TypeError, "version must be an integer"),
        (lambda: table.history(limit="5"), TypeError, "limit must be an integer"),
        (lambda: table.add_file(5), TypeError, "path must be a string"),
        (lambda: table.add_file("p=a/f.parquet", {"p": 1}), TypeError, "partition_values"),
        (lambda: table.transaction(isolation="Snapshot"), ValueError, "isolation must be one of"),
    ]
    for call, error, message in cases:
        with pytest.raises(error, match=message):
            call()
    unchanged.check()


def test_a_table_with_a_writer_feature_we_do_not_know_is_refused_when_a_transaction_starts(table: DeltaTable):
    root = Path(table.store.root)
    protocol = {"protocol": {"minReaderVersion": 1, "minWriterVersion": 7, "writerFeatures": ["timeMachine"]}}
    (root / "_delta_log" / f"{2:020d}.json").write_text(json.dumps(protocol) + "\n")  # another engine's
    unchanged = Unchanged(table)
    with pytest.raises(UnsupportedFeatureError, match="timeMachine") as caught:
        table.transaction()
    assert caught.value.features == ("timeMachine",)
    for call in (lambda: table.checkpoint(), lambda: table.vacuum(dry_run=True)):
        with pytest.raises(UnsupportedFeatureError, match="timeMachine"):
            call()
    unchanged.check()
