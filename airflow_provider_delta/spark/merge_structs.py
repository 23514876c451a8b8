"""Struct values a MERGE assigns to struct columns: fields matched by name, and evolved with the schema.

Delta Spark 4.4 resolves a struct assigned to a struct column by field name, not by position (its
``resolveMergeUpdateStructsByName``), at every depth, inside arrays and map keys and values too. A plain
``CAST`` of one struct to another goes by position, so a source whose struct lists the same fields in
another order would silently swap values: assignments of nested types go through :func:`conform`.

Without schema evolution the source's struct must have exactly the table's fields (by name, any order;
types are cast); a field more or less is refused (Delta Spark: "Cannot cast"). With evolution
(``merge_schema``), as Delta Spark's nested schema evolution:

- a field the source's struct has and the table's lacks is appended to the table's struct (nullable, the
  source's type; under column mapping with an id and physical name), at any depth (the core's
  ``schema.type_widening.evolved_type``, which the in-task MERGE shares);
- a field the source's struct lacks keeps the row's current value in an update and is NULL in an insert
  (in structs inside arrays and maps, which cannot be matched to the current elements, it is NULL);
- a NULL struct from the source stays NULL (Delta Spark's ``preserveNullSourceStructs``), except in an
  update that keeps fields the source lacks: Delta Spark 4.4 assigns such a struct field by field, so the
  kept fields keep their values and the others become NULL.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from airflow_provider_delta.log.base.errors import SchemaMismatchError

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame
    from pyspark.sql.types import DataType


def is_nested(kind: Any) -> bool:
    """Whether a Spark type holds a struct anywhere (only those need more than a cast)."""
    from pyspark.sql.types import ArrayType, MapType, StructType

    if isinstance(kind, StructType):
        return True
    if isinstance(kind, ArrayType):
        return is_nested(kind.elementType)
    if isinstance(kind, MapType):
        return is_nested(kind.keyType) or is_nested(kind.valueType)
    return False


def assigned_value(frame: DataFrame, value: Column, target: DataType, old: Column | None, evolve: bool,
             where: str) -> Column:  # fmt: skip
    """``value`` (resolved against ``frame``) as the column's value of type ``target``: a cast, or for
    types holding structs :func:`conform` over the value's type as ``frame`` gives it."""
    if is_nested(target):
        value = conform(value, frame.select(value).schema.fields[0].dataType, target, old, evolve, where)
    return value.cast(target)


def conform(value: Column, source: DataType, target: DataType, old: Column | None, evolve: bool,
            where: str) -> Column:  # fmt: skip
    """``value`` (of Spark type ``source``) as a value of ``target``, struct fields matched by name.

    ``old`` is the row's current value for an update (fields the source lacks keep it), None for an
    insert. Raises ``SchemaMismatchError`` naming the field path when the structs differ and ``evolve``
    is false (with evolution, ``target`` already has every source field: ``type_widening.evolved_type``)."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import ArrayType, MapType, StructType

    if isinstance(target, StructType) and isinstance(source, StructType):
        by_lower = {f.name.lower(): f for f in source.fields}
        known = {f.name.lower() for f in target.fields}
        extra = [f.name for f in source.fields if f.name.lower() not in known]
        missing = [f.name for f in target.fields if f.name.lower() not in by_lower]
        if extra or (missing and not evolve):
            what = f"has field(s) {extra} that the table's lacks" if extra else f"lacks field(s) {missing}"
            hint = " (pass merge_schema=True to evolve the table's struct)" if not evolve else ""
            raise SchemaMismatchError(f"{where}: the assigned struct {what}{hint}; nothing was written")
        parts = []
        for f in target.fields:
            mine = by_lower.get(f.name.lower())
            before = None if old is None else old.getField(f.name)
            if mine is None:
                part = before if before is not None else F.lit(None).cast(f.dataType)
            else:
                part = conform(value.getField(mine.name), mine.dataType, f.dataType, before, evolve,
                               f"{where}.{f.name}")  # fmt: skip
            parts.append(part.alias(f.name))
        if missing and old is not None:
            return F.struct(*parts)  # leaf by leaf, as Delta Spark 4.4: kept fields survive a NULL struct
        return F.when(value.isNull(), F.lit(None).cast(target)).otherwise(F.struct(*parts))
    if isinstance(target, ArrayType) and isinstance(source, ArrayType) and is_nested(target):
        return F.transform(value, lambda e: conform(e, source.elementType, target.elementType, None, evolve,
                                                     f"{where}[]"))  # fmt: skip
    if isinstance(target, MapType) and isinstance(source, MapType) and is_nested(target):
        out = value
        if is_nested(target.keyType):
            out = F.transform_keys(out, lambda k, _: conform(k, source.keyType, target.keyType, None, evolve,
                                                             f"{where}.key"))  # fmt: skip
        if is_nested(target.valueType):
            out = F.transform_values(out, lambda _, v: conform(v, source.valueType, target.valueType, None,
                                                               evolve, f"{where}.value"))  # fmt: skip
        return out.cast(target)
    return value.cast(target)
