"""Table properties and the schema are interpreted in one place: the table configuration.

Outside ``log/features/`` (the registry, the configuration and the feature rules) no module of the package
reads a raw property string from a metadata's configuration, calls the property parsers, or searches the
schema's JSON text; every reader and writer asks ``TableConfiguration``. And rows become files through one
write plan: one ``WritePlan`` in the package, which the Spark layer uses too.
"""

from __future__ import annotations

import ast
from pathlib import Path

import airflow_provider_delta

PACKAGE_DIR = Path(airflow_provider_delta.__file__).parent
ALLOWED = PACKAGE_DIR / "log" / "features"
PARSERS = {"bool_property", "interval_property_ms", "ict_enablement_version"}
MAPPINGS = {"configuration", "properties", "cfg", "config"}


def _raw_reads(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, what) for every raw read of table properties or of the schema's text in ``tree``."""
    found = []
    for node in ast.walk(tree):
        # metadata.configuration.get(...) / configuration["delta...."] / properties.get(...)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get":
            owner = node.func.value
            name = owner.attr if isinstance(owner, ast.Attribute) else getattr(owner, "id", "")
            if name in MAPPINGS and node.args and _is_property_key(node.args[0]):
                found.append((node.lineno, f"{name}.get({ast.unparse(node.args[0])})"))
        if isinstance(node, ast.Subscript):
            owner = node.value
            name = owner.attr if isinstance(owner, ast.Attribute) else getattr(owner, "id", "")
            if name in MAPPINGS and _is_property_key(node.slice):
                found.append((node.lineno, f"{name}[{ast.unparse(node.slice)}]"))
        if isinstance(node, ast.Call):
            called = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
            if called in PARSERS:
                found.append((node.lineno, f"{called}(...)"))
        # '"delta.identity.' in metadata.schema_string: a search of the schema's JSON text
        if isinstance(node, ast.Compare) and any(isinstance(op, ast.In | ast.NotIn) for op in node.ops):
            right = node.comparators[-1]
            text = ast.unparse(right)
            if "schema_string" in text or "json.dumps" in text:
                found.append((node.lineno, f"search of {text}"))
    return found


def _is_property_key(node: ast.AST) -> bool:
    """A table property key: a ``"delta.*"`` literal or a constant named like one (``APPEND_ONLY``)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value.startswith("delta.")
    return isinstance(node, ast.Name) and node.id.isupper()


def test_no_raw_property_or_schema_text_reads_outside_the_configuration():
    problems = []
    for path in sorted(PACKAGE_DIR.rglob("*.py")):
        if path.is_relative_to(ALLOWED):
            continue
        for line, what in _raw_reads(ast.parse(path.read_text(), filename=str(path))):
            problems.append(f"{path.relative_to(PACKAGE_DIR.parent)}:{line}: {what}")
    assert not problems, "read these through TableConfiguration:\n" + "\n".join(problems)


def test_the_scanner_sees_each_kind_of_raw_read():
    source = (
        "a = snap.metadata.configuration.get('delta.appendOnly')\n"
        "b = cfg['delta.checkpointInterval']\n"
        "c = bool_property(config, APPEND_ONLY)\n"
        "d = '\"delta.identity.' in snap.metadata.schema_string\n"
        "e = domain.configuration\n"  # a domain's configuration string: not a property read
        "f = metadata.configuration.get(key)\n"  # a variable key: copying, not interpreting
    )
    assert [line for line, _ in _raw_reads(ast.parse(source))] == [1, 2, 3, 4]


def test_one_write_plan():
    plans = [
        f"{path.relative_to(PACKAGE_DIR.parent)}:{node.lineno}"
        for path in sorted(PACKAGE_DIR.rglob("*.py"))
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.ClassDef) and node.name.endswith(("WritePlan", "WriteSpec", "FileLayout"))
    ]
    assert sorted(p.split(":")[0] for p in plans) == [
        "airflow_provider_delta/log/schema/file_layout.py",
        "airflow_provider_delta/log/writes/write_plan.py",
        "airflow_provider_delta/spark/data_files.py",  # WriteSpec: the layout and where, for executors
    ], plans
