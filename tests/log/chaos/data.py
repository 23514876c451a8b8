"""The chaos test's data: the rows each batch holds, and how actors and the audit write and read data files.

Data files are the actors' own I/O (through the table's fsspec filesystem): client-side faults are injected
only into the core's storage calls, while S3's server-side faults hit these requests too.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pyarrow as pa
import pyarrow.parquet as pq
from azure.core.exceptions import ResourceNotFoundError

from airflow_provider_delta.log.files.storage import LogStore

# A file that is gone: adlfs raises Azure's own error (not FileNotFoundError) when a blob disappears between
# opening it and reading a range of it, e.g. when VACUUM deletes a file whose footer is being read.
NOT_FOUND = (FileNotFoundError, ResourceNotFoundError)

SCHEMA = pa.schema([("writer", pa.int32()), ("batch", pa.int64()), ("row", pa.int32())])


def batch_rows(writer: int, batch: int) -> int:
    """How many rows batch ``batch`` of writer ``writer`` holds (1-7), so that the audit can count them."""
    return 1 + (writer * 31 + batch * 17) % 7


def batch_table(writer: int, batch: int) -> pa.Table:
    n = batch_rows(writer, batch)
    return pa.table([[writer] * n, [batch] * n, list(range(n))], schema=SCHEMA)


def write_parquet(store: LogStore, relative: str, table: pa.Table) -> None:
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink)
    store.fs.pipe_file(store.table_file(relative), sink.getvalue().to_pybytes())


def read_parquet(store: LogStore, relative: str) -> pa.Table:
    return pq.read_table(pa.BufferReader(store.fs.cat_file(store.table_file(relative))))


def file_exists(store: LogStore, relative: str) -> bool:
    full = store.table_file(relative)
    store.fs.invalidate_cache(full)
    try:
        store.fs.info(full)
        return True
    except FileNotFoundError:
        return False


def read_snapshot_rows(store: LogStore, paths: list[str]) -> tuple[pa.Table, list[str]]:
    """Rows of the files ``paths`` (as one table) and the paths that were not found."""

    def read(path: str) -> pa.Table | str:
        try:
            return read_parquet(store, path).select(SCHEMA.names).cast(SCHEMA)
        except NOT_FOUND:
            return path

    with ThreadPoolExecutor(8) as pool:
        got = list(pool.map(read, paths))
    tables = [t for t in got if isinstance(t, pa.Table)]
    return pa.concat_tables([SCHEMA.empty_table(), *tables]), [p for p in got if isinstance(p, str)]
