"""The protocol and metadata of one version, read without reconciling its files.

A change read, a schema lookup or a timestamp search needs a version's ``protocol`` and ``metaData`` and
nothing of its file list, which on a big table is millions of checkpoint rows. As delta-kernel-rs's
``VersionMetadata`` is read: the log segment of the version first (``segment``), then its commits
newest first, stopping at the first that holds each action ("Action Reconciliation": the latest wins),
and only when a commit does not hold them, the checkpoint's ``protocol`` and ``metaData`` columns alone,
row group by row group, stopping once both are found. The cost is a listing and a few small reads, never
the checkpoint's ``add`` rows.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import pyarrow.parquet as pq

from ..actions.actions import Metadata, Protocol
from ..base.errors import CorruptLogError
from ..features.protocol import check_read_supported
from ..files.commit_json import action_lines
from ..files.segment import Checkpoint, LogSegment, SegmentBuilder, commit_name
from ..files.storage import LogStore
from .replay import check_metadata, row_groups_with_small_actions

_CHUNK = 16  # commits read at once while walking back to the last protocol and metaData
_MAX_RELISTS = 3
_BATCH_ROWS = 4096


@dataclass(frozen=True)
class VersionMetadata:
    """A version's protocol and metadata, and the segment they were read from."""

    version: int
    protocol: Protocol
    metadata: Metadata
    segment: LogSegment


def read_version_metadata(
    store: LogStore, version: int | None = None, known: Mapping[int, bytes] | None = None
) -> VersionMetadata:
    """The protocol and metadata at ``version`` (latest by default); ``known`` holds commits' bytes the
    caller has read already, so they are not read twice. Refuses a protocol this reader cannot read."""
    for attempt in range(_MAX_RELISTS + 1):
        segment = SegmentBuilder(store).build(version)
        try:
            protocol, metadata = _from_segment(store, segment, known or {})
        except FileNotFoundError:
            if attempt == _MAX_RELISTS:
                raise
            continue  # log cleanup deleted a file between the listing and the read: list again
        where = f"table {store.uri} at version {segment.version}"
        check_read_supported(protocol, where=where)
        try:
            check_metadata(metadata)
        except ValueError as exc:
            raise CorruptLogError(f"invalid metaData of {where}: {exc}", path=store.log_path) from None
        return VersionMetadata(segment.version, protocol, metadata, segment)
    raise AssertionError("unreachable")


def _from_segment(
    store: LogStore, segment: LogSegment, known: Mapping[int, bytes]
) -> tuple[Protocol, Metadata]:
    protocol: Protocol | None = None
    metadata: Metadata | None = None
    commits = [f.name for f in reversed(segment.commits)]
    for i in range(0, len(commits), _CHUNK):
        names = commits[i : i + _CHUNK]
        versions = [int(n[:20]) for n in names]
        missing = [n for n, v in zip(names, versions, strict=True) if v not in known]
        read = dict(zip(missing, store.read_log_files(missing), strict=True)) if missing else {}
        for name, v in zip(names, versions, strict=True):
            data = known[v] if v in known else read[name]
            p, m = small_actions(data, store.log_file(commit_name(v)))
            protocol, metadata = protocol or p, metadata or m
            if protocol is not None and metadata is not None:
                return protocol, metadata
    if segment.checkpoint is not None:
        p, m = _from_checkpoint(store, segment.checkpoint)
        protocol, metadata = protocol or p, metadata or m
    if protocol is None or metadata is None:
        missing_action = "protocol" if protocol is None else "metaData"
        raise CorruptLogError(
            f"table {store.uri} at version {segment.version} has no {missing_action} action",
            path=store.log_path,
        )
    return protocol, metadata


def small_actions(data: bytes, path: str) -> tuple[Protocol | None, Metadata | None]:
    """The last protocol and metaData of one commit; only lines naming them are parsed."""
    protocol = metadata = None
    if b'"protocol"' not in data and b'"metaData"' not in data:
        return None, None
    for lineno, obj in action_lines(data, path, naming=(b'"protocol"', b'"metaData"')):
        try:
            if isinstance(obj.get("protocol"), dict):
                protocol = Protocol.from_json(obj["protocol"])
            if isinstance(obj.get("metaData"), dict):
                metadata = Metadata.from_json(obj["metaData"])
        except ValueError as exc:
            raise CorruptLogError(f"invalid action: {exc}", path=path, line=lineno) from None
    return protocol, metadata


def _from_checkpoint(store: LogStore, checkpoint: Checkpoint) -> tuple[Protocol | None, Metadata | None]:
    """``protocol`` and ``metaData`` from the checkpoint's own files (a V2 checkpoint keeps them there,
    its sidecars hold only files), skipping row groups whose statistics show neither action."""
    protocol = metadata = None
    for f in checkpoint.files:
        path = store.log_file(f.name)
        if f.name.endswith(".json"):
            protocol, metadata = small_actions(store.read_log_file(f.name), path)
        else:
            p, m = _parquet_actions(store, path)
            protocol, metadata = protocol or p, metadata or m
        if protocol is not None and metadata is not None:
            break
    return protocol, metadata


def _parquet_actions(store: LogStore, path: str) -> tuple[Protocol | None, Metadata | None]:
    local = store.protocol in ("file", "local")
    pf = pq.ParquetFile(path) if local else pq.ParquetFile(store.open_input_file(path))
    names = [n for n in ("protocol", "metaData") if n in pf.schema_arrow.names]
    protocol = metadata = None
    try:
        groups = row_groups_with_small_actions(pf, tuple(names))
        for rg in range(pf.metadata.num_row_groups) if groups is None else groups:
            # Small batches, stopping at the first that holds both: writers put these actions first (ours,
            # Delta Spark's), so a row group of a million file rows is never decoded whole.
            for batch in pf.iter_batches(batch_size=_BATCH_ROWS, row_groups=[rg], columns=names,
                                         use_threads=False):  # fmt: skip
                for name in names:
                    column = batch.column(name)
                    if column.null_count == len(column):
                        continue
                    body = column.filter(column.is_valid())[0].as_py(maps_as_pydicts="lossy")
                    if name == "protocol":
                        protocol = Protocol.from_json(_without_nulls(body))
                    else:
                        metadata = Metadata.from_json(_without_nulls(body))
                if protocol is not None and metadata is not None:
                    return protocol, metadata
    except ValueError as exc:
        raise CorruptLogError(f"invalid protocol or metaData in checkpoint: {exc}", path=path) from None
    return protocol, metadata


def _without_nulls(body: dict) -> dict:
    """A checkpoint struct as its JSON action would read: absent optional fields are nulls in Parquet."""
    return {k: v for k, v in body.items() if v is not None}
