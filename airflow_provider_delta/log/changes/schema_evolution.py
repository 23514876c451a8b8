"""Which schema changes a reader of older rows can follow, and which it cannot.

A change read gives rows written over a range of versions in one schema, the end version's. Rows written
under an older schema read correctly in it only when the change between them was *additive*: a column
added (older files read it as null), a type widened ("Type Widening": older files read widened). A
*non-additive* change breaks the mapping from old files to the new schema: a column renamed or dropped
("Column Mapping": the physical name kept under another logical name, or gone), a column made NOT NULL,
a type changed otherwise, the partition columns changed, column mapping turned off.

The rules follow Delta Spark's check of a batch change read (``checkBatchCdfReadSchemaIncompatibility``
in ``CDCReaderBase``: ``DeltaColumnMapping.hasNoColumnMappingSchemaChanges``, then
``SchemaUtils.isReadCompatible`` with tightened nullability forbidden), with one difference: Delta Spark
also refuses a widened type there (``DELTA_CHANGE_DATA_FEED_INCOMPATIBLE_DATA_SCHEMA``), while our scan
reads older files widened as a snapshot read does, so a widening is followed.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, NamedTuple

from ..actions.actions import Metadata
from ..features.properties import column_mapping_mode_of
from ..schema.schema import decimal_params, physical_name

_INTEGERS = ("byte", "short", "integer", "long")
_INTEGER_DIGITS = {"byte": 10, "short": 10, "integer": 10, "long": 20}  # digits a decimal needs to hold them


class SchemaBreak(NamedTuple):
    """Why rows written under one schema cannot be read in another: the column, and what happened."""

    column: str
    reason: str


def schema_break(old: Metadata, new: Metadata) -> SchemaBreak | None:
    """The first non-additive change from ``old`` to ``new`` (``new`` is the later version), or ``None``
    when rows written under ``old`` read correctly in ``new``'s schema (see the module)."""
    old_mode = column_mapping_mode_of(old.configuration)
    new_mode = column_mapping_mode_of(new.configuration)
    if old_mode != "none" and new_mode == "none":
        return SchemaBreak("*", "column mapping was turned off")
    if new_mode != "none":
        # A table upgraded to column mapping kept its columns' names as their physical names.
        found = _mapping_break(old.schema, old_mode, new.schema, new_mode)
        if found is not None:
            return found
        if tuple(old.partition_columns) != tuple(new.partition_columns):
            return SchemaBreak(", ".join(new.partition_columns) or "*", f"the partition columns changed from "
                               f"{list(old.partition_columns)} to {list(new.partition_columns)}")  # fmt: skip
    return _struct_break(old.schema, new.schema, "")


def _mapping_break(old: dict, old_mode: str, new: dict, new_mode: str) -> SchemaBreak | None:
    """A column renamed (its physical name under another logical name) or dropped (its physical name
    gone), nested fields included, as ``DeltaColumnMapping`` tells a rename or a drop."""
    new_fields = dict(_physical_paths(new, new_mode))
    for physical, logical in _physical_paths(old, old_mode):
        if physical not in new_fields:
            return SchemaBreak(".".join(logical), f"column {'.'.join(logical)!r} was dropped")
        renamed = new_fields[physical]
        if renamed[-1] != logical[-1]:
            return SchemaBreak(".".join(logical), f"column {'.'.join(logical)!r} was renamed to "
                                                  f"{'.'.join(renamed)!r}")  # fmt: skip
    return None


def _physical_paths(
    struct: dict, mode: str, physical: tuple[str, ...] = (), logical: tuple[str, ...] = ()
) -> Iterator[tuple[tuple[str, ...], tuple[str, ...]]]:
    for f in struct["fields"]:
        p, name = (*physical, physical_name(f, mode)), (*logical, f["name"])
        yield p, name
        yield from _nested_paths(f["type"], mode, p, name)


def _nested_paths(
    t: Any, mode: str, physical: tuple[str, ...], logical: tuple[str, ...]
) -> Iterator[tuple[tuple[str, ...], tuple[str, ...]]]:
    if not isinstance(t, dict):
        return
    if t["type"] == "struct":
        yield from _physical_paths(t, mode, physical, logical)
    elif t["type"] == "array":
        yield from _nested_paths(t["elementType"], mode, (*physical, "element"), (*logical, "element"))
    elif t["type"] == "map":
        yield from _nested_paths(t["keyType"], mode, (*physical, "key"), (*logical, "key"))
        yield from _nested_paths(t["valueType"], mode, (*physical, "value"), (*logical, "value"))


def _struct_break(old: dict, new: dict, prefix: str) -> SchemaBreak | None:
    """By name, as ``isReadCompatible``: every old column still there (case-insensitively, in the same
    case), none made NOT NULL, each type the same or widened."""
    new_by_lower = {f["name"].lower(): f for f in new["fields"]}
    for o in old["fields"]:
        name = prefix + o["name"]
        n = new_by_lower.get(o["name"].lower())
        if n is None:
            return SchemaBreak(name, f"column {name!r} was dropped")
        if n["name"] != o["name"]:
            return SchemaBreak(name, f"column {name!r} was renamed to {prefix + n['name']!r}")
        if o.get("nullable", True) and not n.get("nullable", True):
            return SchemaBreak(name, f"column {name!r} was made NOT NULL")
        found = _type_break(o["type"], n["type"], name)
        if found is not None:
            return found
    return None


def _type_break(old: Any, new: Any, name: str) -> SchemaBreak | None:
    if isinstance(old, dict) and isinstance(new, dict) and old["type"] == new["type"]:
        if old["type"] == "struct":
            return _struct_break(old, new, name + ".")
        if old["type"] == "array":
            if old.get("containsNull", True) and not new.get("containsNull", True):
                return SchemaBreak(name, f"the elements of column {name!r} were made NOT NULL")
            return _type_break(old["elementType"], new["elementType"], name + ".element")
        if old["type"] == "map":
            if old.get("valueContainsNull", True) and not new.get("valueContainsNull", True):
                return SchemaBreak(name, f"the values of column {name!r} were made NOT NULL")
            return (_type_break(old["keyType"], new["keyType"], name + ".key")
                    or _type_break(old["valueType"], new["valueType"], name + ".value"))  # fmt: skip
    if old == new or old == "void":  # a void column holds only nulls ("Void Type")
        return None
    if isinstance(old, str) and isinstance(new, str) and is_widening(old, new):
        return None
    return SchemaBreak(name, f"column {name!r} changed type from {_shown(old)} to {_shown(new)}")


def is_widening(old: str, new: str) -> bool:
    """Whether ``old`` -> ``new`` is a type change the "Type Widening" feature supports (a reader casts
    older files' values without loss)."""
    if old in _INTEGERS and new in _INTEGERS:
        return _INTEGERS.index(old) < _INTEGERS.index(new)
    if new == "double":
        return old in ("float", "byte", "short", "integer")
    if old == "date":
        return new == "timestamp_ntz"
    to = decimal_params(new) if new.startswith("decimal") else None
    if to is None:
        return False
    if old in _INTEGER_DIGITS:
        return to[0] - to[1] >= _INTEGER_DIGITS[old]
    source = decimal_params(old) if old.startswith("decimal") else None
    return source is not None and to[1] >= source[1] and to[0] - to[1] >= source[0] - source[1]


def _shown(t: Any) -> str:
    return t if isinstance(t, str) else str(t.get("type"))
