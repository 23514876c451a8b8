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

import pyarrow as pa
import pyarrow.compute as pc

from airflow_provider_delta.log.errors import DeltaError
from airflow_provider_delta.log.schema import (
    CM_ID,
    CM_PHYSICAL_NAME,
    PARQUET_FIELD_ID,
    delta_type_to_arrow,
)
from airflow_provider_delta.log.variant import VARIANT, file_variant, variant_column

if TYPE_CHECKING:
    from pyspark.sql.types import StructType


class SchemaMismatchError(DeltaError):
    """A DataFrame does not fit the table's schema; the message names the mismatching columns."""


# -- Spark <-> Delta -----------------------------------------------------------------------------------
def _strip(t: Any, *, nullable: bool | None) -> Any:
    """A Delta type without field metadata; every field nullable when ``nullable`` is True."""
    if not isinstance(t, dict):
        return t
    kind = t["type"]
    if kind == "struct":
        return {"type": "struct", "fields": [_strip_field(f, nullable=nullable) for f in t["fields"]]}
    if kind == "array":
        out = {**t, "elementType": _strip(t["elementType"], nullable=nullable)}
        return {**out, "containsNull": True} if nullable else out
    if kind == "map":
        out = {**t, "keyType": _strip(t["keyType"], nullable=nullable),
               "valueType": _strip(t["valueType"], nullable=nullable)}  # fmt: skip
        return {**out, "valueContainsNull": True} if nullable else out
    return t


def _strip_field(f: dict, *, nullable: bool | None) -> dict:
    return {"name": f["name"], "type": _strip(f["type"], nullable=nullable),
            "nullable": True if nullable else f.get("nullable", True), "metadata": {}}  # fmt: skip


def delta_schema_of(spark_schema: StructType) -> dict:
    """The Delta schema of a new table from a DataFrame: all nullable, as Delta Spark creates tables."""
    schema = _strip(spark_schema.jsonValue(), nullable=True)
    for field in schema["fields"]:
        try:
            delta_type_to_arrow(field["type"])
        except ValueError as exc:
            raise SchemaMismatchError(f"column {field['name']!r}: {exc}") from exc
    return schema


def spark_schema_of(delta_schema: dict) -> StructType:
    """The Spark schema (logical names, no column metadata) of a Delta schema."""
    from pyspark.sql.types import StructType

    return StructType.fromJson(_strip(delta_schema, nullable=None))


def _type_text(t: Any) -> str:
    return t if isinstance(t, str) else json.dumps(_strip(t, nullable=True), separators=(",", ":"))


# -- enforcement (write) ----------------------------------------------------------------------------------
def enforce(table_schema: dict, df_schema: StructType, *, merge: bool) -> tuple[list[str], dict | None]:
    """Match a DataFrame against the table: the table column each DataFrame column writes, in DataFrame
    order, and the merged schema when ``merge`` adds columns (else ``None``).

    Names match case-insensitively, as Delta Spark resolves them; types must be equal (nullability
    aside: non-null table columns are enforced on the rows, see ``constraints``). Table columns missing
    from the DataFrame are written as nulls by the caller.
    """
    by_lower = {f["name"].lower(): f for f in table_schema["fields"]}
    incoming = _strip(df_schema.jsonValue(), nullable=True)["fields"]
    targets, new_fields, extra, mismatched = [], [], [], []
    for field in incoming:
        known = by_lower.get(field["name"].lower())
        if known is None:
            (new_fields if merge else extra).append(field)
            targets.append(field["name"])
            continue
        if _strip(known["type"], nullable=True) != field["type"]:
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


# -- Arrow: logical -> physical (write) -------------------------------------------------------------------
def to_physical(array: pa.Array, target: pa.DataType) -> pa.Array:
    """``array`` (Spark's Arrow, logical names) rebuilt by position with ``target``'s names, ids, types."""
    if isinstance(array, pa.ChunkedArray):
        array = array.combine_chunks()
    if target == VARIANT:
        return file_variant(array)
    if pa.types.is_struct(target):
        children = [to_physical(array.field(i), target.field(i).type) for i in range(target.num_fields)]
        mask = array.is_null() if array.null_count else None
        return pa.StructArray.from_arrays(children, fields=list(target), mask=mask)
    if pa.types.is_list(target) and pa.types.is_list(array.type):
        values = to_physical(array.values, target.value_type)
        offsets = array.offsets
        mask = array.is_null() if array.null_count else None
        return pa.ListArray.from_arrays(offsets, values, type=target, mask=mask)
    if pa.types.is_map(target) and pa.types.is_map(array.type):
        keys = to_physical(array.keys, target.key_type)
        items = to_physical(array.items, target.item_type)
        mask = array.is_null() if array.null_count else None
        return pa.MapArray.from_arrays(array.offsets, keys, items, type=target, mask=mask)
    return array if array.type == target else pc.cast(array, target)


# -- Arrow: physical -> logical (read) --------------------------------------------------------------------
def find_field(file_fields: list[pa.Field], delta_field: dict, mode: str) -> int | None:
    """Which field of a file holds ``delta_field``: by id in ``id`` mode, else by (physical) name."""
    md = delta_field.get("metadata") or {}
    if mode == "id" and CM_ID in md:
        wanted = str(md[CM_ID]).encode()
        for i, f in enumerate(file_fields):
            if (f.metadata or {}).get(PARQUET_FIELD_ID) == wanted:
                return i
        return None
    name = md.get(CM_PHYSICAL_NAME, delta_field["name"]) if mode != "none" else delta_field["name"]
    for i, f in enumerate(file_fields):
        if f.name == name:
            return i
    lower = name.lower()  # Spark matches Parquet columns case-insensitively
    return next((i for i, f in enumerate(file_fields) if f.name.lower() == lower), None)


def resolve_column(array: pa.Array | None, length: int, delta_type: Any, mode: str) -> pa.Array:
    """A file's column as the table's logical type: nested fields found by id or physical name, fields
    the file lacks (added later) as nulls, and types widened or normalised (e.g. ns timestamps to us)."""
    target = delta_type_to_arrow(_strip(delta_type, nullable=None))
    if array is None:
        return pa.nulls(length, target)
    if isinstance(array, pa.ChunkedArray):
        array = array.combine_chunks()
    if delta_type == "variant":  # the two binaries, put back together if the file shredded them
        return variant_column(array)
    if isinstance(delta_type, dict) and delta_type["type"] == "struct" and pa.types.is_struct(array.type):
        file_fields = list(array.type)
        children = []
        for f in delta_type["fields"]:
            i = find_field(file_fields, f, mode)
            children.append(resolve_column(None if i is None else array.field(i), length, f["type"], mode))
        mask = array.is_null() if array.null_count else None
        return pa.StructArray.from_arrays(children, fields=list(target), mask=mask)
    if isinstance(delta_type, dict) and delta_type["type"] == "array" and _is_list(array.type):
        array = array.cast(pa.list_(array.type.value_field)) if not pa.types.is_list(array.type) else array
        values = resolve_column(array.values, len(array.values), delta_type["elementType"], mode)
        mask = array.is_null() if array.null_count else None
        return pa.ListArray.from_arrays(array.offsets, values, type=target, mask=mask)
    if isinstance(delta_type, dict) and delta_type["type"] == "map" and pa.types.is_map(array.type):
        keys = resolve_column(array.keys, len(array.keys), delta_type["keyType"], mode)
        items = resolve_column(array.items, len(array.items), delta_type["valueType"], mode)
        mask = array.is_null() if array.null_count else None
        return pa.MapArray.from_arrays(array.offsets, keys, items, type=target, mask=mask)
    if array.type == target:
        return array
    # Timestamps in other units (INT96, ns) lose sub-microsecond digits, as Delta Spark reads them.
    return pc.cast(array, target, safe=not pa.types.is_timestamp(target))


def _is_list(t: pa.DataType) -> bool:
    return pa.types.is_list(t) or pa.types.is_large_list(t)
