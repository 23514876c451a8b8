"""Predicates and column expressions as one small tree, whatever they were written in.

Readers take filters as a ``pyarrow.compute.Expression``, as deltalake-style DNF tuples or as SQL text; tables
hold SQL in CHECK constraints, invariants and generation expressions. All of them become this tree, so that
one evaluator (``evaluate``) computes them over Arrow rows with Spark SQL's semantics and one planner
(``skipping``) reads them against partition values and file statistics. A node we cannot interpret stays
an :class:`Opaque` one: it is never used to skip a file, and evaluating it is refused by name.
"""

from __future__ import annotations

import ctypes
import datetime as dt
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.ipc as ipc

from ..base.errors import DeltaError

COMPARISONS = {"=": "=", "!=": "!=", "<": ">", "<=": ">=", ">": "<", ">=": "<=", "<=>": "<=>"}  # -> flipped
NEGATED = {"=": "!=", "!=": "=", "<": ">=", "<=": ">", ">": "<=", ">=": "<"}


class Expr:
    """A node of the tree; compared by value, so rules and filters can be deduplicated and printed."""

    def columns(self) -> Iterator[tuple[str, ...]]:
        """Every column path this expression reads."""
        for child in getattr(self, "args", ()):
            yield from child.columns()


@dataclass(frozen=True)
class Column(Expr):
    path: tuple[str, ...]

    def columns(self) -> Iterator[tuple[str, ...]]:
        yield self.path

    def __str__(self) -> str:
        return ".".join(f"`{p}`" for p in self.path)


@dataclass(frozen=True)
class Literal(Expr):
    """A constant; ``type`` is its Arrow type (``pa.null()`` for NULL), as Spark types literals."""

    value: Any
    type: pa.DataType

    def __str__(self) -> str:
        return "NULL" if self.value is None else repr(self.value)


@dataclass(frozen=True)
class Call(Expr):
    """An operator or function: ``op`` is its SQL name in lower case (``and``, ``=``, ``in``, ``lower``...);
    ``option`` carries what is not an argument (a CAST's target type, a LIKE's escape)."""

    op: str
    args: tuple[Expr, ...]
    option: Any = None

    def __str__(self) -> str:
        if self.op in COMPARISONS or self.op in ("and", "or", "+", "-", "*", "/", "%"):
            return f"({self.args[0]} {self.op.upper()} {self.args[1]})"
        return f"{self.op}({', '.join(map(str, self.args))})"


@dataclass(frozen=True)
class Opaque(Expr):
    """Something we cannot interpret (an Arrow function without a Spark equivalent, say): ``what`` names it.
    ``args`` are its interpretable parts, so its columns are still known."""

    what: str
    args: tuple[Expr, ...] = ()

    def __str__(self) -> str:
        return self.what


class ColumnNotFoundError(DeltaError, KeyError):
    """A filter, projection or rule names a column the table does not have; the message names it and the
    table's columns."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0])


def literal(value: Any, arrow_type: pa.DataType | None = None) -> Literal:
    """A Python value as a literal, typed as Spark types it unless ``arrow_type`` says otherwise."""
    if isinstance(value, pa.Scalar):
        return Literal(value.as_py(), value.type)
    if arrow_type is not None:
        return Literal(value, arrow_type)
    if value is None:
        return Literal(None, pa.null())
    if isinstance(value, bool):
        return Literal(value, pa.bool_())
    if isinstance(value, int):
        return Literal(value, pa.int32() if -(2**31) <= value < 2**31 else pa.int64())
    if isinstance(value, float):
        return Literal(value, pa.float64())
    if isinstance(value, Decimal):
        sign, digits, exponent = value.as_tuple()
        scale = max(0, -int(exponent))
        return Literal(value, pa.decimal128(max(len(digits), scale, 1), scale))
    if isinstance(value, dt.datetime):
        return Literal(value, pa.timestamp("us", tz="UTC") if value.tzinfo else pa.timestamp("us"))
    if isinstance(value, dt.date):
        return Literal(value, pa.date32())
    if isinstance(value, bytes):
        return Literal(value, pa.binary())
    return Literal(str(value), pa.string())


# -- deltalake-style DNF tuples --------------------------------------------------------------------------
_DNF_OPS = {"=": "=", "==": "=", "!=": "!=", "<": "<", "<=": "<=", ">": ">", ">=": ">=", "in": "in",
            "not in": "not in"}  # fmt: skip


def from_dnf(filters: Sequence[Any]) -> Expr:
    """``[("a", "=", 1), ("b", "in", [1, 2])]`` (AND) or a list of such lists (OR of ANDs), as deltalake and
    pyarrow's ``filters=`` take them. Values may be strings for any type, as deltalake's partition filters
    are: they are cast to the column's type when evaluated."""
    if not filters:
        raise ValueError("an empty filter list filters nothing; pass None instead")
    groups = [filters] if isinstance(filters[0], tuple) else filters
    ors = []
    for group in groups:
        ands = []
        for item in group:
            if not isinstance(item, tuple | list) or len(item) != 3:
                raise ValueError(f"a DNF filter term is (column, op, value), not {item!r}")
            name, op, value = item
            kind = _DNF_OPS.get(str(op).lower())
            if kind is None:
                raise ValueError(f"unknown filter operator {op!r} in {item!r}; known: {sorted(_DNF_OPS)}")
            col = Column(tuple(str(name).split(".")) if isinstance(name, str) else tuple(name))
            if kind in ("in", "not in"):
                term: Expr = Call("in", (col, *(literal(v) for v in value)))
                ands.append(Call("not", (term,)) if kind == "not in" else term)
            elif value is None:
                ands.append(Call("is_null" if kind == "=" else "is_not_null", (col,)))
            else:
                ands.append(Call(kind, (col, literal(value))))
        ors.append(conjunction(ands))
    result = ors[0]
    for other in ors[1:]:
        result = Call("or", (result, other))
    return result


def conjunction(terms: Sequence[Expr]) -> Expr:
    result = terms[0]
    for term in terms[1:]:
        result = Call("and", (result, term))
    return result


# -- pyarrow.compute.Expression ---------------------------------------------------------------------------
_ARROW_CALLS = {
    "equal": "=", "not_equal": "!=", "less": "<", "less_equal": "<=", "greater": ">", "greater_equal": ">=",
    "and_kleene": "and", "and": "and", "or_kleene": "or", "or": "or", "invert": "not", "is_null": "is_null",
    "is_valid": "is_not_null", "is_in": "in", "cast": "cast",
}  # fmt: skip


def from_arrow(expression: pc.Expression) -> Expr:
    """The tree of a ``pyarrow.compute.Expression``, read from the form pyarrow pickles it in (an IPC file
    whose schema metadata lists the nodes in prefix order, with literals and options as columns). What is
    not a comparison, a logical operator, a null test, ``is_in`` or a cast becomes :class:`Opaque`."""
    table = ipc.open_file(expression.__reduce__()[1][0]).read_all()
    nodes = _metadata_pairs(table.schema)
    node, _ = _read_node(nodes, 0, table)
    return node


def _read_node(nodes: list[tuple[str, str]], i: int, table: pa.Table) -> tuple[Expr, int]:
    kind, value = nodes[i]
    if kind == "literal":
        column = table.column(int(value))
        return Literal(column[0].as_py(), column.type), i + 1
    if kind == "field_ref":
        return Column((value,)), i + 1
    if kind == "nested_field_ref":
        n = int(value)
        return Column(tuple(v for _, v in nodes[i + 1 : i + 1 + n])), i + 1 + n
    if kind != "call":
        raise ValueError(f"unexpected node {kind!r} in a serialized expression")
    args: list[Expr] = []
    options = None
    i += 1
    while nodes[i][0] != "end":
        if nodes[i][0] == "options":
            options = table.column(int(nodes[i][1]))[0].as_py()
            i += 1
            continue
        arg, i = _read_node(nodes, i, table)
        args.append(arg)
    op = _ARROW_CALLS.get(value)
    if op == "in" and options is not None and options.get("null_matching_behavior", 0) in (0, 1):
        values = options.get("value_set") or []
        return Call("in", (args[0], *(literal(v) for v in values))), i + 1
    if op == "cast" and options is not None:
        return Call("cast", tuple(args), options.get("to_type")), i + 1
    if op is None or op in ("in", "cast"):
        return Opaque(f"arrow function {value}", tuple(args)), i + 1
    return Call(op, tuple(args)), i + 1


class _ArrowSchema(ctypes.Structure):
    """The Arrow C data interface's ``struct ArrowSchema`` (a stable ABI)."""


_ArrowSchema._fields_ = [
    ("format", ctypes.c_char_p), ("name", ctypes.c_char_p), ("metadata", ctypes.c_void_p),
    ("flags", ctypes.c_int64), ("n_children", ctypes.c_int64), ("children", ctypes.c_void_p),
    ("dictionary", ctypes.c_void_p), ("release", ctypes.CFUNCTYPE(None, ctypes.POINTER(_ArrowSchema))),
    ("private_data", ctypes.c_void_p),
]  # fmt: skip


def _metadata_pairs(schema: pa.Schema) -> list[tuple[str, str]]:
    """Schema metadata as ordered pairs, repeated keys kept (``Schema.metadata`` is a dict, which loses
    them): read through the C data interface, whose metadata encoding is part of its specification."""
    struct = _ArrowSchema()
    schema._export_to_c(ctypes.addressof(struct))
    try:
        raw = ctypes.string_at(struct.metadata, 4)
        count, pos, pairs = int.from_bytes(raw, "little", signed=True), 4, []
        for _ in range(count):
            parts = []
            for _ in range(2):
                size = int.from_bytes(ctypes.string_at(struct.metadata + pos, 4), "little", signed=True)
                parts.append(ctypes.string_at(struct.metadata + pos + 4, size).decode())
                pos += 4 + size
            pairs.append((parts[0], parts[1]))
        return pairs
    finally:
        struct.release(ctypes.byref(struct))


def as_expr(filter: Any) -> Expr | None:
    """A filter in any accepted form as a tree; ``None`` for no filter. SQL text needs ``sql_parser``,
    which the scan imports (this module stays below it)."""
    if filter is None or isinstance(filter, Expr):
        return filter
    if isinstance(filter, pc.Expression):
        try:
            return from_arrow(filter)
        except (ValueError, KeyError, IndexError, pa.ArrowException) as exc:
            return Opaque(f"arrow expression {filter} ({exc})")
    if isinstance(filter, list | tuple):
        return from_dnf(list(filter))
    raise TypeError(
        "filter must be a pyarrow.compute.Expression, DNF tuples such as [('day', '=', '2024-01-01')] or SQL "
        f"text, not {type(filter).__name__}"
    )
