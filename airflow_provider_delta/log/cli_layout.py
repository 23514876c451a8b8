"""``deltalog restore`` and ``deltalog optimize``: layout and rollback from a shell.

``restore`` brings a table back to an earlier version in one new commit (nothing is deleted: the versions
in between stay readable by time travel). ``optimize`` compacts small files (or Z-orders them) with pyarrow
in this process, with a progress bar on stderr; ``--dry-run`` prints the plan without writing anything.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import IO, Any

from .cli_output import ProgressBar, human_bytes, pairs
from .table import DeltaTable

Command = Callable[[str, str], argparse.ArgumentParser]


def add_commands(command: Command, version_arg: Any, timestamp_arg: Any) -> None:
    """Add ``restore`` with ``command(name, help)`` (which adds URI and --json)."""
    p = command("restore", "restore the table to an earlier version in a new commit (Delta's RESTORE)")
    when = p.add_mutually_exclusive_group(required=True)
    when.add_argument("--version", type=version_arg, metavar="N", help="restore to version N")
    when.add_argument("--timestamp", type=timestamp_arg, metavar="T",
                      help="restore to the latest version committed at or before T")  # fmt: skip
    p.add_argument("--no-enforce-retention", action="store_true",
                   help="allow a target older than delta.deletedFileRetentionDuration")  # fmt: skip
    p.add_argument("--ignore-missing-files", action="store_true",
                   help="restore even if files the target needs are gone (readers then fail)")  # fmt: skip


# -- restore ----------------------------------------------------------------------------------------------
def restore_doc(table: DeltaTable, args: argparse.Namespace) -> dict[str, Any]:
    bar = ProgressBar("checking files", sys.stderr) if args.progress or sys.stderr.isatty() else None
    try:
        result = table.restore(
            version=args.version, timestamp=args.timestamp,
            enforce_retention_duration=not args.no_enforce_retention,
            ignore_missing_files=args.ignore_missing_files,
            progress=(lambda _, done, total: bar(done, total)) if bar else None,
        )  # fmt: skip
    finally:
        if bar is not None:
            bar.close()
    return {"uri": table.uri, "version": result.version, "restored_version": result.restored_version,
            "metrics": result.metrics()}  # fmt: skip


def print_restore(doc: dict[str, Any], out: IO[str]) -> None:
    m = doc["metrics"]
    print(f"restored {doc['uri']} to version {doc['restored_version']} as version {doc['version']}", file=out)
    print(pairs([
        ("files restored", f"{m['numRestoredFiles']:,} ({human_bytes(m['restoredFilesSize'])})"),
        ("files removed", f"{m['numRemovedFiles']:,} ({human_bytes(m['removedFilesSize'])})"),
        ("files now", f"{m['numOfFilesAfterRestore']:,} ({human_bytes(m['tableSizeAfterRestore'])})"),
    ], indent="  "), file=out)  # fmt: skip


COMMANDS: dict[str, tuple[Callable[[DeltaTable, argparse.Namespace], dict[str, Any]],
                          Callable[[dict[str, Any], IO[str]], None]]] = {
    "restore": (restore_doc, print_restore),
}  # fmt: skip
