"""Installs as a user would: the built wheel in a fresh venv, first with no extras, then with ``[spark]``.

Without extras, the example DAGs that need no Spark (ingest, downstream with its deferred sensor,
maintenance, the asset watcher) run with ``dag.test()`` against a private AIRFLOW_HOME, and a child
interpreter shows that ``pyspark`` was never imported (nor installed), that the Spark layer and an ``s3://``
table raise errors naming the extra to install. Then ``[spark]`` is added and the Spark example DAG runs.

One venv per test session; packages come from uv's cache (versions pinned to uv.lock, so the cache is hit).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SLIM_DAGS = ["delta_ingest.py", "delta_downstream.py", "delta_maintenance.py", "delta_asset_watch.py"]
NO_SPARK_MODULES = [
    "airflow_provider_delta.hooks.delta",
    "airflow_provider_delta.operators.commit",
    "airflow_provider_delta.operators.create",
    "airflow_provider_delta.operators.maintenance",
    "airflow_provider_delta.operators.spark",
    "airflow_provider_delta.sensors.delta",
    "airflow_provider_delta.triggers.delta",
    "airflow_provider_delta.ui.plugin",
    "airflow_provider_delta.get_provider_info",
]


def _uv() -> list[str]:
    found = shutil.which("uv") or shutil.which("uv", path=os.path.expanduser("~/.local/bin"))
    if found:
        return [found]
    return [sys.executable, "-m", "uv"]


def _run(command: list[str], **kwargs) -> subprocess.CompletedProcess:
    done = subprocess.run(command, capture_output=True, text=True, timeout=900, **kwargs)
    what = " ".join(map(str, command))
    assert done.returncode == 0, f"{what} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done


@pytest.fixture(scope="session")
def slim_venv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, Path, Path]]:
    """(venv python, wheel, constraints) with the wheel installed without extras."""
    work = tmp_path_factory.mktemp("install")
    env = {**os.environ, "UV_PYTHON_DOWNLOADS": "never"}
    _run([*_uv(), "build", "--wheel", "--out-dir", str(work / "dist"), str(ROOT)], env=env, cwd=ROOT)
    (wheel,) = (work / "dist").glob("airflow_provider_delta-*.whl")
    constraints = work / "constraints.txt"
    exported = _run([*_uv(), "export", "--frozen", "--no-hashes", "--all-extras", "--no-emit-project"],
                    env=env, cwd=ROOT)  # fmt: skip
    constraints.write_text(exported.stdout)
    venv = work / "venv"
    _run([*_uv(), "venv", "-q", "--python", sys.executable, str(venv)], env=env)
    python = venv / "bin" / "python"
    install = [*_uv(), "pip", "install", "-q", "--python", str(python), "-c", str(constraints)]
    _run([*install, str(wheel)], env=env)
    yield python, wheel, constraints


def _child_env(home: Path, dags: Path, tables: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "PYSPARK", "DELTA_EXAMPLE"))}
    env.update(
        AIRFLOW_HOME=str(home),
        AIRFLOW__CORE__DAGS_FOLDER=str(dags),
        AIRFLOW__CORE__LOAD_EXAMPLES="False",
        AIRFLOW__CORE__UNIT_TEST_MODE="False",
        DELTA_EXAMPLE_ROOT=str(tables),
    )
    return env


RUN_SLIM = textwrap.dedent(
    """
    import datetime as dt, importlib, importlib.util, json, sys
    days = [dt.datetime(2024, 1, 1, tzinfo=dt.UTC)]

    def load(name):
        spec = importlib.util.spec_from_file_location(name, f"{sys.argv[1]}/{name}.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module

    states = {}
    for name in ("delta_ingest", "delta_downstream", "delta_maintenance", "delta_asset_watch"):
        dag = load(name).dag
        for day in days:
            states[f"{name} {day.date()}"] = dag.test(logical_date=day).state
    for module in json.loads(sys.argv[2]):
        importlib.import_module(module)
    errors = {}
    try:
        import airflow_provider_delta.spark  # noqa: F401
    except ImportError as exc:
        errors["spark"] = str(exc)
    from airflow_provider_delta.hooks.delta import DeltaHook
    try:
        DeltaHook(None).get_table("s3://bucket/table")
    except ImportError as exc:
        errors["s3"] = str(exc)
    installed = {m: importlib.util.find_spec(m) is not None for m in ("pyspark", "s3fs", "gcsfs", "adlfs")}
    print("RESULT " + json.dumps({"states": states, "pyspark_imported": "pyspark" in sys.modules,
                                  "installed": installed, "errors": errors}))
    """
)

RUN_SPARK = textwrap.dedent(
    """
    import datetime as dt, importlib.util, json, sys
    path = f"{sys.argv[1]}/delta_spark_pipeline.py"
    spec = importlib.util.spec_from_file_location("delta_spark_pipeline", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    run = module.dag.test(logical_date=dt.datetime(2024, 1, 1, tzinfo=dt.UTC))
    print("RESULT " + json.dumps({"state": run.state, "pyspark_imported": "pyspark" in sys.modules}))
    """
)


def _result(done: subprocess.CompletedProcess) -> dict:
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    assert lines, f"no result:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return json.loads(lines[-1][len("RESULT ") :])


def _home(tmp_path: Path, python: Path, dag_files: list[str]) -> tuple[dict[str, str], Path]:
    home, dags, tables = tmp_path / "home", tmp_path / "dags", tmp_path / "tables"
    dags.mkdir()
    for name in dag_files:
        shutil.copy(ROOT / "dags_examples" / name, dags / name)
    env = _child_env(home, dags, tables)
    _run([str(python.with_name("airflow")), "db", "migrate"], env=env, cwd=tmp_path)
    return env, dags


def test_no_extras_runs_the_non_spark_examples_without_pyspark(slim_venv, tmp_path):
    python, _wheel, _ = slim_venv
    env, dags = _home(tmp_path, python, SLIM_DAGS)
    done = _run([str(python), "-c", RUN_SLIM, str(dags), json.dumps(NO_SPARK_MODULES)], env=env, cwd=tmp_path)
    result = _result(done)
    assert set(result["states"].values()) == {"success"}, result["states"]
    assert len(result["states"]) == 4
    assert result["pyspark_imported"] is False
    assert result["installed"] == {"pyspark": False, "s3fs": False, "gcsfs": False, "adlfs": False}
    assert "pip install 'airflow-provider-delta[spark]'" in result["errors"]["spark"]
    assert "pip install 'airflow-provider-delta[s3]'" in result["errors"]["s3"]


def test_the_spark_extra_runs_the_spark_example(slim_venv, tmp_path):
    python, wheel, constraints = slim_venv
    install = [*_uv(), "pip", "install", "-q", "--python", str(python), "-c", str(constraints),
               f"{wheel}[spark]"]  # fmt: skip
    env = {**os.environ, "UV_PYTHON_DOWNLOADS": "never"}
    # PyPI has only an sdist of pyspark. Offline, uv reuses the wheel it built from it for .venv; online,
    # a registry that answers every revalidation as modified makes uv build it again (30 s of CPU). When
    # uv's cache cannot resolve offline (a fresh cache never saw pyspark's index page), install online.
    if subprocess.run([*install, "--offline"], capture_output=True, env=env).returncode != 0:
        _run(install, env=env)
    env, dags = _home(tmp_path, python, ["delta_spark_pipeline.py"])
    env.update(PYSPARK_PYTHON=str(python), PYSPARK_DRIVER_PYTHON=str(python))
    # The JVM options of the suite's other short-lived JVMs (tests/conftest.py), through the java launcher:
    # C2's compiling does not pay back in a one-task run.
    env["JDK_JAVA_OPTIONS"] = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
    result = _result(_run([str(python), "-c", RUN_SPARK, str(dags)], env=env, cwd=tmp_path))
    assert result == {"state": "success", "pyspark_imported": True}


def test_importing_the_airflow_layer_loads_no_pyspark():
    """In the full environment too (pyspark installed): nothing but the Spark layer imports it."""
    script = (
        "import importlib, json, sys\n"
        f"for name in {NO_SPARK_MODULES!r}:\n"
        "    importlib.import_module(name)\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] == 'pyspark')))\n"
    )
    done = _run([sys.executable, "-c", script], cwd=ROOT)
    assert json.loads(done.stdout.splitlines()[-1]) == []
