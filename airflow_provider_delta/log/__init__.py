"""The Delta Lake transaction-log core: pure Python over fsspec and pyarrow.

Imports neither Airflow nor PySpark; the provider's hooks, operators and Spark layer build on it.
"""

from .actions import DomainMetadata, Format, Metadata, Protocol, SetTransaction
from .errors import (
    CorruptLogError,
    DeltaError,
    TableNotFoundError,
    UnsupportedFeatureError,
    VersionNotFoundError,
)
from .history import HistoryEntry
from .snapshot import Snapshot
from .table import DeltaTable

__all__ = [
    "CorruptLogError",
    "DeltaError",
    "DeltaTable",
    "DomainMetadata",
    "Format",
    "HistoryEntry",
    "Metadata",
    "Protocol",
    "SetTransaction",
    "Snapshot",
    "TableNotFoundError",
    "UnsupportedFeatureError",
    "VersionNotFoundError",
]
