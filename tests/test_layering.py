"""The core (airflow_provider_delta/log/) imports neither Airflow nor PySpark, nor the layers built on it.

Two checks: a scan of the source (catches imports in functions and branches that never run in tests), and a
real import in a fresh interpreter (catches imports pulled in indirectly, e.g. by a parent package).
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import airflow_provider_delta

PACKAGE = "airflow_provider_delta"
CORE = "log"
FORBIDDEN = {"airflow", "pyspark"}
CORE_DIR = Path(airflow_provider_delta.__file__).parent / CORE


def _core_modules() -> list[tuple[Path, str]]:
    """(path, dotted module name) for every module of the core."""
    modules = []
    for path in sorted(CORE_DIR.rglob("*.py")):
        parts = list(path.relative_to(CORE_DIR.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        modules.append((path, ".".join([PACKAGE, *parts])))
    return modules


def _resolve(module: str | None, level: int, importer: str, is_package: bool) -> str:
    if level == 0:
        return module or ""
    base = importer.split(".")
    base = base[: len(base) - level + (1 if is_package else 0)]
    return ".".join([*base, module] if module else base)


def _imported_names(path: Path, importer: str) -> list[tuple[int, str]]:
    """(line, absolute module name) of every import in the file, however deeply nested."""
    is_package = path.name == "__init__.py"
    found = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = _resolve(node.module, node.level, importer, is_package)
            found.append((node.lineno, base))
            # "from airflow_provider_delta import hooks" imports the submodule hooks.
            found += [(node.lineno, f"{base}.{alias.name}") for alias in node.names]
        elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if name in {"import_module", "__import__"} and isinstance(node.args[0].value, str):
                found.append((node.lineno, node.args[0].value))
    return found


def _violation(name: str) -> bool:
    top = name.split(".")[0]
    if top in FORBIDDEN:
        return True
    # Within our package the core may import only itself.
    parts = name.split(".")
    return top == PACKAGE and len(parts) > 1 and parts[1] != CORE


def test_core_has_modules_to_check():
    assert _core_modules(), f"no modules found under {CORE_DIR}"


def test_core_source_imports_no_airflow_pyspark_or_upper_layers():
    violations = [
        f"{path.relative_to(CORE_DIR.parent.parent)}:{line}: imports {name}"
        for path, module in _core_modules()
        for line, name in _imported_names(path, module)
        if _violation(name)
    ]
    assert not violations, "the core must not import these:\n" + "\n".join(violations)


def test_scanner_sees_nested_and_relative_imports(tmp_path):
    source = (
        "def f():\n"
        "    if True:\n"
        "        from airflow.sdk import dag\n"
        "import pyspark.sql as ps\n"
        "from ..hooks import delta\n"
        "from .. import operators\n"
        "from . import snapshot\n"
        "import importlib\n"
        "importlib.import_module('airflow.models')\n"
    )
    path = tmp_path / "m.py"
    path.write_text(source)
    names = [name for _, name in _imported_names(path, f"{PACKAGE}.{CORE}.m")]
    assert {n for n in names if _violation(n)} >= {
        "airflow.sdk",
        "pyspark.sql",
        f"{PACKAGE}.hooks",
        f"{PACKAGE}.operators",
        "airflow.models",
    }
    assert f"{PACKAGE}.{CORE}.snapshot" in names
    assert not _violation(f"{PACKAGE}.{CORE}.snapshot")


def test_importing_the_core_loads_no_airflow_or_pyspark():
    modules = [module for _, module in _core_modules()]
    script = (
        "import importlib, json, sys\n"
        f"for name in {modules!r}:\n"
        "    importlib.import_module(name)\n"
        f"bad = sorted({{m.split('.')[0] for m in sys.modules}} & {FORBIDDEN!r})\n"
        "print(json.dumps(bad))\n"
    )
    # Run beside the package so the interpreter imports the same copy the scan read.
    command = [sys.executable, "-c", script]
    result = subprocess.run(command, cwd=CORE_DIR.parent.parent, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, f"importing the core failed:\n{result.stderr}"
    assert json.loads(result.stdout.splitlines()[-1]) == []
