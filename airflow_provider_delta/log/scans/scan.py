"""The scan of a snapshot: which files to read, and their rows as Arrow, streamed in bounded memory.

As delta-kernel-rs's ``scan``: planning (the live files, less those the filter rules out by partition values
and statistics, see ``skipping``) is separate from reading each file (``scan_file``), so every reader runs
the same plan: this module's Arrow outputs, the Spark reader on executors, and any operation that reads
rows. Outputs:

- :meth:`Scan.to_batches` / :meth:`Scan.to_reader`: a ``pyarrow.RecordBatchReader`` that reads a few files
  ahead in threads and holds at most that many files' batches, never the whole table;
- :meth:`Scan.to_table`: everything as one ``pyarrow.Table``.

Both hand off to pandas (``to_pandas()``), Polars (``polars.from_arrow``) and DuckDB (which scans a
``RecordBatchReader`` or a Table by name) without copying the Arrow buffers.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc

from ..base.arrow_utils import rows_pool
from ..base.errors import DataFileNotFoundError
from ..expressions.expressions import ColumnNotFoundError, Opaque, as_expr
from ..expressions.skipping import FileStatistics, files_matching
from ..expressions.sql_parser import parse
from ..schema.partition_values import typed_partition_values
from ..schema.schema import physical_name
from ..schema.stats import typed_file_stats
from .checkpoint_skipping import CheckpointRowGroups
from .scan_file import (
    FileTask,
    ReadSpec,
    check_metadata_fields,
    file_tasks,
    read_data_file,
)
from .struct_stats import checkpoint_stats

if TYPE_CHECKING:
    from ..snapshot.snapshot import Snapshot

DEFAULT_READ_AHEAD = 4  # files (or groups of small files) read concurrently and held at most
# Below this mean file size, reading local files is per-file Python work under the GIL and threads only
# contend for it: one thread then (measured scans: 50-row files of 1.7 KiB, 1.5-2.0 s in one thread against
# 2.6 s in four; 16 KiB files 0.33 s against 0.46 s; 36 KiB files 0.30 s against 0.26 s).
SMALL_LOCAL_FILE_BYTES = 32 * 1024
GROUP_FILES = 64  # small files read by one worker in one go
GROUP_BYTES = 4 * 1024 * 1024  # ... and up to this many bytes of them


class Scan:
    """Rows of ``snapshot``: ``columns`` (all by default, in table order), rows where ``filter`` holds.

    :param filter: a ``pyarrow.compute.Expression`` (applied to rows as Arrow evaluates it), deltalake-style
        DNF tuples or SQL text (both evaluated with Spark SQL's semantics). Either way it first skips files
        by partition values and statistics. A column the table lacks raises :class:`ColumnNotFoundError`.
    :param metadata: ``_metadata`` fields to add as a struct column: ``file_path``, ``row_index``, and on
        row-tracking tables ``row_id`` and ``row_commit_version`` (as Delta Spark's ``_metadata``).
    :param read_ahead: files read concurrently (and held at most) by the streaming outputs; consecutive
        small files count as one (see ``_groups``). By default 4; on a local disk one per core (2 to 4),
        or 1 when the files are small (``SMALL_LOCAL_FILE_BYTES`` on average).
    :param files: the ``add`` rows to read instead of the snapshot's live files (change reads).
    :param memory_pool: the ``pyarrow.MemoryPool`` the rows are allocated from; by default the system
        allocator (see ``arrow_utils.rows_pool`` for why not pyarrow's default).
    """

    def __init__(
        self,
        snapshot: Snapshot,
        columns: Sequence[str] | None = None,
        filter: Any = None,
        *,
        metadata: Sequence[str] = (),
        read_ahead: int | None = None,
        files: pa.Table | None = None,
        memory_pool: pa.MemoryPool | None = None,
    ) -> None:
        self.snapshot = snapshot
        self.memory_pool = memory_pool or rows_pool()
        schema = snapshot.metadata.schema
        by_lower = {f["name"].lower(): f["name"] for f in schema["fields"]}
        where = f"table {snapshot.store.uri}"
        self.columns = tuple(
            _resolve(c, by_lower, where) for c in (columns or [f["name"] for f in schema["fields"]])
        )
        config = snapshot.table_configuration
        check_metadata_fields(metadata, config, where)
        self.arrow_filter = filter if isinstance(filter, pc.Expression) else None
        self.filter = parse(filter) if isinstance(filter, str) else as_expr(filter)
        needed = [
            _resolve(p[0], by_lower, where, filter) for p in (self.filter.columns() if self.filter else ())
        ]
        read = [*self.columns, *(c for c in dict.fromkeys(needed) if c not in self.columns)]
        self.spec = ReadSpec(
            schema=schema, mode=config.column_mapping_mode,
            partition_columns=tuple(snapshot.partition_columns),
            columns=self.columns, read_columns=tuple(read), metadata=tuple(metadata),
            filter=None if self.arrow_filter is not None else self.filter, arrow_filter=self.arrow_filter,
            row_id_column=config.materialized_row_id_column,
            row_version_column=config.materialized_row_commit_version_column,
            storage_options=dict(snapshot.store.storage_options),
        )  # fmt: skip
        self._live = files is None
        self.files = self._plan_live() if self._live else self._plan(files)
        self.read_ahead = max(1, int(read_ahead)) if read_ahead is not None else self._default_read_ahead()

    def _default_read_ahead(self) -> int:
        local = self.snapshot.store.protocol in ("file", "local")
        if not local or self.files.num_rows == 0 or "size" not in self.files.column_names:
            return DEFAULT_READ_AHEAD
        mean = pc.mean(self.files.column("size")).as_py()
        if mean is not None and mean < SMALL_LOCAL_FILE_BYTES:
            return 1
        # Reading local files is decoding, CPU work: a file per core (Arrow's count), at least two so that
        # one file's reads overlap another's decoding. More only contend: on 2 cores, 4 files at once cost
        # rows_10m 8 % and a read with deletion vectors 19 % more wall time than 2, most of it system time
        # for the same number of page faults.
        return max(2, min(DEFAULT_READ_AHEAD, pa.cpu_count()))

    @property
    def schema(self) -> pa.Schema:
        """The schema of the rows: logical names and types, ``_metadata`` last when asked for."""
        return self.spec.output_schema()

    @property
    def num_files_skipped(self) -> int:
        return self.candidates - self.files.num_rows

    def _plan_live(self) -> pa.Table:
        """The snapshot's live files that the filter may match. Without the file list in memory they are
        streamed and filtered batch by batch (only the matches are held); with it, the checkpoint's parsed
        statistics help too."""
        snap = self.snapshot
        if self.filter is None or isinstance(self.filter, Opaque) or snap.files_loaded:
            return self._plan(snap.files)
        groups = CheckpointRowGroups(self.filter, snap.table_configuration)
        files, seen = snap.filtered_files(lambda batch: self._plan(batch, streamed=True), groups)
        # The files of skipped row groups were never seen: the live count is the checksum's when it has
        # one, else the skipped groups' adds (an upper bound: a later commit may have removed some).
        counted = snap.checksum is not None and snap.checksum.totals is not None
        self.candidates = snap.num_files if counted and groups.skipped_files else seen + groups.skipped_files
        return files

    def _plan(self, files: pa.Table, *, streamed: bool = False) -> pa.Table:
        self.candidates = files.num_rows
        if self.filter is None or files.num_rows == 0 or isinstance(self.filter, Opaque):
            return files
        config = self.snapshot.table_configuration
        md = config.metadata
        mode = config.column_mapping_mode
        physical = {f["name"].lower(): physical_name(f, mode) for f in md.schema["fields"]}
        # The checkpoint's parsed statistics line up with the whole file list only (not with change reads'
        # files, nor with a streamed batch).
        live = "stats" in files.column_names and not streamed and files is self.snapshot.files
        parsed = checkpoint_stats(self.snapshot, files) if live else None
        typed = typed_partition_values(md, files, mode)
        if typed.num_columns:
            # Partition values first: they are cheap, and the files they rule out never have their JSON
            # statistics parsed (most of a plan's time: 4.5 of 8 s for 1 % of 1,000,000 files).
            facts = FileStatistics(files.num_rows, typed, None, physical)
            if facts.partition_only(self.filter):
                return files.filter(files_matching(self.filter, facts))
            first = files_matching(self.filter, facts)
            files, typed = files.filter(first), typed.filter(first)
            parsed = parsed.filter(first) if parsed is not None else None
        stats = typed_file_stats(config.stats_schema, files) if "stats" in files.column_names else None
        facts = FileStatistics(files.num_rows, typed, stats, physical, parsed)
        return files.filter(files_matching(self.filter, facts))

    def tasks(self) -> list[FileTask]:
        """The files to read, in log order."""
        return file_tasks(self.files)

    def _groups(self) -> list[list[FileTask]]:
        """The tasks in log order, consecutive small files together (up to ``GROUP_FILES`` files and
        ``GROUP_BYTES``): a worker reads a group in one go, so a table of thousands of small files is
        not thousands of hand-offs between threads. A large file is a group of its own."""
        tasks = self.tasks()
        if "size" not in self.files.column_names:
            return [[t] for t in tasks]
        groups: list[list[FileTask]] = []
        total = 0
        for task, size in zip(tasks, self.files.column("size").to_pylist(), strict=True):
            size = size or 0
            if not groups or len(groups[-1]) >= GROUP_FILES or total + size > GROUP_BYTES:
                groups.append([])
                total = 0
            groups[-1].append(task)
            total += size
        return groups

    # -- outputs --------------------------------------------------------------------------------------
    def to_batches(self) -> Iterator[pa.RecordBatch]:
        """Batches file by file, in log order; at most ``read_ahead`` files (or groups of small files) are
        read or held at once."""
        store = self.snapshot.store

        def read(group: list[FileTask]) -> list[pa.RecordBatch]:
            pool = self.memory_pool
            try:
                return [b for t in group for b in read_data_file(t, self.spec, store.fs, store.root, pool)]
            except DataFileNotFoundError as exc:
                if not self._live:  # the caller's files (a change read): it knows their versions
                    raise
                version = self.snapshot.version
                raise DataFileNotFoundError(
                    f"version {version} of {store.uri} cannot be read: {exc}", path=exc.path, version=version
                ) from None

        yield from batches_in_order(self._groups(), read, self.read_ahead, self.schema)

    def to_reader(self) -> pa.RecordBatchReader:
        return pa.RecordBatchReader.from_batches(self.schema, self.to_batches())

    def to_table(self) -> pa.Table:
        return pa.Table.from_batches(list(self.to_batches()), schema=self.schema)

    def count(self) -> int:
        return sum(b.num_rows for b in self.to_batches())


def _resolve(name: str, by_lower: dict[str, str], where: str, context: Any = None) -> str:
    found = by_lower.get(str(name).lower())
    if found is None:
        what = f" in filter {context!r}" if context is not None else ""
        raise ColumnNotFoundError(
            f"column {name!r}{what} is not in {where} (columns: {', '.join(by_lower.values())})"
        )
    return found


def batches_in_order(units: Iterable[Any], read: Callable[[Any], list[pa.RecordBatch]], read_ahead: int,
                     schema: pa.Schema) -> Iterator[pa.RecordBatch]:
    """The batches ``read`` makes of each unit (a group of files, a change task), in order with a few read
    ahead, each in ``schema`` (a file without some nullable column gives a narrower batch): what every
    streaming read of this module's callers yields."""
    for batches in ordered(units, read, read_ahead):
        for batch in batches:
            yield batch if batch.schema == schema else batch.cast(schema)


def gathered(batches: Iterable[pa.RecordBatch], rows: int, size: int) -> Iterator[pa.Table]:
    """``batches`` (a small file gives a small one) gathered into tables of about ``rows`` rows or
    ``size`` bytes, each one chunk: consumers that pay per batch (a writer's row groups, Spark's Arrow
    messages) then pay per gathered table, not per file. A batch that fills a table alone is not copied."""
    pending: list[pa.RecordBatch] = []
    count = total = 0
    for batch in batches:
        if not batch.num_rows:
            continue
        pending.append(batch)
        count += batch.num_rows
        total += batch.get_total_buffer_size()
        if count >= rows or total >= size:
            yield _one_chunk(pending)
            pending, count, total = [], 0, 0
    if pending:
        yield _one_chunk(pending)


def _one_chunk(batches: list[pa.RecordBatch]) -> pa.Table:
    table = pa.Table.from_batches(batches)
    return table if len(batches) == 1 else table.combine_chunks()


def ordered(items: Iterable[Any], work: Any, window: int) -> Iterator[Any]:
    """``work(item)`` for each item in threads, results in order, at most ``window`` started and unread.

    A consumer that stops early (closes the generator) cancels what has not started; what is running ends
    on its own, its result dropped. A window of one reads in the consumer's thread: one thread could not
    work ahead anyway (the next item starts once this one is taken), and handing each item to a pool
    thread and back cost 15 % of reading 10,000 small files.
    """
    if window <= 1:
        yield from map(work, items)
        return
    pending: deque[Future] = deque()
    pool = ThreadPoolExecutor(max_workers=window, thread_name_prefix="delta-scan")
    try:
        iterator = iter(items)
        for item in iterator:
            pending.append(pool.submit(work, item))
            if len(pending) >= window:
                yield pending.popleft().result()
        while pending:
            yield pending.popleft().result()
    finally:
        for future in pending:
            future.cancel()
        pool.shutdown(wait=False, cancel_futures=True)


def scan(
    snapshot: Snapshot, columns: Sequence[str] | None = None, filter: Any = None, **options: Any
) -> Scan:
    """A :class:`Scan` of ``snapshot`` (see there)."""
    return Scan(snapshot, columns, filter, **options)
