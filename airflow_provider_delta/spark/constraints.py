"""Row-level rules a writer must enforce before committing, evaluated with Spark SQL on the DataFrame.

The rules themselves are the core's (``log.table_rules``), which the Arrow writer evaluates too.

Spec: "Column Invariants" (``delta.invariants`` column metadata: abort if an invariant is false or null),
"Generated Columns" (``delta.generationExpression``: every written value must equal its expression,
``(col <=> expr) IS TRUE``), CHECK constraints (``delta.constraints.<name>`` table properties, false or
null is a violation, as Delta Spark enforces them) and non-nullable columns. All rules are counted in one
pass before any file is written; a violation aborts with the rule's name and how many rows broke it, so
nothing is written and nothing is committed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from airflow_provider_delta.log.base.errors import ConstraintViolationError
from airflow_provider_delta.log.expressions.table_rules import (
    GENERATION,
    INVARIANTS,
    Rule,
    generated_columns,
    quote,
    table_rules,
)

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

__all__ = [
    "GENERATION", "INVARIANTS", "ConstraintViolationError", "Rule", "check",
    "generated_columns", "quote", "table_rules",
]  # fmt: skip


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
