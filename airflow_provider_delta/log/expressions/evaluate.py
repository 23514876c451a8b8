"""Evaluate an expression tree over Arrow rows with Spark SQL's semantics, using pyarrow compute.

What Delta Spark evaluates (CHECK constraints, invariants, generation expressions, ``replaceWhere``) must
give the same answer here, so the semantics are Spark's, not Arrow's, where they differ: three-valued logic,
``x IN (...)`` is null when ``x`` is null or the list holds a null and nothing matches, ``<=>`` is
null-safe, integer ``/`` divides as doubles, arithmetic overflow and division by zero are errors (Spark 4's
ANSI mode, the default of the Spark Delta Spark 4.4 runs on), ``IF`` and ``CASE`` take a null condition as
false, string literals compared with a typed column are cast to its type. The session time zone is taken to
be UTC (timestamp to date casts, ``hour()``). Constructs whose Arrow result would differ from Spark's (a
timestamp or a double cast to string, date arithmetic) raise :class:`UnsupportedExpressionError`.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from ..base.arrow_utils import EMPTY_STRING, FALSE, TRUE, scalar
from ..base.errors import DeltaError
from ..schema.partition_values import parse_timestamp
from ..schema.schema import delta_type_to_arrow
from .expressions import COMPARISONS, Call, Column, ColumnNotFoundError, Expr, Literal, Opaque
from .sql_parser import UnsupportedExpressionError

Value = pa.ChunkedArray | pa.Array | pa.Scalar
_ARROW_COMPARE = {"=": pc.equal, "!=": pc.not_equal, "<": pc.less, "<=": pc.less_equal, ">": pc.greater,
                  ">=": pc.greater_equal}  # fmt: skip
_ARITHMETIC = {"+": pc.add_checked, "-": pc.subtract_checked, "*": pc.multiply_checked}
_PARTS = {"year": pc.year, "month": pc.month, "day": pc.day, "hour": pc.hour, "minute": pc.minute,
          "second": pc.second}  # fmt: skip
_STRING_FUNCS = {"lower": pc.utf8_lower, "upper": pc.utf8_upper}
NULL_BOOL = pa.nulls(1, pa.bool_())[0]


class ExpressionEvaluationError(DeltaError):
    """Evaluating an expression failed as Spark's would (overflow, division by zero, a bad cast)."""


def evaluate(expr: Expr, table: pa.Table) -> pa.ChunkedArray:
    """``expr`` over every row of ``table`` (columns by logical name, resolved case-insensitively)."""
    try:
        value = _eval(expr, table)
    except (pa.ArrowInvalid, ArithmeticError, OverflowError) as exc:
        raise ExpressionEvaluationError(f"evaluating {expr} failed: {exc}") from exc
    if isinstance(value, pa.Scalar):
        return pa.chunked_array([pa.repeat(value, table.num_rows)], value.type)
    return value if isinstance(value, pa.ChunkedArray) else pa.chunked_array([value])


def predicate_mask(expr: Expr, table: pa.Table) -> pa.ChunkedArray:
    """Where a predicate holds: true, never null (a null predicate does not hold, as in WHERE)."""
    result = evaluate(expr, table)
    if not pa.types.is_boolean(result.type) and not pa.types.is_null(result.type):
        raise UnsupportedExpressionError(f"{expr} is not a predicate: it gives {result.type} values")
    return pc.fill_null(result.cast(pa.bool_()), FALSE)


def resolve_column(table: pa.Table, path: tuple[str, ...]) -> Value:
    """A column by its path; names match case-insensitively, as Spark resolves them."""
    names = {name.lower(): name for name in table.column_names}
    top = names.get(path[0].lower())
    if top is None:
        raise ColumnNotFoundError(
            f"column {'.'.join(path)!r} is not in the table (columns: {', '.join(table.column_names)})"
        )
    value: Any = table.column(top)
    for i, part in enumerate(path[1:], 1):
        fields = {f.name.lower(): f.name for f in value.type} if pa.types.is_struct(value.type) else {}
        if part.lower() not in fields:
            raise ColumnNotFoundError(
                f"column {'.'.join(path)!r}: {'.'.join(path[:i])} has no field {part!r}"
            )
        value = pc.struct_field(value, fields[part.lower()])
    return value


def _eval(expr: Expr, table: pa.Table) -> Value:
    if isinstance(expr, Column):
        return resolve_column(table, expr.path)
    if isinstance(expr, Literal):
        return scalar(expr.value, expr.type)
    if isinstance(expr, Opaque):
        raise UnsupportedExpressionError(f"{expr.what} cannot be evaluated here")
    assert isinstance(expr, Call)
    op = expr.op
    if op in ("and", "or"):
        left, right = (_boolean(_eval(a, table), a) for a in expr.args)
        return (pc.and_kleene if op == "and" else pc.or_kleene)(left, right)
    if op == "not":
        return pc.invert(_boolean(_eval(expr.args[0], table), expr.args[0]))
    if op in ("is_null", "is_not_null"):
        value = _eval(expr.args[0], table)
        valid = isinstance(value, pa.Scalar) and value.is_valid
        result = pc.is_null(value) if not isinstance(value, pa.Scalar) else scalar(not valid, pa.bool_())
        return pc.invert(result) if op == "is_not_null" else result
    if op == "like":
        return _like(expr, table)
    if op == "in":
        return _in(expr, table)
    if op == "case":
        return _case(expr, table)
    if op == "if":
        cond, then, otherwise = (_eval(a, table) for a in expr.args)
        then, otherwise = _common(then, otherwise)
        return pc.if_else(pc.fill_null(_boolean(cond, expr.args[0]), FALSE), then, otherwise)
    args = [_eval(a, table) for a in expr.args]
    if op in COMPARISONS:
        return _compare(op, *args)
    if op in _ARITHMETIC or op in ("/", "%"):
        return _arithmetic(op, *args)
    if op == "negate":
        return pc.negate_checked(args[0])
    if op == "cast":
        return cast(args[0], expr.option)
    return _function(op, args, expr)


def _boolean(value: Value, expr: Expr) -> Value:
    if pa.types.is_null(value.type):
        return value.cast(pa.bool_())
    if not pa.types.is_boolean(value.type):
        raise UnsupportedExpressionError(f"{expr} is not a boolean expression (it is {value.type})")
    return value


def _common(a: Value, b: Value) -> tuple[Value, Value]:
    """Bring two operands to one type as Spark's implicit casts would for the cases we support."""
    ta, tb = a.type, b.type
    if ta == tb:
        return a, b
    if pa.types.is_null(ta):
        return a.cast(tb), b
    if pa.types.is_null(tb):
        return a, b.cast(ta)
    # A string literal against a typed value is read as that type (DATE'..' style comparisons).
    if pa.types.is_string(tb) and isinstance(b, pa.Scalar) and not pa.types.is_string(ta):
        return a, cast(b, None, target=ta)
    if pa.types.is_string(ta) and isinstance(a, pa.Scalar) and not pa.types.is_string(tb):
        return cast(a, None, target=tb), b
    if pa.types.is_date(ta) and pa.types.is_timestamp(tb):
        return a.cast(tb), b
    if pa.types.is_timestamp(ta) and pa.types.is_date(tb):
        return a, b.cast(ta)
    if pa.types.is_timestamp(ta) and pa.types.is_timestamp(tb):
        return a, b.cast(ta)
    if _numeric(ta) and _numeric(tb):
        return a, b  # Arrow's implicit numeric casts match Spark's widening
    if pa.types.is_string(ta) and pa.types.is_large_string(tb) or pa.types.is_large_string(ta):
        return a.cast(pa.large_string()), b.cast(pa.large_string())
    raise UnsupportedExpressionError(f"comparing or combining {ta} with {tb}")


def _numeric(t: pa.DataType) -> bool:
    return pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_decimal(t)


def _compare(op: str, a: Value, b: Value) -> Value:
    a, b = _common(a, b)
    if op == "<=>":
        both_null = pc.and_(pc.is_null(a), pc.is_null(b)) if not isinstance(a, pa.Scalar) or not \
            isinstance(b, pa.Scalar) else scalar(not a.is_valid and not b.is_valid, pa.bool_())  # fmt: skip
        return pc.or_(pc.fill_null(pc.equal(a, b), FALSE), both_null)
    return _ARROW_COMPARE[op](a, b)


def _arithmetic(op: str, a: Value, b: Value) -> Value:
    a, b = _common(a, b)
    for v in (a, b):
        if not _numeric(v.type) and not pa.types.is_null(v.type):
            raise UnsupportedExpressionError(f"arithmetic ({op}) on {v.type} values")
    if op == "/":
        if pa.types.is_integer(a.type) and pa.types.is_integer(b.type) or pa.types.is_floating(a.type) or \
                pa.types.is_floating(b.type):  # fmt: skip
            a, b = a.cast(pa.float64()), b.cast(pa.float64())
            _no_zero(b)
            return pc.divide(a, b)
        return pc.divide_checked(a, b)
    if op == "%":
        if not (pa.types.is_integer(a.type) and pa.types.is_integer(b.type)):
            raise UnsupportedExpressionError("% on non-integer values")
        _no_zero(b)
        quotient = pc.divide_checked(a, pc.if_else(pc.equal(b, 0), 1, b) if not isinstance(b, pa.Scalar)
                                     else b)  # fmt: skip
        return pc.subtract_checked(a, pc.multiply_checked(quotient, b))
    return _ARITHMETIC[op](a, b)


def _no_zero(divisor: Value) -> None:
    if pc.any(pc.equal(divisor, 0)).as_py() if not isinstance(divisor, pa.Scalar) else \
            divisor.is_valid and divisor.as_py() == 0:  # fmt: skip
        raise ExpressionEvaluationError("division by zero (Spark's DIVIDE_BY_ZERO)")


def cast(value: Value, delta_type: str | None, *, target: pa.DataType | None = None) -> Value:
    """CAST as Spark does it for the supported types (fractions truncated towards zero)."""
    target = target if target is not None else delta_type_to_arrow(delta_type)
    source = value.type
    if source == target:
        return value
    if pa.types.is_string(target) and (pa.types.is_timestamp(source) or pa.types.is_floating(source)):
        raise UnsupportedExpressionError(f"CAST of {source} to string (Spark's text differs from Arrow's)")
    if pa.types.is_date(target) and pa.types.is_timestamp(source):
        return pc.cast(value, pa.timestamp("us")).cast(pa.date32()) if source.tz else value.cast(pa.date32())
    if pa.types.is_integer(target) and (pa.types.is_floating(source) or pa.types.is_decimal(source)):
        return pc.cast(
            pc.trunc(value) if pa.types.is_floating(source) else value,
            pc.CastOptions(target, allow_decimal_truncate=True, allow_float_truncate=True),
        )
    if pa.types.is_string(source) and (pa.types.is_integer(target) or pa.types.is_floating(target) or
                                       pa.types.is_decimal(target)):  # fmt: skip
        value = pc.utf8_trim_whitespace(value)
    if pa.types.is_string(source) and pa.types.is_timestamp(target):
        # Text without an offset is wall-clock time in the session time zone, taken to be UTC.
        if isinstance(value, pa.Scalar):
            text = value.as_py()
            return scalar(None if text is None else parse_timestamp(text, ntz=target.tz is None), target)
        return pc.cast(pc.cast(value, pa.timestamp("us")), target)
    try:
        return pc.cast(value, target)
    except pa.ArrowNotImplementedError as exc:
        raise UnsupportedExpressionError(f"CAST of {source} to {target}") from exc


def _like(expr: Call, table: pa.Table) -> Value:
    value, pattern = (_eval(a, table) for a in expr.args)
    if not isinstance(pattern, pa.Scalar) or expr.option != "\\":
        raise UnsupportedExpressionError("LIKE with a pattern that is not a literal or another ESCAPE")
    if not pattern.is_valid:
        return (
            pa.nulls(len(value), pa.bool_())
            if not isinstance(value, pa.Scalar)
            else NULL_BOOL
        )
    return pc.match_like(value, pattern.as_py())


def _in(expr: Call, table: pa.Table) -> Value:
    subject = _eval(expr.args[0], table)
    items = [_eval(a, table) for a in expr.args[1:]]
    if not all(isinstance(i, pa.Scalar) for i in items):
        result: Value = _compare("=", subject, items[0])
        for item in items[1:]:
            result = pc.or_kleene(result, _compare("=", subject, item))
        return result
    values = [cast(i, None, target=subject.type) if i.type != subject.type else i for i in items]
    present = [v for v in values if v.is_valid]
    found = pc.is_in(subject, value_set=_array_of(present, subject.type))
    found = pc.if_else(pc.is_null(subject), NULL_BOOL, found)
    if len(present) < len(values):  # x IN (.., NULL) is null unless x matches
        found = pc.if_else(found, TRUE, NULL_BOOL)
    return found


def _array_of(values: list[pa.Scalar], kind: pa.DataType) -> pa.Array:
    """Scalars as one array (``pa.array`` of Python values would load pandas)."""
    if not values:
        return pa.nulls(0, kind)
    return pa.concat_arrays([pa.repeat(v if v.type == kind else v.cast(kind), 1) for v in values])


def _case(expr: Call, table: pa.Table) -> Value:
    args = [_eval(a, table) for a in expr.args]
    conds, values, otherwise = args[:-1:2], args[1:-1:2], args[-1]
    common = next((v.type for v in [*values, otherwise] if not pa.types.is_null(v.type)), pa.null())
    values = [v.cast(common) for v in values]
    otherwise = otherwise.cast(common)
    result = otherwise
    for cond, value, source in zip(
        reversed(conds), reversed(values), reversed(expr.args[:-1:2]), strict=True
    ):
        result = pc.if_else(pc.fill_null(_boolean(cond, source), FALSE), value, result)
    return result


def _function(op: str, args: list[Value], expr: Call) -> Value:
    if op in _STRING_FUNCS:
        return _STRING_FUNCS[op](args[0])
    if op == "length":
        kind = args[0].type
        return (pc.binary_length if pa.types.is_binary(kind) else pc.utf8_length)(args[0]).cast(pa.int32())
    if op == "abs":
        return pc.abs_checked(args[0])
    if op in _PARTS:
        return _PARTS[op](args[0]).cast(pa.int32())
    if op == "to_date":
        return cast(args[0], "date")
    if op == "coalesce":
        common = next((a.type for a in args if not pa.types.is_null(a.type)), pa.null())
        return pc.coalesce(*[a if a.type == common else cast(a, None, target=common) for a in args])
    if op == "concat":
        strings = [a if pa.types.is_string(a.type) else cast(a, "string") for a in args]
        return pc.binary_join_element_wise(*strings, EMPTY_STRING)
    if op in ("trim", "ltrim", "rtrim"):
        return {"trim": pc.utf8_trim, "ltrim": pc.utf8_ltrim, "rtrim": pc.utf8_rtrim}[op](args[0], " ")
    if op == "substring":
        return _substring(args, expr)
    if op in ("greatest", "least"):
        common = [args[0], *(_common(args[0], a)[1] for a in args[1:])]
        return (pc.max_element_wise if op == "greatest" else pc.min_element_wise)(*common, skip_nulls=True)
    if op in ("startswith", "endswith", "contains"):
        if not isinstance(args[1], pa.Scalar):
            raise UnsupportedExpressionError(f"{op}() with a pattern that is not a literal")
        fn = {"startswith": pc.starts_with, "endswith": pc.ends_with, "contains": pc.match_substring}[op]
        return fn(args[0], args[1].as_py())
    raise UnsupportedExpressionError(f"the function {op}()")


def _substring(args: list[Value], expr: Call) -> Value:
    """Spark's 1-based ``substring(s, pos[, len])``; position 0 is 1, negative counts from the end."""
    if not all(isinstance(a, pa.Scalar) for a in args[1:]):
        raise UnsupportedExpressionError("substring() with a position or length that is not a literal")
    pos = args[1].as_py()
    length = args[2].as_py() if len(args) > 2 else None
    if length is not None and length < 0:
        length = 0
    start = pos - 1 if pos > 0 else pos
    if pos < 0 and length is not None and start + length >= 0:
        return pc.utf8_slice_codeunits(args[0], start)
    stop = None if length is None else start + length
    return pc.utf8_slice_codeunits(args[0], start, stop)
