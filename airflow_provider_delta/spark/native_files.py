"""Data files written by Spark's own Parquet writer; their ``add`` actions built from the footers.

Moving every row from the JVM to Python workers (``mapInArrow``, see ``data_files``) costs about a fifth
on top of Spark's own Parquet write; letting Spark write the files and reading only their footers on the
driver costs about one percent. Spark's output committer needs a directory it owns, so Spark writes into a
fresh hidden staging folder inside the table root (``_delta_spark_staging/<uuid>``: hidden, so readers,
VACUUM and Delta Spark never look there); the driver then builds each ``add`` from the file's footer
("Per-file Statistics", the same ``file_stats`` as the Python writer), renames the files into their
Hive-style partition folders ("Data Files") and removes the staging folder. The commit follows in
``write``.

A failed job removes the staging folder, so nothing is left behind; a driver that dies mid-write can leave
a hidden staging folder, which nothing reads and which can be deleted by hand.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

import pyarrow.parquet as pq

from airflow_provider_delta.log import AddFile
from airflow_provider_delta.log.schema.file_layout import HIVE_NULL, unescape_path_name
from airflow_provider_delta.log.schema.partition_values import (
    parse_partition_value,
    serialize_partition_value,
)
from airflow_provider_delta.log.schema.schema import decimal_params
from airflow_provider_delta.log.writes.write_plan import WritePlan

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from airflow_provider_delta.log.files.storage import LogStore

STAGING_DIR = "_delta_spark_staging"
NATIVE_WRITES = True  # tests switch it off to compare with the mapInArrow path on the same data
# Session settings for the duration of a write: INT96 timestamps have no reliable statistics and are a
# legacy encoding; the legacy format writes decimals and lists as Spark 1.4 did; LEGACY rebasing would
# shift old dates and timestamps to the Julian calendar, where Delta means the proleptic Gregorian one.
_WRITE_CONF = {
    "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS",
    "spark.sql.parquet.writeLegacyFormat": "false",
    "spark.sql.parquet.datetimeRebaseModeInWrite": "CORRECTED",
}
_LOCAL = ("file", "local")
# Partition values Spark spells in its folder names the way "Partition Value Serialization" reads them.
# Timestamps are not among them: Spark spells those in the session time zone, which the log cannot carry.
_PARTITION_TYPES = frozenset(("string", "long", "integer", "short", "byte", "float", "double", "boolean",
                              "date"))  # fmt: skip
_PRIMITIVES = _PARTITION_TYPES | {"binary", "timestamp"}
_FOOTER_THREADS = 8


def native_write_blocker(plan: WritePlan, store: LogStore) -> str | None:
    """Why Spark's own Parquet writer cannot write this table's files (then ``data_files`` does), or None.

    - storage other than the local file system: the files are renamed out of the staging folder, which
      object stores cannot do cheaply or atomically (s3a's committers are out of scope);
    - column mapping: files must hold physical names and Parquet field ids;
    - partition values materialized in the files (IcebergCompat, ``materializePartitionColumns``): Spark's
      partitioned writer leaves partition columns out of the files;
    - ``timestamp_ntz`` columns: the pyarrow path writes them as Delta specifies (INT64 micros, not
      adjusted to UTC); Spark's writer for them is not checked against Delta readers here;
    - ``variant`` and any other type not listed in ``_PRIMITIVES``: Spark's encoding is not checked;
    - every column a partition column: Spark refuses to write files without columns;
    - partition columns other than ``_PARTITION_TYPES``: their folder names would have to be read back as
      Spark spelled them (timestamps in the session time zone; binary).
    """
    if not NATIVE_WRITES:
        return "native writes are switched off (native_files.NATIVE_WRITES)"
    if store.protocol not in _LOCAL:
        return f"storage {store.protocol!r}: the staging folder is renamed, which needs a local file system"
    if plan.config.column_mapping_mode != "none":
        return "column mapping: files need physical names and Parquet field ids"
    if plan.layout.materialized_partitions:
        return "partition values are materialized in the files, which Spark's partitioned writer leaves out"
    if plan.layout.data_page_version != "1.0":
        return "delta.parquet.format.version 2: Spark's DataPageV2 files are not checked here"
    partitions = {c.lower() for c in plan.partition_columns}
    if all(field["name"].lower() in partitions for field in plan.schema["fields"]):
        return "every column is a partition column: Spark's writer needs a column to put in the files"
    for field in plan.schema["fields"]:
        bad = next(_unsupported_types(field["type"]), None)
        if bad is not None:
            return f"column {field['name']!r} has type {bad}"
        if field["name"].lower() in partitions and not _partition_type_ok(field["type"]):
            return f"partition column {field['name']!r} of type {field['type']}: folder names differ"
    return None


def _unsupported_types(delta_type: Any) -> Iterator[str]:
    if isinstance(delta_type, str):
        if delta_type not in _PRIMITIVES and not decimal_params(delta_type):
            yield delta_type
        return
    kind = delta_type.get("type")
    if kind == "struct":
        for field in delta_type["fields"]:
            yield from _unsupported_types(field["type"])
    elif kind == "array":
        yield from _unsupported_types(delta_type["elementType"])
    elif kind == "map":
        yield from _unsupported_types(delta_type["keyType"])
        yield from _unsupported_types(delta_type["valueType"])
    else:
        yield str(kind)


def _partition_type_ok(delta_type: Any) -> bool:
    if not isinstance(delta_type, str):
        return False
    return delta_type in _PARTITION_TYPES or bool(decimal_params(delta_type))


# -- writing -----------------------------------------------------------------------------------------------
def write_native(rows: DataFrame, plan: WritePlan, store: LogStore) -> list[AddFile]:
    """Let Spark write the data files into a staging folder, then move them into the table; their adds."""
    staging = os.path.join(store.root, STAGING_DIR, uuid.uuid4().hex)
    # The table's codec ("Table Properties": delta.parquet.compression.codec), as Spark names it.
    codec = {"none": "uncompressed", "lz4": "lz4_raw"}.get(plan.layout.compression, plan.layout.compression)
    try:
        with _session_conf(rows.sparkSession, {**_WRITE_CONF, "spark.sql.parquet.compression.codec": codec}):
            writer = rows.write.mode("errorifexists").option(
                "mapreduce.fileoutputcommitter.marksuccessfuljobs", "false"
            )
            if plan.partition_columns:
                writer = writer.partitionBy(*plan.partition_columns)
            # The raw path behind file://, not an escaped URI: Hadoop's Path takes %-escapes literally.
            writer.parquet("file://" + staging)
        files = _staged_files(staging, plan)
        with ThreadPoolExecutor(min(_FOOTER_THREADS, max(1, len(files)))) as pool:
            adds = list(pool.map(lambda f: _add(staging, *f, plan), files))
        kept = [a for a in adds if a is not None]  # Spark writes a file for an empty input; we do not
        for add in kept:
            target = os.path.join(store.root, add.path)
            os.makedirs(os.path.dirname(target), exist_ok=True)
            os.rename(os.path.join(staging, add.path), target)  # same file system: atomic, no copy
    finally:
        shutil.rmtree(staging, ignore_errors=True)
        with contextlib.suppress(OSError):  # another writer's staging folder may still be there
            os.rmdir(os.path.dirname(staging))
    return kept


@contextlib.contextmanager
def _session_conf(spark: SparkSession, settings: dict[str, str]) -> Iterator[None]:
    """Session settings for one write, restored afterwards (they apply to the whole session meanwhile)."""
    previous = {key: spark.conf.get(key, None) for key in settings}
    changed = {key: value for key, value in settings.items() if previous[key] != value}
    for key, value in changed.items():
        spark.conf.set(key, value)
    try:
        yield
    finally:
        for key in changed:
            if previous[key] is None:
                spark.conf.unset(key)
            else:
                spark.conf.set(key, previous[key])


def _staged_files(staging: str, plan: WritePlan) -> list[tuple[str, dict[str, str | None]]]:
    """The data files Spark wrote (relative paths) with their partition values; Spark's hidden files
    (``.crc`` checksums, ``_SUCCESS``) are not data and go with the staging folder."""
    by_name = {f["name"].lower(): f for f in plan.schema["fields"]}
    expected = [c.lower() for c in plan.partition_columns]
    found = []
    for folder, dirs, names in os.walk(staging):
        dirs[:] = [d for d in dirs if not d.startswith(("_", "."))]
        rel_dir = os.path.relpath(folder, staging)
        parts = [] if rel_dir == "." else rel_dir.split(os.sep)
        data = [n for n in names if not n.startswith(("_", "."))]
        if not data:
            continue
        if len(parts) != len(expected):
            raise RuntimeError(f"Spark wrote {data[0]!r} into {rel_dir!r}, not into partition folders")
        values: dict[str, str | None] = {}
        for part, column in zip(parts, expected, strict=True):
            key, _, raw = part.partition("=")
            field = by_name[column]
            if unescape_path_name(key).lower() != column:
                raise RuntimeError(f"Spark wrote folder {part!r} where partition column {column!r} belongs")
            value = unescape_path_name(raw)
            typed = None if value == HIVE_NULL else parse_partition_value(value, field["type"])
            values[field["name"]] = serialize_partition_value(typed, field["type"])
        prefix = "" if not parts else "/".join(parts) + "/"
        found += [(prefix + n, values) for n in sorted(data)]
    return found


def _add(staging: str, rel_path: str, values: dict[str, str | None], plan: WritePlan) -> AddFile | None:
    """The ``add`` of one staged file from its footer and ``stat``; None for a file without rows."""
    full = os.path.join(staging, rel_path)
    footer = pq.read_metadata(full)
    if footer.num_rows == 0:
        return None
    info = os.stat(full)
    return AddFile(
        path=rel_path,
        size=info.st_size,
        partition_values=values,
        modification_time=info.st_mtime_ns // 1_000_000,
        data_change=True,
        stats=plan.layout.stats(footer),
    )
