"""How far UniForm's Iceberg metadata lags behind the Delta table: what the Delta view and ``deltalog`` show.

A conversion that fails never fails the commit it follows (``conversion.convert_after_commit``), so the lag
is how a failure shows: the Delta table moves on, the newest Iceberg metadata stays at the last version
converted. The reason of the last failure is remembered in this process only (no file is written for it:
writing is what may have failed); a status read elsewhere shows the lag without it.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

from ...extras import MissingExtraError
from ..base.errors import DeltaError, UniformError
from ..features.configuration import TableConfiguration
from ..snapshot.snapshot import Snapshot
from ..snapshot.table_context import TableContext
from .metadata_files import metadata_at, newest_metadata

ICEBERG = "iceberg"
_FAILURES: dict[str, tuple[int, str]] = {}  # table URI -> (Delta version, reason) of its last failure here
_MAX_REMEMBERED = 1024
_LOCK = threading.Lock()


def uniform_iceberg(config: TableConfiguration) -> bool:
    """Whether the table keeps Iceberg metadata (``delta.universalFormat.enabledFormats`` names iceberg)."""
    return ICEBERG in config.universal_formats


@dataclass(frozen=True)
class IcebergStatus:
    """UniForm's state for a table.

    ``converted_version`` is the Delta version the newest Iceberg metadata (``metadata_file``) holds, and
    ``lag`` how many versions the table is ahead of it (every version when none was converted yet; ``None``
    when UniForm is off). ``last_error`` is the reason the last conversion in this process failed, while
    the metadata has not caught up with the version it was converting.
    """

    uri: str
    enabled: bool
    table_version: int
    converted_version: int | None
    metadata_file: str | None
    lag: int | None
    last_error: str | None

    @property
    def up_to_date(self) -> bool:
        return self.lag == 0


def iceberg_status(table: TableContext, snapshot: Snapshot | None = None) -> IcebergStatus:
    """The status of ``table`` at its latest version (or ``snapshot``): reads the newest metadata file's
    name and ``delta-version`` only (a few small requests), never the Delta file list."""
    snap = snapshot if snapshot is not None else table.snapshot()
    enabled = uniform_iceberg(snap.table_configuration)
    converted, location, problem = None, None, None
    try:
        newest = newest_metadata(table.store)
        if newest is not None:
            location = newest.location
            try:
                converted = newest.delta_version
            except UniformError as exc:
                # A file that is not metadata took the next number: the Delta version is the one before's.
                problem = str(exc)
                older = metadata_at(table.store, newest.number - 1)
                converted = older.delta_version if older is not None else None
                location = older.location if older is not None else None
    except (OSError, UniformError) as exc:  # what the next conversion will fail on too: show it
        problem = public_reason(exc)
    lag = None
    if enabled:
        lag = snap.version + 1 if converted is None else max(0, snap.version - converted)
    with _LOCK:
        failed = _FAILURES.get(table.uri)
    if failed is not None and (converted is None or converted < failed[0]):
        problem = problem or failed[1]
    return IcebergStatus(table.uri, enabled, snap.version, converted, location, lag, problem)


def public_reason(exc: BaseException) -> str:
    """What a status may say of ``exc`` wherever it is shown (the Delta view, XCom): our own errors' text
    (a path and why), but only the type of anything else, since a storage client's message can carry
    credentials in forms no masker knows (the task's log has the whole error)."""
    if isinstance(exc, DeltaError | MissingExtraError):
        return f"{type(exc).__name__}: {exc}" if isinstance(exc, MissingExtraError) else str(exc)
    return f"{type(exc).__name__} while reading or writing the table's storage (the log has the detail)"


def record_failure(uri: str, version: int, exc: BaseException) -> None:
    reason = public_reason(exc)
    with _LOCK:
        if uri not in _FAILURES and len(_FAILURES) >= _MAX_REMEMBERED:
            _FAILURES.pop(next(iter(_FAILURES)))
        _FAILURES[uri] = (version, " ".join(reason.split()))


def record_success(uri: str, version: int) -> None:
    with _LOCK:
        failed = _FAILURES.get(uri)
        if failed is not None and failed[0] <= version:
            del _FAILURES[uri]
