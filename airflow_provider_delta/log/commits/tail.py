"""Tailing the log: cheap checks for new commits, for sensors, triggers and watchers.

Spec: "Support for incremental processing - readers can tail the transaction log". Commits are
``N.json`` with contiguous N, so "is there anything after version v?" is one existence check of
``v+1.json``; only when it exists is the log listed (from v+1) and read. An idle check therefore costs
one storage request however long the log is.

A location that holds no table yet (no ``_delta_log`` with a commit or checkpoint) is a table with no
version, ``NO_TABLE`` (-1): no condition holds of it, and as a baseline it makes the table's first commit
(version 0) the change waited for. While it stays missing, a check costs one listing of ``_delta_log``.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..actions.actions import check_commit_info
from ..base.errors import CorruptLogError, TableNotFoundError, shown
from ..files.commit_json import action_lines
from ..files.segment import commit_name, commit_version, group_checkpoints
from ..snapshot.table_context import TableContext

# Operations that never change the table's data even when their actions say dataChange (defensive: Delta
# writers mark them dataChange=false already).
_NO_DATA_OPERATIONS = frozenset({"OPTIMIZE", "VACUUM START", "VACUUM END", "SET TBLPROPERTIES", "CHECKPOINT"})
# The version of a table that does not exist yet: every version it will have is newer.
NO_TABLE = -1


def current_version(table: TableContext) -> int:
    """The table's latest version, or ``NO_TABLE`` when the location holds no Delta table yet.

    Only "no table" is a version: a log that cannot be read (permissions, a corrupt or cleaned-up log)
    still raises, as waiting would not mend it.
    """
    try:
        return table.snapshot().version
    except TableNotFoundError:
        return NO_TABLE


def _has_log(table: TableContext) -> bool:
    """Whether ``_delta_log`` holds a commit or a checkpoint (what makes a location a table): one listing."""
    try:
        files = table.store.list_log(0)
    except TableNotFoundError:  # the bucket itself is missing
        return False
    return any(commit_version(f.name) is not None for f in files) or bool(group_checkpoints(files))


@dataclass(frozen=True)
class NewCommits:
    """Commits found after a known version: ``latest`` is the newest contiguous one."""

    after: int
    latest: int
    data_versions: tuple[int, ...]  # those among after+1..latest that add or remove data

    @property
    def changed_data(self) -> bool:
        return bool(self.data_versions)


def latest_after(table: TableContext, version: int) -> int | None:
    """The newest version after ``version``, or ``None`` when there is none (one request when idle)."""
    store = table.store
    if not store.log_file_exists(commit_name(version + 1)):
        return None
    latest = version + 1
    for f in store.list_log(version + 1):
        v = commit_version(f.name)
        if v is not None and v == latest + 1:
            latest = v
    return latest


def commits_after(table: TableContext, version: int, *, classify: bool = False) -> NewCommits | None:
    """New commits after ``version``; with ``classify``, which of them changed data (``dataChange``)."""
    latest = latest_after(table, version)
    if latest is None:
        return None
    versions = list(range(version + 1, latest + 1))
    if not classify:
        return NewCommits(version, latest, tuple(versions))
    store = table.store
    datas = store.read_log_files(commit_name(v) for v in versions)
    changed = tuple(
        v
        for v, data in zip(versions, datas, strict=True)
        if _changes_data(data, path=store.log_file(commit_name(v)))
    )
    return NewCommits(version, latest, changed)


def _changes_data(data: bytes, *, path: str) -> bool:
    """Whether a commit adds or removes data: an add or remove with ``dataChange`` true (the default).

    A line that is not an action (broken JSON, a non-object action) names its file and line.
    """
    operation = None
    file_change = False
    for lineno, obj in action_lines(data, path):
        for name, body in obj.items():
            if name not in ("commitInfo", "add", "remove") or body is None:
                continue
            if not isinstance(body, dict):
                raise CorruptLogError(
                    f"{name} must be a JSON object, not {shown(body)}", path=path, line=lineno
                )
            if name == "commitInfo":
                try:
                    check_commit_info(body)
                except ValueError as exc:
                    raise CorruptLogError(f"invalid commitInfo: {exc}", path=path, line=lineno) from None
                operation = body.get("operation")
            else:
                file_change = file_change or bool(body.get("dataChange", True))
    return file_change and operation not in _NO_DATA_OPERATIONS


@dataclass(frozen=True)
class VersionCondition:
    """What a sensor waits for; exactly one of the three forms is set.

    ``min_version``: the table reaches version N. ``newer_than``: any commit after a baseline version.
    ``app_id`` + ``app_version``: the app transaction ``app_id`` reaches ``app_version`` ("the upstream
    pipeline committed batch X"). ``data_changes_only`` ignores commits that change no data (OPTIMIZE,
    dataChange=false rearrangements, property changes) for ``newer_than``.
    """

    min_version: int | None = None
    newer_than: int | None = None
    app_id: str | None = None
    app_version: int | None = None
    data_changes_only: bool = False

    def __post_init__(self) -> None:
        forms = [self.min_version is not None, self.newer_than is not None, self.app_id is not None]
        if sum(forms) != 1:
            raise ValueError("set exactly one of min_version, newer_than, or app_id (with app_version)")
        if self.app_id is not None and self.app_version is None:
            raise ValueError("app_id needs app_version")


@dataclass(frozen=True)
class Observation:
    """The outcome of one check: ``cursor`` is the newest version examined, to resume from next time."""

    satisfied: bool
    cursor: int

    @property
    def version(self) -> int | None:
        """The latest version seen when the condition held (what a sensor returns)."""
        return self.cursor if self.satisfied else None


def observe(table: TableContext, condition: VersionCondition, cursor: int | None) -> Observation:
    """Check ``condition`` once, examining only commits after ``cursor``.

    The first check (``cursor`` None) reads the latest version; every later check that finds no new
    commit costs one storage request, so a poll loop's cost does not grow with the log. On a location with
    no table yet the check is not satisfied and its cursor is ``NO_TABLE``; the checks after it list the
    log until the table appears, then read it as a first check does (its commits may start anywhere: a
    table copied in with a checkpoint has no version 0).
    """
    if cursor == NO_TABLE and not _has_log(table):
        return Observation(False, NO_TABLE)
    if cursor is None or cursor == NO_TABLE:
        try:
            snap = table.snapshot()
        except TableNotFoundError:
            return Observation(False, NO_TABLE)
        cursor = snap.version
        if condition.app_id is not None:
            done = snap.app_transactions.get(condition.app_id, -1) >= condition.app_version
            return Observation(done, cursor)
        if condition.min_version is not None:
            done = cursor >= condition.min_version
            return Observation(done, cursor)
        start = condition.newer_than
        if cursor <= start:
            return Observation(False, cursor)
        return _newer(table, condition, start, cursor)
    new = commits_after(
        table, cursor, classify=condition.data_changes_only and condition.newer_than is not None
    )
    if new is None:
        return Observation(False, cursor)
    if condition.min_version is not None:
        done = new.latest >= condition.min_version
        return Observation(done, new.latest)
    if condition.app_id is not None:
        snap = table.snapshot()  # the handle reads only the commits since it last looked
        done = snap.app_transactions.get(condition.app_id, -1) >= condition.app_version
        return Observation(done, snap.version)
    # The baseline may lie ahead of the cursor (a sensor told to wait past a version not yet written).
    if new.latest <= condition.newer_than:
        return Observation(False, new.latest)
    if not condition.data_changes_only:
        return Observation(True, new.latest)
    return Observation(any(v > condition.newer_than for v in new.data_versions), new.latest)


def _newer(table: TableContext, condition: VersionCondition, start: int, latest: int) -> Observation:
    if not condition.data_changes_only:
        return Observation(True, latest)
    versions = range(start + 1, latest + 1)
    datas = table.store.read_log_files(commit_name(v) for v in versions)
    paths = (table.store.log_file(commit_name(v)) for v in versions)
    return Observation(any(_changes_data(d, path=p) for d, p in zip(datas, paths, strict=True)), latest)
