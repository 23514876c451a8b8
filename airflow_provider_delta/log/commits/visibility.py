"""Whether a commit file is in the table for every reader: the checks around put-if-absent that log
cleanup makes necessary.

Put-if-absent of ``N.json`` proves only that no file of that name existed at that instant. Metadata cleanup
deletes commits below a checkpoint, so a writer that read version ``R`` long ago (longer than
``delta.logRetentionDuration``, or any time under a zero-retention cleanup) can create ``N.json`` in the
deleted prefix: the put succeeds, and every reader starts from the newer checkpoint and never sees it.

Two checks close that hole (PROTOCOL "Metadata Cleanup": cleanup deletes only versions below a complete
checkpoint; readers start from the newest checkpoint):

- before the put, ``N - 1`` must still be in the log (``base_present``); if it is gone, the log no longer
  reconstructs the version the commit builds on;
- after the put, no checkpoint above ``N`` may predate it (``check_visible``). A checkpoint above ``N`` that
  existed before the put was built from someone else's ``N.json`` (since deleted), so ours is invisible. One
  written after the put was built through ours. Which came first is read from storage modification times;
  when they cannot tell (equal within the store's clock resolution), the checkpoint itself says whether it
  holds the commit's effects.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from ..actions.actions import AddFile, FileFields, Metadata, RemoveFile, SetTransaction
from ..files.segment import Checkpoint, commit_name, group_checkpoints
from ..files.storage import FileMeta, LogStore
from ..snapshot.replay import CheckpointReadError, TableState, check_checkpoint

# What the effects check reads of a checkpoint: the reconciliation keys of file actions (and the small
# actions, always read), never stats.
EFFECT_FIELDS = FileFields(add=("path", "deletionVector"), remove=("path", "deletionVector"))


@dataclass(frozen=True)
class Visibility:
    """Outcome of ``check_visible``: ``visible`` is ``None`` when it could not be established."""

    visible: bool | None
    reason: str = ""
    commit: FileMeta | None = None  # the commit file as the check listed it (when it was there)


def base_present(store: LogStore, version: int) -> bool:
    """Whether the version a commit at ``version`` builds on (``version - 1``) is still in the log.

    One existence check in the common case; a listing only when the commit file is gone, since a log may
    start at a checkpoint of ``version - 1`` whose commit some cleaner deleted with the rest.
    """
    if version == 0:
        return True
    if store.log_file_exists(commit_name(version - 1)):
        return True
    return (version - 1) in group_checkpoints(store.list_log(version - 1))


def check_visible(store: LogStore, version: int, effects_in: Callable[[TableState], bool]) -> Visibility:
    """Whether the commit just written as ``version`` is what readers reconstruct (see the module doc).

    :param effects_in: whether a checkpoint's state holds this commit's effects (its app transaction, its
        added files, the absence of the files it removed): the tie-breaker when modification times cannot
        order the checkpoint and the commit.
    """
    listed = store.list_log(version)
    ours = next((f for f in listed if f.name == commit_name(version)), None)
    later = sorted(
        (cp for v, cps in group_checkpoints(listed).items() if v > version for cp in cps),
        key=lambda cp: cp.version,
    )
    unsure: list[Checkpoint] = []
    for cp in later:
        order = _order(cp.files, ours)
        if order == "before":
            return Visibility(
                False,
                f"checkpoint {cp.version} ({', '.join(cp.names)}) was written before {commit_name(version)}, "
                f"so readers start after it; log cleanup had removed version {version} and the commits "
                "before it while this transaction was open",
            )
        if order == "unknown":
            unsure.append(cp)
    if not unsure:
        return Visibility(True, commit=ours)
    cp = unsure[0]
    try:
        state = check_checkpoint(store, cp, EFFECT_FIELDS)
    except CheckpointReadError as exc:
        return Visibility(None, f"checkpoint {cp.version} raced this commit and cannot be read ({exc})")
    if effects_in(state):
        return Visibility(True, commit=ours)
    return Visibility(
        False,
        f"checkpoint {cp.version} ({', '.join(cp.names)}) does not hold this commit although it covers "
        f"version {version}: log cleanup had removed version {version} while this transaction was open",
    )


def _order(files: tuple[FileMeta, ...], ours: FileMeta | None) -> str:
    """ "before"/"after" our commit file by modification time, or "unknown" (a tie, or ours is gone)."""
    if ours is None:
        return "unknown"
    if max(f.modification_time for f in files) < ours.modification_time:
        return "before"
    if min(f.modification_time for f in files) > ours.modification_time:
        return "after"
    return "unknown"


def holds_effects(
    state: TableState,
    adds: Sequence[AddFile],
    removes: Sequence[RemoveFile],
    app_transaction: SetTransaction | None,
    metadata: Metadata | None,
) -> bool:
    """Whether ``state`` holds what a commit does: its app transaction, its added files (live, or since
    tombstoned) and none of the files it removed still live; looked up with Arrow, not Python sets, since
    ``state`` may be a checkpoint of millions of files."""
    if app_transaction is not None:
        held = state.txns.get(app_transaction.app_id)
        if held is None or held.version < app_transaction.version:
            return False
    if metadata is not None and (
        state.metadata is None or state.metadata.schema_string != metadata.schema_string
    ):
        return False
    # Files are told apart by path and deletion vector ("Action Reconciliation"): a commit that only gives
    # live files new vectors re-adds paths that were there before it.
    added = pa.array([_key(a.path, a.deletion_vector) for a in adds], pa.string())
    seen = pa.concat_arrays([_keys(state.files), _keys(state.tombstones)])
    if len(added) and not pc.all(pc.is_in(added, value_set=seen)).as_py():
        return False
    added_set = set(added.to_pylist())
    still_live = pa.array(
        [k for r in removes if (k := _key(r.path, r.deletion_vector)) not in added_set], pa.string()
    )
    return not (len(still_live) and pc.any(pc.is_in(still_live, value_set=_keys(state.files))).as_py())


def _key(path: str, dv: Mapping[str, Any] | None) -> str:
    dv = dv or {}
    offset = "" if dv.get("offset") is None else dv["offset"]
    return f"{path}\0{dv.get('storageType') or ''}{dv.get('pathOrInlineDv') or ''}@{offset}"


def _keys(files: pa.Table) -> pa.Array:
    """``_key`` of every row of a file table, computed with Arrow."""
    path = files.column("path").combine_chunks().cast(pa.string())
    if "deletionVector" not in files.schema.names:
        return pc.binary_join_element_wise(path, "\0@", "")
    dv = files.column("deletionVector").combine_chunks()
    if isinstance(dv, pa.ChunkedArray):  # an empty table
        dv = pa.array([], dv.type)
    # flatten() gives a null vector null fields (a bare child array may hold values under the null).
    fields = dict(zip([f.name for f in dv.type], dv.flatten(), strict=True))
    offset = pc.fill_null(pc.cast(fields["offset"], pa.string()), "")
    kind = pc.fill_null(fields["storageType"], "")
    value = pc.fill_null(fields["pathOrInlineDv"], "")
    return pc.binary_join_element_wise(path, "\0", kind, value, "@", offset, "")
