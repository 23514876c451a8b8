"""A real local Spark for the Spark writer and reader tests: one ``local[2]`` session per test module.

Workers run this interpreter (``PYSPARK_PYTHON``), so they import the provider and pyarrow from the same
environment; the UI is off and shuffles are small so the suite stays quick on two cores.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from spark_helpers import GOLDEN

os.environ["PYSPARK_PYTHON"] = sys.executable
os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
# py4j logs at INFO when its connections are collected at exit, after pytest has closed the streams.
logging.getLogger("py4j").setLevel(logging.WARNING)


@pytest.fixture(scope="module")
def spark() -> Iterator:
    from airflow_provider_delta.spark import spark_session

    session = spark_session(
        "local[2]",
        {
            "spark.sql.shuffle.partitions": "2",
            "spark.default.parallelism": "2",
            "spark.driver.memory": "1g",
            "spark.sql.session.timeZone": "UTC",
        },
    )
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


@pytest.fixture
def golden_copy(tmp_path: Path):
    """Copy a golden table (``<source>/<name>``) to ``tmp_path`` so tests never modify shared data."""
    import shutil

    def copy(name: str) -> Path:
        src = GOLDEN / name / "delta"
        if not src.exists():
            pytest.skip(f"golden table {name} is not available")
        dst = tmp_path / name.replace("/", "__")
        shutil.copytree(src, dst)
        for path in dst.rglob("*"):
            path.chmod(0o755 if path.is_dir() else 0o644)
        return dst

    return copy
