"""Consuming a Delta table's changes exactly once in Airflow tasks: the log as a message queue.

The sensor, its trigger and the asset watcher hand on the version range they saw (``ChangeRange``: table,
``from_version``, ``to_version``; a sensor's ``change_range`` XCom, a watcher's asset event extra). The range
says *up to where* there is something to read (its ``from_version``, ``None`` after a sensor that waited for
an app transaction, is never where reading starts). *From where* is the consumer's own progress, recorded
with what it produced, so that no range is read twice or skipped whatever Airflow does (retries, clears, a
restarted triggerer, backfills in any order, runs that failed for good):

- writing a Delta table: the progress is an app transaction (``txn``) of that table, committed in the same
  version as the rows computed from the changes (``write_rows(app_id=..., app_version=to_version)``). A
  retry after that commit, a clear or a backfill of an older range finds the range done and reads and
  commits nothing (``already_committed``); a concurrent run that moved the progress first makes the write
  fail (``ConcurrentTransactionError``), and its retry reads on from there.
- writing no table: the progress is a key of Airflow's asset state store (the source table's asset, an
  inlet of the task), set once the task's own processing returned: at least once, so that processing must
  be idempotent (a retry after a crash between the two repeats it).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, TypeAlias

from airflow_provider_delta.log import TableNotFoundError

if TYPE_CHECKING:
    import pyarrow as pa

log = logging.getLogger(__name__)

PROGRESS_KEY_PREFIX = "delta_consumer/"  # asset state store key: the prefix and the consumer's app_id


@dataclass(frozen=True)
class ChangeRange:
    """Versions ``from_version``..``to_version`` of ``table_uri`` that a sensor or a watcher saw change
    (``from_version`` is ``None`` when the sensor waited for a version rather than past a baseline)."""

    table_uri: str
    from_version: int | None
    to_version: int

    def to_dict(self) -> dict[str, Any]:
        return {"table_uri": self.table_uri, "from_version": self.from_version, "to_version": self.to_version}


def change_range(value: Any) -> ChangeRange | None:
    """The range a sensor's ``change_range`` XCom, a trigger event, an asset event (or its ``extra``), or a
    list of asset events (``triggering_asset_events[asset]``: their union) hands on; ``None`` without one."""
    if value is None:
        return None
    if isinstance(value, ChangeRange):
        return value
    if isinstance(value, Mapping):
        body = value.get("payload") if isinstance(value.get("payload"), Mapping) else value
        if body.get("to_version") is None and body.get("version") is None:
            return None
        to = int(body.get("to_version", body.get("version")))
        first = body.get("from_version")
        if first is None and body.get("previous") is not None:
            first = int(body["previous"]) + 1
        return ChangeRange(str(body.get("table_uri") or ""), None if first is None else int(first), to)
    if hasattr(value, "extra"):  # an AssetEvent
        return change_range(value.extra or {})
    if isinstance(value, Iterable) and not isinstance(value, str | bytes):
        ranges = [r for r in (change_range(v) for v in value) if r is not None]
        if not ranges:
            return None
        firsts = [r.from_version for r in ranges]
        first = None if None in firsts else min(firsts)  # type: ignore[type-var]
        return ChangeRange(ranges[0].table_uri, first, max(r.to_version for r in ranges))
    raise TypeError(f"no change range in {type(value).__name__} {value!r}")


@dataclass(frozen=True)
class ConsumedChanges:
    """What one ``consume_changes`` call did, in one of three shapes (``start`` is never after ``end``):

    - **read**: versions ``start``..``end`` of the source, ``rows`` change rows handed to ``process``;
      ``committed_version`` is the sink's commit of the output with the progress (``None`` with a state
      store). ``already_committed`` only when a concurrent run committed the same range first.
    - **already committed**: the range asked for (``upto``) was consumed before: a retry after the commit,
      a clear, a backfill of an older range. Nothing read (``rows`` 0), nothing committed. ``start``..``end``
      is that range (``start`` ``None`` when it did not say where it began: an int ``upto``, the range of a
      sensor waiting for an app transaction); ``committed_version`` is the sink version that recorded the
      consumer's progress, which covers the range (``None`` with a state store).
    - **nothing new**: no source version after the consumer's progress (up to ``upto``, when given):
      ``start`` and ``end`` are ``None``, ``already_committed`` is ``False``. Without ``upto`` a retry of a
      run that committed looks like this too: only a range says which versions the run was for.
    """

    start: int | None
    end: int | None
    rows: int
    committed_version: int | None = None
    already_committed: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {"start": self.start, "end": self.end, "rows": self.rows, "committed_version":
                self.committed_version, "already_committed": self.already_committed}  # fmt: skip


class ProgressStore(Protocol):
    """Where a consumer without a sink keeps its progress: Airflow's asset state store accessor
    (``context["asset_state_store"][asset]``) or anything with the same ``get`` and ``set``."""

    def get(self, key: str) -> Any: ...

    def set(self, key: str, value: Any) -> None: ...


# What consume_changes reads up to: a version, or a range as change_range reads it (a ChangeRange, a
# sensor's change_range XCom or trigger event, the list triggering_asset_events[asset]; an asset event).
ChangeBound: TypeAlias = "int | ChangeRange | Mapping[str, Any] | Iterable[Any] | None"
ChangesProcessor: TypeAlias = "Callable[[pa.Table], Any]"


def consume_changes(
    hook: Any,
    source_uri: str,
    app_id: str,
    process: ChangesProcessor,
    *,
    sink_uri: str | None = None,
    progress: ProgressStore | None = None,
    upto: ChangeBound = None,
    first_version: int = 0,
    columns: list[str] | None = None,
    filter: Any = None,
    write_options: dict[str, Any] | None = None,
) -> ConsumedChanges:
    """Read the changes of ``source_uri`` after the consumer's progress, up to ``upto``, hand them to
    ``process`` and record the progress exactly once (see the module and :class:`ConsumedChanges`).
    ``hook`` is the ``DeltaHook`` whose connection reaches both tables (``DeltaHook.consume_changes``
    passes itself); its docstring describes the parameters.
    """
    if (sink_uri is None) == (progress is None):
        raise ValueError("pass sink_uri (progress as the sink's app transaction) or progress (a state store)")
    source = hook.get_table(source_uri)
    sink = hook.get_table(sink_uri) if sink_uri is not None else None
    key = PROGRESS_KEY_PREFIX + app_id
    done, sink_version = _progress(sink, app_id, progress, key)
    asked = ChangeRange("", None, upto) if isinstance(upto, int) else change_range(upto)
    if asked is not None and asked.to_version <= done:
        # Its range was consumed before (by this run's earlier try, or a run that read on past it).
        holder = None if sink is None else sink.locate_app_transaction(app_id, sink_version)
        first = asked.from_version
        if first is not None and first > asked.to_version:  # a range made by hand: never start > end
            first = None
        log.info("%s: versions %s..%d already consumed by %s (sink version %s): nothing read", source_uri,
                 first, asked.to_version, app_id, holder)  # fmt: skip
        return ConsumedChanges(first, asked.to_version, 0, holder, already_committed=True)
    end = asked.to_version if asked is not None else source.version()
    start = max(done + 1, first_version)
    if start > end:
        log.info("%s: nothing new for %s after version %d", source_uri, app_id, done)
        return ConsumedChanges(None, None, 0)
    rows = source.changes(start, end, columns=columns, filter=filter).to_table()
    out = process(rows)
    if progress is not None:
        progress.set(key, end)
        log.info("%s: versions %d..%d, %d change rows consumed by %s", source_uri, start, end, rows.num_rows,
                 app_id)  # fmt: skip
        return ConsumedChanges(start, end, rows.num_rows)
    result = hook.write_rows(sink_uri, out, app_id=app_id, app_version=end, expect_app_version=done,
                             **(write_options or {}))  # fmt: skip
    log.info("%s: versions %d..%d, %d change rows consumed by %s into %s version %d (already committed: %s)",
             source_uri, start, end, rows.num_rows, app_id, sink_uri, result.version,
             result.already_committed)  # fmt: skip
    return ConsumedChanges(start, end, rows.num_rows, result.version, result.already_committed)


def _progress(sink: Any, app_id: str, store: ProgressStore | None, key: str) -> tuple[int, int | None]:
    """The last source version the consumer recorded (-1: none yet), and the sink's version it was read at."""
    if store is not None:
        stored = store.get(key)
        return (-1 if stored is None else int(stored)), None
    try:
        snap = sink.snapshot()
    except TableNotFoundError:
        return -1, None
    return snap.app_transactions.get(app_id, -1), snap.version
