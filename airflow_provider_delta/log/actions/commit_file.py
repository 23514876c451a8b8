"""A commit's bytes: the newline-delimited JSON actions of one ``N.json``.

Spec: "Delta Log Entries", "Commit Provenance Information", "In-Commit Timestamps". ``commitInfo`` comes
first (a table with in-commit timestamps requires it there, and readers of ``txnId`` and the timestamp
read only the first line), then ``protocol``, ``metaData``, ``txn`` and ``domainMetadata``, then the file
actions. ``commitInfo`` is written as Delta Spark writes it: parameters as strings (JSON for the rest),
metrics as strings.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .actions import AddCDCFile, AddFile, DomainMetadata, Metadata, Protocol, RemoveFile, SetTransaction
from .commit_info import ENGINE_INFO, IDENTITY_SCHEMA_UPDATE


@dataclass(frozen=True)
class Provenance:
    """What a commit's ``commitInfo`` records besides its time: the operation, its parameters, metrics
    and user metadata, and how the transaction was checked."""

    operation: str
    parameters: Mapping[str, Any] | None
    metrics: Mapping[str, Any] | None
    user_metadata: str | None
    txn_id: str
    read_version: int | None
    isolation_level: str
    blind_append: bool
    identity_only: bool  # the metadata change only moves identity high-water marks


@dataclass(frozen=True)
class Actions:
    """The actions of one attempt at a commit, in the order they are written after ``commitInfo``."""

    protocol: Protocol | None
    metadata: Metadata | None
    txn: SetTransaction | None
    domains: Sequence[DomainMetadata]
    adds: Sequence[AddFile]
    removes: Sequence[RemoveFile]
    cdc: Sequence[AddCDCFile]


def commit_bytes(provenance: Provenance, actions: Actions, in_commit_timestamp: int | None) -> bytes:
    """The commit file of ``actions``, its ``commitInfo`` stamped now."""
    p = provenance
    info: dict[str, Any] = {}
    if in_commit_timestamp is not None:
        info["inCommitTimestamp"] = in_commit_timestamp
    info["timestamp"] = now_ms()
    info["operation"] = p.operation
    info["operationParameters"] = {k: _param(v) for k, v in (p.parameters or {}).items()}
    if p.read_version is not None:
        info["readVersion"] = p.read_version
    info["isolationLevel"] = p.isolation_level
    info["isBlindAppend"] = p.blind_append
    if p.metrics:
        info["operationMetrics"] = {k: str(v) for k, v in p.metrics.items()}
    if p.user_metadata is not None:
        info["userMetadata"] = p.user_metadata
    if p.identity_only:
        info["tags"] = {IDENTITY_SCHEMA_UPDATE: "true"}
    info["engineInfo"] = ENGINE_INFO
    info["txnId"] = p.txn_id
    lines = [{"commitInfo": info}]
    if actions.protocol is not None:
        lines.append({"protocol": actions.protocol.to_json()})
    if actions.metadata is not None:
        lines.append({"metaData": actions.metadata.to_json()})
    if actions.txn is not None:
        lines.append({"txn": actions.txn.to_json()})
    lines.extend({"domainMetadata": d.to_json()} for d in actions.domains)
    out = [_line(x) for x in lines]
    out.extend(_line({"add": a.to_json()}) for a in actions.adds)
    out.extend(_line({"remove": r.to_json()}) for r in actions.removes)
    out.extend(_line({"cdc": c.to_json()}) for c in actions.cdc)
    return ("\n".join(out) + "\n").encode("utf-8")


# One compact encoder for every line of a commit: json.dumps with arguments builds a new encoder per call,
# a third of the cost of serialising a commit of many small actions (an OPTIMIZE's 10,000 removes).
_line = json.JSONEncoder(separators=(",", ":")).encode


def _param(value: Any) -> str | None:
    # Delta Spark writes operationParameters as strings (JSON for non-strings), and a missing one as null
    # (RESTORE's timestamp when restoring to a version, CREATE TABLE's description).
    return value if value is None or isinstance(value, str) else json.dumps(value)


def now_ms() -> int:
    return int(time.time() * 1000)
