"""Schema enforcement and evolution on write: does incoming data fit the table, and what schema results.

Delta Spark's rules for a DataFrame write, shared by our Arrow and Spark writers so that both accept and
refuse the same data: names match case-insensitively; types must be equal, nullability aside (NOT NULL is
enforced on the rows); a column the table lacks is refused unless the schema is merged, which appends it
(nullable) to the table; table columns the data lacks are written as nulls (or computed, when generated).
Column mapping tables give merged columns fresh ids and physical names ("Writer Requirements for Column
Mapping").
"""

from __future__ import annotations

import copy
import json
import uuid
from typing import Any

from .errors import SchemaMismatchError
from .physical_columns import strip_type
from .schema import CM_ID, CM_PHYSICAL_NAME


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
    """The table column each incoming column writes (in incoming order) and, when ``merge`` adds columns,
    the merged schema (else ``None``). ``incoming`` is a Delta struct; ``what`` and ``option`` word the
    error (:class:`SchemaMismatchError`, naming every offending column and both types)."""
    by_lower = {f["name"].lower(): f for f in table_schema["fields"]}
    fields = strip_type(incoming, nullable=True)["fields"]
    targets, new_fields, extra, mismatched = [], [], [], []
    for field in fields:
        known = by_lower.get(field["name"].lower())
        if known is None:
            (new_fields if merge else extra).append(field)
            targets.append(field["name"])
            continue
        if strip_type(known["type"], nullable=True) != field["type"]:
            source = what.removeprefix("the ")
            mismatched.append(
                f"{known['name']!r} (table: {type_text(known['type'])}, {source}: {type_text(field['type'])})"
            )
        targets.append(known["name"])
    problems = []
    if extra:
        names = ", ".join(repr(f["name"]) for f in extra)
        problems.append(f"column(s) {names} are not in the table (pass {option} to add them)")
    if mismatched:
        problems.append("column type(s) differ: " + "; ".join(mismatched))
    if len({t.lower() for t in targets}) != len(targets):
        problems.append(f"{what} has duplicate columns {targets}")
    if problems:
        raise SchemaMismatchError(f"{what} does not match the table schema: " + " and ".join(problems))
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
