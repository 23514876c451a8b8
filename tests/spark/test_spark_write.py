"""The Spark writer on a real local[2] session: what it writes, deltalake and the Rust kernel read back.

Also: schema enforcement and merge, constraints that abort before anything is written, replace_where,
exactly-once app transactions, and an executor failure that leaves only orphans for VACUUM. Local tables
are written by Spark's own Parquet writer (``native_files``) unless the table needs the mapInArrow path;
both paths must give the same ``add`` actions.
"""

from __future__ import annotations

import datetime as dt
import json
from decimal import Decimal
from pathlib import Path

import deltalake
import pyarrow.parquet as pq
import pytest
from spark_helpers import kernel_rows, rows

from airflow_provider_delta.log import DeltaTable, read_table
from airflow_provider_delta.log.base.errors import InvalidCommitError
from airflow_provider_delta.spark import (
    ConstraintViolationError,
    SchemaMismatchError,
    native_files,
    read,
    write,
)

DDL = (
    "id long, name string, day date, ts timestamp, amount decimal(10,2), ok boolean, score double, "
    "tags array<string>, attrs map<string,int>, point struct<x:int,y:string>"
)


def _data(spark, n: int = 40, start: int = 0):
    base = dt.datetime(2024, 3, 1, 12, 30, tzinfo=dt.UTC)
    data = [
        (i, f"n{i % 3}" if i % 7 else None, dt.date(2024, 3, 1 + i % 2), base + dt.timedelta(minutes=i),
         Decimal(i) / 4, i % 2 == 0, i * 1.5, [f"t{i}", "x"], {"k": i}, (i, f"y{i}"))
        for i in range(start, start + n)
    ]  # fmt: skip
    return spark.createDataFrame(data, DDL)


def _parquet_files(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*.parquet") if "_delta_log" not in p.parts}


def _rows_of(data: list[tuple]) -> list[tuple]:
    import pyarrow as pa

    return rows(pa.table({f"c{i}": [r[i] for r in data] for i in range(len(data[0]))}))


def _scalar_rows(table):
    return rows(table, ["id", "name", "day", "amount", "ok", "score"])


# -- round trips ------------------------------------------------------------------------------------------
def test_partitioned_write_reads_back_in_deltalake_kernel_and_spark(spark, tmp_path):
    uri = str(tmp_path / "t")
    df = _data(spark)
    result = write(df, uri, partition_by=["name", "day"])
    assert (result.version, result.already_committed) == (0, False)
    expected = rows(df)
    assert rows(deltalake.DeltaTable(uri).to_pyarrow_table(), df.columns) == expected
    assert rows(kernel_rows(Path(uri)), df.columns) == expected
    assert rows(read(spark, uri)) == expected
    snap = DeltaTable(uri).snapshot()
    assert snap.partition_columns == ["name", "day"]
    adds = snap.files.to_pylist()
    # Hive-style folders, null as __HIVE_DEFAULT_PARTITION__, values serialised per the spec, stats present.
    assert {a["path"].rsplit("/", 1)[0] for a in adds} >= {
        "name=n1/day=2024-03-02",
        "name=__HIVE_DEFAULT_PARTITION__/day=2024-03-01",
    }
    assert any(dict(a["partitionValues"]) == {"name": None, "day": "2024-03-01"} for a in adds)
    assert sum(json.loads(a["stats"])["numRecords"] for a in adds) == 40
    assert all(a["path"].rsplit("/", 1)[1].startswith("part-") for a in adds)
    stats = json.loads(adds[0]["stats"])
    assert set(stats["minValues"]) >= {"id", "ts", "amount"} and "name" not in stats["minValues"]


def test_append_overwrite_and_replace_where(spark, tmp_path):
    uri = str(tmp_path / "t")
    write(_data(spark, 20), uri, partition_by=["day"])
    write(_data(spark, 20, start=100), uri)
    assert deltalake.DeltaTable(uri).to_pyarrow_table().num_rows == 40
    # Replace 2024-03-01 only: the other day keeps its 20 rows.
    new = _data(spark, 6, start=500).where("day = DATE'2024-03-01'")
    result = write(new, uri, mode="overwrite", replace_where="day = DATE'2024-03-01'")
    theirs = deltalake.DeltaTable(uri)
    days = theirs.to_pyarrow_table().group_by("day").aggregate([("id", "count")]).to_pylist()
    assert sorted((d["day"], d["id_count"]) for d in days) == [
        (dt.date(2024, 3, 1), 3),
        (dt.date(2024, 3, 2), 20),
    ]
    info = theirs.history(1)[0]
    assert info["operation"] == "WRITE" and json.loads(info["operationParameters"]["predicate"]) == [
        "day = DATE'2024-03-01'"
    ]
    # Full overwrite: one commit removes everything that was there.
    write(_data(spark, 5, start=900), uri, mode="overwrite")
    assert sorted(r[0] for r in rows(read(spark, uri), ["id"])) == list(range(900, 905))
    assert result.version == 2 and DeltaTable(uri).version() == 3


def test_replace_where_aborts_on_rows_outside_the_predicate(spark, tmp_path):
    uri = str(tmp_path / "t")
    write(_data(spark, 10), uri, partition_by=["day"])
    before = _parquet_files(tmp_path / "t")
    with pytest.raises(ConstraintViolationError, match=r"replaceWhere .* violated by 5 row\(s\)"):
        write(_data(spark, 10), uri, mode="overwrite", replace_where="day = DATE'2024-03-01'")
    with pytest.raises(ValueError, match="partition columns"):
        write(_data(spark, 10).where("id < 0"), uri, mode="overwrite", replace_where="id = 1")
    assert DeltaTable(uri).version() == 0 and _parquet_files(tmp_path / "t") == before


def test_exactly_once_second_write_writes_and_commits_nothing(spark, tmp_path):
    uri = str(tmp_path / "t")
    df = _data(spark, 10)
    first = write(df, uri, app_id="loader/2024-03-01", app_version=1)
    files = _parquet_files(tmp_path / "t")
    again = write(df, uri, app_id="loader/2024-03-01", app_version=1)
    assert (again.version, again.already_committed) == (first.version, True)
    assert _parquet_files(tmp_path / "t") == files and DeltaTable(uri).version() == 0
    third = write(df, uri, app_id="loader/2024-03-01", app_version=2)
    assert (third.version, third.already_committed) == (1, False)
    assert DeltaTable(uri).snapshot().app_transactions == {"loader/2024-03-01": 2}
    assert deltalake.DeltaTable(uri).to_pyarrow_table().num_rows == 20


# -- schema ------------------------------------------------------------------------------------------------
def test_schema_mismatch_names_the_columns(spark, tmp_path):
    uri = str(tmp_path / "t")
    write(spark.createDataFrame([(1, "a")], "id long, name string"), uri)
    with pytest.raises(SchemaMismatchError, match=r"'id' \(table: long, DataFrame: string\)"):
        write(spark.createDataFrame([("1", "a")], "id string, name string"), uri)
    with pytest.raises(SchemaMismatchError, match=r"'extra'.*merge_schema=True"):
        write(spark.createDataFrame([(1, "a", 2.0)], "id long, name string, extra double"), uri)
    with pytest.raises(SchemaMismatchError, match="partition"):
        write(spark.createDataFrame([(1, "a")], "id long, name string"), uri, partition_by=["name"])
    # A missing nullable column is written as nulls; names match case-insensitively.
    write(spark.createDataFrame([(2,)], "ID long"), uri)
    assert rows(read(spark, uri)) == [(1, "a"), (2, None)]
    assert DeltaTable(uri).version() == 1


def test_narrower_columns_are_written_as_the_tables_types(spark, tmp_path):
    # As the Arrow writer: lossless widenings, the table's schema unchanged, the files in its types.
    uri = str(tmp_path / "t")
    wide = "id long, x double, a array<long>, s struct<n:long>"
    narrow = "id int, x float, a array<short>, s struct<n:int>"
    write(spark.createDataFrame([(1, 0.5, [1], (1,))], wide), uri)
    write(spark.createDataFrame([(2, 1.5, [2], (2,))], narrow), uri)
    snap = DeltaTable(uri).snapshot()
    assert snap.metadata.schema_string == DeltaTable(uri).snapshot(version=0).metadata.schema_string
    for path in snap.file_paths():
        types = pq.read_schema(tmp_path / "t" / path).types
        assert [str(t) for t in types] == ["int64", "double", "list<element: int64>", "struct<n: int64>"]
    assert sorted(r["id"] for r in read_table(uri).to_pylist()) == [1, 2]
    with pytest.raises(SchemaMismatchError, match=r"'x' \(table: double, DataFrame: long\)"):
        write(spark.createDataFrame([(3, 1)], "id long, x long"), uri)


def test_merge_schema_adds_nullable_columns_in_the_same_commit(spark, tmp_path):
    uri = str(tmp_path / "t")
    write(spark.createDataFrame([(1, "a")], "id long, name string"), uri, partition_by=["name"])
    result = write(spark.createDataFrame([(2, "b", 2.5)], "id long, name string, extra double"), uri,
                   merge_schema=True)  # fmt: skip
    assert result.version == 1
    commit = (tmp_path / "t" / "_delta_log" / "00000000000000000001.json").read_text()
    assert '"metaData"' in commit and '"add"' in commit
    fields = json.loads(deltalake.DeltaTable(uri).schema().to_json())["fields"]
    assert [(f["name"], f["type"], f["nullable"]) for f in fields][-1] == ("extra", "double", True)
    expected = [(1, "a", None), (2, "b", 2.5)]
    assert rows(deltalake.DeltaTable(uri).to_pyarrow_table(), ["id", "name", "extra"]) == expected
    assert rows(read(spark, uri), ["id", "name", "extra"]) == expected


def test_column_mapping_writes_physical_names_and_field_ids(spark, tmp_path):
    uri = str(tmp_path / "t")
    df = spark.createDataFrame(
        [(1, "a", (1, "p")), (2, "b", (2, "q"))], "id long, `odd name` string, s struct<x:int,y:string>"
    )
    write(df, uri, configuration={"delta.columnMapping.mode": "name"})
    wider = "id long, `odd name` string, s struct<x:int,y:string>, more double"
    write(spark.createDataFrame([(3, "c", None, 1.0)], wider), uri, merge_schema=True)
    snap = DeltaTable(uri).snapshot()
    fields = {f["name"]: f["metadata"] for f in snap.metadata.schema["fields"]}
    assert snap.metadata.configuration["delta.columnMapping.maxColumnId"] == "6"
    assert fields["more"]["delta.columnMapping.id"] == 6
    first = pq.read_schema(tmp_path / "t" / snap.files.column("path")[0].as_py())
    physical = fields["odd name"]["delta.columnMapping.physicalName"]
    assert physical.startswith("col-") and physical in first.names and "odd name" not in first.names
    ids = {f.name: f.metadata[b"PARQUET:field_id"] for f in first}
    assert ids[physical] == str(fields["odd name"]["delta.columnMapping.id"]).encode()
    expected = [(1, "a", (1, "p"), None), (2, "b", (2, "q"), None), (3, "c", None, 1.0)]
    assert rows(read(spark, uri)) == rows(kernel_rows(Path(uri)), ["id", "odd name", "s", "more"])
    assert [tuple(r[:2]) for r in rows(read(spark, uri))] == [e[:2] for e in expected]


def test_column_mapping_partitioned(spark, tmp_path):
    uri = str(tmp_path / "t")
    df = spark.createDataFrame([(1, "a"), (2, "b")], "id long, part string")
    write(df, uri, partition_by=["part"], configuration={"delta.columnMapping.mode": "id"})
    assert rows(read(spark, uri)) == rows(kernel_rows(Path(uri)), ["id", "part"]) == [(1, "a"), (2, "b")]


# -- constraints -----------------------------------------------------------------------------------------
def _constrained_table(uri: str) -> None:
    schema = {"type": "struct", "fields": [
        {"name": "id", "type": "long", "nullable": False, "metadata": {}},
        {"name": "qty", "type": "integer", "nullable": True,
         "metadata": {"delta.invariants": json.dumps({"expression": {"expression": "qty < 100"}})}},
        {"name": "price", "type": "double", "nullable": True, "metadata": {}},
        {"name": "total", "type": "double", "nullable": True,
         "metadata": {"delta.generationExpression": "qty * price"}},
    ]}  # fmt: skip
    DeltaTable.create(uri, schema, configuration={"delta.constraints.positive_price": "price > 0"})


@pytest.mark.parametrize(
    ("rows_in", "rule", "count"),
    [
        ([(1, 200, 1.0, 200.0), (2, 300, 1.0, 300.0), (3, 1, 1.0, 1.0)], "invariant on qty", 2),
        ([(1, 1, -1.0, -1.0), (2, 1, None, None), (3, 1, 1.0, 1.0)], "CHECK constraint positive_price", 2),
        ([(1, 2, 3.0, 6.0), (2, 2, 3.0, 7.0), (3, 2, 3.0, None)], "generated column total", 2),
        ([(None, 1, 1.0, 1.0), (2, 1, 1.0, 1.0)], "NOT NULL id", 1),
    ],
)
def test_constraint_violations_abort_before_writing(spark, tmp_path, rows_in, rule, count):
    uri = str(tmp_path / "t")
    _constrained_table(uri)
    df = spark.createDataFrame(rows_in, "id long, qty int, price double, total double")
    with pytest.raises(ConstraintViolationError, match=rf"{rule} .* violated by {count} row\(s\)") as err:
        write(df, uri)
    assert err.value.violations == {rule: count}
    assert DeltaTable(uri).version() == 0 and _parquet_files(tmp_path / "t") == set()


def test_constraints_pass_and_generated_columns_are_computed(spark, tmp_path):
    uri = str(tmp_path / "t")
    _constrained_table(uri)
    write(spark.createDataFrame([(1, 2, 3.0)], "id long, qty int, price double"), uri)
    write(spark.createDataFrame([(2, 1, 1.5, 1.5)], "id long, qty int, price double, total double"), uri)
    assert rows(read(spark, uri)) == [(1, 2, 3.0, 6.0), (2, 1, 1.5, 1.5)]
    assert rows(deltalake.DeltaTable(uri).to_pyarrow_table()) == [(1, 2, 3.0, 6.0), (2, 1, 1.5, 1.5)]


# -- failures ------------------------------------------------------------------------------------------
def test_executor_failure_commits_nothing_and_vacuum_removes_the_orphans(spark, tmp_path, monkeypatch):
    monkeypatch.setattr(native_files, "NATIVE_WRITES", False)  # the executors write straight to the table
    uri = str(tmp_path / "t")
    write(spark.range(0, 10).withColumnRenamed("id", "n"), uri)
    before = _parquet_files(tmp_path / "t")

    def fail_in_last_partition(batches):  # nested, so Spark pickles it by value for the workers
        import time

        from pyspark import TaskContext

        if TaskContext.get().partitionId() == 3:
            time.sleep(1.5)  # let the other tasks write their files first
            raise RuntimeError("boom in partition 3")
        yield from batches

    df = spark.range(0, 400, numPartitions=4).withColumnRenamed("id", "n")
    failing = df.mapInArrow(fail_in_last_partition, df.schema)
    with pytest.raises(Exception, match="boom in partition 3"):
        write(failing, uri)
    orphans = _parquet_files(tmp_path / "t") - before
    assert orphans, "the tasks that finished should have left their files"
    assert DeltaTable(uri).version() == 0
    report = DeltaTable(uri).vacuum(retention_hours=0, enforce_retention_duration=False, dry_run=False)
    assert _parquet_files(tmp_path / "t") == before
    assert report is not None
    assert rows(read(spark, uri), ["n"]) == [(i,) for i in range(10)]


def test_invalid_arguments(spark, tmp_path):
    df = spark.createDataFrame([(1,)], "id long")
    with pytest.raises(ValueError, match="mode"):
        write(df, str(tmp_path / "t"), mode="upsert")
    with pytest.raises(ValueError, match="replace_where"):
        write(df, str(tmp_path / "t"), replace_where="id = 1")
    with pytest.raises(ValueError, match="together"):
        write(df, str(tmp_path / "t"), app_id="x")
    with pytest.raises(InvalidCommitError, match="append-only"):
        write(df, str(tmp_path / "a"), configuration={"delta.appendOnly": "true"})
        write(df, str(tmp_path / "a"), mode="overwrite")


# -- Airflow -----------------------------------------------------------------------------------------------
def test_operator_commits_once_per_interval(spark, tmp_path):
    from collections import defaultdict
    from types import SimpleNamespace

    from airflow_provider_delta.operators.spark import DeltaSparkWriteOperator

    uri = str(tmp_path / "t")

    def build(session, context):
        day = context["logical_date"].date()
        return session.createDataFrame([(1, day), (2, day)], "id long, day date")

    op = DeltaSparkWriteOperator(task_id="load", table_uri=uri, python_callable=build, partition_by=["day"])

    pushed: list[dict] = []

    def context(day: int) -> dict:
        ti = SimpleNamespace(dag_id="sales", task_id="load", map_index=-1,
                             xcom_push=lambda key, value: pushed.append(value))  # fmt: skip
        return {"ti": ti, "run_id": f"r{day}", "logical_date": dt.datetime(2024, 3, day, tzinfo=dt.UTC),
                "outlet_events": defaultdict(SimpleNamespace)}  # fmt: skip

    first = context(1)
    assert op.execute(first) == 0
    assert op.execute(context(1)) == 0  # a retry of the same interval: nothing written
    assert op.execute(context(2)) == 1
    assert DeltaTable(uri).snapshot().app_transactions == {
        "airflow/sales/load/-1/2024-03-01T00:00:00+00:00": 1,
        "airflow/sales/load/-1/2024-03-02T00:00:00+00:00": 1,
    }
    # The "Delta table" link's record of each run: the version holding the interval's rows.
    assert [(p["version"], p["already_committed"]) for p in pushed] == [(0, False), (0, True), (1, False)]
    (event,) = first["outlet_events"].values()
    assert event.extra["version"] == 0 and event.extra["appId"].endswith("2024-03-01T00:00:00+00:00")
    assert deltalake.DeltaTable(uri).to_pyarrow_table().num_rows == 4
    assert spark.range(1).count() == 1  # the shared session was not stopped by the operator


# -- Spark's own Parquet writer (native_files) ------------------------------------------------------------
def _odd_partitions(spark):
    """Rows whose ``name`` partition values need escaping in folder names, or are null."""
    names = ["a/b=c", "x y%25", "ü:#?", None, "plain", "long" * 10]
    base = dt.datetime(2024, 3, 1, 12, 30, 0, 123456, tzinfo=dt.UTC)
    data = [
        (i, names[i % len(names)], dt.date(2024, 3, 1 + i // 6 % 2), base + dt.timedelta(minutes=i),
         Decimal(i) / 4, i % 2 == 0, i * 1.5 if i % 5 else None, [f"t{i}"], {"k": i},
         (i, "y" * (33 + i % 5)))
        for i in range(60)
    ]  # fmt: skip
    return spark.createDataFrame(data, DDL).repartition(1)  # one task: the same file layout on both paths


def _spy_paths(monkeypatch) -> list[str]:
    import importlib

    write_module = importlib.import_module("airflow_provider_delta.spark.write")  # the module, not write()
    taken: list[str] = []
    for name, label in (("write_native", "native"), ("write_data", "mapInArrow")):
        original = getattr(write_module, name)

        def spy(*args, _original=original, _label=label, **kwargs):
            taken.append(_label)
            return _original(*args, **kwargs)

        monkeypatch.setattr(write_module, name, spy)
    return taken


def test_native_path_where_spark_can_write_the_files_and_mapinarrow_elsewhere(spark, tmp_path, monkeypatch):
    from airflow_provider_delta.spark.write import plan_write

    def blocker(ddl: str, uri: str, partition_by=(), **config) -> str | None:
        df = spark.createDataFrame([], ddl)
        _, plan = plan_write(df, None, list(partition_by), False, config)
        return native_files.native_write_blocker(plan, DeltaTable(uri).store)

    local = str(tmp_path / "p")
    assert blocker(DDL, local, ["name", "day"]) is None
    assert blocker(DDL, "file://" + local, ["ok", "amount"]) is None
    assert "storage 'memory'" in blocker(DDL, "memory://p")
    assert "column mapping" in blocker(DDL, local, **{"delta.columnMapping.mode": "name"})
    assert "timestamp_ntz" in blocker("id long, t timestamp_ntz", local)
    assert "timestamp_ntz" in blocker("id long, s struct<t:array<timestamp_ntz>>", local)
    assert "partition column 'ts'" in blocker(DDL, local, ["ts"])
    assert "every column" in blocker("id long, day date", local, ["id", "day"])
    taken = _spy_paths(monkeypatch)
    write(_data(spark, 4), str(tmp_path / "n"), partition_by=["day"])
    write(spark.createDataFrame([(1, "a")], "id long, part string"), str(tmp_path / "cm"),
          configuration={"delta.columnMapping.mode": "name"})  # fmt: skip
    assert taken == ["native", "mapInArrow"]


def test_native_and_mapinarrow_paths_give_the_same_adds(spark, tmp_path, monkeypatch):
    df = _odd_partitions(spark)
    adds = {}
    for native in (True, False):
        monkeypatch.setattr(native_files, "NATIVE_WRITES", native)
        uri = str(tmp_path / f"native {native}")
        write(df, uri, partition_by=["name", "day"])
        files = DeltaTable(uri).snapshot().files.to_pylist()
        adds[native] = sorted(files, key=lambda a: a["path"].split("/")[:2])
    assert len(adds[True]) == len(adds[False]) == 12
    for ours, theirs in zip(adds[True], adds[False], strict=True):
        # Same folders (Spark's escaping), values and statistics; sizes differ with the Parquet writer.
        assert ours["path"].rsplit("/", 1)[0] == theirs["path"].rsplit("/", 1)[0]
        assert dict(ours["partitionValues"]) == dict(theirs["partitionValues"])
        assert json.loads(ours["stats"]) == json.loads(theirs["stats"])  # 0.0 == -0.0: writers differ
        assert ours["size"] > 0 and abs(ours["modificationTime"] - theirs["modificationTime"]) < 600_000
    stats = [json.loads(a["stats"]) for a in adds[True]]
    assert sum(s["numRecords"] for s in stats) == 60
    # Strings longer than 32 characters: a 32-character prefix as the minimum, no maximum (as Delta Spark).
    assert all(s["minValues"]["point"]["y"] == "y" * 32 and "y" not in s["maxValues"]["point"] for s in stats)
    assert {dict(a["partitionValues"])["name"] for a in adds[True]} == {
        "a/b=c",
        "x y%25",
        "ü:#?",
        None,
        "plain",
        "long" * 10,
    }


def test_native_write_with_escaped_and_null_partitions_reads_back(spark, tmp_path):
    uri = str(tmp_path / "a table")
    df = _odd_partitions(spark)
    write(df, uri, partition_by=["name", "day"])
    write(df.where("id < 10"), uri)  # an append to the same partitions
    expected = rows(df.unionAll(df.where("id < 10")))
    assert rows(deltalake.DeltaTable(uri).to_pyarrow_table(), df.columns) == expected
    assert rows(kernel_rows(Path(uri)), df.columns) == expected
    assert rows(read(spark, uri)) == expected
    root = Path(uri)
    folders = {p.relative_to(root).parts[0] for p in root.iterdir()}
    assert "name=__HIVE_DEFAULT_PARTITION__" in folders and "name=a%2Fb%3Dc" in folders
    assert native_files.STAGING_DIR not in folders  # the staging folder is gone
    assert not list(root.rglob(".*.crc")) and not list(root.rglob("_SUCCESS"))
    some = pq.ParquetFile(root / DeltaTable(uri).snapshot().file_paths()[0])
    assert some.schema.column(some.schema.names.index("ts")).physical_type == "INT64"  # not INT96
    assert spark.conf.get("spark.sql.parquet.outputTimestampType") == "INT96"  # restored after the write


def test_native_write_keeps_old_dates_gregorian_whatever_the_session_says(spark, tmp_path):
    uri = str(tmp_path / "t")
    old = [(1, dt.date(1, 1, 1), dt.datetime(1000, 6, 1, 12, tzinfo=dt.UTC))]
    spark.conf.set("spark.sql.parquet.datetimeRebaseModeInWrite", "LEGACY")
    try:
        write(spark.createDataFrame(old, "id long, day date, ts timestamp"), uri)
    finally:
        spark.conf.unset("spark.sql.parquet.datetimeRebaseModeInWrite")
    assert rows(deltalake.DeltaTable(uri).to_pyarrow_table()) == rows(read(spark, uri)) == _rows_of(old)


def test_native_write_of_no_rows_commits_no_files(spark, tmp_path):
    uri = str(tmp_path / "t")
    write(spark.createDataFrame([], "id long, name string"), uri)
    assert DeltaTable(uri).snapshot().num_files == 0 and _parquet_files(tmp_path / "t") == set()


def test_native_write_failure_commits_nothing_and_leaves_no_files(spark, tmp_path):
    from pyspark.sql import functions as F

    uri = str(tmp_path / "t")
    write(spark.range(0, 10).selectExpr("id AS n", "id % 2 AS p"), uri, partition_by=["p"])
    before = {p for p in (tmp_path / "t").rglob("*") if "_delta_log" not in p.parts}

    @F.udf("long")
    def fail_on_77(n):
        if n == 77:
            raise RuntimeError("boom on row 77")
        return n

    failing = spark.range(0, 100, numPartitions=4).select(
        fail_on_77("id").alias("n"), F.lit(1).cast("long").alias("p")
    )
    with pytest.raises(Exception, match="boom on row 77"):
        write(failing, uri)
    assert DeltaTable(uri).version() == 0
    after = {p for p in (tmp_path / "t").rglob("*") if "_delta_log" not in p.parts}
    assert after == before  # no data file, and no staging folder either
    assert rows(read(spark, uri), ["n"]) == [(i,) for i in range(10)]


@pytest.mark.parametrize("mode", ["none", "name"])
def test_struct_fields_match_by_name_in_any_order(spark, tmp_path, mode):
    """As the Arrow writer (and Delta Spark's schema merge): a struct's fields in another order, some
    missing or in another case, at any depth, land in the table's fields; Spark itself would cast structs
    by position. ``none`` takes Spark's own Parquet writer, ``name`` the mapInArrow path."""
    uri = str(tmp_path / "t")
    cfg = {"delta.columnMapping.mode": mode} if mode != "none" else None
    point = "struct<x:int,y:string>"
    table_ddl = f"id long, p {point}, ps array<{point}>, m map<string,{point}>"
    write(spark.createDataFrame([(1, (1, "a"), [(1, "a")], {"k": (1, "a")})], table_ddl), uri,
          configuration=cfg)  # fmt: skip
    turned = "struct<y:string,x:int>"
    other = f"id long, p {turned}, ps array<struct<Y:string>>, m map<string,{turned}>"
    data = [(2, ("b", 2), [("c",)], {"k": ("d", 4)}), (3, None, None, None)]
    write(spark.createDataFrame(data, other), uri)
    expected = [
        {"id": 1, "p": {"x": 1, "y": "a"}, "ps": [{"x": 1, "y": "a"}], "m": [("k", {"x": 1, "y": "a"})]},
        {"id": 2, "p": {"x": 2, "y": "b"}, "ps": [{"x": None, "y": "c"}], "m": [("k", {"x": 4, "y": "d"})]},
        {"id": 3, "p": None, "ps": None, "m": None},
    ]
    assert read_table(uri).sort_by("id").to_pylist() == expected
    ours = rows(read_table(uri))
    assert rows(read(spark, uri)) == rows(kernel_rows(Path(uri)), ["id", "p", "ps", "m"]) == ours
    added = spark.createDataFrame([(4, (2.0, 4))], "id long, p struct<z:double,x:int>")
    with pytest.raises(SchemaMismatchError, match=r"'p\.z' are not in the table"):
        write(added, uri)
    assert DeltaTable(uri).version() == 1
    write(added, uri, merge_schema=True)  # the new field appended to the struct
    got = read_table(uri).sort_by("id").to_pylist()
    assert [r["p"] for r in got] == [{"x": 1, "y": "a", "z": None}, {"x": 2, "y": "b", "z": None}, None,
                                     {"x": 4, "y": None, "z": 2.0}]  # fmt: skip
    assert rows(kernel_rows(Path(uri)), ["id", "p", "ps", "m"]) == rows(read_table(uri))
