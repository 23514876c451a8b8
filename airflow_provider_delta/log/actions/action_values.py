"""Field values of actions as the JSON log carries them, checked against the types the spec gives them.

Spec: "Actions" (each field's type) and the primitive types' ranges: an Int or a Long is a JSON integer that
fits 32 or 64 bits, never a float, an infinity or a bigger number. A value of the wrong type raises a
``ValueError`` naming the action and field; the reader that knows the file and line turns it into a
``CorruptLogError``.
"""

from __future__ import annotations

from typing import Any

from ..base.errors import shown

INT32_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1


def str_field(d: dict[str, Any], key: str, action: str, *, required: bool = True) -> Any:
    value = d.get(key)
    if value is None and not required:
        return None
    if not isinstance(value, str):
        raise ValueError(f"{action}.{key} must be a string, not {shown(value)}")
    return value


def int_field(
    d: dict[str, Any],
    key: str,
    action: str,
    *,
    required: bool = True,
    lo: int = -INT64_MAX - 1,
    hi: int = INT64_MAX,
) -> Any:
    value = d.get(key)
    if value is None and not required:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or not lo <= value <= hi:
        raise ValueError(f"{action}.{key} must be an integer from {lo} to {hi}, not {shown(value)}")
    return value


def strings_field(d: dict[str, Any], key: str, action: str) -> tuple[str, ...] | None:
    value = d.get(key)
    if value is None:
        return None
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ValueError(f"{action}.{key} must be an array of strings, not {shown(value)}")
    return tuple(value)


def string_map(value: Any, where: str) -> dict[str, str]:
    """A JSON object of strings; a null value means the key is not set (as a missing key would)."""
    if value is None:
        return {}
    if not isinstance(value, dict) or not all(isinstance(v, str | None) for v in value.values()):
        raise ValueError(f"{where} must be an object of strings, not {shown(value)}")
    return {k: v for k, v in value.items() if v is not None}
