"""A MERGE's source, held so that one larger than memory can be merged: what matching needs in memory, the
rest on local disk.

Data already in memory (a pyarrow Table, pandas, Polars) is used as it is. A stream (a
``RecordBatchReader``, anything with ``__arrow_c_stream__``) is read once, batch by batch: the columns the
join and the clause conditions read stay in memory, and the whole rows are spilled to a Parquet file in a
temporary directory. Whole rows are read back only where values are needed: those of the matched rows an
update takes (as many as the target rows it changes), and the unmatched rows, streamed row group by row
group into the insert writer. Delta Spark materializes its source too (to disk when it is large).
"""

from __future__ import annotations

import tempfile
from collections.abc import Collection, Iterator
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from ..base.arrow_utils import empty_table
from ..writes.write_rows import as_reader
from .arrow_rows import without_views

_SPILL_ROWS = 64 * 1024  # rows per row group of the spill: the unit read back


class MergeSource:
    """The source's schema and row count, the ``narrow`` columns in memory, whole rows on demand."""

    def __init__(self, data: Any, needed: Collection[str] | None) -> None:
        self._dir: tempfile.TemporaryDirectory | None = None
        self._file: pq.ParquetFile | None = None
        in_memory = type(data).__module__.startswith(("pandas", "polars"))
        if in_memory or isinstance(data, pa.Table | pa.RecordBatch):
            self.table: pa.Table | None = without_views(as_reader(data).read_all())
            self.schema = self.table.schema
            self.narrow = self.table
            self.num_rows = self.table.num_rows
            return
        reader = as_reader(data)
        self.table = None
        first = without_views(pa.table({f.name: pa.array([], f.type) for f in reader.schema}))
        self.schema = first.schema
        keep = [f.name for f in self.schema if needed is None or f.name.lower() in needed]
        self._dir = tempfile.TemporaryDirectory(prefix="delta-merge-source-")
        path = f"{self._dir.name}/source.parquet"
        parts: list[pa.Table] = [first.select(keep)]
        with pq.ParquetWriter(path, self.schema) as writer:
            for batch in reader:
                rows = without_views(pa.Table.from_batches([batch]))
                writer.write_table(rows, row_group_size=_SPILL_ROWS)
                parts.append(rows.select(keep))
        self.narrow = pa.concat_tables(parts).combine_chunks()
        self.num_rows = self.narrow.num_rows
        self._file = pq.ParquetFile(path)

    @property
    def column_names(self) -> list[str]:
        return self.schema.names

    def take(self, rows: np.ndarray) -> pa.Table:
        """Whole source rows by index, in the order given."""
        if self.table is not None:
            return self.table.take(pa.array(rows, pa.int64()))
        if not len(rows):
            return empty_table(self.schema)
        order = np.argsort(rows, kind="stable")
        parts = list(self._in_order(rows[order]))
        found = pa.concat_tables(parts) if parts else empty_table(self.schema)
        back = np.empty_like(order)
        back[order] = np.arange(len(order))
        return found.take(pa.array(back))

    def chunks(self, rows: np.ndarray) -> Iterator[tuple[np.ndarray, pa.Table]]:
        """Whole source rows by ascending index, a row group of the spill at a time (the indexes with
        them): rows that need not all be in memory at once, e.g. inserts."""
        rows = np.sort(rows)
        if self.table is not None:
            for start in range(0, len(rows), _SPILL_ROWS):
                part = rows[start:start + _SPILL_ROWS]
                yield part, self.table.take(pa.array(part, pa.int64()))
            return
        assert self._file is not None
        bounds = self._bounds()
        for group, (low, high) in enumerate(bounds):
            at = rows[(rows >= low) & (rows < high)]
            if len(at):
                data = self._file.read_row_group(group)
                yield at, data.take(pa.array(at - low, pa.int64()))

    def _in_order(self, rows: np.ndarray) -> Iterator[pa.Table]:
        for _, part in self.chunks(rows):
            yield part

    def _bounds(self) -> list[tuple[int, int]]:
        assert self._file is not None
        out, start = [], 0
        for group in range(self._file.metadata.num_row_groups):
            n = self._file.metadata.row_group(group).num_rows
            out.append((start, start + n))
            start += n
        return out

    def close(self) -> None:
        """Remove the spill (the temporary directory would be removed at exit anyway)."""
        if self._dir is not None:
            self._file = None
            self._dir.cleanup()
            self._dir = None
