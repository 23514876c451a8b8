"""Write rows from Arrow (or pandas, Polars, anything with the Arrow C stream interface) as one commit.

The order matters for exactly-once and for never exposing bad data, as in the Spark writer:

1. read the latest snapshot; if it already holds ``app_id`` at ``app_version`` or later, stop: nothing is
   read, written or committed ("Transaction Identifiers");
2. plan (``write_plan``): schema enforcement or evolution, features, the table's rules, all refused by name
   before a file exists;
3. stream the rows: each batch is aligned to the table, checked against every rule (NOT NULL, invariants,
   CHECK constraints, generated columns, ``replace_where``), split by partition and appended to data files
   that roll over at ``target_file_size`` (``data_files``), so memory holds a few row groups, not the data;
4. commit adds, removes (overwrite), the app transaction and any protocol or metadata change as one
   version; the transaction retries past compatible concurrent commits.

A failure or refusal at any step deletes every file this write made; only a commit whose outcome is unknown
keeps them (it may be in the table). A concurrent commit of the same app transaction leaves our files
unreferenced: they are deleted too.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from collections.abc import Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor, wait
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..actions.actions import AddFile
from ..actions.commit_info import write_metrics
from ..base.errors import CommitOutcomeUnknownError, ConcurrentTransactionError, TableNotFoundError
from ..commits.transaction import CommitResult, Transaction
from ..expressions.evaluate import predicate_mask
from ..expressions.sql_parser import parse
from ..expressions.table_rules import check_rows
from ..features.identity import IdentityValues
from ..schema.partition_values import serialize_partition_value, typed_partition_values
from ..schema.physical_columns import to_physical
from .data_files import ROW_GROUP_BYTES, ROW_GROUP_ROWS, DataFileWriter
from .write_plan import WritePlan, align, plan_write

if TYPE_CHECKING:
    from ..snapshot.snapshot import Snapshot

log = logging.getLogger(__name__)
MODES = ("append", "overwrite")
SCHEMA_MODES = (None, "merge", "overwrite")
DEFAULT_TARGET_FILE_SIZE = 128 * 1024 * 1024
_PENDING_LIMIT = 64 * 1024 * 1024  # buffered rows across open files before the largest is flushed
_WRITE_THREADS = max(2, min(8, 2 * (os.cpu_count() or 1)))  # files encoded at once


def as_reader(data: Any) -> pa.RecordBatchReader:
    """Incoming rows as a stream: a Table, batches, a reader, pandas, or anything with
    ``__arrow_c_stream__`` (Polars, DuckDB results, nanoarrow...)."""
    if isinstance(data, pa.RecordBatchReader):
        return data
    if isinstance(data, pa.Table):
        return data.to_reader()
    if isinstance(data, pa.RecordBatch):
        return pa.Table.from_batches([data]).to_reader()
    if type(data).__module__.startswith("pandas"):
        return pa.Table.from_pandas(data, preserve_index=False).to_reader()  # the index is not a column
    if hasattr(data, "__arrow_c_stream__"):
        return pa.RecordBatchReader.from_stream(data)
    raise TypeError(
        f"cannot write {type(data).__name__}: pass a pyarrow Table or RecordBatchReader, a pandas or Polars "
        "DataFrame, or any object with __arrow_c_stream__"
    )


def write_rows(
    table: Any,
    data: Any,
    *,
    mode: str = "append",
    partition_by: list[str] | None = None,
    replace_where: str | None = None,
    schema_mode: str | None = None,
    app_id: str | None = None,
    app_version: int | None = None,
    target_file_size: int = DEFAULT_TARGET_FILE_SIZE,
    configuration: dict[str, str] | None = None,
    expect_app_version: int | None = None,
) -> CommitResult:
    """Write ``data`` to ``table`` (a ``DeltaTable`` handle) as one commit; the first write creates it.

    :param mode: ``append``, or ``overwrite`` to replace every live file (or, with ``replace_where``, the
        files whose partition values satisfy that SQL predicate; every written row must satisfy it too).
    :param partition_by: partition columns of a new table; must equal the table's for an existing one.
    :param schema_mode: ``merge`` adds the data's new columns (nullable); ``overwrite`` (with mode
        ``overwrite``) replaces the schema (and, with ``partition_by``, the partitioning).
    :param app_id: with ``app_version``, the exactly-once key: nothing is written when the table already
        holds ``app_id`` at ``app_version`` or later, and ``already_committed`` is returned.
    :param target_file_size: bytes after which a data file is closed and the next one started.
    :param configuration: table properties when the write creates the table; for an existing table only
        ``delta.feature.<name>: supported``, to add a feature the data needs (e.g. ``timestampNtz``).
    :param expect_app_version: the version of ``app_id`` the rows were computed from (-1: none yet), for a
        consumer of changes whose progress is ``app_id``: when the table holds another (a concurrent run
        moved it), the write is refused with ``ConcurrentTransactionError`` rather than counting a range
        twice. The transaction then refuses any concurrent commit of ``app_id`` after this snapshot too.
    """
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, not {mode!r}")
    if schema_mode not in SCHEMA_MODES:
        raise ValueError(f"schema_mode must be one of {SCHEMA_MODES}, not {schema_mode!r}")
    if replace_where is not None and mode != "overwrite":
        raise ValueError("replace_where needs mode='overwrite'")
    if (app_id is None) != (app_version is None):
        raise ValueError("pass app_id and app_version together")
    if target_file_size < 1:
        raise ValueError(f"target_file_size must be positive, not {target_file_size}")
    snap = _latest(table)
    if snap is not None and app_id is not None and snap.app_transactions.get(app_id, -1) >= int(app_version):
        holder = table.locate_app_transaction(app_id, snap.version)
        log.info("%s already holds app transaction %s version %s (table version %d): nothing written",
                 table.uri, app_id, app_version, holder)  # fmt: skip
        return CommitResult(holder, already_committed=True, attempts=0)
    if expect_app_version is not None:
        held = -1 if snap is None or app_id is None else snap.app_transactions.get(app_id, -1)
        if held != int(expect_app_version):
            raise ConcurrentTransactionError(
                f"{table.uri} holds app transaction {app_id!r} at {held}, not {expect_app_version} as when "
                "the rows were computed: another run moved it; read again from its new version",
                winning_version=-1 if snap is None else snap.version, winning_operation=None,
            )
    reader = as_reader(data)
    plan = plan_write(snap, reader.schema, partition_by=partition_by, schema_mode=schema_mode,
                      overwrite=mode == "overwrite", configuration=configuration,
                      replace_where=replace_where)  # fmt: skip
    # Rules and generation expressions this writer evaluates over Arrow: one it cannot is named now.
    _ = plan.compiled_rules, plan.compiled_generated
    removes = files_to_replace(snap, replace_where) if mode == "overwrite" and snap is not None else []
    identity = IdentityValues(plan.identity) if plan.identity else None
    files = PartitionedFiles(table.store, plan, target_file_size, identity)
    try:
        for batch in reader:
            files.write(batch)
        adds = files.close()
        marks = identity.high_water_marks if identity is not None else None
        result = commit_write(table, snap, plan, adds, removes, mode=mode, replace_where=replace_where,
                              app_id=app_id, app_version=app_version, identity_marks=marks)  # fmt: skip
    except CommitOutcomeUnknownError:
        raise  # the commit may be in the table: its files must stay
    except BaseException:
        files.delete()
        raise
    if result.already_committed:
        files.delete()  # a concurrent write of the same app transaction won: ours are unreferenced
    return result


def _latest(table: Any) -> Snapshot | None:
    try:
        return table.snapshot()
    except TableNotFoundError:
        return None


def files_to_replace(snap: Snapshot, replace_where: str | None) -> list[AddFile]:
    """The live files an overwrite removes: all, or those whose partition values satisfy the predicate."""
    files = snap.files
    if replace_where is not None:
        if not snap.partition_columns:
            raise ValueError("replace_where needs a partitioned table: it selects files by partition values")
        predicate = parse(replace_where)
        partitions = {c.lower() for c in snap.partition_columns}
        others = sorted({p[0] for p in predicate.columns() if p[0].lower() not in partitions})
        if others:
            raise ValueError(
                f"replace_where {replace_where!r} must be a SQL predicate over the partition columns "
                f"{snap.partition_columns}, not {others}"
            )
        mode = snap.table_configuration.column_mapping_mode
        files = files.filter(predicate_mask(predicate, typed_partition_values(snap.metadata, files, mode)))
    return AddFile.from_table(files)


class PartitionedFiles:
    """The data files of one write: open ones per partition, closed ones as ``add`` actions."""

    def __init__(self, store: Any, plan: WritePlan, target_file_size: int,
                 identity: IdentityValues | None = None, threads: int | None = None) -> None:  # fmt: skip
        self.store, self.plan, self.target, self.identity = store, plan, target_file_size, identity
        self.layout = layout = plan.layout
        self.data_columns = list(layout.data_columns)
        self.physical = layout.physical
        self.partitions = list(layout.partitions)
        self.open: dict[tuple, DataFileWriter] = {}
        self.adds: list[AddFile] = []
        self.made: list[str] = []
        self.sequence = 0
        self.lock = threading.Lock()
        self.pool = ThreadPoolExecutor(threads or _WRITE_THREADS, thread_name_prefix="delta-write")

    def write(self, batch: pa.RecordBatch | pa.Table) -> pa.Table:
        """Align ``batch`` to the table, check every rule, and append it to its partitions' files; the
        rows as written (the table's columns, generated and identity values filled in), which is what
        change data records. With the plan's ``hidden_columns`` (row tracking's materialized ids and
        versions) the batch carries them by name; they are written as given, after the table's columns."""
        hidden = [batch.column(name) for name in self.plan.hidden_columns]
        if hidden:
            batch = batch.drop_columns(list(self.plan.hidden_columns))
        rows = align(batch, self.plan)
        if self.identity is not None:
            rows = self.identity.fill(rows)
        check_rows(rows, self.plan.compiled_rules)
        written = rows
        for name, column in zip(self.plan.hidden_columns, hidden, strict=True):
            rows = rows.append_column(name, column)
        jobs: dict[tuple, tuple[dict[str, str | None], list[pa.Table]]] = {}
        for values, part in self._groups(rows):
            if part.num_rows:
                arrays = [to_physical(part.column(c), self.physical.field(i).type)
                          for i, c in enumerate(self.data_columns)]  # fmt: skip
                arrays += [part.column(name).cast(pa.int64()) for name in self.plan.hidden_columns]
                # Values that record the same partition ("" and null both record null) share one job: two
                # jobs of one partition at once would each open its file, and one file would be lost.
                job = jobs.setdefault(tuple(values.items()), (values, []))
                job[1].append(pa.Table.from_arrays(arrays, schema=self.physical))
        # Each partition's rows go to a file of their own: encoding them runs in parallel (pyarrow's Parquet
        # writer releases the GIL). All jobs end before an error is raised, so none writes after a delete.
        futures = [self.pool.submit(self._append, values, pa.concat_tables(tables) if len(tables) > 1
                                    else tables[0]) for values, tables in jobs.values()]  # fmt: skip
        wait(futures)
        for future in futures:
            future.result()
        self._bound_memory()
        return written

    def _append(self, values: dict[str, str | None], physical: pa.Table) -> None:
        key = tuple(values.items())
        with self.lock:
            writer = self.open.get(key)
        # Row groups at a time, so that a file closes near its target size however large the batch.
        for start in range(0, physical.num_rows, ROW_GROUP_ROWS):
            if writer is None:
                writer = self._open(values, key)
            writer.write(physical.slice(start, ROW_GROUP_ROWS))
            if writer.written_bytes >= self.target:
                add = writer.close()
                with self.lock:
                    del self.open[key]
                    self.adds.append(add)
                writer = None

    def _open(self, values: dict[str, str | None], key: tuple) -> DataFileWriter:
        folder = self.layout.partition_dir(values)
        with self.lock:
            name = self.layout.file_name(self.sequence)
            self.sequence += 1
            rel = f"{folder}/{name}" if folder else name
            self.made.append(rel)
        row_group_bytes = min(ROW_GROUP_BYTES, self.target)
        writer = DataFileWriter(self.store.fs, self.store.root, rel, values, self.layout, row_group_bytes)
        with self.lock:
            self.open[key] = writer
        return writer

    def _groups(self, rows: pa.Table) -> Iterator[tuple[dict[str, str | None], pa.Table]]:
        """The rows of each partition value: one code per row from the partition columns' dictionary
        indexes, rows reordered by code only when they are not in order already, then contiguous slices."""
        if not self.partitions:
            yield {}, rows
            return
        names = [logical for logical, _, _ in self.partitions]
        codes, stride = np.zeros(rows.num_rows, np.int64), 1
        for name in reversed(names):
            encoded = pc.dictionary_encode(rows.column(name).combine_chunks(), null_encoding="encode")
            codes += encoded.indices.to_numpy(zero_copy_only=False).astype(np.int64) * stride
            stride *= max(1, len(encoded.dictionary))
        if len(codes) > 1 and not (codes[1:] >= codes[:-1]).all():
            order = np.argsort(codes, kind="stable")
            codes, rows = codes[order], rows.take(pa.array(order))
        starts = np.flatnonzero(np.r_[True, codes[1:] != codes[:-1]]) if len(codes) else np.empty(0, int)
        ends = np.r_[starts[1:], len(codes)]
        for start, end in zip(starts.tolist(), ends.tolist(), strict=True):
            part = rows.slice(start, end - start)
            key = part.select(names).slice(0, 1).to_pylist()[0]
            yield {physical: serialize_partition_value(key[logical], delta_type)
                   for logical, physical, delta_type in self.partitions}, part  # fmt: skip

    def _bound_memory(self) -> None:
        """Many partitions each buffering a row group could hold the data: flush the largest buffers
        (in parallel) until what stays buffered is under the limit."""
        writers = sorted(self.open.values(), key=lambda w: w.pending_bytes, reverse=True)
        excess = sum(w.pending_bytes for w in writers) - _PENDING_LIMIT
        chosen = []
        for writer in writers:
            if excess <= 0:
                break
            chosen.append(writer)
            excess -= writer.pending_bytes
        futures = [self.pool.submit(w.flush) for w in chosen]
        wait(futures)
        for future in futures:
            future.result()

    def close(self) -> list[AddFile]:
        futures = [self.pool.submit(writer.close) for writer in self.open.values()]
        self.open.clear()
        self.adds.extend(f.result() for f in futures)
        self.pool.shutdown()
        return self.adds

    def delete(self) -> None:
        """Remove every file this write made (open ones aborted first); nothing of it stays behind."""
        self.pool.shutdown(wait=True, cancel_futures=True)
        for writer in self.open.values():
            writer.abort()
        self.open.clear()
        for rel in self.made:
            with contextlib.suppress(FileNotFoundError):
                self.store.fs.rm(self.store.table_file(rel))


def commit_write(
    table: Any,
    snap: Snapshot | None,
    plan: Any,
    adds: list[AddFile],
    removes: list[AddFile],
    *,
    mode: str,
    replace_where: str | None,
    app_id: str | None,
    app_version: int | None,
    identity_marks: Mapping[str, int] | None = None,
) -> CommitResult:
    """Commit a write (either writer's ``plan``: its ``protocol``, ``metadata``, ``partition_columns``) as
    Delta Spark's WRITE: overwrites read what they replace, so concurrent changes there conflict."""
    txn = Transaction(table, snap)
    if identity_marks:
        txn.set_identity_high_water_marks(identity_marks)
    if plan.protocol is not None:
        txn.update_protocol(plan.protocol)
    if plan.metadata is not None:
        txn.update_metadata(plan.metadata)
    txn.add_files(adds, constraints_checked=True)  # every rule was checked on every row before this
    if app_id is not None:
        txn.set_app_transaction(app_id, int(app_version))
    if mode == "overwrite" and snap is not None:
        if replace_where is None:
            txn.read_whole_table()
        else:
            # The partitions replaced and written: a concurrent append there conflicts, elsewhere not.
            txn.read_partitions(*[r.partition_values for r in removes], *[a.partition_values for a in adds])
        txn.remove_files(removes)
    params: dict[str, Any] = {"mode": mode.capitalize(), "partitionBy": list(plan.partition_columns)}
    if replace_where is not None:
        params["predicate"] = [replace_where]
    metrics = write_metrics(adds, removes)
    rows = metrics["numOutputRows"]
    result = txn.commit("WRITE", params, operation_metrics=metrics)
    if result.already_committed:
        log.warning("app transaction %s version %s landed concurrently; the %d file(s) written are unused",
                    app_id, app_version, len(adds))  # fmt: skip
    else:
        log.info("committed %d file(s), %d row(s) to %s as version %d", len(adds), rows, table.uri,
                 result.version)  # fmt: skip
    return result
