"""Iceberg readers of UniForm's metadata, each giving Arrow rows: pyiceberg (``StaticTable.from_metadata``)
and DuckDB's ``iceberg`` extension (``iceberg_scan``), at the current snapshot or at one snapshot id.

DuckDB's ``avro`` and ``iceberg`` extensions are LOADed from the files the ``duckdb-extension-avro`` and
``duckdb-extension-iceberg`` packages ship (avro first: iceberg reads manifests with it), with autoinstall
and autoload off, so nothing is fetched, as ``tests/oracle/duckdb_reader.py`` loads the delta one.
"""

from __future__ import annotations

import datetime as dt
import json
from decimal import Decimal
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa


def _extension(package: Any, name: str) -> Path:
    shipped = Path(package.__file__).parent / "extensions"
    path = shipped / f"v{duckdb.__version__}" / f"{name}.duckdb_extension"
    if not path.is_file():
        built = sorted(p.name for p in shipped.iterdir())
        raise RuntimeError(f"{package.__name__} ships {built}, not one for duckdb {duckdb.__version__}")
    return path


def duckdb_connection() -> duckdb.DuckDBPyConnection:
    import duckdb_extension_avro
    import duckdb_extension_iceberg

    con = duckdb.connect(config={"autoinstall_known_extensions": False, "autoload_known_extensions": False})
    con.execute(f"LOAD '{_extension(duckdb_extension_avro, 'avro')}'")
    con.execute(f"LOAD '{_extension(duckdb_extension_iceberg, 'iceberg')}'")
    con.execute("SET TimeZone = 'UTC'")
    return con


def duckdb_rows(
    con: duckdb.DuckDBPyConnection, metadata_file: str, snapshot_id: int | None = None
) -> pa.Table:
    if snapshot_id is None:
        return con.execute("SELECT * FROM iceberg_scan(?)", [metadata_file]).to_arrow_table()
    query = "SELECT * FROM iceberg_scan(?, snapshot_from_id = ?)"
    return con.execute(query, [metadata_file, snapshot_id]).to_arrow_table()


def pyiceberg_rows(metadata_file: str, snapshot_id: int | None = None, **properties: str) -> pa.Table:
    from pyiceberg.table import StaticTable

    table = StaticTable.from_metadata(metadata_file, properties=properties)
    return table.scan(snapshot_id=snapshot_id).to_arrow()


def snapshots_by_delta_version(metadata_file: str, **properties: str) -> dict[int, int]:
    """Delta version -> the id of the Iceberg snapshot whose summary records it."""
    from pyiceberg.table import StaticTable

    table = StaticTable.from_metadata(metadata_file, properties=properties)
    return {int(s.summary["delta-version"]): s.snapshot_id for s in table.metadata.snapshots}


def _plain(value: Any) -> Any:
    """A value as JSON-comparable text: instants in UTC, narrow and wide integers alike, maps as dicts."""
    if isinstance(value, dt.datetime):
        if value.tzinfo is not None:
            value = value.astimezone(dt.UTC).replace(tzinfo=None)
        return value.isoformat()
    if isinstance(value, dt.date | Decimal):
        return str(value)
    if isinstance(value, bytes):
        return value.hex()
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in sorted(value.items())}
    if isinstance(value, list):
        if value and all(isinstance(v, tuple) and len(v) == 2 for v in value):  # an Arrow map
            return {str(k): _plain(v) for k, v in sorted(value, key=lambda kv: str(kv[0]))}
        return [_plain(v) for v in value]
    return value


def sorted_rows(table: pa.Table) -> list[str]:
    """The rows of ``table`` as sorted JSON lines, keyed by column name: comparable across readers whose
    Arrow types differ (string or large_string, int32 or int8, timestamps in any zone)."""
    rows = table.to_pylist()
    return sorted(json.dumps({k: _plain(v) for k, v in row.items()}, sort_keys=True) for row in rows)
