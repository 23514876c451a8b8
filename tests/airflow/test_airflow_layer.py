"""Each small fact of the Airflow layer once: one cached ``hook`` per operator, no borrowed private names.

Every operator, the sensor and the triggers get their ``DeltaHook`` from ``DeltaHookMixin.hook`` (built once
per instance, however often the task reaches the table), and no module of the Airflow layer imports another
module's underscore names or reads Airflow's private asset-accessor attributes (``_by_name``/``_by_uri``).
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import airflow_provider_delta
from airflow_provider_delta.hooks import delta as hook_module
from airflow_provider_delta.hooks.delta import DeltaHook, DeltaHookMixin
from airflow_provider_delta.log import DeltaTable
from airflow_provider_delta.operators.commit import DeltaCommitOperator
from airflow_provider_delta.operators.create import DeltaCreateTableOperator
from airflow_provider_delta.operators.layout import DeltaOptimizeOperator, DeltaRestoreOperator
from airflow_provider_delta.operators.maintenance import (
    DeltaCheckpointOperator,
    DeltaIcebergConvertOperator,
    DeltaLogCleanupOperator,
    DeltaVacuumOperator,
)
from airflow_provider_delta.operators.spark import DeltaSparkMergeOperator, DeltaSparkWriteOperator
from airflow_provider_delta.operators.write import DeltaWriteOperator
from airflow_provider_delta.sensors.delta import DeltaVersionSensor
from airflow_provider_delta.triggers.delta import DeltaTableWatcherTrigger, DeltaVersionTrigger

PACKAGE = "airflow_provider_delta"
PACKAGE_DIR = Path(airflow_provider_delta.__file__).parent
AIRFLOW_LAYER = ("operators", "sensors", "triggers", "hooks")
# Private attributes of Airflow's AssetStateStoreAccessors (and of its inlet/outlet event accessors).
PRIVATE_AIRFLOW_ATTRIBUTES = {"_by_name", "_by_uri"}


def _spark_df(spark: Any, context: Any) -> Any:
    raise AssertionError("not run here")


# Every class of the Airflow layer that reaches a table, with the arguments it needs beyond the table.
USERS: dict[str, tuple[type, dict[str, Any]]] = {
    "commit": (DeltaCommitOperator, {"files": []}),
    "create": (DeltaCreateTableOperator, {"schema": [("id", "long")]}),
    "write": (DeltaWriteOperator, {"data": [{"id": 1}]}),
    "checkpoint": (DeltaCheckpointOperator, {}),
    "vacuum": (DeltaVacuumOperator, {}),
    "log_cleanup": (DeltaLogCleanupOperator, {}),
    "iceberg_convert": (DeltaIcebergConvertOperator, {}),
    "restore": (DeltaRestoreOperator, {"version": 0}),
    "optimize": (DeltaOptimizeOperator, {}),
    "spark_write": (DeltaSparkWriteOperator, {"python_callable": _spark_df}),
    "spark_merge": (DeltaSparkMergeOperator, {"source_callable": _spark_df, "on": "target.id = source.id"}),
    "sensor": (DeltaVersionSensor, {"min_version": 0}),
}
TRIGGERS = {"version_trigger": DeltaVersionTrigger, "watcher_trigger": DeltaTableWatcherTrigger}


@pytest.fixture
def built(monkeypatch: pytest.MonkeyPatch) -> list[DeltaHook]:
    """Every DeltaHook the Airflow layer builds during the test (the real hook, counted)."""
    hooks: list[DeltaHook] = []

    class CountedHook(DeltaHook):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            hooks.append(self)

    monkeypatch.setattr(hook_module, "DeltaHook", CountedHook)
    return hooks


def _instance(name: str, uri: str) -> Any:
    if name == "version_trigger":
        return DeltaVersionTrigger(uri, delta_conn_id=None, min_version=0)
    if name in TRIGGERS:
        return TRIGGERS[name](uri, delta_conn_id=None)
    cls, extra = USERS[name]
    return cls(task_id=name, table_uri=uri, delta_conn_id=None, **extra)


def _table(root: Path) -> DeltaTable:
    """A table at version 1 (created, then one write)."""
    table = DeltaTable.create(str(root), pa.schema([("id", pa.int64())]))
    table.write(pa.table({"id": pa.array([1, 2], pa.int64())}))
    return table


@pytest.mark.parametrize("name", [*USERS, *TRIGGERS])
def test_each_operator_sensor_and_trigger_has_one_cached_hook(name: str, tmp_path: Path, built: list):
    _table(tmp_path / "t")
    user = _instance(name, str(tmp_path / "t"))
    # The same property everywhere: no class builds its hook its own way.
    assert isinstance(user, DeltaHookMixin)
    defined = next(c.__dict__["hook"] for c in type(user).__mro__ if "hook" in c.__dict__)
    assert defined is DeltaHookMixin.__dict__["hook"]
    assert built == []  # built when first needed, not when the DAG is parsed
    hook = user.hook
    assert user.hook is hook and isinstance(hook, DeltaHook) and hook.delta_conn_id is None
    assert user.delta_table().version() == 1 and user.delta_table().version() == 1
    assert user.table_storage_options() == {}
    assert built == [hook]  # one construction per instance
    assert _instance(name, str(tmp_path / "t")).hook is not hook  # ...and one per instance, not shared


@pytest.mark.parametrize(
    "name, extra",
    [
        ("create", {"schema": [("id", "long")]}),
        ("checkpoint", {}),
        ("vacuum", {}),
        ("log_cleanup", {}),
        ("optimize", {"engine": "pyarrow"}),
        ("restore", {"version": 0}),
        ("commit", {"files": [], "app_id": "a", "outlets": []}),
        ("write", {"data": [{"id": 3}], "app_id": "a", "outlets": []}),
    ],
)
def test_a_task_builds_its_hook_once(name: str, extra: dict[str, Any], tmp_path: Path, built: list):
    _table(tmp_path / "t")
    cls = USERS[name][0]
    operator = cls(task_id=name, table_uri=str(tmp_path / "t"), **extra)
    operator.execute({})
    assert built == [operator.hook]


def test_a_sensor_builds_its_hook_once_over_many_pokes(tmp_path: Path, built: list):
    _table(tmp_path / "t")
    sensor = DeltaVersionSensor(task_id="wait", table_uri=str(tmp_path / "t"), min_version=5)
    assert [sensor.poke({}).is_done for _ in range(3)] == [False, False, False]
    assert built == [sensor.hook]


# -- no borrowed private names -----------------------------------------------------------------------------
def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE_DIR.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _resolve(module: str | None, level: int, importer: str, is_package: bool) -> str:
    if level == 0:
        return module or ""
    base_parts = importer.split(".")
    base_parts = base_parts[: len(base_parts) - level + (1 if is_package else 0)]
    return ".".join([*base_parts, module] if module else base_parts)


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def borrowed_private_names(source: str, module: str, is_package: bool = False) -> list[str]:
    """Where ``source`` (the module ``module``) imports an underscore name (or module) from another module
    of the package, or reads Airflow's private ``_by_name``/``_by_uri`` (an attribute, or by ``getattr``)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom):
            origin = _resolve(node.module, node.level, module, is_package)
            if origin.split(".")[0] != PACKAGE or origin == module:
                continue
            if any(_private(part) for part in origin.split(".")):
                found.append(f"line {node.lineno}: imports from the private module {origin}")
            names = [a.name for a in node.names if _private(a.name)]
            found += [f"line {node.lineno}: imports {origin}.{name}" for name in names]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names if a.name.split(".")[0] == PACKAGE]
            found += [f"line {node.lineno}: imports {n}" for n in names if any(map(_private, n.split(".")))]
        elif isinstance(node, ast.Attribute) and node.attr in PRIVATE_AIRFLOW_ATTRIBUTES:
            found.append(f"line {node.lineno}: reads .{node.attr}")
        elif isinstance(node, ast.Constant) and node.value in PRIVATE_AIRFLOW_ATTRIBUTES:
            found.append(f"line {node.lineno}: names {node.value!r}")
    return found


def test_the_airflow_layer_borrows_no_private_names():
    paths = sorted(p for folder in AIRFLOW_LAYER for p in (PACKAGE_DIR / folder).rglob("*.py"))
    assert len(paths) >= 10, paths
    problems = []
    for path in paths:
        found = borrowed_private_names(path.read_text(), _module_name(path), path.name == "__init__.py")
        problems += [f"{path.relative_to(PACKAGE_DIR.parent)} {p}" for p in found]
    assert not problems, "private names used across modules:\n" + "\n".join(problems)


def test_the_scanner_sees_private_imports_and_accessor_internals():
    source = (
        "from airflow_provider_delta.operators.maintenance import _TableOperator, DeltaVacuumOperator\n"
        "from .maintenance import _int_or_none\n"
        "from ._private import thing\n"
        "import airflow_provider_delta._hidden\n"
        "from airflow_provider_delta.log import __version__\n"  # dunders are public
        "from airflow.sdk.execution_time.context import _CURRENT\n"  # not the package's: not this test's
        "def f(store):\n"
        "    return store._by_name, getattr(store, '_by_uri', {}), store.by_name\n"
    )
    found = borrowed_private_names(source, "airflow_provider_delta.operators.layout")
    assert sorted(found) == [
        "line 1: imports airflow_provider_delta.operators.maintenance._TableOperator",
        "line 2: imports airflow_provider_delta.operators.maintenance._int_or_none",
        "line 3: imports from the private module airflow_provider_delta.operators._private",
        "line 4: imports airflow_provider_delta._hidden",
        "line 8: names '_by_uri'",
        "line 8: reads ._by_name",
    ]
