"""Actions of the transaction log as frozen dataclasses, and their Arrow shapes for vectorised replay.

Spec: "Actions". Field names follow the spec in snake_case; ``from_json``/``to_json`` map to the wire
names. Unknown fields are ignored on read ("Protocol Evolution": unrecognised fields are never required).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa


@dataclass(frozen=True)
class Format:
    provider: str = "parquet"
    options: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Protocol:
    """The ``protocol`` action: reader/writer versions and, from 3/7, named table features."""

    min_reader_version: int
    min_writer_version: int
    reader_features: tuple[str, ...] | None = None
    writer_features: tuple[str, ...] | None = None

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Protocol:
        rf, wf = d.get("readerFeatures"), d.get("writerFeatures")
        return cls(
            int(d["minReaderVersion"]),
            int(d["minWriterVersion"]),
            None if rf is None else tuple(rf),
            None if wf is None else tuple(wf),
        )

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "minReaderVersion": self.min_reader_version,
            "minWriterVersion": self.min_writer_version,
        }
        if self.reader_features is not None:
            out["readerFeatures"] = list(self.reader_features)
        if self.writer_features is not None:
            out["writerFeatures"] = list(self.writer_features)
        return out


@dataclass(frozen=True)
class Metadata:
    """The ``metaData`` action: schema, partition columns and table configuration."""

    id: str
    schema_string: str
    partition_columns: tuple[str, ...] = ()
    configuration: dict[str, str] = field(default_factory=dict)
    format: Format = field(default_factory=Format)
    name: str | None = None
    description: str | None = None
    created_time: int | None = None

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Metadata:
        fmt = d.get("format") or {}
        return cls(
            id=d["id"],
            schema_string=d["schemaString"],
            partition_columns=tuple(d.get("partitionColumns") or ()),
            configuration={k: v for k, v in (d.get("configuration") or {}).items()},
            format=Format(fmt.get("provider") or "parquet", dict(fmt.get("options") or {})),
            name=d.get("name"),
            description=d.get("description"),
            created_time=d.get("createdTime"),
        )

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "id": self.id,
            "format": {"provider": self.format.provider, "options": dict(self.format.options)},
            "schemaString": self.schema_string,
            "partitionColumns": list(self.partition_columns),
            "configuration": dict(self.configuration),
        }
        if self.name is not None:
            out["name"] = self.name
        if self.description is not None:
            out["description"] = self.description
        if self.created_time is not None:
            out["createdTime"] = self.created_time
        return out

    @property
    def schema(self) -> dict[str, Any]:
        """The parsed ``schemaString`` ("Schema Serialization Format")."""
        return json.loads(self.schema_string)


@dataclass(frozen=True)
class SetTransaction:
    """The ``txn`` action: an application's progress, for idempotent writes ("Transaction Identifiers")."""

    app_id: str
    version: int
    last_updated: int | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"appId": self.app_id, "version": self.version}
        if self.last_updated is not None:
            out["lastUpdated"] = self.last_updated
        return out


@dataclass(frozen=True)
class DomainMetadata:
    domain: str
    configuration: str
    removed: bool = False

    def to_json(self) -> dict[str, Any]:
        return {"domain": self.domain, "configuration": self.configuration, "removed": self.removed}


# -- Arrow shapes ---------------------------------------------------------------------------------------
# The shape of a file action in Arrow. Replay normalises commits and checkpoints to these, so the
# reconciled file list (``Snapshot.files``) has one stable schema whatever wrote the table.
STRING_MAP = pa.map_(pa.string(), pa.string())

DELETION_VECTOR = pa.struct(
    [
        ("storageType", pa.string()),
        ("pathOrInlineDv", pa.string()),
        ("offset", pa.int32()),
        ("sizeInBytes", pa.int32()),
        ("cardinality", pa.int64()),
        ("maxRowIndex", pa.int64()),
    ]
)

ADD_FIELDS: list[tuple[str, pa.DataType]] = [
    ("path", pa.string()),
    ("partitionValues", STRING_MAP),
    ("size", pa.int64()),
    ("modificationTime", pa.int64()),
    ("dataChange", pa.bool_()),
    ("stats", pa.string()),
    ("tags", STRING_MAP),
    ("deletionVector", DELETION_VECTOR),
    ("baseRowId", pa.int64()),
    ("defaultRowCommitVersion", pa.int64()),
    ("clusteringProvider", pa.string()),
]
ADD = pa.struct(ADD_FIELDS)

REMOVE_FIELDS: list[tuple[str, pa.DataType]] = [
    ("path", pa.string()),
    ("deletionTimestamp", pa.int64()),
    ("dataChange", pa.bool_()),
    ("extendedFileMetadata", pa.bool_()),
    ("partitionValues", STRING_MAP),
    ("size", pa.int64()),
    ("tags", STRING_MAP),
    ("deletionVector", DELETION_VECTOR),
    ("baseRowId", pa.int64()),
    ("defaultRowCommitVersion", pa.int64()),
    ("stats", pa.string()),
]
REMOVE = pa.struct(REMOVE_FIELDS)

# Fields whose JSON objects have arbitrary keys: Arrow's JSON reader cannot parse maps directly, so replay
# reads them as inferred structs and converts (see ``replay``).
MAP_FIELDS = ("partitionValues", "tags")
