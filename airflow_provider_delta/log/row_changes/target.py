"""The table a row-level operation (DELETE, UPDATE, MERGE) changes, read once at its start, and what every
such operation returns.

Both engines start here: the Arrow engine of this folder and the Spark engine (``spark/``), so a row-level
change is refused, planned and answered the same way whichever runs it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from ..actions.actions import Metadata
from ..features.configuration import TableConfiguration
from ..features.row_tracking import materialized_columns
from ..snapshot.history import locate_app_transaction
from ..snapshot.snapshot import Snapshot
from ..writes.write_plan import check_rows_changeable


@dataclass(frozen=True)
class RowChangeResult:
    """A DELETE, UPDATE or MERGE: the version committed (``None`` when nothing changed, so nothing was
    committed), Delta Spark's metrics of the operation, and whether ``app_id`` had committed it already."""

    version: int | None
    metrics: dict[str, int] = field(default_factory=dict)
    already_committed: bool = False


@dataclass
class Target:
    """The table a row-level operation changes, as read once at its start."""

    table: Any  # a TableContext (the DeltaTable facade is one)
    snap: Snapshot
    storage_options: dict[str, Any]
    operation: str
    started: float = field(default_factory=time.monotonic)
    # The metadata the operation writes under: the snapshot's, or a MERGE's evolved schema, committed with
    # the changes.
    metadata: Metadata = None  # type: ignore[assignment]
    schema_evolution: bool = False  # a MERGE's merge_schema: structs may lack fields (kept, or null)

    def __post_init__(self) -> None:
        if self.metadata is None:
            self.metadata = self.snap.metadata

    @property
    def where(self) -> str:
        return f"table {self.table.uri}"

    @property
    def configuration(self) -> TableConfiguration:
        """The configuration rows are written under: the snapshot's, with a MERGE's evolved schema."""
        if self.metadata is self.snap.metadata:
            return self.snap.table_configuration
        return TableConfiguration(self.snap.protocol, self.metadata)

    @property
    def deletion_vectors(self) -> bool:
        """Whether changed rows are marked with deletion vectors (else their files are rewritten), as
        Delta Spark decides: the table allows new vectors."""
        return self.snap.table_configuration.deletion_vectors_enabled

    @property
    def change_data(self) -> bool:
        return self.snap.table_configuration.change_data_feed_property

    @property
    def columns(self) -> list[str]:
        return [f["name"] for f in self.metadata.schema["fields"]]

    @property
    def evolved(self) -> bool:
        return self.metadata is not self.snap.metadata

    @cached_property
    def kept(self) -> tuple[str, str] | None:
        """Row tracking's materialized columns, on tables that enable it: rows written again keep their
        row ids there (and, copied unchanged, their row commit versions); None otherwise."""
        return materialized_columns(self.snap.protocol, self.snap.metadata, self.where, self.operation)


def open_target(table: Any, operation: str, storage_options: dict[str, Any] | None = None) -> Target:
    """The latest snapshot of ``table`` (a TableContext), checked writable by this client and not
    append-only (Delta Spark refuses DELETE, UPDATE and MERGE on ``delta.appendOnly`` tables)."""
    snap = table.snapshot()
    check_rows_changeable(snap.table_configuration, operation, f"table {table.uri}")
    target = Target(table, snap, dict(storage_options or {}), operation)
    _ = target.kept  # a tracked table without materialized column names is refused before any work
    return target


def already_committed(target: Target, app_id: str | None, app_version: int | None) -> RowChangeResult | None:
    """"Transaction Identifiers": when the table holds ``app_id`` at ``app_version`` or later, nothing
    runs."""
    if (app_id is None) != (app_version is None):
        raise ValueError("pass app_id and app_version together")
    if app_id is None or target.snap.app_transactions.get(app_id, -1) < int(app_version):
        return None
    holder = locate_app_transaction(target.table.store, app_id, target.snap.version)
    return RowChangeResult(holder, {}, already_committed=True)
