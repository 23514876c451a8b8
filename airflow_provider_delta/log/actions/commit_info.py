"""The ``commitInfo`` fields the core acts on, read from a commit's first line.

``commitInfo`` is free-form provenance ("Commit Provenance Information"), but three of its fields carry
meaning for writers: ``txnId`` (our own commits' identity, to recognise a commit whose acknowledgement was
lost), ``inCommitTimestamp`` ("In-Commit Timestamps": each must exceed the previous one) and the
parameters of ``VACUUM START`` (which files a concurrent VACUUM may delete).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from importlib.metadata import PackageNotFoundError
from importlib.metadata import version as _dist_version
from typing import Any

from ..base.arguments import json_value_arg, str_arg
from .actions import AddFile

try:
    CORE_VERSION = _dist_version("airflow-provider-delta")
except PackageNotFoundError:  # running from a source tree that is not installed
    CORE_VERSION = "0+unknown"
# commitInfo.engineInfo of every commit we write ("Commit Provenance Information").
ENGINE_INFO = f"airflow-provider-delta/{CORE_VERSION}"

VACUUM_START = "VACUUM START"
VACUUM_END = "VACUUM END"


def first_commit_info(data: bytes) -> dict[str, Any]:
    """The ``commitInfo`` of a commit whose first line holds it (as writers of in-commit timestamps must,
    and as Delta Spark and we always do); ``{}`` when the first line is anything else."""
    try:
        info = json.loads(data.split(b"\n", 1)[0]).get("commitInfo")
    except (ValueError, AttributeError):
        return {}
    return info if isinstance(info, dict) else {}


def txn_id_of(data: bytes) -> str | None:
    value = first_commit_info(data).get("txnId")
    return value if isinstance(value, str) else None


def in_commit_timestamp_of(data: bytes) -> int | None:
    value = first_commit_info(data).get("inCommitTimestamp")
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def vacuum_cutoff(info: dict[str, Any] | None) -> int | None:
    """For a ``VACUUM START``: the modification time below which it may delete unreferenced files (its
    start time minus the retention it used), else ``None``.

    Delta Spark and we record the retention in ``operationParameters`` (``specifiedRetentionMillis`` when
    one was given, else the table's ``defaultRetentionMillis``). The recorded start is taken after VACUUM
    listed the table, so the cut-off computed from it is never earlier than the one it applied: files
    older than it are at risk, a safe over-estimate.
    """
    if not info or info.get("operation") != VACUUM_START:
        return None
    params = info.get("operationParameters") or {}
    retention = params.get("specifiedRetentionMillis", params.get("defaultRetentionMillis"))
    try:
        return int(info["timestamp"]) - int(retention if retention is not None else 0)
    except (KeyError, TypeError, ValueError, OverflowError):  # OverflowError: an infinite retention
        return None


def commit_info_args(
    operation: Any, parameters: Any, metrics: Any, user_metadata: Any
) -> tuple[str, dict[str, Any] | None, dict[str, Any] | None, str | None]:
    """What a caller gives ``commit()`` for commitInfo, checked before anything is written: a non-empty
    operation name, string-keyed maps of JSON values, a string of user metadata."""
    maps = []
    for value, name in ((parameters, "operation_parameters"), (metrics, "operation_metrics")):
        if value is None:
            maps.append(None)
            continue
        if not isinstance(value, Mapping) or not all(isinstance(k, str) for k in value):
            raise TypeError(f"{name} must be a mapping with string keys, not {value!r:.200}")
        maps.append({k: json_value_arg(v, f"{name}[{k!r}]") for k, v in value.items()})
    operation = str_arg(operation, "operation", empty=False)
    return operation, maps[0], maps[1], str_arg(user_metadata, "user_metadata", optional=True)


# commitInfo.tags: a commit whose only metadata change moves identity high-water marks says so
# ("Identity Columns"; Delta Spark's conflict checker lets such a change pass a transaction that changes
# no metadata itself).
IDENTITY_SCHEMA_UPDATE = "delta.identity.schemaUpdate"


def write_metrics(adds: Sequence[AddFile], removes: Sequence[Any] = ()) -> dict[str, int]:
    """Delta Spark's WRITE metrics of a commit that adds ``adds`` and removes ``removes`` (files whose
    ``size`` may be unknown), so DESCRIBE HISTORY, deltalake and the Delta view show what changed."""
    metrics = {
        "numFiles": len(adds),
        "numOutputRows": sum(a.num_records or 0 for a in adds),
        "numOutputBytes": sum(a.size for a in adds),
    }
    if removes:
        metrics["numRemovedFiles"] = len(removes)
        metrics["numRemovedBytes"] = sum(r.size or 0 for r in removes)
    return metrics


def tags_of(info: dict[str, Any] | None) -> dict[str, str]:
    """``commitInfo.tags`` (string to string), ``{}`` when absent or not an object."""
    tags = (info or {}).get("tags")
    return {str(k): str(v) for k, v in tags.items()} if isinstance(tags, dict) else {}


def identity_only_update(info: dict[str, Any] | None) -> bool:
    return tags_of(info).get(IDENTITY_SCHEMA_UPDATE, "").lower() == "true"
