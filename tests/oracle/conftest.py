"""Fixtures of the oracle suite: Delta Spark (one session per test process, in its own process and venv) and
our own Spark (``spark`` from ``tests/conftest.py``: the product's pyspark, one session per module).

Every test here is marked ``oracle``. Without the oracle environment they fail naming what is missing;
``DELTA_ORACLE=off`` skips them, and only that does.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from oracle_client import Oracle, OracleError, OracleUnavailable, off


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.oracle)
            if off():
                item.add_marker(pytest.mark.skip(reason="DELTA_ORACLE=off: Delta Spark oracle turned off"))


# Delta Spark's LocalLogStore with a put-if-absent that holds across processes (see the Java source): every
# module gets it, as several race Delta Spark against our writer on one local table.
LOGSTORE = "io.github.airflowproviderdelta.oracle.LinkLocalLogStore"


class _Shared:
    """The one oracle of this test process: started for the first module that asks, reset between modules.

    A Delta Spark JVM costs about 9 s to start and warm up; one per module was about a tenth of the suite's
    CPU time. A module that leaves the session unusable (a call timed out, a job still running, the process
    ended) gets it closed, and the next module starts a fresh one.
    """

    def __init__(self, factory: pytest.TempPathFactory) -> None:
        self.factory = factory
        self.client: Oracle | None = None

    def get(self) -> Oracle:
        if self.client is not None and self.client.proc.poll() is not None:
            self.close()
        if self.client is None:
            try:
                self.client = Oracle(self.factory.mktemp("oracle"), "oracle", logstore=LOGSTORE)
            except OracleUnavailable as exc:
                pytest.fail(str(exc), pytrace=False)
        return self.client

    def hand_back(self) -> None:
        if self.client is None:
            return
        try:
            self.client.call("reset", timeout=60)
        except OracleError:
            self.close()

    def close(self) -> None:
        if self.client is not None:
            client, self.client = self.client, None
            client.close()


@pytest.fixture(scope="session")
def _shared_oracle(tmp_path_factory: pytest.TempPathFactory) -> Iterator[_Shared]:
    shared = _Shared(tmp_path_factory)
    yield shared
    shared.close()


@pytest.fixture(scope="module")
def oracle(_shared_oracle: _Shared) -> Iterator[Oracle]:
    """Delta Spark, live: a Delta-enabled local[2] session in a child process, shared by this process's
    modules in turn, with the session settings a module changed put back after it."""
    yield _shared_oracle.get()
    _shared_oracle.hand_back()
