"""Tailing the log: cheap checks for new commits, for sensors, triggers and watchers.

Spec: "Support for incremental processing - readers can tail the transaction log". Commits are
``N.json`` with contiguous N, so "is there anything after version v?" is one existence check of
``v+1.json``; only when it exists is the log listed (from v+1) and read. An idle check therefore costs
one storage request however long the log is.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .segment import commit_name, commit_version

if TYPE_CHECKING:
    from .table import DeltaTable

# Operations that never change the table's data even when their actions say dataChange (defensive: Delta
# writers mark them dataChange=false already).
_NO_DATA_OPERATIONS = frozenset({"OPTIMIZE", "VACUUM START", "VACUUM END", "SET TBLPROPERTIES", "CHECKPOINT"})


@dataclass(frozen=True)
class NewCommits:
    """Commits found after a known version: ``latest`` is the newest contiguous one."""

    after: int
    latest: int
    data_versions: tuple[int, ...]  # those among after+1..latest that add or remove data

    @property
    def changed_data(self) -> bool:
        return bool(self.data_versions)


def latest_after(table: DeltaTable, version: int) -> int | None:
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


def commits_after(table: DeltaTable, version: int, *, classify: bool = False) -> NewCommits | None:
    """New commits after ``version``; with ``classify``, which of them changed data (``dataChange``)."""
    latest = latest_after(table, version)
    if latest is None:
        return None
    versions = list(range(version + 1, latest + 1))
    if not classify:
        return NewCommits(version, latest, tuple(versions))
    datas = table.store.read_log_files(commit_name(v) for v in versions)
    changed = tuple(v for v, data in zip(versions, datas, strict=True) if _changes_data(data))
    return NewCommits(version, latest, changed)


def _changes_data(data: bytes) -> bool:
    """Whether a commit adds or removes data: an add or remove with ``dataChange`` true (the default)."""
    operation = None
    file_change = False
    for line in data.split(b"\n"):
        if not line.strip():
            continue
        obj = json.loads(line)
        if "commitInfo" in obj:
            operation = (obj["commitInfo"] or {}).get("operation")
        for name in ("add", "remove"):
            body = obj.get(name)
            file_change = file_change or (body is not None and body.get("dataChange", True))
    return file_change and operation not in _NO_DATA_OPERATIONS
