"""Mutations of a ``_delta_log`` that know its structure, for the fuzz test of the log reader.

A mutation is plain data (``describe()`` prints it, so a failure reads as a recipe) and edits one thing: a
JSON value anywhere in an action, a named field of a named action, a line (deleted, duplicated, swapped,
inserted, invalid UTF-8 spliced in), a whole file (truncated, deleted, renamed or copied to an odd name, a
stray file or directory created), ``_last_checkpoint``, or one column of a checkpoint's Parquet (another
type, nulls, dropped, invalid UTF-8). A mutation whose target is gone (an earlier one removed it) does
nothing. The strategies that draw them live in ``fuzz_strategies``.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

BAD_UTF8_VALUE = "<invalid utf-8>"  # a Parquet edit that corrupts the bytes of a string column
DROP = "<drop>"  # a Parquet edit that removes the field
_MARK = "\u0001MARK\u0001"  # placeholder spliced out for raw payload text


@dataclass(frozen=True)
class Mutation:
    """One edit of a seed's log."""

    kind: str
    file: str
    detail: dict[str, Any] = field(default_factory=dict)

    def describe(self) -> str:
        return f"{self.kind} {self.file}: " + ", ".join(f"{k}={_short(v)}" for k, v in self.detail.items())

    def apply(self, root: Path) -> None:
        log = root / "_delta_log"
        path = log / self.file
        if self.kind not in ("create", "last_checkpoint") and not path.is_file():
            return
        APPLY[self.kind](self, path, log)


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 120 else text[:117] + "..."


def _lines(path: Path) -> list[bytes]:
    return path.read_bytes().split(b"\n")


def _write_lines(path: Path, lines: list[bytes]) -> None:
    path.write_bytes(b"\n".join(lines))


def _json_paths(value: Any, prefix: tuple = ()) -> Iterator[tuple]:
    """Every path to a value inside parsed JSON (keys and list indexes)."""
    yield prefix
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _json_paths(v, (*prefix, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _json_paths(v, (*prefix, i))


def _splice(obj: Any, raw: bytes) -> bytes:
    """``obj`` as JSON with the placeholder replaced by ``raw``: non-standard tokens and bytes survive."""
    return json.dumps(obj).encode().replace(json.dumps(_MARK).encode(), raw, 1)


def _raw(payload: str | bytes) -> bytes:
    return payload if isinstance(payload, bytes) else payload.encode()


def _apply_value(m: Mutation, path: Path, log: Path) -> None:
    """Replace, delete or duplicate the key of the ``pick``-th value of one line's JSON."""
    lines = _lines(path)
    i = m.detail["line"]
    if i >= len(lines) or not lines[i].strip():
        return
    try:
        obj = json.loads(lines[i])
    except ValueError:
        return
    paths = [p for p in _json_paths(obj) if p]
    if not paths:
        return
    target = paths[m.detail["pick"] % len(paths)]
    raw = _raw(m.detail["value"])
    if m.detail.get("bad_utf8"):
        raw = b'"a' + raw + b'b"'
    parent = obj
    for key in target[:-1]:
        parent = parent[key]
    last, how = target[-1], m.detail["how"]
    if how == "delete":
        del parent[last]
        lines[i] = json.dumps(obj).encode()
    elif how == "duplicate_key" and isinstance(last, str):
        # the same key twice in one object: which one wins is up to the parser
        old = json.dumps({last: parent[last]})[1:-1].encode()
        lines[i] = (
            json.dumps(obj).encode().replace(old, old + b", " + json.dumps(last).encode() + b": " + raw, 1)
        )
    else:
        parent[last] = _MARK
        lines[i] = _splice(obj, raw)
    _write_lines(path, lines)


def _apply_action_field(m: Mutation, path: Path, log: Path) -> None:
    """Set one field of every (or the first) action of a kind in the file: ``metaData.schemaString``..."""
    action, key, value = m.detail["action"], m.detail["key"], m.detail["value"]
    lines = _lines(path)
    changed = False
    for i, line in enumerate(lines):
        if f'"{action}"'.encode() not in line:
            continue
        try:
            obj = json.loads(line)
        except ValueError:
            continue
        if not isinstance(obj, dict) or not isinstance(obj.get(action), dict):
            continue
        body = obj[action]
        if key == "partitionColumns+" and isinstance(body.get("partitionColumns"), list):
            body["partitionColumns"].append(value)  # a partition column the schema may not have
            lines[i] = json.dumps(obj).encode()
        elif key == "schemaString~" and isinstance(body.get("schemaString"), str):
            body["schemaString"] = _edit_schema(body["schemaString"], *value)
            lines[i] = json.dumps(obj).encode()
        elif (
            key == "partitionValues"
            and isinstance(body.get("partitionValues"), dict)
            and body["partitionValues"]
        ):
            body["partitionValues"][sorted(body["partitionValues"])[0]] = value
            lines[i] = json.dumps(obj).encode()
        elif key == "partitionValues.key" and isinstance(body.get("partitionValues"), dict):
            body["partitionValues"][_MARK] = "1"
            lines[i] = _splice(obj, b'"k' + _raw(value) + b'"')  # the key itself is not UTF-8
        else:
            body[key] = _MARK
            lines[i] = _splice(obj, _raw(value))
        changed = True
        if m.detail.get("first_only"):
            break
    if changed:
        _write_lines(path, lines)


def _edit_schema(schema_string: str, pick: int, value: str) -> str:
    """The schema with its ``pick``-th node (a type, a name, a flag, a field) replaced by ``value``."""
    try:
        schema = json.loads(schema_string)
    except ValueError:
        return schema_string
    paths = [p for p in _json_paths(schema) if p]
    if not paths:
        return schema_string
    target = paths[pick % len(paths)]
    parent = schema
    for key in target[:-1]:
        parent = parent[key]
    parent[target[-1]] = json.loads(value)
    return json.dumps(schema)


def _apply_lines(m: Mutation, path: Path, log: Path) -> None:
    lines = _lines(path)
    i, j, op, text = m.detail["i"] % len(lines), m.detail["j"] % len(lines), m.detail["op"], m.detail["text"]
    if op == "delete":
        del lines[i]
    elif op == "duplicate":
        lines.insert(i, lines[i])
    elif op == "swap":
        lines[i], lines[j] = lines[j], lines[i]
    elif op == "insert":
        lines.insert(i, text)
    elif op == "splice":  # bytes (often not UTF-8) inside a line
        k = m.detail["j"] % (len(lines[i]) + 1)
        lines[i] = lines[i][:k] + text + lines[i][k:]
    _write_lines(path, lines)


def _apply_truncate(m: Mutation, path: Path, log: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: int(len(data) * m.detail["keep"])])


def _apply_delete(m: Mutation, path: Path, log: Path) -> None:
    path.unlink()


def _clear(target: Path) -> None:
    if target.is_dir():
        shutil.rmtree(target)
    elif target.exists():
        target.unlink()


def _apply_rename(m: Mutation, path: Path, log: Path) -> None:
    target = log / m.detail["to"]
    if target == path:
        return
    _clear(target)
    if m.detail["copy"]:
        shutil.copyfile(path, target)
    else:
        path.rename(target)


def _apply_create(m: Mutation, path: Path, log: Path) -> None:
    _clear(path)
    if m.detail.get("directory"):
        path.mkdir()
    else:
        path.write_bytes(m.detail["content"])


def _invalid_utf8(strings: pa.Array) -> pa.Array:
    """The same strings with the first byte of their data replaced by 0xff, bypassing Arrow's checks."""
    validity, offsets, data = strings.buffers()
    raw = bytearray(data.to_pybytes()) if data is not None else bytearray()
    if not raw:
        return strings
    raw[0] = 0xFF
    return pa.Array.from_buffers(strings.type, len(strings), [validity, offsets, pa.py_buffer(bytes(raw))],
                                 offset=strings.offset)  # fmt: skip


def _corrupt_bytes(child: pa.Array) -> pa.Array:
    if pa.types.is_string(child.type):
        return _invalid_utf8(child)
    if pa.types.is_map(child.type) and pa.types.is_string(child.keys.type):
        return pa.MapArray.from_arrays(
            child.offsets, _invalid_utf8(child.keys), child.items, mask=child.is_null()
        )
    return child


def _apply_parquet(m: Mutation, path: Path, log: Path) -> None:
    """Rewrite one column of a checkpoint's Parquet: another type, nulls, dropped, or invalid UTF-8."""
    try:
        table = pq.read_table(path)
    except (OSError, pa.ArrowException):
        return
    action, leaf, value = m.detail["action"], m.detail["leaf"], m.detail["value"]
    if action not in table.column_names:
        return
    col = table.column(action).combine_chunks()
    if not pa.types.is_struct(col.type):
        return
    index = table.column_names.index(action)
    if leaf == "*":  # the whole action column becomes another type
        new = pa.array([None if not valid else value for valid in col.is_valid().to_pylist()])
        pq.write_table(table.set_column(index, action, new), path)
        return
    names = [f.name for f in col.type]
    if leaf not in names:
        return
    children = [col.field(i) for i in range(len(names))]
    k = names.index(leaf)
    if value == DROP:
        del children[k], names[k]
    elif value == BAD_UTF8_VALUE:
        children[k] = _corrupt_bytes(children[k])
    else:
        children[k] = pa.array([value] * len(col)) if value is not None else pa.nulls(len(col))
    new = pa.StructArray.from_arrays(children, names=names, mask=col.is_null() if col.null_count else None)
    pq.write_table(table.set_column(index, action, new), path)


APPLY: dict[str, Callable[[Mutation, Path, Path], None]] = {
    "value": _apply_value,
    "action_field": _apply_action_field,
    "lines": _apply_lines,
    "truncate": _apply_truncate,
    "delete": _apply_delete,
    "rename": _apply_rename,
    "create": _apply_create,
    "last_checkpoint": _apply_create,
    "parquet": _apply_parquet,
}
