"""Identity columns ("Identity Columns"): values a writer generates, and the high-water mark it moves.

An identity column is a top-level ``long`` column whose metadata holds ``delta.identity.start`` and
``delta.identity.step`` (never 0), and, once values were generated, ``delta.identity.highWaterMark``: the
last value handed out in the step's direction. New values are ``start + k * step`` beyond the mark; the
commit that adds them moves the mark in the schema's column metadata (a ``metaData`` action) and says so
in ``commitInfo.tags`` (``delta.identity.schemaUpdate``), which tells a concurrent writer that the metadata
change is only that (Delta Spark's ``ConflictChecker`` lets such a change pass a transaction that changes
no metadata itself, and fails one that also moves a mark: their values would collide).

Values are given by the caller only where the column says ``delta.identity.allowExplicitInsert``; such
values do not move the mark, as in Delta Spark. Writers call :func:`columns_to_generate` with the columns
they were given, fill the others (:class:`IdentityValues` for Arrow data; the Spark writer computes them
in SQL), and commit the marks with ``Transaction.set_identity_high_water_marks``.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from ..actions.actions import AddFile, Metadata
from ..base.errors import IdentityColumnError, shown
from ..schema.schema import physical_name

START = "delta.identity.start"
STEP = "delta.identity.step"
HIGH_WATER_MARK = "delta.identity.highWaterMark"
ALLOW_EXPLICIT_INSERT = "delta.identity.allowExplicitInsert"
FEATURE = "identityColumns"
_LONG_MIN, _LONG_MAX = -(2**63), 2**63 - 1


@dataclass(frozen=True)
class IdentityColumn:
    """One identity column of a schema, as its metadata defines it."""

    name: str
    physical_name: str
    start: int
    step: int
    high_water_mark: int | None
    allow_explicit_insert: bool

    @property
    def next_value(self) -> int:
        """The first value a write may generate: the start, or one step beyond the mark."""
        value = self.start if self.high_water_mark is None else self.high_water_mark + self.step
        return _checked(value, self.name)

    def beyond(self, a: int, b: int) -> bool:
        """Whether ``a`` lies further than ``b`` in the step's direction."""
        return a > b if self.step > 0 else a < b

    def values(self, count: int, offset: int = 0) -> pa.Array:
        """``count`` values from the ``offset``-th value a write generates, as int64."""
        first = self.next_value + offset * self.step
        _checked(first + (count - 1) * self.step if count else first, self.name)
        return pa.array(first + self.step * np.arange(count, dtype=np.int64), pa.int64())


def identity_columns(schema: dict, mode: str = "none") -> list[IdentityColumn]:
    """The identity columns of a Delta schema (top level only: identity columns cannot be nested)."""
    out = []
    for field in schema["fields"]:
        md = field.get("metadata") or {}
        if START not in md and STEP not in md:
            continue
        name = field["name"]
        start, step = md.get(START), md.get(STEP)
        mark = md.get(HIGH_WATER_MARK)
        if not all(isinstance(v, int) and not isinstance(v, bool) for v in (start, step)) or step == 0 or (
            mark is not None and (not isinstance(mark, int) or isinstance(mark, bool))
        ):
            raise IdentityColumnError(
                f"identity column {name!r} has malformed metadata (start {shown(start)}, step {shown(step)},"
                f" highWaterMark {shown(mark)}): start and step must be integers, step not 0", column=name,
            )  # fmt: skip
        if field["type"] != "long":
            raise IdentityColumnError(f"identity column {name!r} has type {shown(field['type'])}, not long",
                                      column=name)  # fmt: skip
        allow = md.get(ALLOW_EXPLICIT_INSERT, False) is True
        out.append(IdentityColumn(name, physical_name(field, mode), start, step, mark, allow))
    return out


def columns_to_generate(schema: dict, given: Iterable[str], where: str) -> list[IdentityColumn]:
    """The identity columns a write must fill, given the columns its data holds (case-insensitive, as
    Spark resolves names). Values for a column without ``allowExplicitInsert`` are refused by name."""
    given_lower = {name.lower() for name in given}
    out = []
    for column in identity_columns(schema):
        if column.name.lower() not in given_lower:
            out.append(column)
        elif not column.allow_explicit_insert:
            raise IdentityColumnError(
                f"{where}: column {column.name!r} is GENERATED ALWAYS AS IDENTITY; its values are generated "
                f"by the table, so the data must not include it ({ALLOW_EXPLICIT_INSERT} is false)",
                column=column.name,
            )
    return out


class IdentityValues:
    """Fills identity columns of Arrow data written in one commit: contiguous values from each column's
    next value, ``high_water_marks`` the last ones handed out (what the commit must record)."""

    def __init__(self, columns: Sequence[IdentityColumn]) -> None:
        self.columns = list(columns)
        self.generated = 0

    def fill(self, table: pa.Table) -> pa.Table:
        """``table`` with each identity column (replaced or appended, in the table's order of names)."""
        n = table.num_rows
        for column in self.columns:
            values = column.values(n, self.generated)
            if column.name in table.column_names:
                table = table.set_column(table.column_names.index(column.name), column.name, values)
            else:
                table = table.append_column(pa.field(column.name, pa.int64(), False), values)
        self.generated += n
        return table

    @property
    def high_water_marks(self) -> dict[str, int]:
        if not self.generated:
            return {}
        return {c.name: c.next_value + (self.generated - 1) * c.step for c in self.columns}


def with_high_water_marks(metadata: Metadata, marks: Mapping[str, int]) -> Metadata:
    """``metadata`` with each column's mark moved to cover ``marks`` (the furthest value a write put in
    it), as Delta Spark moves it: rounded onto ``start + k * step``, never moved back, ignored when it
    lies before the start (a mark below the start would make the next value skip it)."""
    schema = metadata.schema
    by_name = {c.name: c for c in identity_columns(schema)}
    unknown = sorted(set(marks) - set(by_name))
    if unknown:
        raise IdentityColumnError(f"{unknown} are not identity columns of the table", column=unknown[0])
    changed = False
    for field in schema["fields"]:
        column = by_name.get(field["name"])
        if column is None or column.name not in marks:
            continue
        new = _valid_mark(column, int(marks[column.name]))
        if new is not None:
            field.setdefault("metadata", {})[HIGH_WATER_MARK] = new
            changed = True
    if not changed:
        return metadata
    return dataclasses.replace(metadata, schema_string=json.dumps(schema, separators=(",", ":")))


def _valid_mark(column: IdentityColumn, candidate: int) -> int | None:
    """The mark after a write reached ``candidate``; None when it stays (Delta Spark's
    ``updateToValidHighWaterMark`` without SYNC IDENTITY's lowering)."""
    before_start = column.beyond(column.start, candidate)
    rounded = _round_to_next(column.start, column.step, candidate)
    old = column.high_water_mark
    new = rounded if old is None or column.beyond(rounded, old) else old
    bad_old = old is not None and column.beyond(column.start, old)
    if bad_old or (not before_start and new != old):
        return _checked(new, column.name)
    return None


def _round_to_next(start: int, step: int, value: int) -> int:
    """The first ``start + k * step`` at or beyond ``value`` in the step's direction."""
    offset = value - start
    if offset % step == 0:
        return value
    quotient = abs(offset) // abs(step) * (1 if (offset >= 0) == (step > 0) else -1)  # truncated, as Java
    same_sign = (offset > 0) == (step > 0)
    return start + step * (quotient + 1 if same_sign else quotient)


def high_water_marks(
    columns: Sequence[IdentityColumn],
    adds: Sequence[AddFile],
    footer_of: Callable[[AddFile], pq.FileMetaData],
) -> dict[str, int]:
    """The furthest value each identity column holds in ``adds``: from their statistics, else (a column
    the table does not index) from the Parquet footer's row-group statistics."""
    out: dict[str, int] = {}
    for column in columns:
        key = "maxValues" if column.step > 0 else "minValues"
        best = None
        for add in adds:
            value = _stat(add, key, column.physical_name)
            if value is None:
                value = _footer_bound(footer_of(add), column, add.path)
            if value is not None and (best is None or column.beyond(value, best)):
                best = value
        if best is not None:
            out[column.name] = best
    return out


def _stat(add: AddFile, key: str, name: str) -> int | None:
    try:
        value = json.loads(add.stats or "{}").get(key, {}).get(name)
    except (ValueError, AttributeError):
        return None
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _footer_bound(footer: pq.FileMetaData, column: IdentityColumn, path: str) -> int | None:
    values = []
    for rg in range(footer.num_row_groups):
        group = footer.row_group(rg)
        for i in range(group.num_columns):
            chunk = group.column(i)
            if chunk.path_in_schema != column.physical_name:
                continue
            s = chunk.statistics
            if s is None or not s.has_min_max:
                if s is not None and s.has_null_count and s.null_count == chunk.num_values:
                    continue
                raise IdentityColumnError(
                    f"{path} has no statistics for identity column {column.name!r}: its high-water mark "
                    "cannot be moved past the values the file holds", column=column.name,
                )  # fmt: skip
            values.append(s.max if column.step > 0 else s.min)
    if not values:
        return None
    return max(values) if column.step > 0 else min(values)


def check_generated_values(adds: Sequence[AddFile], before: Metadata, after: Metadata, where: str) -> None:
    """For columns that do not take explicit values: every value the adds' statistics show lies beyond
    the mark the table had and within the mark this commit sets ("the new value should be higher than
    delta.identity.highWaterMark"). A file without statistics for the column is not checked."""
    old = {c.name: c for c in identity_columns(before.schema)}
    for column in identity_columns(after.schema):
        previous = old.get(column.name)
        if column.allow_explicit_insert or previous is None:
            continue
        floor, ceiling = previous.high_water_mark, column.high_water_mark
        for add in (a for a in adds if a.data_change):
            lo, hi = (_stat(add, key, column.physical_name) for key in ("minValues", "maxValues"))
            near, far = (lo, hi) if column.step > 0 else (hi, lo)
            below = near is not None and floor is not None and not column.beyond(near, floor)
            above = far is not None and (ceiling is None or column.beyond(far, ceiling))
            if below or above:
                raise IdentityColumnError(
                    f"{where}: {add.path} holds values of identity column {column.name!r} from {near} to "
                    f"{far}, outside what this commit generates (after the mark {floor}, up to the mark "
                    f"{ceiling} it sets): generate them with the table's identity rules",
                    column=column.name,
                )


def _checked(value: int, name: str) -> int:
    if not _LONG_MIN <= value <= _LONG_MAX:
        raise IdentityColumnError(f"identity column {name!r} would overflow a long ({value})", column=name)
    return value
