"""Delta log entries as newline-delimited JSON (commits, V2 checkpoints' JSON files): parsed into ``Actions``.

A Python loop runs per line only to route it: the many add/remove lines of a batch are parsed by Arrow's
JSON reader in one go per kind, keeping only the fields ``Actions.fields`` asks for; the few other actions
(protocol, metaData, txn, domainMetadata, commitInfo, sidecar) are parsed in Python. A line Arrow cannot
type falls back to Python, and a malformed one is reported with its file and line.
"""

from __future__ import annotations

import functools
import io
import json
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.json as pj

from ..actions.actions import (
    ALL_FILE_FIELDS,
    MAP_FIELDS,
    DomainMetadata,
    FileFields,
    Metadata,
    Protocol,
    SetTransaction,
    check_commit_info,
    check_sidecar,
)
from ..base.arrow_utils import conform, decode_uri_paths, from_numpy, struct_to_map, true_rows
from ..base.errors import CorruptLogError, shown

# Where an action was read: the file, and the line for JSON (``None`` for a checkpoint's Parquet rows).
Origin = tuple[str, int | None]


@dataclass
class Actions:
    """Actions gathered in replay order: files as Arrow, small actions as Python objects.

    ``fields`` says which fields of file actions are kept; ``adds``/``removes`` hold only those.
    ``protocol_origin``/``metadata_origin`` say where the latest protocol and metaData were read, so that
    a value found wrong when the snapshot is built is reported at its file and line.
    """

    adds: list[pa.Table] = field(default_factory=list)  # each with the kept ADD columns + "_version"
    removes: list[pa.Table] = field(default_factory=list)
    protocol: Protocol | None = None
    metadata: Metadata | None = None
    txns: dict[str, SetTransaction] = field(default_factory=dict)
    domains: dict[str, DomainMetadata] = field(default_factory=dict)
    commit_infos: dict[int, dict[str, Any]] = field(default_factory=dict)
    sidecars: list[str] = field(default_factory=list)
    checkpoint_metadata: list[dict[str, Any]] = field(default_factory=list)
    fields: FileFields = ALL_FILE_FIELDS
    protocol_origin: Origin | None = None
    metadata_origin: Origin | None = None

    def apply_small(self, name: str, body: dict[str, Any], version: int, origin: Origin) -> None:
        """Latest wins for protocol, metaData, txn per appId and domain ("Action Reconciliation").

        Each action is checked against the spec's field types as it is read: a ``ValueError`` names the
        action and field, and the caller adds the file and line.
        """
        if name == "protocol":
            self.protocol, self.protocol_origin = Protocol.from_json(body), origin
        elif name == "metaData":
            self.metadata, self.metadata_origin = Metadata.from_json(body), origin
        elif name == "txn":
            txn = SetTransaction.from_json(body)
            self.txns[txn.app_id] = txn
        elif name == "domainMetadata":
            dm = DomainMetadata.from_json(body)
            self.domains[dm.domain] = dm
        elif name == "commitInfo":
            check_commit_info(body)
            self.commit_infos[version] = body
        elif name == "sidecar":
            check_sidecar(body)
            self.sidecars.append(body["path"])
        elif name == "checkpointMetadata":
            self.checkpoint_metadata.append(body)



# Actions of the spec ("Actions") other than add/remove; a line naming one must hold an object. Others are
# ignored whatever they hold (readers must ignore unknown actions, "Protocol Evolution").
_KNOWN_ACTIONS = frozenset(
    {"protocol", "metaData", "txn", "domainMetadata", "commitInfo", "sidecar", "checkpointMetadata", "cdc"}
)


# JSON may escape a lone UTF-16 surrogate ("\ud800"), which Python's parser keeps as a character no
# UTF-8 encoder accepts; a pair ("\ud83d\ude00") is one character and fine. Only lines with such an
# escape are checked.
_ESCAPED_SURROGATE = re.compile(rb"\\u[dD][89a-fA-F]")


def action_line(line: bytes, path: str, lineno: int) -> dict[str, Any]:
    """One line of a commit file as its JSON object; broken JSON or a line that is not an object is a
    :class:`CorruptLogError` naming the file and the line (every reader of commit lines parses them here)."""
    try:
        # Decoded strictly first: json.loads of bytes lets UTF-8-encoded surrogates (ED A0 80) through as
        # lone surrogates, which are no text and fail only later, when a checkpoint writes them.
        obj = json.loads(line.decode("utf-8"))
    except (ValueError, RecursionError) as exc:  # UnicodeDecodeError is a ValueError
        raise CorruptLogError(f"malformed JSON: {exc}", path=path, line=lineno) from None
    if not isinstance(obj, dict):
        raise CorruptLogError("an action line must be a JSON object", path=path, line=lineno)
    return obj


def action_lines(
    data: bytes, path: str, *, naming: tuple[bytes, ...] = ()
) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, object) of each action line of a commit file; with ``naming`` (e.g. ``b'"txn"'``),
    only the lines that contain one of them are parsed: a reader after one action skips the file list."""
    for lineno, line in enumerate(data.split(b"\n"), start=1):
        if not line.strip() or (naming and not any(n in line for n in naming)):
            continue
        yield lineno, action_line(line, path, lineno)


def _is_text(obj: Any) -> bool:
    try:
        json.dumps(obj, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


@functools.cache
def _json_schema(kind: str, target: pa.StructType) -> pa.Schema:
    return pa.schema([(kind, pa.struct([f for f in target if f.name not in MAP_FIELDS]))])


def _file_actions_from_json(lines: list[bytes], kind: str, where: Where, target: pa.StructType) -> pa.Array:
    """Parse add or remove lines with Arrow's JSON reader into ``target`` (the kept ADD/REMOVE fields).

    Map-valued fields (``partitionValues``, ``tags``) have free-form keys, so the first read infers them;
    inference can type a string like ``"2021-02-02"`` as a timestamp, so when any value was not read as a
    string the lines are read again with those keys declared as strings, keeping the text exact. When
    ``target`` has no map field, fields outside it are skipped by the reader and never become arrays.
    """
    schema = _json_schema(kind, target)
    infer = any(f.name in MAP_FIELDS for f in target)
    buf = b"\n".join(lines)
    try:
        raw = _read_json(buf, schema, kind, infer)
        retyped = _string_keyed_maps(raw, schema, kind)
        if retyped is not None:
            raw = _read_json(buf, retyped, kind, infer)
        if len(raw) != len(lines):
            # Arrow's reader takes objects side by side on one line ("}{") as rows of their own: such a line
            # is malformed, and the Python parser names it.
            raise ValueError("a line holds more than one JSON object")
        arr = _normalise_file_struct(raw, target)
        # Arrow's JSON reader does not check that strings are UTF-8 (Python's parser does, and names the
        # line): a full validation is a fast pass over the batch's bytes.
        arr.validate(full=True)
        return arr
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError, TypeError, ValueError):
        # A malformed line (named below), values Arrow could not type uniformly, or bytes that are not
        # UTF-8 (a UnicodeDecodeError, from a map key Arrow took as a field name): parse in Python.
        return _file_actions_from_python(lines, kind, where(), target)


def _read_json(buf: bytes, schema: pa.Schema, kind: str, infer: bool) -> pa.StructArray:
    table = pj.read_json(
        io.BytesIO(buf),
        # One block holds the whole batch (lines never straddle blocks); threads only pay off on big logs,
        # and a small commit read by a writer or a sensor must stay well under a millisecond.
        read_options=pj.ReadOptions(
            block_size=max(1 << 16, min(len(buf) + 1, 1 << 28)), use_threads=len(buf) > (8 << 20)
        ),
        parse_options=pj.ParseOptions(
            explicit_schema=schema, unexpected_field_behavior="infer" if infer else "ignore"
        ),
    )
    return table.column(kind).combine_chunks()


def _string_keyed_maps(raw: pa.StructArray, schema: pa.Schema, kind: str) -> pa.Schema | None:
    """A schema declaring every inferred map key as string, or ``None`` when inference kept them strings."""
    extra = []
    for name in MAP_FIELDS:
        idx = raw.type.get_field_index(name)
        if idx < 0:
            continue
        inferred = raw.type.field(idx).type
        if not pa.types.is_struct(inferred):
            continue
        if all(pa.types.is_string(f.type) or pa.types.is_null(f.type) for f in inferred):
            continue
        extra.append(pa.field(name, pa.struct([(f.name, pa.string()) for f in inferred])))
    if not extra:
        return None
    base = schema.field(kind).type
    return pa.schema([(kind, pa.struct(list(base) + extra))])


def _normalise_file_struct(raw: pa.StructArray, target: pa.StructType) -> pa.Array:
    children = {raw.type.field(i).name: raw.field(i) for i in range(raw.type.num_fields)}
    for name in MAP_FIELDS:
        if name in children and pa.types.is_struct(children[name].type):
            children[name] = struct_to_map(children[name], drop_nulls=(name == "tags"))
    names = list(children)
    rebuilt = pa.StructArray.from_arrays([children[n] for n in names], names=names)
    return conform(rebuilt, target)


def _file_actions_from_python(
    lines: list[bytes], kind: str, where: list[tuple[str, int]], target: pa.StructType
) -> pa.Array:
    """The slow path, for a batch Arrow refused: each line parsed by Python, the first bad one named."""
    bodies = []
    for line, (path, lineno) in zip(lines, where, strict=True):
        try:
            body = json.loads(line.decode("utf-8"))[kind]
        except (ValueError, KeyError, TypeError, RecursionError) as exc:
            raise CorruptLogError(f"malformed {kind} action: {exc}", path=path, line=lineno) from None
        if not isinstance(body, dict):
            raise CorruptLogError(f"{kind} must be a JSON object, not {shown(body)}", path=path, line=lineno)
        for name in MAP_FIELDS:
            if isinstance(body.get(name), dict):
                body[name] = {k: (None if v is None else _as_str(v)) for k, v in body[name].items()}
        bodies.append(body)
    try:
        return pa.array(bodies, type=target)
    except (pa.ArrowException, TypeError, ValueError, OverflowError):
        pass  # find the line below; UnicodeEncodeError (a lone surrogate) is a ValueError
    for body, (path, lineno) in zip(bodies, where, strict=True):
        try:
            pa.array([body], type=target)
        except (pa.ArrowException, TypeError, ValueError, OverflowError) as exc:
            raise CorruptLogError(
                f"{kind} action with a value of the wrong type or out of range: {exc}", path=path, line=lineno
            ) from None
    raise CorruptLogError(f"{kind} actions that Arrow cannot read together", path=where[0][0])


def _as_str(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    return v if isinstance(v, str) else json.dumps(v)


Where = Callable[[], list[tuple[str, int]]]  # (file, line) of each routed line, found only when needed


def parse_json_actions(acc: Actions, chunks: list[tuple[int, str, bytes]]) -> None:
    """Parse newline-delimited JSON action files (commits, V2 checkpoint JSON) into ``acc``.

    ``chunks`` is ``[(version, path for messages, bytes)]`` in replay order. A Python loop runs per line
    only to route it; add/remove lines are parsed by Arrow in one batch per kind. Where each line came from
    (file and line number) is worked out again only when a message needs it.
    """
    routed: dict[str, tuple[list[bytes], list[int]]] = {"add": ([], []), "remove": ([], [])}
    adds, add_counts = routed["add"]
    removes, remove_counts = routed["remove"]
    for version, path, data in chunks:
        before = len(adds), len(removes)
        for lineno, line in enumerate(data.split(b"\n"), start=1):
            if line.startswith(b'{"add":'):
                adds.append(line)
            elif line.startswith(b'{"remove":'):
                removes.append(line)
            else:
                line = line.strip()
                if line:
                    kind, line = _route_other(acc, line, version, path, lineno)
                    if kind is not None:
                        routed[kind][0].append(line)
        add_counts.append(len(adds) - before[0])
        remove_counts.append(len(removes) - before[1])
    versions = np.array([version for version, _, _ in chunks], dtype=np.int64)
    for kind, (lines, counts) in routed.items():
        if not lines:
            continue
        target = acc.fields.add_type if kind == "add" else acc.fields.remove_type
        where = functools.partial(_locate, chunks, kind)
        arr = _file_actions_from_json(lines, kind, where, target)
        _check_paths(arr, where)
        table = struct_to_table(arr).append_column("_version", from_numpy(np.repeat(versions, counts)))
        (acc.adds if kind == "add" else acc.removes).append(table)


def _route_other(
    acc: Actions | None, line: bytes, version: int, path: str, lineno: int
) -> tuple[str | None, bytes]:
    """A line that does not start like an add or remove: a small action, applied to ``acc`` (unless it
    is ``None``), or a file action with unusual spacing, re-serialised so the Arrow batch parses it."""
    obj = action_line(line, path, lineno)
    if _ESCAPED_SURROGATE.search(line) and not _is_text(obj):
        raise CorruptLogError(
            "a string holds a lone UTF-16 surrogate escape (\\udXXX), which is not text",
            path=path,
            line=lineno,
        )
    kind = None
    for name, body in obj.items():
        if name in ("add", "remove"):
            kind, line = name, json.dumps({name: body}).encode()
        elif acc is None:
            continue
        elif isinstance(body, dict):
            try:
                acc.apply_small(name, body, version, (path, lineno))
            except ValueError as exc:
                raise CorruptLogError(f"invalid {name} action: {exc}", path=path, line=lineno) from None
        elif body is not None and name in _KNOWN_ACTIONS:
            raise CorruptLogError(f"{name} must be a JSON object, not {shown(body)}", path=path, line=lineno)
    return kind, line


def _locate(chunks: list[tuple[int, str, bytes]], kind: str) -> list[tuple[str, int]]:
    """(file, line) of each ``kind`` line ``parse_json_actions`` routed, in its order: the same routing
    again, for messages about a line that only Arrow's batch found wrong."""
    found = []
    for version, path, data in chunks:
        for lineno, line in enumerate(data.split(b"\n"), start=1):
            if line.startswith(b'{"add":'):
                got = "add"
            elif line.startswith(b'{"remove":'):
                got = "remove"
            else:
                line = line.strip()
                got = _route_other(None, line, version, path, lineno)[0] if line else None
            if got == kind:
                found.append((path, lineno))
    return found


def _check_paths(arr: pa.StructArray, where: Where) -> None:
    paths = arr.field("path")
    if paths.null_count:
        path, line = where()[int(true_rows(paths.is_null())[0])]
        raise CorruptLogError("file action without a path", path=path, line=line)


def struct_to_table(arr: pa.StructArray) -> pa.Table:
    """Flatten a file-action struct into columns, decoding the URI paths once, here."""
    names = [f.name for f in arr.type]
    columns = arr.flatten()
    i = names.index("path")
    columns[i] = decode_uri_paths(columns[i])
    return pa.Table.from_arrays(columns, names=names)
