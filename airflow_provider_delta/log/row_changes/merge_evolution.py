"""MERGE schema evolution in the task (``merge_schema=True``): the source's new columns added to the table,
and on tables that enable type widening, columns widened to the wider values assigned to them, as Delta
Spark's ``MERGE WITH SCHEMA EVOLUTION`` does, through the write planner's schema merge."""

from __future__ import annotations

import copy
import dataclasses
import json
from collections.abc import Callable, Sequence
from typing import Any

import pyarrow as pa

from ..actions.actions import Metadata
from ..base.errors import InvalidConditionError, SchemaMismatchError, UnsupportedFeatureError
from ..expressions.expressions import Column
from ..expressions.sql_parser import UnsupportedExpressionError, parse
from ..features.creation import assign_column_mapping, required_features
from ..features.identity import identity_columns
from ..schema.schema import delta_schema_to_arrow
from ..schema.type_widening import TYPE_WIDENING, evolve_columns, narrowed_type
from ..writes.write_plan import incoming_schema, plan_write
from .merge_clauses import Clause
from .target import Target


def evolve(
    target: Target,
    clauses: Sequence[Clause],
    source_schema: pa.Schema,
    source_alias: str,
    value_type: Callable[[Any], pa.DataType],
) -> None:
    """``merge_schema``: the source's new columns added to the table (nullable), as Delta Spark's
    schema evolution for ``*`` clauses, through the write planner's schema merge; on tables that
    enable type widening, columns assigned values of a wider type widened ("Type Widening"). The evolved
    metadata becomes ``target.metadata``; nothing changes when the source adds nothing.

    :param value_type: the Arrow type of an assigned value (SQL text or an Arrow expression), evaluated
        over both sides of the MERGE.
    """
    widening = widening_enabled(target)
    # What the clauses write from the source: every source column for a ``*`` clause, and the source
    # column an explicit assignment copies (under the table column's name), as Delta Spark evolves.
    by_lower = {f.name.lower(): f for f in source_schema}
    known = {c.lower(): c for c in target.columns}
    evolving: dict[str, pa.Field] = {}
    assigned: list[tuple[str, pa.DataType]] = []  # (table column, value type), in clause order
    for clause in clauses:
        if clause.action == "delete":
            continue
        if clause.assignments is None:
            evolving.update(by_lower)
            assigned += [(known[n], f.type) for n, f in by_lower.items() if n in known]
            continue
        for column, value in clause.assignments.items():
            if column.lower() not in known:  # a new column, of its value's type
                evolving.setdefault(column.lower(), pa.field(column, value_type(value)))
                continue
            path = parse(value).path if isinstance(value, str) and _is_column(value) else None
            if path and len(path) == 2 and path[0].lower() == source_alias.lower() and \
                    path[1].lower() in by_lower:  # a source column copied: its fields evolve the column's
                evolving.setdefault(column.lower(), by_lower[path[1].lower()].with_name(column))
                assigned.append((known[column.lower()], by_lower[path[1].lower()].type))
            elif widening:
                assigned.append((known[column.lower()], value_type(value)))
    # The table's columns no clause writes ride along as they are (not the identity columns: the
    # planner would take them for values given to a column that generates its own).
    table = delta_schema_to_arrow(target.snap.metadata.schema)
    generated = {c.name.lower() for c in identity_columns(target.snap.metadata.schema)}
    kept = [f for f in table if f.name.lower() not in evolving and f.name.lower() not in generated]
    incoming = incoming_schema(pa.schema([*evolving.values(), *kept]))
    # A column of a primitive type keeps it in the planner's eyes: its values are cast as they are
    # without merge_schema (an overflow refused by name), so a narrower source (SMALLINT into INT, or
    # yesterday's INT into a column widened since) merges as in Delta Spark, and a widening follows the
    # plan. The planner's merge knows no widening: in structs it sees the fields' own types too.
    current = {f["name"].lower(): f["type"] for f in target.snap.metadata.schema["fields"]}
    for field in incoming["fields"]:
        old = current.get(field["name"].lower())
        if isinstance(old, str):
            field["type"] = old
        elif old is not None and widening:
            field["type"] = narrowed_type(old, field["type"])
    plan = plan_write(target.snap, incoming, partition_by=None, schema_mode="merge", overwrite=False,
                      configuration=None, replace_where=None, what="the MERGE source",
                      option="merge_schema=True")  # fmt: skip
    extra = [f for f in source_schema if f.name.lower() not in known]
    if plan.protocol is not None and plan.protocol != target.snap.protocol:
        raise UnsupportedFeatureError(
            f"merge_schema: the source's new columns {[f.name for f in extra]} need a protocol "
            f"upgrade of {target.where}; add the columns first (ALTER TABLE ... ADD COLUMNS)",
        )
    metadata = plan.metadata or target.snap.metadata
    if widening:
        metadata = _widened(target, metadata, assigned)
    if metadata is not target.snap.metadata:
        target.metadata = metadata

def _widened(target: Target, metadata: Metadata, assigned: list[tuple[str, pa.DataType]]) -> Metadata:
    """``metadata`` with the columns widened that values of a wider type are assigned to (partition
    columns never: their values are cast, as without widening), as Delta Spark's MERGE WITH SCHEMA
    EVOLUTION widens them (``type_widening.evolve_columns``)."""
    kinds = [(column, kind) for column, arrow in assigned if (kind := _delta_type(arrow)) is not None]
    schema = copy.deepcopy(metadata.schema)
    partitions = target.snap.partition_columns
    if not evolve_columns(schema, kinds, widening=True, partitions=partitions):
        return metadata
    config = dict(metadata.configuration)
    current = target.snap.table_configuration
    if current.column_mapping_mode != "none":  # struct fields an assigned expression adds
        config = assign_column_mapping(schema, config)
    missing = current.unsupported(required_features(schema, config))
    if missing:
        raise UnsupportedFeatureError(
            f"the MERGE's evolved schema needs table feature(s) {', '.join(missing)} that "
            f"{target.where} does not enable", features=tuple(missing),
        )  # fmt: skip
    text = json.dumps(schema, separators=(",", ":"))
    return dataclasses.replace(metadata, configuration=config, schema_string=text)


def widening_enabled(target: Target) -> bool:
    """Whether the table lets schema evolution widen types: the property and the feature, as the Spark
    engine asks ("Type Widening": writers must not widen without the property)."""
    config = target.snap.table_configuration
    return config.type_widening_enabled and config.supports(TYPE_WIDENING)


def _delta_type(kind: pa.DataType) -> Any | None:
    """The Delta type of an assigned value's Arrow type, as the writer converts incoming data; None for a
    type Delta has none for (such values are cast to the column's type, never widen it)."""
    try:
        return incoming_schema(pa.schema([pa.field("value", kind)]))["fields"][0]["type"]
    except SchemaMismatchError:
        return None


def _is_column(text: str) -> bool:
    try:
        return isinstance(parse(text), Column)
    except (UnsupportedExpressionError, InvalidConditionError):
        return False
