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


# Within our package the core may import only itself, and ``extras`` (which names the extra a missing optional
# dependency comes with; it imports nothing of the package).
CORE_MAY_IMPORT = {CORE, "extras"}


def _violation(name: str) -> bool:
    top = name.split(".")[0]
    if top in FORBIDDEN:
        return True
    parts = name.split(".")
    return top == PACKAGE and len(parts) > 1 and parts[1] not in CORE_MAY_IMPORT


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


def _loaded_by_importing_the_core() -> set[str]:
    """The modules loaded in a fresh interpreter that imports every core module."""
    modules = [module for _, module in _core_modules()]
    script = (
        "import importlib, json, sys\n"
        f"for name in {modules!r}:\n"
        "    importlib.import_module(name)\n"
        "print(json.dumps(sorted(sys.modules)))\n"
    )
    # Run beside the package so the interpreter imports the same copy the scan read.
    command = [sys.executable, "-c", script]
    result = subprocess.run(command, cwd=CORE_DIR.parent.parent, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, f"importing the core failed:\n{result.stderr}"
    return set(json.loads(result.stdout.splitlines()[-1]))


def test_importing_the_core_loads_no_airflow_or_pyspark():
    assert sorted({m.split(".")[0] for m in _loaded_by_importing_the_core()} & set(FORBIDDEN)) == []


# Modules that cost a task's start for nothing when no read needs them: pyarrow's Acero and datasets (a
# second to import: pyarrow loads them itself the first time an expression filters a table) and pandas
# (about 0.15 s and 45 MiB; the core builds its arrays without it, see arrow_utils), and pyiceberg (about
# 0.8 s: only a UniForm conversion imports it).
HEAVY = ("pyarrow.acero", "pyarrow._acero", "pyarrow.dataset", "pyarrow._dataset", "pandas", "pyiceberg")


def test_importing_the_core_loads_no_heavy_modules():
    assert sorted(set(HEAVY) & _loaded_by_importing_the_core()) == []


# -- folders as floors ----------------------------------------------------------------------------------
# The core's folders, read from the ground up (docs/architecture.md draws the same picture): a module imports
# from its own folder or from a folder on a lower floor, never up and never sideways into another folder on
# its floor. The DeltaTable facade (table) is imported by no operation. A new folder or top-level module must
# be given a floor here and in docs/architecture.md.
CORE_FLOORS: dict[str, int] = {
    "base": 1,                       # errors, argument checks, Arrow helpers, secret forms
    "actions": 2,                    # the spec's actions and a commit's bytes
    "schema": 3, "files": 3,         # types and columns; storage and the log's files
    "features": 4, "expressions": 4, # features and table configuration; filters parsed, evaluated, skipping
    "snapshot": 5,                   # replay, the state of a version, checkpoints of it
    "scans": 6, "commits": 6,        # reading a version; committing to it
    "uniform": 6,                    # UniForm: a version's Iceberg metadata, and how far it lags
    "writes": 7, "changes": 7,       # rows into files; what a range of versions changed
    "maintenance": 8, "row_changes": 8,  # OPTIMIZE, VACUUM, RESTORE, log cleanup; DELETE, UPDATE, MERGE
    "table": 9,                      # the facade
    "cli": 10, "__init__": 10,       # what sits on the facade
}  # fmt: skip
# Imports inside functions are allowed in the core only for optional dependencies (an Azure-only error).
OPTIONAL_DEPENDENCIES = {"azure", "s3fs", "gcsfs", "adlfs", "pyiceberg"}
PACKAGE_DIR = Path(airflow_provider_delta.__file__).parent


def _package_modules() -> dict[str, Path]:
    out = {}
    for path in sorted(PACKAGE_DIR.rglob("*.py")):
        parts = list(path.relative_to(PACKAGE_DIR.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def _internal_edges() -> dict[str, set[str]]:
    """module -> the package modules it imports anywhere (module level, functions, TYPE_CHECKING)."""
    modules = _package_modules()
    edges: dict[str, set[str]] = {}
    for module, path in modules.items():
        targets = set()
        for _, name in _imported_names(path, module):
            # "from .x import y" names x.y too, which is a module only when y is a submodule.
            while name and name not in modules:
                name = name.rpartition(".")[0]
            if name and name != module:
                targets.add(name)
        edges[module] = targets
    return edges


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(edges.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(edges):
        if node not in index:
            visit(node)
    return found


def test_the_package_has_no_import_cycle():
    cycles = _cycles(_internal_edges())
    assert not cycles, "import cycles (each line: modules that import each other, directly or not):\n" + (
        "\n".join(" <-> ".join(c) for c in cycles)
    )


def test_the_cycle_finder_finds_cycles():
    edges = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert _cycles(edges) == [["a", "b", "c"]]


def _floor_unit(module: str) -> str:
    """The folder a core module lives in, or its own name when it sits at the top of the core."""
    short = module[len(f"{PACKAGE}.{CORE}") + 1 :]
    return short.split(".")[0] if short else "__init__"


def _floor_problems(edges: dict[str, set[str]]) -> list[str]:
    """Every import among core modules that runs up or sideways across the floors."""
    core = f"{PACKAGE}.{CORE}"
    problems = []
    for module, targets in edges.items():
        if not (module == core or module.startswith(core + ".")):
            continue
        unit = _floor_unit(module)
        if unit not in CORE_FLOORS:
            problems.append(f"{unit}: not on a floor (add it to CORE_FLOORS and docs/architecture.md)")
            continue
        for target in targets:
            if not target.startswith(core + ".") or target == core:
                continue
            other = _floor_unit(target)
            if other == unit:
                continue
            floor, other_floor = CORE_FLOORS[unit], CORE_FLOORS.get(other, 99)
            if other_floor >= floor:
                way = "up" if other_floor > floor else "sideways"
                problems.append(
                    f"{module[len(core) + 1 :]} ({unit}, floor {floor}) imports {target[len(core) + 1 :]} "
                    f"({other}, floor {other_floor}): runs {way}"
                )
    return sorted(set(problems))


def test_the_core_folders_are_floors():
    problems = _floor_problems(_internal_edges())
    assert not problems, "imports that break the core's floors:\n" + "\n".join(problems)


def test_every_core_folder_is_on_a_floor_and_drawn():
    folders = {p.name for p in CORE_DIR.iterdir() if (p / "__init__.py").exists()}
    tops = {p.stem for p in CORE_DIR.glob("*.py")}
    assert folders | tops == set(CORE_FLOORS), "folders and top-level modules vs CORE_FLOORS"
    drawing = (PACKAGE_DIR.parent / "docs" / "architecture.md").read_text()
    missing = sorted(
        unit
        for unit in CORE_FLOORS
        if unit != "__init__"
        and f"{unit}/" not in drawing
        and f"{unit}.py" not in drawing
        and f"`{unit}`" not in drawing
    )
    assert not missing, f"docs/architecture.md does not draw: {missing}"


def test_the_floor_check_sees_sideways_and_upward_imports():
    core = f"{PACKAGE}.{CORE}"
    edges = {
        f"{core}.scans.scan": {
            f"{core}.commits.transaction",
            f"{core}.scans.scan_file",
        },  # sideways; same folder
        f"{core}.base.errors": {f"{core}.snapshot.snapshot"},  # up
        f"{core}.maintenance.vacuum": {f"{core}.commits.transaction", f"{core}.base.errors"},  # down
    }
    problems = _floor_problems(edges)
    assert len(problems) == 2, problems
    assert "runs sideways" in problems[1] and "scans.scan (scans" in problems[1]
    assert "runs up" in problems[0] and "base.errors (base" in problems[0]


def test_the_floors_are_the_lowest_the_imports_allow():
    """Each folder stands one floor above the highest it imports (farm-studio look draws it so)."""
    core = f"{PACKAGE}.{CORE}"
    below: dict[str, set[str]] = {unit: set() for unit in CORE_FLOORS}
    for module, targets in _internal_edges().items():
        if module == core or module.startswith(core + "."):
            unit = _floor_unit(module)
            below[unit] |= {_floor_unit(t) for t in targets if t.startswith(core + ".") and t != core} - {
                unit
            }
    lowest = {unit: 1 + max((CORE_FLOORS[o] for o in others), default=0) for unit, others in below.items()}
    assert lowest == CORE_FLOORS


def test_the_core_imports_nothing_inside_functions_but_optional_dependencies():
    found = []
    for path, _ in _core_modules():
        tree = ast.parse(path.read_text(), filename=str(path))
        for fn in ast.walk(tree):
            if not isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            for node in ast.walk(fn):
                if isinstance(node, ast.Import):
                    names = [a.name for a in node.names]
                elif isinstance(node, ast.ImportFrom):
                    names = (
                        [node.module or "."] if node.level == 0 else ["." * node.level + (node.module or "")]
                    )
                else:
                    continue
                if not all(n.split(".")[0] in OPTIONAL_DEPENDENCIES for n in names):
                    found.append(f"{path.relative_to(PACKAGE_DIR.parent)}:{node.lineno}: {', '.join(names)}")
    assert not found, "imports inside functions (move the name to the right floor instead):\n" + "\n".join(
        found
    )


def test_star_import_of_the_core_works():
    result = subprocess.run(
        [sys.executable, "-c", "from airflow_provider_delta.log import *; print(len(dir()))"],
        cwd=PACKAGE_DIR.parent, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
