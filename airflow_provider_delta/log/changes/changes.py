"""Change reads: what a range of versions changed, from its commits alone ("the log as a message queue").

A consumer remembers the last version it processed and reads what came after. ``read_changes`` gives, for
each version of a range, its commit timestamp, operation and file actions (adds, removes, ``cdc``) as
Arrow, and the changed rows as Delta Spark's ``table_changes`` reads them ("Change Data Files"):

- a version with ``cdc`` actions is read from its change data files only (their ``_change_type``);
- otherwise its adds with ``dataChange`` are inserts and its removes with ``dataChange`` deletes; a file
  removed and added back with another deletion vector yields the rows the new vector adds as deletes
  (and those it drops, as a RESTORE does, as inserts); ``dataChange=false`` actions (OPTIMIZE) and a MERGE
  whose metrics say it changed no row are skipped;
- every row gets ``_change_type``, ``_commit_version`` and ``_commit_timestamp`` (the in-commit timestamp
  when the commit has one, else the commit file's modification time made monotone, as Delta Spark).

Rows are read in the schema of the range's last version, as Delta Spark's default for column-mapping
tables (``endVersion``; docs/howto/consume-changes.md says how tables without column mapping differ):
rows written before an additive change (a column added, a type widened) read it as null or widened; a
range crossing a non-additive one (a column renamed or dropped: ``schema_evolution``) is refused by name.
Bounds are versions or timestamps (``change_range``). What it costs is the range's commits, a listing
and the protocol and metadata at the start (``version_metadata``): never a replay of the table, so the
last ten commits of a table with a million files cost about ten commits.

Refused by name: an end before the start (``ChangeRangeError``), a version after the latest or whose
commit log cleanup removed (``VersionNotFoundError``), a version that removed rows while the table did not
record change data (``ChangeDataNotRecordedError``; appends need no change data feed, so an append-only
table without it is a message queue too), a schema change older rows cannot follow
(``IncompatibleSchemaChangeError``, on read), a file VACUUM deleted (``DataFileNotFoundError``, on read).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..actions.actions import ADD, REMOVE, STRING_MAP, Metadata, Protocol
from ..base.arrow_utils import decode_uri_paths, empty_table, to_numpy
from ..base.errors import (
    ChangeDataNotRecordedError,
    ChangeRangeError,
    CorruptLogError,
    DeltaError,
    IncompatibleSchemaChangeError,
    VersionNotFoundError,
)
from ..expressions.expressions import ColumnNotFoundError
from ..features.configuration import TableConfiguration
from ..features.protocol import check_read_supported
from ..files.commit_json import Actions, parse_json_actions
from ..files.segment import commit_name, commit_version
from ..files.storage import FileMeta, LogStore
from ..scans.scan import DEFAULT_READ_AHEAD, batches_in_order
from ..scans.scan_file import read_spec_of
from ..snapshot.version_metadata import read_version_metadata, small_actions
from .change_range import Bound, Timestamp, latest_version, resolve_range
from .change_rows import CDC, ChangeTask, change_data_spec, change_schema, read_change_task
from .schema_evolution import SchemaBreak, schema_break

# Delta Spark monotonises file modification times over the 100 commits before a range (DeltaHistoryManager).
_MONOTONE_LOOKBACK = 100
CDC_FIELDS = pa.schema([("path", pa.string()), ("partitionValues", STRING_MAP), ("size", pa.int64()),
                        ("dataChange", pa.bool_()), ("tags", STRING_MAP)])  # fmt: skip


@dataclass(frozen=True)
class VersionChanges:
    """One commit of a change read: its file actions as Arrow, and the protocol and metadata after it."""

    version: int
    timestamp: int  # ms since the epoch, what _commit_timestamp holds
    commit_info: dict[str, Any]
    adds: pa.Table
    removes: pa.Table
    cdc: pa.Table
    protocol: Protocol
    metadata: Metadata

    @property
    def operation(self) -> str | None:
        return self.commit_info.get("operation")

    @property
    def records_change_data(self) -> bool:
        return TableConfiguration(self.protocol, self.metadata).change_data_feed_property


class Changes:
    """The changes of versions ``start``..``end`` of a table (see the module). ``versions`` describes each
    commit; ``to_table()``, ``to_reader()`` and ``to_batches()`` read the changed rows."""

    def __init__(self, store: LogStore, start: int, end: int, versions: list[VersionChanges],
                 protocol: Protocol, metadata: Metadata, columns: Sequence[str] | None = None,
                 filter: Any = None, read_ahead: int = DEFAULT_READ_AHEAD) -> None:  # fmt: skip
        self.store = store
        self.start, self.end = start, end  # end = start - 1: no version (timestamps between two commits)
        self.versions = versions
        self.protocol, self.metadata = protocol, metadata  # at the end of the range
        config = TableConfiguration(protocol, metadata)
        names = _columns(self.metadata, columns, store.uri)
        self.spec = read_spec_of(config, names, store.storage_options, filter)
        self.read_ahead = max(1, int(read_ahead))

    def __repr__(self) -> str:
        return f"Changes({self.store.uri!r}, {self.start}..{self.end})"

    @property
    def schema(self) -> pa.Schema:
        """The table's columns (logical names, the end version's schema), then the three change columns."""
        return change_schema(self.spec)

    @cached_property
    def tasks(self) -> list[ChangeTask]:
        """The files to read, version by version (refuses a version whose changes cannot be told, and
        older rows the end version's schema cannot read)."""
        refuse_schema_breaks(self.versions, self.store.uri)
        return [task for v in self.versions for task in plan_version(v, self.store.uri)]

    def removes_rows(self) -> int | None:
        """The first version that removes or rewrites rows (a ``remove`` or ``cdc`` that changes data)."""
        return next((v.version for v in self.versions if _removes_data(v) or v.cdc.num_rows), None)

    def to_batches(self) -> Iterator[pa.RecordBatch]:
        store, spec, schema = self.store, self.spec, self.schema
        cdc_spec = change_data_spec(spec)

        def read(task: ChangeTask) -> list[pa.RecordBatch]:
            return list(read_change_task(task, spec, cdc_spec, store.fs, store.root))

        yield from batches_in_order(self.tasks, read, self.read_ahead, schema)

    def to_reader(self) -> pa.RecordBatchReader:
        return pa.RecordBatchReader.from_batches(self.schema, self.to_batches())

    def to_table(self) -> pa.Table:
        return pa.Table.from_batches(list(self.to_batches()), schema=self.schema)


def read_changes(store: LogStore, start: Bound | None = None, end: Bound | None = None, *,
                 starting_timestamp: Timestamp | None = None, ending_timestamp: Timestamp | None = None,
                 columns: Sequence[str] | None = None, filter: Any = None,
                 read_ahead: int = DEFAULT_READ_AHEAD) -> Changes:  # fmt: skip
    """The changes of versions ``start``..``end`` (inclusive; ``end`` defaults to the latest). A bound is a
    version, or a timestamp (``change_range``: positional as ``datetime`` or ISO-8601 text, or any
    time-travel timestamp, ms since the epoch too, as ``starting_timestamp`` / ``ending_timestamp``),
    resolved as Delta Spark's ``table_changes`` does: the start is the first commit at or after it, the end
    the last commit at or before it. ``columns`` and ``filter`` (SQL text, DNF tuples or a
    ``pyarrow.compute.Expression``, applied to the changed rows) as ``Scan`` takes them."""
    first, last, empty = resolve_range(store, start, end, starting_timestamp, ending_timestamp)
    if empty:  # both timestamps fall between the same two commits: Delta Spark reads nothing
        config = read_version_metadata(store, last)
        return Changes(store, first, last, [], config.protocol, config.metadata, columns, filter, read_ahead)
    listing = store.list_log(max(0, first - _MONOTONE_LOOKBACK))
    commits = {v: f for f in listing if (v := commit_version(f.name)) is not None}
    latest = max(commits, default=None)
    if latest is None or first > latest:
        latest = latest_version(store)
    if first > latest:  # Delta Spark checks this first (startVersionAfterLatestVersion)
        _check_retained(store, commits, first, first, latest)
    if last is None:
        last = latest
    if last < first:
        raise ChangeRangeError(
            f"the changes of {store.uri} from version {first} to {last}: the end is before the start"
        )
    if last > latest:
        raise VersionNotFoundError(
            f"version {last} of {store.uri} does not exist yet (the latest is {latest})",
            earliest=min(commits, default=None), latest=latest,
        )  # fmt: skip
    _check_retained(store, commits, first, last, latest)
    names = [commit_name(v) for v in range(first, last + 1)]
    try:
        datas = store.read_log_files(names)
    except FileNotFoundError as exc:
        raise VersionNotFoundError(f"a commit of versions {first}..{last} of {store.uri} was removed by log "
                                   f"cleanup while being read ({exc})") from None  # fmt: skip
    known = dict(zip(range(first, last + 1), datas, strict=True))
    config = read_version_metadata(store, first, known)
    versions = _versions(store, commits, known, config.protocol, config.metadata)
    end_state = versions[-1]
    return Changes(store, first, last, versions, end_state.protocol, end_state.metadata, columns, filter,
                   read_ahead)


def _check_retained(
    store: LogStore, commits: dict[int, FileMeta], first: int, last: int, latest: int
) -> None:
    if first > latest:
        raise VersionNotFoundError(
            f"version {first} of {store.uri} does not exist yet (the latest is {latest})",
            earliest=min(commits, default=None), latest=latest,
        )  # fmt: skip
    missing = next((v for v in range(first, last + 1) if v not in commits), None)
    if missing is not None:
        earliest = min((v for v in commits if v > missing), default=None)
        raise VersionNotFoundError(
            f"the commit of version {missing} of {store.uri} is no longer in the log (log cleanup removed it "
            "after delta.logRetentionDuration), so its changes cannot be read",
            earliest=earliest, latest=latest,
        )  # fmt: skip


def _versions(store: LogStore, commits: dict[int, FileMeta], known: dict[int, bytes], protocol: Protocol,
              metadata: Metadata) -> list[VersionChanges]:  # fmt: skip
    """Each commit of the range, parsed: file actions in one Arrow pass, the small ones per commit."""
    versions = sorted(known)
    acc = Actions()
    parse_json_actions(acc, [(v, store.log_file(commit_name(v)), known[v]) for v in versions])
    adds, removes = _by_version(acc.adds, ADD, versions), _by_version(acc.removes, REMOVE, versions)
    times = _commit_times(commits, versions)
    out = []
    for v in versions:
        path = store.log_file(commit_name(v))
        p, m = small_actions(known[v], path)
        protocol, metadata = p or protocol, m or metadata
        if p is not None:
            check_read_supported(protocol, where=f"table {store.uri} at version {v}")
        info = acc.commit_infos.get(v) or {}
        ict = info.get("inCommitTimestamp")
        timestamp = int(ict) if isinstance(ict, int) and not isinstance(ict, bool) else times[v]
        out.append(VersionChanges(v, timestamp, info, adds[v], removes[v], _cdc_actions(known[v], path),
                                  protocol, metadata))  # fmt: skip
    return out


def _by_version(tables: list[pa.Table], shape: pa.StructType, versions: list[int]) -> dict[int, pa.Table]:
    """One table of file actions (``_version`` last, in version order) sliced per version."""
    table = pa.concat_tables(tables) if tables else empty_table(pa.schema([*shape, ("_version", pa.int64())]))
    column = to_numpy(table.column("_version"))
    out = {}
    for v in versions:
        lo, hi = np.searchsorted(column, v, "left"), np.searchsorted(column, v, "right")
        out[v] = table.slice(int(lo), int(hi - lo))
    return out


def _commit_times(commits: dict[int, FileMeta], versions: list[int]) -> dict[int, int]:
    """Modification times made monotone from the lookback on (each at least 1 ms after the one before)."""
    out, previous = {}, None
    for v in sorted(commits):
        if v > versions[-1]:
            break
        ts = commits[v].modification_time
        ts = ts if previous is None else max(ts, previous + 1)
        out[v] = previous = ts
    return out


def _cdc_actions(data: bytes, path: str) -> pa.Table:
    rows = []
    if b'"cdc"' in data:
        for lineno, line in enumerate(data.split(b"\n"), start=1):
            if b'"cdc"' not in line:
                continue
            try:
                body = json.loads(line).get("cdc")
            except (ValueError, AttributeError) as exc:
                raise CorruptLogError(f"malformed cdc action: {exc}", path=path, line=lineno) from None
            if isinstance(body, dict):
                if not isinstance(body.get("path"), str):
                    raise CorruptLogError("cdc action without a path", path=path, line=lineno)
                rows.append({"path": body["path"], "partitionValues": list((body.get("partitionValues") or {})
                             .items()), "size": body.get("size"), "dataChange": body.get("dataChange", False),
                             "tags": list((body.get("tags") or {}).items()) or None})  # fmt: skip
    if not rows:  # the common case; from_pylist of no rows would import pandas (0.15 s in a fresh task)
        return empty_table(CDC_FIELDS)
    table = pa.Table.from_pylist(rows, schema=CDC_FIELDS)
    return table.set_column(0, "path", decode_uri_paths(table.column("path").combine_chunks()))


# -- planning ---------------------------------------------------------------------------------------
def refuse_schema_breaks(versions: list[VersionChanges], uri: str) -> None:
    """Every row of a range is read in the end version's schema: refuse a range whose older rows cannot
    follow a schema change inside it (``schema_evolution``). As Delta Spark's batch change read, the
    start's metadata and each metaData after it are checked against the end's (a change at the start
    itself is no break: no row before it is read); the version named is that of the change itself, where
    Delta Spark names the metaData it was checking, which may be an earlier, additive change."""
    if not versions:
        return
    first, end = versions[0], versions[-1]
    # _versions carries a metadata object on until a commit holds another: "is not" finds the metaData
    changed = [v for prev, v in zip(versions, versions[1:], strict=False) if v.metadata is not prev.metadata]
    for origin in (first, *changed):
        if schema_break(origin.metadata, end.metadata) is None:
            continue
        # The first later change the origin's rows cannot follow: there is one, the end's own metaData.
        at, found = next((v.version, f) for v in changed if v.version > origin.version
                         and (f := schema_break(origin.metadata, v.metadata)) is not None)  # fmt: skip
        raise _incompatible(uri, first.version, end.version, at, found)


def _incompatible(uri: str, start: int, end: int, version: int, found: SchemaBreak) -> DeltaError:
    return IncompatibleSchemaChangeError(
        f"the changes of {uri} from version {start} to {end} cross an incompatible schema change at "
        f"version {version}: {found.reason}, so the rows of the versions before it cannot be read in the "
        f"schema of version {end}; read versions {start}..{version - 1} and {version}..{end} separately",
        version=version, column=found.column,
    )  # fmt: skip


def plan_version(v: VersionChanges, uri: str) -> list[ChangeTask]:
    """The files of one version to read, and how ("Change Data Files"; Delta Spark's ``CDCReader``)."""
    if v.cdc.num_rows:
        return [ChangeTask(CDC, r["path"], dict(r["partitionValues"] or []), v.version, v.timestamp)
                for r in v.cdc.select(["path", "partitionValues"]).to_pylist()]  # fmt: skip
    if _merge_changed_nothing(v.commit_info):
        return []
    adds, removes = _data_changing(v.adds), _data_changing(v.removes)
    if removes and not v.records_change_data:
        raise ChangeDataNotRecordedError(
            f"version {v.version} of {uri} ({v.operation or 'an unknown operation'}) removed or rewrote rows "
            "while the table did not record change data (delta.enableChangeDataFeed was off), so the rows it "
            "changed cannot be read; read snapshots of the versions instead, and turn the change data feed "
            "on for the versions to come",
            version=v.version,
        )  # fmt: skip
    added = {r["path"]: r for r in adds}
    removed = {r["path"]: r for r in removes}
    tasks = []
    for path, r in removed.items():
        if path not in added:
            tasks.append(_task("delete", r, v, r["deletionVector"]))
            continue
        old, new = r["deletionVector"], added[path]["deletionVector"]
        if old is None and new is None:
            raise CorruptLogError(f"version {v.version} removes and adds {path} back with no deletion vector "
                                  "on either: a change reader cannot tell what changed",
                                  path=uri)  # fmt: skip
        if new is not None:  # rows the new vector adds: deleted now
            tasks.append(_task("delete", r, v, old, selected=new))
        if old is not None:  # rows the old vector had and the new one does not: back (a RESTORE)
            tasks.append(_task("insert", added[path], v, new, selected=old))
    tasks += [_task("insert", r, v, r["deletionVector"]) for p, r in added.items() if p not in removed]
    return tasks


def _task(
    kind: str, row: dict, v: VersionChanges, dv: dict | None, *, selected: dict | None = None
) -> ChangeTask:
    return ChangeTask(kind, row["path"], dict(row["partitionValues"] or []), v.version, v.timestamp,
                      _descriptor(dv), _descriptor(selected))  # fmt: skip


def _descriptor(dv: dict | None) -> dict | None:
    return None if dv is None else {k: val for k, val in dv.items() if val is not None}


def _data_changing(table: pa.Table) -> list[dict]:
    if not table.num_columns or not table.num_rows:
        return []
    changing = table.filter(pc.fill_null(table.column("dataChange"), True))
    return changing.select(["path", "partitionValues", "deletionVector"]).to_pylist()


def _removes_data(v: VersionChanges) -> bool:
    return bool(_data_changing(v.removes))


def _merge_changed_nothing(info: dict[str, Any]) -> bool:
    """A MERGE whose metrics say it inserted, updated and deleted nothing: Delta Spark reads no changes
    from its file actions (a rewrite that changed no row)."""
    metrics = info.get("operationMetrics") or {}
    names = ("numTargetRowsInserted", "numTargetRowsUpdated", "numTargetRowsDeleted")
    return info.get("operation") == "MERGE" and all(str(metrics.get(n)) == "0" for n in names)


def _columns(metadata: Metadata, columns: Sequence[str] | None, uri: str) -> list[str] | None:
    if columns is None:
        return None
    by_lower = {f["name"].lower(): f["name"] for f in metadata.schema["fields"]}
    unknown = [c for c in columns if str(c).lower() not in by_lower]
    if unknown:
        raise ColumnNotFoundError(f"column(s) {unknown} are not in table {uri} (columns: "
                                  f"{', '.join(by_lower.values())})")  # fmt: skip
    return [by_lower[str(c).lower()] for c in columns]
