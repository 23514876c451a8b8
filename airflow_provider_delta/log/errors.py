"""Named errors of the transaction-log core.

Each error says what went wrong in terms a user can act on: which file, which line, which feature.
They all derive from :class:`DeltaError` so callers (operators, sensors) can catch the family.
"""

from __future__ import annotations


class DeltaError(Exception):
    """Base class of every error raised by the transaction-log core."""


class TableNotFoundError(DeltaError):
    """The location holds no Delta table (no ``_delta_log`` with a commit or checkpoint)."""


class CorruptLogError(DeltaError):
    """The log cannot be interpreted: malformed JSON, a gap in versions, a missing protocol or metadata."""

    def __init__(self, message: str, *, path: str | None = None, line: int | None = None) -> None:
        where = ""
        if path is not None:
            where = f" ({path}" + (f", line {line}" if line is not None else "") + ")"
        super().__init__(message + where)
        self.path = path
        self.line = line


class VersionNotFoundError(DeltaError):
    """A requested version or timestamp is not reconstructable from the log that exists now."""

    def __init__(self, message: str, *, earliest: int | None = None, latest: int | None = None) -> None:
        if earliest is not None and latest is not None:
            message += f"; available versions are {earliest}..{latest}"
        super().__init__(message)
        self.earliest = earliest
        self.latest = latest


class UnsupportedFeatureError(DeltaError):
    """The table needs a protocol version or table feature this implementation does not support."""

    def __init__(self, message: str, *, features: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.features = features
