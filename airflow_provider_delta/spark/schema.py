"""Schemas between Spark, Delta and the Parquet files: enforcement on write, column mapping both ways.

Delta's schema serialization is Spark's own ``StructType`` JSON ("Schema Serialization Format"), so a
DataFrame's schema becomes a Delta schema by ``jsonValue()`` and back by ``StructType.fromJson``. Data
files hold physical names (and, in ``id`` mode, Parquet field ids) under column mapping ("Column
Mapping"); the core's ``physical_columns`` renames them on the way out and resolves them on the way in.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from airflow_provider_delta.log.base.errors import SchemaMismatchError
from airflow_provider_delta.log.features.creation import assign_column_mapping
from airflow_provider_delta.log.schema.physical_columns import (
    find_field,
    resolve_column,
    strip_type,
    to_physical,
)
from airflow_provider_delta.log.schema.schema import delta_type_to_arrow
from airflow_provider_delta.log.schema.schema_enforcement import match_schema

__all__ = ["SchemaMismatchError", "assign_column_mapping", "find_field", "resolve_column", "to_physical"]

if TYPE_CHECKING:
    from pyspark.sql.types import StructType


# -- Spark <-> Delta -----------------------------------------------------------------------------------
def delta_schema_of(spark_schema: StructType) -> dict:
    """The Delta schema of a new table from a DataFrame: all nullable, as Delta Spark creates tables."""
    schema = strip_type(spark_schema.jsonValue(), nullable=True)
    for field in schema["fields"]:
        try:
            delta_type_to_arrow(field["type"])
        except ValueError as exc:
            raise SchemaMismatchError(f"column {field['name']!r}: {exc}") from exc
    return schema


def spark_schema_of(delta_schema: dict) -> StructType:
    """The Spark schema (logical names, no column metadata) of a Delta schema."""
    from pyspark.sql.types import StructType

    return StructType.fromJson(strip_type(delta_schema, nullable=None))


# -- enforcement (write) ----------------------------------------------------------------------------------
def enforce(table_schema: dict, df_schema: StructType, *, merge: bool) -> tuple[list[str], dict | None]:
    """Match a DataFrame against the table (``log.schema_enforcement``, the Arrow writer's rules too): the
    table column each DataFrame column writes, in DataFrame order, and the merged schema when ``merge`` adds
    columns (else ``None``). Table columns missing from the DataFrame are written as nulls by the caller."""
    return match_schema(table_schema, df_schema.jsonValue(), merge=merge, what="the DataFrame")
