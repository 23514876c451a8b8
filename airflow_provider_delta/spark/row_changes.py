"""What DELETE, UPDATE and MERGE on Spark share: the target, the files a condition can touch, the rows read
with their place in their file, the rewrite of files, and the one commit through the core.

As Delta Spark's commands (``DeleteCommand``, ``UpdateCommand``, ``MergeIntoCommand``): the core prunes the
live files by partition values and statistics for the condition (``log.scan``'s skipping); executors read
the remaining files with ``_metadata.file_path`` and ``_metadata.row_index`` (the row's position in its
Parquet file, what a deletion vector marks); then either

- deletion vectors, on tables with ``delta.enableDeletionVectors=true``: the changed rows are marked deleted
  (``Transaction.delete_rows``) and only new or updated rows are written; or
- copy-on-write: each touched file is rewritten without (or with new values of) its changed rows, and
  removed.

The driver commits once: removes, adds, vectors, ``cdc`` files when the change data feed is on, the app
transaction, Delta Spark's operation name, parameters and metrics, and the read set Delta Spark's conflict
checker uses (the condition as read predicate, the files it scanned). Bad input (an unknown column, a
condition that is not SQL) is refused by name before any file is written; files written for a commit that
then fails are deleted.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable, Mapping
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc

from airflow_provider_delta.log import AddFile
from airflow_provider_delta.log.base.errors import InvalidConditionError
from airflow_provider_delta.log.commits.change_data import CHANGE_TYPE
from airflow_provider_delta.log.expressions.expressions import ColumnNotFoundError, Expr
from airflow_provider_delta.log.expressions.sql_parser import UnsupportedExpressionError
from airflow_provider_delta.log.row_changes.row_change_commit import (  # noqa: F401 (the Spark engine's API)
    INDEX,
    PATH,
    Changes,
    commit,
    num_records,
    row_indexes,
)
from airflow_provider_delta.log.row_changes.target import (  # noqa: F401 (the Spark engine's API)
    RowChangeResult,
    already_committed,
)
from airflow_provider_delta.log.scans.scan import Scan
from airflow_provider_delta.log.schema.partition_values import typed_partition_values
from airflow_provider_delta.log.writes.write_plan import rewrite_plan

from .constraints import check, generated_columns, quote
from .merge_structs import conform
from .native_read import native_read_blocker, native_rows
from .read import read_files
from .schema import spark_schema_of
from .target import Target
from .write import write_table_files

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

    from airflow_provider_delta.log import Snapshot

ROW_ID = "__delta_row_id"  # on tables that track rows: the row's id and commit version ("Row Tracking")
ROW_VERSION = "__delta_row_commit_version"
_IDENTIFIER = re.compile(r"`((?:[^`]|``)+)`|([A-Za-z_][A-Za-z0-9_]*)")  # SQL identifiers, quoted or bare


# -- conditions -----------------------------------------------------------------------------------------
def condition_text(condition: str | Column | None) -> str | None:
    """The SQL of a condition for commitInfo and file skipping: the text given, or a Column's rendering."""
    if condition is None or isinstance(condition, str):
        return condition
    return str(condition).removeprefix("Column<'").removesuffix("'>")


def as_column(expression: str | Column, what: str) -> Column:
    from pyspark.errors import PySparkException
    from pyspark.sql import functions as F

    if not isinstance(expression, str):
        return expression
    try:
        return F.expr(expression)
    except PySparkException as exc:  # ParseException: not SQL
        raise InvalidConditionError(f"{what} {expression!r} is not a Spark SQL expression: {_first(exc)}",
                                    expression=expression) from None  # fmt: skip


def analysed(frame: DataFrame, expressions: Mapping[str, str | Column], where: str) -> dict[str, Column]:
    """Each expression as a Column that Spark resolved against ``frame`` (analysis runs now, on the
    driver): an unknown column is :class:`ColumnNotFoundError`, anything else Spark refuses
    :class:`InvalidConditionError`, both naming the expression, before any job runs."""
    from pyspark.errors import PySparkException

    out = {}
    for what, expression in expressions.items():
        column = as_column(expression, what)
        try:
            frame.select(column).schema  # noqa: B018 (forces analysis)
        except PySparkException as exc:
            text = condition_text(expression) or ""
            kind = (exc.getCondition() or "") if hasattr(exc, "getCondition") else ""
            if kind.startswith("UNRESOLVED_COLUMN") or "UNRESOLVED_COLUMN" in str(exc):
                message = f"{what} {text!r} names a column that {where} lacks: {_first(exc)}"
                raise ColumnNotFoundError(message) from None
            raise InvalidConditionError(f"{what} {text!r} cannot be evaluated on {where}: {_first(exc)}",
                                        expression=text) from None  # fmt: skip
        out[what] = column
    return out


def _first(exc: BaseException) -> str:
    return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__


# -- files and rows -------------------------------------------------------------------------------------
def candidate_files(snap: Snapshot, condition: str | None) -> tuple[pa.Table, Expr | None]:
    """The live files that may hold rows matching ``condition``, pruned by partition values and statistics
    (``log.skipping``); every file when there is none or the core's parser does not support it (Spark
    still evaluates it on every row). The parsed condition comes second."""
    if condition is None:
        return snap.files, None
    try:
        scan = Scan(snap, filter=condition)
    except UnsupportedExpressionError:
        return snap.files, None
    return scan.files, scan.filter


def referenced(columns: Iterable[str], texts: Iterable[str | Column | None]) -> list[str] | None:
    """The ``columns`` that SQL ``texts`` name (None when one is a Column, whose names we cannot see): a
    word that only looks like a column names one column too many, never too few."""
    texts = [t for t in texts if t is not None]
    if any(not isinstance(t, str) for t in texts):
        return None
    words = {(quoted.replace("``", "`") or bare).lower() for t in texts
             for quoted, bare in _IDENTIFIER.findall(t)}  # fmt: skip
    return [c for c in columns if c.lower() in words]


def only_partitions(snap: Snapshot, expr: Expr | None) -> bool:
    """Whether the condition reads partition columns only: skipping then selects exactly the files whose
    every row matches, so they are removed whole without reading them (Delta Spark's metadata-only
    delete)."""
    if expr is None:
        return False
    partitions = {c.lower() for c in snap.partition_columns}
    names = [path[0].lower() for path in expr.columns()]
    return bool(names) and all(n in partitions for n in names)


def files_where(spark: SparkSession, target: Target, files: pa.Table, condition: Column) -> pa.Table:
    """The files whose partition values satisfy a condition on partition columns only, evaluated by Spark
    on the typed values (so with Spark's semantics, not skipping's over-approximation): the files a
    metadata-only delete removes whole."""
    from pyspark.sql import functions as F

    if files.num_rows == 0:
        return files
    mode = target.snap.table_configuration.column_mapping_mode
    values = typed_partition_values(target.snap.metadata, files, mode)
    values = values.append_column("__file", pa.array(range(files.num_rows), pa.int64()))
    hits = spark.createDataFrame(values).where(F.coalesce(condition, F.lit(False))).select("__file").toArrow()
    return files.take(hits.column("__file"))


def target_rows(spark: SparkSession, target: Target, files: pa.Table, columns: Collection[str] | None = None
                ) -> DataFrame:  # fmt: skip
    """The rows of ``files`` with their file (``PATH``) and row index (``INDEX``) as plain columns, and on
    tables that track rows their ``ROW_ID`` and ``ROW_VERSION``. With ``columns`` only those table columns
    are read; the others are NULL (for a plan that needs only some, e.g. a MERGE's join). Spark's Parquet
    reader reads them where ``native_read`` allows it, ours elsewhere."""
    from pyspark.sql import functions as F

    tracked = ("row_id", "row_commit_version") if target.kept else ()
    old = {f["name"].lower() for f in target.snap.metadata.schema["fields"]}
    read = [c for c in columns if c.lower() in old] if columns else None
    read = read or None  # no column at all: read them all (a plan of only file and row index is untested)
    wanted = read or [f["name"] for f in target.snap.metadata.schema["fields"]]
    if native_read_blocker(target, files, wanted) is None:
        rows = native_rows(spark, target, files, wanted, PATH, INDEX)
        return rows.select(*_evolved_columns(target, set(wanted)), PATH, INDEX)
    rows = read_files(spark, target.snap, files, target.storage_options, ("file_path", "row_index", *tracked),
                      read)  # fmt: skip
    place = [F.col("_metadata.file_path").alias(PATH), F.col("_metadata.row_index").alias(INDEX)]
    if tracked:
        place += [F.col("_metadata.row_id").alias(ROW_ID),
                  F.col("_metadata.row_commit_version").alias(ROW_VERSION)]  # fmt: skip
    return rows.select(*_evolved_columns(target, None if read is None else set(read)), *place)


def _evolved_columns(target: Target, read: set[str] | None) -> list[Column]:
    """The table's columns as the operation writes them: under an evolved schema, columns the files lack
    read as NULL and widened ones are cast to their new type ("Type Widening": readers widen too); columns
    not ``read`` are NULL."""
    from pyspark.sql import functions as F

    if not target.evolved and read is None:
        return [F.col(quote(c)) for c in target.columns]
    old = {f["name"]: f["type"] for f in target.snap.metadata.schema["fields"]}
    types = {f.name: f.dataType for f in spark_schema_of(target.metadata.schema).fields}
    before = {f.name: f.dataType for f in spark_schema_of(target.snap.metadata.schema).fields}
    out = []
    for f in target.metadata.schema["fields"]:
        name = f["name"]
        if name not in old or (read is not None and name not in read):
            out.append(F.lit(None).cast(types[name]).alias(name))
        elif old[name] != f["type"]:  # widened, or a struct that gained fields (NULL in these rows)
            value = conform(F.col(quote(name)), before[name], types[name], None, True, target.where)
            out.append(value.alias(name))
        else:
            out.append(F.col(quote(name)))
    return out


def tracking(target: Target, row_id: Column | None, version: Column | None) -> list[Column]:
    """On tables that track rows, the ``ROW_ID`` and ``ROW_VERSION`` columns of rows to write: a row
    copied unchanged keeps both, an updated row its id with no version (so it takes the new file's
    ``defaultRowCommitVersion``, the commit's), an inserted row neither (a fresh id from the new file's
    ``baseRowId``), as Delta Spark writes them ("Row Tracking"). Nothing on other tables."""
    from pyspark.sql import functions as F

    if not target.kept:
        return []
    none = F.lit(None).cast("long")
    return [(none if row_id is None else row_id).alias(ROW_ID),
            (none if version is None else version).alias(ROW_VERSION)]  # fmt: skip


def regenerated(rows: DataFrame, target: Target, where: Mapping[str, Column | None]) -> DataFrame:
    """``rows`` (the table's columns holding their new values) with the generated columns ``where`` names
    computed again from their generation expressions over those new values, as Delta Spark's UPDATE and
    MERGE do for a generated column the statement does not set ("Generated Columns"); a value a statement
    sets is kept, and checked by the table's rules when written. ``where`` maps a column to the rows to
    compute it on (None: all); elsewhere it keeps the value it has."""
    from pyspark.sql import functions as F

    if not where:
        return rows
    expressions = generated_columns(target.metadata.schema)
    types = {f.name: f.dataType for f in spark_schema_of(target.metadata.schema).fields}
    values = {}
    for name, only in where.items():
        value = F.expr(expressions[name]).cast(types[name])
        values[name] = value if only is None else F.when(only, value).otherwise(F.col(quote(name)))
    return rows.withColumns(values)


def not_set(target: Target, given: Collection[str]) -> list[str]:
    """The table's generated columns that ``given`` (column names, any case) does not set."""
    names = {name.lower() for name in given}
    return [g for g in generated_columns(target.metadata.schema) if g.lower() not in names]


def files_named(files: pa.Table, paths: Iterable[str]) -> pa.Table:
    return files.filter(pc.is_in(files.column("path"), pa.array(sorted(set(paths)), pa.string())))


def write_rows(target: Target, rows: DataFrame) -> list[AddFile]:
    """Write rows (the table's columns, logical names, table order; then, on tables that track rows,
    ``tracking``'s two columns) as new data files, after checking the table's rules (invariants, CHECK
    constraints, generated columns, NOT NULL) on every row. Row ids and commit versions go into the
    table's materialized columns; a null there reads as the new file's fresh id and version."""
    from pyspark.sql import functions as F

    kept = target.kept or ()
    plan = rewrite_plan(target.configuration, target.where, hidden_columns=kept)
    check(rows, list(plan.rules))
    if kept:
        rows = rows.select(*[F.col(quote(c)) for c in target.columns], F.col(ROW_ID).alias(kept[0]),
                           F.col(ROW_VERSION).alias(kept[1]))  # fmt: skip
    return write_table_files(rows, plan, target.table, target.storage_options)


def change_rows(target: Target, rows: DataFrame, change_type: str | Column) -> pa.Table:
    """Rows as change data (the table's columns and ``_change_type``), collected for the core to write."""
    from pyspark.sql import functions as F

    kind = F.lit(change_type) if isinstance(change_type, str) else change_type
    return rows.select(*[F.col(quote(c)) for c in target.columns], kind.alias(CHANGE_TYPE)).toArrow()
