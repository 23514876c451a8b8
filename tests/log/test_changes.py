"""Change reads (``DeltaTable.changes``): what each kind of commit yields as ``table_changes`` rows, the
per-version actions, timestamps, and the ranges refused by name. Delta Spark's own ``table_changes`` on
seeded workloads is compared in tests/oracle/test_changes_agree.py.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import os
import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from airflow_provider_delta.log import DeltaTable, Metadata, VersionNotFoundError
from airflow_provider_delta.log.base.errors import (
    ChangeDataNotRecordedError,
    ChangeRangeError,
    DataFileNotFoundError,
    IncompatibleSchemaChangeError,
)
from airflow_provider_delta.log.changes.schema_evolution import schema_break
from airflow_provider_delta.log.snapshot import replay as replay_module

SCHEMA = pa.schema([("id", pa.int64()), ("s", pa.string()), ("p", pa.string())])
CDF = {"delta.enableChangeDataFeed": "true", "delta.enableDeletionVectors": "true"}


def _rows(ids, p="a", s=None):
    return pa.table({"id": pa.array(ids, pa.int64()), "s": [s or f"s{i}" for i in ids], "p": [p] * len(ids)})


def _seen(changes) -> list[tuple]:
    t = changes.to_table()
    return sorted(zip(t["_commit_version"].to_pylist(), t["_change_type"].to_pylist(), t["id"].to_pylist(),
                      t["s"].to_pylist(), strict=True))  # fmt: skip


def _ids(root: Path, path: str) -> list[int]:
    return pq.read_table(root / path, columns=["id"]).column(0).to_pylist()


def _table(tmp_path: Path, configuration=CDF, **kw) -> tuple[DeltaTable, Path]:
    root = tmp_path / "t"
    return DeltaTable.create(str(root), SCHEMA, partition_by=["p"], configuration=configuration, **kw), root


def test_each_kind_of_commit_yields_the_rows_table_changes_does(tmp_path: Path):
    t, root = _table(tmp_path)
    t.write(_rows([1, 2, 3, 4]))  # v1
    t.write(_rows([5, 6], p="b"))  # v2
    (f,) = [r["path"] for r in t.snapshot().files.to_pylist() if r["path"].startswith("p=a")]
    t.transaction().delete_rows({f: [1]}).commit("DELETE")  # v3: id 2 by a deletion vector
    t.transaction().delete_rows({f: [0, 2]}).commit("DELETE")  # v4: the vector grows: ids 1 and 3 only
    (g,) = [r["path"] for r in t.snapshot().files.to_pylist() if r["path"].startswith("p=b")]
    t.transaction().remove_files(g).commit("DELETE")  # v5: a whole file: its rows
    txn = t.transaction().delete_rows({f: [3]})  # v6: an UPDATE: change data files only
    txn.add_files(t.add_file(_write(root, "p=a/new.parquet", _rows([4], s="up")), {"p": "a"}))
    kinds = pa.array(["update_preimage", "update_postimage"])
    images = pa.concat_tables([_rows([4]), _rows([4], s="up")]).append_column("_change_type", kinds)
    txn.add_change_data(images).commit("UPDATE")
    t.write(_rows([7], p="c"))  # v7
    t.write(_rows([8], p="c"))  # v8
    assert t.optimize().num_files_removed >= 2  # v9: dataChange=false: no changes
    changes = t.changes(1)
    assert (changes.start, changes.end) == (1, 9)
    assert _seen(changes) == [
        (1, "insert", 1, "s1"), (1, "insert", 2, "s2"), (1, "insert", 3, "s3"), (1, "insert", 4, "s4"),
        (2, "insert", 5, "s5"), (2, "insert", 6, "s6"),
        (3, "delete", 2, "s2"),
        (4, "delete", 1, "s1"), (4, "delete", 3, "s3"),
        (5, "delete", 5, "s5"), (5, "delete", 6, "s6"),
        (6, "update_postimage", 4, "up"), (6, "update_preimage", 4, "s4"),
        (7, "insert", 7, "s7"), (8, "insert", 8, "s8"),
    ]  # fmt: skip
    table = changes.to_table()
    assert table.column_names == ["id", "s", "p", "_change_type", "_commit_version", "_commit_timestamp"]
    assert table.schema.field("_commit_timestamp").type == pa.timestamp("us", tz="UTC")
    by_version = {v.version: v for v in changes.versions}
    assert [by_version[v].operation for v in (1, 3, 5, 6, 9)] == ["WRITE", "DELETE", "DELETE", "UPDATE",
                                                                  "OPTIMIZE"]  # fmt: skip
    assert (by_version[3].adds.num_rows, by_version[3].removes.num_rows) == (1, 1)
    assert by_version[6].cdc.num_rows == 1
    assert by_version[6].cdc.column("path").to_pylist()[0].startswith("_change_data/p=a/")
    stamps = [v.timestamp for v in changes.versions]
    assert stamps == sorted(stamps) and len(set(stamps)) == len(stamps)  # monotone, as Delta Spark's
    got = {(r["_commit_version"], r["_commit_timestamp"]) for r in table.select(
        ["_commit_version", "_commit_timestamp"]).to_pylist()}  # fmt: skip
    assert got == {(v, dt.datetime.fromtimestamp(by_version[v].timestamp / 1000, dt.UTC))
                   for v in (1, 2, 3, 4, 5, 6, 7, 8)}  # fmt: skip
    # A sub-range, columns and a filter; the reader streams the same rows.
    assert _seen(t.changes(4, 5)) == [(4, "delete", 1, "s1"), (4, "delete", 3, "s3"),
                                      (5, "delete", 5, "s5"), (5, "delete", 6, "s6")]  # fmt: skip
    picked = t.changes(1, 2, columns=["id"], filter="id > 4").to_table()
    assert picked.column_names == ["id", "_change_type", "_commit_version", "_commit_timestamp"]
    assert sorted(picked["id"].to_pylist()) == [5, 6]
    assert changes.to_reader().read_all().num_rows == table.num_rows


def _write(root: Path, path: str, rows: pa.Table) -> str:
    (root / path).parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(rows.select(["id", "s"]), root / path)
    return path


def test_a_restore_of_a_deletion_vector_reads_the_rows_back_as_inserts(tmp_path: Path):
    t, root = _table(tmp_path)
    t.write(_rows([1, 2, 3]))
    (f,) = t.snapshot().files.column("path").to_pylist()
    t.transaction().delete_rows({f: [0, 1]}).commit("DELETE")  # v2
    t.restore(1)  # v3: the file back without its vector
    assert _seen(t.changes(2)) == [(2, "delete", 1, "s1"), (2, "delete", 2, "s2"),
                                   (3, "insert", 1, "s1"), (3, "insert", 2, "s2")]  # fmt: skip


def test_without_change_data_feed_appends_read_and_a_delete_is_refused_naming_it(tmp_path: Path):
    t, root = _table(tmp_path, configuration={"delta.enableDeletionVectors": "true"})
    t.write(_rows([1, 2]))
    t.write(_rows([3]))
    (f,) = [r["path"] for r in t.snapshot().files.to_pylist() if _ids(root, r["path"]) == [1, 2]]
    t.transaction().delete_rows({f: [0]}).commit("DELETE")  # v3
    t.write(_rows([4]))
    assert _seen(t.changes(1, 2)) == [(1, "insert", 1, "s1"), (1, "insert", 2, "s2"), (2, "insert", 3, "s3")]
    changes = t.changes(2)  # the actions are there; the rows of version 3 cannot be told
    assert [v.removes.num_rows for v in changes.versions] == [0, 1, 0]
    refused = r"version 3 .*\(DELETE\).*enableChangeDataFeed"
    with pytest.raises(ChangeDataNotRecordedError, match=refused) as e:
        changes.to_table()
    assert e.value.version == 3
    assert _seen(t.changes(4)) == [(4, "insert", 4, "s4")]


def test_column_mapping_and_a_merge_that_changed_nothing(tmp_path: Path):
    t, root = _table(tmp_path, configuration={**CDF, "delta.columnMapping.mode": "name"})
    t.write(_rows([1, 2], p="x"))
    # A MERGE whose metrics say it changed no row: Delta Spark reads nothing from its file actions.
    (f,) = t.snapshot().files.to_pylist()
    metrics = {"numTargetRowsInserted": "0", "numTargetRowsUpdated": "0", "numTargetRowsDeleted": "0"}
    copy = f["path"].replace(".parquet", "-copy.parquet")
    shutil.copy(root / f["path"], root / copy)  # the rewrite of a MERGE that matched no row
    t.transaction().remove_files(f["path"]).add_files(
        t.add_file(copy, dict(f["partitionValues"]))).commit("MERGE", operation_metrics=metrics)
    assert _seen(t.changes(1)) == [(1, "insert", 1, "s1"), (1, "insert", 2, "s2")]
    assert t.changes(1).to_table()["p"].to_pylist() == ["x", "x"]


def test_in_commit_timestamps_are_the_commit_timestamps(tmp_path: Path):
    t, _ = _table(tmp_path, configuration={**CDF, "delta.enableInCommitTimestamps": "true"})
    t.write(_rows([1]))
    info = json.loads((tmp_path / "t/_delta_log/00000000000000000001.json").read_text().splitlines()[0])
    ict = info["commitInfo"]["inCommitTimestamp"]
    changes = t.changes(1)
    assert changes.versions[0].timestamp == ict
    assert changes.to_table()["_commit_timestamp"][0].as_py() == dt.datetime.fromtimestamp(ict / 1000, dt.UTC)


def _set_mtimes(root: Path, times_ms: dict[int, int]) -> None:
    for v, ms in times_ms.items():
        os.utime(root / "_delta_log" / f"{v:020d}.json", ns=(ms * 1_000_000, ms * 1_000_000))


def test_timestamps_resolve_as_table_changes_does(tmp_path: Path):
    t, root = _table(tmp_path)
    for i in range(1, 5):
        t.write(_rows([i]))
    base = 1_700_000_000_000
    _set_mtimes(root, {v: base + 10_000 * v for v in range(5)})  # version v at base + 10 s * v

    def at(seconds: float) -> str:
        return dt.datetime.fromtimestamp((base + seconds * 1000) / 1000, dt.UTC).isoformat()

    def versions(start, end=None):
        c = t.changes(start, end)
        return c.start, c.end, sorted(set(c.to_table()["_commit_version"].to_pylist()))

    assert versions(at(10)) == (1, 4, [1, 2, 3, 4])  # a commit's own time: that commit
    assert versions(at(15), at(35)) == (2, 3, [2, 3])  # between commits: the next, the previous
    assert versions(at(-5), at(20)) == (0, 2, [1, 2])  # before the first commit: from the first
    assert versions(2, at(31)) == (2, 3, [2, 3])  # a version and a timestamp
    assert versions(at(21), at(29)) == (3, 2, [])  # both between two commits: nothing, as Delta Spark
    when = dt.datetime.fromtimestamp((base + 20_000) / 1000, dt.UTC)
    assert versions(when, when) == (2, 2, [2])
    with pytest.raises(ChangeRangeError, match="after the latest commit"):
        t.changes(at(41))
    with pytest.raises(ChangeRangeError, match="after the latest commit"):
        t.changes(at(10), at(41))
    with pytest.raises(ChangeRangeError, match="end is before the start"):
        t.changes(at(30), at(12))
    # Keywords for any timestamp snapshot(timestamp=) takes, ms since the epoch too (an int bound is a
    # version), resolved the same way.
    def by_keyword(start=None, end=None, **kw):
        c = t.changes(start, end, **kw)
        return c.start, c.end

    assert by_keyword(starting_timestamp=base + 15_000, ending_timestamp=base + 35_000) == (2, 3)
    assert by_keyword(starting_timestamp=float(base + 10_000)) == (1, 4)
    assert by_keyword(starting_timestamp=at(15), ending_timestamp=when) == (2, 2)
    assert by_keyword(2, ending_timestamp=base + 31_000) == (2, 3)
    assert by_keyword(at(15), ending_timestamp=base + 35_000) == (2, 3)
    assert by_keyword(starting_timestamp=base + 21_000, ending_timestamp=base + 29_000) == (3, 2)
    with pytest.raises(TypeError, match="not both"):
        t.changes(1, starting_timestamp=base)
    with pytest.raises(TypeError, match="needs a start"):
        t.changes()
    with pytest.raises(TypeError, match="starting_timestamp is a timestamp"):
        t.changes(starting_timestamp=True)
    with pytest.raises(ChangeRangeError, match="after the latest commit"):
        t.changes(starting_timestamp=base + 41_000)


def test_bad_ranges_are_refused_by_name(tmp_path: Path):
    t, root = _table(tmp_path)
    for i in range(1, 6):
        t.write(_rows([i]))
    with pytest.raises(ChangeRangeError, match="from version 4 to 2: the end is before the start"):
        t.changes(4, 2)
    with pytest.raises(VersionNotFoundError, match="version 9 .* does not exist yet \\(the latest is 5\\)"):
        t.changes(9)
    with pytest.raises(VersionNotFoundError, match="version 7 .* does not exist yet"):
        t.changes(3, 7)
    with pytest.raises(VersionNotFoundError, match="version -1"):
        t.changes(-1)
    with pytest.raises(TypeError, match="versions \\(int\\) or timestamps"):
        t.changes(1.5)
    # Log cleanup: commits 0..2 gone, a checkpoint at 3 keeps the table readable from there.
    t.checkpoint(3)
    for v in range(3):
        (root / "_delta_log" / f"{v:020d}.json").unlink()
    with pytest.raises(VersionNotFoundError, match="commit of version 1 .* no longer in the log") as e:
        t.changes(1, 4)
    assert (e.value.earliest, e.value.latest) == (3, 5)
    assert _seen(t.changes(4)) == [(4, "insert", 4, "s4"), (5, "insert", 5, "s5")]
    # VACUUM deleted a file a version needs: named, with its version, when the rows are read.
    (path,) = [r["path"] for r in t.snapshot().files.to_pylist() if _ids(root, r["path"]) == [5]]
    (root / path).unlink()
    changes = t.changes(4)  # the log is fine: the actions read
    with pytest.raises(DataFileNotFoundError, match=f"data file {path} of version 5 is gone") as e:
        changes.to_table()
    assert (e.value.path, e.value.version) == (path, 5)


def test_a_change_read_never_replays_the_table(tmp_path: Path, monkeypatch):
    """The range's commits, a listing, and the protocol and metadata at the start: never the checkpoint's
    file rows (``replay``), even when the metadata must come from the checkpoint."""
    t, root = _table(tmp_path)
    for i in range(1, 8):
        t.write(_rows([i, 100 + i]))
    t.checkpoint(7)
    for i in range(8, 12):
        t.write(_rows([i]))

    def refuse(*args, **kwargs):
        raise AssertionError("a change read replayed the table")

    monkeypatch.setattr(replay_module, "replay", refuse)
    monkeypatch.setattr(replay_module, "read_checkpoint", refuse)
    monkeypatch.setattr(replay_module, "apply_checkpoint_batch", refuse)
    for v in range(8):  # the metadata is found in the checkpoint alone, not in a commit
        (root / "_delta_log" / f"{v:020d}.json").unlink()
    changes = t.changes(10)
    assert _seen(changes) == [(10, "insert", 10, "s10"), (11, "insert", 11, "s11")]
    assert changes.metadata.partition_columns == ("p",)


def test_deletion_vector_changes_read_only_the_newly_deleted_rows_of_a_big_file(tmp_path: Path):
    t, root = _table(tmp_path)
    ids = np.arange(50_000)
    t.write(pa.table({"id": ids, "s": pa.array(ids.astype(str)), "p": pa.array(["a"] * len(ids))}))
    (f,) = t.snapshot().files.column("path").to_pylist()
    rng = np.random.default_rng(7)
    first = np.sort(rng.choice(len(ids), 500, replace=False))
    more = np.setdiff1d(np.sort(rng.choice(len(ids), 800, replace=False)), first)
    t.transaction().delete_rows({f: first}).commit("DELETE")
    t.transaction().delete_rows({f: more}).commit("DELETE")
    got = t.changes(3).to_table()
    assert sorted(got["id"].to_pylist()) == sorted(_ids(root, f)[i] for i in more)
    assert set(got["_change_type"].to_pylist()) == {"delete"}


def _alter(t: DeltaTable, edit, operation: str = "ALTER TABLE") -> None:
    """A schema change as ALTER TABLE commits it: a metaData action with the edited schema."""
    md = t.snapshot().metadata
    schema = md.schema
    edit(schema["fields"])
    altered = dataclasses.replace(md, schema_string=json.dumps(schema))
    t.transaction().update_metadata(altered).commit(operation)


def _field(fields: list[dict], name: str) -> dict:
    return next(f for f in fields if f["name"] == name)


@pytest.mark.parametrize("mapping", ["none", "name"])
def test_a_column_added_inside_a_range_reads_null_in_the_versions_before_it(tmp_path: Path, mapping: str):
    t, root = _table(tmp_path, configuration={**CDF, "delta.columnMapping.mode": mapping})
    t.write(_rows([1, 2]))  # v1
    added = _rows([3]).append_column("n", pa.array([30], pa.int64()))
    t.write(added, schema_mode="merge")  # v2: ADD COLUMN n
    (f,) = t.changes(1, 1).versions[0].adds.column("path").to_pylist()
    t.transaction().delete_rows({f: [0]}).commit("DELETE")  # v3: a row of a file older than the column
    changes = t.changes(1)
    assert changes.schema.names[:4] == ["id", "s", "p", "n"]
    rows = changes.to_table().to_pylist()
    got = sorted((r["_commit_version"], r["_change_type"], r["id"], r["n"]) for r in rows)
    assert got == [(1, "insert", 1, None), (1, "insert", 2, None), (2, "insert", 3, 30),
                   (3, "delete", 1, None)]  # fmt: skip
    # The start's schema is the end's too when the range ends before the change: no column n.
    assert "n" not in t.changes(1, 1).to_table().column_names


def test_a_rename_or_a_drop_inside_a_range_is_refused_naming_its_version_and_column(tmp_path: Path):
    t, root = _table(tmp_path, configuration={**CDF, "delta.columnMapping.mode": "name"})
    t.write(_rows([1]))  # v1
    _alter(t, lambda fields: _field(fields, "s").update(name="label"))  # v2: RENAME COLUMN s TO label
    t.write(pa.table({"id": [2], "label": ["l2"], "p": ["a"]}))  # v3
    changes = t.changes(1)
    assert [v.version for v in changes.versions] == [1, 2, 3]  # the actions read; the rows cannot be
    renamed = (r"from version 1 to 3 cross an incompatible schema change at version 2: column 's' was "
               r"renamed to 'label'.*read versions 1\.\.1 and 2\.\.3")
    with pytest.raises(IncompatibleSchemaChangeError, match=renamed) as e:
        changes.to_table()
    assert (e.value.version, e.value.column) == (2, "s")
    # Each side of the change reads; a range starting at the change reads its rows in the new names.
    assert t.changes(1, 1).to_table()["s"].to_pylist() == ["s1"]
    assert t.changes(2).to_table()["label"].to_pylist() == ["l2"]
    _alter(t, lambda fields: fields.remove(_field(fields, "label")))  # v4: DROP COLUMN label
    t.write(pa.table({"id": [5], "label": ["new"], "p": ["a"]}), schema_mode="merge")  # v5: label again
    # The drop alone leaves a schema the end can read (label is "added" at v5 under a new physical name),
    # but the rows of v3 hold the old label: the break is named at the drop.
    with pytest.raises(IncompatibleSchemaChangeError, match="at version 4: column 'label' was dropped") as e:
        t.changes(3).to_table()
    assert (e.value.version, e.value.column) == (4, "label")
    assert sorted(t.changes(4).to_table()["label"].to_pylist()) == ["new"]
    # An additive change before a rename: the rename is named (Delta Spark names the first metaData it
    # checks, the ADD COLUMN), and the two ranges suggested read.
    t.write(pa.table({"id": [6], "label": ["x"], "p": ["a"], "n": [60]}), schema_mode="merge")  # v6
    _alter(t, lambda fields: _field(fields, "label").update(name="tag"))  # v7
    renamed = r"at version 7: column 'label' was renamed to 'tag'.*versions 5\.\.6 and 7\.\.7"
    with pytest.raises(IncompatibleSchemaChangeError, match=renamed):
        t.changes(5).to_table()
    assert t.changes(5, 6).to_table()["n"].to_pylist() == [None, 60]


def test_a_type_widened_inside_a_range_reads_widened_other_type_changes_are_refused(tmp_path: Path):
    schema = pa.schema([("id", pa.int32()), ("s", pa.string())])
    config = {**CDF, "delta.enableTypeWidening": "true"}
    t = DeltaTable.create(str(tmp_path / "t"), schema, configuration=config)
    t.write(pa.table({"id": pa.array([1], pa.int32()), "s": ["a"]}))  # v1
    _alter(t, lambda fields: _field(fields, "id").update(type="long"))  # v2: CHANGE COLUMN id TYPE BIGINT
    t.write(pa.table({"id": pa.array([2**40], pa.int64()), "s": ["b"]}))  # v3
    widened = t.changes(1).to_table()
    assert widened.schema.field("id").type == pa.int64()
    assert sorted(widened["id"].to_pylist()) == [1, 2**40]
    _alter(t, lambda fields: _field(fields, "s").update(type="integer"), "REPLACE TABLE")  # v4: no widening
    changed = "version 4: column 's' changed type from string to integer"
    with pytest.raises(IncompatibleSchemaChangeError, match=changed):
        t.changes(3).to_table()
    _alter(t, lambda fields: _field(fields, "id").update(nullable=False))  # v5: SET NOT NULL
    with pytest.raises(IncompatibleSchemaChangeError, match="version 5: column 'id' was made NOT NULL"):
        t.changes(4).to_table()


def test_schema_breaks_as_delta_spark_tells_them():
    """``schema_break`` on metadata pairs: what Delta Spark's batch change read refuses and follows."""
    def md(fields, mode="none", partitions=()):
        return Metadata("x", json.dumps({"type": "struct", "fields": fields}), tuple(partitions),
                        {"delta.columnMapping.mode": mode} if mode != "none" else {})  # fmt: skip

    def col(name, t="long", physical=None, nullable=True):
        meta = {"delta.columnMapping.physicalName": physical} if physical else {}
        return {"name": name, "type": t, "nullable": nullable, "metadata": meta}

    a, b = col("a", physical="col-a"), col("b", physical="col-b")
    assert schema_break(md([a], "name"), md([a, b], "name")) is None  # ADD COLUMN
    assert schema_break(md([a, b], "name"), md([a], "name")).reason == "column 'b' was dropped"
    found = schema_break(md([a], "name"), md([col("z", physical="col-a")], "name"))
    assert found == ("a", "column 'a' was renamed to 'z'")
    # Nested: a struct field renamed keeps its physical name.
    inner = {"type": "struct", "fields": [col("x", physical="col-x")]}
    renamed = {"type": "struct", "fields": [col("y", physical="col-x")]}
    assert schema_break(md([col("st", inner, "col-st")], "name"),
                        md([col("st", renamed, "col-st")], "name")).column == "st.x"  # fmt: skip
    # An upgrade to column mapping keeps the names as physical names; a downgrade is refused.
    assert schema_break(md([col("a")]), md([col("a", physical="a")], "name")) is None
    assert schema_break(md([col("a")]), md([col("b", physical="a")], "name")).reason.endswith("to 'b'")
    assert "turned off" in schema_break(md([a], "name"), md([col("a")])).reason
    assert "partition columns" in schema_break(md([a, b], "name", ["a"]), md([a, b], "name", ["b"])).reason
    # By name, without column mapping: case, nullability, types (widening followed, unlike Delta Spark).
    assert schema_break(md([col("a")]), md([col("A")])).reason == "column 'a' was renamed to 'A'"
    assert schema_break(md([col("a", nullable=False)]), md([col("a")])) is None
    for old, new, ok in [("byte", "long", True), ("integer", "double", True), ("long", "double", False),
                         ("date", "timestamp_ntz", True), ("decimal(10,2)", "decimal(12,3)", True),
                         ("decimal(10,2)", "decimal(10,3)", False), ("integer", "decimal(10,0)", True),
                         ("long", "decimal(19,0)", False), ("long", "integer", False),
                         ("void", "string", True), ("string", "binary", False)]:  # fmt: skip
        assert (schema_break(md([col("a", old)]), md([col("a", new)])) is None) is ok, (old, new)
    elements = {"type": "array", "elementType": "long", "containsNull": True}
    assert "elements" in schema_break(md([col("a", elements)]),
                                      md([col("a", {**elements, "containsNull": False})])).reason  # fmt: skip
