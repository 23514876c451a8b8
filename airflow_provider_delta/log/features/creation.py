"""Table creation: the first protocol and metaData actions of a new table.

Picks the lowest protocol the table's features need, as Delta Spark does ("Protocol Evolution",
"Writer Version Requirements"): 1/2 for a plain table, legacy versions while they suffice, table
features (3/7) otherwise or when ``delta.feature.*`` properties ask for them. Under column mapping every
field gets an id and a physical name ("Column Mapping"); under IcebergCompatV2 every array element and map
key and value an id too, as Delta Spark numbers them (``iceberg_compat``). A table that turns IcebergCompat
on gets column mapping ``name`` unless a mode is given, and is refused by name when it breaks a rule.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Mapping
from typing import Any

import pyarrow as pa

from ..actions.actions import Metadata, Protocol
from ..base.arguments import str_arg, str_list_arg, str_map_arg
from ..base.errors import InvalidCommitError
from ..schema.schema import CM_ID, CM_PHYSICAL_NAME, arrow_schema_to_delta
from . import iceberg_compat
from .configuration import MAX_COLUMN_ID, TableConfiguration, schema_marks
from .properties import ENABLE_ICEBERG_COMPAT, bool_property
from .protocol import required_protocol
from .registry import Usage, asked_by_properties, used_by, with_requirements
from .row_tracking import MATERIALIZED_ROW_COMMIT_VERSION, MATERIALIZED_ROW_ID


def required_features(schema: dict[str, Any], configuration: Mapping[str, str]) -> set[str]:
    """Features a table with this schema and these properties uses (the registry's in-use checks), those
    its ``delta.feature.<name>`` properties ask for, and every feature they require."""
    usage = Usage(configuration, schema_marks(schema))
    return with_requirements(used_by(usage) | asked_by_properties(configuration))


def _name_row_tracking_columns(configuration: dict[str, str]) -> None:
    """Where row tracking is supported, the hidden columns that would hold materialized row ids and
    commit versions get unique names, as Delta Spark names them ("Row Tracking")."""
    configuration.setdefault(MATERIALIZED_ROW_ID, f"_row-id-col-{uuid.uuid4()}")
    configuration.setdefault(MATERIALIZED_ROW_COMMIT_VERSION, f"_row-commit-version-col-{uuid.uuid4()}")


def assign_column_mapping(schema: dict[str, Any], configuration: Mapping[str, str]) -> dict[str, str]:
    """Give every field without one a column id and a physical name, in place ("Writer Requirements for
    Column Mapping"), and under IcebergCompatV2 every array element and map key and value without one a
    nested id after them (``iceberg_compat.assign_nested_ids``); returns the configuration with the new
    ``delta.columnMapping.maxColumnId``. Used when a table is created and when a write adds columns."""
    # Nested ids count too (Delta Spark's findMaxColumnId): a new id never repeats one the schema holds.
    next_id = max(int(configuration.get(MAX_COLUMN_ID, 0)), iceberg_compat.max_id(schema))

    def visit(fields: list[dict[str, Any]]) -> None:
        nonlocal next_id
        for f in fields:
            md = f.setdefault("metadata", {})
            if CM_ID not in md:
                next_id += 1
                md[CM_ID] = next_id
            md.setdefault(CM_PHYSICAL_NAME, f"col-{uuid.uuid4()}")
            t = f["type"]
            while isinstance(t, dict) and t.get("type") in ("array", "map"):
                t = t.get("elementType") or t.get("valueType")
            if isinstance(t, dict) and t.get("type") == "struct":
                visit(t["fields"])

    visit(schema["fields"])
    if bool_property(configuration, ENABLE_ICEBERG_COMPAT[2]):
        next_id = iceberg_compat.assign_nested_ids(schema, next_id)
    return {**configuration, MAX_COLUMN_ID: str(next_id)}


def initial_actions(
    schema: pa.Schema | dict[str, Any],
    partition_by: list[str] | str | None,
    configuration: dict[str, Any] | None,
    name: str | None,
    description: str | None,
) -> tuple[Protocol, Metadata]:
    # Checked here, before anything is written: a wrong argument names itself instead of failing inside
    # the commit (or being written as a table property readers misread).
    if not isinstance(schema, pa.Schema | dict):
        kind = type(schema).__name__
        raise TypeError(f"schema must be a pyarrow.Schema or a Delta schema dict, not {kind}")
    partition_by = str_list_arg(partition_by, "partition_by")
    configuration = str_map_arg(configuration, "configuration", stringify=True)
    name = str_arg(name, "name", optional=True)
    description = str_arg(description, "description", optional=True)
    delta_schema = (
        json.loads(json.dumps(schema)) if isinstance(schema, dict) else arrow_schema_to_delta(schema)
    )
    top = {f["name"]: f for f in delta_schema["fields"]}
    for col in partition_by:
        if col not in top:
            raise InvalidCommitError(
                f"partition column {col!r} is not a column of the schema ({sorted(top)})"
            )
        if isinstance(top[col]["type"], dict):
            raise InvalidCommitError(f"partition column {col!r} must have a primitive type")
    configuration = iceberg_compat.creation_properties(configuration)
    features = required_features(delta_schema, configuration)
    if "columnMapping" in features:
        configuration = assign_column_mapping(delta_schema, configuration)
    if "rowTracking" in features:
        _name_row_tracking_columns(configuration)
    explicit = bool(asked_by_properties(configuration))
    protocol = required_protocol(features, explicit=explicit)
    metadata = Metadata(
        id=str(uuid.uuid4()),
        schema_string=json.dumps(delta_schema, separators=(",", ":")),
        partition_columns=tuple(partition_by),
        configuration=configuration,
        name=name,
        description=description,
        created_time=int(time.time() * 1000),
    )
    iceberg_compat.check_table(TableConfiguration(protocol, metadata), "the new table")
    return protocol, metadata
