"""The ``_last_checkpoint`` file: a pointer near the end of the log, and its JSON checksum.

Spec: "Last Checkpoint File" and "JSON checksum". A reader that trusts a stale or corrupt pointer would
either list from the wrong place or miss versions, so the pointer is only ever a hint: it is validated
here, and the log segment falls back to listing when it does not hold (see ``segment``).
"""

from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

log = logging.getLogger(__name__)

LAST_CHECKPOINT = "_last_checkpoint"
_INT64_MAX = 2**63 - 1
# Optional integer fields: a reader does not need them, but a pointer whose numbers are of the wrong type
# or out of range was not written by a conforming writer and is not trusted for its version either.
_OPTIONAL_COUNTS = ("size", "parts", "sizeInBytes", "numOfAddFiles")


@dataclass(frozen=True)
class LastCheckpoint:
    """The fields of ``_last_checkpoint`` that readers use."""

    version: int
    size: int | None = None
    parts: int | None = None
    size_in_bytes: int | None = None
    num_of_add_files: int | None = None
    checksum: str | None = None
    raw: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    def to_json(self) -> str:
        """Serialise with a checksum, as writers are encouraged to ("JSON checksum")."""
        body: dict[str, Any] = {"version": self.version}
        for key, value in (
            ("size", self.size),
            ("parts", self.parts),
            ("sizeInBytes", self.size_in_bytes),
            ("numOfAddFiles", self.num_of_add_files),
        ):
            if value is not None:
                body[key] = value
        for key, value in self.raw.items():
            if key not in body and key != "checksum":
                body[key] = value
        body["checksum"] = json_checksum(body)
        return json.dumps(body, separators=(",", ":"))


def _encode(text: str) -> str:
    # Strict RFC 3986 encoding: everything but unreserved characters, uppercase hex ("How to URL encode").
    return quote(text, safe="-._~")


def _scalar(value: Any) -> str:
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, str):
        return '"' + _encode(value) + '"'
    return json.dumps(value)


def _pairs(value: Any, path: list[str], out: list[tuple[str, str]]) -> None:
    if isinstance(value, dict):
        for k, v in value.items():
            _pairs(v, path + ['"' + _encode(k) + '"'], out)
    elif isinstance(value, list):
        for i, v in enumerate(value):
            _pairs(v, path + [str(i)], out)
    else:
        out.append(("+".join(path), _scalar(value)))


def canonicalize(obj: dict[str, Any]) -> str:
    """Canonical form of a JSON object per "JSON checksum" (top-level ``checksum`` ignored)."""
    pairs: list[tuple[str, str]] = []
    for k, v in obj.items():
        if k == "checksum":
            continue
        _pairs(v, ['"' + _encode(k) + '"'], pairs)
    pairs.sort(key=lambda p: p[0].encode("utf-8"))
    return ",".join(f"{p}={v}" for p, v in pairs)


def json_checksum(obj: dict[str, Any]) -> str:
    return hashlib.md5(canonicalize(obj).encode("utf-8")).hexdigest()


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in pairs:
        if k in out:
            raise ValueError(f"duplicate key {k!r}")
        out[k] = v
    return out


def _is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= _INT64_MAX


def parse_last_checkpoint(data: bytes, *, where: str = LAST_CHECKPOINT) -> LastCheckpoint | None:
    """Parse and validate; ``None`` (with a warning) when the file cannot be trusted.

    A corrupt pointer is not an error of the table: the log itself is the truth, so the caller lists.
    """
    try:
        obj = json.loads(data.decode("utf-8"), object_pairs_hook=_no_duplicates)  # strictly: no surrogates
        if not isinstance(obj, dict):
            raise ValueError("not a JSON object")
        version = obj["version"]
        if not _is_count(version):
            raise ValueError(f"version {version!r} is not an integer from 0 to 2^63-1")
        for key in _OPTIONAL_COUNTS:
            if obj.get(key) is not None and not _is_count(obj[key]):
                raise ValueError(f"{key} {obj[key]!r} is not an integer from 0 to 2^63-1")
        checksum = obj.get("checksum")
        if checksum is not None and not isinstance(checksum, str):
            raise ValueError(f"checksum {checksum!r} is not a string")
        matches = checksum is None or checksum == json_checksum(obj)
    except (ValueError, KeyError, TypeError, RecursionError) as exc:
        # UnicodeDecodeError and JSONDecodeError are ValueErrors; RecursionError for absurd nesting.
        log.warning("ignoring unreadable %s: %s", where, exc)
        return None
    if not matches:
        log.warning("ignoring %s: checksum %s does not match its content", where, checksum)
        return None
    return LastCheckpoint(
        version=version,
        size=obj.get("size"),
        parts=obj.get("parts"),
        size_in_bytes=obj.get("sizeInBytes"),
        num_of_add_files=obj.get("numOfAddFiles"),
        checksum=checksum,
        raw=obj,
    )
