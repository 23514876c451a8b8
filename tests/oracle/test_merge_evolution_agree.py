"""MERGE schema evolution and identity columns: our MERGE against Delta Spark 4.4's, on two copies.

Delta Spark creates and fills each table; it is copied; the same MERGE runs on both copies (Delta Spark's
``MERGE [WITH SCHEMA EVOLUTION] INTO``, our ``merge(..., merge_schema=...)`` on the Spark engine or
``DeltaTable.merge(..., merge_schema=...)`` on Arrow in the task, each held to Delta Spark's one run). Both
must succeed or both refuse (and then neither copy has a new version); when they succeed both commit the
same version, the evolved schemas are the same (names, types, nullability, ``delta.typeChanges``) and so are
the rows: Delta Spark reads our copy, our Spark reader reads Delta Spark's copy, and our core's Arrow scan
reads both, all four the same rows (``_same_rows``). On identity tables the generated values depend on how
each engine splits rows into tasks, so they are held to the rules instead: no value twice, all beyond the
mark the table had, on the column's grid, the mark moved to cover them; and Delta Spark's next insert into
our copy gives no value twice.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from oracle_client import Oracle, OracleError
from oracle_compare import our_rows
from oracle_depth import ENGINES, on_engines

from airflow_provider_delta.log import DeltaTable
from airflow_provider_delta.log.base.errors import DeltaError
from airflow_provider_delta.log.features.identity import identity_columns
from airflow_provider_delta.spark import merge, update

BASE = "(id BIGINT, v INT, s STRING)"
ROWS = "VALUES (1, 1, 'a'), (2, 2, 'b'), (4, 4, 'd')"
EXTRA = "SELECT * FROM VALUES (2L, 20, 'x', 7L), (3L, 30, 'y', 8L) AS s(id, v, s, extra)"
NARROW = "SELECT * FROM VALUES (2L, 'x', 7L), (3L, 'y', 8L) AS s(id, s, extra)"
WIDE = "SELECT * FROM VALUES (2L, 5000000000L, 'x'), (3L, 3L, 'y') AS s(id, v, s)"
NEW_VALUES = {"id": "source.id", "extra": "source.extra + 1"}
UPSERT = [("matched", "update", None), ("notMatched", "insert", None)]
# name: (table properties, source, clauses as (kind, action, assignments or None for *), merge_schema)
CASES: dict[str, tuple[dict, str, list, bool]] = {
    "star adds columns": ({}, EXTRA, UPSERT, True),
    "star ignores columns without evolution": ({}, EXTRA, UPSERT, False),
    "star adds columns, column mapping": ({"delta.columnMapping.mode": "name"}, EXTRA, UPSERT, True),
    "set names a new column": ({}, EXTRA, [("matched", "update", {"extra": "source.extra"})], True),
    "insert values name a new column": ({}, EXTRA, [("notMatched", "insert", NEW_VALUES)], True),
    "narrow source keeps and nulls": ({}, NARROW, UPSERT, True),
    "narrow source refused without evolution": ({}, NARROW, UPSERT, False),
    "new column refused without evolution": ({}, EXTRA, [("matched", "update", {"extra": "source.extra"})],
                                             False),
    "widening": ({"delta.enableTypeWidening": "true"}, WIDE, UPSERT, True),
    "widening by an expression": ({"delta.enableTypeWidening": "true"}, WIDE.replace("5000000000L", "5L"),
                                  [("matched", "update", {"v": "source.v + 1"})], True),
    "no widening without the property": ({}, WIDE, UPSERT, True),
    "no widening without evolution": ({"delta.enableTypeWidening": "true"}, WIDE, UPSERT, False),
}  # fmt: skip
# Struct columns (Delta Spark matches struct fields by name at every depth, and evolves them).
NESTED_BASE = "(id BIGINT, x STRUCT<a: INT, b: INT>, arr ARRAY<STRUCT<a: INT, b: INT>>)"
NESTED_ROWS = ("VALUES (1, named_struct('a', 1, 'b', 10), array(named_struct('a', 1, 'b', 10))), "
               "(2, named_struct('a', 2, 'b', 20), array(named_struct('a', 2, 'b', 20), NULL)), "
               "(4, NULL, NULL)")
REORDERED = ("SELECT * FROM VALUES (2L, named_struct('b', 200, 'a', 3), "
             "array(named_struct('b', 200, 'a', 3))), (3L, named_struct('b', 300, 'a', 30), NULL) "
             "AS s(id, x, arr)")
MORE = ("SELECT * FROM VALUES (1L, NULL, NULL), (2L, named_struct('a', 5, 'c', 500L, 'b', 50), "
        "array(named_struct('a', 5, 'b', 50, 'c', 'five'))), "
        "(3L, named_struct('a', 6, 'c', 600L, 'b', 60), NULL) AS s(id, x, arr)")
LESS = ("SELECT * FROM VALUES (1L, NULL, NULL), (2L, named_struct('a', 7), array(named_struct('a', 7))), "
        "(3L, named_struct('a', 8), array(named_struct('a', 8), NULL)) AS s(id, x, arr)")
WIDER = ("SELECT * FROM VALUES (2L, named_struct('a', 5000000000L, 'b', 50), "
         "array(named_struct('a', 5L, 'b', 5))), (3L, named_struct('a', 6L, 'b', 60), NULL) AS s(id, x, arr)")
NESTED_CASES: dict[str, tuple[dict, str, list, bool]] = {
    "struct field widened": ({"delta.enableTypeWidening": "true"}, WIDER, UPSERT, True),
    "struct field not widened without the property": ({}, WIDER, UPSERT, True),
    "struct fields in another order": ({}, REORDERED, UPSERT, False),
    "struct gains fields": ({}, MORE, UPSERT, True),
    "struct gains fields, column mapping": ({"delta.columnMapping.mode": "name"}, MORE, UPSERT, True),
    "struct gains fields by an explicit set": ({}, MORE, [("matched", "update", {"x": "source.x"})], True),
    "more struct fields refused without evolution": ({}, MORE, UPSERT, False),
    "struct lacks a field: update keeps it, insert nulls it": ({}, LESS, UPSERT, True),
    "fewer struct fields refused without evolution": ({}, LESS, UPSERT, False),
}  # fmt: skip


def _sql(uri: str, source: str, clauses: list, evolve: bool) -> str:
    parts = [f"MERGE {'WITH SCHEMA EVOLUTION ' if evolve else ''}INTO delta.`{uri}` AS target "
             f"USING ({source}) AS source ON target.id = source.id"]  # fmt: skip
    for kind, action, sets in clauses:
        head = "WHEN MATCHED THEN " if kind == "matched" else "WHEN NOT MATCHED THEN "
        if action == "update":
            parts.append(head + ("UPDATE SET *" if sets is None else
                                 "UPDATE SET " + ", ".join(f"{c} = {e}" for c, e in sets.items())))
        else:
            parts.append(head + ("INSERT *" if sets is None else
                                 f"INSERT ({', '.join(sets)}) VALUES ({', '.join(sets.values())})"))
    return " ".join(parts)


def _ours(spark: Any, uri: str, source: str, clauses: list, evolve: bool, on: str = "target.id = source.id",
          engine: str = "spark") -> Any:  # fmt: skip
    if engine == "arrow":  # the source collected from the same query
        builder = DeltaTable(uri).merge(_arrow_source(spark, source), on, merge_schema=evolve)
    else:
        builder = merge(spark.sql(source), uri, on, merge_schema=evolve)
    for kind, _, sets in clauses:
        if kind == "matched":
            builder = builder.when_matched_update_all() if sets is None else builder.when_matched_update(sets)
        else:
            builder = builder.when_not_matched_insert_all() if sets is None else \
                builder.when_not_matched_insert(sets)  # fmt: skip
    return builder.execute()


def _arrow_source(spark: Any, query: str) -> Any:
    """The rows of ``query`` as Arrow, with struct fields nullable: pyspark's ``toArrow`` refuses a null
    struct whose fields Spark types NOT NULL (``named_struct`` of literals beside a NULL row: ArrowInvalid
    "nulls in input cannot be viewed as non-nullable"), before our MERGE sees it."""
    from pyspark.sql.types import ArrayType, DataType, StructField, StructType

    def nullable(kind: DataType) -> DataType:
        if isinstance(kind, StructType):
            return StructType([StructField(f.name, nullable(f.dataType), True, f.metadata) for f in kind])
        if isinstance(kind, ArrayType):
            return ArrayType(nullable(kind.elementType), kind.containsNull)
        return kind

    df = spark.sql(query)
    return df.to(nullable(df.schema)).toArrow()


def _schema(uri: str) -> list[tuple]:
    out = []
    for f in DeltaTable(uri).snapshot().metadata.schema["fields"]:
        changes = [(c["fromType"], c["toType"]) for c in f.get("metadata", {}).get("delta.typeChanges", [])]
        out.append((f["name"], _logical(f["type"]), f["nullable"], changes))
    return out


def _logical(kind: Any) -> Any:
    """A type without the column-mapping ids and physical names of nested fields (each engine makes its
    own: random names, ids in its own order)."""
    if isinstance(kind, dict):
        return {k: ({m: x for m, x in v.items() if not m.startswith("delta.columnMapping.")}
                    if k == "metadata" else _logical(v)) for k, v in kind.items()}  # fmt: skip
    if isinstance(kind, list):
        return [_logical(v) for v in kind]
    return kind


def _attempt(run: Any) -> str | None:
    """None when ``run`` succeeds, else the error's class name (either engine's)."""
    try:
        run()
    except (OracleError, DeltaError, Exception) as exc:  # Spark's own errors too (CAST_OVERFLOW)
        return getattr(exc, "error", None) or type(exc).__name__
    return None


@pytest.fixture(scope="module", autouse=True)
def _state_in_one_partition(oracle: Oracle) -> None:
    """Delta Spark rebuilds a table's state (its few log lines) in one partition instead of two: every MERGE
    and read here loads a table or version it has not seen, and one partition cost 8-11 % less of Delta
    Spark's CPU for the same state. Only how Delta Spark computes its snapshot changes, never what it reads
    or writes; the oracle's ``reset`` puts the setting back for the next module."""
    oracle.call("conf", {"spark.databricks.delta.snapshotPartitions": "1"})


@pytest.fixture(scope="module")
def base_tables(oracle: Oracle, tmp_path_factory: pytest.TempPathFactory) -> Any:
    """The table Delta Spark creates and fills for a set of properties, made once per set for the
    module; each case works on two fresh copies of it."""
    made: dict[tuple[str, str], Path] = {}

    def base(props: dict, columns: str = BASE, rows: str = ROWS) -> Path:
        shown = ", ".join(f"'{k}' = '{v}'" for k, v in props.items())
        if (shown, columns) not in made:
            path = tmp_path_factory.mktemp("base") / "table"
            oracle.call("sql", f"CREATE TABLE delta.`{path}` {columns} USING delta"
                               + (f" TBLPROPERTIES ({shown})" if shown else ""))  # fmt: skip
            oracle.call("sql", f"INSERT INTO delta.`{path}` {rows}")
            made[shown, columns] = path
        return made[shown, columns]

    return base


@pytest.fixture(scope="module")
def delta_spark_merges(oracle: Oracle, tmp_path_factory: pytest.TempPathFactory) -> Any:
    """Delta Spark's MERGE of each case on its own copy of the base, once for the module (both engines are
    held to it): the copy and Delta Spark's error (None: it committed)."""
    done: dict[str, tuple[str, str | None]] = {}

    def run(case: str, base: Path, source: str, clauses: list, evolve: bool) -> tuple[str, str | None]:
        if case not in done:
            theirs = str(tmp_path_factory.mktemp("merge") / "delta_spark")
            shutil.copytree(base, theirs)
            done[case] = theirs, _attempt(lambda: oracle.call("sql", _sql(theirs, source, clauses, evolve)))
        return done[case]

    return run


@pytest.mark.parametrize(("case", "engine"), on_engines(list(CASES)))
def test_merge_schema_evolution_agrees(oracle: Oracle, spark: Any, tmp_path: Path, case: str, base_tables,
                                       delta_spark_merges, engine: str):  # fmt: skip
    props, source, clauses, evolve = CASES[case]
    merged = delta_spark_merges(case, base_tables(props), source, clauses, evolve)
    _agree(oracle, spark, tmp_path, case, base_tables(props), source, clauses, evolve, merged, engine)


@pytest.mark.parametrize(("case", "engine"), on_engines(list(NESTED_CASES)))
def test_struct_fields_match_by_name_and_evolve_as_in_delta_spark(oracle: Oracle, spark: Any, tmp_path: Path,
                                                                   case: str, base_tables, delta_spark_merges,
                                                                   engine: str):  # fmt: skip
    props, source, clauses, evolve = NESTED_CASES[case]
    base = base_tables(props, NESTED_BASE, NESTED_ROWS)
    merged = delta_spark_merges(case, base, source, clauses, evolve)
    _agree(oracle, spark, tmp_path, case, base, source, clauses, evolve, merged, engine)


def _agree(oracle: Oracle, spark: Any, tmp_path: Path, case: str, base: Path, source: str, clauses: list,
           evolve: bool, merged: tuple[str, str | None], engine: str) -> None:  # fmt: skip
    """The same MERGE on a copy of ``base`` as Delta Spark's (``merged``: its copy and error): both refuse
    and commit nothing, or both commit the same version, schema and rows."""
    (theirs, their_error), ours = merged, str(tmp_path / "ours")
    shutil.copytree(base, ours)
    before = DeltaTable(ours).version()
    our_error = _attempt(lambda: _ours(spark, ours, source, clauses, evolve, engine=engine))
    case = f"{case} ({engine})"
    print(f"{case}: Delta Spark {their_error or 'committed'}, ours {our_error or 'committed'}")
    assert (their_error is None) == (our_error is None), f"{case}: {their_error} vs {our_error}"  # fmt: skip
    versions = DeltaTable(ours).version(), DeltaTable(theirs).version()
    if their_error is not None:  # both refused: the copies are still the base (no version, so no new rows)
        assert versions == (before, before), f"{case}: refused, yet (ours, Delta Spark's) versions {versions}"
        return
    assert versions[0] == versions[1], f"{case}: versions (ours, Delta Spark's) {versions}"
    assert _schema(ours) == _schema(theirs), case
    _same_rows(oracle, spark, ours, theirs, case)


def _same_rows(oracle: Oracle, spark: Any, ours: str, theirs: str, where: str) -> None:
    """Our copy and Delta Spark's hold the same rows, as each engine reads the other's: Delta Spark reads
    ours (a JVM read), our Spark reader reads Delta Spark's, and our core's Arrow scan reads both (no JVM;
    nulls of struct fields dropped as Spark's ``to_json`` drops them, so the four compare as one).

    Left out (about 0.7 s of CPU a case): Delta Spark reading its own copy and our Spark reader reading
    ours, as each copy is read here by the other engine and by the Arrow scan. What that gives up: a value
    that our writer and our file reader both lose the same way (never written by us, not seen in Delta
    Spark's files) passes; only Delta Spark reading its own copy would show it."""
    rows = oracle.call("rows", ours)
    read = our_rows(spark, theirs)
    assert read == rows, f"{where}: Delta Spark's copy by our reader, ours by Delta Spark: {read} vs {rows}"
    delta_spark = sorted(json.dumps(json.loads(r), sort_keys=True) for r in rows)
    for uri in (theirs, ours):
        scanned = _arrow_rows(uri)
        assert scanned == delta_spark, f"{where}: {uri} read by the Arrow scan: {scanned} vs {delta_spark}"


def _arrow_rows(uri: str) -> list[str]:
    """The rows our core's Arrow scan reads, each as sorted-key JSON without null struct fields (the form of
    Delta Spark's ``rows``, parsed and dumped the same way)."""
    return sorted(json.dumps(_without_nulls(r), sort_keys=True, default=str)
                  for r in DeltaTable(uri).scan().to_table().to_pylist())  # fmt: skip


def _without_nulls(value: Any) -> Any:
    """Spark's ``to_json`` leaves out null fields at every depth; null array elements it keeps."""
    if isinstance(value, dict):
        return {k: _without_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_without_nulls(v) for v in value]
    return value


IDENTITY = "(id BIGINT GENERATED {how} AS IDENTITY (START WITH 10 INCREMENT BY 3), k BIGINT, s STRING)"
INSERTS = "SELECT id + 2 AS k, concat('n', id) AS s FROM range(0, 60)"


def _mark(uri: str) -> int | None:
    return identity_columns(DeltaTable(uri).snapshot().metadata.schema)[0].high_water_mark


@pytest.mark.parametrize(("how", "engine"), on_engines(["ALWAYS", "BY DEFAULT"]))
def test_identity_values_on_merge_inserts_follow_delta_sparks_rules(
    oracle: Oracle, spark: Any, tmp_path: Path, how: str, engine: str
):
    theirs, ours = str(tmp_path / "delta_spark"), str(tmp_path / "ours")
    oracle.call("sql", f"CREATE TABLE delta.`{theirs}` {IDENTITY.format(how=how)} USING delta")
    oracle.call("sql", f"INSERT INTO delta.`{theirs}` (k, s) VALUES (1, 'a'), (2, 'b')")
    shutil.copytree(theirs, ours)
    mark = _mark(ours)
    upsert = [("matched", "update", {"s": "source.s"}),
              ("notMatched", "insert", {"k": "source.k", "s": "source.s"})]  # fmt: skip
    on_k = ("target.id = source.id", "target.k = source.k")
    oracle.call("sql", _sql(theirs, INSERTS, upsert, False).replace(*on_k))
    _ours(spark, ours, INSERTS, upsert, False, on=on_k[1], engine=engine)
    # Each engine reads the other's copy: our reader Delta Spark's, Delta Spark ours.
    read = {theirs: [json.loads(r) for r in our_rows(spark, theirs)],
            ours: [json.loads(r) for r in oracle.call("rows", ours)]}  # fmt: skip
    for uri, rows in read.items():
        got = {r["k"]: r.get("id") for r in rows}
        new = [v for k, v in got.items() if k > 2]
        assert len(got) == 61 and len(set(got.values())) == 61, uri
        assert all(v > mark and (v - 10) % 3 == 0 for v in new), f"{uri}: {sorted(new)}"
        assert _mark(uri) == max(new), uri
    assert sorted(r["s"] for r in read[ours]) == sorted(r["s"] for r in read[theirs])
    # The same refusals (or not) in both engines.
    attempts = [
        ("SELECT 500L AS k, 'x' AS s, 7L AS id", [("notMatched", "insert", None)]),
        ("SELECT 1L AS k, 7L AS id", [("matched", "update", {"id": "source.id"})]),
        ("SELECT 1L AS k, 'x' AS s, 7L AS id", [("matched", "update", None)]),
    ]
    for source, clauses in attempts:
        sql = _sql(theirs, source, clauses, False).replace(*on_k)
        their_error = _attempt(lambda: oracle.call("sql", sql))  # noqa: B023
        our_error = _attempt(lambda: _ours(spark, ours, source, clauses, False, on=on_k[1],  # noqa: B023
                                           engine=engine))
        print(f"{how} {engine} {clauses}: Delta Spark {their_error or 'committed'}, "
              f"ours {our_error or 'committed'}")
        assert (their_error is None) == (our_error is None), (source, clauses, their_error, our_error)
    # Delta Spark goes on inserting into our copy: no value twice.
    oracle.call("sql", f"INSERT INTO delta.`{ours}` (k, s) SELECT id + 1000, 'z' FROM range(0, 20)")
    ids = [json.loads(r).get("id") for r in oracle.call("rows", ours)]
    assert len(ids) == len(set(ids))


@pytest.mark.parametrize("engine", ENGINES)
def test_the_identity_mark_covers_every_row_a_merge_writes(oracle: Oracle, spark: Any, tmp_path: Path,
                                                           engine: str):  # fmt: skip
    """Delta Spark moves the mark to the furthest value in the rows a MERGE writes, not only the values it
    generates (``DeltaIdentityColumnStatsTracker``): an updated row holding an explicit value beyond the
    generated ones carries the mark there. Ours reads the written files the same way."""
    theirs, ours = str(tmp_path / "delta_spark"), str(tmp_path / "ours")
    # With deletion vectors, only the updated and inserted rows are written (no copied rows): the explicit
    # value reaches the mark through the updated row alone.
    oracle.call("sql", f"CREATE TABLE delta.`{theirs}` {IDENTITY.format(how='BY DEFAULT')} USING delta "
                       "TBLPROPERTIES ('delta.enableDeletionVectors' = 'true')")  # fmt: skip
    oracle.call("sql", f"INSERT INTO delta.`{theirs}` (k, s) VALUES (1, 'a')")
    oracle.call("sql", f"INSERT INTO delta.`{theirs}` (id, k, s) VALUES (1000, 2, 'b')")  # beyond the mark
    shutil.copytree(theirs, ours)
    upsert = [("matched", "update", {"s": "source.s"}),
              ("notMatched", "insert", {"k": "source.k", "s": "source.s"})]  # fmt: skip
    source = "SELECT id + 2 AS k, concat('n', id) AS s FROM range(0, 5)"  # k = 2 updates the row of id 1000
    on_k = ("target.id = source.id", "target.k = source.k")
    oracle.call("sql", _sql(theirs, source, upsert, False).replace(*on_k))
    _ours(spark, ours, source, upsert, False, on=on_k[1], engine=engine)
    print(f"{engine} marks: Delta Spark {_mark(theirs)}, ours {_mark(ours)}")
    assert _mark(ours) == _mark(theirs) == 1000, f"{engine}: marks {_mark(ours)} (ours) / {_mark(theirs)}"
    oracle.call("sql", f"INSERT INTO delta.`{ours}` (k, s) SELECT id + 100, 'z' FROM range(0, 5)")
    rows = [json.loads(r) for r in oracle.call("rows", ours)]
    assert len({r["id"] for r in rows}) == len(rows) == 11
    assert all(r["id"] > 1000 for r in rows if r["k"] >= 100)  # Delta Spark goes on past our mark


GENERATED = ("(id BIGINT, v INT, g INT GENERATED ALWAYS AS (v * 10), d DATE, "
             "y INT GENERATED ALWAYS AS (year(d))) USING delta")  # fmt: skip
CHANGES = "SELECT * FROM VALUES (2L, 5, DATE'2031-02-03'), (3L, 7, DATE'2032-04-05') AS s(id, v, d)"


@pytest.mark.parametrize(("layout", "engine"), on_engines(["deletion-vectors", "rewrite"]))
def test_generated_columns_follow_updates_and_merges_as_in_delta_spark(
    oracle: Oracle, spark: Any, tmp_path: Path, layout: str, engine: str
):
    """A generated column the statement does not set is computed from the row's new values (UPDATE, MERGE
    update and insert, ``INSERT *`` under schema evolution from a source without it); a value set by hand
    must equal the expression, or both engines refuse."""
    theirs, ours = str(tmp_path / "delta_spark"), str(tmp_path / "ours")
    dv = "true" if layout == "deletion-vectors" else "false"
    oracle.call("sql", f"CREATE TABLE delta.`{theirs}` {GENERATED} "
                       f"TBLPROPERTIES ('delta.enableDeletionVectors' = '{dv}')")  # fmt: skip
    oracle.call("sql", f"INSERT INTO delta.`{theirs}` (id, v, d) VALUES (1, 1, DATE'2020-01-01'), "
                       "(2, 2, DATE'2021-06-30'), (4, 4, NULL)")  # fmt: skip
    shutil.copytree(theirs, ours)
    upsert = [("matched", "update", {"v": "source.v"}),
              ("notMatched", "insert", {"id": "source.id", "v": "source.v", "d": "source.d"})]  # fmt: skip
    narrow = CHANGES.replace("2L, 5", "5L, 9").replace("3L", "4L")  # no g, y: INSERT * / UPDATE * evolve
    sets = {"v": "v + 1", "d": "DATE'2029-12-31'"}
    steps = [
        (f"UPDATE delta.`{theirs}` SET v = v + 1, d = DATE'2029-12-31' WHERE id = 1",
         lambda: DeltaTable(ours).update(sets, "id = 1") if engine == "arrow" else
         update(spark, ours, sets, "id = 1")),
        (_sql(theirs, CHANGES, upsert, False),
         lambda: _ours(spark, ours, CHANGES, upsert, False, engine=engine)),
        (_sql(theirs, narrow, UPSERT, True), lambda: _ours(spark, ours, narrow, UPSERT, True, engine=engine)),
    ]  # fmt: skip
    for sql, ours_run in steps:
        oracle.call("sql", sql)
        ours_run()
        _same_rows(oracle, spark, ours, theirs, sql)
    version = DeltaTable(ours).version()
    wrong = [("matched", "update", {"g": "source.v"})]
    their_error = _attempt(lambda: oracle.call("sql", _sql(theirs, CHANGES, wrong, False)))
    our_error = _attempt(lambda: _ours(spark, ours, CHANGES, wrong, False, engine=engine))
    assert their_error is not None and our_error is not None, (their_error, our_error)
    assert DeltaTable(ours).version() == version
