"""The table a row-level operation (DELETE, UPDATE, MERGE) on Spark changes: the core's ``Target``
(``log.row_changes.target``), opened from a URI and storage options.
"""

from __future__ import annotations

from typing import Any

from airflow_provider_delta.log import DeltaTable
from airflow_provider_delta.log.row_changes import target as core
from airflow_provider_delta.log.row_changes.target import Target

__all__ = ["Target", "open_target"]


def open_target(table_uri: str, storage_options: dict[str, Any] | None, operation: str) -> Target:
    """The latest snapshot, checked writable by this client and not append-only (``row_changes.target``)."""
    return core.open_target(DeltaTable(table_uri, storage_options), operation, storage_options)
