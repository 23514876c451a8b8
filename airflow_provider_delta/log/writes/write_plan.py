"""Planning a write: the table the rows go into, checked before a single file is written.

Decides the schema (enforced, merged or replaced, ``schema_enforcement``), the protocol and metadata a
commit must carry (a new table's, a merged schema's, features asked for with ``delta.feature.*``), the rules
every row must satisfy (``table_rules``, plus ``replaceWhere``), and how each incoming batch becomes rows
of the table: columns renamed to the table's names, types brought to the table's, missing columns nulls,
generated columns computed. Shared by nothing but the Arrow writer: the Spark writer plans with Spark's
own schema objects but the same enforcement, rules and features.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from ..actions.actions import Metadata, Protocol
from ..base.errors import InvalidCommitError, SchemaMismatchError, UnsupportedFeatureError
from ..expressions.evaluate import evaluate
from ..expressions.expressions import Expr
from ..expressions.table_rules import Rule, compile_expression, compile_rule, generated_columns, table_rules
from ..features.creation import initial_actions, required_features
from ..features.identity import identity_columns
from ..features.properties import APPEND_ONLY, bool_property
from ..features.protocol import (
    READER_FEATURES_NEEDING_R3,
    check_write_supported,
    reader_features,
    writer_features,
)
from ..schema.physical_columns import logical_type, resolve_column, strip_type
from ..schema.schema import arrow_schema_to_delta, column_mapping_mode
from ..schema.schema_enforcement import assign_column_mapping, match_schema
from ..snapshot.snapshot import Snapshot

FEATURE_PREFIX = "delta.feature."


@dataclass(frozen=True)
class WritePlan:
    """The table as the write leaves it, and how incoming columns map onto it."""

    schema: dict
    configuration: dict[str, str]
    partition_columns: tuple[str, ...]
    targets: dict[str, str]  # incoming column name -> table column name
    rules: list[tuple[Rule, Expr]]
    generated: dict[str, Expr]
    protocol: Protocol | None = None  # set when the write creates the table or upgrades its protocol
    metadata: Metadata | None = None  # set when the write creates the table or changes its schema


def incoming_schema(schema: pa.Schema) -> dict:
    """The Delta schema of incoming Arrow data: every column nullable, as Delta Spark creates tables,
    without Arrow's or pandas' bookkeeping metadata."""
    try:
        return strip_type(arrow_schema_to_delta(schema), nullable=True)
    except ValueError as exc:
        raise SchemaMismatchError(f"the data cannot be written to a Delta table: {exc}") from None


def plan_write(
    snap: Snapshot | None,
    arrow_schema: pa.Schema,
    *,
    partition_by: list[str] | None,
    schema_mode: str | None,
    overwrite: bool,
    configuration: dict[str, str] | None,
    replace_where: str | None,
) -> WritePlan:
    data = incoming_schema(arrow_schema)
    if snap is None:
        protocol, metadata = initial_actions(
            data, list(partition_by or []), dict(configuration or {}), None, None
        )
        check_write_supported(protocol, uses_identity=False, where="the new table")
        return _plan(metadata.schema, metadata, protocol, {f["name"]: f["name"] for f in data["fields"]},
                     replace_where)  # fmt: skip
    where = f"table {snap.store.uri}"
    config = dict(snap.metadata.configuration)
    asked = _asked_features(configuration, config, where)
    check_write_supported(snap.protocol, uses_identity='"delta.identity.' in snap.metadata.schema_string,
                          where=where)  # fmt: skip
    if overwrite and bool_property(config, APPEND_ONLY):
        raise InvalidCommitError(f"{where} is append-only (delta.appendOnly=true): it cannot be overwritten")
    partitions = list(snap.partition_columns)
    if schema_mode == "overwrite":
        if not overwrite or replace_where is not None:
            raise ValueError("schema_mode='overwrite' needs mode='overwrite' without replace_where")
        schema, partitions = data, list(partition_by) if partition_by is not None else partitions
        targets = {f["name"]: f["name"] for f in data["fields"]}
        merged: dict | None = schema
    else:
        if partition_by is not None and [c.lower() for c in partition_by] != [c.lower() for c in partitions]:
            raise SchemaMismatchError(
                f"partition_by {list(partition_by)} differs from the partition columns of {where}: "
                f"{partitions}"
            )
        names, merged = match_schema(snap.metadata.schema, data, merge=schema_mode == "merge",
                                     option="schema_mode='merge'")  # fmt: skip
        targets = dict(zip([f["name"] for f in data["fields"]], names, strict=True))
        schema = merged or snap.metadata.schema
    metadata = None
    if merged is not None:
        if column_mapping_mode(config) != "none":
            config = assign_column_mapping(schema, config)
        metadata = dataclasses.replace(
            snap.metadata, schema_string=json.dumps(schema, separators=(",", ":")), configuration=config,
            partition_columns=tuple(partitions),
        )  # fmt: skip
        _check_partitions(schema, partitions)
    protocol = _protocol_with(snap, required_features(schema, config), asked, where)
    return _plan(schema, metadata or snap.metadata, protocol, targets, replace_where,
                 metadata_changed=metadata is not None)  # fmt: skip


def _check_partitions(schema: dict, partitions: list[str]) -> None:
    names = {f["name"].lower() for f in schema["fields"]}
    missing = [c for c in partitions if c.lower() not in names]
    if missing:
        raise SchemaMismatchError(f"partition column(s) {missing} are not in the new schema")


def _asked_features(configuration: dict[str, str] | None, table: dict[str, str], where: str) -> set[str]:
    """Features a write to an existing table asks for (``delta.feature.<name>: supported``); other
    properties only apply when the write creates the table (a task that passes them on every run may
    repeat the table's own values)."""
    asked = set()
    for key, value in (configuration or {}).items():
        if table.get(key) == str(value):
            continue
        if not key.startswith(FEATURE_PREFIX) or str(value).lower() not in ("supported", "enabled"):
            raise ValueError(
                f"configuration {key}={value!r}: only delta.feature.<name>=supported may be given when "
                f"writing to the existing {where}; other table properties apply when a write creates it"
            )
        asked.add(key[len(FEATURE_PREFIX) :])
    return asked


def _protocol_with(snap: Snapshot, needed: set[str], asked: set[str], where: str) -> Protocol | None:
    """The protocol after adding ``asked`` features; refuses a schema needing features not enabled (Delta
    Spark adds a feature to an existing table only when told to)."""
    have = set(writer_features(snap.protocol))
    missing = sorted(needed - have - asked)
    if missing:
        ask = ", ".join(f"{FEATURE_PREFIX + f!r}: 'supported'" for f in missing)
        raise UnsupportedFeatureError(
            f"the data needs table feature(s) {', '.join(missing)} that {where} does not enable; ask "
            f"for them with configuration={{{ask}}}",
            features=tuple(missing),
        )
    new = asked - have
    if not new:
        return None
    writers = have | new
    readers = (set(reader_features(snap.protocol)) | new) & READER_FEATURES_NEEDING_R3
    if "columnMapping" in writers:
        readers.add("columnMapping")
    protocol = Protocol(
        3 if readers else 1, 7, tuple(sorted(readers)) if readers else None, tuple(sorted(writers))
    )
    check_write_supported(protocol, uses_identity=False, where=where)
    return protocol


def _plan(
    schema: dict, metadata: Metadata, protocol: Protocol | None, targets: dict[str, str],
    replace_where: str | None, *, metadata_changed: bool = True,
) -> WritePlan:  # fmt: skip
    config = dict(metadata.configuration)
    rules = table_rules(schema, config)
    if replace_where is not None:
        rules.append(Rule("replaceWhere", replace_where, f"NOT coalesce(({replace_where}), false)"))
    compiled = [(rule, compile_rule(rule)) for rule in rules]
    generated = {name: compile_expression(expr, f"generated column {name}")
                 for name, expr in generated_columns(schema).items()}  # fmt: skip
    present = {t.lower() for t in targets.values()}
    filled = {*generated, *(c.name for c in identity_columns(schema))}  # computed by the writer
    missing = [
        f["name"] for f in schema["fields"]
        if f["name"].lower() not in present and f["name"] not in filled and not f.get("nullable", True)
    ]  # fmt: skip
    if missing:
        raise SchemaMismatchError(f"non-nullable column(s) {missing} are missing from the data")
    return WritePlan(schema, config, tuple(metadata.partition_columns), targets, compiled, generated,
                     protocol, metadata if metadata_changed else None)  # fmt: skip


def align(batch: pa.RecordBatch, plan: WritePlan) -> pa.Table:
    """A batch as rows of the table: table names and types, in table order, generated columns computed."""
    by_target = {plan.targets[name].lower(): batch.column(i) for i, name in enumerate(batch.schema.names)}
    arrays: dict[str, pa.Array] = {}
    for field in plan.schema["fields"]:
        name = field["name"]
        target = logical_type(field["type"])
        column = by_target.get(name.lower())
        if column is not None:
            arrays[name] = _to_type(column, field["type"], name)
        elif name not in plan.generated:
            arrays[name] = pa.nulls(batch.num_rows, target)
    table = pa.table(arrays) if arrays else pa.table({"_": pa.nulls(batch.num_rows)}).drop_columns(["_"])
    for name, expr in plan.generated.items():
        if name in table.column_names:
            continue  # given: checked against its expression with the other rules
        field = next(f for f in plan.schema["fields"] if f["name"] == name)
        value = evaluate(expr, table)
        table = table.append_column(name, _to_type(value, field["type"], name, cast_sql=True))
    return table.select([f["name"] for f in plan.schema["fields"]])


def _to_type(column: pa.Array, delta_type: Any, name: str, *, cast_sql: bool = False) -> pa.Array:
    """Incoming values in the column's Arrow type: dictionaries decoded, timestamps to microseconds in UTC
    (sub-microsecond digits dropped, as Delta stores microseconds), large types to their usual form, and
    structs matched field by field by name (any order or case, missing fields as nulls) at any depth, as
    ``resolve_column`` matches a file's columns on read."""
    target = logical_type(delta_type)
    if column.type == target:
        return column
    try:
        return resolve_column(column, len(column), delta_type, "none")
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
        kind = "generated value" if cast_sql else "column"
        raise SchemaMismatchError(
            f"{kind} {name!r} of type {column.type} cannot be written as {target}: {exc}"
        ) from None
