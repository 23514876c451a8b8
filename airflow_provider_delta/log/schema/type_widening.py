"""What schema evolution does to the types of a table's columns ("Type Widening"), on Delta schema JSON.

A MERGE that evolves the schema of a table that enables type widening (``delta.enableTypeWidening``
and the ``typeWidening`` feature) widens a column assigned values of a wider type, as Delta Spark 4.4 does
on its own: integers to wider integers, float to double, decimals to more digits on both sides of the
point. The change is recorded in the field's ``delta.typeChanges`` ("Type Change Metadata"), so that
readers cast the files written before it. Other changes the protocol allows (integers to double or
decimal, date to timestamp_ntz) are not made here. Struct columns gain the fields the assigned structs
add and widen theirs, at any depth, also inside arrays and maps.

Pure functions of Delta types, so that both engines (the Arrow MERGE in ``row_changes`` and the Spark
MERGE in ``spark/``) evolve a schema the same way whatever engine computed the values' types.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Collection, Iterable
from typing import Any

from .schema import TYPE_CHANGES, decimal_params

TYPE_WIDENING = "typeWidening"  # the table feature that lets a column's type change
_INTEGERS = ("byte", "short", "integer", "long")


def widens(old: Any, new: Any) -> bool:
    """Whether Delta widens a column of type ``old`` to ``new`` on its own during schema evolution."""
    if not (isinstance(old, str) and isinstance(new, str)) or old == new:
        return False
    if old in _INTEGERS and new in _INTEGERS:
        return _INTEGERS.index(new) > _INTEGERS.index(old)
    if (old, new) == ("float", "double"):
        return True
    a, b = decimal_params(old), decimal_params(new)
    return bool(a and b) and b[1] >= a[1] and b[0] - b[1] >= a[0] - a[1]


def iceberg_follows(old: Any, new: Any) -> bool:
    """Whether Iceberg V2's schema evolution can follow a column's type change from ``old`` to ``new``
    ("Iceberg Compatibility V1/V2": type changes must be ones Iceberg V2 supports): ``int`` to ``long``
    (byte and short are Iceberg ints), ``float`` to ``double``, a decimal's precision raised at the same
    scale. Nothing else, not even a change Delta's type widening allows (a decimal's scale raised)."""
    if old == new:
        return True
    if not (isinstance(old, str) and isinstance(new, str)):
        return False
    if old in _INTEGERS and new in _INTEGERS:
        return _INTEGERS.index(new) >= _INTEGERS.index(old)
    if (old, new) == ("float", "double"):
        return True
    a, b = decimal_params(old), decimal_params(new)
    return bool(a and b) and a[1] == b[1] and b[0] >= a[0]


def record_widening(field: dict, new: str) -> None:
    """Give ``field`` (a struct field, in place) the type ``new``, its change appended to the field's
    ``delta.typeChanges`` as Delta Spark records it."""
    changes = field.setdefault("metadata", {}).setdefault(TYPE_CHANGES, [])
    changes.append({"fromType": field["type"], "toType": new})
    field["type"] = new


def evolved_type(table: Any, source: Any, widens: Callable[[Any, Any], bool] | None = None) -> Any:
    """The table's type (Delta schema JSON) with the fields the source's type (also Delta's JSON, which is
    Spark's) adds, at any depth; the table's own fields keep their place, type and metadata. With
    ``widens`` (the table enables type widening), a struct field whose source type it accepts takes that
    type, recorded in the field's ``delta.typeChanges``."""
    if not (isinstance(table, dict) and isinstance(source, dict)) or table.get("type") != source.get("type"):
        return table
    out = copy.deepcopy(table)
    if table["type"] == "struct":
        by_lower = {f["name"].lower(): f for f in out["fields"]}
        for field in source["fields"]:
            mine = by_lower.get(field["name"].lower())
            if mine is None:
                out["fields"].append({"name": field["name"], "type": copy.deepcopy(field["type"]),
                                      "nullable": True, "metadata": {}})  # fmt: skip
            elif widens is not None and widens(mine["type"], field["type"]):
                record_widening(mine, field["type"])
            else:
                mine["type"] = evolved_type(mine["type"], field["type"], widens)
    elif table["type"] == "array":
        out["elementType"] = evolved_type(table["elementType"], source["elementType"], widens)
    elif table["type"] == "map":
        out["keyType"] = evolved_type(table["keyType"], source["keyType"], widens)
        out["valueType"] = evolved_type(table["valueType"], source["valueType"], widens)
    return out


def evolve_columns(schema: dict, assigned: Iterable[tuple[str, Any]], *, widening: bool,
                   partitions: Collection[str] = ()) -> bool:  # fmt: skip
    """Evolve the columns of ``schema`` (in place) for values of the given Delta types assigned to them,
    ``(column, type)`` in the order the clauses assign them: a struct (array, map) column takes
    :func:`evolved_type`; with ``widening``, a column of a primitive type assigned a type Delta widens it
    to takes that type and records the change, except partition columns (their values live in the log,
    as strings of the old type). Whether anything changed."""
    by_name = {f["name"]: f for f in schema["fields"]}
    skipped = {c.lower() for c in partitions}
    nested: dict[str, Any] = {}
    widened: dict[str, str] = {}
    for name, kind in assigned:
        current = by_name[name]["type"]
        if isinstance(current, dict):
            current = nested.get(name, current)
            if (grown := evolved_type(current, kind, widens if widening else None)) != current:
                nested[name] = grown
        elif widening and name.lower() not in skipped and widens(widened.get(name, current), kind):
            widened[name] = kind
    for name, kind in nested.items():
        by_name[name]["type"] = kind
    for name, kind in widened.items():
        record_widening(by_name[name], kind)
    return bool(nested or widened)


def narrowed_type(table: Any, source: Any) -> Any:
    """The source's type with each part that :func:`evolve_columns` widens (a column's primitive type, a
    struct field's at any depth) at the table's type: what a schema merge that knows no widening sees, so
    that it adds the new fields and leaves the widening to be applied after it."""
    if widens(table, source):
        return table
    return _narrowed(table, source)


def _narrowed(table: Any, source: Any) -> Any:
    if not (isinstance(table, dict) and isinstance(source, dict)) or table.get("type") != source.get("type"):
        return source
    out = dict(source)
    if table["type"] == "struct":
        by_lower = {f["name"].lower(): f for f in table["fields"]}
        fields = []
        for field in source["fields"]:
            mine = by_lower.get(field["name"].lower())
            fields.append(
                field if mine is None else {**field, "type": narrowed_type(mine["type"], field["type"])}
            )
        out["fields"] = fields
    elif table["type"] == "array":  # an element of a primitive type is not widened, only struct fields
        out["elementType"] = _narrowed(table["elementType"], source["elementType"])
    elif table["type"] == "map":
        out["keyType"] = _narrowed(table["keyType"], source["keyType"])
        out["valueType"] = _narrowed(table["valueType"], source["valueType"])
    return out
