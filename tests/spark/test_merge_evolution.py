"""MERGE with schema evolution (``merge_schema=True``) and on identity columns, on our Spark (local[2]):
the rules Delta Spark 4.4 follows (probed on it; its own results are compared in
tests/oracle/test_merge_evolution_agree.py), and refusals by name with nothing committed."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from airflow_provider_delta.log import DeltaTable
from airflow_provider_delta.log.base.errors import (
    ConstraintViolationError,
    IdentityColumnError,
    SchemaMismatchError,
)
from airflow_provider_delta.log.expressions.expressions import ColumnNotFoundError
from airflow_provider_delta.log.features.identity import identity_columns
from airflow_provider_delta.spark import merge, read, update, write


def _table(spark, path: Path, configuration: dict | None = None) -> str:
    uri = str(path)
    write(spark.createDataFrame([(1, 1, "a"), (2, 2, "b")], "id long, v int, s string"), uri,
          configuration=configuration or {})  # fmt: skip
    return uri


def _rows(spark, uri: str) -> list[dict]:
    return sorted(read(spark, uri).toArrow().to_pylist(), key=lambda r: (r["id"] is None, r["id"] or 0))


def _fields(uri: str) -> dict[str, dict]:
    return {f["name"]: f for f in DeltaTable(uri).snapshot().metadata.schema["fields"]}


SOURCE = "SELECT * FROM VALUES (2L, 20, 'x', 7L), (3L, 30, 'y', 8L) AS s(id, v, s, extra)"


@pytest.mark.parametrize("configuration", [{}, {"delta.columnMapping.mode": "name"},
                                           {"delta.enableChangeDataFeed": "true",
                                            "delta.enableDeletionVectors": "true"}],
                         ids=["plain", "column-mapping", "cdf-dv"])  # fmt: skip
def test_star_clauses_add_the_sources_new_columns(spark, tmp_path: Path, configuration: dict):
    uri = _table(spark, tmp_path / "t", configuration)
    result = merge(spark.sql(SOURCE), uri, "target.id = source.id", merge_schema=True) \
        .when_matched_update_all().when_not_matched_insert_all().execute()  # fmt: skip
    assert _rows(spark, uri) == [{"id": 1, "v": 1, "s": "a", "extra": None},
                                 {"id": 2, "v": 20, "s": "x", "extra": 7},
                                 {"id": 3, "v": 30, "s": "y", "extra": 8}]  # fmt: skip
    extra = _fields(uri)["extra"]
    assert extra["type"] == "long" and extra["nullable"]
    if configuration.get("delta.columnMapping.mode"):
        assert extra["metadata"]["delta.columnMapping.physicalName"] != "extra"
    if configuration.get("delta.enableChangeDataFeed"):  # change data written under the new schema
        log = (Path(uri) / "_delta_log" / f"{result.version:020d}.json").read_text().splitlines()
        cdc = [json.loads(line)["cdc"]["path"] for line in log if '"cdc"' in line]
        changes = pa.concat_tables([pq.read_table(Path(uri) / p) for p in cdc]).to_pylist()
        assert sorted((r["_change_type"], r["id"], r["extra"]) for r in changes) == [
            ("insert", 3, 8), ("update_postimage", 2, 7), ("update_preimage", 2, None)]


def test_without_merge_schema_new_columns_are_ignored_and_missing_ones_refused(spark, tmp_path: Path):
    uri = _table(spark, tmp_path / "t")
    merge(spark.sql(SOURCE), uri, "target.id = source.id").when_matched_update_all().execute()
    assert "extra" not in _fields(uri) and _rows(spark, uri)[1] == {"id": 2, "v": 20, "s": "x"}
    narrow = spark.sql("SELECT 2L AS id, 'z' AS s")
    with pytest.raises(ColumnNotFoundError, match="lacks column"):
        merge(narrow, uri, "target.id = source.id").when_matched_update_all().execute()
    with pytest.raises(ColumnNotFoundError, match="extra"):
        merge(spark.sql(SOURCE), uri, "target.id = source.id") \
            .when_matched_update({"extra": "source.extra"}).execute()  # fmt: skip
    assert DeltaTable(uri).version() == 1


STRUCTS = "id long, x struct<a: int, b: int>, arr array<struct<a: int, b: int>>"


@pytest.mark.parametrize("configuration", [{}, {"delta.columnMapping.mode": "name",
                                                "delta.enableDeletionVectors": "true"}],
                         ids=["plain", "column-mapping-dv"])  # fmt: skip
def test_structs_are_assigned_by_field_name_and_evolve(spark, tmp_path: Path, configuration: dict):
    uri = str(tmp_path / "t")
    rows = [(1, (1, 10), [(1, 10)]), (2, (2, 20), [(2, 20)]), (4, None, None)]
    write(spark.createDataFrame(rows, STRUCTS), uri, configuration=configuration)
    # Same fields in another order: by name, not by position (a CAST would swap a and b).
    update(spark, uri, {"x": "named_struct('b', 11, 'a', 1)"}, "id = 1")
    reordered = spark.sql("SELECT 2L AS id, named_struct('b', 22, 'a', 2) AS x, "
                          "array(named_struct('b', 22, 'a', 2)) AS arr")  # fmt: skip
    merge(reordered, uri, "target.id = source.id").when_matched_update_all().execute()
    # A struct with a field more: refused without evolution, nothing committed.
    more = spark.sql("SELECT * FROM VALUES (2L, named_struct('a', 5, 'c', 'five', 'b', 50), "
                     "array(named_struct('a', 5, 'b', 50, 'c', 'five'))), "
                     "(3L, named_struct('a', 6, 'c', 'six', 'b', 60), NULL) AS s(id, x, arr)")  # fmt: skip
    version = DeltaTable(uri).version()
    with pytest.raises(SchemaMismatchError, match=r"\['c'\].*merge_schema=True"):
        merge(more, uri, "target.id = source.id").when_matched_update_all().execute()
    with pytest.raises(SchemaMismatchError, match="lacks field"):
        update(spark, uri, {"x": "named_struct('a', 1)"}, "id = 1")
    assert DeltaTable(uri).version() == version
    # With evolution the field is added to the table's struct and to the structs in the array.
    merge(more, uri, "target.id = source.id", merge_schema=True) \
        .when_matched_update_all().when_not_matched_insert_all().execute()  # fmt: skip
    x = _fields(uri)["x"]["type"]
    assert [f["name"] for f in x["fields"]] == ["a", "b", "c"]
    assert [f["name"] for f in _fields(uri)["arr"]["type"]["elementType"]["fields"]] == ["a", "b", "c"]
    if configuration:
        assert x["fields"][2]["metadata"]["delta.columnMapping.physicalName"].startswith("col-")
    # A struct lacking a field: an update keeps the row's value, an insert leaves it NULL.
    less = spark.sql("SELECT * FROM VALUES (1L, named_struct('a', 7)), (5L, named_struct('a', 8)) "
                     "AS s(id, x)")
    merge(less, uri, "target.id = source.id", merge_schema=True) \
        .when_matched_update_all().when_not_matched_insert_all().execute()  # fmt: skip
    assert _rows(spark, uri) == [
        {"id": 1, "x": {"a": 7, "b": 11, "c": None}, "arr": [{"a": 1, "b": 10, "c": None}]},
        {"id": 2, "x": {"a": 5, "b": 50, "c": "five"}, "arr": [{"a": 5, "b": 50, "c": "five"}]},
        {"id": 3, "x": {"a": 6, "b": 60, "c": "six"}, "arr": None},
        {"id": 4, "x": None, "arr": None},
        {"id": 5, "x": {"a": 8, "b": None, "c": None}, "arr": None},
    ]


def test_explicit_assignments_naming_source_columns_add_them(spark, tmp_path: Path):
    uri = _table(spark, tmp_path / "t")
    merge(spark.sql(SOURCE), uri, "target.id = source.id", merge_schema=True) \
        .when_matched_update({"extra": "source.extra"}) \
        .when_not_matched_insert({"id": "source.id", "extra": "source.extra + 1"}).execute()  # fmt: skip
    assert _rows(spark, uri) == [{"id": 1, "v": 1, "s": "a", "extra": None},
                                 {"id": 2, "v": 2, "s": "b", "extra": 7},
                                 {"id": 3, "v": None, "s": None, "extra": 9}]  # fmt: skip
    with pytest.raises(ColumnNotFoundError, match="nor of the source"):
        merge(spark.sql(SOURCE), uri, "target.id = source.id", merge_schema=True) \
            .when_matched_update({"nope": "source.v"}).execute()  # fmt: skip


def test_a_source_lacking_columns_keeps_them_on_update_and_nulls_them_on_insert(spark, tmp_path: Path):
    uri = _table(spark, tmp_path / "t")
    narrow = spark.sql("SELECT * FROM VALUES (2L, 'x'), (3L, 'y') AS s(id, s)")
    merge(narrow, uri, "target.id = source.id", merge_schema=True).when_matched_update_all() \
        .when_not_matched_insert_all().execute()  # fmt: skip
    assert _rows(spark, uri) == [{"id": 1, "v": 1, "s": "a"}, {"id": 2, "v": 2, "s": "x"},
                                 {"id": 3, "v": None, "s": "y"}]  # fmt: skip


WIDE = "SELECT * FROM VALUES (2L, 5000000000L, 'x'), (3L, 3L, 'y') AS s(id, v, s)"


def test_type_widening_where_the_table_allows_it(spark, tmp_path: Path):
    uri = _table(spark, tmp_path / "w", {"delta.enableTypeWidening": "true"})
    merge(spark.sql(WIDE), uri, "target.id = source.id", merge_schema=True).when_matched_update_all() \
        .when_not_matched_insert_all().execute()  # fmt: skip
    v = _fields(uri)["v"]
    assert v["type"] == "long" and v["metadata"]["delta.typeChanges"] == [{"fromType": "integer",
                                                                           "toType": "long"}]  # fmt: skip
    assert [r["v"] for r in _rows(spark, uri)] == [1, 5000000000, 3]
    # Without merge_schema, or on a table without type widening, values are cast: an overflow fails.
    plain = _table(spark, tmp_path / "p")
    widening = _table(spark, tmp_path / "n", {"delta.enableTypeWidening": "true"})
    for target, evolve in ((plain, True), (widening, False)):
        with pytest.raises(Exception, match="CAST_OVERFLOW"):
            merge(spark.sql(WIDE), target, "target.id = source.id", merge_schema=evolve) \
                .when_matched_update_all().when_not_matched_insert_all().execute()  # fmt: skip
        assert DeltaTable(target).version() == 0 and _fields(target)["v"]["type"] == "integer"


def _identity_table(spark, path: Path, explicit: bool) -> str:
    md = {"delta.identity.start": "10", "delta.identity.step": "5",
          "delta.identity.allowExplicitInsert": json.dumps(explicit)}  # fmt: skip
    uri = str(path)
    DeltaTable.create(uri, pa.schema([pa.field("id", pa.int64(), metadata=md), ("k", pa.int64()),
                                      ("s", pa.string())]))  # fmt: skip
    write(spark.createDataFrame([(1, "a"), (2, "b")], "k long, s string"), uri)
    return uri


def _mark(uri: str) -> int | None:
    return identity_columns(DeltaTable(uri).snapshot().metadata.schema)[0].high_water_mark


def test_merge_inserts_generate_identity_values(spark, tmp_path: Path):
    uri = _identity_table(spark, tmp_path / "t", explicit=False)
    mark = _mark(uri)
    source = spark.range(0, 40).selectExpr("id + 2 AS k", "'n' AS s").repartition(3)
    merge(source, uri, "target.k = source.k").when_matched_update({"s": "source.s"}) \
        .when_not_matched_insert({"k": "source.k", "s": "source.s"}).execute()  # fmt: skip
    rows = _rows(spark, uri)
    new = [r["id"] for r in rows if r["k"] > 2]
    assert len(rows) == 41 and len({r["id"] for r in rows}) == 41
    assert all(v > mark and (v - 10) % 5 == 0 for v in new) and _mark(uri) == max(new)
    # insert_all under merge_schema without the column: generated too.
    merge(spark.sql("SELECT 100L AS k, 'm' AS s"), uri, "target.k = source.k", merge_schema=True) \
        .when_not_matched_insert_all().execute()  # fmt: skip
    assert _mark(uri) > max(new)
    version = DeltaTable(uri).version()
    refused = {
        "explicit insert": lambda: merge(spark.sql("SELECT 500L AS k, 'x' AS s, 7L AS id"), uri,
                                         "target.k = source.k").when_not_matched_insert_all().execute(),
        "update by merge": lambda: merge(spark.sql("SELECT 1L AS k, 7L AS id"), uri, "target.k = source.k")
                                   .when_matched_update({"id": "source.id"}).execute(),
        "update by *": lambda: merge(spark.sql("SELECT 1L AS k, 'x' AS s, 7L AS id"), uri,
                                     "target.k = source.k").when_matched_update_all().execute(),
        "update": lambda: update(spark, uri, {"id": "5"}, "k = 1"),
    }  # fmt: skip
    for name, attempt in refused.items():
        with pytest.raises(IdentityColumnError, match="identity|IDENTITY"):
            attempt()
        assert DeltaTable(uri).version() == version, name


def test_explicit_identity_values_where_allowed_do_not_move_the_mark(spark, tmp_path: Path):
    uri = _identity_table(spark, tmp_path / "t", explicit=True)
    mark = _mark(uri)
    source = spark.sql("SELECT * FROM VALUES (9L, 'q', 1000L), (8L, 'r', NULL) AS s(k, s, id)")
    merge(source, uri, "target.k = source.k").when_not_matched_insert_all().execute()
    assert {r["k"]: r["id"] for r in _rows(spark, uri) if r["k"] > 2} == {8: None, 9: 1000}
    assert _mark(uri) == mark


@pytest.mark.parametrize("dv", [False, True], ids=["rewrite", "deletion-vectors"])
def test_generated_columns_are_computed_from_the_new_values(spark, tmp_path: Path, dv: bool):
    uri = str(tmp_path / "t")
    g = pa.field("g", pa.int64(), metadata={"delta.generationExpression": "v * 10"})
    DeltaTable.create(uri, pa.schema([("id", pa.int64()), ("v", pa.int64()), g]),
                      configuration={"delta.enableDeletionVectors": json.dumps(dv)})  # fmt: skip
    write(spark.createDataFrame([(1, 1), (2, 2)], "id long, v long"), uri)
    update(spark, uri, {"v": "v + 5"}, "id = 1")
    assert [(r["id"], r["v"], r["g"]) for r in _rows(spark, uri)] == [(1, 6, 60), (2, 2, 20)]
    source = spark.sql("SELECT * FROM VALUES (2L, 7L), (3L, 8L) AS s(id, v)")
    merge(source, uri, "target.id = source.id").when_matched_update({"v": "source.v"}) \
        .when_not_matched_insert({"id": "source.id", "v": "source.v"}).execute()  # fmt: skip
    assert [(r["id"], r["v"], r["g"]) for r in _rows(spark, uri)] == [(1, 6, 60), (2, 7, 70), (3, 8, 80)]
    version = DeltaTable(uri).version()
    with pytest.raises(ConstraintViolationError, match="g"):  # a value set by hand must equal the expression
        update(spark, uri, {"g": "1"}, "id = 3")
    assert DeltaTable(uri).version() == version
