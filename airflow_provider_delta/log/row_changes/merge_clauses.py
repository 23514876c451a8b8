"""The clauses of a MERGE and what Delta Spark records of them, shared by both engines (the Arrow MERGE in
``merge`` and the Spark layer's): the kinds of WHEN clause, the order rule, the operation's parameters and
metrics in ``commitInfo``, and the ON condition's target-only terms, the read predicate the conflict checker
sees."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..expressions.expressions import Call, Column, Expr, as_expr, conjunction
from ..expressions.sql_parser import UnsupportedExpressionError, parse

MATCHED, NOT_MATCHED, NOT_MATCHED_BY_SOURCE = "matched", "notMatched", "notMatchedBySource"


@dataclass(frozen=True)
class Clause:
    """One WHEN clause: when it applies (``matched`` ...), what it does (``update``, ``delete``,
    ``insert``), its condition, and its assignments (``None``: every column from the source's same name)."""

    when: str
    action: str
    condition: Any = None
    assignments: Mapping[str, Any] | None = None


def check_clauses(clauses: Sequence[Clause]) -> None:
    """At least one clause, and a condition on every clause of a kind but the last (a clause without one
    takes every row, so the ones after it could never act), as Delta Spark requires."""
    if not clauses:
        raise ValueError("a MERGE needs at least one WHEN clause")
    for when in (MATCHED, NOT_MATCHED, NOT_MATCHED_BY_SOURCE):
        kind = [c for c in clauses if c.when == when]
        if any(c.condition is None for c in kind[:-1]):
            raise ValueError(f"every {when} clause but the last needs a condition (a clause without one "
                             "takes every row, so the clauses after it could never act)")  # fmt: skip


def merge_params(on_text: str, clauses: Sequence[Clause], text: Any) -> dict[str, Any]:
    """Delta Spark's MERGE parameters: the condition, and per kind of clause its actions and conditions
    (``text`` renders a condition as SQL)."""

    def described(when: str) -> list[dict[str, str]]:
        out = []
        for c in clauses:
            if c.when == when:
                item = {"actionType": c.action}
                if c.condition is not None:
                    item["predicate"] = text(c.condition) or ""
                out.append(item)
        return out

    return {"predicate": on_text, "matchedPredicates": described(MATCHED),
            "notMatchedPredicates": described(NOT_MATCHED),
            "notMatchedBySourcePredicates": described(NOT_MATCHED_BY_SOURCE)}  # fmt: skip


def merge_metrics(clauses: Sequence[Clause], per_clause: Sequence[int], source_rows: int) -> dict[str, int]:
    """Delta Spark's MERGE row counts from the rows each clause took (target rows once each; inserts by
    source row)."""

    def total(when: str, action: str) -> int:
        pairs = zip(clauses, per_clause, strict=True)
        return sum(n for c, n in pairs if c.when == when and c.action == action)

    m = {
        "numSourceRows": source_rows,
        "numTargetRowsInserted": total(NOT_MATCHED, "insert"),
        "numTargetRowsMatchedUpdated": total(MATCHED, "update"),
        "numTargetRowsMatchedDeleted": total(MATCHED, "delete"),
        "numTargetRowsNotMatchedBySourceUpdated": total(NOT_MATCHED_BY_SOURCE, "update"),
        "numTargetRowsNotMatchedBySourceDeleted": total(NOT_MATCHED_BY_SOURCE, "delete"),
        "numTargetDeletionVectorsAdded": 0, "numTargetDeletionVectorsRemoved": 0,
        "numTargetDeletionVectorsUpdated": 0,
    }  # fmt: skip
    m["numTargetRowsUpdated"] = m["numTargetRowsMatchedUpdated"] + m["numTargetRowsNotMatchedBySourceUpdated"]
    m["numTargetRowsDeleted"] = m["numTargetRowsMatchedDeleted"] + m["numTargetRowsNotMatchedBySourceDeleted"]
    return m


MERGE_DV_METRICS = {"numDeletedRows": None, "numRemovedFiles": "numTargetFilesRemoved",
                    "numDeletionVectorsAdded": "numTargetDeletionVectorsAdded",
                    "numDeletionVectorsRemoved": "numTargetDeletionVectorsRemoved",
                    "numDeletionVectorsUpdated": "numTargetDeletionVectorsUpdated"}  # fmt: skip


def condition_text(condition: Any) -> str | None:
    """A clause's condition as the SQL ``commitInfo`` records (an Arrow expression rendered)."""
    return condition if isinstance(condition, str) or condition is None else str(as_expr(condition))


def unqualified(expr: Expr, side: Any) -> Expr:
    """A target-only term with its columns as bare table names, for file skipping."""
    if isinstance(expr, Column):
        found = side(expr)
        return Column((found[1],)) if found else expr
    if isinstance(expr, Call):
        return dataclasses.replace(expr, args=tuple(unqualified(a, side) for a in expr.args))
    return expr


def target_only_condition(on: Any, target_alias: str) -> Expr | None:
    """The ON condition's conjuncts that read only ``target_alias``-qualified columns, unqualified: the
    rows of the target a MERGE reads whatever its source holds, which Delta Spark records as the MERGE's
    read predicate for the conflict checker (None: the whole table)."""
    if not isinstance(on, str):
        return None
    try:
        expr = parse(on)
    except UnsupportedExpressionError:
        return None
    terms: list[Expr] = []

    def collect(e: Expr) -> None:
        if isinstance(e, Call) and e.op == "and":
            for a in e.args:
                collect(a)
            return
        paths = list(e.columns())
        if paths and all(len(p) == 2 and p[0].lower() == target_alias.lower() for p in paths):
            terms.append(unqualified(e, lambda c: ("t", c.path[1]) if len(c.path) == 2 else None))

    collect(expr)
    return conjunction(terms) if terms else None
