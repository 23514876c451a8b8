"""Fixtures of the oracle suite: Delta Spark (one session per test module, in its own process and venv) and
our own Spark (``spark`` from ``tests/conftest.py``: the product's pyspark, one session per module).

Every test here is marked ``oracle``. Without the oracle environment they fail naming what is missing;
``DELTA_ORACLE=off`` skips them, and only that does.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from oracle_client import Oracle, OracleUnavailable, off


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.oracle)
            if off():
                item.add_marker(pytest.mark.skip(reason="DELTA_ORACLE=off: Delta Spark oracle turned off"))


@pytest.fixture(scope="module")
def oracle(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Oracle]:
    """Delta Spark, live: a Delta-enabled local[2] session in a child process for this module."""
    name = request.module.__name__.rsplit(".", 1)[-1]
    workdir = tmp_path_factory.mktemp(f"oracle-{name}")
    try:
        client = Oracle(workdir, name, logstore=getattr(request.module, "ORACLE_LOGSTORE", None))
    except OracleUnavailable as exc:
        pytest.fail(str(exc), pytrace=False)
    yield client
    client.close()
