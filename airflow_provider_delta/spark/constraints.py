"""Row-level rules a writer must enforce before committing, evaluated with Spark SQL on the DataFrame.

Spec: "Column Invariants" (``delta.invariants`` column metadata: abort if an invariant is false or null),
"Generated Columns" (``delta.generationExpression``: every written value must equal its expression,
``(col <=> expr) IS TRUE``), CHECK constraints (``delta.constraints.<name>`` table properties, false or
null is a violation, as Delta Spark enforces them) and non-nullable columns. All rules are counted in one
pass before any file is written; a violation aborts with the rule's name and how many rows broke it, so
nothing is written and nothing is committed.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from airflow_provider_delta.log.errors import ConstraintViolationError

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

CHECK_PREFIX = "delta.constraints."
INVARIANTS = "delta.invariants"
GENERATION = "delta.generationExpression"


__all__ = ["ConstraintViolationError", "Rule", "check", "generated_columns", "table_rules"]


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


def table_rules(schema: dict, configuration: dict[str, str]) -> list[Rule]:
    """The rules of a table: NOT NULL columns, invariants, generated columns, CHECK constraints."""
    rules = []
    for path, f in _fields(schema["fields"]):
        col = _column_path(path)
        md = f.get("metadata") or {}
        if len(path) == 1 and not f.get("nullable", True):
            rules.append(Rule(f"NOT NULL {path[0]}", f"{col} IS NOT NULL", f"{col} IS NULL"))
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
                )  # fmt: skip
            )
    for key, expr in sorted(configuration.items()):
        if key.startswith(CHECK_PREFIX):
            name = key[len(CHECK_PREFIX) :]
            rules.append(Rule(f"CHECK constraint {name}", expr, f"NOT coalesce(({expr}), false)"))
    return rules


def generated_columns(schema: dict) -> dict[str, str]:
    """Top-level generated columns: name -> generation expression."""
    return {
        f["name"]: f["metadata"][GENERATION]
        for f in schema["fields"]
        if GENERATION in (f.get("metadata") or {})
    }


def check(df: DataFrame, rules: list[Rule]) -> None:
    """Count every rule's violating rows in one Spark job; raise naming each broken rule and its count."""
    if not rules:
        return
    from pyspark.sql import functions as F

    counts = df.agg(
        *[F.count(F.when(F.expr(r.violated_when), 1)).alias(f"r{i}") for i, r in enumerate(rules)]
    ).first()
    broken = {r.name: int(counts[f"r{i}"]) for i, r in enumerate(rules) if counts[f"r{i}"]}
    if broken:
        details = "; ".join(
            f"{name} ({next(r.description for r in rules if r.name == name)}) violated by {n} row(s)"
            for name, n in broken.items()
        )
        raise ConstraintViolationError(f"nothing was written: {details}", broken)
