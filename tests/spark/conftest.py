"""Fixtures of the Spark writer and reader tests; the ``spark`` session itself is in ``tests/conftest.py``
(the oracle tests use it too)."""

from __future__ import annotations

from pathlib import Path

import pytest
from spark_helpers import GOLDEN


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
