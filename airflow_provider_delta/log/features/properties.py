"""Table properties (``metaData.configuration``) the core interprets, with Delta Spark's defaults.

Delta stores durations as Spark calendar-interval strings, e.g. ``interval 1 week``; they are parsed here
once so that replay, checkpoints, vacuum and log cleanup agree on what a property means.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

_UNIT_MS = {
    "microsecond": 0.001,
    "millisecond": 1,
    "second": 1000,
    "minute": 60_000,
    "hour": 3_600_000,
    "day": 86_400_000,
    "week": 7 * 86_400_000,
}
_PART = re.compile(r"(-?\d+(?:\.\d+)?)\s*([a-z]+?)s?\b")

DELETED_FILE_RETENTION = "delta.deletedFileRetentionDuration"
LOG_RETENTION = "delta.logRetentionDuration"
SET_TRANSACTION_RETENTION = "delta.setTransactionRetentionDuration"
CHECKPOINT_INTERVAL = "delta.checkpointInterval"
ENABLE_IN_COMMIT_TIMESTAMPS = "delta.enableInCommitTimestamps"
ICT_ENABLEMENT_VERSION = "delta.inCommitTimestampEnablementVersion"
ICT_ENABLEMENT_TIMESTAMP = "delta.inCommitTimestampEnablementTimestamp"
APPEND_ONLY = "delta.appendOnly"
COLUMN_MAPPING_MODE = "delta.columnMapping.mode"
# "Iceberg Compatibility V1/V2": the properties that turn each version on (``iceberg_compat``).
ENABLE_ICEBERG_COMPAT = {1: "delta.enableIcebergCompatV1", 2: "delta.enableIcebergCompatV2"}
# "UniForm": the formats besides Delta a table keeps metadata for, comma-separated (``iceberg``).
UNIVERSAL_FORMATS = "delta.universalFormat.enabledFormats"

# Integer properties the core reads, with the least value that makes sense (-1: "all columns").
INTEGER_PROPERTIES = {
    CHECKPOINT_INTERVAL: -(2**31),  # 0 or less: no automatic checkpoints
    ICT_ENABLEMENT_VERSION: 0,
    ICT_ENABLEMENT_TIMESTAMP: 0,
    "delta.dataSkippingNumIndexedCols": -1,
    "delta.checkpoint.partSize": 1,
    "delta.columnMapping.maxColumnId": 0,
}
INTERVAL_PROPERTIES = (DELETED_FILE_RETENTION, LOG_RETENTION, SET_TRANSACTION_RETENTION)

DEFAULTS = {
    DELETED_FILE_RETENTION: "interval 1 week",
    LOG_RETENTION: "interval 30 days",
    CHECKPOINT_INTERVAL: "10",
}


def parse_interval_ms(text: str) -> int:
    """Milliseconds in a calendar-interval string: ``interval 1 week``, ``7 days``, ``168 hours``.

    Raises ``ValueError`` naming the text when it is not an interval, so a typo in a table property is
    reported instead of silently becoming "no retention".
    """
    s = text.strip().lower()
    if s.startswith("interval"):
        s = s[len("interval") :].strip()
    total = 0.0
    consumed = 0
    for m in _PART.finditer(s):
        unit = m.group(2)
        if unit not in _UNIT_MS:
            raise ValueError(f"unknown interval unit {unit!r} in {text!r}")
        total += float(m.group(1)) * _UNIT_MS[unit]
        consumed += 1
    if consumed == 0:
        raise ValueError(f"{text!r} is not an interval such as 'interval 7 days'")
    return int(total)


def interval_property_ms(configuration: Mapping[str, str], key: str) -> int | None:
    value = configuration.get(key, DEFAULTS.get(key))
    return None if value is None else parse_interval_ms(value)


def bool_property(configuration: Mapping[str, str], key: str, default: bool = False) -> bool:
    value = configuration.get(key)
    return default if value is None else str(value).strip().lower() == "true"


def ict_enablement_version(configuration: Mapping[str, str]) -> int | None:
    """First version whose commit carries ``inCommitTimestamp``; ``None`` when the table does not use them.

    A table created with in-commit timestamps has no enablement version property: it holds from version 0.
    """
    if not bool_property(configuration, ENABLE_IN_COMMIT_TIMESTAMPS):
        return None
    return int(configuration.get(ICT_ENABLEMENT_VERSION, "0"))


def column_mapping_mode_of(properties: Mapping[str, str]) -> str:
    """``delta.columnMapping.mode`` ("Column Mapping"): "none", "id" or "name"; absent means "none"."""
    mode = str((properties or {}).get(COLUMN_MAPPING_MODE, "none")).lower()
    if mode not in ("none", "id", "name"):
        raise ValueError(f"unknown {COLUMN_MAPPING_MODE} {mode!r}")
    return mode


def check_properties(configuration: Mapping[str, str]) -> None:
    """Raise ``ValueError`` naming the first property the core interprets whose value it cannot use.

    Checked when a table's metadata is read, so that a bad value is reported there, with the file it came
    from, rather than by whichever operation happens to use it first (a checkpoint, VACUUM, log cleanup).
    """
    column_mapping_mode_of(configuration)
    for key in INTERVAL_PROPERTIES:
        if key in configuration:
            try:
                ms = parse_interval_ms(configuration[key])
            except ValueError as exc:
                raise ValueError(f"table property {key}: {exc}") from None
            # Delta Spark refuses negative intervals; the bound keeps "now - retention" a 64-bit number.
            if not 0 <= ms < 2**62:
                raise ValueError(f"table property {key}={configuration[key]!r} is out of range")
    for key, least in INTEGER_PROPERTIES.items():
        value = configuration.get(key)
        if value is None:
            continue
        try:
            number = int(value)
        except ValueError:
            number = None
        if number is None or not least <= number < 2**63:
            raise ValueError(f"table property {key}={value!r} is not an integer of at least {least}")
