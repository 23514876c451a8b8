"""Change reads: the rows a range of versions appended, read through the one scan.

An incremental task ("process what landed since version N") reads the data files the commits of a version
range added with ``dataChange=true``, with the schema of the last version of the range. That is the whole
change only when those commits removed nothing: a DELETE, UPDATE, MERGE or overwrite in the range (a
``remove`` with ``dataChange=true``, which also covers a file whose deletion vector grew) changes rows the
added files do not show, so the range is refused naming the version; rearranging commits (OPTIMIZE,
``dataChange=false``) are skipped. Commits cleaned up from the log cannot be read
(:class:`VersionNotFoundError`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc

from .commit_json import Actions, parse_json_actions
from .errors import DeltaError, VersionNotFoundError
from .scan import Scan
from .segment import commit_name

if TYPE_CHECKING:
    from .snapshot import Snapshot


class RowsChangedError(DeltaError):
    """A commit in the range removed or rewrote rows: the rows it added are not all that changed."""


def added_files(snapshot: Snapshot, start: int, end: int) -> pa.Table:
    """The ``add`` rows (with ``_version``) the commits ``start``..``end`` made with ``dataChange=true``."""
    if not 0 <= start <= end <= snapshot.version:
        raise ValueError(f"a version range needs 0 <= start <= end <= {snapshot.version}, not {start}..{end}")
    store = snapshot.store
    names = [commit_name(v) for v in range(start, end + 1)]
    try:
        datas = store.read_log_files(names)
    except FileNotFoundError as exc:
        raise VersionNotFoundError(
            f"the commits {start}..{end} of {store.uri} are not all in the log any more (log cleanup)"
        ) from exc
    acc = Actions()
    chunks = [(v, store.log_file(n), d) for v, n, d in zip(range(start, end + 1), names, datas, strict=True)]
    parse_json_actions(acc, chunks)
    for removes in acc.removes:
        changed = removes.filter(pc.fill_null(removes.column("dataChange"), True))
        if changed.num_rows:
            version = changed.column("_version")[0].as_py()
            operation = (acc.commit_infos.get(version) or {}).get("operation", "unknown operation")
            raise RowsChangedError(
                f"version {version} of {store.uri} ({operation}) removed or rewrote rows, so the rows "
                f"versions {start}..{end} added are not all that changed; read the snapshots instead"
            )
    tables = [t.filter(pc.fill_null(t.column("dataChange"), True)) for t in acc.adds]
    tables = [t for t in tables if t.num_rows]
    if not tables:
        return snapshot.files.slice(0, 0)
    return pa.concat_tables(tables, promote_options="permissive")


def scan_versions(snapshot: Snapshot, start: int, end: int | None = None, **options: Any) -> Scan:
    """A :class:`Scan` of the rows the commits ``start``..``end`` (default: ``snapshot``'s version)
    appended, in ``snapshot``'s schema. ``snapshot`` must be at ``end`` or later."""
    end = snapshot.version if end is None else end
    return Scan(snapshot, files=added_files(snapshot, start, end), **options)
