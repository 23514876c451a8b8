"""Readers of a Delta table beside our scan, each giving Arrow rows: DuckDB's ``delta`` extension
(delta-kernel-rs inside), deltalake (delta-rs) by its two paths and delta-kernel-rs's own scan (through
its Python wrapper); and the misreads we know of, each a rule that turns the rows our scan reads into the
ones a reader returns.

The extension is LOADed from the file the ``duckdb-extension-delta`` package ships: with autoinstall off,
nothing is fetched, and a DuckDB of another version than the file's fails to start here, naming both.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import deltalake
import duckdb
import pyarrow as pa
from delta_kernel_rust_sharing_wrapper import PythonInterface, ScanBuilder, Table


def extension_path() -> Path:
    """``delta.duckdb_extension`` of the installed package, built for exactly this DuckDB (the package
    pins it): ``duckdb_extension_delta/extensions/v<duckdb version>/``."""
    import duckdb_extension_delta

    shipped = Path(duckdb_extension_delta.__file__).parent / "extensions"
    path = shipped / f"v{duckdb.__version__}" / "delta.duckdb_extension"
    if not path.is_file():
        built = sorted(p.name for p in shipped.iterdir())
        raise RuntimeError(f"duckdb-extension-delta ships {built}, not one for duckdb {duckdb.__version__}: "
                           "uv.lock must hold the duckdb the extension pins")  # fmt: skip
    return path


def connect() -> duckdb.DuckDBPyConnection:
    con = duckdb.connect(config={"autoinstall_known_extensions": False, "autoload_known_extensions": False})
    con.execute(f"LOAD '{extension_path()}'")
    return con


def duckdb_rows(con: duckdb.DuckDBPyConnection, uri: str) -> pa.Table:
    return con.execute("SELECT * FROM delta_scan(?)", [uri]).to_arrow_table()


def deltalake_sql_rows(uri: str) -> pa.Table:
    """deltalake's SQL engine (DataFusion on delta-rs's scan), as tests/oracle/test_arrow_rows_agree.py."""
    query = deltalake.QueryBuilder().register("t", deltalake.DeltaTable(uri))
    return pa.table(query.execute("SELECT * FROM t"))


def deltalake_arrow_rows(uri: str) -> pa.Table:
    """``deltalake.DeltaTable.to_pyarrow_table()``: a pyarrow dataset over the table's files."""
    return deltalake.DeltaTable(uri).to_pyarrow_table()


def kernel_rows(uri: str) -> pa.Table:
    """delta-kernel-rs's scan (``delta-kernel-rust-sharing-wrapper``), as tests/log/test_checkpoint.py."""
    url = Path(uri).resolve().as_uri() + "/"
    engine = PythonInterface(url)
    return pa.table(ScanBuilder(Table(url).snapshot(engine)).build().execute(engine).read_all())


# -- misreads: what a reader returns instead of the right rows ---------------------------------------------
def _nulls(table: pa.Table, columns: list[str]) -> pa.Table:
    for name in columns:
        i = table.column_names.index(name)
        table = table.set_column(i, name, pa.nulls(table.num_rows, table.schema.field(i).type))
    return table


def partition_columns_null(table: pa.Table, partition_by: list[str]) -> pa.Table:
    return _nulls(table, partition_by)


def data_columns_null(table: pa.Table, partition_by: list[str]) -> pa.Table:
    return _nulls(table, [c for c in table.column_names if c not in partition_by])


def last_partition_read_into_first(table: pa.Table, partition_by: list[str]) -> pa.Table:
    """The first partition column holds the last one's values, the last NULL (two partition columns,
    first and last in the schema)."""
    first, last = partition_by[0], partition_by[-1]
    i = table.column_names.index(first)
    table = table.set_column(i, first, table[last].cast(table.schema.field(i).type))
    return _nulls(table, [last])


@dataclass(frozen=True)
class Misread:
    """A reader's known defect on one table shape: ``rule`` turns the right rows into what it returns.
    ``twin``: whether Delta Spark's table of the same shape is misread the same way (the defect is the
    reader's); when it is not, ``why`` says why no twin can show it."""

    what: str
    rule: Callable[[pa.Table, list[str]], pa.Table]
    twin: bool = True
    why: str = ""
