"""Consuming a Delta table's changes exactly once in Airflow tasks: the log as a message queue.

The sensor, its trigger and the asset watcher hand on the version range they saw (``ChangeRange``: table,
``from_version``, ``to_version``; a sensor's ``change_range`` XCom, a watcher's asset event extra). The range
says *up to where* there is something to read. *From where* is the consumer's own progress, recorded with
what it produced, so that no range is read twice or skipped whatever Airflow does (retries, clears, a
restarted triggerer, backfills in any order, runs that failed for good):

- writing a Delta table: the progress is an app transaction (``txn``) of that table, committed in the same
  version as the rows computed from the changes (``write_rows(app_id=..., app_version=to_version)``). A
  retry or a clear re-reads the same range and commits nothing (the table already holds the version); a
  concurrent run that moved the progress first makes the write fail (``ConcurrentTransactionError``), and
  its retry reads on from there.
- writing no table: the progress is a key of Airflow's asset state store (the source table's asset, an
  inlet of the task), set once the task's own processing returned: at least once, so that processing must
  be idempotent (a retry after a crash between the two repeats it).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from airflow_provider_delta.log import TableNotFoundError

if TYPE_CHECKING:
    import pyarrow as pa

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
    """What one ``consume_changes`` call did: the versions read (none when ``start > end``), the change
    rows read, and the sink's commit (``already_committed`` when a retry found its range done)."""

    start: int
    end: int
    rows: int
    committed_version: int | None = None
    already_committed: bool = False

    @property
    def read_anything(self) -> bool:
        return self.start <= self.end

    def to_dict(self) -> dict[str, Any]:
        return {"start": self.start, "end": self.end, "rows": self.rows, "committed_version":
                self.committed_version, "already_committed": self.already_committed}  # fmt: skip


def consume_changes(
    hook: Any,
    source_uri: str,
    app_id: str,
    process: Callable[[pa.Table], Any],
    *,
    sink_uri: str | None = None,
    progress: Any = None,
    upto: Any = None,
    first_version: int = 0,
    columns: list[str] | None = None,
    filter: Any = None,
    write_options: dict[str, Any] | None = None,
) -> ConsumedChanges:
    """Read the changes of ``source_uri`` after the consumer's progress, up to ``upto`` (a version, or a
    range from :func:`change_range`; the latest by default), hand them to ``process`` and record the
    progress exactly once (see the module). ``hook`` is the ``DeltaHook`` whose connection reaches both
    tables (``DeltaHook.consume_changes`` passes itself).

    :param process: called with the change rows (``DeltaTable.changes(...).to_table()``); with
        ``sink_uri`` it returns the rows to append to the sink (pyarrow, pandas, Polars).
    :param sink_uri: the table the consumer writes; its app transaction ``app_id`` is the progress.
    :param progress: without a sink, where the progress lives: Airflow's asset state store accessor of the
        source's asset (``context["asset_state_store"][asset]``), or anything with ``get``/``set``.
    :param first_version: where a consumer with no progress yet starts.
    """
    if (sink_uri is None) == (progress is None):
        raise ValueError("pass sink_uri (progress as the sink's app transaction) or progress (a state store)")
    source = hook.get_table(source_uri)
    key = PROGRESS_KEY_PREFIX + app_id
    if sink_uri is not None:
        sink = hook.get_table(sink_uri)
        try:
            done = sink.snapshot().app_transactions.get(app_id, -1)
        except TableNotFoundError:
            done = -1
    else:
        stored = progress.get(key)
        done = -1 if stored is None else int(stored)
    bound = change_range(upto) if upto is not None and not isinstance(upto, int) else None
    end = bound.to_version if bound is not None else (upto if isinstance(upto, int) else source.version())
    start = max(done + 1, first_version)
    if start > end:  # a retry, a clear or an older run whose range is done: nothing to read
        return ConsumedChanges(start, end, 0)
    rows = source.changes(start, end, columns=columns, filter=filter).to_table()
    out = process(rows)
    if sink_uri is None:
        progress.set(key, end)
        return ConsumedChanges(start, end, rows.num_rows)
    result = hook.write_rows(sink_uri, out, app_id=app_id, app_version=end, expect_app_version=done,
                             **(write_options or {}))  # fmt: skip
    return ConsumedChanges(start, end, rows.num_rows, result.version, result.already_committed)
