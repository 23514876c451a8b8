"""Every table feature, one record each: what the protocol says of it and what this client does with it.

The newest protocol ("Table Features", "Valid Feature Names in Table Features") and Delta Spark's own
feature list name each feature once; so does this module. A record says whether the feature binds readers
and writers or writers only, the legacy protocol versions that imply it, the table property that turns it
on, the features it requires, how a table shows that it is in use, and this client's disposition: it reads
and writes such tables, reads them but refuses to write, or refuses them by name. Protocol checks
(``protocol``), table creation (``creation``), feature upgrades and every writer take their answers from
here, so adding a feature is adding a record (as delta-kernel-rs's ``table_features`` module is built).
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping
from dataclasses import dataclass


class Kind(enum.Enum):
    """Who must implement a feature ("Table Features"): readers and writers, or writers alone."""

    READER_WRITER = "readers and writers"
    WRITER = "writers only"


class Disposition(enum.Enum):
    """What this client does with a table that supports the feature."""

    READ_WRITE = "reads and writes"
    READ_ONLY = "reads; refuses to write"
    REFUSED = "refuses to read and write"


@dataclass(frozen=True)
class Usage:
    """What a version's metadata shows, in the terms the in-use checks need (built once per version by
    ``TableConfiguration``): its properties and the marks its schema carries."""

    properties: Mapping[str, str]
    schema_marks: frozenset[str] = frozenset()

    def true(self, key: str) -> bool:
        """Whether a boolean property is set to true (Delta Spark reads "true" case-insensitively)."""
        return str(self.properties.get(key, "")).strip().lower() == "true"


# Marks a schema can carry, found by one walk of the schema (``TableConfiguration``).
IDENTITY = "identity"
GENERATED = "generated"
INVARIANTS = "invariants"
DEFAULTS = "defaults"
TIMESTAMP_NTZ = "timestamp_ntz"
VARIANT = "variant"
COLLATIONS = "collations"
TYPE_CHANGES = "type_changes"


def _on(key: str, value: str = "true") -> Callable[[Usage], bool]:
    return lambda usage: str(usage.properties.get(key, "")).strip().lower() == value


def _mark(mark: str) -> Callable[[Usage], bool]:
    return lambda usage: mark in usage.schema_marks


def _always(usage: Usage) -> bool:
    return True


@dataclass(frozen=True)
class TableFeature:
    """One table feature: the protocol's facts about it and this client's disposition."""

    name: str
    kind: Kind
    disposition: Disposition
    legacy: tuple[int, int] | None = None  # (reader, writer) versions that imply it before table features
    enabled_by: str | None = None  # "key=value" of the property that turns it on, if any
    requires: tuple[str, ...] = ()
    in_use: Callable[[Usage], bool] | None = None  # default: the enabling property is set, else always
    spec: str = ""  # the protocol section, or "Delta Spark" when only Delta Spark's code names it
    note: str = ""  # why we refuse it, or what our writers do differently
    preview_of: str | None = None  # the feature this is Delta Spark's preview name of
    commits_through_catalog: bool = False  # commits go to a catalog or coordinator, not put-if-absent

    def __post_init__(self) -> None:
        if self.in_use is None:
            check = _always
            if self.enabled_by is not None:
                key, _, value = self.enabled_by.partition("=")
                check = _on(key, value)
            object.__setattr__(self, "in_use", check)

    @property
    def shown_by_metadata(self) -> bool:
        """Whether the metadata alone shows the feature in use (a property or a schema mark): such features
        are added when a table is created with that metadata. Others are asked for by name."""
        return self.in_use is not _always and self.preview_of is None

    @property
    def reader(self) -> bool:
        return self.kind is Kind.READER_WRITER

    @property
    def reads(self) -> bool:
        return self.disposition is not Disposition.REFUSED

    @property
    def writes(self) -> bool:
        return self.disposition is Disposition.READ_WRITE


RW, W = Kind.READER_WRITER, Kind.WRITER
READ_WRITE, READ_ONLY, REFUSED = Disposition.READ_WRITE, Disposition.READ_ONLY, Disposition.REFUSED

_RECORDS = (
    # -- legacy features: implied by protocol versions before table features ("Writer Version Requirements")
    TableFeature("appendOnly", W, READ_WRITE, (1, 2), "delta.appendOnly=true",
                 spec="Append-only Tables"),
    TableFeature("invariants", W, READ_WRITE, (1, 2), in_use=_mark(INVARIANTS), spec="Column Invariants",
                 note="rows are checked by the writers that evaluate SQL (Arrow and Spark)"),
    TableFeature("checkConstraints", W, READ_WRITE, (1, 3),
                 in_use=lambda u: any(k.startswith("delta.constraints.") for k in u.properties),
                 spec="CHECK Constraints"),
    TableFeature("changeDataFeed", W, READ_WRITE, (1, 4), "delta.enableChangeDataFeed=true",
                 spec="Add CDC File"),
    TableFeature("generatedColumns", W, READ_WRITE, (1, 4), in_use=_mark(GENERATED),
                 spec="Generated Columns"),
    TableFeature("columnMapping", RW, READ_WRITE, (2, 5),
                 in_use=lambda u: str(u.properties.get("delta.columnMapping.mode", "none")).lower() != "none",
                 spec="Column Mapping"),
    TableFeature("identityColumns", W, READ_WRITE, (1, 6), in_use=_mark(IDENTITY), spec="Identity Columns"),
    # -- table features (reader 3 / writer 7)
    TableFeature("deletionVectors", RW, READ_WRITE, None, "delta.enableDeletionVectors=true",
                 spec="Deletion Vectors"),
    TableFeature("timestampNtz", RW, READ_WRITE, None, in_use=_mark(TIMESTAMP_NTZ),
                 spec="Timestamp without timezone (TimestampNtz)"),
    TableFeature("v2Checkpoint", RW, READ_WRITE, None, "delta.checkpointPolicy=v2",
                 spec="V2 Checkpoint Table Feature"),
    TableFeature("vacuumProtocolCheck", RW, READ_WRITE, None, spec="VACUUM Protocol Check"),
    TableFeature("domainMetadata", W, READ_WRITE, None, spec="Domain Metadata"),
    TableFeature("rowTracking", W, READ_WRITE, None, "delta.enableRowTracking=true",
                 requires=("domainMetadata",),
                 spec="Row Tracking"),
    TableFeature("clustering", W, READ_WRITE, None, requires=("domainMetadata",), spec="Clustered Table"),
    TableFeature("inCommitTimestamp", W, READ_WRITE, None, "delta.enableInCommitTimestamps=true",
                 spec="In-Commit Timestamps"),
    TableFeature("typeWidening", RW, READ_WRITE, None, "delta.enableTypeWidening=true",
                 in_use=lambda u: u.true("delta.enableTypeWidening") or TYPE_CHANGES in u.schema_marks,
                 spec="Type Widening"),
    TableFeature("typeWidening-preview", RW, READ_WRITE, None,
                 in_use=lambda u: u.true("delta.enableTypeWidening") or TYPE_CHANGES in u.schema_marks,
                 spec="Delta Spark", preview_of="typeWidening"),
    TableFeature("variantType", RW, READ_WRITE, None, in_use=_mark(VARIANT), spec="Variant Data Type",
                 note="our writers write variants unshredded and give them no min/max statistics"),
    TableFeature("variantType-preview", RW, READ_WRITE, None, in_use=_mark(VARIANT), spec="Delta Spark",
                 preview_of="variantType"),
    TableFeature("variantShredding", RW, READ_WRITE, None, "delta.enableVariantShredding=true",
                 requires=("variantType",), spec="Variant Shredding",
                 note="shredded files are read; our writers write unshredded, which the spec allows"),
    TableFeature("variantShredding-preview", RW, READ_WRITE, None, requires=("variantType",),
                 in_use=_on("delta.enableVariantShredding"), spec="Delta Spark",
                 preview_of="variantShredding"),
    TableFeature("catalogManaged", RW, REFUSED, None, requires=("inCommitTimestamp", "vacuumProtocolCheck"),
                 spec="Catalog-managed tables", commits_through_catalog=True,
                 note="reads and commits must go through the table's catalog, which this client has no "
                 "committer for (see docs/architecture.md, 'The committer seam')"),
    TableFeature("catalogOwned-preview", RW, REFUSED, None, requires=("inCommitTimestamp",),
                 commits_through_catalog=True, spec="Delta Spark", preview_of="catalogManaged",
                 note="the preview of catalogManaged: commits go through the table's catalog"),
    TableFeature("icebergCompatV1", W, READ_WRITE, None, "delta.enableIcebergCompatV1=true",
                 requires=("columnMapping",),
                 spec="Iceberg Compatibility V1",
                 note="our writers follow its writer requirements (iceberg_compat): column mapping, no "
                 "deletion vectors, partition values in the data files, numRecords in every add, no "
                 "map, array or void columns"),
    TableFeature("icebergCompatV2", W, READ_WRITE, None, "delta.enableIcebergCompatV2=true",
                 requires=("columnMapping",),
                 spec="Iceberg Compatibility V2",
                 note="our writers follow its writer requirements (iceberg_compat): column mapping, "
                 "element/key/value ids, no active deletion vectors, partition values in the data "
                 "files, numRecords in every add, int64 timestamps, Iceberg's types"),
    TableFeature("icebergCompatV3", W, READ_ONLY, None, "delta.enableIcebergCompatV3=true",
                 requires=("columnMapping", "rowTracking"),
                 spec="Delta Spark", note="not yet in the protocol text"),
    TableFeature("icebergWriterCompatV1", W, READ_ONLY, None, "delta.enableIcebergWriterCompatV1=true",
                 requires=("icebergCompatV2",),
                 spec="Delta Spark", note="not yet in the protocol text"),
    TableFeature("allowColumnDefaults", W, READ_ONLY, None, in_use=_mark(DEFAULTS), spec="Default Columns",
                 note="writers must fill omitted columns with their SQL default expressions, which this "
                 "client does not evaluate"),
    TableFeature("checkpointProtection", W, READ_ONLY, None, spec="Delta Spark",
                 note="log cleanup must keep checkpoints a feature downgrade relies on; this client does "
                 "not yet follow that rule"),
    TableFeature("collations-preview", RW, REFUSED, None, requires=("domainMetadata",),
                 in_use=_mark(COLLATIONS),
                 spec="Delta Spark", note="strings compared under a collation: filters and statistics "
                 "would be misread"),
    TableFeature("coordinatedCommits-preview", W, REFUSED, None,
                 requires=("inCommitTimestamp", "vacuumProtocolCheck"), spec="Delta Spark",
                 note="commits go through a commit coordinator this client has no committer for",
                 commits_through_catalog=True),
    TableFeature("redirectReaderWriter-preview", RW, REFUSED, None, spec="Delta Spark",
                 note="the table redirects to another location"),
    TableFeature("redirectWriterOnly-preview", W, READ_ONLY, None, spec="Delta Spark",
                 note="the table redirects writes to another location"),
    TableFeature("materializePartitionColumns", W, READ_WRITE, None,
                 "delta.enableMaterializePartitionColumnsFeature=true", spec="Delta Spark",
                 note="our writers write partition values into the data files too, after the other columns"),
)  # fmt: skip

FEATURES: dict[str, TableFeature] = {f.name: f for f in _RECORDS}
FEATURE_PROPERTY_PREFIX = "delta.feature."


def feature(name: str) -> TableFeature | None:
    """The record of ``name``; ``None`` for a name neither the protocol nor Delta Spark gives a feature."""
    return FEATURES.get(name)


def legacy_features() -> dict[str, tuple[int, int]]:
    """Features implied by legacy protocol versions, with the (reader, writer) versions that imply them."""
    return {f.name: f.legacy for f in FEATURES.values() if f.legacy is not None}


def asked_by_properties(properties: Mapping[str, str]) -> set[str]:
    """Features named by ``delta.feature.<name>=supported`` (or ``enabled``) properties."""
    return {
        key[len(FEATURE_PROPERTY_PREFIX) :]
        for key, value in properties.items()
        if key.startswith(FEATURE_PROPERTY_PREFIX) and str(value).lower() in ("supported", "enabled")
    }


def with_requirements(names: set[str]) -> set[str]:
    """``names`` and every feature they require, transitively."""
    out = set(names)
    todo = list(names)
    while todo:
        record = FEATURES.get(todo.pop())
        for needed in record.requires if record else ():
            if needed not in out:
                out.add(needed)
                todo.append(needed)
    return out


def used_by(usage: Usage) -> set[str]:
    """Features the metadata shows in use: properties that enable them, schema marks that need them."""
    return {f.name for f in FEATURES.values() if f.shown_by_metadata and f.in_use(usage)}


def is_reader_feature(name: str) -> bool:
    """Whether ``name`` must be listed among reader features too; unknown names are treated as writer-only
    (a reader feature we do not know is refused from the reader list itself)."""
    record = FEATURES.get(name)
    return record is not None and record.reader
