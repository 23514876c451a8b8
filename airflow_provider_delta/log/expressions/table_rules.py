"""Row-level rules a writer must enforce before committing: one list, checked by both writers.

Spec: "Column Invariants" (``delta.invariants`` column metadata: abort if an invariant is false or null),
"Generated Columns" (``delta.generationExpression``: every written value must equal its expression,
``(col <=> expr) IS TRUE``), CHECK constraints (``delta.constraints.<name>`` table properties, false or
null is a violation, as Delta Spark enforces them) and non-nullable columns. Each rule is Spark SQL text:
the Spark writer counts violations with Spark SQL; the Arrow writer parses the same text (``sql_parser``)
and evaluates it with ``evaluate``. A rule outside what the parser supports is refused by name before any
file is written, never skipped.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from ..base.errors import ConstraintViolationError
from ..schema.schema import GENERATION, INVARIANTS
from .evaluate import predicate_mask
from .expressions import Expr
from .sql_parser import UnsupportedExpressionError, parse


@dataclass(frozen=True)
class Rule:
    """A named rule and the SQL condition that is true for rows that break it."""

    name: str
    description: str
    violated_when: str


def quote(name: str) -> str:
    """A column name as a Spark SQL identifier."""
    return "`" + name.replace("`", "``") + "`"


def _column_path(path: tuple[str, ...]) -> str:
    return ".".join(quote(p) for p in path)


def _fields(fields: list[dict], prefix: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], dict]]:
    """Every field with its path, descending into structs (not into arrays or maps)."""
    for f in fields:
        path = (*prefix, f["name"])
        yield path, f
        t = f["type"]
        if isinstance(t, dict) and t["type"] == "struct":
            yield from _fields(t["fields"], path)


def table_rules(schema: dict, constraints: Mapping[str, str]) -> list[Rule]:
    """The rules of a table: NOT NULL columns, invariants, generated columns, CHECK constraints (by name,
    as the table configuration reads them from ``delta.constraints.<name>``)."""
    rules = []
    for path, f in _fields(schema["fields"]):
        col = _column_path(path)
        md = f.get("metadata") or {}
        if not f.get("nullable", True):
            # A struct's NOT NULL field too, as Delta Spark checks it (``Invariants.getFromSchema``): the
            # field read through its parents, so a null parent breaks it as well (delta-io/delta#860).
            rules.append(Rule(f"NOT NULL {'.'.join(path)}", f"{col} IS NOT NULL", f"{col} IS NULL"))
        if INVARIANTS in md:
            raw = md[INVARIANTS]
            expr = (json.loads(raw) if isinstance(raw, str) else raw)["expression"]["expression"]
            rules.append(Rule(f"invariant on {'.'.join(path)}", expr, f"NOT coalesce(({expr}), false)"))
        if GENERATION in md:
            expr = md[GENERATION]
            rules.append(
                Rule(
                    f"generated column {'.'.join(path)}",
                    f"{col} <=> ({expr})",
                    f"NOT (({col} <=> ({expr})) IS TRUE)",
                )
            )
    for name, expr in sorted(constraints.items()):
        rules.append(Rule(f"CHECK constraint {name}", expr, f"NOT coalesce(({expr}), false)"))
    return rules


def generated_columns(schema: dict) -> dict[str, str]:
    """Top-level generated columns: name -> generation expression."""
    return {
        f["name"]: f["metadata"][GENERATION]
        for f in schema["fields"]
        if GENERATION in (f.get("metadata") or {})
    }


# -- evaluating them on Arrow rows -----------------------------------------------------------------------
def compile_rule(rule: Rule) -> Expr:
    """The rule's violation condition as a tree; :class:`UnsupportedExpressionError` names the rule and the
    construct when it cannot be evaluated without Spark."""
    try:
        return parse(rule.violated_when)
    except UnsupportedExpressionError as exc:
        raise UnsupportedExpressionError(
            f"{rule.name} ({rule.description}) cannot be checked without Spark: {exc}. Nothing was written; "
            "write with the Spark writer (airflow_provider_delta.spark.write)",
            features=exc.features,
        ) from None


def compile_expression(text: str, what: str) -> Expr:
    """A generation expression (or any SQL a rule computes) as a tree, refused by name when unsupported."""
    try:
        return parse(text)
    except UnsupportedExpressionError as exc:
        raise UnsupportedExpressionError(
            f"{what} ({text}) cannot be computed without Spark: {exc}", features=exc.features
        ) from None


def check_rows(table: pa.Table, rules: list[tuple[Rule, Expr]]) -> None:
    """Raise :class:`ConstraintViolationError` naming every rule some row of ``table`` breaks, how many
    rows break it, and the first such row."""
    broken: dict[str, int] = {}
    examples: dict[str, dict] = {}
    for rule, expr in rules:
        try:
            mask = predicate_mask(expr, table)
        except UnsupportedExpressionError as exc:
            raise UnsupportedExpressionError(
                f"{rule.name} ({rule.description}) cannot be checked without Spark: {exc}",
                features=exc.features,
            ) from None
        count = pc.sum(mask).as_py() or 0
        if count:
            broken[rule.name] = count
            first = pc.index(mask, True).as_py()
            examples[rule.name] = table.slice(first, 1).to_pylist()[0]
    if broken:
        details = "; ".join(
            f"{name} ({next(r.description for r, _ in rules if r.name == name)}) violated by {n} row(s), "
            f"e.g. {_row_text(examples[name])}"
            for name, n in broken.items()
        )
        raise ConstraintViolationError(f"nothing was written: {details}", broken, examples)


def _row_text(row: dict) -> str:
    text = json.dumps(row, default=str, ensure_ascii=False)
    return text if len(text) <= 300 else text[:297] + "..."
