"""The Delta Lake transaction-log core: pure Python over fsspec and pyarrow.

Imports neither Airflow nor PySpark; the provider's hooks, operators and Spark layer build on it.
"""

from importlib.metadata import PackageNotFoundError
from importlib.metadata import version as _dist_version

try:
    __version__ = _dist_version("airflow-provider-delta")
except PackageNotFoundError:  # running from a source tree that is not installed
    __version__ = "0+unknown"

from .actions import AddFile, DomainMetadata, Format, Metadata, Protocol, RemoveFile, SetTransaction
from .errors import (
    CommitFailedError,
    CommitOutcomeUnknownError,
    ConcurrentAppendError,
    ConcurrentDeleteDeleteError,
    ConcurrentDeleteReadError,
    ConcurrentModificationError,
    ConcurrentTransactionError,
    ConcurrentVacuumError,
    CorruptLogError,
    DeletionVectorError,
    DeltaError,
    InvalidCommitError,
    MetadataChangedError,
    ProtocolChangedError,
    RetentionTooShortError,
    StaleSnapshotError,
    TableNotFoundError,
    UnsafeStorageError,
    UnsupportedFeatureError,
    VersionNotFoundError,
)
from .history import HistoryEntry
from .snapshot import Snapshot
from .table import DeltaTable, read_table, write
from .transaction import CommitResult, Transaction

__all__ = [
    "AddFile",
    "read_table",
    "write",
    "CommitFailedError",
    "CommitOutcomeUnknownError",
    "CommitResult",
    "ConcurrentAppendError",
    "ConcurrentDeleteDeleteError",
    "ConcurrentDeleteReadError",
    "ConcurrentModificationError",
    "ConcurrentTransactionError",
    "ConcurrentVacuumError",
    "InvalidCommitError",
    "MetadataChangedError",
    "ProtocolChangedError",
    "RemoveFile",
    "RetentionTooShortError",
    "Transaction",
    "UnsafeStorageError",
    "CorruptLogError",
    "DeletionVectorError",
    "DeltaError",
    "DeltaTable",
    "DomainMetadata",
    "Format",
    "HistoryEntry",
    "Metadata",
    "Protocol",
    "SetTransaction",
    "Snapshot",
    "StaleSnapshotError",
    "TableNotFoundError",
    "UnsupportedFeatureError",
    "VersionNotFoundError",
]
