"""What the Delta view shows of one table, read through the core: versions, the table over time, protocol,
schema and pending maintenance. No Airflow and no web framework here, so it is tested on its own.

Per version: the timestamp and operation time travel uses (``DeltaTable.history``), the app transaction the
commit recorded ("Transaction Identifiers"; our operators' appIds name the DAG, task and interval), and
what changed: files, bytes and rows added and removed, from the commit's own ``add``/``remove`` actions,
with ``operationMetrics`` for rows where the actions carry no stats. The live files and size at each
version are walked back from the latest snapshot (exact) by each commit's adds and removes.

The core has no public reader for one commit's actions; this module reads commit files with the table's
``LogStore`` and parses the few fields it needs with Arrow (what the core should offer: a per-commit
change summary, and a dry run of log cleanup).
"""

from __future__ import annotations

import io
import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pj

from airflow_provider_delta.log import DeltaError, iceberg_status
from airflow_provider_delta.log.files.segment import commit_name

if TYPE_CHECKING:
    from airflow_provider_delta.log import DeltaTable, HistoryEntry, IcebergStatus, Snapshot

DEFAULT_VERSIONS = 50
_FILE_SCHEMA = pa.schema([("size", pa.int64()), ("stats", pa.string())])
# Fallbacks when actions carry no stats, counting rows in the files added or removed (so a DELETE that
# rewrites a file removes its copied rows too). Delta Spark's names, then delta-rs's.
_ROWS_ADDED = ("numOutputRows", "num_added_rows")
_ROWS_REMOVED = (
    "numDeletedRows", "numCopiedRows", "numTargetRowsDeleted", "numTargetRowsUpdated", "numTargetRowsCopied",
    "num_deleted_rows", "num_copied_rows", "num_target_rows_deleted", "num_target_rows_updated",
    "num_target_rows_copied",
)  # fmt: skip


@dataclass(frozen=True)
class AirflowTask:
    """The Airflow task an appId of ours names: ``airflow/<dag_id>/<task_id>/<map_index>/<interval>``."""

    dag_id: str
    task_id: str
    map_index: int
    interval: str  # the run's logical date (ISO) or, for runs without one, its run id

    @classmethod
    def from_app_id(cls, app_id: str | None) -> AirflowTask | None:
        parts = (app_id or "").split("/", 4)
        if len(parts) != 5 or parts[0] != "airflow":
            return None
        try:
            return cls(parts[1], parts[2], int(parts[3]), parts[4])
        except ValueError:
            return None


@dataclass
class VersionRow:
    version: int
    timestamp: int  # ms since the epoch
    operation: str | None
    app_id: str | None = None
    app_version: int | None = None
    task: AirflowTask | None = None
    run_id: str | None = None  # filled by the caller, which can ask Airflow
    files_added: int = 0
    files_removed: int = 0
    bytes_added: int = 0
    bytes_removed: int | None = 0  # None: a remove without a size
    rows_added: int | None = 0  # None: unknown (no stats, no metric)
    rows_removed: int | None = 0
    metrics: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Point:
    version: int
    timestamp: int
    files: int
    bytes: int


@dataclass
class Maintenance:
    vacuum_files: int | None = None
    vacuum_bytes: int | None = None
    vacuum_retention_hours: float | None = None
    vacuum_error: str | None = None
    vacuum_note: str | None = None  # why the dry run was not made
    checkpoint_version: int | None = None
    commits_since_checkpoint: int = 0
    checkpoint_interval: int = 10
    uniform_iceberg: bool = False  # the table keeps Iceberg metadata (UniForm): the row is shown
    iceberg: IcebergStatus | None = None
    iceberg_error: str | None = None  # why the status could not be read

    @property
    def iceberg_metadata_name(self) -> str | None:
        """The newest Iceberg metadata file relative to the table root (``metadata/vK.metadata.json``)."""
        ice = self.iceberg
        location = ice.metadata_file if ice is not None else None
        if not location:
            return None
        return "metadata/" + location.rstrip("/").rsplit("/", 1)[-1]


@dataclass
class TableView:
    uri: str
    version: int
    rows: list[VersionRow]
    points: list[Point]
    exact_points: bool
    protocol: dict[str, Any]
    schema: list[dict[str, Any]]
    partition_columns: list[str]
    configuration: dict[str, str]
    num_files: int
    size_bytes: int
    maintenance: Maintenance
    selected: int | None = None


def build_view(
    table: DeltaTable, *, limit: int = DEFAULT_VERSIONS, selected: int | None = None, vacuum: bool = True
) -> TableView:
    """Everything the table page shows, for the newest ``limit`` versions (and ``selected``, if older)."""
    snap = table.snapshot()
    entries = table.history(limit=limit)
    if selected is not None and selected < snap.version - limit + 1:
        entries += [e for e in table.history() if e.version == selected]
    rows = [_row(table, e) for e in entries]
    size_bytes = snap.table_size_bytes  # from the version checksum when there is one: no file list read
    points, exact = _walk_back(snap.version, snap.num_files, size_bytes, rows[: min(limit, len(rows))])
    return TableView(
        uri=table.uri,
        version=snap.version,
        rows=rows,
        points=points,
        exact_points=exact,
        protocol=_protocol(snap),
        schema=list(snap.metadata.schema.get("fields", [])),
        partition_columns=snap.partition_columns,
        configuration=snap.configuration,
        num_files=snap.num_files,
        size_bytes=size_bytes,
        maintenance=maintenance(table, snap, vacuum=vacuum),
        selected=selected,
    )


def _row(table: DeltaTable, entry: HistoryEntry) -> VersionRow:
    info = entry.commit_info
    row = VersionRow(entry.version, entry.timestamp, entry.operation)
    row.metrics = {str(k): str(v) for k, v in (info.get("operationMetrics") or {}).items()}
    try:
        data = table.store.read_log_file(commit_name(entry.version))
    except FileNotFoundError:  # cleaned up since history() listed it
        return row
    _summarise(data, row)
    row.task = AirflowTask.from_app_id(row.app_id)
    return row


def _summarise(data: bytes, row: VersionRow) -> None:
    """Fill ``row`` from one commit file: its txn, and the sizes and record counts of adds and removes."""
    adds, removes = [], []
    for line in data.split(b"\n"):
        head = line[:12]
        if b'"add"' in head:
            adds.append(line)
        elif b'"remove"' in head:
            removes.append(line)
        elif b'"txn"' in head:
            txn = json.loads(line).get("txn") or {}
            row.app_id, row.app_version = txn.get("appId"), txn.get("version")
    added, removed = _files(adds, "add"), _files(removes, "remove")
    row.files_added, row.files_removed = added.num_rows, removed.num_rows
    row.bytes_added = int(pc.sum(added.column("size")).as_py() or 0)
    row.bytes_removed = (
        None if removed.column("size").null_count else int(pc.sum(removed["size"]).as_py() or 0)
    )
    row.rows_added = _metric(row.metrics, _ROWS_ADDED, _records(added))
    row.rows_removed = _metric(row.metrics, _ROWS_REMOVED, _records(removed))


def _files(lines: list[bytes], kind: str) -> pa.Table:
    """``size`` and ``stats`` of add or remove lines, parsed by Arrow in one go."""
    if not lines:
        return _FILE_SCHEMA.empty_table()
    schema = pa.schema([(kind, pa.struct(list(_FILE_SCHEMA)))])
    options = pj.ParseOptions(explicit_schema=schema, unexpected_field_behavior="ignore")
    parsed = pj.read_json(io.BytesIO(b"\n".join(lines)), parse_options=options)
    return pa.Table.from_struct_array(parsed.column(kind).combine_chunks())


def _records(files: pa.Table) -> int | None:
    """Sum of ``numRecords`` in the files' stats, or None when any file has none."""
    if files.num_rows == 0:
        return 0
    found = pc.extract_regex(files.column("stats"), r'"numRecords":(?P<n>\d+)')
    counts = pc.struct_field(found, "n")
    if counts.null_count:
        return None
    return int(pc.sum(pc.cast(counts, pa.int64())).as_py() or 0)


def _metric(metrics: dict[str, str], names: tuple[str, ...], fallback: int | None) -> int | None:
    if fallback is not None:
        return fallback
    values = [int(metrics[n]) for n in names if str(metrics.get(n, "")).isdigit()]
    return sum(values) if values else None


def _walk_back(version: int, files: int, size: int, rows: list[VersionRow]) -> tuple[list[Point], bool]:
    """Live files and bytes at each listed version, from the latest (exact) back through each commit's
    changes. Exact unless a remove has no size (then the size line stops being exact before it)."""
    by_version = {r.version: r for r in rows}
    points, exact = [], True
    for v in sorted(by_version, reverse=True):
        if v != version:
            break  # a gap (cleaned-up commits): stop rather than guess
        row = by_version[v]
        points.append(Point(v, row.timestamp, files, size))
        files += row.files_removed - row.files_added
        if row.bytes_removed is None:
            exact = False
        size += (row.bytes_removed or 0) - row.bytes_added
        version -= 1
    return points[::-1], exact


def _protocol(snap: Snapshot) -> dict[str, Any]:
    p = snap.protocol
    return {
        "minReaderVersion": p.min_reader_version,
        "minWriterVersion": p.min_writer_version,
        "readerFeatures": sorted(p.reader_features or []),
        "writerFeatures": sorted(p.writer_features or []),
    }


# Up to this many live files the page shows what VACUUM would delete now (a dry run per view).
VACUUM_PREVIEW_MAX_FILES = 100_000


def _known_live_files(snap: Snapshot) -> int | None:
    """Live files when known without reading the file list: from the checksum, or the list in memory;
    a table with no checkpoint is small enough to read."""
    if snap.files_loaded or (snap.checksum is not None and snap.checksum.totals is not None):
        return snap.num_files
    return snap.num_files if snap.segment.checkpoint is None else None


def maintenance(table: DeltaTable, snap: Snapshot, *, vacuum: bool = True) -> Maintenance:
    """Files VACUUM would delete now (a dry run: nothing is deleted or committed), the commits since
    the last checkpoint, against ``delta.checkpointInterval``, and, on a UniForm table, how far its
    Iceberg metadata lags (a few small reads; a failure is shown, never raised)."""
    out = Maintenance()
    checkpoint = snap.segment.checkpoint_version
    out.checkpoint_version = checkpoint
    out.commits_since_checkpoint = snap.version - (checkpoint if checkpoint is not None else -1)
    try:
        out.checkpoint_interval = snap.table_configuration.checkpoint_interval
    except ValueError:
        out.checkpoint_interval = 10
    live = _known_live_files(snap)
    if vacuum and (live is None or live > VACUUM_PREVIEW_MAX_FILES):
        # A dry run lists the whole table and reads its file list: not on every page view of a big table.
        count = "an unknown number of" if live is None else f"{live:,}"
        out.vacuum_note = (f"not checked on this page for a table of {count} live files: run `deltalog "
                           "vacuum URI --dry-run` or DeltaVacuumOperator(dry_run=True)")  # fmt: skip
    elif vacuum:
        try:
            report = table.vacuum(dry_run=True)
            out.vacuum_files, out.vacuum_bytes = len(report.files), report.bytes
            out.vacuum_retention_hours = report.retention_hours
        except DeltaError as exc:  # e.g. a writer feature we cannot vacuum safely
            out.vacuum_error = f"{type(exc).__name__}: {exc}"
    _uniform(table, snap, out)
    return out


def _uniform(table: DeltaTable, snap: Snapshot, out: Maintenance) -> None:
    try:
        out.uniform_iceberg = "iceberg" in snap.table_configuration.universal_formats
        if out.uniform_iceberg:
            out.iceberg = iceberg_status(table, snap)
    except DeltaError as exc:  # our own messages: a path and why
        out.uniform_iceberg, out.iceberg_error = True, f"{type(exc).__name__}: {exc}"
    except Exception as exc:  # a storage client's text may hold credentials: its type only
        out.uniform_iceberg = True
        out.iceberg_error = f"the Iceberg metadata could not be read ({type(exc).__name__})"
