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
