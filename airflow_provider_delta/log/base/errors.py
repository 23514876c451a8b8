"""Named errors of the transaction-log core.

Each error says what went wrong in terms a user can act on: which file, which line, which feature.
They all derive from :class:`DeltaError` so callers (operators, sensors) can catch the family.
"""

from __future__ import annotations

import json
from typing import Any


def shown(value: Any) -> str:
    """A value read from the log as an error message quotes it: JSON, ASCII, cut short."""
    text = json.dumps(value, ensure_ascii=True, default=repr)
    return text if len(text) <= 80 else text[:77] + "..."


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


class ChecksumError(CorruptLogError):
    """A version checksum file (``NNN.crc``) is malformed, or disagrees with the state the log replays to
    ("Version Checksum File"). Readers ignore such a file with a warning; this is raised only where the
    caller asked to validate, and by a checkpoint, which would otherwise carry the checksum's state into
    the log."""


class DeletionVectorError(CorruptLogError):
    """A deletion vector cannot be read ("Deletion Vectors"): its file is missing or cut short, its size
    prefix, checksum, format version, magic number or cardinality disagree with its descriptor, or its bitmap
    is malformed. A reader that went on would return rows the table deleted, so it must stop.

    ``dv_file`` names where the vector is (a file and offset, or ``inline``), ``data_file`` the data file
    it belongs to (when the caller said); both are in the message. ``reason`` is the message without them.
    """

    def __init__(self, reason: str, *, dv_file: str | None = None, data_file: str | None = None) -> None:
        where = [f"deletion vector {dv_file}"] if dv_file else []
        if data_file:
            where.append(f"of data file {data_file}")
        Exception.__init__(self, reason + (f" ({' '.join(where)})" if where else ""))
        self.reason = reason
        self.dv_file = dv_file
        self.data_file = data_file
        self.path = dv_file
        self.line = None

    def located(self, dv_file: str, data_file: str | None) -> DeletionVectorError:
        """The same error, naming where the vector was read from (the bitmap decoder does not know)."""
        return DeletionVectorError(self.reason, dv_file=self.dv_file or dv_file, data_file=data_file)


class VersionNotFoundError(DeltaError):
    """A requested version or timestamp is not reconstructable from the log that exists now."""

    def __init__(self, message: str, *, earliest: int | None = None, latest: int | None = None) -> None:
        if earliest is not None and latest is not None:
            message += f"; available versions are {earliest}..{latest}"
        super().__init__(message)
        self.earliest = earliest
        self.latest = latest


class ChangeRangeError(DeltaError, ValueError):
    """A range of versions or timestamps to read changes of that cannot be one: its end before its start
    (Delta Spark's ``DELTA_INVALID_CDC_RANGE``), or a timestamp after the latest commit."""


class ChangeDataNotRecordedError(DeltaError):
    """A version in a change read removed or rewrote rows while the table did not record change data
    (``delta.enableChangeDataFeed`` was off): which rows changed cannot be told from the log."""

    def __init__(self, message: str, *, version: int) -> None:
        super().__init__(message)
        self.version = version


class IncompatibleSchemaChangeError(DeltaError):
    """A change read crosses a schema change that rows written before it cannot follow (a column renamed
    or dropped, made NOT NULL, a type changed other than widened): they cannot be read in the end version's
    schema. Delta Spark's ``DELTA_CHANGE_DATA_FEED_INCOMPATIBLE_SCHEMA_CHANGE``; read the two sides of the
    change separately."""

    def __init__(self, message: str, *, version: int, column: str) -> None:
        super().__init__(message)
        self.version = version
        self.column = column


class RowsChangedError(DeltaError):
    """A read of the rows a range of versions appended met a version that removed or rewrote rows."""

    def __init__(self, message: str, *, version: int) -> None:
        super().__init__(message)
        self.version = version


# Why a file the log names can be gone, for the messages of DataFileNotFoundError.
GONE_BECAUSE = (
    "VACUUM deletes the files that only versions older than the table's delta.deletedFileRetentionDuration "
    "need, so such a version may not be readable; Delta Spark refuses to time-travel that far back"
)


class DataFileNotFoundError(DeltaError, FileNotFoundError):
    """A data, change data or deletion vector file the log names is gone from storage (VACUUM deleted it):
    the version that needs it can no longer be read. Also a ``FileNotFoundError``, as it was before it had
    a name of its own."""

    def __init__(self, message: str, *, path: str, version: int | None = None) -> None:
        super().__init__(message)
        self.path = path
        self.version = version


class UnsupportedFeatureError(DeltaError):
    """The table needs a protocol version or table feature this implementation does not support."""

    def __init__(self, message: str, *, features: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.features = features


class InvalidCommitError(DeltaError):
    """A commit would break a writer rule ("Requirements for Writers"); nothing was written."""


class FileNotLiveError(InvalidCommitError):
    """A transaction names a data file that is not live in the snapshot it read (never added, or already
    removed): it cannot be removed or have rows deleted. ``path`` is the file as the caller named it."""

    def __init__(self, message: str, *, path: str) -> None:
        super().__init__(message)
        self.path = path


class IdentityColumnError(InvalidCommitError):
    """Values of an identity column that the table must generate were given, or cannot be generated
    ("Identity Columns"); ``column`` names it. Nothing was written."""

    def __init__(self, message: str, *, column: str) -> None:
        super().__init__(message)
        self.column = column


class IcebergCompatError(InvalidCommitError):
    """A commit, a write or a new table would break a writer requirement of "Iceberg Compatibility V1/V2":
    ``version`` is the IcebergCompat version, ``rule`` the requirement (``columnMapping``,
    ``deletionVectors``, ``types``, ``nestedIds``, ``partitionSpec``, ``typeWidening``, ``numRecords``,
    ``partitionValues``, ``singleVersion``, ``protocol``, ``rewrite``). Refused before anything was
    written."""

    def __init__(self, message: str, *, version: int, rule: str) -> None:
        super().__init__(message)
        self.version = version
        self.rule = rule


class UniformError(DeltaError):
    """UniForm's Iceberg metadata cannot be written for a version of a table: ``rule`` says why
    (``notEnabled``, ``columnMapping``, ``types``, ``nestedIds``, ``partitionSpec``, ``deletionVectors``,
    ``metadata`` for a file under ``metadata/`` that is not Iceberg table metadata, ``conflict`` for a
    conversion that kept losing races with others). The Delta commits stand; nothing of this conversion was
    published, so the Iceberg metadata stays at the last version converted until a conversion succeeds."""

    def __init__(self, message: str, *, rule: str) -> None:
        super().__init__(message)
        self.rule = rule


class UnsafeStorageError(DeltaError):
    """The storage backend cannot create a file only if it is absent, so concurrent commits could be lost."""


class CommitFailedError(DeltaError):
    """The commit did not land after the allowed number of attempts; nothing of it is in the table."""


class ConcurrentModificationError(DeltaError):
    """A concurrent commit conflicts with this transaction (Delta Spark's
    ``ConcurrentModificationException``).

    ``winning_version`` and ``winning_operation`` name the commit that won.
    """

    def __init__(self, message: str, *, winning_version: int, winning_operation: str | None) -> None:
        op = winning_operation or "unknown operation"
        super().__init__(f"{message} (conflicting commit: version {winning_version}, {op})")
        self.winning_version = winning_version
        self.winning_operation = winning_operation


class ProtocolChangedError(ConcurrentModificationError):
    """A concurrent commit changed the protocol."""


class MetadataChangedError(ConcurrentModificationError):
    """A concurrent commit changed the table metadata (schema, partitioning, properties)."""


class ConcurrentAppendError(ConcurrentModificationError):
    """A concurrent commit added files to data this transaction read."""


class ConcurrentDeleteReadError(ConcurrentModificationError):
    """A concurrent commit removed a file this transaction read."""


class ConcurrentDeleteDeleteError(ConcurrentModificationError):
    """A concurrent commit removed a file this transaction also removes."""


class ConcurrentTransactionError(ConcurrentModificationError):
    """A concurrent commit recorded progress for an application id this transaction depends on."""


class StaleSnapshotError(ConcurrentModificationError):
    """Log cleanup removed commits this transaction read or must be checked against, so it cannot be
    committed where it would be seen; nothing of it is in the table.

    Raised when a transaction stayed open longer than the table's ``delta.logRetentionDuration`` (or a
    cleanup ran with a shorter retention) and the commit cannot be replayed on the latest snapshot: re-read
    the table and run the operation again.
    """

    def __init__(self, message: str, *, read_version: int | None, latest_version: int | None) -> None:
        Exception.__init__(self, message)
        self.read_version = read_version
        self.latest_version = latest_version
        self.winning_version = latest_version if latest_version is not None else -1
        self.winning_operation = "log cleanup"


class ConcurrentVacuumError(ConcurrentModificationError):
    """A VACUUM that started concurrently may delete data files this transaction adds (they are older than
    its retention and were not referenced when it listed them); nothing of the transaction is in the table.
    Write the files again and retry."""


class CommitOutcomeUnknownError(DeltaError):
    """A commit file was written but whether readers see it cannot be established (log cleanup and a new
    checkpoint raced it and the checkpoint could not be read). Retrying is safe only for idempotent
    (app transaction) writes; inspect the table's app transactions or files first otherwise."""


class RetentionTooShortError(DeltaError):
    """VACUUM was asked for a retention shorter than the table's ``delta.deletedFileRetentionDuration``."""


class SchemaMismatchError(DeltaError):
    """Data to write does not fit the table's schema; the message names each offending column and both
    types (or says which column is missing or unknown). Nothing was written."""


class ConstraintViolationError(DeltaError):
    """Rows to write break a table rule (NOT NULL, an invariant, a CHECK constraint, a generated column,
    ``replaceWhere``); nothing was written. ``violations`` maps each broken rule's name to its row count,
    ``example`` holds one offending row per rule (when the writer could show one)."""

    def __init__(
        self, message: str, violations: dict[str, int], example: dict[str, dict] | None = None
    ) -> None:
        super().__init__(message)
        self.violations = violations
        self.example = example or {}


class OptimizeError(DeltaError):
    """OPTIMIZE was asked for something the table cannot do (e.g. Z-ordering a clustered table); nothing was
    written."""


class ZOrderColumnError(OptimizeError):
    """A Z-order column cannot be used: ``column`` is not in the schema, is a partition column (every file
    holds one value of it), has no statistics to skip files with, or has a type that has no order."""

    def __init__(self, message: str, *, column: str) -> None:
        super().__init__(message)
        self.column = column


class PartitionFilterError(OptimizeError):
    """OPTIMIZE's filter must select whole partitions: it may name only partition columns (``columns`` lists
    the others it named)."""

    def __init__(self, message: str, *, columns: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.columns = columns


class RestoreTargetError(VersionNotFoundError):
    """RESTORE's target is not a version it can restore: not before the latest, no longer in the log, or
    older than ``delta.deletedFileRetentionDuration`` (VACUUM may have deleted its files)."""


class RestoreMissingFilesError(DeltaError):
    """Files the restored version needs are gone from storage (VACUUM deleted them): ``files`` lists them
    (up to 100, as Delta Spark does), ``version`` the target. Nothing was committed."""

    def __init__(self, message: str, *, version: int, files: tuple[str, ...]) -> None:
        super().__init__(message)
        self.version = version
        self.files = files


class InvalidConditionError(DeltaError):
    """A DELETE, UPDATE or MERGE condition (or a SET / VALUES expression) that the engine cannot analyse:
    not SQL, of the wrong type, or naming a column the table (or the source) lacks. ``expression`` is the
    text given. Nothing was written."""

    def __init__(self, message: str, *, expression: str) -> None:
        super().__init__(message)
        self.expression = expression


class MergeCardinalityError(DeltaError):
    """A MERGE whose target row is matched by more than one source row, with an update or delete clause
    that would apply to it: which source row wins is undefined, so Delta Spark refuses it (its
    ``DELTA_MULTIPLE_SOURCE_ROW_MATCHING_TARGET_ROW_IN_MERGE``) and so do we. Nothing was written:
    deduplicate the source on the merge keys first."""
