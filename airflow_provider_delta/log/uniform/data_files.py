"""Delta ``add`` actions as Iceberg data files: location, partition, record count, size and bounds.

What Delta Spark's converter carries over (``IcebergTransactionUtils``, ``IcebergStatsConverter``): the
file's absolute URI, its partition values typed for the identity spec, ``numRecords`` as the record count
(read from the Parquet footer when a writer left it out), the size, and from Delta's statistics the null
counts and the bounds Iceberg may trust: Delta keeps timestamps to the millisecond (the maximum gets the
rest of its millisecond back) and strings as a prefix (a long maximum is dropped). Bounds of other types,
and of columns inside arrays and maps, are left out: a reader then reads the file, never skips it wrongly.

A file with a deletion vector cannot be an Iceberg v2 data file ("Iceberg Compatibility V2" forbids them):
:class:`UniformError`, before anything is written.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ..actions.actions import Metadata
from ..base.errors import UniformError
from ..features.configuration import TableConfiguration
from ..files.storage import LogStore
from ..schema.partition_values import typed_partition_values
from ..schema.stats import parse_stats
from .iceberg_schema import primitive_type, stats_columns
from .metadata_files import fs_path, location_of

if TYPE_CHECKING:
    from pyiceberg.manifest import DataFile

_STRING_PREFIX = 32  # Delta's statistics keep strings to a prefix of this many characters
_MS = 1000  # microseconds per millisecond


@dataclass
class DataFileBuilder:
    """Turns Arrow rows of ``add`` actions of one table version into Iceberg ``DataFile`` records."""

    store: LogStore
    config: TableConfiguration
    where: str

    @property
    def metadata(self) -> Metadata:
        return self.config.metadata

    @cached_property
    def _bounded(self) -> list[tuple[tuple[str, ...], int, str]]:
        return list(stats_columns(self.metadata))

    def data_files(self, files: pa.Table) -> list[DataFile]:
        """One ``DataFile`` per row of ``files`` (rows of ``add``, paths decoded, as ``Snapshot.files``)."""
        from pyiceberg.manifest import DataFile, DataFileContent, FileFormat
        from pyiceberg.typedef import Record

        if files.num_rows == 0:
            return []
        self.check_no_deletion_vectors(files)
        paths = files.column("path").to_pylist()
        sizes = files.column("size").to_pylist()
        partitions = self._partitions(files)
        stats = self._stats(files)
        counts = stats.field("numRecords").to_pylist()
        null_counts, lower, upper = self._column_stats(stats)
        out = []
        for i, path in enumerate(paths):
            count = counts[i] if counts[i] is not None else self._footer_rows(path)
            df = DataFile.from_args(
                content=DataFileContent.DATA, file_path=self._location(path), file_format=FileFormat.PARQUET,
                partition=Record(*partitions[i]), record_count=count, file_size_in_bytes=sizes[i],
                value_counts={k: count for k in null_counts[i]} or None,
                null_value_counts=null_counts[i] or None,
                lower_bounds=lower[i] or None, upper_bounds=upper[i] or None,
            )  # fmt: skip
            df.spec_id = 0
            out.append(df)
        return out

    def check_no_deletion_vectors(self, files: pa.Table) -> None:
        if "deletionVector" not in files.column_names:
            return
        dvs = files.column("deletionVector")
        if dvs.null_count < len(dvs):
            first = files.column("path")[pc.index(pc.is_valid(dvs), True).as_py()].as_py()
            raise UniformError(
                f"{self.where}: data file {first} has a deletion vector, which an Iceberg v2 table cannot "
                "express (IcebergCompatV2 forbids them): turn deletion vectors off "
                "(delta.enableDeletionVectors=false) and purge them (REORG TABLE ... APPLY (PURGE)) before "
                "UniForm converts the table",
                rule="deletionVectors",
            )

    def _location(self, path: str) -> str:
        return file_location(self.store, path)

    def _footer_rows(self, path: str) -> int:
        """The record count of a file whose ``add`` has no ``numRecords``: Iceberg requires one."""
        with self.store.open_input_file(fs_path(self.store, self._location(path))) as fh:
            return pq.ParquetFile(fh).metadata.num_rows

    # -- partition values --------------------------------------------------------------------------------
    def _partitions(self, files: pa.Table) -> list[tuple[Any, ...]]:
        """Per file, the partition values in the spec's order, as Iceberg stores them (days, microseconds)."""
        if not self.metadata.partition_columns:
            return [()] * files.num_rows
        typed = typed_partition_values(self.metadata, files, self.config.column_mapping_mode)
        columns = [_iceberg_values(typed.column(c)) for c in self.metadata.partition_columns]
        return list(zip(*columns, strict=True))

    # -- statistics --------------------------------------------------------------------------------------
    def _stats(self, files: pa.Table) -> pa.StructArray:
        names = files.column_names
        stats = files.column("stats") if "stats" in names else pa.nulls(files.num_rows, pa.string())
        return parse_stats(stats, self.config.stats_schema)

    def _column_stats(self, stats: pa.StructArray) -> tuple[list[dict], list[dict], list[dict]]:
        """Per file: null counts, lower and upper bounds (serialized), by field id."""
        from pyiceberg.conversions import to_bytes

        n = len(stats)
        nulls: list[dict[int, int]] = [{} for _ in range(n)]
        lower: list[dict[int, bytes]] = [{} for _ in range(n)]
        upper: list[dict[int, bytes]] = [{} for _ in range(n)]
        for path, field_id, delta_type in self._bounded:
            for i, value in _leaf(stats, "nullCount", path):
                nulls[i][field_id] = value
            kind = _bound_type(delta_type)
            if kind is None:
                continue
            for what, out in (("minValues", lower), ("maxValues", upper)):
                for i, value in _leaf(stats, what, path, delta_type):
                    bound = _bound(value, delta_type, what == "maxValues")
                    if bound is not None:
                        out[i][field_id] = to_bytes(kind, bound)
        return nulls, lower, upper


def file_location(store: LogStore, path: str) -> str:
    """The URI of a data file as the Iceberg metadata records it, from its decoded ``add``/``remove`` path
    (relative to the table root, or an absolute URI)."""
    return path if "://" in path else location_of(store, path)


def _leaf(stats: pa.StructArray, what: str, path: tuple[str, ...], delta_type: str | None = None) -> Iterator:
    """(row, value) of the statistic ``what`` of the column at ``path``, where it is known."""
    array: Any = stats.field(what)
    for name in path:
        kind = array.type
        if kind.get_field_index(name) < 0:
            return
        array = array.field(name)
    if delta_type in ("date",):
        array = array.cast(pa.int32())
    elif delta_type in ("timestamp", "timestamp_ntz"):
        array = array.cast(pa.timestamp("us", tz=array.type.tz)).cast(pa.int64())
    for i, value in enumerate(array.to_pylist()):
        if value is not None:
            yield i, value


# The types whose Delta statistics become Iceberg bounds (strings' maximum only when not truncated, see
# ``_column_stats``); decimals, booleans and binaries get none.
_BOUNDED = frozenset(("byte", "short", "integer", "long", "float", "double", "date", "string", "timestamp",
                      "timestamp_ntz"))  # fmt: skip


def _bound_type(delta_type: str) -> Any:
    return primitive_type(delta_type, "", "") if delta_type in _BOUNDED else None


def _bound(value: Any, delta_type: str, upper: bool) -> Any:
    """A Delta statistic as a bound Iceberg may trust, or ``None``."""
    if delta_type in ("float", "double"):
        return None if value != value else value  # NaN bounds nothing
    if delta_type in ("timestamp", "timestamp_ntz") and upper:
        return value + _MS - 1  # Delta truncates to the millisecond; the true maximum may be within it
    if delta_type == "string" and upper and len(value) >= _STRING_PREFIX:
        return None  # possibly a truncated prefix, with or without a tie-breaker: no upper bound
    return value


def _iceberg_values(column: pa.ChunkedArray) -> list[Any]:
    """Typed partition values as Iceberg's partition tuples hold them: dates as days, timestamps as
    microseconds, narrow integers as ints."""
    kind = column.type
    if pa.types.is_date(kind):
        column = column.cast(pa.int32())
    elif pa.types.is_timestamp(kind):
        column = column.cast(pa.timestamp("us", tz=kind.tz)).cast(pa.int64())
    return column.to_pylist()
