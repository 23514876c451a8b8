"""DELETE, UPDATE and MERGE in the task, on Arrow (``log/row_changes``): Delta Spark's semantics (clause
order, NULL keys, the cardinality rule), deletion vectors where the table enables them and copy-on-write of
the touched files only elsewhere, change data, row ids kept, the table's rules, types widened by a MERGE's
schema evolution where the table enables type widening, exactly once, bad input refused by name with
nothing written, and concurrent changes on disjoint partitions both committing.
deltalake's MERGE, DELETE and UPDATE are the oracle for the rows (on tables it can change); Delta Spark's
agreement is in tests/oracle.
"""

from __future__ import annotations

import random
import shutil
from pathlib import Path

import deltalake
import pandas as pd
import polars as pl
import pyarrow as pa
import pytest

from airflow_provider_delta.log import DeltaTable
from airflow_provider_delta.log.base.errors import (
    ConcurrentAppendError,
    ConstraintViolationError,
    IdentityColumnError,
    InvalidCommitError,
    InvalidConditionError,
    MergeCardinalityError,
    SchemaMismatchError,
)
from airflow_provider_delta.log.expressions.expressions import ColumnNotFoundError
from airflow_provider_delta.log.expressions.sql_parser import UnsupportedExpressionError
from airflow_provider_delta.log.row_changes import merge as merge_module

SEED = 20261128
DV = {"delta.enableDeletionVectors": "true"}
CDF = {"delta.enableChangeDataFeed": "true"}


def _data_files(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*") if p.is_file() and "_delta_log" not in p.parts}


def _rows(uri: str, key: str = "id") -> list[dict]:
    rows = DeltaTable(uri).to_pyarrow_table().to_pylist()
    return sorted(rows, key=lambda r: (r[key] is None, r[key] if r[key] is not None else 0))


def _table(tmp_path: Path, name: str = "t", n: int = 20, config: dict | None = None, **options) -> str:
    uri = str(tmp_path / name)
    regions = [["a", "b", "c"][i % 3] for i in range(n)]
    data = pa.table({"id": pa.array(range(n), pa.int64()), "region": regions,
                     "v": pa.array([float(i) for i in range(n)])})  # fmt: skip
    DeltaTable(uri).write(data, partition_by=["region"], configuration=config, **options)
    return uri


def _commit(uri: str, version: int) -> dict:
    return next(h for h in DeltaTable(uri).history() if h.version == version)


# -- DELETE ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("config", [{}, DV], ids=["copy-on-write", "deletion-vectors"])
def test_delete_matches_deltalake_and_touches_only_matching_files(tmp_path, config):
    uri = _table(tmp_path, config={**config, **CDF})
    twin = str(tmp_path / "twin")
    shutil.copytree(uri, twin)
    before = DeltaTable(uri).snapshot().files.column("path").to_pylist()
    result = DeltaTable(uri).delete("id % 7 = 3 AND region = 'a'")
    assert result.version == 1 and result.metrics["numDeletedRows"] == 1  # id 3 only (3 % 3 == 0 -> 'a')
    after = DeltaTable(uri).snapshot().files.column("path").to_pylist()
    untouched = [p for p in before if "region=a" not in p]
    assert set(untouched) <= set(after)  # files of other partitions stay as they were
    if config:
        assert result.metrics["numDeletionVectorsAdded"] == 1 and result.metrics["numAddedFiles"] == 0
        assert set(before) == set(after)  # vectors only: no data file rewritten
    else:
        assert result.metrics["numRemovedFiles"] == 1 and result.metrics["numCopiedRows"] == 6
    if not config:  # deltalake refuses tables with deletion vectors
        deltalake.DeltaTable(twin).delete("id % 7 = 3 AND region = 'a'")
        assert _rows(uri) == _rows(twin)
    assert [r["id"] for r in _rows(uri)] == [i for i in range(20) if i != 3]
    commit = _commit(uri, 1)
    assert commit.operation == "DELETE"
    parameters = commit.commit_info["operationParameters"]
    assert parameters["predicate"] == '["id % 7 = 3 AND region = \'a\'"]'
    changes = DeltaTable(uri).changes(1, 1).to_table()
    assert changes.column("_change_type").to_pylist() == ["delete"]
    assert changes.column("id").to_pylist() == [3]


def test_delete_by_partition_only_removes_whole_files_without_reading_them(tmp_path):
    uri = _table(tmp_path)
    result = DeltaTable(uri).delete("region IN ('a', 'c')")
    assert result.metrics["numRemovedFiles"] == 2 and result.metrics["numAddedFiles"] == 0
    assert result.metrics["numDeletedRows"] == 13
    assert {r["region"] for r in _rows(uri)} == {"b"}
    assert DeltaTable(uri).delete().metrics["numDeletedRows"] == 7 and _rows(uri) == []


def test_delete_keeps_rows_where_the_condition_is_null_and_commits_nothing_without_a_match(tmp_path):
    uri = str(tmp_path / "t")
    DeltaTable(uri).write(pa.table({"id": [1, 2, 3], "x": [1, None, 3]}))
    assert DeltaTable(uri).delete("x > 2").version == 1
    assert [r["id"] for r in _rows(uri)] == [1, 2]
    nothing = DeltaTable(uri).delete("x > 100")
    assert nothing.version is None and nothing.metrics["numDeletedRows"] == 0
    assert DeltaTable(uri).version() == 1


def test_delete_accepts_arrow_expressions_and_dnf(tmp_path):
    import pyarrow.compute as pc

    uri = _table(tmp_path)
    DeltaTable(uri).delete(pc.field("id") < 2)
    DeltaTable(uri).delete([("region", "=", "b"), ("id", ">", 15)])
    assert [r["id"] for r in _rows(uri)] == [i for i in range(2, 20) if not (i % 3 == 1 and i > 15)]


# -- UPDATE ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("config", [{}, DV], ids=["copy-on-write", "deletion-vectors"])
def test_update_matches_deltalake_and_writes_change_data(tmp_path, config):
    uri = _table(tmp_path, config={**config, **CDF})
    twin = str(tmp_path / "twin")
    shutil.copytree(uri, twin)
    result = DeltaTable(uri).update({"v": "v * 10 + 1"}, "id >= 15")
    assert result.metrics["numUpdatedRows"] == 5
    if not config:
        deltalake.DeltaTable(twin).update({"v": "v * 10 + 1"}, predicate="id >= 15")
        assert _rows(uri) == _rows(twin)
    assert [r["v"] for r in _rows(uri)][14:] == [14.0, 151.0, 161.0, 171.0, 181.0, 191.0]
    changes = DeltaTable(uri).changes(1, 1).to_table()
    changes = changes.sort_by([("id", "ascending"), ("_change_type", "ascending")])
    kinds = list(zip(changes["id"].to_pylist(), changes["_change_type"].to_pylist(), changes["v"].to_pylist(),
                     strict=True))  # fmt: skip
    assert kinds[:2] == [(15, "update_postimage", 151.0), (15, "update_preimage", 15.0)] and len(kinds) == 10


def test_update_moves_rows_between_partitions_and_casts_as_the_table_stores(tmp_path):
    uri = _table(tmp_path)
    DeltaTable(uri).update({"region": "'z'", "v": "1"}, "id < 3")
    rows = _rows(uri)
    assert [(r["region"], r["v"]) for r in rows[:3]] == [("z", 1.0)] * 3
    assert any("region=z" in p for p in DeltaTable(uri).snapshot().files.column("path").to_pylist())


def test_update_recomputes_generated_columns_and_enforces_constraints(tmp_path):
    uri = str(tmp_path / "t")
    schema = {"type": "struct", "fields": [
        {"name": "id", "type": "long", "nullable": True, "metadata": {}},
        {"name": "v", "type": "long", "nullable": True, "metadata": {}},
        {"name": "twice", "type": "long", "nullable": True,
         "metadata": {"delta.generationExpression": "v * 2"}},
    ]}  # fmt: skip
    DeltaTable.create(uri, schema, configuration={"delta.constraints.positive": "v > 0"})
    DeltaTable(uri).write(pa.table({"id": pa.array([1, 2], pa.int64()), "v": pa.array([1, 2], pa.int64())}))
    DeltaTable(uri).update({"v": "v + 10"}, "id = 2")
    assert [(r["v"], r["twice"]) for r in _rows(uri)] == [(1, 2), (12, 24)]
    files = _data_files(Path(uri))
    with pytest.raises(ConstraintViolationError, match="positive"):
        DeltaTable(uri).update({"v": "0 - v"}, "id = 1")
    assert _data_files(Path(uri)) == files and DeltaTable(uri).version() == 2  # nothing left behind


def test_update_keeps_row_ids_and_gives_updated_rows_the_new_version(tmp_path):
    uri = _table(tmp_path, n=6, config={"delta.enableRowTracking": "true"})
    before = {r["id"]: r["_metadata"] for r in DeltaTable(uri).scan(
        metadata=["row_id", "row_commit_version"]).to_table().to_pylist()}  # fmt: skip
    version = DeltaTable(uri).update({"v": "-1"}, "id = 4").version
    after = {r["id"]: r["_metadata"] for r in DeltaTable(uri).scan(
        metadata=["row_id", "row_commit_version"]).to_table().to_pylist()}  # fmt: skip
    assert {i: m["row_id"] for i, m in after.items()} == {i: m["row_id"] for i, m in before.items()}
    assert after[4]["row_commit_version"] == version
    assert all(after[i]["row_commit_version"] == before[i]["row_commit_version"] for i in after if i != 4)


def test_bad_updates_are_refused_by_name_before_anything_is_written(tmp_path):
    uri = _table(tmp_path)
    files = _data_files(Path(uri))
    with pytest.raises(ColumnNotFoundError, match="nope"):
        DeltaTable(uri).update({"nope": "1"}, "id = 1")
    with pytest.raises(ColumnNotFoundError, match="missing"):
        DeltaTable(uri).update({"v": "missing + 1"})
    with pytest.raises(ColumnNotFoundError, match="ghost"):
        DeltaTable(uri).delete("ghost = 1")
    with pytest.raises(ValueError, match="at least one column"):
        DeltaTable(uri).update({})
    with pytest.raises(ValueError, match="'V' twice"):
        DeltaTable(uri).update({"v": "1", "V": "2"})
    with pytest.raises(UnsupportedExpressionError):
        DeltaTable(uri).delete("id = = 1")
    with pytest.raises(SchemaMismatchError, match="column 'v' of type double"):
        DeltaTable(uri).update({"v": "'not a number'"}, "id = 1")
    assert _data_files(Path(uri)) == files and DeltaTable(uri).version() == 0


def test_append_only_tables_refuse_row_changes(tmp_path):
    uri = _table(tmp_path, config={"delta.appendOnly": "true"})
    for change in (lambda t: t.delete("id = 1"), lambda t: t.update({"v": "0"}),
                   lambda t: t.merge(pa.table({"id": [1]}), "target.id = source.id")
                   .when_matched_delete().execute()):  # fmt: skip
        with pytest.raises(InvalidCommitError, match="append-only"):
            change(DeltaTable(uri))


def test_each_command_is_exactly_once_per_app_transaction(tmp_path):
    uri = _table(tmp_path)
    first = DeltaTable(uri).delete("id = 1", app_id="dag.task", app_version=7)
    again = DeltaTable(uri).delete("id = 2", app_id="dag.task", app_version=7)
    assert again.already_committed and again.version == first.version
    assert 2 in [r["id"] for r in _rows(uri)]
    source = pa.table({"id": pa.array([100], pa.int64()), "region": ["a"], "v": [1.0]})
    for _ in range(2):
        DeltaTable(uri).merge(source, "target.id = source.id", app_id="dag.merge", app_version=1) \
            .when_not_matched_insert_all().execute()  # fmt: skip
    assert [r["id"] for r in _rows(uri)].count(100) == 1


# -- MERGE ----------------------------------------------------------------------------------------------
def _upsert(t, source, on="target.id = source.id"):
    return t.merge(source, on).when_matched_update_all().when_not_matched_insert_all()


@pytest.mark.parametrize("config", [{}, DV], ids=["copy-on-write", "deletion-vectors"])
def test_merge_upsert_from_every_source_kind(tmp_path, config):
    uri = _table(tmp_path, config=config)
    arrow = pa.table({"id": pa.array([1, 50], pa.int64()), "region": ["b", "a"], "v": [-1.0, -50.0]})
    frame = pd.DataFrame({"id": [2, 51], "region": ["c", "a"], "v": [-2.0, -51.0]})
    polars = pl.DataFrame({"id": [3, 52], "region": ["a", "b"], "v": [-3.0, -52.0]})
    batches = pa.table({"id": pa.array([4, 53], pa.int64()), "region": ["b", "c"], "v": [-4.0, -53.0]})
    reader = pa.RecordBatchReader.from_batches(batches.schema, batches.to_batches(max_chunksize=1))
    for source in (arrow, frame, polars, reader):
        result = _upsert(DeltaTable(uri), source).execute()
        assert result.metrics["numTargetRowsUpdated"] == 1 and result.metrics["numTargetRowsInserted"] == 1
    rows = {r["id"]: r["v"] for r in _rows(uri)}
    assert len(rows) == 24 and all(rows[i] == -i for i in (1, 2, 3, 4, 50, 51, 52, 53))
    assert all(rows[i] == float(i) for i in range(5, 20))


def test_merge_clauses_in_delta_spark_order_against_deltalake(tmp_path):
    """Every clause kind, with conditions, first holding clause wins; NULL keys never match."""
    uri = _table(tmp_path, n=12)
    twin = str(tmp_path / "twin")
    shutil.copytree(uri, twin)
    source = pa.table({"id": pa.array([0, 1, 2, 3, 30, 31, None], pa.int64()),
                       "region": ["a", "b", "c", "a", "b", "c", "a"],
                       "v": [100.0, 101.0, 102.0, 103.0, 130.0, 131.0, 999.0]})  # fmt: skip

    def clauses(builder):
        return (builder
                .when_matched_delete("source.v > 102")
                .when_matched_update({"v": "source.v + target.v"}, "target.id % 2 = 0")
                .when_matched_update({"v": "-1"})
                .when_not_matched_insert({"id": "source.id", "region": "source.region", "v": "source.v"},
                                         "source.v > 130")
                .when_not_matched_insert({"id": "source.id + 1000", "region": "'new'", "v": "0"})
                .when_not_matched_by_source_delete("target.id > 9")
                .when_not_matched_by_source_update({"v": "target.v * 2"}))  # fmt: skip

    ours = clauses(DeltaTable(uri).merge(source, "target.id = source.id")).execute()
    theirs = clauses(deltalake.DeltaTable(twin).merge(source, "target.id = source.id", source_alias="source",
                                                      target_alias="target")).execute()  # fmt: skip
    assert _rows(uri) == _rows(twin)
    m = ours.metrics
    assert (m["numTargetRowsMatchedDeleted"], m["numTargetRowsMatchedUpdated"], m["numTargetRowsInserted"],
            m["numTargetRowsNotMatchedBySourceDeleted"], m["numTargetRowsNotMatchedBySourceUpdated"]) == (
        1, 3, 3, 2, 6)  # fmt: skip
    for name in ("num_target_rows_inserted", "num_target_rows_updated", "num_target_rows_deleted"):
        camel = "numTargetRows" + name.removeprefix("num_target_rows_").capitalize()
        assert m[camel] == theirs[name], name
    ids = [r["id"] for r in _rows(uri)]
    assert 1030 in ids and 31 in ids and None in ids  # a NULL key never matches: inserted as it is


def test_a_target_row_matched_twice_is_refused_naming_its_key_unless_deleted_unconditionally(tmp_path):
    uri = _table(tmp_path)
    files = _data_files(Path(uri))
    twice = pa.table({"id": pa.array([5, 5], pa.int64()), "v": [1.0, 2.0]})
    with pytest.raises(MergeCardinalityError, match=r"'id': 5.*2 source rows"):
        DeltaTable(uri).merge(twice, "target.id = source.id").when_matched_update({"v": "source.v"}).execute()
    assert _data_files(Path(uri)) == files and DeltaTable(uri).version() == 0
    result = DeltaTable(uri).merge(twice, "target.id = source.id").when_matched_delete().execute()
    assert result.metrics["numTargetRowsDeleted"] == 1 and 5 not in [r["id"] for r in _rows(uri)]


def test_merge_with_extra_on_terms_type_mismatched_keys_and_unqualified_names(tmp_path):
    uri = _table(tmp_path)
    source = pa.table({"key": pa.array([1, 4, 7], pa.int32()), "w": [10.0, 40.0, 70.0]})
    result = (DeltaTable(uri).merge(source, "id = key AND target.region = 'b' AND w > 10")
              .when_matched_update({"v": "w"}).execute())  # fmt: skip
    assert result.metrics["numTargetRowsUpdated"] == 2  # ids 4 and 7 are in 'b'; 1 fails w > 10
    assert {r["id"]: r["v"] for r in _rows(uri)}[4] == 40.0


def test_merge_schema_adds_the_source_columns_and_identity_values_are_generated(tmp_path):
    uri = str(tmp_path / "t")
    schema = {"type": "struct", "fields": [
        {"name": "sk", "type": "long", "nullable": True,
         "metadata": {"delta.identity.start": 1, "delta.identity.step": 1,
                      "delta.identity.allowExplicitInsert": False}},
        {"name": "id", "type": "long", "nullable": True, "metadata": {}},
        {"name": "v", "type": "double", "nullable": True, "metadata": {}},
    ]}  # fmt: skip
    DeltaTable.create(uri, schema)
    DeltaTable(uri).write(pa.table({"id": pa.array([1, 2], pa.int64()), "v": [1.0, 2.0]}))
    source = pa.table({"id": pa.array([2, 3], pa.int64()), "v": [20.0, 30.0], "note": ["x", "y"]})
    DeltaTable(uri).merge(source, "target.id = source.id", merge_schema=True) \
        .when_matched_update_all().when_not_matched_insert_all().execute()  # fmt: skip
    rows = _rows(uri)
    assert [(r["id"], r["v"], r["note"]) for r in rows] == [(1, 1.0, None), (2, 20.0, "x"), (3, 30.0, "y")]
    assert [r["sk"] for r in rows] == [1, 2, 3]  # kept for matched rows, generated for the insert
    with pytest.raises(IdentityColumnError, match="sk"):
        DeltaTable(uri).merge(source, "target.id = source.id").when_matched_update({"sk": "0"}).execute()


WIDENING = {"delta.enableTypeWidening": "true"}
TO_LONG = [{"fromType": "integer", "toType": "long"}]


def _narrow_table(tmp_path: Path, config: dict, name: str = "t", **options) -> str:
    """id BIGINT, v INT, p INT, s STRING: three rows, as Delta Spark's type widening examples."""
    uri = str(tmp_path / name)
    data = pa.table({"id": pa.array([1, 2, 4], pa.int64()), "v": pa.array([1, 2, 4], pa.int32()),
                     "p": pa.array([1, 1, 2], pa.int32()), "s": ["a", "b", "d"]})  # fmt: skip
    DeltaTable(uri).write(data, configuration=config, **options)
    return uri


def _all(builder):
    return builder.when_matched_update_all().when_not_matched_insert_all().execute()


def _field(uri: str, name: str) -> dict:
    return next(f for f in DeltaTable(uri).snapshot().metadata.schema["fields"] if f["name"] == name)


def _file_types(uri: str, column: str) -> list[pa.DataType]:
    """The type of ``column`` in each live data file, as written."""
    import pyarrow.parquet as pq

    return [pq.read_schema(str(Path(uri) / path)).field(column).type
            for path in DeltaTable(uri).snapshot().files.column("path").to_pylist()]  # fmt: skip


@pytest.mark.parametrize("config", [{}, DV, CDF], ids=["copy-on-write", "deletion-vectors", "change-data"])
def test_merge_schema_widens_a_column_where_the_table_enables_type_widening(tmp_path, config):
    """Delta Spark's MERGE WITH SCHEMA EVOLUTION on a table with ``delta.enableTypeWidening``: an INT
    column given BIGINT values by ``*`` becomes BIGINT, recorded in ``delta.typeChanges``; the rows it
    writes (updated, inserted and copied) are BIGINT in their files, and older files are read widened."""
    uri = _narrow_table(tmp_path, {**WIDENING, **config})
    source = pa.table({"id": pa.array([2, 3], pa.int64()), "v": pa.array([5_000_000_000, 3], pa.int64()),
                       "p": pa.array([1, 2], pa.int32()), "s": ["x", "y"]})  # fmt: skip
    result = _all(DeltaTable(uri).merge(source, "target.id = source.id", merge_schema=True))
    assert result.version == 1
    v = _field(uri, "v")
    assert v["type"] == "long" and v["metadata"]["delta.typeChanges"] == TO_LONG
    assert _field(uri, "id")["metadata"] == {} and _field(uri, "p")["type"] == "integer"
    assert [(r["id"], r["v"], r["s"]) for r in _rows(uri)] == [(1, 1, "a"), (2, 5_000_000_000, "x"),
                                                               (3, 3, "y"), (4, 4, "d")]  # fmt: skip
    assert DeltaTable(uri).to_pyarrow_table().schema.field("v").type == pa.int64()
    types = _file_types(uri, "v")
    written = [t for t in types if t == pa.int64()]
    assert written and (pa.int32() in types) == bool(config.get("delta.enableDeletionVectors"))
    if config == CDF:
        changes = DeltaTable(uri).changes(1, 1).to_table()
        got = {(r["id"], r["v"], r["_change_type"]) for r in changes.to_pylist()}
        assert got == {(2, 2, "update_preimage"), (2, 5_000_000_000, "update_postimage"), (3, 3, "insert")}


def test_merge_schema_widens_by_an_assigned_expression_and_struct_fields(tmp_path):
    uri = _narrow_table(tmp_path, WIDENING)
    source = pa.table({"id": pa.array([2, 3], pa.int64()), "v": pa.array([5, 3], pa.int64())})
    DeltaTable(uri).merge(source, "target.id = source.id", merge_schema=True) \
        .when_matched_update({"v": "source.v + 1", "p": "target.p + 1"}).execute()  # fmt: skip
    assert _field(uri, "v")["type"] == "long" and _field(uri, "v")["metadata"]["delta.typeChanges"] == TO_LONG
    assert _field(uri, "p")["type"] == "integer"  # INT + 1 is an INT: nothing to widen
    assert [(r["id"], r["v"], r["p"]) for r in _rows(uri)] == [(1, 1, 1), (2, 6, 2), (4, 4, 2)]
    # Struct fields widen at any depth, inside arrays too, each recording its own change.
    nested = str(tmp_path / "nested")
    pair = pa.struct([("a", pa.int32()), ("b", pa.int32())])
    DeltaTable(nested).write(pa.table({
        "id": pa.array([1, 2], pa.int64()),
        "x": pa.array([{"a": 1, "b": 10}, {"a": 2, "b": 20}], pair),
        "arr": pa.array([[{"a": 1, "b": 10}], None], pa.list_(pair)),
    }), configuration=WIDENING)  # fmt: skip
    wider = pa.struct([("a", pa.int64()), ("b", pa.int32())])
    source = pa.table({"id": pa.array([2, 3], pa.int64()),
                       "x": pa.array([{"a": 5_000_000_000, "b": 50}, {"a": 6, "b": 60}], wider),
                       "arr": pa.array([[{"a": 5, "b": 5}], None], pa.list_(wider))})  # fmt: skip
    _all(DeltaTable(nested).merge(source, "target.id = source.id", merge_schema=True))
    x, arr = _field(nested, "x"), _field(nested, "arr")
    assert x["metadata"] == {} and [f["type"] for f in x["type"]["fields"]] == ["long", "integer"]
    assert x["type"]["fields"][0]["metadata"]["delta.typeChanges"] == TO_LONG
    assert arr["type"]["elementType"]["fields"][0]["metadata"]["delta.typeChanges"] == TO_LONG
    assert [(r["id"], r["x"], r["arr"]) for r in _rows(nested)] == [
        (1, {"a": 1, "b": 10}, [{"a": 1, "b": 10}]), (2, {"a": 5_000_000_000, "b": 50}, [{"a": 5, "b": 5}]),
        (3, {"a": 6, "b": 60}, None)]  # fmt: skip


def test_a_widened_merge_key_matches_in_its_new_type(tmp_path):
    """The key column itself widened: old rows (INT in their files) and a source key beyond INT's range
    are compared as BIGINT, so the old rows still match and the new key is inserted."""
    uri = str(tmp_path / "t")
    old = pa.table({"id": pa.array([1, 2], pa.int32()), "v": ["a", "b"]})
    DeltaTable(uri).write(old, configuration=WIDENING)
    source = pa.table({"id": pa.array([2, 5_000_000_000], pa.int64()), "v": ["x", "y"]})
    result = _all(DeltaTable(uri).merge(source, "target.id = source.id", merge_schema=True))
    assert (result.metrics["numTargetRowsUpdated"], result.metrics["numTargetRowsInserted"]) == (1, 1)
    assert _field(uri, "id")["metadata"]["delta.typeChanges"] == TO_LONG
    assert [(r["id"], r["v"]) for r in _rows(uri)] == [(1, "a"), (2, "x"), (5_000_000_000, "y")]


def test_merge_schema_never_widens_a_partition_column(tmp_path):
    """A partition column's values live in the log as text of its type: Delta Spark casts the wider
    values to it (an overflow fails) rather than widening it, and so do we."""
    uri = _narrow_table(tmp_path, WIDENING, partition_by=["p"])
    source = pa.table({"id": pa.array([2, 3], pa.int64()), "v": pa.array([2, 3], pa.int32()),
                       "p": pa.array([7, 8], pa.int64()), "s": ["x", "y"]})  # fmt: skip
    _all(DeltaTable(uri).merge(source, "target.id = source.id", merge_schema=True))
    assert _field(uri, "p") == {"name": "p", "type": "integer", "nullable": True, "metadata": {}}
    assert [(r["id"], r["p"]) for r in _rows(uri)] == [(1, 1), (2, 7), (3, 8), (4, 2)]
    files = _data_files(Path(uri))
    huge = source.set_column(2, "p", pa.array([5_000_000_000, 1], pa.int64()))
    with pytest.raises(SchemaMismatchError, match="'p'"):
        _all(DeltaTable(uri).merge(huge, "target.id = source.id", merge_schema=True))
    assert DeltaTable(uri).version() == 1 and _data_files(Path(uri)) == files


def test_no_widening_without_the_property_or_without_merge_schema(tmp_path):
    """Without ``delta.enableTypeWidening`` (writers must not widen then) or without ``merge_schema``, a
    wider value is cast to the column's type, and one it cannot hold is refused by name, nothing written."""
    wide = pa.table({"id": pa.array([2, 3], pa.int64()), "v": pa.array([5_000_000_000, 3], pa.int64()),
                     "p": pa.array([1, 2], pa.int32()), "s": ["x", "y"]})  # fmt: skip
    plain = _narrow_table(tmp_path, {}, "plain")
    DeltaTable(plain).merge(wide.slice(1), "target.id = source.id", merge_schema=True) \
        .when_not_matched_insert({"id": "source.id", "v": "source.v + 1"}).execute()  # fmt: skip
    assert _field(plain, "v") == {"name": "v", "type": "integer", "nullable": True, "metadata": {}}
    assert [r["v"] for r in _rows(plain)] == [1, 2, 4, 4]
    widening = _narrow_table(tmp_path, WIDENING, "widening")
    for uri, evolve in ((plain, True), (widening, False)):
        version, files = DeltaTable(uri).version(), _data_files(Path(uri))
        with pytest.raises(SchemaMismatchError, match="'v'"):
            _all(DeltaTable(uri).merge(wide, "target.id = source.id", merge_schema=evolve))
        assert DeltaTable(uri).version() == version and _data_files(Path(uri)) == files
        assert _field(uri, "v")["type"] == "integer"


def test_merge_schema_takes_a_narrower_source_as_the_column_type(tmp_path):
    """A source column narrower than the table's (SMALLINT into INT), or the same source the day after a
    MERGE widened the column, is cast to the column's type as without ``merge_schema`` (Delta Spark's
    store assignment): the column keeps its type, and a pipeline's next run is not refused."""
    uri = _narrow_table(tmp_path, WIDENING)
    narrow = pa.table({"id": pa.array([2, 7], pa.int32()), "v": pa.array([20, 70], pa.int16()),
                       "p": pa.array([1, 2], pa.int8()), "s": ["x", "y"]})  # fmt: skip
    _all(DeltaTable(uri).merge(narrow, "target.id = source.id", merge_schema=True))
    assert [_field(uri, c)["type"] for c in ("id", "v", "p")] == ["long", "integer", "integer"]
    assert _field(uri, "v")["metadata"] == {}
    wide = narrow.set_column(1, "v", pa.array([5_000_000_000, 8], pa.int64()))
    _all(DeltaTable(uri).merge(wide, "target.id = source.id", merge_schema=True))
    assert _field(uri, "v")["type"] == "long"
    # The next run's source is INT again: merged into the widened column, not refused.
    again = narrow.set_column(1, "v", pa.array([21, 71], pa.int32()))
    result = _all(DeltaTable(uri).merge(again, "target.id = source.id", merge_schema=True))
    assert result.metrics["numTargetRowsUpdated"] == 2
    assert _field(uri, "v")["metadata"]["delta.typeChanges"] == TO_LONG
    assert [(r["id"], r["v"]) for r in _rows(uri)] == [(1, 1), (2, 21), (4, 4), (7, 71)]


def test_bad_merges_are_refused_by_name_before_anything_is_written(tmp_path):
    uri = _table(tmp_path)
    files = _data_files(Path(uri))
    source = pa.table({"id": pa.array([1], pa.int64()), "v": [1.0]})
    with pytest.raises(InvalidConditionError, match="no equality"):
        DeltaTable(uri).merge(source, "target.id > source.id").when_matched_delete().execute()
    with pytest.raises(ColumnNotFoundError, match="'target.idd', a column of neither"):
        DeltaTable(uri).merge(source, "target.idd = source.id").when_matched_delete().execute()
    with pytest.raises(ColumnNotFoundError, match="'v', which both"):
        DeltaTable(uri).merge(source, "target.id = source.id AND v > 0").when_matched_delete().execute()
    with pytest.raises(ValueError, match="at least one WHEN"):
        DeltaTable(uri).merge(source, "target.id = source.id").execute()
    with pytest.raises(ValueError, match="needs a condition"):
        DeltaTable(uri).merge(source, "target.id = source.id").when_matched_delete() \
            .when_matched_update({"v": "1"}).execute()  # fmt: skip
    with pytest.raises(ColumnNotFoundError, match="region"):  # the source lacks a column of the table
        _upsert(DeltaTable(uri), source).execute()
    with pytest.raises(ColumnNotFoundError, match="nope"):
        DeltaTable(uri).merge(source, "target.id = source.id").when_matched_update({"nope": "1"}).execute()
    with pytest.raises(ValueError, match="twice"):
        DeltaTable(uri).merge(source, "target.id = source.id") \
            .when_matched_update({"v": "1", "V": "2"}).execute()  # fmt: skip
    words = pa.table({"id": pa.array([1], pa.int64()), "region": ["b"], "v": ["one"]})
    with pytest.raises(SchemaMismatchError, match="column 'v'"):
        _upsert(DeltaTable(uri), words).execute()
    assert _data_files(Path(uri)) == files and DeltaTable(uri).version() == 0


def test_merges_into_disjoint_partitions_both_commit(tmp_path, monkeypatch):
    """Two mapped tasks MERGE into different partitions at once: the second lands between the first's
    read and its commit (the first's commit is wrapped to run it there), and both commit, as Delta Spark's
    conflict checker allows; into the same partition, the first is refused."""
    uri = _table(tmp_path)
    real_commit = merge_module.commit
    other = {"region": "b"}
    on = "target.id = source.id AND target.region = source.region"  # the partition in the condition

    def interleaved(*args, **kwargs):
        if other:
            source = pa.table({"id": pa.array([1, 1000], pa.int64()), "region": [other.pop("region"), "b"],
                               "v": [-1.0, -1000.0]})  # fmt: skip
            _upsert(DeltaTable(uri), source, on).execute()
        return real_commit(*args, **kwargs)

    monkeypatch.setattr(merge_module, "commit", interleaved)
    mine = pa.table({"id": pa.array([0, 2000], pa.int64()), "region": ["a", "a"], "v": [-0.5, -2000.0]})
    result = _upsert(DeltaTable(uri), mine, on).execute()
    assert result.version == 2  # the other task's MERGE is version 1
    rows = {r["id"]: r["v"] for r in _rows(uri)}
    assert rows[0] == -0.5 and rows[2000] == -2000.0 and rows[1] == -1.0 and rows[1000] == -1000.0
    other["region"] = "a"  # now the concurrent MERGE changes a row of the partition ours reads
    with pytest.raises(ConcurrentAppendError, match="region': 'a'"):
        _upsert(DeltaTable(uri), pa.table({"id": pa.array([3], pa.int64()), "region": ["a"], "v": [0.0]}),
                on).execute()  # fmt: skip


def test_random_merges_agree_with_deltalake(tmp_path):
    rng = random.Random(SEED)
    for case in range(6):
        n = rng.randint(5, 60)
        ids = rng.sample(range(100), n)
        data = pa.table({"id": pa.array(ids, pa.int64()), "region": [rng.choice("ab") for _ in ids],
                         "v": [float(rng.randint(0, 9)) for _ in ids]})  # fmt: skip
        uri, twin = str(tmp_path / f"t{case}"), str(tmp_path / f"twin{case}")
        DeltaTable(uri).write(data, partition_by=["region"])
        deltalake.write_deltalake(twin, data, partition_by=["region"])
        keys = rng.sample(range(120), rng.randint(1, 40))
        keys = [k if rng.random() > 0.1 else None for k in keys]
        source = pa.table({"id": pa.array(keys, pa.int64()), "region": [rng.choice("abc") for _ in keys],
                           "v": [float(rng.randint(0, 9)) for _ in keys]})  # fmt: skip

        def clauses(b):
            return (b.when_matched_update({"v": "source.v + target.v"}, "source.v > 4")
                    .when_matched_delete("target.v < 3")
                    .when_not_matched_insert_all("source.id % 2 = 0")
                    .when_not_matched_by_source_update({"v": "target.v - 100"}, "target.v > 6"))  # fmt: skip

        clauses(DeltaTable(uri).merge(source, "target.id = source.id")).execute()
        clauses(deltalake.DeltaTable(twin).merge(source, "target.id = source.id", source_alias="source",
                                                 target_alias="target")).execute()  # fmt: skip
        assert _rows(uri) == _rows(twin), case


def test_a_streamed_source_is_spilled_and_only_what_matching_reads_stays_in_memory(tmp_path, monkeypatch):
    """A ``RecordBatchReader`` source may be larger than memory: the join keys and the columns the clause
    conditions read stay in memory, whole rows are spilled to a temporary Parquet file and read back for
    the updated and inserted rows only; the spill is gone after the MERGE."""
    from airflow_provider_delta.log.row_changes import merge_source

    uri = _table(tmp_path, n=1000)
    wide = "x" * 200
    n = 20_000

    def batches():
        for start in range(0, n, 1000):
            ids = pa.array(range(start * 3, (start + 1000) * 3, 3), pa.int64())  # every third id: 334 match
            yield pa.record_batch({"id": ids, "region": pa.array(["a"] * 1000), "v": pa.array([1.5] * 1000),
                                   "note": pa.array([wide] * 1000)})  # fmt: skip

    schema = pa.schema([("id", pa.int64()), ("region", pa.string()), ("v", pa.float64()),
                        ("note", pa.string())])  # fmt: skip
    seen = []
    real = merge_source.MergeSource

    def recording(data, needed):
        source = real(data, needed)
        seen.append(source)
        return source

    monkeypatch.setattr(merge_module, "MergeSource", recording)
    reader = pa.RecordBatchReader.from_batches(schema, batches())
    result = (DeltaTable(uri).merge(reader, "target.id = source.id", merge_schema=True)
              .when_matched_update({"v": "source.v"}, "source.v > 1")
              .when_not_matched_insert_all().execute())  # fmt: skip
    assert result.metrics["numTargetRowsUpdated"] == 334
    assert result.metrics["numTargetRowsInserted"] == n - 334
    (source,) = seen
    assert source.narrow.column_names == ["id", "v"]  # the key and the condition's column; not the note
    assert source._dir is None  # the spill was removed
    rows = {r["id"]: r for r in _rows(uri)}
    assert len(rows) == 1000 + n - 334 and rows[3]["v"] == 1.5 and rows[3]["note"] is None
    assert rows[3 * (n - 1)]["note"] == wide and rows[2]["v"] == 2.0


def test_merge_reads_only_the_files_whose_key_range_holds_a_source_key(tmp_path, monkeypatch):
    """Ten files of consecutive ids; the source updates ids in files 2 and 7 and inserts new ids past the
    end: only files 2 and 7 are read (the source's overall range spans files 2 to 9)."""
    uri = str(tmp_path / "t")
    for f in range(10):
        ids = pa.array(range(f * 100, f * 100 + 100), pa.int64())
        DeltaTable(uri).write(pa.table({"id": ids, "v": pa.array([0.0] * 100)}))
    read = []
    real = merge_module.target_batches

    def recording(target, files, columns=None):
        read.append(sorted(files.column("path").to_pylist()))
        return real(target, files, columns)

    monkeypatch.setattr(merge_module, "target_batches", recording)
    source = pa.table({"id": pa.array([205, 250, 777, 5000], pa.int64()), "v": [1.0, 2.0, 3.0, 4.0]})
    result = _upsert(DeltaTable(uri), source).execute()
    assert result.metrics["numTargetRowsUpdated"] == 3 and result.metrics["numTargetRowsInserted"] == 1
    first_pass = read[0]
    assert len(first_pass) == 2, first_pass  # the files of ids 200-299 and 700-799
    rows = {r["id"]: r["v"] for r in _rows(uri)}
    assert (rows[205], rows[250], rows[777], rows[5000], rows[206]) == (1.0, 2.0, 3.0, 4.0, 0.0)
