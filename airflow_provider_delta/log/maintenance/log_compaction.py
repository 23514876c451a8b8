"""Log compaction files (``x.y.compacted.json``, "Log Compaction Files"): the commits ``x`` to ``y`` in one
file, their actions reconciled, so that a reader of a table with many commits since its checkpoint reads a
few files instead of one per commit. Readers use them in place of the commits they cover
(``LogSegment.commit_cover``); Delta Spark and delta-kernel-rs read them too.

A compaction holds what reconciliation of its commits leaves ("Action Reconciliation"): the last
protocol and metaData, the last ``txn`` of each application, the last ``domainMetadata`` of each domain
(tombstones included, as they must hide a domain an older checkpoint holds), and per file key the last of
its add or remove. ``commitInfo`` is left out, as the spec's example shows. It is written once, never
replaced (a compaction of the same range is the same state), and only of commits that are all still there.
"""

from __future__ import annotations

import json
import logging

from ..actions.actions import ALL_FILE_FIELDS, AddFile, RemoveFile
from ..base.arguments import int_arg
from ..base.errors import InvalidCommitError
from ..files.commit_json import Actions, parse_json_actions
from ..files.segment import commit_version
from ..files.storage import put_if_absent
from ..snapshot.replay import concat_file_actions, reconcile
from ..snapshot.snapshot import load_snapshot
from ..snapshot.table_context import TableContext

log = logging.getLogger(__name__)

# Fewer commits than this since the checkpoint are not worth a compaction (a reader reads them at once).
MIN_COMMITS = 2


def compaction_name(start: int, end: int) -> str:
    return f"{start:020d}.{end:020d}.compacted.json"


def write_log_compaction(table: TableContext, start: int | None = None, end: int | None = None) -> str | None:
    """Write the compaction of commits ``start`` to ``end`` (by default: every commit after the newest
    checkpoint up to the latest version) and return its name; ``None`` when the range holds fewer than two
    commits or its compaction is already there. ``InvalidCommitError`` when a commit of the range is gone."""
    int_arg(start, "start", minimum=0, optional=True)
    int_arg(end, "end", minimum=0, optional=True)
    store = table.store
    # Read afresh: the newest checkpoint decides the default range, and a cached snapshot may predate it.
    snap = load_snapshot(store, end)
    # A compaction is written state: the writer must implement every writer feature ("Table Features").
    snap.table_configuration.check_write(f"log compaction of {store.uri}")
    first = start if start is not None else (snap.segment.checkpoint_version or -1) + 1
    last = snap.version
    if last - first + 1 < MIN_COMMITS:
        return None
    listed = {v: f for f in store.list_log(first) if (v := commit_version(f.name)) is not None and v <= last}
    missing = [v for v in range(first, last + 1) if v not in listed]
    if missing:
        raise InvalidCommitError(
            f"cannot compact commits {first} to {last} of {table.uri}: commit {missing[0]} is not in the log "
            "(log cleanup removed it)"
        )
    name = compaction_name(first, last)
    files = [listed[v] for v in range(first, last + 1)]
    datas = store.read_log_files(f.name for f in files)
    acc = Actions(fields=ALL_FILE_FIELDS)
    versions = range(first, last + 1)
    chunks = [(v, store.log_file(f.name), d) for v, f, d in zip(versions, files, datas, strict=True)]
    parse_json_actions(acc, chunks)
    adds, removes = _reconciled(acc)
    lines = []
    if acc.protocol is not None:
        lines.append({"protocol": acc.protocol.to_json()})
    if acc.metadata is not None:
        lines.append({"metaData": acc.metadata.to_json()})
    lines += [{"txn": t.to_json()} for t in acc.txns.values()]
    lines += [{"domainMetadata": d.to_json()} for d in acc.domains.values()]
    lines += [{"remove": r.to_json()} for r in removes]
    lines += [{"add": a.to_json()} for a in adds]
    data = "".join(json.dumps(line, separators=(",", ":")) + "\n" for line in lines).encode()
    try:
        put_if_absent(store, name, data, allow_unsafe=True)
    except FileExistsError:
        return None
    log.info("wrote log compaction %s of %s (%d actions)", name, table.uri, len(lines))
    return name


def _reconciled(acc: Actions) -> tuple[list[AddFile], list[RemoveFile]]:
    fields = ALL_FILE_FIELDS
    adds, removes = reconcile(
        concat_file_actions(acc.adds, fields.add_type), concat_file_actions(acc.removes, fields.remove_type)
    )
    return AddFile.from_table(adds), RemoveFile.from_table(removes)
