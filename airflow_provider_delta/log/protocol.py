"""Protocol versions and table features this implementation supports, in one place.

Spec: "Protocol Evolution" and the table-features extension of reader version 3 / writer version 7.
A client must refuse a table whose protocol it does not implement, naming what is missing, instead of
silently misreading it.
"""

from __future__ import annotations

from .actions import Protocol
from .errors import UnsupportedFeatureError

MAX_READER_VERSION = 3

# Reader features whose read side we implement. typeWidening only changes the schema the log declares;
# applying it to data files belongs to the data reader.
SUPPORTED_READER_FEATURES: frozenset[str] = frozenset(
    {
        "columnMapping",
        "deletionVectors",
        "timestampNtz",
        "v2Checkpoint",
        "vacuumProtocolCheck",
        "typeWidening",
        "typeWidening-preview",
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
