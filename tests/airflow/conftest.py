"""Real Airflow for the provider tests: a private AIRFLOW_HOME, a migrated SQLite DB, dag.test().

The root conftest points AIRFLOW_HOME and the dags folder at a temporary directory before anything imports
Airflow. ``airflow db migrate`` runs once per session, as a user would run it. ``dag.test()`` loads DAGs
from the dags folder, so tests write their DAG files there (``dag_file``) and import them from it.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest


@pytest.fixture(scope="session")
def airflow_db() -> Path:
    """Migrate the metadata DB of the session's AIRFLOW_HOME (SQLite) and return the home."""
    home = Path(os.environ["AIRFLOW_HOME"])
    airflow = Path(sys.executable).with_name("airflow")
    subprocess.run([str(airflow), "db", "migrate"], check=True, env=os.environ.copy(), capture_output=True)
    # Kept as migrated, before any test writes to the DB: a test that needs a metadata DB of its own copies
    # it (``fresh_airflow_db``) instead of migrating again (about 15 s of CPU each).
    shutil.copyfile(home / "airflow.db", home / "migrated.db")
    return home


@pytest.fixture
def fresh_airflow_db(airflow_db: Path, tmp_path: Path) -> str:
    """The SQLAlchemy URL of a metadata DB of this test's own, as ``airflow db migrate`` left it."""
    db = tmp_path / "airflow.db"
    shutil.copyfile(airflow_db / "migrated.db", db)
    return f"sqlite:///{db}"


@pytest.fixture
def dags_folder(airflow_db: Path) -> Path:
    return Path(os.environ["AIRFLOW__CORE__DAGS_FOLDER"])


@pytest.fixture
def dag_file(dags_folder: Path) -> Callable[[str, str], ModuleType]:
    """Write ``source`` as ``<name>.py`` into the dags folder and import it (dag.test() needs it there)."""
    written: list[Path] = []

    def write(name: str, source: str) -> ModuleType:
        path = dags_folder / f"{name}.py"
        path.write_text(textwrap.dedent(source))
        written.append(path)
        spec = importlib.util.spec_from_file_location(f"test_dag_{name}", path)
        assert spec and spec.loader
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module

    yield write
    for path in written:
        path.unlink(missing_ok=True)
