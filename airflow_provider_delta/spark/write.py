"""Write a Spark DataFrame into a Delta table: executors write Parquet, the driver commits once.

The order matters for exactly-once and for never exposing bad data:

1. read the latest snapshot; if it already holds ``app_id`` at ``app_version`` or later, stop: nothing is
   written and nothing committed ("Transaction Identifiers");
2. match the DataFrame against the table's schema (enforcement, or ``merge_schema``);
3. count rows breaking invariants, CHECK constraints, generated columns, NOT NULL and ``replace_where``
   with Spark SQL, aborting before any file exists (see ``constraints``);
4. Spark writes the data files and the driver builds their ``add`` rows: Spark's own Parquet writer where
   it can follow the table (see ``native_files``), else executors write them with pyarrow (``data_files``);
5. the driver commits adds, removes (overwrite), the app transaction and any metadata change as one
   version through the core, which retries past compatible concurrent commits.

A failure before step 5 leaves at most unreferenced files, which VACUUM removes.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.parquet as pq

from airflow_provider_delta.log import AddFile, CommitResult, DeltaTable
from airflow_provider_delta.log.base.errors import SchemaMismatchError, TableNotFoundError
from airflow_provider_delta.log.features.identity import IdentityColumn, high_water_marks
from airflow_provider_delta.log.schema.physical_columns import strip_type
from airflow_provider_delta.log.writes.write_plan import WritePlan
from airflow_provider_delta.log.writes.write_plan import plan_write as plan_table_write
from airflow_provider_delta.log.writes.write_rows import commit_write

from .constraints import check, generated_columns
from .data_files import ADD_ROW, WriteSpec, write_files
from .merge_structs import conform, is_nested
from .native_files import native_write_blocker, write_native
from .schema import delta_schema_of, spark_schema_of

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from airflow_provider_delta.log import Snapshot

log = logging.getLogger(__name__)
MODES = ("append", "overwrite")
_ADD_ROW_DDL = (
    "path string, size long, partitionValues map<string,string>, modificationTime long, stats string"
)


def write(
    df: DataFrame,
    table_uri: str,
    mode: str = "append",
    partition_by: list[str] | None = None,
    replace_where: str | None = None,
    app_id: str | None = None,
    app_version: int | None = None,
    storage_options: dict[str, Any] | None = None,
    merge_schema: bool = False,
    *,
    configuration: dict[str, str] | None = None,
) -> CommitResult:
    """Write ``df`` to the table at ``table_uri`` as one commit; create the table on the first write.

    :param mode: ``append``, or ``overwrite`` to replace every live file (or, with ``replace_where``, the
        files whose partition values match that SQL predicate; every written row must match it too).
    :param partition_by: partition columns of a new table; must equal the table's for an existing one.
    :param app_id: with ``app_version``, makes the write exactly-once: when the table already holds
        ``app_id`` at ``app_version`` or later nothing runs and ``already_committed`` is returned.
    :param storage_options: fsspec options for the table's storage, shipped to executors (never logged).
    :param merge_schema: add the DataFrame's new columns to the table (nullable) in the same commit.
    :param configuration: table properties, only when this write creates the table.

    When the table has rules (or ``replace_where`` is given) the DataFrame is evaluated twice, once to
    count violations and once to write: cache it first if its source is not deterministic.
    """
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, not {mode!r}")
    if replace_where is not None and mode != "overwrite":
        raise ValueError("replace_where needs mode='overwrite'")
    if (app_id is None) != (app_version is None):
        raise ValueError("pass app_id and app_version together")
    table = DeltaTable(table_uri, storage_options)
    snap = _latest(table)
    if snap is not None and app_id is not None and snap.app_transactions.get(app_id, -1) >= int(app_version):
        holder = table.locate_app_transaction(app_id, snap.version)
        log.info("%s already holds app transaction %s version %s (table version %d): nothing written",
                 table_uri, app_id, app_version, holder)  # fmt: skip
        return CommitResult(holder, already_committed=True, attempts=0)
    overwrite = mode == "overwrite"
    rows, plan = plan_write(df, snap, partition_by, merge_schema, configuration, overwrite=overwrite,
                            replace_where=replace_where)  # fmt: skip
    check(rows, list(plan.rules))
    removes: list[AddFile] = []
    if mode == "overwrite" and snap is not None:
        removes = files_to_replace(df.sparkSession, snap, replace_where)
    adds = write_table_files(rows, plan, table, storage_options or {})
    generated = list(plan.identity) if snap is not None else []
    marks = high_water_marks(generated, adds, lambda add: file_footer(table, add)) if generated else {}
    return commit_write(table, snap, plan, adds, removes, mode=mode, replace_where=replace_where,
                        app_id=app_id, app_version=app_version, identity_marks=marks)  # fmt: skip


def file_footer(table: DeltaTable, add: AddFile) -> pq.FileMetaData:
    """The Parquet footer of a file the table holds (an ``add`` written just now)."""
    with table.store.open_input_file(table.store.table_file(add.path)) as fh:
        return pq.read_metadata(fh)


def _latest(table: DeltaTable) -> Snapshot | None:
    try:
        return table.snapshot()
    except TableNotFoundError:
        return None


# -- planning -----------------------------------------------------------------------------------------
def plan_write(
    df: DataFrame,
    snap: Snapshot | None,
    partition_by: list[str] | None,
    merge_schema: bool,
    configuration: dict[str, str] | None,
    *,
    overwrite: bool = False,
    replace_where: str | None = None,
) -> tuple[DataFrame, WritePlan]:
    """The core's plan of this write (``log.writes.write_plan``: schema, features, rules, file layout),
    checked before any job runs, and the DataFrame as the table's rows: columns in table order, identity
    and generated columns computed, missing ones null."""
    if snap is not None and configuration:
        raise ValueError("configuration only applies when the write creates the table")
    incoming = delta_schema_of(df.schema) if snap is None else df.schema.jsonValue()
    plan = plan_table_write(
        snap, incoming, partition_by=partition_by, schema_mode="merge" if merge_schema else None,
        overwrite=overwrite, configuration=configuration, replace_where=replace_where,
        what="the DataFrame", option="merge_schema=True",
    )  # fmt: skip
    if snap is None:
        return df, plan
    names = [plan.targets[c] for c in df.columns]
    return _align(df.toDF(*names), plan.schema, set(names), list(plan.identity)), plan


def _align(df: DataFrame, schema: dict, present: set[str], identity: list[IdentityColumn]) -> DataFrame:
    """Columns in table order: given ones as they are, generated and identity ones computed, the rest as
    nulls."""
    from pyspark.sql import functions as F

    from .constraints import quote

    spark_types = {f.name: f.dataType for f in spark_schema_of(schema).fields}
    generated = generated_columns(schema)
    identities = {c.name: c for c in identity}
    partitions = df.rdd.getNumPartitions() if identity else 0
    columns, missing = [], []
    given = {f.name: f.dataType for f in df.schema.fields}
    for field in schema["fields"]:
        name = field["name"]
        if name in present:
            column = F.col(quote(name))
            if is_nested(spark_types[name]) and _differs(given[name], spark_types[name]):
                # Structs by field name (Spark casts them by position), as a MERGE insert assigns them:
                # the schema check let through only fields the table has, those missing become NULL.
                column = conform(column, given[name], spark_types[name], None, True, f"column {name!r}")
            elif _differs(given[name], spark_types[name]):
                # A type that widens losslessly to the table's (the schema check let nothing else through).
                column = column.cast(spark_types[name])
            columns.append(column.alias(name))
        elif name in identities:
            columns.append(F.expr(identity_values_sql(identities[name], partitions)).alias(name))
        elif name in generated:
            columns.append(F.expr(generated[name]).cast(spark_types[name]).alias(name))
        elif not field.get("nullable", True):
            missing.append(name)
        else:
            columns.append(F.lit(None).cast(spark_types[name]).alias(name))
    if missing:
        raise SchemaMismatchError(f"non-nullable column(s) {missing} are missing from the DataFrame")
    return df.select(*columns)


def _differs(given: Any, target: Any) -> bool:
    """Whether two Spark types differ other than in nullability."""
    return strip_type(given.jsonValue(), nullable=True) != strip_type(target.jsonValue(), nullable=True)


def identity_values_sql(column: IdentityColumn, partitions: int) -> str:
    """Identity values as Delta Spark generates them ("Identity Columns"): row ``i`` of partition ``p``
    of ``P`` gets ``next + step * (p + P * i)``, so partitions interleave and no value repeats. The
    position in the partition comes from ``monotonically_increasing_id`` (partition id in the upper 31
    bits). A plan whose partitions turn out more than ``P`` at run time fails rather than repeat values;
    an overflow fails the job under ANSI arithmetic (Spark's default)."""
    pid = "CAST(spark_partition_id() AS BIGINT)"
    index = f"(monotonically_increasing_id() - shiftleft({pid}, 33))"
    value = f"({column.next_value}L + ({column.step}L * ({pid} + {partitions}L * {index})))"
    message = f"identity column {column.name}: more partitions than the {partitions} planned"
    return f"CASE WHEN {pid} >= {partitions} THEN raise_error('{message}') ELSE {value} END"


# -- overwrite ----------------------------------------------------------------------------------------
def files_to_replace(spark: SparkSession, snap: Snapshot, replace_where: str | None) -> list[AddFile]:
    """The live files an overwrite removes: all, or those whose partition values satisfy the predicate
    (evaluated by Spark over the snapshot's typed partition values)."""
    files = snap.files
    if replace_where is not None:
        if not snap.partition_columns:
            raise ValueError("replace_where needs a partitioned table: it selects files by partition values")
        values = snap.partition_values().append_column("__file", pa.array(range(files.num_rows), pa.int64()))
        try:
            hits = spark.createDataFrame(values).where(replace_where).select("__file").toArrow()
        except Exception as exc:  # AnalysisException: a column that is not a partition column, bad SQL
            raise ValueError(
                f"replace_where {replace_where!r} must be a SQL predicate over the partition columns "
                f"{snap.partition_columns}: {exc}"
            ) from exc
        files = files.take(hits.column("__file"))
    return AddFile.from_table(files)


# -- writing ------------------------------------------------------------------------------------------
def write_table_files(
    rows: DataFrame, plan: WritePlan, table: DeltaTable, storage_options: dict[str, Any]
) -> list[AddFile]:
    """Spark's own Parquet writer where it can write the table's files (cheaper: rows never leave the JVM),
    else the ``mapInArrow`` writer; see ``native_write_blocker`` for when and why."""
    blocker = native_write_blocker(plan, table.store)
    if blocker is None:
        return write_native(rows, plan, table.store)
    log.info("writing %s with pyarrow through mapInArrow: %s", table.uri, blocker)
    return write_data(rows, plan, table.uri, storage_options)


def write_data(
    rows: DataFrame, plan: WritePlan, table_uri: str, storage_options: dict[str, Any]
) -> list[AddFile]:
    """Run the Spark job that writes the data files with the plan's file layout; the ``add`` actions."""
    spec = WriteSpec(table_uri, plan.layout, storage_options)

    def write_task(batches):
        return write_files(batches, spec)

    added = rows.mapInArrow(write_task, _ADD_ROW_DDL).toArrow().cast(ADD_ROW).to_pylist()
    return [
        AddFile(
            path=r["path"],
            size=r["size"],
            partition_values=dict(r["partitionValues"]),
            modification_time=r["modificationTime"],
            data_change=True,
            stats=r["stats"],
            tags=plan.layout.file_tags,  # IcebergCompatV2: the version the files were written under
        )
        for r in added
    ]
