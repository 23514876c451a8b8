"""The protocol checks: whether this client may read or write a table, answered from the feature registry.

Spec: "Protocol Evolution", "Table Features" and the version requirement tables. A client must refuse a
table whose protocol it does not implement, naming what is missing, instead of silently misreading it.
Which features exist and what we do with each is the registry's (``registry``); this module applies it to
a ``protocol`` action: the features a protocol lists or implies, the checks, the lowest protocol for a set
of features, and the merge of two protocols.
"""

from __future__ import annotations

from ..actions.actions import Protocol
from ..base.errors import UnsupportedFeatureError
from .registry import FEATURES, Usage, feature, is_reader_feature, legacy_features

MAX_READER_VERSION = 3
MAX_WRITER_VERSION = 7


def supported_reader_features() -> frozenset[str]:
    """Reader features whose read side this client implements."""
    return frozenset(f.name for f in FEATURES.values() if f.reader and f.reads)


def supported_writer_features() -> frozenset[str]:
    """Features whose writer rules this client's commits follow."""
    return frozenset(f.name for f in FEATURES.values() if f.writes)


def reader_features(protocol: Protocol) -> frozenset[str]:
    """The reader features a protocol implies, including those implied by legacy versions."""
    if protocol.min_reader_version >= 3:
        return frozenset(protocol.reader_features or ())
    return frozenset(
        name
        for name, (reader, _) in legacy_features().items()
        if 1 < reader <= protocol.min_reader_version and is_reader_feature(name)
    )


def writer_features(protocol: Protocol) -> frozenset[str]:
    """Writer features a protocol declares or, below writer version 7, implies."""
    if protocol.min_writer_version >= 7:
        return frozenset(protocol.writer_features or ())
    return frozenset(
        name for name, (_, writer) in legacy_features().items() if writer <= protocol.min_writer_version
    )


def protocol_features(protocol: Protocol) -> frozenset[str]:
    """Every feature a protocol supports, listed or implied by its legacy versions."""
    listed = set(protocol.reader_features or ()) | set(protocol.writer_features or ())
    return frozenset(listed | _implied(protocol))


def _why(names: list[str]) -> str:
    reasons = [f"{n}: {feature(n).note}" for n in names if feature(n) is not None and feature(n).note]
    return f" ({'; '.join(reasons)})" if reasons else ""


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
    supported = supported_reader_features()
    missing = sorted(reader_features(protocol) - supported)
    if missing:
        raise UnsupportedFeatureError(
            f"{where} uses reader feature(s) {', '.join(missing)} that this client does not support"
            f"{_why(missing)} (supported: {', '.join(sorted(supported))})",
            features=tuple(missing),
        )


def check_write_supported(
    protocol: Protocol, *, usage: Usage | None = None, where: str = "this table"
) -> None:
    """Raise :class:`UnsupportedFeatureError` unless this client may write a table with ``protocol``.

    Below writer version 7 the versions imply features; only those the table's metadata shows in use
    (``usage``; none when not given) must be implemented, as a table on writer version 6 without identity
    columns asks nothing of identity.
    """
    check_read_supported(protocol, where=where)
    if protocol.min_writer_version > MAX_WRITER_VERSION:
        raise UnsupportedFeatureError(
            f"{where} requires Delta writer version {protocol.min_writer_version}; "
            f"this client writes up to {MAX_WRITER_VERSION}",
            features=(f"writerVersion{protocol.min_writer_version}",),
        )
    declared = set(writer_features(protocol))
    if protocol.min_writer_version < 7:
        declared = {
            n for n in declared if usage is not None and feature(n) is not None and feature(n).in_use(usage)
        }
    missing = sorted(declared - supported_writer_features())
    if missing:
        raise UnsupportedFeatureError(
            f"{where} uses writer feature(s) {', '.join(missing)} that this client cannot write"
            f"{_why(missing)}",
            features=tuple(missing),
        )


def required_protocol(features: set[str], *, explicit: bool) -> Protocol:
    """The lowest protocol that supports ``features`` (Delta Spark's choice when creating a table).

    Legacy versions are used while they suffice (1/2 by default); table features (3/7) when a feature has
    no legacy version or the caller asked for features explicitly (``delta.feature.*`` properties).
    """
    legacy = legacy_features()
    if not explicit and set(features) <= set(legacy):
        writer = max([2] + [legacy[f][1] for f in features])
        reader = max([1] + [legacy[f][0] for f in features])
        return Protocol(reader, writer)
    readers = sorted(f for f in features if is_reader_feature(f))
    return Protocol(3 if readers else 1, 7, tuple(readers) if readers else None, tuple(sorted(features)))


def _implied(protocol: Protocol) -> set[str]:
    """Legacy features a protocol implies; none once it lists features (writer version 7)."""
    r, w = protocol.min_reader_version, protocol.min_writer_version
    if w >= 7 or r >= 3:
        return set()
    return {name for name, (fr, fw) in legacy_features().items() if fr <= r and fw <= w}


def merge_protocols(*protocols: Protocol) -> Protocol:
    """The weakest protocol that supports every feature of ``protocols`` (Delta Spark's ``Protocol.merge``).

    Versions are the highest given and features the union; the result is then normalised as Delta Spark
    does: legacy versions when they imply exactly those features, else writer version 7 listing them (reader
    version 3 listing the reader-writer ones when any needs it). RESTORE commits this merge of the restored
    version's protocol and the latest one, so a restore never downgrades the protocol.
    """
    features: set[str] = set()
    listed_readers: set[str] = set()
    for p in protocols:
        features |= protocol_features(p)
        listed_readers |= set(p.reader_features or ())
    legacy = legacy_features()

    def reads(name: str) -> bool:
        return is_reader_feature(name) or name in listed_readers

    versions = [legacy.get(f, (3 if reads(f) else 1, 7)) for f in features]
    reader = max([1, *(r for r, _ in versions)])
    writer = max([1, *(w for _, w in versions)])
    candidate = Protocol(reader, writer)
    if writer < 7 and _implied(candidate) == features:
        return candidate
    # Reader version 2 (column mapping alone) cannot list reader features: column mapping is then implied.
    readers = sorted(f for f in features if reads(f)) if reader >= 3 else None
    return Protocol(reader, 7, tuple(readers) if readers is not None else None, tuple(sorted(features)))
