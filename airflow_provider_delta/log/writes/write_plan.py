"""Planning a write: the table the rows go into, checked before a single file is written.

One planner for every writer of rows (the Arrow writer, the Spark writer, OPTIMIZE, row-level changes):
it decides the schema (enforced, merged or replaced, ``schema_enforcement``), the protocol and metadata a
commit must carry (a new table's, a merged schema's, features asked for with ``delta.feature.*``), the table
configuration the files are written under (physical names, partition folders, codec, statistics: its
``file_layout``), the rules every row must satisfy (``table_rules``, plus ``replaceWhere``), the identity
and generated columns the writer computes, and the refusals (append-only, features this client cannot
write, schemas no data file can hold, IcebergCompat's rules). Engines differ only in how they run the plan:
the Arrow writer evaluates the rules over Arrow (``align``), Spark with Spark SQL on its executors.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import pyarrow as pa

from ..actions.actions import Metadata, Protocol
from ..base.errors import InvalidCommitError, SchemaMismatchError, UnsupportedFeatureError
from ..expressions.evaluate import evaluate
from ..expressions.expressions import Expr
from ..expressions.table_rules import Rule, compile_expression, compile_rule, generated_columns, table_rules
from ..features.configuration import TableConfiguration
from ..features.creation import assign_column_mapping, initial_actions, required_features
from ..features.iceberg_compat import check_table as check_iceberg_compat
from ..features.identity import IdentityColumn, columns_to_generate, identity_columns
from ..features.protocol import check_write_supported
from ..features.registry import FEATURE_PROPERTY_PREFIX, is_reader_feature, with_requirements
from ..schema.file_layout import FileLayout
from ..schema.physical_columns import logical_type, resolve_column, strip_type
from ..schema.schema import arrow_schema_to_delta
from ..schema.schema_enforcement import match_schema
from ..snapshot.snapshot import Snapshot

FEATURE_PREFIX = FEATURE_PROPERTY_PREFIX


@dataclass(frozen=True)
class WritePlan:
    """The table as the write leaves it, and how incoming columns map onto it."""

    config: TableConfiguration  # the protocol and metadata the files are written under
    targets: dict[str, str]  # incoming column name -> table column name
    rules: tuple[Rule, ...]  # what every written row must satisfy (SQL, any engine)
    identity: tuple[IdentityColumn, ...] = ()  # identity columns the writer generates values for
    protocol: Protocol | None = None  # set when the write creates the table or upgrades its protocol
    metadata: Metadata | None = None  # set when the write creates the table or changes its schema
    hidden_columns: tuple[str, ...] = ()  # row tracking's materialized columns, written after the table's

    @property
    def schema(self) -> dict:
        return self.config.schema

    @property
    def partition_columns(self) -> tuple[str, ...]:
        return tuple(self.config.metadata.partition_columns)

    @cached_property
    def layout(self) -> FileLayout:
        return self.config.file_layout(self.hidden_columns)

    @cached_property
    def generated(self) -> dict[str, str]:
        """Top-level generated columns the writer computes when the data omits them: name -> SQL."""
        return generated_columns(self.schema)

    @cached_property
    def compiled_rules(self) -> list[tuple[Rule, Expr]]:
        """The rules as trees, for writers that evaluate them over Arrow; refused by name when unsupported."""
        return [(rule, compile_rule(rule)) for rule in self.rules]

    @cached_property
    def compiled_generated(self) -> dict[str, Expr]:
        return {
            name: compile_expression(expr, f"generated column {name}")
            for name, expr in self.generated.items()
        }


def rewrite_plan(
    config: TableConfiguration, where: str, *, hidden_columns: tuple[str, ...] = ()
) -> WritePlan:
    """The plan of files written again under the table's own configuration (OPTIMIZE, the rewrite of a
    DELETE, UPDATE or MERGE): the table's columns by their names, its rules, nothing generated."""
    check_iceberg_compat(config, where)
    config.check_data_writable(where)
    targets = {f["name"]: f["name"] for f in config.schema["fields"]}
    rules = tuple(table_rules(config.schema, config.constraints))
    return WritePlan(config, targets, rules, hidden_columns=hidden_columns)


def check_rows_changeable(config: TableConfiguration, operation: str, where: str) -> None:
    """DELETE, UPDATE and MERGE (and an overwrite) change rows: refused on writer features this client
    cannot write and on append-only tables (Delta Spark refuses them on ``delta.appendOnly`` tables)."""
    config.check_write(where)
    if config.append_only:
        raise InvalidCommitError(f"{where} is append-only (delta.appendOnly=true): {operation} is refused")


def incoming_schema(schema: pa.Schema) -> dict:
    """The Delta schema of incoming Arrow data: every column nullable, as Delta Spark creates tables,
    without Arrow's or pandas' bookkeeping metadata."""
    try:
        return strip_type(arrow_schema_to_delta(schema), nullable=True)
    except ValueError as exc:
        raise SchemaMismatchError(f"the data cannot be written to a Delta table: {exc}") from None


def plan_write(
    snap: Snapshot | None,
    incoming: pa.Schema | dict,
    *,
    partition_by: list[str] | None,
    schema_mode: str | None,
    overwrite: bool,
    configuration: dict[str, str] | None,
    replace_where: str | None,
    what: str = "the data",
    option: str = "schema_mode='merge'",
) -> WritePlan:
    """Plan a write of rows with schema ``incoming`` (Arrow, or a Delta schema: a Spark DataFrame's) into
    ``snap``'s table, or into a new table when ``snap`` is None; refused by name before any file exists."""
    data = (
        incoming_schema(incoming) if isinstance(incoming, pa.Schema) else strip_type(incoming, nullable=True)
    )
    if snap is None:
        protocol, metadata = initial_actions(
            data, list(partition_by or []), dict(configuration or {}), None, None
        )
        check_write_supported(protocol, where="the new table")
        return _plan(
            metadata, protocol, {f["name"]: f["name"] for f in data["fields"]}, replace_where, "the new table"
        )
    where = f"table {snap.store.uri}"
    current = snap.table_configuration
    config = dict(current.properties)
    asked = _asked_features(configuration, config, where)
    if overwrite:
        check_rows_changeable(current, "an overwrite", where)
    else:
        current.check_write(where)
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
        names, merged = match_schema(snap.metadata.schema, data, merge=schema_mode == "merge", what=what,
                                     option=option)  # fmt: skip
        targets = dict(zip([f["name"] for f in data["fields"]], names, strict=True))
        schema = merged or snap.metadata.schema
    metadata = None
    if merged is not None:
        if current.column_mapping_mode != "none":
            config = assign_column_mapping(schema, config)
        metadata = dataclasses.replace(
            snap.metadata, schema_string=json.dumps(schema, separators=(",", ":")), configuration=config,
            partition_columns=tuple(partitions),
        )  # fmt: skip
        _check_partitions(schema, partitions)
    protocol = _protocol_with(snap, required_features(schema, config), asked, where)
    return _plan(metadata or snap.metadata, protocol, targets, replace_where, where,
                 metadata_changed=metadata is not None, base=snap.protocol, previous=current)  # fmt: skip


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
    have = set(snap.table_configuration.writer_features)
    missing = [f for f in snap.table_configuration.unsupported(needed) if f not in asked]
    if missing:
        ask = ", ".join(f"{FEATURE_PREFIX + f!r}: 'supported'" for f in missing)
        raise UnsupportedFeatureError(
            f"the data needs table feature(s) {', '.join(missing)} that {where} does not enable; ask "
            f"for them with configuration={{{ask}}}",
            features=tuple(missing),
        )
    new = with_requirements(asked) - have  # a feature asked for brings those it requires (the registry's)
    if not new:
        return None
    writers = have | new
    readers = {f for f in set(snap.table_configuration.reader_features) | writers if is_reader_feature(f)}
    protocol = Protocol(
        3 if readers else 1, 7, tuple(sorted(readers)) if readers else None, tuple(sorted(writers))
    )
    check_write_supported(protocol, where=where)
    return protocol


def _plan(
    metadata: Metadata, protocol: Protocol | None, targets: dict[str, str], replace_where: str | None,
    where: str, *, metadata_changed: bool = True, base: Protocol | None = None,
    previous: TableConfiguration | None = None,
) -> WritePlan:  # fmt: skip
    effective = protocol or base
    assert effective is not None
    config = TableConfiguration(effective, metadata)
    # "Iceberg Compatibility V1/V2": types, nested ids, partition spec, type changes, deletion vectors.
    check_iceberg_compat(config, where, previous=previous)
    config.check_data_writable(where)
    rules = table_rules(config.schema, config.constraints)
    if replace_where is not None:
        rules.append(Rule("replaceWhere", replace_where, f"NOT coalesce(({replace_where}), false)"))
    present = {t.lower() for t in targets.values()}
    filled = {*generated_columns(config.schema), *(c.name for c in identity_columns(config.schema))}
    missing = [
        f["name"] for f in config.schema["fields"]
        if f["name"].lower() not in present and f["name"] not in filled and not f.get("nullable", True)
    ]  # fmt: skip
    if missing:
        raise SchemaMismatchError(f"non-nullable column(s) {missing} are missing from the data")
    # "Identity Columns": the columns the data leaves out are generated from each one's mark (values for a
    # column that does not allow explicit inserts are refused by name before a file is written).
    identity = tuple(columns_to_generate(config.schema, list(targets.values()), where))
    return WritePlan(
        config, targets, tuple(rules), identity, protocol, metadata if metadata_changed else None
    )


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
        elif name not in plan.compiled_generated:
            arrays[name] = pa.nulls(batch.num_rows, target)
    table = pa.table(arrays) if arrays else pa.table({"_": pa.nulls(batch.num_rows)}).drop_columns(["_"])
    for name, expr in plan.compiled_generated.items():
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
