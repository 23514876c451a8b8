"""The Delta Lake transaction-log core: pure Python over fsspec and pyarrow.

Imports neither Airflow nor PySpark; the provider's hooks, operators and Spark layer build on it.
"""

from .actions.actions import AddFile, DomainMetadata, Format, Metadata, Protocol, RemoveFile, SetTransaction
from .actions.commit_info import CORE_VERSION as __version__  # noqa: F401 - the package version
from .base.errors import (
    ChecksumError,
    CommitFailedError,
    CommitOutcomeUnknownError,
    ConcurrentAppendError,
    ConcurrentDeleteDeleteError,
    ConcurrentDeleteReadError,
    ConcurrentModificationError,
    ConcurrentTransactionError,
    ConcurrentVacuumError,
    CorruptLogError,
    DataFileNotFoundError,
    DeletionVectorError,
    DeltaError,
    FileNotLiveError,
    IcebergCompatError,
    InvalidCommitError,
    MergeCardinalityError,
    MetadataChangedError,
    ProtocolChangedError,
    RetentionTooShortError,
    StaleSnapshotError,
    TableNotFoundError,
    UniformError,
    UnsafeStorageError,
    UnsupportedFeatureError,
    VersionNotFoundError,
)
from .commits.transaction import CommitResult, Transaction
from .features.configuration import TableConfiguration
from .row_changes.merge import MergeBuilder
from .row_changes.target import RowChangeResult
from .snapshot.history import HistoryEntry
from .snapshot.snapshot import Snapshot
from .table import DeltaTable, read_table, write
from .uniform.conversion import convert_to_iceberg
from .uniform.status import IcebergStatus, iceberg_status
from .writes.data_files import add_file_from_parquet

__all__ = [
    "AddFile",
    "add_file_from_parquet",
    "read_table",
    "write",
    "ChecksumError",
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
    "MergeBuilder",
    "MergeCardinalityError",
    "RowChangeResult",
    "MetadataChangedError",
    "ProtocolChangedError",
    "RemoveFile",
    "RetentionTooShortError",
    "Transaction",
    "UnsafeStorageError",
    "CorruptLogError",
    "DataFileNotFoundError",
    "DeletionVectorError",
    "DeltaError",
    "DeltaTable",
    "FileNotLiveError",
    "DomainMetadata",
    "Format",
    "HistoryEntry",
    "Metadata",
    "Protocol",
    "SetTransaction",
    "Snapshot",
    "StaleSnapshotError",
    "TableConfiguration",
    "TableNotFoundError",
    "UniformError",
    "UnsupportedFeatureError",
    "VersionNotFoundError",
    "IcebergCompatError",
    "IcebergStatus",
    "convert_to_iceberg",
    "iceberg_status",
]
