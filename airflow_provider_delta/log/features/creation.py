"""Table creation: the first protocol and metaData actions of a new table.

Picks the lowest protocol the table's features need, as Delta Spark does ("Protocol Evolution",
"Writer Version Requirements"): 1/2 for a plain table, legacy versions while they suffice, table
features (3/7) otherwise or when ``delta.feature.*`` properties ask for them. Under column mapping every
field gets an id and a physical name ("Column Mapping").
"""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

import pyarrow as pa

from ..actions.actions import Metadata, Protocol
from ..base.arguments import str_arg, str_list_arg, str_map_arg
from ..base.errors import InvalidCommitError
from ..schema.schema import arrow_schema_to_delta, column_mapping_mode
from .protocol import required_protocol
from .row_tracking import MATERIALIZED_ROW_COMMIT_VERSION, MATERIALIZED_ROW_ID

_PROPERTY_FEATURES = {
    ("delta.appendOnly", "true"): "appendOnly",
    ("delta.enableChangeDataFeed", "true"): "changeDataFeed",
    ("delta.enableDeletionVectors", "true"): "deletionVectors",
    ("delta.enableInCommitTimestamps", "true"): "inCommitTimestamp",
    ("delta.checkpointPolicy", "v2"): "v2Checkpoint",
    ("delta.enableTypeWidening", "true"): "typeWidening",
    ("delta.enableRowTracking", "true"): "rowTracking",
}
# Features that need another ("Row Tracking", "Clustered Table": domainMetadata is required).
_DEPENDENCIES = {"rowTracking": "domainMetadata", "clustering": "domainMetadata"}


def required_features(schema: dict[str, Any], configuration: dict[str, str]) -> set[str]:
    """Features a table with this schema and these properties uses."""
    text = json.dumps(schema)
    features = {f for (k, v), f in _PROPERTY_FEATURES.items() if str(configuration.get(k, "")).lower() == v}
    if '"delta.invariants"' in text:
        features.add("invariants")
    if any(k.startswith("delta.constraints.") for k in configuration):
        features.add("checkConstraints")
    if '"delta.generationExpression"' in text:
        features.add("generatedColumns")
    if '"delta.identity.' in text:
        features.add("identityColumns")
    if '"timestamp_ntz"' in text:
        features.add("timestampNtz")
    if '"variant"' in text:
        features.add("variantType")
    if column_mapping_mode(configuration) != "none":
        features.add("columnMapping")
    for key, value in configuration.items():
        if key.startswith("delta.feature.") and value.lower() in ("supported", "enabled"):
            features.add(key[len("delta.feature.") :])
    features |= {_DEPENDENCIES[f] for f in features if f in _DEPENDENCIES}
    return features


def _name_row_tracking_columns(configuration: dict[str, str]) -> None:
    """Where row tracking is supported, the hidden columns that would hold materialized row ids and
    commit versions get unique names, as Delta Spark names them ("Row Tracking")."""
    configuration.setdefault(MATERIALIZED_ROW_ID, f"_row-id-col-{uuid.uuid4()}")
    configuration.setdefault(MATERIALIZED_ROW_COMMIT_VERSION, f"_row-commit-version-col-{uuid.uuid4()}")


def _assign_column_mapping(fields: list[dict[str, Any]], next_id: int) -> int:
    for f in fields:
        md = f.setdefault("metadata", {})
        if "delta.columnMapping.id" not in md:
            next_id += 1
            md["delta.columnMapping.id"] = next_id
        md.setdefault("delta.columnMapping.physicalName", f"col-{uuid.uuid4()}")
        t = f["type"]
        while isinstance(t, dict) and t.get("type") in ("array", "map"):
            t = t.get("elementType") or t.get("valueType")
        if isinstance(t, dict) and t.get("type") == "struct":
            next_id = _assign_column_mapping(t["fields"], next_id)
    return next_id


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
    features = required_features(delta_schema, configuration)
    if "columnMapping" in features:
        max_id = _assign_column_mapping(
            delta_schema["fields"], int(configuration.get("delta.columnMapping.maxColumnId", 0))
        )
        configuration["delta.columnMapping.maxColumnId"] = str(max_id)
    if "rowTracking" in features:
        _name_row_tracking_columns(configuration)
    explicit = any(k.startswith("delta.feature.") for k in configuration)
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
    return protocol, metadata
