"""Arguments of the core's public calls, checked where they are given.

A wrong argument must fail at the call that received it, naming the parameter, the value and what was
expected, not later inside a commit (``AttributeError: 'str' object has no attribute ...``) or, worse, in
a commit file that readers then refuse. Wrong *types* are ``TypeError``; values of the right type that no
table could accept are ``ValueError``. Rules that depend on the table (is this file live, does the protocol
allow this) are the callers' own and raise the core's named errors.
"""

from __future__ import annotations

import json
import numbers
from collections.abc import Callable, Iterable, Mapping
from typing import Any

__all__ = [
    "bool_arg",
    "callable_arg",
    "int_arg",
    "json_value_arg",
    "number_arg",
    "str_arg",
    "str_list_arg",
    "str_map_arg",
]


def _kind(value: Any) -> str:
    return type(value).__name__


def bool_arg(value: Any, name: str) -> bool:
    """A flag: ``True`` or ``False`` (``1``, ``"yes"`` and the like are refused, not guessed)."""
    if isinstance(value, bool):
        return value
    raise TypeError(f"{name} must be True or False, not {_kind(value)} {value!r}")


def int_arg(value: Any, name: str, *, minimum: int | None = None, optional: bool = False) -> int | None:
    """An integer (Python or numpy), at least ``minimum``; ``None`` only when ``optional``."""
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        expected = "an integer" + (" or None" if optional else "")
        raise TypeError(f"{name} must be {expected}, not {_kind(value)} {value!r}")
    if minimum is not None and int(value) < minimum:
        raise ValueError(f"{name} must be at least {minimum}, not {int(value)}")
    return int(value)


def number_arg(
    value: Any, name: str, *, minimum: float | None = None, optional: bool = False
) -> float | None:
    """A real number (int or float), at least ``minimum``; ``None`` only when ``optional``."""
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        expected = "a number" + (" or None" if optional else "")
        raise TypeError(f"{name} must be {expected}, not {_kind(value)} {value!r}")
    if value != value or (minimum is not None and value < minimum):  # NaN compares unequal to itself
        raise ValueError(f"{name} must be a number of at least {minimum}, not {value!r}")
    return value


def str_arg(value: Any, name: str, *, optional: bool = False, empty: bool = True) -> str | None:
    """A string (non-empty unless ``empty``); ``None`` only when ``optional``."""
    if value is None and optional:
        return None
    if not isinstance(value, str):
        expected = "a string" + (" or None" if optional else "")
        raise TypeError(f"{name} must be {expected}, not {_kind(value)} {value!r}")
    if not empty and not value:
        raise ValueError(f"{name} must not be empty")
    return value


def str_list_arg(value: Any, name: str) -> list[str]:
    """Names: a list (or tuple) of strings; a single string is one name, as a user who writes
    ``partition_by="day"`` means (iterating it would make one column per letter)."""
    if value is None:
        return []
    if isinstance(value, str):
        return [value]
    if not isinstance(value, Iterable) or isinstance(value, Mapping | bytes):
        raise TypeError(f"{name} must be a list of strings, not {_kind(value)} {value!r}")
    items = list(value)
    for item in items:
        if not isinstance(item, str):
            raise TypeError(f"{name} must be a list of strings; it holds {_kind(item)} {item!r}")
    return items


def str_map_arg(
    value: Any, name: str, *, null_values: bool = False, stringify: bool = False
) -> dict[str, Any]:
    """A mapping of string keys to string values (``None`` values when ``null_values``).

    With ``stringify``, values that are numbers or booleans become the strings Delta stores
    (``True`` -> ``"true"``), as table properties are written by hand in SQL.
    """
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise TypeError(f"{name} must be a mapping of strings, not {_kind(value)} {value!r}")
    out: dict[str, Any] = {}
    for key, item in value.items():
        if not isinstance(key, str):
            raise TypeError(f"{name} keys must be strings, not {_kind(key)} {key!r}")
        if item is None and null_values:
            out[key] = None
        elif isinstance(item, str):
            out[key] = item
        elif stringify and isinstance(item, bool):
            out[key] = "true" if item else "false"
        elif stringify and isinstance(item, numbers.Real):
            out[key] = str(item)
        else:
            allowed = "a string" + (" or None" if null_values else "")
            raise TypeError(f"{name}[{key!r}] must be {allowed}, not {_kind(item)} {item!r}")
    return out


def json_value_arg(value: Any, name: str) -> Any:
    """A value that serialises to JSON as it is (commitInfo fields): refused here, not when committing."""
    try:
        json.dumps(value, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"{name} must be JSON-serialisable ({exc}): {value!r}") from None
    return value


def callable_arg(value: Any, name: str, *, optional: bool = False) -> Callable[..., Any] | None:
    if value is None and optional:
        return None
    if not callable(value):
        raise TypeError(f"{name} must be callable, not {_kind(value)} {value!r}")
    return value
