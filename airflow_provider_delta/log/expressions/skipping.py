"""File skipping: which live files a predicate can possibly match, from partition values and statistics.

Spec: "Partition Value Serialization", "Per-file Statistics". Vectorised over the snapshot's file table
(one Arrow column per partition column and per statistic), never a Python loop per file. The answer is an
over-approximation: a file is dropped only when no row of it can satisfy the predicate, so reading the kept
files and filtering their rows gives exactly the matching rows.

- Parts of the predicate that read partition columns only are evaluated exactly on the typed partition
  values, with the same evaluator that filters rows: any expression it supports prunes.
- Comparisons of a data column with a literal use ``minValues``/``maxValues``/``nullCount``/``numRecords``:
  ``c = v`` needs ``min <= v <= max``, ``c < v`` needs ``min < v``, ``c IS NULL`` a positive null count,
  and a file whose values are all null matches no comparison.
- Bounds we cannot trust are not used: a string maximum of 32 or more characters may be a truncated
  prefix (Delta Spark cuts long strings, and a prefix is below the real maximum); timestamp bounds are
  stored to the millisecond, so a maximum stands for anything up to 999 microseconds above it; a float
  bound that is NaN says nothing. Negation is pushed down to the comparisons (NOT (c < v) is c >= v).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..actions.actions import Metadata
from ..base.arrow_utils import FALSE, TRUE, from_numpy, int64_scalar, scalar
from ..schema.partition_values import typed_partition_values
from ..schema.schema import physical_name
from .evaluate import cast, predicate_mask
from .expressions import COMPARISONS, NEGATED, Call, Column, Expr, Literal
from .sql_parser import UnsupportedExpressionError

_MAX_STRING_BOUND = 32  # Delta Spark's dataSkippingStringPrefixLength: longer maxima may be cut short
# Arrow scalars for compute functions (Python values would be converted through pandas)
_STRING_BOUND = int64_scalar(_MAX_STRING_BOUND)
_ZERO = int64_scalar(0)
_MILLISECOND_TAIL = from_numpy(np.array([999], dtype=np.int64)).view(pa.duration("us"))[0]


class FileStatistics:
    """What skipping reads about each file, row-aligned with the snapshot's ``files``.

    :param partition_values: typed partition values by logical name (``typed_partition_values``).
    :param stats: the typed stats struct (``typed_file_stats``), physical names under column mapping.
    :param physical: logical top-level column name (lower case) -> its name in the stats.
    """

    def __init__(self, num_files: int, partition_values: pa.Table, stats: pa.StructArray | None,
                 physical: dict[str, str], struct_stats: pa.StructArray | None = None) -> None:  # fmt: skip
        self.num_files = num_files
        self.partition_values = partition_values
        self.partitions = {name.lower(): name for name in partition_values.column_names}
        self.stats = stats
        self.struct_stats = struct_stats  # a checkpoint's stats_parsed, for files without JSON stats
        self.physical = physical

    def partition_only(self, expr: Expr) -> bool:
        """Whether ``expr`` reads partition columns only (partition values alone decide it)."""
        return _partition_only(expr, self)

    def stat(self, kind: str, path: tuple[str, ...]) -> pa.Array | None:
        """A statistic of every file: from the JSON stats, else from the checkpoint's struct stats."""
        json_value = self._stat(self.stats, kind, path)
        struct_value = self._stat(self.struct_stats, kind, path)
        if struct_value is None or json_value is None:
            return json_value if struct_value is None else struct_value
        try:
            return pc.coalesce(json_value, struct_value.cast(json_value.type))
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            return json_value

    def _stat(self, stats: pa.StructArray | None, kind: str, path: tuple[str, ...]) -> pa.Array | None:
        if stats is None or stats.type.get_field_index(kind) < 0:
            return None
        value = stats.field(kind)
        names = [self.physical.get(path[0].lower(), path[0]), *path[1:]] if path else []
        for name in names:
            if not pa.types.is_struct(value.type):
                return None
            fields = {f.name.lower(): i for i, f in enumerate(value.type)}
            if name.lower() not in fields:
                return None
            value = value.field(fields[name.lower()])
        return None if pa.types.is_struct(value.type) else value


def files_matching(expr: Expr, files: FileStatistics) -> pa.BooleanArray:
    """True for each file that may hold a row where ``expr`` is true."""
    return pc.fill_null(_may(expr, files, negated=False), TRUE)


def _everything(files: FileStatistics) -> pa.Array:
    return pa.repeat(TRUE, files.num_files)


def _partition_only(expr: Expr, files: FileStatistics) -> bool:
    paths = list(expr.columns())
    return bool(paths) and all(len(p) == 1 and p[0].lower() in files.partitions for p in paths)


def _may(expr: Expr, files: FileStatistics, *, negated: bool) -> pa.Array:
    if _partition_only(expr, files):
        try:
            target = Call("not", (expr,)) if negated else expr
            return predicate_mask(target, files.partition_values).combine_chunks()
        except UnsupportedExpressionError:
            return _everything(files)
    if not isinstance(expr, Call):
        return _everything(files)
    op = expr.op
    if op == "not":
        return _may(expr.args[0], files, negated=not negated)
    if op in ("and", "or"):
        left, right = (_may(a, files, negated=negated) for a in expr.args)
        both = (op == "and") != negated  # NOT (a AND b) is NOT a OR NOT b
        return pc.and_(left, right) if both else pc.or_(left, right)
    if op in ("is_null", "is_not_null") and isinstance(expr.args[0], Column):
        wants_null = (op == "is_null") != negated
        return _null_test(expr.args[0].path, files, wants_null)
    if op == "in" and not negated and isinstance(expr.args[0], Column):
        result = None
        for item in expr.args[1:]:
            one = _may(Call("=", (expr.args[0], item)), files, negated=False)
            result = one if result is None else pc.or_(result, one)
        return result
    if op in NEGATED or (op == "<=>" and not negated):
        left, right = expr.args
        if isinstance(left, Literal) and isinstance(right, Column):
            left, right, op = right, left, COMPARISONS[op]
        if isinstance(left, Column) and isinstance(right, Literal):
            if op == "<=>":
                if right.value is None:
                    return _null_test(left.path, files, True)
                op = "="
            return _compare(NEGATED[op] if negated else op, left.path, right, files)
    return _everything(files)


def _null_test(path: tuple[str, ...], files: FileStatistics, wants_null: bool) -> pa.Array:
    nulls = files.stat("nullCount", path)
    if nulls is None:
        return _everything(files)
    if wants_null:
        return pc.fill_null(pc.greater(nulls, _ZERO), TRUE)
    return pc.fill_null(pc.less(nulls, _num_records(files)), TRUE)


def _num_records(files: FileStatistics) -> pa.Array:
    return (
        files.stats.field("numRecords") if files.stats is not None else pa.nulls(files.num_files, pa.int64())
    )


def _compare(op: str, path: tuple[str, ...], value: Literal, files: FileStatistics) -> pa.Array:
    if value.value is None:
        return pa.repeat(FALSE, files.num_files)  # c op NULL is never true
    low, high = files.stat("minValues", path), files.stat("maxValues", path)
    if low is None and high is None:
        return _everything(files)
    kind = (low if low is not None else high).type
    try:
        v = cast(scalar(value.value, value.type), None, target=kind)
    except (UnsupportedExpressionError, pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return _everything(files)
    if not v.is_valid:
        return _everything(files)
    low, high = _trusted(low, high, kind)
    checks = {
        "=": [(low, pc.less_equal), (high, pc.greater_equal)],
        "<": [(low, pc.less)], "<=": [(low, pc.less_equal)],
        ">": [(high, pc.greater)], ">=": [(high, pc.greater_equal)],
    }  # fmt: skip
    if op == "!=":  # false only where every value is v: min = max = v
        same = pc.and_(pc.equal(low, v), pc.equal(high, v)) if low is not None and high is not None else None
        result = pc.invert(pc.fill_null(same, FALSE)) if same is not None else _everything(files)
    else:
        result = _everything(files)
        for bound, test in checks[op]:
            if bound is not None:
                result = pc.and_(result, pc.fill_null(test(bound, v), TRUE))
    all_null = _all_null(path, files)
    return pc.and_(result, pc.invert(all_null)) if all_null is not None else result


def _trusted(low: pa.Array | None, high: pa.Array | None, kind: pa.DataType) -> tuple:
    """Bounds as they may be used: maxima that may be cut short dropped, millisecond maxima widened."""
    if high is not None and (pa.types.is_string(kind) or pa.types.is_large_string(kind)):
        high = pc.if_else(pc.less(pc.utf8_length(high), _STRING_BOUND), high, scalar(None, kind))
    if high is not None and pa.types.is_timestamp(kind):
        high = pc.add(high, _MILLISECOND_TAIL)
    if pa.types.is_floating(kind):
        low = None if low is None else pc.if_else(pc.is_nan(low), scalar(None, kind), low)
        high = None if high is None else pc.if_else(pc.is_nan(high), scalar(None, kind), high)
    return low, high


def _all_null(path: tuple[str, ...], files: FileStatistics) -> pa.Array | None:
    nulls = files.stat("nullCount", path)
    if nulls is None:
        return None
    return pc.fill_null(pc.equal(nulls, _num_records(files)), FALSE)


def partition_matcher(
    metadata: Metadata, expr: Expr, mode: str
) -> Callable[[Mapping[str, str | None]], bool]:
    """Whether a file with these serialised partition values (keyed by physical name, as in an ``add``) may
    hold rows where ``expr`` is true: the partition part decides, data columns are unknown (so may match).
    What a conflict check asks of a concurrent append against a transaction's read predicate; ``mode`` is
    the table's column mapping mode."""
    physical = {f["name"].lower(): physical_name(f, mode) for f in metadata.schema["fields"]}
    kind = pa.map_(pa.string(), pa.string())

    def matches(values: Mapping[str, str | None]) -> bool:
        files = pa.table({"partitionValues": pa.array([list(values.items())], kind)})
        facts = FileStatistics(1, typed_partition_values(metadata, files, mode), None, physical)
        return bool(files_matching(expr, facts)[0].as_py())

    return matches
