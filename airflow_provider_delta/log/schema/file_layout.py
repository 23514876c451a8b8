"""How rows become data files of a table: columns, partition folders, names, codec and statistics.

One layout per table configuration (``TableConfiguration.file_layout``), used by every writer of data and
change data files: the Arrow writer, OPTIMIZE, row deletes and updates, and the Spark writer's executors (it
is a small picklable value). Spec: "Data Files" (Hive-style ``col=value`` folders escaped as Spark escapes
them, ``__HIVE_DEFAULT_PARTITION__`` for null), "Writer Requirements for Column Mapping" (physical names and
field ids), "Void Type" (never materialized), "Per-file Statistics", and the ``delta.parquet.*`` table
properties ("Table Properties"). Under "Iceberg Compatibility V1/V2" (and Delta Spark's
``materializePartitionColumns``) each file also holds its partition values as columns, after every other
column (row tracking's hidden ones included, as Delta Spark's writer appends partition columns to the rest),
with their physical names and field ids, and its ``add`` carries Delta Spark's ``ICEBERG_COMPAT_VERSION`` tag.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import IO, Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from ..base.arrow_utils import from_numpy, from_strings
from .partition_values import parse_partition_values
from .schema import delta_schema_to_arrow, physical_name
from .stats import file_stats

HIVE_NULL = "__HIVE_DEFAULT_PARTITION__"
# Characters Spark escapes in partition folder names (ExternalCatalogUtils.escapePathName).
_ESCAPED = frozenset("\"#%'*/:=?\\\x7f{[]^") | frozenset(chr(c) for c in range(1, 32))
_UNESCAPE = re.compile(r"%([0-9A-Fa-f]{2})")
_EXTENSIONS = {"none": "", "snappy": ".snappy", "gzip": ".gz", "lz4": ".lz4raw", "zstd": ".zstd"}
# Delta Spark's tag on the adds of files written under IcebergCompatV2 or later (``AddFile.Tags``): REORG
# TABLE ... APPLY (UPGRADE UNIFORM) rewrites the files without it.
ICEBERG_COMPAT_TAG = "ICEBERG_COMPAT_VERSION"


def escape_path_name(text: str) -> str:
    return "".join(f"%{ord(c):02X}" if c in _ESCAPED else c for c in text)


def partition_dir(values: Mapping[str, str | None], physical_names: Sequence[str]) -> str:
    """``phys1=v1/phys2=v2``, escaped as Spark does; null and empty values as ``HIVE_NULL``."""
    return "/".join(
        f"{escape_path_name(physical)}={escape_path_name(values[physical] or HIVE_NULL)}"
        for physical in physical_names
    )


def unescape_path_name(text: str) -> str:
    """Undo Spark's escaping of a folder name (``ExternalCatalogUtils.unescapePathName``)."""
    return _UNESCAPE.sub(lambda m: chr(int(m[1], 16)), text)


def partition_values_of_path(path: str) -> dict[str, str | None]:
    """The ``name=value`` folders of a relative file path, unescaped; ``HIVE_NULL`` read as null."""
    found: dict[str, str | None] = {}
    for part in path.split("/")[:-1]:
        key, sep, value = part.partition("=")
        if sep:
            value = unescape_path_name(value)
            found[unescape_path_name(key)] = None if value == HIVE_NULL else value
    return found


def is_void(delta_type: Any) -> bool:
    return delta_type == "void"


def without_void(fields: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """``fields`` with their ``void`` columns left out, in structs at any depth ("Void Type": writers MUST
    omit them from data files); ``void_shapes`` has refused the shapes where that leaves nothing."""
    out = []
    for f in fields:
        t = f["type"]
        if is_void(t):
            continue
        if isinstance(t, dict) and t.get("type") == "struct":
            f = {**f, "type": {**t, "fields": without_void(t["fields"])}}
        out.append(f)
    return out


def void_shapes(schema: dict[str, Any]) -> list[str]:
    """The shapes of ``schema`` that no data file can hold ("Void Type"): a void inside an array or a map,
    a struct whose fields are all void, a table whose columns are all void. Writers refuse new data files
    for such a table; reading it, and metadata-only changes, stay allowed."""
    found: list[str] = []

    def visit(t: Any, path: str, in_collection: bool) -> None:
        if is_void(t):
            if in_collection:
                found.append(f"{path}: a void inside an array or map")
            return
        if not isinstance(t, dict):
            return
        kind = t.get("type")
        if kind == "struct":
            fields = t.get("fields") or []
            if fields and all(is_void(f["type"]) for f in fields):
                found.append(f"{path}: a struct whose fields are all void")
            for f in fields:
                visit(f["type"], f"{path}.{f['name']}", in_collection)
        elif kind == "array":
            visit(t["elementType"], f"{path}.element", True)
        elif kind == "map":
            visit(t["keyType"], f"{path}.key", True)
            visit(t["valueType"], f"{path}.value", True)

    fields = schema.get("fields") or []
    if fields and all(is_void(f["type"]) for f in fields):
        found.append("every column of the table is void")
    for f in fields:
        if not is_void(f["type"]):
            visit(f["type"], f["name"], False)
    return found


@dataclass(frozen=True)
class FileLayout:
    """What a writer needs to turn a table's rows into its data files."""

    data_columns: tuple[str, ...]  # logical names of the columns files hold, in file order (void left out)
    physical: pa.Schema  # their Arrow schema in the file: physical names, field ids, hidden columns last
    partitions: tuple[tuple[str, str, str], ...]  # (logical name, physical name, Delta type)
    stats_schema: pa.StructType  # the statistics the table keeps, by physical name
    compression: str = "zstd"  # pyarrow's name of the codec
    data_page_version: str = "1.0"
    hidden_columns: tuple[str, ...] = ()  # row tracking's materialized columns (OPTIMIZE keeps them)
    # The partition columns as files hold them when their values are materialized (IcebergCompat,
    # materializePartitionColumns): physical names, field ids, after ``physical``; empty otherwise.
    partition_fields: pa.Schema = pa.schema([])
    iceberg_compat_version: int | None = None  # the IcebergCompat version files are written under

    @classmethod
    def of(
        cls,
        schema: dict[str, Any],
        partition_columns: Sequence[str],
        mode: str,
        stats_schema: pa.StructType,
        *,
        compression: str,
        data_page_version: str,
        hidden_columns: Sequence[str] = (),
        materialize_partitions: bool = False,
        iceberg_compat_version: int | None = None,
    ) -> FileLayout:
        partitions = {c.lower() for c in partition_columns}
        data_fields = without_void([f for f in schema["fields"] if f["name"].lower() not in partitions])
        physical = delta_schema_to_arrow({"type": "struct", "fields": data_fields}, physical=True)
        for name in hidden_columns:
            physical = physical.append(pa.field(name, pa.int64()))
        by_lower = {f["name"].lower(): f for f in schema["fields"]}
        partition_fields = pa.schema([])
        if materialize_partitions and partition_columns:
            in_order = [by_lower[c.lower()] for c in partition_columns]
            partition_fields = delta_schema_to_arrow({"type": "struct", "fields": in_order}, physical=True)
        return cls(
            data_columns=tuple(f["name"] for f in data_fields),
            physical=physical,
            partitions=tuple(
                (f["name"], physical_name(f, mode), f["type"])
                for f in (by_lower[c.lower()] for c in partition_columns)
            ),
            stats_schema=stats_schema,
            compression=compression,
            data_page_version=data_page_version,
            hidden_columns=tuple(hidden_columns),
            partition_fields=partition_fields,
            iceberg_compat_version=iceberg_compat_version,
        )

    @property
    def physical_partition_names(self) -> list[str]:
        return [physical for _, physical, _ in self.partitions]

    @property
    def materialized_partitions(self) -> bool:
        """Whether files hold their partition values as columns too."""
        return len(self.partition_fields) > 0

    @property
    def file_schema(self) -> pa.Schema:
        """The Arrow schema of a whole file: ``physical`` (the table's columns, then the hidden ones), then
        the materialized partition columns ("Writer Requirements for IcebergCompatV1": after the data
        columns)."""
        if not self.materialized_partitions:
            return self.physical
        return pa.schema([*self.physical, *self.partition_fields])

    @property
    def file_tags(self) -> dict[str, str] | None:
        """The tags of a written file's ``add``: Delta Spark tags the files of IcebergCompatV2 and later
        with the version they were written under."""
        version = self.iceberg_compat_version
        return {ICEBERG_COMPAT_TAG: str(version)} if version is not None and version >= 2 else None

    def with_partition_values(self, rows: pa.Table, values: Mapping[str, str | None]) -> pa.Table:
        """``rows`` (in ``physical``'s shape) with the file's partition values appended as columns when the
        layout materializes them: the values the ``add`` records (by physical name), typed as the column,
        so that a reader of the file and a reader of the log see the same value (null for ``""``)."""
        if not self.materialized_partitions:
            return rows
        picks = from_numpy(np.zeros(rows.num_rows, dtype=np.int64))
        for field, (_, physical, delta_type) in zip(self.partition_fields, self.partitions, strict=True):
            raw = values.get(physical)
            one = pa.nulls(1, pa.string()) if raw is None else from_strings([raw])
            typed = parse_partition_values(one, delta_type).cast(field.type)
            rows = rows.append_column(field, typed.take(picks))
        return rows

    def partition_dir(self, values: Mapping[str, str | None]) -> str:
        return partition_dir(values, self.physical_partition_names)

    def file_name(self, task: int, prefix: str = "part") -> str:
        """``part-<task>-<uuid>.c000.<codec>.parquet``, as Spark names the files of a write."""
        return f"{prefix}-{task:05d}-{uuid.uuid4()}.c000{_EXTENSIONS[self.compression]}.parquet"

    def parquet_writer(self, sink: IO[bytes] | str, schema: pa.Schema | None = None) -> pq.ParquetWriter:
        """A writer of this table's files (``file_schema`` unless given): its codec and data page version,
        dictionaries for strings, timestamps as INT64 microseconds (never INT96: "Writer Requirements for
        IcebergCompatV2")."""
        schema = self.file_schema if schema is None else schema
        return pq.ParquetWriter(
            sink, schema, compression=self.compression, data_page_version=self.data_page_version,
            use_dictionary=dictionary_columns(schema), use_deprecated_int96_timestamps=False,
        )  # fmt: skip

    def stats(self, footer: pq.FileMetaData) -> str:
        """The ``stats`` JSON of a file this layout wrote, from its footer."""
        return file_stats(footer, self.stats_schema)


def dictionary_columns(schema: pa.Schema) -> list[str]:
    """Columns worth dictionary encoding: strings and binaries. Numbers and timestamps rarely repeat enough,
    and trying costs the writer twice the time before it falls back to plain encoding."""
    kinds = (pa.types.is_string, pa.types.is_large_string, pa.types.is_binary, pa.types.is_large_binary)
    return [f.name for f in schema if any(kind(f.type) for kind in kinds)]
