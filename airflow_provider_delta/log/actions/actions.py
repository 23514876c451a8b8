"""Actions of the transaction log as frozen dataclasses, and their Arrow shapes for vectorised replay.

Spec: "Actions". Field names follow the spec in snake_case; ``from_json``/``to_json`` map to the wire
names. Unknown fields are ignored on read ("Protocol Evolution": unrecognised fields are never required).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from ..base.arrow_utils import encode_uri_path
from ..base.errors import shown
from .action_values import INT32_MAX, int_field, str_field, string_map, strings_field


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
        return cls(
            int_field(d, "minReaderVersion", "protocol", lo=1, hi=INT32_MAX),
            int_field(d, "minWriterVersion", "protocol", lo=1, hi=INT32_MAX),
            strings_field(d, "readerFeatures", "protocol"),
            strings_field(d, "writerFeatures", "protocol"),
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
        fmt = d.get("format")
        if fmt is not None and not isinstance(fmt, dict):
            raise ValueError(f"metaData.format must be an object, not {shown(fmt)}")
        fmt = fmt or {}
        provider = fmt.get("provider")
        if provider is not None and not isinstance(provider, str):
            raise ValueError(f"metaData.format.provider must be a string, not {shown(provider)}")
        return cls(
            id=str_field(d, "id", "metaData"),
            schema_string=str_field(d, "schemaString", "metaData"),
            partition_columns=strings_field(d, "partitionColumns", "metaData") or (),
            configuration=string_map(d.get("configuration"), "metaData.configuration"),
            format=Format(provider or "parquet", string_map(fmt.get("options"), "metaData.format.options")),
            name=str_field(d, "name", "metaData", required=False),
            description=str_field(d, "description", "metaData", required=False),
            created_time=int_field(d, "createdTime", "metaData", required=False),
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

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> SetTransaction:
        return cls(
            str_field(d, "appId", "txn"),
            int_field(d, "version", "txn"),
            int_field(d, "lastUpdated", "txn", required=False),
        )

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

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> DomainMetadata:
        removed = d.get("removed")
        if removed is not None and not isinstance(removed, bool):
            raise ValueError(f"domainMetadata.removed must be true or false, not {shown(removed)}")
        return cls(
            str_field(d, "domain", "domainMetadata"),
            str_field(d, "configuration", "domainMetadata", required=False) or "",
            bool(removed),
        )

    def to_json(self) -> dict[str, Any]:
        return {"domain": self.domain, "configuration": self.configuration, "removed": self.removed}


def check_commit_info(d: dict[str, Any]) -> None:
    """The fields of ``commitInfo`` the core interprets have the types it needs (the rest is free-form):
    ``inCommitTimestamp`` ("In-Commit Timestamps"), ``timestamp``, ``operation`` and
    ``operationParameters`` (history, conflicts, tailing, and a concurrent VACUUM's cut-off)."""
    int_field(d, "inCommitTimestamp", "commitInfo", required=False)
    int_field(d, "timestamp", "commitInfo", required=False)
    str_field(d, "operation", "commitInfo", required=False)
    params = d.get("operationParameters")
    if params is not None and not isinstance(params, dict):
        raise ValueError(f"commitInfo.operationParameters must be an object, not {shown(params)}")


def check_sidecar(d: dict[str, Any]) -> None:
    """A ``sidecar`` action names a file ("Sidecar File Information"): its path must be a string."""
    str_field(d, "path", "sidecar")


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

# A file action's reconciliation key is its path and deletion vector ("Action Reconciliation"): every
# projection keeps them, or replay could not tell which action wins.
KEY_FIELDS = ("path", "deletionVector")


@dataclass(frozen=True)
class FileFields:
    """Which fields of ``add`` and ``remove`` actions a replay keeps: all of them unless told otherwise.

    A caller that needs only a few names them (VACUUM: paths, deletion vectors, deletion timestamps), and
    replay then reads only those leaf columns of checkpoints and drops the rest of each commit's lines as
    it parses them, so the ``stats`` that make up most of a checkpoint are never held in memory.
    ``KEY_FIELDS`` are always kept, and fields keep the spec's order whatever order they are named in.
    """

    add: tuple[str, ...] = tuple(name for name, _ in ADD_FIELDS)
    remove: tuple[str, ...] = tuple(name for name, _ in REMOVE_FIELDS)

    def __post_init__(self) -> None:
        object.__setattr__(self, "add", _in_spec_order("add", self.add, ADD_FIELDS))
        object.__setattr__(self, "remove", _in_spec_order("remove", self.remove, REMOVE_FIELDS))

    @property
    def complete(self) -> bool:
        """True when every field is kept: what checkpoints and writers need."""
        return len(self.add) == len(ADD_FIELDS) and len(self.remove) == len(REMOVE_FIELDS)

    @property
    def add_type(self) -> pa.StructType:
        return ADD if len(self.add) == len(ADD_FIELDS) else _struct_of(self.add, ADD_FIELDS)

    @property
    def remove_type(self) -> pa.StructType:
        return REMOVE if len(self.remove) == len(REMOVE_FIELDS) else _struct_of(self.remove, REMOVE_FIELDS)

    def kept(self, kind: str) -> tuple[str, ...] | None:
        """The fields kept of ``kind`` ("add"/"remove"); ``None`` when all are, or for other actions."""
        if kind == "add" and len(self.add) < len(ADD_FIELDS):
            return self.add
        if kind == "remove" and len(self.remove) < len(REMOVE_FIELDS):
            return self.remove
        return None


def _in_spec_order(kind: str, names: tuple[str, ...], spec: list[tuple[str, pa.DataType]]) -> tuple[str, ...]:
    known = [name for name, _ in spec]
    unknown = set(names) - set(known)
    if unknown:
        raise ValueError(f"{kind} actions have no field {sorted(unknown)}; known: {known}")
    wanted = set(names) | set(KEY_FIELDS)
    return tuple(name for name in known if name in wanted)


def _struct_of(names: tuple[str, ...], spec: list[tuple[str, pa.DataType]]) -> pa.StructType:
    return pa.struct([(name, type_) for name, type_ in spec if name in names])


ALL_FILE_FIELDS = FileFields()


# -- file actions as Python objects (what writers build) ----------------------------------------------------
def stats_num_records(stats: str | None) -> int | None:
    """``numRecords`` of a file's ``stats`` JSON, ``None`` when absent, unreadable or not a count."""
    if not stats:
        return None
    try:
        parsed = json.loads(stats)
    except ValueError:
        return None
    return num_records_of(parsed) if isinstance(parsed, dict) else None


def num_records_of(stats: dict[str, Any]) -> int | None:
    """``numRecords`` of parsed ``stats``: a count, else ``None``."""
    value = stats.get("numRecords")
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


@dataclass(frozen=True)
class AddFile:
    """The ``add`` action ("Add File and Remove File"). ``path`` is the decoded path relative to the root."""

    path: str
    size: int
    partition_values: dict[str, str | None] = field(default_factory=dict)
    modification_time: int = 0
    data_change: bool = True
    stats: str | None = None
    tags: dict[str, str] | None = None
    deletion_vector: dict[str, Any] | None = None
    base_row_id: int | None = None
    default_row_commit_version: int | None = None
    clustering_provider: str | None = None

    @property
    def num_records(self) -> int | None:
        """The file's physical row count from its statistics ("Per-file Statistics": ``numRecords``),
        ``None`` when it has none."""
        return stats_num_records(self.stats)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> AddFile:
        """From a row of ``Snapshot.files`` or a JSON ``add`` body (maps as dicts or key/value pairs)."""
        return cls._of(d["path"], d["size"], *(d.get(name, default) for name, default in _ADD_COLUMNS))

    @classmethod
    def from_table(cls, files: pa.Table) -> list[AddFile]:
        """Each row of ``files`` (``Snapshot.files``, or some of its rows) as ``from_dict`` makes it, read a
        column at a time: several times faster than converting row by row (an OPTIMIZE of 10,000 files)."""
        n, names = files.num_rows, set(files.column_names)
        columns = [files.column(name).to_pylist() if name in names else [default] * n
                   for name, default in (("path", None), ("size", None), *_ADD_COLUMNS)]  # fmt: skip
        return [cls._of(*values) for values in zip(*columns, strict=True)]

    @classmethod
    def _of(cls, path: str, size: Any, partition_values: Any, modification_time: Any, data_change: Any,
            stats: Any, tags: Any, deletion_vector: Any, base_row_id: Any, default_row_commit_version: Any,
            clustering_provider: Any) -> AddFile:  # fmt: skip
        """The add from its fields as Arrow or JSON give them (maps as dicts or key/value pairs)."""
        return cls(
            path=path,
            size=int(size),
            partition_values=_as_dict(partition_values) or {},
            modification_time=int(modification_time or 0),
            data_change=bool(data_change),
            stats=stats,
            tags=_as_dict(tags),
            deletion_vector=deletion_vector,
            base_row_id=base_row_id,
            default_row_commit_version=default_row_commit_version,
            clustering_provider=clustering_provider,
        )

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "path": encode_uri_path(self.path),
            "partitionValues": dict(self.partition_values),
            "size": self.size,
            "modificationTime": self.modification_time,
            "dataChange": self.data_change,
        }
        _put_optional(out, self, _ADD_OPTIONAL)
        return out

    def remove(self, deletion_timestamp: int, *, data_change: bool = True) -> RemoveFile:
        """The tombstone for this file, keeping its deletion vector so the pair reconciles (path, DV id)."""
        return RemoveFile(
            path=self.path,
            deletion_timestamp=deletion_timestamp,
            data_change=data_change,
            extended_file_metadata=True,
            partition_values=dict(self.partition_values),
            size=self.size,
            tags=self.tags,
            deletion_vector=self.deletion_vector,
            base_row_id=self.base_row_id,
            default_row_commit_version=self.default_row_commit_version,
            stats=self.stats,
        )


@dataclass(frozen=True)
class RemoveFile:
    """The ``remove`` action: a tombstone until ``delta.deletedFileRetentionDuration`` passes."""

    path: str
    deletion_timestamp: int | None = None
    data_change: bool = True
    extended_file_metadata: bool | None = None
    partition_values: dict[str, str | None] | None = None
    size: int | None = None
    tags: dict[str, str] | None = None
    deletion_vector: dict[str, Any] | None = None
    base_row_id: int | None = None
    default_row_commit_version: int | None = None
    stats: str | None = None

    @classmethod
    def from_table(cls, tombstones: pa.Table) -> list[RemoveFile]:
        """Each row of a table of ``remove`` fields (``Snapshot.tombstones``), a column at a time."""
        n, names = tombstones.num_rows, set(tombstones.column_names)
        fields = [name for name, _ in REMOVE_FIELDS]  # in the order of the fields below
        columns = [tombstones.column(f).to_pylist() if f in names else [None] * n for f in fields]
        return [
            cls(path, ts, True if change is None else bool(change), extended, _as_dict(pv), size,
                _as_dict(tags), dv, base, commit_version, stats)  # fmt: skip
            for path, ts, change, extended, pv, size, tags, dv, base, commit_version, stats in zip(
                *columns, strict=True
            )
        ]

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"path": encode_uri_path(self.path), "dataChange": self.data_change}
        if self.deletion_timestamp is not None:
            out["deletionTimestamp"] = self.deletion_timestamp
        _put_optional(out, self, _REMOVE_OPTIONAL)
        return out


@dataclass(frozen=True)
class AddCDCFile:
    """The ``cdc`` action ("Add CDC File"): a file of change data (rows with ``_change_type``) that a
    change-data-feed reader reads for its commit instead of inferring changes from its adds and removes.
    Never part of the table's state: ``dataChange`` is always false."""

    path: str
    size: int
    partition_values: dict[str, str | None] = field(default_factory=dict)
    tags: dict[str, str] | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "path": encode_uri_path(self.path),
            "partitionValues": dict(self.partition_values),
            "size": self.size,
            "dataChange": False,
        }
        if self.tags is not None:
            out["tags"] = dict(self.tags)
        return out


# The fields of an add after path and size, as Snapshot.files and the JSON name them, with the value a
# missing one takes (``AddFile._of`` arguments in this order).
_ADD_COLUMNS = (
    ("partitionValues", None),
    ("modificationTime", None),
    ("dataChange", True),
    ("stats", None),
    ("tags", None),
    ("deletionVector", None),
    ("baseRowId", None),
    ("defaultRowCommitVersion", None),
    ("clusteringProvider", None),
)
_ADD_OPTIONAL = (
    ("stats", "stats"),
    ("tags", "tags"),
    ("deletionVector", "deletion_vector"),
    ("baseRowId", "base_row_id"),
    ("defaultRowCommitVersion", "default_row_commit_version"),
    ("clusteringProvider", "clustering_provider"),
)
_REMOVE_OPTIONAL = (
    ("extendedFileMetadata", "extended_file_metadata"),
    ("partitionValues", "partition_values"),
    ("size", "size"),
    *_ADD_OPTIONAL[:5],
)


def _put_optional(out: dict[str, Any], action: Any, names: tuple[tuple[str, str], ...]) -> None:
    for wire, attr in names:
        value = getattr(action, attr)
        if value is not None:
            out[wire] = dict(value) if isinstance(value, dict) else value


def _as_dict(value: Any) -> dict[str, Any] | None:
    if value is None:
        return None
    if isinstance(value, dict):
        return dict(value)
    return {k: v for k, v in value}
