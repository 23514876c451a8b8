"""Schemas between Spark, Delta and the Parquet files: enforcement on write, column mapping both ways.

Delta's schema serialization is Spark's own ``StructType`` JSON ("Schema Serialization Format"), so a
DataFrame's schema becomes a Delta schema by ``jsonValue()`` and back by ``StructType.fromJson``. Data
files hold physical names (and, in ``id`` mode, Parquet field ids) under column mapping ("Column
Mapping"); the Arrow helpers here rename columns on the way out and resolve them on the way in.
"""

from __future__ import annotations

import copy
import json
import uuid
from typing import TYPE_CHECKING, Any

from airflow_provider_delta.log.errors import SchemaMismatchError
from airflow_provider_delta.log.physical_columns import find_field, resolve_column, strip_type, to_physical
from airflow_provider_delta.log.schema import CM_ID, CM_PHYSICAL_NAME, delta_type_to_arrow

__all__ = ["SchemaMismatchError", "find_field", "resolve_column", "to_physical"]

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


def _type_text(t: Any) -> str:
    return t if isinstance(t, str) else json.dumps(strip_type(t, nullable=True), separators=(",", ":"))


# -- enforcement (write) ----------------------------------------------------------------------------------
def enforce(table_schema: dict, df_schema: StructType, *, merge: bool) -> tuple[list[str], dict | None]:
    """Match a DataFrame against the table: the table column each DataFrame column writes, in DataFrame
    order, and the merged schema when ``merge`` adds columns (else ``None``).

    Names match case-insensitively, as Delta Spark resolves them; types must be equal (nullability
    aside: non-null table columns are enforced on the rows, see ``constraints``). Table columns missing
    from the DataFrame are written as nulls by the caller.
    """
    by_lower = {f["name"].lower(): f for f in table_schema["fields"]}
    incoming = strip_type(df_schema.jsonValue(), nullable=True)["fields"]
    targets, new_fields, extra, mismatched = [], [], [], []
    for field in incoming:
        known = by_lower.get(field["name"].lower())
        if known is None:
            (new_fields if merge else extra).append(field)
            targets.append(field["name"])
            continue
        if strip_type(known["type"], nullable=True) != field["type"]:
            mismatched.append(
                f"{known['name']!r} (table: {_type_text(known['type'])}, "
                f"DataFrame: {_type_text(field['type'])})"
            )
        targets.append(known["name"])
    problems = []
    if extra:
        names = ", ".join(repr(f["name"]) for f in extra)
        problems.append(f"column(s) {names} are not in the table (pass merge_schema=True to add them)")
    if mismatched:
        problems.append("column type(s) differ: " + "; ".join(mismatched))
    if len({t.lower() for t in targets}) != len(targets):
        problems.append(f"the DataFrame has duplicate columns {targets}")
    if problems:
        raise SchemaMismatchError("the DataFrame does not match the table schema: " + " and ".join(problems))
    if not new_fields:
        return targets, None
    merged = copy.deepcopy(table_schema)
    merged["fields"].extend(new_fields)
    return targets, merged


def assign_column_mapping(schema: dict, configuration: dict[str, str]) -> dict[str, str]:
    """Give fields without one an id and a physical name (in place); returns the configuration with the
    new ``delta.columnMapping.maxColumnId`` ("Writer Requirements for Column Mapping")."""
    next_id = int(configuration.get("delta.columnMapping.maxColumnId", "0"))

    def visit(fields: list[dict]) -> None:
        nonlocal next_id
        for f in fields:
            md = f.setdefault("metadata", {})
            if CM_ID not in md:
                next_id += 1
                md[CM_ID] = next_id
                md[CM_PHYSICAL_NAME] = f"col-{uuid.uuid4()}"
            t = f["type"]
            while isinstance(t, dict) and t["type"] in ("array", "map"):
                t = t.get("elementType") or t.get("valueType")
            if isinstance(t, dict) and t["type"] == "struct":
                visit(t["fields"])

    visit(schema["fields"])
    return {**configuration, "delta.columnMapping.maxColumnId": str(next_id)}
