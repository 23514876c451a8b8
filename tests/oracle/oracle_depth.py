"""How much of a cross product of oracle cases ``make test`` runs: every case, on one of our engines each.

Several oracle tests run each case on both of our writers (our Spark engine and the Arrow engine in the
task), each against the same Delta Spark run. ``make test`` (CI, which has 15 minutes on two cores) runs each
case on one engine, the engines taken in turn down the list, so that every case and every engine is still
held to Delta Spark in every run; ``make oracle-deep`` (``DELTA_ORACLE_DEPTH=full``) runs the whole product,
as ``make fuzz`` and ``make chaos`` run the bounded fuzz and chaos tests of ``make test`` longer.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import pytest

ENGINES = ("spark", "arrow")


def full() -> bool:
    """``DELTA_ORACLE_DEPTH=full``: the whole cross product (``make oracle-deep``)."""
    return os.environ.get("DELTA_ORACLE_DEPTH", "").strip().lower() == "full"


def on_engines(cases: Sequence[str], engines: Sequence[str] = ENGINES) -> list[Any]:
    """``(case, engine)`` params with ids ``<case>-<engine>``: every case on every engine at full depth,
    else case ``i`` on ``engines[i % len(engines)]``."""
    return [
        pytest.param(case, engine, id=f"{case}-{engine}")
        for i, case in enumerate(cases)
        for engine in (engines if full() else [engines[i % len(engines)]])
    ]
