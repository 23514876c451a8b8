"""Data files as callers name them, resolved at the call against the snapshot a transaction read.

A user removing or changing a file names it the way they hold it: its path relative to the root (as
``Snapshot.file_paths()`` gives it), a row of ``Snapshot.files`` (or a filtered ``Snapshot.files`` table),
or an ``AddFile``/``RemoveFile``. Whatever the form, the file must be live in the snapshot read, and the
action written is built from the live ``add`` itself: its deletion vector, partition values and stats are
what make a ``remove`` reconcile with it ("Action Reconciliation": a remove matches an add by path *and*
deletion vector), so a tombstone built from a stale object would leave the file live.

New ``add`` actions are checked field by field when given (a wrong type would otherwise surface only as
unserialisable JSON at commit, or as a commit readers refuse).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable, Mapping
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from ..actions.actions import AddFile, RemoveFile
from ..base.arguments import bool_arg, int_arg, str_arg, str_map_arg
from ..base.arrow_utils import from_strings
from ..base.errors import DeletionVectorError, FileNotLiveError
from ..files.deletion_vectors import DeletionVectorDescriptor
from .snapshot import Snapshot

FileRef = str | AddFile | RemoveFile | Mapping[str, Any]
_FORMS = "a path relative to the table root, a row of Snapshot.files, an AddFile or a RemoveFile"


def ref_path(ref: Any, name: str = "file") -> str:
    """The path a file reference names; ``TypeError`` for anything that is not one."""
    if isinstance(ref, str):
        path = ref
    elif isinstance(ref, AddFile | RemoveFile):
        path = ref.path
    elif isinstance(ref, Mapping) and "path" in ref:
        path = ref["path"]
    else:
        raise TypeError(f"{name} must be {_FORMS}; got {type(ref).__name__} {ref!r:.200}")
    if not isinstance(path, str) or not path:
        raise TypeError(f"{name} must name a file by a non-empty string path, not {path!r}")
    return path


def file_refs(files: Any, name: str = "files") -> list[Any]:
    """One reference or many: a single path or action counts as one file (iterating a string would give
    its letters); a ``pyarrow.Table`` with a ``path`` column (``Snapshot.files`` filtered) gives its rows."""
    if isinstance(files, str | AddFile | RemoveFile) or (isinstance(files, Mapping) and "path" in files):
        return [files]
    if isinstance(files, pa.Table | pa.RecordBatch):
        if "path" not in files.schema.names:
            raise TypeError(f"{name}: a table of files needs a 'path' column (as Snapshot.files has)")
        return files.column("path").to_pylist()
    if isinstance(files, Mapping | bytes) or not isinstance(files, Iterable):
        raise TypeError(f"{name} must be {_FORMS}, or an iterable of them; got {type(files).__name__}")
    return list(files)


def live_files(snapshot: Snapshot | None, refs: Iterable[Any], *, what: str) -> list[AddFile]:
    """The live ``add`` of each referenced file, in order; :class:`FileNotLiveError` naming the first
    file the snapshot does not hold, before anything is written.

    Looked up with one Arrow membership test, not a Python set of every path (a snapshot may hold millions).
    ``what`` says what the caller was doing, for the message (``"remove"``, ``"delete rows of"``).
    """
    paths = [ref_path(r) for r in refs]
    if not paths:
        return []
    if snapshot is None:
        raise FileNotLiveError(
            f"cannot {what} {paths[0]}: the table is being created and has no files", path=paths[0]
        )
    root = snapshot.store.root.rstrip("/") + "/"
    uri = snapshot.store.uri.rstrip("/") + "/"
    # A full path under the root is the same file as its relative path (the log holds relative ones).
    wanted = [
        p[len(uri) :] if p.startswith(uri) else p[len(root) :] if p.startswith(root) else p for p in paths
    ]
    column = snapshot.files.column("path")
    found = snapshot.files.filter(pc.is_in(column, value_set=from_strings(sorted(set(wanted)))))
    by_path = {add.path: add for add in AddFile.from_table(found)}
    missing = [(given, p) for given, p in zip(paths, wanted, strict=True) if p not in by_path]
    if missing:
        given, _ = missing[0]
        more = f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""
        raise FileNotLiveError(
            f"cannot {what} {given!r}{more}: not a live file of {snapshot.store.uri} at version "
            f"{snapshot.version} (never added, or removed since); name files by their path relative to the "
            "table root, as Snapshot.file_paths() gives them",
            path=given,
        )
    return [by_path[p] for p in wanted]


def tombstone(live: AddFile, deletion_timestamp: int, *, data_change: bool, like: Any = None) -> RemoveFile:
    """The ``remove`` of a live file: its own deletion vector (as the log records descriptors, without the
    nulls an Arrow row carries), so that it reconciles with the ``add`` it removes. A ``RemoveFile`` given
    as ``like`` keeps its deletion timestamp and dataChange (a caller back-dating a tombstone)."""
    dv = live.deletion_vector
    if dv is not None:
        dv = DeletionVectorDescriptor.from_json(dv, data_file=live.path).to_json()
    if isinstance(like, RemoveFile):
        data_change = bool_arg(like.data_change, f"{like.path}.data_change")
        given = int_arg(like.deletion_timestamp, f"{like.path}.deletion_timestamp", minimum=0, optional=True)
        deletion_timestamp = deletion_timestamp if given is None else given
    source = live if dv is None else dataclasses.replace(live, deletion_vector=dv)
    return source.remove(deletion_timestamp, data_change=data_change)


# -- new adds -------------------------------------------------------------------------------------------
def new_adds(files: Any) -> list[AddFile]:
    """What ``add_files`` is given, one add or many, each checked (see ``new_add``)."""
    one = isinstance(files, AddFile | str) or (isinstance(files, Mapping) and "path" in files)
    return [new_add(f, f"files[{i}]") for i, f in enumerate([files] if one else file_refs(files, "files"))]


def new_add(value: Any, name: str = "file") -> AddFile:
    """An ``add`` given to ``add_files``: an ``AddFile`` or its JSON body/``Snapshot.files`` row, every
    field of the type the spec gives it. A bare path is refused with the call that builds its action."""
    if isinstance(value, str):
        raise TypeError(
            f"{name} {value!r} is a path: add_files() takes AddFile actions. Build one from a Parquet file "
            "already under the table root with DeltaTable.add_file(path, partition_values) (statistics "
            "from its footer)"
        )
    if isinstance(value, Mapping):
        if "path" not in value or "size" not in value:
            raise TypeError(f"{name}: an add given as a mapping needs 'path' and 'size', got {sorted(value)}")
        try:
            value = AddFile.from_dict(dict(value))
        except (TypeError, ValueError) as exc:
            raise TypeError(f"{name}: not an add action ({exc})") from None
    if not isinstance(value, AddFile):
        raise TypeError(
            f"{name} must be an AddFile (or its JSON body), not {type(value).__name__} {value!r:.200}"
        )
    check_add_fields(value, name)
    return value


def check_add_fields(add: AddFile, name: str = "file") -> None:
    """Each field of ``add`` has the spec's type ("Add File and Remove File"); ``TypeError`` naming it."""
    where = f"{name} ({add.path!r})" if isinstance(add.path, str) else name
    str_arg(add.path, f"{where}.path", empty=False)
    int_arg(add.size, f"{where}.size", minimum=0)
    int_arg(add.modification_time, f"{where}.modification_time", minimum=0)
    bool_arg(add.data_change, f"{where}.data_change")
    str_map_arg(add.partition_values, f"{where}.partition_values", null_values=True)
    if add.tags is not None:
        str_map_arg(add.tags, f"{where}.tags", null_values=True)
    if add.stats is not None:
        str_arg(add.stats, f"{where}.stats")
        try:
            stats = json.loads(add.stats)
        except ValueError as exc:
            raise ValueError(f"{where}.stats is not JSON: {exc}") from None
        if not isinstance(stats, dict):
            raise ValueError(f"{where}.stats must be a JSON object, not {add.stats[:80]!r}")
    for field in ("base_row_id", "default_row_commit_version"):
        int_arg(getattr(add, field), f"{where}.{field}", minimum=0, optional=True)
    str_arg(add.clustering_provider, f"{where}.clustering_provider", optional=True)
    if add.deletion_vector is not None:
        if not isinstance(add.deletion_vector, Mapping):
            raise TypeError(
                f"{where}.deletion_vector must be a descriptor mapping, not "
                f"{type(add.deletion_vector).__name__}"
            )
        try:
            DeletionVectorDescriptor.from_json(add.deletion_vector, data_file=add.path)
        except DeletionVectorError as exc:
            raise ValueError(f"{where}.deletion_vector: {exc.reason}") from None
