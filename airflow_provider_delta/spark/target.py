"""The table a row-level operation (DELETE, UPDATE, MERGE) changes, read once at its start.

Its own module because every step of those operations takes it (finding rows, Spark's native reader, MERGE's
pruning and schema evolution), while ``row_changes`` runs them: so none of those steps imports the module
that calls it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any

from airflow_provider_delta.log import DeltaTable
from airflow_provider_delta.log.features.configuration import TableConfiguration
from airflow_provider_delta.log.features.row_tracking import materialized_columns
from airflow_provider_delta.log.writes.write_plan import check_rows_changeable

if TYPE_CHECKING:
    from airflow_provider_delta.log import Metadata, Snapshot


@dataclass
class Target:
    """The table a row-level operation changes, as read once at its start."""

    table: DeltaTable
    snap: Snapshot
    storage_options: dict[str, Any]
    operation: str
    started: float = field(default_factory=time.monotonic)
    # The metadata the operation writes under: the snapshot's, or a MERGE's evolved schema
    # (``merge_evolution``), committed with the changes.
    metadata: Metadata = None  # type: ignore[assignment]

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


def open_target(table_uri: str, storage_options: dict[str, Any] | None, operation: str) -> Target:
    """The latest snapshot, checked writable by this client and not append-only (Delta Spark refuses
    DELETE, UPDATE and MERGE on ``delta.appendOnly`` tables)."""
    table = DeltaTable(table_uri, storage_options)
    snap = table.snapshot()
    check_rows_changeable(snap.table_configuration, operation, f"table {table_uri}")
    target = Target(table, snap, dict(storage_options or {}), operation)
    _ = target.kept  # a tracked table without materialized column names is refused before any job
    return target
