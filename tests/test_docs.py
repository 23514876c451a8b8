"""The how-to guides show the example DAGs' own code: every ``<!-- example: FILE NAME -->`` marker in docs/
is followed by a ```python block equal to the lines between ``# [START NAME]`` and ``# [END NAME]`` in FILE
(dedented), as Airflow's in-tree docs include their system tests' code with ``exampleinclude``. The
examples run in the tests, so the guides show code that runs.
"""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MARKER = re.compile(r"<!-- example: (\S+) (\S+) -->\n```python\n(.*?)```", re.S)


def snippet(path: Path, name: str) -> str:
    text = path.read_text()
    match = re.search(rf"^[ ]*# \[START {re.escape(name)}\]\n(.*?)^[ ]*# \[END {re.escape(name)}\]", text,
                      re.S | re.M)  # fmt: skip
    assert match, f"{path}: no [START {name}] ... [END {name}] markers"
    return textwrap.dedent(match.group(1))


def test_guides_show_the_examples_code():
    found = 0
    for doc in sorted((ROOT / "docs").rglob("*.md")):
        for file, name, shown in MARKER.findall(doc.read_text()):
            found += 1
            expected = snippet(ROOT / file, name)
            assert shown == expected, (
                f"{doc.relative_to(ROOT)}: the block after <!-- example: {file} {name} --> differs from the "
                f"example; replace it with:\n{expected}"
            )
    assert found >= 6, "the how-to guides lost their example blocks"


def test_every_example_snippet_is_shown_somewhere():
    shown = {name for doc in (ROOT / "docs").rglob("*.md") for _, name, _ in MARKER.findall(doc.read_text())}
    marked = {
        name
        for path in (ROOT / "dags_examples").glob("*.py")
        for name in re.findall(r"# \[START (\S+)\]", path.read_text())
    }
    assert marked <= shown, f"example snippets no guide shows: {sorted(marked - shown)}"
