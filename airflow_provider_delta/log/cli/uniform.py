"""``deltalog uniform``: how far a UniForm table's Iceberg metadata lags, and ``--convert`` to catch up.

The status reads the newest Iceberg metadata file's name and the Delta version it holds, never the Delta
file list; ``--convert`` writes the metadata of the latest version first (from the last version converted,
or the whole file list), as a commit would have.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import asdict
from typing import IO, Any

from ..table import DeltaTable
from .output import pairs

Command = Callable[[str, str], argparse.ArgumentParser]


def add_commands(command: Command) -> None:
    """Add ``uniform`` with ``command(name, help)`` (which adds URI and --json)."""
    p = command("uniform", "UniForm's Iceberg metadata: the Delta version it holds and how far it lags")
    p.add_argument("--convert", action="store_true",
                   help="first write the Iceberg metadata of the latest version (catch up)")  # fmt: skip


def uniform_doc(table: DeltaTable, args: argparse.Namespace) -> dict[str, Any]:
    status = table.convert_to_iceberg() if args.convert else table.iceberg_status()
    return asdict(status)


def _lag(doc: dict[str, Any]) -> str | None:
    lag = doc["lag"]
    if lag is None:
        return None
    if lag == 0:
        return "0 (up to date)"
    text = f"{lag} version{'s' if lag != 1 else ''} behind"
    return text + (" (never converted)" if doc["converted_version"] is None else "")


def print_uniform(doc: dict[str, Any], out: IO[str]) -> None:
    items = [
        ("UniForm iceberg", "on" if doc["enabled"] else "off"),
        ("table", doc["uri"]),
        ("table version", doc["table_version"]),
        ("converted version", doc["converted_version"]),
        ("lag", _lag(doc)),
        ("metadata file", doc["metadata_file"]),
    ]
    if doc["last_error"]:
        items.append(("last error", doc["last_error"]))
    print(pairs(items), file=out)


COMMANDS: dict[str, tuple[Callable[[DeltaTable, argparse.Namespace], dict[str, Any]],
                          Callable[[dict[str, Any], IO[str]], None]]] = {
    "uniform": (uniform_doc, print_uniform),
}  # fmt: skip
