"""Deleting rows of live files with deletion vectors: what Delta Spark's DELETE, UPDATE and MERGE commit
for the rows they remove from files they keep ("Deletion Vectors", "Writer Requirements for Deletion
Vectors").

For each file the rows already deleted (its current vector, if any) and the new ones are merged into one
vector, and the file is committed as a pair: a ``remove`` carrying the old vector and an ``add`` of the same
path carrying the new one, with the file's partition values, tags, row-tracking fields and statistics, and
``dataChange=true`` (Delta Spark's ``AddFile.removeRows``). Statistics stay those of the whole file, their
bounds marked no longer tight (``tightBounds: false``), and ``numRecords`` is required: readers compute the
live row count as ``numRecords - cardinality``. A file whose every row ends up deleted becomes a plain
``remove`` (``isFullyReplaced``); rows that were deleted already change nothing, and a file with no new
deleted rows is left alone.

New vectors of a handful of rows are stored inline in the log (``i``); the others are packed into
``deletion_vector_<uuid>.bin`` files of up to 2 MiB under the root (or a random-prefix folder of it when the
table sets ``delta.randomizeFilePrefixes``), as Delta Spark packs them.
"""

from __future__ import annotations

import dataclasses
import json
import typing
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import numpy as np
import pyarrow.parquet as pq

from ..actions.actions import AddFile, RemoveFile, num_records_of
from ..base.arguments import int_arg
from ..base.errors import InvalidCommitError, UnsupportedFeatureError
from ..features.configuration import TableConfiguration
from ..files.deletion_vector_format import as_row_indexes
from ..files.deletion_vectors import (
    DeletionVectorDescriptor,
    deleted_rows,
    inline_descriptor,
    write_deletion_vectors,
)
from ..files.storage import LogStore
from ..schema.stats import file_stats
from ..snapshot.file_references import live_files, tombstone
from ..snapshot.snapshot import Snapshot
from ..snapshot.table_context import TableContext

DELETION_VECTORS = "deletionVectors"
ENABLE_DELETION_VECTORS = "delta.enableDeletionVectors"
INLINE_MAX_BYTES = 64  # a vector of a few rows: cheaper in the log than a file to write and read
PACKING_TARGET_BYTES = 2 * 1024 * 1024  # Delta Spark's deletionVectors.packing.targetSize


def check_deletion_vectors_writable(config: TableConfiguration, where: str) -> None:
    """New vectors need the ``deletionVectors`` table feature and ``delta.enableDeletionVectors=true``
    (Delta Spark's ``deletionVectorsWritable``): the property is how a table owner allows them."""
    if not config.deletion_vectors_supported:
        raise UnsupportedFeatureError(
            f"{where} does not support deletion vectors (the protocol has no '{DELETION_VECTORS}' table "
            f"feature): enable them first, e.g. ALTER TABLE ... SET TBLPROPERTIES "
            f"('{ENABLE_DELETION_VECTORS}' = 'true'), or remove whole files instead",
            features=(DELETION_VECTORS,),
        )
    if not config.deletion_vectors_property:
        raise UnsupportedFeatureError(
            f"{where} has {ENABLE_DELETION_VECTORS} unset or false, so no new deletion vectors may be "
            f"written (Delta Spark rewrites files instead); set it to 'true' to allow them",
            features=(DELETION_VECTORS,),
        )


def check_deletion_vector_actions(adds: Sequence[AddFile], config: TableConfiguration, where: str) -> None:
    """The writer rules for adds that carry a vector (Delta Spark's commit-time check of every add): the
    table allows new vectors, the add's stats give ``numRecords``, and its bounds are marked wide. An add
    with ``dataChange=false`` re-adds data already in the table (its vector included: a metadata-only
    update), so it needs neither ``delta.enableDeletionVectors`` nor wide bounds."""
    for add in adds:
        if add.deletion_vector is None:
            continue
        if add.data_change or not config.deletion_vectors_supported:
            check_deletion_vectors_writable(config, where)
        stats = _parsed(add.stats)  # parsed once: numRecords and tightBounds are both read
        if num_records_of(stats) is None:
            raise InvalidCommitError(
                f"{where}: {add.path} carries a deletion vector but its stats have no numRecords, which "
                'readers need to count its rows ("Writer Requirement for Deletion Vectors")'
            )
        if add.data_change and stats.get("tightBounds") is not False:
            raise InvalidCommitError(
                f"{where}: {add.path} gets a new deletion vector, so its stats must say tightBounds: false "
                "(its min/max may belong to deleted rows); Transaction.delete_rows() builds such adds"
            )


def _parsed(stats: str | None) -> dict[str, Any]:
    try:
        parsed = json.loads(stats) if stats else {}
    except ValueError:
        return {}
    return parsed if isinstance(parsed, dict) else {}


class PendingChange(typing.Protocol):
    """What row deletes read of the transaction they belong to (a ``Transaction`` is one)."""

    table: TableContext
    snapshot: Snapshot | None

    @property
    def configuration(self) -> TableConfiguration | None: ...


@dataclass(frozen=True)
class FileRowDeletes:
    """The deletes of one live file in a transaction: every row deleted once it commits (``rows``, the
    union with what its vector held), and what that vector held (``before``)."""

    live: AddFile
    num_records: int
    stats: str  # the file's stats, with numRecords (taken from the footer when the log had none)
    before: np.ndarray
    rows: np.ndarray

    @property
    def new_rows(self) -> np.ndarray:
        """Rows this transaction deletes that were not deleted before: the rows a change-data reader
        reports as deleted for this file."""
        return np.setdiff1d(self.rows, self.before, assume_unique=True)

    def with_rows(self, rows: Iterable[int] | np.ndarray) -> FileRowDeletes:
        more = _in_file(self.live, self.num_records, rows)
        return dataclasses.replace(self, rows=np.union1d(self.rows, more))


def row_delete_pairs(rows: Any) -> list[tuple[Any, Any]]:
    """``delete_rows``' argument as (file, row indexes) pairs: a mapping of path to rows, or pairs whose
    file is any reference ``file_references`` accepts (a path, an ``AddFile``, a ``Snapshot.files`` row)."""
    if isinstance(rows, Mapping):
        return list(rows.items())
    if isinstance(rows, str | bytes) or not isinstance(rows, Iterable):
        raise TypeError(
            "delete_rows() takes {path: row indexes} or (file, row indexes) pairs, not "
            f"{type(rows).__name__} {rows!r:.200}"
        )
    pairs = list(rows)
    for pair in pairs:
        if not isinstance(pair, tuple | list) or len(pair) != 2:
            raise TypeError(f"delete_rows() pairs are (file, row indexes), not {pair!r:.200}")
    return [tuple(p) for p in pairs]


def plan_file_deletes(
    store: LogStore, config: TableConfiguration, live: AddFile, rows: Any
) -> FileRowDeletes:
    """Check ``rows`` against ``live`` (every index inside the file) and merge them with its vector."""
    stats, num_records = _stats_with_num_records(store, config, live)
    new = _in_file(live, num_records, rows)
    before = np.empty(0, np.uint64)
    if live.deletion_vector is not None:
        before = deleted_rows(live.deletion_vector, store.root, store.fs, data_file=live.path)
    return FileRowDeletes(live, num_records, stats, before, np.union1d(before, new))


def _in_file(live: AddFile, num_records: int, rows: Any) -> np.ndarray:
    if isinstance(rows, str | bytes) or not isinstance(rows, Iterable | np.ndarray):
        raise TypeError(
            f"row indexes of {live.path} must be a sequence of integers, not {type(rows).__name__}"
        )
    indexes = as_row_indexes(rows)
    if len(indexes) and int(indexes[-1]) >= num_records:
        raise InvalidCommitError(
            f"cannot delete row index {int(indexes[-1])} of {live.path}: the file has {num_records} rows "
            f"(indexes 0 to {num_records - 1})"
        )
    return indexes


def _stats_with_num_records(store: LogStore, config: TableConfiguration, live: AddFile) -> tuple[str, int]:
    """The file's stats and physical row count: ``numRecords`` from the log, else the Parquet footer
    (a file with a vector must carry ``numRecords``, so its stats are then computed from that footer)."""
    count = live.num_records
    if count is not None:
        return live.stats, count
    path = live.path if "://" in live.path else store.table_file(live.path)
    with store.open_input_file(path) as fh:
        footer = pq.read_metadata(fh)
    stats = file_stats(footer, config.stats_schema)
    return stats, footer.num_rows


class RowDeletes:
    """The rows a transaction deletes, per live file, gathered over its ``delete_rows`` calls; turned into
    actions once, before its first commit attempt (``metrics`` are set then)."""

    def __init__(self) -> None:
        self.files: dict[str, FileRowDeletes] = {}
        self.inline_max_bytes = INLINE_MAX_BYTES
        self.metrics: dict[str, int] | None = None

    def __bool__(self) -> bool:
        return bool(self.files)

    def __contains__(self, path: str) -> bool:
        return path in self.files

    def check_not_deleting(self, path: str) -> None:
        if path in self.files:
            raise InvalidCommitError(f"{path} has rows deleted in this transaction: remove the file or "
                                     "delete rows of it, not both")  # fmt: skip

    def add(self, txn: PendingChange, removed: set[str], rows: Any, inline_max_bytes: Any) -> list[str]:
        """Take ``delete_rows``' arguments (checked whole before any is kept); returns the files read."""
        inline_max_bytes = int_arg(inline_max_bytes, "inline_max_bytes", minimum=0)
        pairs = row_delete_pairs(rows)
        snapshot, store = txn.snapshot, txn.table.store
        lives = live_files(snapshot, [ref for ref, _ in pairs], what="delete rows of")
        if not lives:
            return []
        assert snapshot is not None
        config = txn.configuration
        assert config is not None
        check_deletion_vectors_writable(config, f"table {store.uri}")
        planned: dict[str, FileRowDeletes] = {}
        for live, (_, indexes) in zip(lives, pairs, strict=True):
            if live.path in removed:
                raise InvalidCommitError(f"{live.path} is removed by this transaction: its rows cannot also "
                                         "be deleted")  # fmt: skip
            known = planned.get(live.path) or self.files.get(live.path)
            planned[live.path] = (
                known.with_rows(indexes) if known else plan_file_deletes(store, config, live, indexes)
            )
        self.files.update(planned)
        self.inline_max_bytes = inline_max_bytes
        return list(planned)

    def actions(self, txn: PendingChange, now: int) -> RowDeleteActions | None:
        """The vectors written and the file actions, the first time only (``None`` after, or for none)."""
        if not self.files or self.metrics is not None:
            return None
        assert txn.snapshot is not None
        config = txn.configuration
        assert config is not None
        done = row_delete_actions(txn.table.store, config, list(self.files.values()), now,
                                  inline_max_bytes=self.inline_max_bytes)  # fmt: skip
        self.metrics = done.metrics
        return done


@dataclass(frozen=True)
class RowDeleteActions:
    """What the deletes of a transaction commit: file actions, and Delta Spark's DELETE metrics."""

    adds: list[AddFile]
    removes: list[RemoveFile]
    metrics: dict[str, int]


def row_delete_actions(
    store: LogStore,
    config: TableConfiguration,
    deletes: Sequence[FileRowDeletes],
    deletion_timestamp: int,
    *,
    inline_max_bytes: int = INLINE_MAX_BYTES,
) -> RowDeleteActions:
    """Write the new vectors (inline or packed into files) and build each file's actions."""
    changed = [d for d in deletes if len(d.rows) > len(d.before)]
    whole = [d for d in changed if len(d.rows) == d.num_records]
    kept = [d for d in changed if len(d.rows) < d.num_records]
    descriptors: dict[str, DeletionVectorDescriptor] = {}
    stored = []
    for d in kept:
        # An array container costs 2 bytes a row: only vectors of a few rows can be small enough inline.
        small = inline_descriptor(d.rows) if 2 * len(d.rows) <= inline_max_bytes else None
        if small is not None and small.size_in_bytes <= inline_max_bytes:
            descriptors[d.live.path] = small
        else:
            stored.append(d)
    prefix = config.random_prefix_length or 0
    for batch in _packed(stored):
        written = write_deletion_vectors(
            store.fs, store.root, [d.rows for d in batch], random_prefix_length=prefix
        )
        descriptors.update((d.live.path, dv) for d, dv in zip(batch, written, strict=True))
    adds, removes = [], []
    for d in whole:
        removes.append(tombstone(d.live, deletion_timestamp, data_change=True))
    for d in kept:
        removes.append(tombstone(d.live, deletion_timestamp, data_change=True))
        adds.append(
            dataclasses.replace(
                d.live,
                deletion_vector=descriptors[d.live.path].to_json(),
                data_change=True,
                stats=wide_bounds(d.stats, len(d.before)),
            )
        )
    metrics = delete_metrics(deletes)
    return RowDeleteActions(adds, removes, metrics)


def delete_metrics(deletes: Sequence[FileRowDeletes]) -> dict[str, int]:
    """Delta Spark's DELETE metrics of these deletes, known before anything is written: rows newly deleted,
    files left with no row (removed whole), vectors added, removed (with their file) and updated."""
    changed = [d for d in deletes if len(d.rows) > len(d.before)]
    whole = [d for d in changed if len(d.rows) == d.num_records]
    had = [d.live.deletion_vector is not None for d in changed if len(d.rows) < d.num_records]
    return {
        "numDeletedRows": sum(len(d.rows) - len(d.before) for d in changed),
        "numRemovedFiles": len(whole),
        "numDeletionVectorsAdded": had.count(False),
        "numDeletionVectorsRemoved": sum(d.live.deletion_vector is not None for d in whole),
        "numDeletionVectorsUpdated": had.count(True),
    }


def _packed(deletes: list[FileRowDeletes]) -> list[list[FileRowDeletes]]:
    """Vectors in files of about ``PACKING_TARGET_BYTES`` each (estimating 2 bytes a deleted row, the
    array container's cost; bitmaps and runs are smaller), as Delta Spark bin-packs them."""
    batches: list[list[FileRowDeletes]] = []
    size = PACKING_TARGET_BYTES
    for d in deletes:
        estimate = min(2 * len(d.rows), 8192 * (1 + int(d.rows[-1]) // 65536)) + 64
        if size + estimate > PACKING_TARGET_BYTES and (not batches or batches[-1]):
            batches.append([])
            size = 0
        batches[-1].append(d)
        size += estimate
    return batches


# -- statistics of a file with a deletion vector ---------------------------------------------------------
def wide_bounds(stats: str, deleted_before: int) -> str:
    """``stats`` with ``tightBounds: false`` (Delta Spark's ``updateStatsToWideBounds``): min/max still
    bound the rows left but may no longer be reached. Where bounds were tight, a column whose nullCount
    equalled the live rows (all null) gets the physical row count, so it stays "all null" after the
    vector grows. Numbers are carried as written (a decimal bound is not rounded through a float)."""
    parsed = json.loads(stats, parse_float=Decimal)
    if parsed.get("tightBounds") is False:
        return stats
    tight = parsed.get("tightBounds") is True
    physical = parsed.get("numRecords")
    if tight and isinstance(physical, int) and isinstance(parsed.get("nullCount"), dict):
        parsed["nullCount"] = _all_null_as_physical(parsed["nullCount"], physical - deleted_before, physical)
    parsed["tightBounds"] = False
    return _dumps(parsed)


def _all_null_as_physical(counts: dict, logical: int, physical: int) -> dict:
    out: dict[str, Any] = {}
    for key, value in counts.items():
        if isinstance(value, dict):
            out[key] = _all_null_as_physical(value, logical, physical)
        else:
            out[key] = physical if value == logical and not isinstance(value, bool) else value
    return out


def _dumps(value: Any) -> str:
    """Compact JSON in which decimals keep the digits they were read with."""
    if isinstance(value, dict):
        items = (f"{json.dumps(k, ensure_ascii=False)}:{_dumps(v)}" for k, v in value.items())
        return "{" + ",".join(items) + "}"
    if isinstance(value, list):
        return "[" + ",".join(_dumps(v) for v in value) + "]"
    if isinstance(value, Decimal):
        return str(value)
    return json.dumps(value, ensure_ascii=False)
