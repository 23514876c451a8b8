"""Schema enforcement and evolution on write: does incoming data fit the table, and what schema results.

Delta Spark's rules for a DataFrame write, shared by our Arrow and Spark writers so that both accept and
refuse the same data: names match case-insensitively, nested fields of structs too, and by name, so a struct's
fields may come in any order; types must be equal, nullability aside (NOT NULL is enforced on the rows); a
column or nested field the table lacks is refused unless the schema is merged, which appends it (nullable)
to the table or to its struct; table columns and nested fields the data lacks are written as nulls (or
computed, when generated), unless they are NOT NULL. This is Delta Spark's test: the data fits when merging
its schema into the table's (``SchemaMergingUtils.mergeSchemas``) leaves the table's unchanged. Column
mapping tables give merged columns fresh ids and physical names ("Writer Requirements for Column
Mapping").

One departure, in the user's favour: a column whose type widens losslessly to the table's (``widens``:
``int`` into ``long``, ``float`` into ``double``, a decimal into a wider one) is written as the table's
type, as Delta Spark's SQL INSERT and deltalake's writer cast it, where Delta Spark's DataFrame write
accepts only byte, short and int into one another (``DELTA_FAILED_TO_MERGE_FIELDS`` otherwise). The
table's schema never changes for it.
"""

from __future__ import annotations

import copy
import json
from typing import Any

from ..base.errors import SchemaMismatchError
from .physical_columns import strip_type
from .type_widening import widens


def type_text(t: Any) -> str:
    return t if isinstance(t, str) else json.dumps(strip_type(t, nullable=True), separators=(",", ":"))


def match_schema(
    table_schema: dict,
    incoming: dict,
    *,
    merge: bool,
    what: str = "the data",
    option: str = "merge_schema=True",
) -> tuple[list[str], dict | None]:
    """The table column each incoming column writes (in incoming order) and, when ``merge`` adds columns
    or nested fields, the merged schema (else ``None``). ``incoming`` is a Delta struct; ``what`` and
    ``option`` word the error (:class:`SchemaMismatchError`, naming every offending column by its path and
    both types)."""
    by_lower = {f["name"].lower(): f for f in table_schema["fields"]}
    fields = strip_type(incoming, nullable=True)["fields"]
    found = _Found(what.removeprefix("the "))
    targets, new_fields, changed = [], [], {}
    for field in fields:
        known = by_lower.get(field["name"].lower())
        if known is None:
            if merge:
                new_fields.append(field)
            else:
                found.extra.append(field["name"])
            targets.append(field["name"])
            continue
        merged_type = _merged_type(known["type"], field["type"], known["name"], merge, found)
        if merged_type != known["type"]:
            changed[known["name"]] = merged_type
        targets.append(known["name"])
    problems = []
    if found.extra:
        names = ", ".join(repr(n) for n in found.extra)
        problems.append(f"column(s) {names} are not in the table (pass {option} to add them)")
    if found.mismatched:
        problems.append("column type(s) differ: " + "; ".join(found.mismatched))
    if found.missing:
        names = ", ".join(repr(n) for n in found.missing)
        problems.append(f"non-nullable nested field(s) {names} are missing from {what}")
    if found.duplicated:
        problems.append("structs with duplicate fields (names match case-insensitively): "
                        + "; ".join(found.duplicated))  # fmt: skip
    if len({t.lower() for t in targets}) != len(targets):
        problems.append(f"{what} has duplicate columns {targets}")
    if problems:
        raise SchemaMismatchError(f"{what} does not match the table schema: " + " and ".join(problems))
    if not new_fields and not changed:
        return targets, None
    merged = copy.deepcopy(table_schema)
    for f in merged["fields"]:
        if f["name"] in changed:
            f["type"] = changed[f["name"]]
    merged["fields"].extend(new_fields)
    return targets, merged


class _Found:
    """What ``_merged_type`` found wrong, by column path."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.extra: list[str] = []
        self.mismatched: list[str] = []
        self.missing: list[str] = []
        self.duplicated: list[str] = []


def _merged_type(
    table: Any, data: Any, path: str, merge: bool, found: _Found, *, in_struct: bool = True
) -> Any:
    """The table's type ``table`` with the data's ``data`` merged in (unchanged when the data fits it):
    structs matched field by field by name, new nested fields appended when ``merge``, arrays and maps by
    their element, key and value types, anything else equal. Problems go to ``found``. ``in_struct``: the
    path goes through structs only, where Delta Spark checks NOT NULL (not into arrays or maps)."""
    kind = table.get("type") if isinstance(table, dict) else None
    data_kind = data.get("type") if isinstance(data, dict) else None
    if kind == "struct" and data_kind == "struct":
        by_lower = {f["name"].lower(): f for f in data["fields"]}
        if len(by_lower) != len(data["fields"]):
            found.duplicated.append(f"{path!r} {[f['name'] for f in data['fields']]}")
        table_names = {f["name"].lower() for f in table["fields"]}
        fields = []
        for f in table["fields"]:
            given = by_lower.get(f["name"].lower())
            if given is None:
                if in_struct and not f.get("nullable", True):
                    found.missing.append(f"{path}.{f['name']}")
                fields.append(f)
                continue
            merged = _merged_type(f["type"], given["type"], f"{path}.{f['name']}", merge, found,
                                  in_struct=in_struct)  # fmt: skip
            fields.append(f if merged == f["type"] else {**f, "type": merged})
        for f in data["fields"]:
            if f["name"].lower() not in table_names:
                if merge:
                    fields.append(f)
                else:
                    found.extra.append(f"{path}.{f['name']}")
        return table if fields == table["fields"] else {**table, "fields": fields}
    if kind == "array" and data_kind == "array":
        element = _merged_type(table["elementType"], data["elementType"], f"{path}.element", merge, found,
                               in_struct=False)  # fmt: skip
        return table if element == table["elementType"] else {**table, "elementType": element}
    if kind == "map" and data_kind == "map":
        key = _merged_type(table["keyType"], data["keyType"], f"{path}.key", merge, found, in_struct=False)
        value = _merged_type(table["valueType"], data["valueType"], f"{path}.value", merge, found,
                             in_struct=False)  # fmt: skip
        if key == table["keyType"] and value == table["valueType"]:
            return table
        return {**table, "keyType": key, "valueType": value}
    if widens(data, table):
        return table  # written as the table's type, losslessly (the table's schema stays as it is)
    if strip_type(table, nullable=True) != strip_type(data, nullable=True):
        found.mismatched.append(f"{path!r} (table: {type_text(table)}, {found.source}: {type_text(data)})")
    return table
