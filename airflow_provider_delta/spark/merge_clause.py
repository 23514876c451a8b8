"""One WHEN clause of a MERGE, as the builder collects it: its own module so that the steps of a MERGE
(``merge_pruning``, ``merge_evolution``) can take clauses without importing the module that runs them."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import Column


@dataclass(frozen=True)
class Clause:
    """One WHEN clause: when it applies (``MATCHED`` ...), what it does (``update``, ``delete``,
    ``insert``), its condition, and its assignments (``None``: every column from the source's same name)."""

    when: str
    action: str
    condition: str | Column | None = None
    assignments: Mapping[str, str | Column] | None = None
