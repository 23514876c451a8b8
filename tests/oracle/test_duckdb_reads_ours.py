"""Other engines read the tables our core writes: DuckDB's ``delta`` extension (delta-kernel-rs inside),
deltalake (delta-rs; its SQL engine and ``to_pyarrow_table``), delta-kernel-rs's own scan and Delta Spark,
one table shape at a time.

Each reader returns our scan's rows (order-free, types compared by value: ``oracle_arrow.rows_of``), or the
misread listed for it in ``MISREADS`` and in docs/compatibility.md ("Other engines reading our tables").
A listed misread is asserted, not skipped: the day a reader is fixed the test fails, and the entry goes.
For each shape with a misread Delta Spark writes the twin of our table (the same rows, column order,
partitioning and properties, by CREATE TABLE AS SELECT) and reads our rows from it; a reader must misread
the twin the same way, so that the defect is the reader's and not our writer's (where no twin can hold
what ours holds, ``Misread.why`` says so and the twin must be read right). The table in
docs/compatibility.md is checked against ``MISREADS`` and ``REFUSALS`` cell by cell.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from decimal import Decimal
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake.exceptions import DeltaProtocolError
from duckdb_reader import (
    Misread,
    connect,
    data_columns_null,
    deltalake_arrow_rows,
    deltalake_sql_rows,
    duckdb_rows,
    kernel_rows,
    last_partition_read_into_first,
    partition_columns_null,
)
from oracle_arrow import delta_spark_table, rows_of
from oracle_scenarios import age_log

from airflow_provider_delta.log import DeltaTable, write

ODD = ["a b", "100%", "x=y", "a/b", "é ü 漢", "", "#{}", "%2F", " lead", "=", "a%20b"]
CM_ID = {"delta.columnMapping.mode": "id"}
CM_NAME = {"delta.columnMapping.mode": "name"}


def _rows(parts: list[str | None], start: int = 0) -> pa.Table:
    """One row per partition value, with the types readers tend to differ on."""
    n = len(parts)
    keys = range(start, start + n)
    return pa.table(
        {
            "k": pa.array(keys, pa.int64()),
            "v": pa.array([f"v{k}" if k % 4 else None for k in keys], pa.string()),
            "d": pa.array([dt.date(2024, 1, 1) + dt.timedelta(days=k) for k in keys], pa.date32()),
            "ts": pa.array(
                [dt.datetime(2024, 2, 29, 23, 59, 59, k, tzinfo=dt.UTC) for k in keys],
                pa.timestamp("us", "UTC"),
            ),
            "amt": pa.array([Decimal(k) / 4 for k in keys], pa.decimal128(10, 2)),
            "p": parts,
        }
    )


def _first(table: pa.Table, column: str) -> pa.Table:
    return table.select([column] + [c for c in table.column_names if c != column])


def _odd_values(uri: str) -> None:
    write(uri, _rows(ODD * 2), partition_by=["p"])


def _overwrite(uri: str) -> None:
    write(uri, _rows(ODD), partition_by=["p"])
    write(uri, _rows(["a b", "x=y"] * 3, 100), mode="overwrite")
    write(uri, _rows(["a b", "new"], 200))


def _null_partitions(uri: str) -> None:
    rows = _rows(["a", None, "b", None, "a", None])
    write(uri, rows.set_column(2, "d", pa.array([None, None, dt.date(2024, 1, 1)] * 2, pa.date32())),
          partition_by=["p", "d"])  # fmt: skip


def _deletion_vectors(uri: str) -> None:
    write(uri, _rows(ODD[:3] * 4), partition_by=["p"], configuration={"delta.enableDeletionVectors": "true"})
    table = DeltaTable(uri)
    one, two, three = sorted(table.snapshot().files.column("path").to_pylist())
    table.transaction().delete_rows({one: [0, 2]}).commit("DELETE")  # inline in the log
    table.transaction().delete_rows({two: [1], one: [1]}, inline_max_bytes=0).commit("DELETE")  # on disk
    table.transaction().remove_files([three]).commit("DELETE")


def _column_mapping(configuration: dict[str, str], partition_first: bool) -> Callable[[str], None]:
    def build(uri: str) -> None:
        rows = _rows(ODD[:4] * 2)
        write(uri, _first(rows, "p") if partition_first else rows, partition_by=["p"],
              configuration=configuration)  # fmt: skip
        write(uri, _rows(["a b", "more"], 50))

    return build


def _two_partition_columns(uri: str) -> None:
    rows = _rows(ODD[:4] * 2)
    rows = rows.add_column(0, "q", pa.array(["x y", "a/b"] * 4, pa.string()))
    write(uri, rows, partition_by=["q", "p"], configuration=CM_NAME)


def _v2_checkpoint(uri: str) -> None:
    config = {"delta.checkpointPolicy": "v2", "delta.feature.v2Checkpoint": "supported"}
    write(uri, _rows(ODD[:4]), partition_by=["p"], configuration=config)
    write(uri, _rows(ODD[:4], 10))
    table = DeltaTable(uri)
    table.checkpoint()
    # Only the checkpoint (a V2 one: UUID-named, with sidecars) is left to read versions 0 and 1 from.
    age_log(Path(uri) / "_delta_log", 3 * 86_400)
    assert table.cleanup_expired_logs(retention_ms=86_400_000)
    assert not (Path(uri) / "_delta_log" / f"{0:020d}.json").exists()
    write(uri, _rows(["a b"], 20))


def _ict_row_tracking(uri: str) -> None:
    config = {"delta.enableInCommitTimestamps": "true", "delta.enableRowTracking": "true"}
    write(uri, _rows(ODD[:4]), partition_by=["p"], configuration=config)
    write(uri, _rows(ODD[:4], 10))


def _change_data_feed(uri: str) -> None:
    config = {"delta.enableChangeDataFeed": "true", "delta.enableDeletionVectors": "true"}
    write(uri, _rows(ODD[:3] * 2), partition_by=["p"], configuration=config)
    table = DeltaTable(uri)
    files = table.snapshot().files.select(["path", "partitionValues"]).to_pylist()
    first, second = sorted(files, key=lambda f: f["path"])[:2]
    table.transaction().delete_rows({first["path"]: [0]}).commit("DELETE")
    # A copy-on-write DELETE of a whole file: its rows go to the change data; readers of the table skip it.
    gone = DeltaTable(uri).scan(filter=[("p", "=", dict(second["partitionValues"])["p"])]).to_table()
    changes = gone.append_column("_change_type", pa.array(["delete"] * gone.num_rows))
    table.transaction().remove_files([second["path"]]).add_change_data(changes).commit("DELETE")
    write(uri, _rows(["a b"], 30))


SHAPES: dict[str, tuple[Callable[[str], None], list[str]]] = {
    "partitioned, odd values": (_odd_values, ["p"]),
    "overwrite": (_overwrite, ["p"]),
    "null partition values": (_null_partitions, ["p", "d"]),
    "deletion vectors": (_deletion_vectors, ["p"]),
    "column mapping id": (_column_mapping(CM_ID, True), ["p"]),
    "column mapping id, partition column last": (_column_mapping(CM_ID, False), ["p"]),
    "column mapping name": (_column_mapping(CM_NAME, True), ["p"]),
    "column mapping name, partition column last": (_column_mapping(CM_NAME, False), ["p"]),
    "column mapping name, partition columns first and last": (_two_partition_columns, ["q", "p"]),
    "V2 checkpoint": (_v2_checkpoint, ["p"]),
    "in-commit timestamps, row tracking": (_ict_row_tracking, ["p"]),
    "change data feed": (_change_data_feed, ["p"]),
}
# Properties Delta Spark's twin of a shape gets (its CREATE TABLE AS SELECT copies rows and partitioning).
TWIN_PROPERTIES = {
    "column mapping id": CM_ID,
    "column mapping id, partition column last": CM_ID,
    "column mapping name": CM_NAME,
    "column mapping name, partition column last": CM_NAME,
    "column mapping name, partition columns first and last": CM_NAME,
    "partitioned, odd values": {},
}

_PARTITIONS_NULL = Misread("partition values read as NULL", partition_columns_null)
_DATA_NULL = Misread("every data column read as NULL", data_columns_null)
MISREADS: dict[tuple[str, str], Misread] = {
    ("DuckDB", "column mapping id, partition column last"): _PARTITIONS_NULL,
    ("DuckDB", "column mapping name, partition column last"): _PARTITIONS_NULL,
    ("DuckDB", "column mapping name, partition columns first and last"): Misread(
        "the first partition column read with the last one's values, the last as NULL",
        last_partition_read_into_first,
    ),
    ("deltalake to_pyarrow_table", "column mapping id"): _DATA_NULL,
    ("deltalake to_pyarrow_table", "column mapping id, partition column last"): _DATA_NULL,
    ("deltalake to_pyarrow_table", "column mapping name"): _DATA_NULL,
    ("deltalake to_pyarrow_table", "column mapping name, partition column last"): _DATA_NULL,
    ("deltalake to_pyarrow_table", "column mapping name, partition columns first and last"): _DATA_NULL,
}
# Tables a reader refuses with DeltaProtocolError, naming the reader feature it does not support.
REFUSALS: dict[tuple[str, str], str] = {
    ("deltalake to_pyarrow_table", "deletion vectors"): "deletionVectors",
    ("deltalake to_pyarrow_table", "change data feed"): "deletionVectors",
    ("deltalake to_pyarrow_table", "V2 checkpoint"): "v2Checkpoint",
}
READERS = ("DuckDB", "deltalake SQL", "deltalake to_pyarrow_table", "delta-kernel-rs")


@pytest.fixture(scope="module")
def duck():
    con = connect()
    yield con
    con.close()


@pytest.fixture(scope="module")
def tables(tmp_path_factory) -> Callable[[str], str]:
    """Each shape written by our core once per module; returns its URI."""
    root, made = tmp_path_factory.mktemp("ours"), {}

    def table(shape: str) -> str:
        if shape not in made:
            made[shape] = str(root / f"t{len(made)}")
            SHAPES[shape][0](made[shape])
        return made[shape]

    return table


def _read(reader: str, duck, uri: str) -> pa.Table:
    if reader == "DuckDB":
        return duckdb_rows(duck, uri)
    if reader == "delta-kernel-rs":
        return kernel_rows(uri)
    return deltalake_sql_rows(uri) if reader == "deltalake SQL" else deltalake_arrow_rows(uri)


def _agree(reader: str, shape: str, theirs: pa.Table, right: pa.Table, what: str) -> None:
    """``theirs`` holds ``right``'s rows, or exactly the listed misread of them (which must differ)."""
    assert sorted(theirs.column_names) == sorted(right.column_names), (what, theirs.column_names)
    got = rows_of(theirs.select(right.column_names))
    misread = MISREADS.get((reader, shape))
    if misread is None:
        assert got == rows_of(right), f"{reader} misreads {what}: {_only(got, rows_of(right))}"
        return
    expected = rows_of(misread.rule(right, SHAPES[shape][1]))
    assert expected != rows_of(right), f"the shape no longer exercises {reader}'s misread ({misread.what})"
    assert got == expected, (
        f"{reader} no longer misreads {what} as listed ({misread.what}; fixed upstream? update MISREADS "
        f"and docs/compatibility.md): {_only(got, expected)}"
    )


def _only(got: list, expected: list) -> str:
    return (f"{len(got)} rows vs {len(expected)}; only theirs {[r for r in got if r not in expected][:3]}; "
            f"only expected {[r for r in expected if r not in got][:3]}")  # fmt: skip


@pytest.mark.parametrize("reader", READERS)
@pytest.mark.parametrize("shape", list(SHAPES))
def test_engines_read_our_tables(shape, reader, tables, duck):
    uri = tables(shape)
    ours = DeltaTable(uri).scan().to_table()
    assert ours.num_rows > 0
    if (refused := REFUSALS.get((reader, shape))) is not None:
        with pytest.raises(DeltaProtocolError, match=refused):
            _read(reader, duck, uri)
        return
    _agree(reader, shape, _read(reader, duck, uri), ours, f"our table ({shape})")


@pytest.mark.parametrize("shape", list(SHAPES))
def test_delta_spark_reads_our_tables(shape, tables, oracle, tmp_path):
    uri = tables(shape)
    ours = DeltaTable(uri).scan().to_table()
    theirs = delta_spark_table(oracle, f"SELECT * FROM delta.`{uri}`", tmp_path)
    assert theirs is not None, f"Delta Spark cannot read our table ({shape})"
    assert theirs.column_names == ours.column_names
    _agree("Delta Spark", shape, theirs, ours, f"our table ({shape})")


MISREAD_SHAPES = sorted({shape for _, shape in MISREADS})


@pytest.mark.parametrize("shape", MISREAD_SHAPES)
def test_misreads_of_our_tables_are_the_readers_own(shape, tables, duck, oracle, tmp_path):
    """Delta Spark's twin of the shape: Delta Spark reads our rows from it, and each reader that misreads
    ours misreads the twin the same way (or, where no twin can show it, reads the twin right)."""
    ours_uri, twin = tables(shape), str(tmp_path / "twin")
    partition_by = SHAPES[shape][1]
    props = ", ".join(f"'{k}' = '{v}'" for k, v in TWIN_PROPERTIES[shape].items())
    properties = f"TBLPROPERTIES ({props})" if props else ""
    oracle.call("sql", f"CREATE TABLE delta.`{twin}` USING delta PARTITIONED BY ({', '.join(partition_by)}) "
                       f"{properties} AS SELECT * FROM delta.`{ours_uri}`")  # fmt: skip
    spark_rows = delta_spark_table(oracle, f"SELECT * FROM delta.`{twin}`", tmp_path)
    assert spark_rows is not None
    ours = DeltaTable(ours_uri).scan().to_table()
    assert spark_rows.column_names == ours.column_names, "the twin's columns are in another order"
    assert rows_of(spark_rows) == rows_of(ours), "Delta Spark's twin does not hold our rows"
    config = DeltaTable(twin).snapshot().metadata.configuration
    assert all(config.get(k) == v for k, v in TWIN_PROPERTIES[shape].items()), config
    for reader in READERS:  # Delta Spark reads its own twin: the reference above
        if (reader, shape) in REFUSALS:
            continue
        theirs, misread = _read(reader, duck, twin), MISREADS.get((reader, shape))
        if misread is not None and misread.twin:
            _agree(reader, shape, theirs, spark_rows, f"Delta Spark's twin ({shape})")
        else:
            got, right = rows_of(theirs.select(spark_rows.column_names)), rows_of(spark_rows)
            why = f" (listed for ours only: {misread.why})" if misread else ""
            assert got == right, f"{reader} misreads Delta Spark's twin ({shape}){why}: {_only(got, right)}"


def test_the_compatibility_table_says_what_these_tests_assert():
    """docs/compatibility.md's table of other engines: a cell per shape and engine, ✓, ✗ n or refuses."""
    text = (Path(__file__).parents[2] / "docs" / "compatibility.md").read_text()
    section = text.split("## Other engines reading our tables\n", 1)[1].split("\n## ", 1)[0]
    lines = [line for line in section.splitlines() if line.startswith("| ")]
    header = [c.strip().replace("`", "") for c in lines[0].strip("|").split("|")]
    assert header[1:] == [*READERS, "Delta Spark"], header
    documented = {}
    for line in lines[2:]:  # after the header and its rule
        shape, *cells = (c.strip() for c in line.strip("|").split("|"))
        documented[shape] = dict(zip(header[1:], cells, strict=True))
    assert list(documented) == list(SHAPES)
    for shape, cells in documented.items():
        for reader, cell in cells.items():
            if (reader, shape) in MISREADS:
                assert cell.startswith("✗ "), (shape, reader, cell)
            else:
                expected = "refuses" if (reader, shape) in REFUSALS else "✓"
                assert cell == expected, (shape, reader, cell)
