"""Protocol versions and table features this implementation supports, in one place.

Spec: "Protocol Evolution" and the table-features extension of reader version 3 / writer version 7.
A client must refuse a table whose protocol it does not implement, naming what is missing, instead of
silently misreading it.
"""

from __future__ import annotations

from ..actions.actions import Protocol
from ..base.errors import UnsupportedFeatureError

MAX_READER_VERSION = 3

# Reader features whose read side we implement. typeWidening only changes the schema the log declares;
# applying it to data files belongs to the data reader. Variants are read as the spec's two binaries,
# shredded files put back together (``variant``).
SUPPORTED_READER_FEATURES: frozenset[str] = frozenset(
    {
        "columnMapping",
        "deletionVectors",
        "timestampNtz",
        "v2Checkpoint",
        "vacuumProtocolCheck",
        "typeWidening",
        "typeWidening-preview",
        "variantType",
        "variantType-preview",
        "variantShredding",
        "variantShredding-preview",
    }
)


def reader_features(protocol: Protocol) -> frozenset[str]:
    """The reader features a protocol implies, including those implied by legacy versions."""
    if protocol.min_reader_version >= 3:
        return frozenset(protocol.reader_features or ())
    if protocol.min_reader_version == 2:
        return frozenset({"columnMapping"})
    return frozenset()


def check_read_supported(protocol: Protocol, *, where: str = "this table") -> None:
    """Raise :class:`UnsupportedFeatureError` unless every reader requirement of ``protocol`` is met."""
    if protocol.min_reader_version > MAX_READER_VERSION or protocol.min_reader_version < 1:
        raise UnsupportedFeatureError(
            f"{where} requires Delta reader version {protocol.min_reader_version}; "
            f"this client reads versions 1 to {MAX_READER_VERSION}",
            features=(f"readerVersion{protocol.min_reader_version}",),
        )
    if protocol.min_reader_version == 3 and protocol.reader_features is None:
        raise UnsupportedFeatureError(
            f"{where} declares reader version 3 without a readerFeatures list", features=("readerFeatures",)
        )
    missing = sorted(reader_features(protocol) - SUPPORTED_READER_FEATURES)
    if missing:
        raise UnsupportedFeatureError(
            f"{where} uses reader feature(s) {', '.join(missing)} that this client does not support "
            f"(supported: {', '.join(sorted(SUPPORTED_READER_FEATURES))})",
            features=tuple(missing),
        )


# Writer features whose rules the core's commits follow. Not here, so refused on write:
# allowColumnDefaults, icebergCompat*, catalog-managed tables. checkConstraints, invariants and
# generatedColumns need SQL evaluation: the core accepts data for such tables only from a caller that
# says it checked the rows (the Spark writer does). identityColumns: writers generate the values
# (``identity``) and the transaction moves the marks; rowTracking: the transaction assigns row ids
# (``row_tracking``); clustering: commits keep the domain and give clustering columns statistics
# (``clustering``); variant types: our writers write the two binaries unshredded, which the spec allows
# on tables that enable shredding too, and no min/max statistics for them.
SUPPORTED_WRITER_FEATURES: frozenset[str] = frozenset(
    {
        "appendOnly",
        "invariants",
        "checkConstraints",
        "generatedColumns",
        "changeDataFeed",
        "columnMapping",
        "timestampNtz",
        "domainMetadata",
        "deletionVectors",
        "v2Checkpoint",
        "inCommitTimestamp",
        "vacuumProtocolCheck",
        "typeWidening",
        "typeWidening-preview",
        "identityColumns",
        "rowTracking",
        "clustering",
        "variantType",
        "variantType-preview",
        "variantShredding",
        "variantShredding-preview",
    }
)
# Legacy writer versions imply these features ("Writer Version Requirements").
_LEGACY_WRITER = {
    2: {"appendOnly", "invariants"},
    3: {"checkConstraints"},
    4: {"changeDataFeed", "generatedColumns"},
    5: {"columnMapping"},
    6: {"identityColumns"},
}
READER_FEATURES_NEEDING_R3 = frozenset(
    {
        "columnMapping",
        "deletionVectors",
        "timestampNtz",
        "v2Checkpoint",
        "typeWidening",
        "vacuumProtocolCheck",
        "variantType",
        "variantShredding",
    }
)


def writer_features(protocol: Protocol) -> frozenset[str]:
    """Writer features a protocol declares or, below version 7, implies."""
    if protocol.min_writer_version >= 7:
        return frozenset(protocol.writer_features or ())
    implied: set[str] = set()
    for version, feats in _LEGACY_WRITER.items():
        if protocol.min_writer_version >= version:
            implied |= feats
    return frozenset(implied)


def check_write_supported(protocol: Protocol, *, uses_identity: bool, where: str = "this table") -> None:
    """Raise :class:`UnsupportedFeatureError` unless this client may write a table with ``protocol``."""
    check_read_supported(protocol, where=where)
    if protocol.min_writer_version > 7:
        raise UnsupportedFeatureError(
            f"{where} requires Delta writer version {protocol.min_writer_version}; "
            "this client writes up to 7",
            features=(f"writerVersion{protocol.min_writer_version}",),
        )
    declared = writer_features(protocol)
    if protocol.min_writer_version < 7:
        # Legacy versions imply features; only those the table really uses must be implemented.
        declared = declared - ({"identityColumns"} if not uses_identity else set())
    missing = sorted(declared - SUPPORTED_WRITER_FEATURES)
    if missing:
        raise UnsupportedFeatureError(
            f"{where} uses writer feature(s) {', '.join(missing)} that this client cannot write",
            features=tuple(missing),
        )


def required_protocol(features: set[str], *, explicit: bool) -> Protocol:
    """The lowest protocol that supports ``features`` (Delta Spark's choice when creating a table).

    Legacy versions are used while they suffice (1/2 by default); table features (3/7) when a feature has
    no legacy version or the caller asked for features explicitly (``delta.feature.*`` properties).
    """
    legacy_only = {f for feats in _LEGACY_WRITER.values() for f in feats}
    if not explicit and features <= legacy_only:
        writer = max([2] + [v for v, feats in _LEGACY_WRITER.items() if feats & features])
        reader = 2 if "columnMapping" in features else 1
        return Protocol(reader, writer)
    readers = sorted(features & READER_FEATURES_NEEDING_R3)
    return Protocol(3 if readers else 1, 7, tuple(readers) if readers else None, tuple(sorted(features)))


# -- merging protocols ("Table Features": what RESTORE commits) ------------------------------------------
# Legacy features and the (reader, writer) versions that imply them ("Writer Version Requirements").
LEGACY_FEATURE_VERSIONS: dict[str, tuple[int, int]] = {
    "appendOnly": (1, 2), "invariants": (1, 2), "checkConstraints": (1, 3), "changeDataFeed": (1, 4),
    "generatedColumns": (1, 4), "columnMapping": (2, 5), "identityColumns": (1, 6),
}  # fmt: skip


def _implied(protocol: Protocol) -> set[str]:
    """Legacy features a protocol implies; none once it lists features (writer version 7)."""
    r, w = protocol.min_reader_version, protocol.min_writer_version
    if w >= 7 or r >= 3:
        return set()
    return {name for name, (fr, fw) in LEGACY_FEATURE_VERSIONS.items() if fr <= r and fw <= w}


def protocol_features(protocol: Protocol) -> frozenset[str]:
    """Every feature a protocol supports, listed or implied by its legacy versions."""
    listed = set(protocol.reader_features or ()) | set(protocol.writer_features or ())
    return frozenset(listed | _implied(protocol))


def merge_protocols(*protocols: Protocol) -> Protocol:
    """The weakest protocol that supports every feature of ``protocols`` (Delta Spark's ``Protocol.merge``).

    Versions are the highest given and features the union; the result is then normalised as Delta Spark
    does: legacy versions when they imply exactly those features, else writer version 7 listing them (reader
    version 3 listing the reader-writer ones when any needs it). RESTORE commits this merge of the restored
    version's protocol and the latest one, so a restore never downgrades the protocol.
    """
    features: set[str] = set()
    reader_writer = {"columnMapping"} | set(READER_FEATURES_NEEDING_R3)
    for p in protocols:
        features |= protocol_features(p)
        reader_writer |= set(p.reader_features or ())
    versions = [LEGACY_FEATURE_VERSIONS.get(f, (3 if f in reader_writer else 1, 7)) for f in features]
    reader = max([1, *(r for r, _ in versions)])
    writer = max([1, *(w for _, w in versions)])
    legacy = Protocol(reader, writer)
    if writer < 7 and _implied(legacy) == features:
        return legacy
    # Reader version 2 (column mapping alone) cannot list reader features: column mapping is then implied.
    readers = sorted(f for f in features if f in reader_writer) if reader >= 3 else None
    return Protocol(reader, 7, tuple(readers) if readers is not None else None, tuple(sorted(features)))
