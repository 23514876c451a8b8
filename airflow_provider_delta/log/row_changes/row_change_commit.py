"""The one commit of a DELETE, UPDATE or MERGE, whichever engine found and wrote its rows.

It carries removes, adds, deletion vectors, ``cdc`` files when the change data feed is on, the app
transaction, Delta Spark's operation name, parameters and metrics, and the read set Delta Spark's conflict
checker uses (the condition as read predicate, the files read): so two operations on disjoint partitions
both commit, and one whose files a concurrent commit removed does not. Files written for a commit that then
fails are deleted; only a commit whose outcome is unknown keeps them (it may be in the table).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..actions.actions import AddFile
from ..base.arrow_utils import to_numpy
from ..base.errors import CommitOutcomeUnknownError
from ..commits.row_deletion import delete_metrics
from ..commits.transaction import Transaction
from ..expressions.expressions import Expr
from .target import RowChangeResult, Target

PATH = "__delta_file_path"  # a target row's file (as the log names it) and its row index in that file
INDEX = "__delta_row_index"


# Delta Spark's DELETE and UPDATE metrics of files, rows and bytes: every one present, 0 until counted.
DELETE_METRICS = ("numAddedFiles", "numRemovedFiles", "numDeletedRows", "numCopiedRows", "numAddedBytes",
                  "numRemovedBytes", "numDeletionVectorsAdded", "numDeletionVectorsRemoved",
                  "numDeletionVectorsUpdated")  # fmt: skip
UPDATE_METRICS = tuple("numUpdatedRows" if m == "numDeletedRows" else m for m in DELETE_METRICS)


@dataclass
class Changes:
    """What one row-level operation commits."""

    adds: list[AddFile] = field(default_factory=list)  # new data files (updated, copied, inserted rows)
    removes: list[AddFile] = field(default_factory=list)  # files removed whole
    deletes: dict[str, list[int]] = field(default_factory=dict)  # rows marked by deletion vectors
    change_data: list[pa.Table] = field(default_factory=list)
    read_files: list[str] = field(default_factory=list)
    identity_marks: dict[str, int] = field(default_factory=dict)  # identity values generated (inserts)


def num_records(adds: Iterable[AddFile]) -> int:
    """Live rows of files from their stats: ``numRecords`` less the rows their deletion vectors delete."""
    total = 0
    for a in adds:
        total += a.num_records or 0
        total -= int((a.deletion_vector or {}).get("cardinality", 0))
    return total


def rewrite_metrics(changes: Changes, changed_rows: int, started: float) -> dict[str, int]:
    """Delta Spark's file, byte and copied-row counts of a DELETE or UPDATE that wrote files, and its
    rewrite time since ``started`` (``changed_rows``: the updated rows among those written, 0 for DELETE)."""
    return {"numAddedFiles": len(changes.adds), "numRemovedFiles": len(changes.removes),
            "numCopiedRows": num_records(changes.adds) - changed_rows,
            "numAddedBytes": sum(a.size for a in changes.adds),
            "numRemovedBytes": sum(a.size for a in changes.removes),
            "rewriteTimeMs": int((time.monotonic() - started) * 1000)}  # fmt: skip


def row_indexes(hits: pa.Table) -> dict[str, list[int]]:
    """``{file: sorted row indexes}`` from a table of ``PATH`` and ``INDEX``. Grouped with numpy, not
    ``Table.group_by``, whose first use imports Acero, ``pyarrow.dataset`` and pandas: a tenth of a second
    and 45 MiB that a small DELETE in a fresh task would pay for nothing."""
    if hits.num_rows == 0:
        return {}
    encoded = pc.dictionary_encode(hits.column(PATH).combine_chunks())
    codes = to_numpy(encoded.indices)
    indexes = to_numpy(hits.column(INDEX))
    order = np.lexsort((indexes, codes))
    codes, indexes = codes[order], indexes[order]
    starts = np.flatnonzero(np.r_[True, codes[1:] != codes[:-1]])
    ends = np.r_[starts[1:], len(codes)]
    names = encoded.dictionary.to_pylist()
    bounds = zip(starts.tolist(), ends.tolist(), strict=True)
    return {names[codes[s]]: indexes[s:e].tolist() for s, e in bounds}


def commit(
    target: Target,
    changes: Changes,
    condition: str | Expr | None,
    params: dict[str, Any],
    metrics: dict[str, int],
    app_id: str | None,
    app_version: int | None,
    *,
    dv_metric_names: Mapping[str, str | None] | None = None,
    cdc_metric: str = "numAddedChangeFiles",
) -> RowChangeResult:
    """Commit ``changes`` once through the core; on any failure but an unknown outcome, delete the data
    files written for it. The deletes' metrics (``row_deletion.delete_metrics``) go into ``metrics`` under
    ``dv_metric_names`` (a name mapped to None is left out). ``condition`` is what the operation read: the
    rows it matches (None: the whole table)."""
    txn: Transaction | None = None
    try:
        txn = Transaction(target.table, target.snap)
        if target.evolved:
            txn.update_metadata(target.metadata)  # first: change data is written under it
        if changes.identity_marks:
            txn.set_identity_high_water_marks(changes.identity_marks)
        if app_id is not None:
            txn.set_app_transaction(app_id, int(app_version))
        if condition is None:
            txn.read_whole_table()
        else:
            txn.read_predicate(condition)
        txn.read_files(changes.read_files)
        txn.add_files(changes.adds, constraints_checked=True)  # checked on every row before writing
        txn.remove_files(changes.removes)
        if changes.deletes:
            txn.delete_rows(changes.deletes)
            names = dv_metric_names or {}
            for key, value in delete_metrics(list(txn.row_deletes.files.values())).items():
                if (name := names.get(key, key)) is not None:
                    metrics[name] = value
        cdc = [t for t in changes.change_data if t.num_rows]
        if cdc:
            txn.add_change_data(pa.concat_tables(cdc, promote_options="permissive"))
        metrics[cdc_metric] = len(txn.cdc_files)
        metrics["executionTimeMs"] = int((time.monotonic() - target.started) * 1000)
        result = txn.commit(target.operation, params, operation_metrics=metrics)
    except CommitOutcomeUnknownError:
        raise  # the commit may be in the table: its files must stay
    except BaseException:
        written = [a.path for a in changes.adds] + [c.path for c in (txn.cdc_files if txn else [])]
        delete_written(target.table, written)
        raise
    return RowChangeResult(result.version, metrics, result.already_committed)


def delete_written(table: Any, paths: Iterable[str]) -> None:
    """Files written for a commit that did not happen: nothing references them, so they go at once."""
    for path in paths:
        with contextlib.suppress(FileNotFoundError):
            table.store.fs.rm(table.store.table_file(path))
