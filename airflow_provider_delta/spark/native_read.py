"""Spark's own Parquet reader for the columns a row-level operation's join needs, where it reads them right.

Our reader (``read``: executors read with the core's ``scan_file`` and hand Arrow batches to the JVM) follows
every rule of the protocol, but moving millions of rows through Python costs more than the rest of a MERGE.
The join only needs a few columns with each row's file and row index; Spark's vectorized reader gives those
(``_metadata.file_path``, ``_metadata.row_index``) when the files hold the columns as the table declares
them. ``native_read_blocker`` says when they may not, and then ``read`` reads them as always:

- storage other than the local file system: Spark has no connector for it here (no hadoop-aws);
- column mapping: files hold physical names (and field ids);
- deletion vectors on a candidate file: its deleted rows would have to be dropped ("Deletion Vectors");
- row tracking: rows need their ``row_id`` and ``row_commit_version``;
- a schema evolved by the operation, or a column whose type was widened ("Type Widening"): the files hold
  older types;
- a partition column among the columns: its values live in the log, not in the files;
- types other than plain numbers, strings, booleans, dates and binaries (timestamps have legacy encodings);
- file paths with characters Spark's URIs would spell differently from the log.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import TYPE_CHECKING

import pyarrow as pa

from airflow_provider_delta.log.schema.schema import TYPE_CHANGES, decimal_params

from .schema import spark_schema_of

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from .target import Target

NATIVE_READS = True  # tests switch it off to compare with the mapInArrow path on the same data
_TYPES = frozenset(("long", "integer", "short", "byte", "double", "float", "boolean", "string", "date",
                    "binary"))  # fmt: skip
_PLAIN_PATH = re.compile(r"[A-Za-z0-9._/=-]+")
_LOCAL = ("file", "local")


def native_read_blocker(target: Target, files: pa.Table, columns: Sequence[str]) -> str | None:
    """Why Spark's Parquet reader cannot read ``columns`` of ``files`` as the table means them, or None."""
    md = target.metadata
    if not NATIVE_READS:
        return "native reads are switched off (native_read.NATIVE_READS)"
    if files.num_rows == 0:
        return "no files"
    if target.table.store.protocol not in _LOCAL:
        return f"storage {target.table.store.protocol!r}"
    if target.configuration.column_mapping_mode != "none":
        return "column mapping"
    if target.kept:
        return "row tracking"
    if target.evolved:
        return "an evolved schema"
    if files.column("deletionVector").null_count != files.num_rows:
        return "deletion vectors"
    partitions = {c.lower() for c in md.partition_columns}
    by_name = {f["name"]: f for f in md.schema["fields"]}
    for name in columns:
        field = by_name[name]
        if name.lower() in partitions:
            return f"partition column {name!r}"
        kind = field["type"]
        if not (isinstance(kind, str) and (kind in _TYPES or decimal_params(kind))):
            return f"column {name!r} of type {kind}"
        if TYPE_CHANGES in (field.get("metadata") or {}):
            return f"column {name!r} was widened"
    if not all(_PLAIN_PATH.fullmatch(p) for p in files.column("path").to_pylist()):
        return "file paths with characters Spark spells differently"
    return None


def native_rows(spark: SparkSession, target: Target, files: pa.Table, columns: Sequence[str], path: str,
                index: str) -> DataFrame:  # fmt: skip
    """``columns`` of the rows of ``files`` with their file (as the log names it) as ``path`` and row index
    as ``index``, read by Spark's Parquet reader (check ``native_read_blocker`` first)."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import StructType

    root = target.table.store.root.rstrip("/")
    fields = spark_schema_of(target.metadata.schema).fields
    wanted = set(columns)
    schema = StructType([f for f in fields if f.name in wanted])
    uris = [f"file://{root}/{p}" for p in files.column("path").to_pylist()]
    prefix = len(f"file:{root}/") + 1
    rows = spark.read.schema(schema).parquet(*uris)
    return rows.select(*[F.col(f"`{c}`") for c in columns],
                       F.expr(f"substring(_metadata.file_path, {prefix})").alias(path),
                       F.col("_metadata.row_index").alias(index))  # fmt: skip
