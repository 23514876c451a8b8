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

from ..maintenance.optimize_commit import OptimizeMetrics
from ..maintenance.optimize_plan import plan_optimize
from ..table import DeltaTable
from .output import ProgressBar, human_bytes, pairs

Command = Callable[[str, str], argparse.ArgumentParser]


def add_commands(command: Command, version_arg: Any, timestamp_arg: Any) -> None:
    """Add ``optimize`` and ``restore`` with ``command(name, help)`` (which adds URI and --json)."""
    p = command("optimize", "compact small files, or Z-order them, with pyarrow in this process (OPTIMIZE)")
    p.add_argument("--zorder-by", type=_columns, metavar="COLS", default=[],
                   help="Z-order by these comma-separated data columns")  # fmt: skip
    p.add_argument("--partition", action="append", type=_equality, metavar="COL=VALUE", default=[],
                   help="only the partitions where COL is VALUE (repeatable: all must hold)")  # fmt: skip
    for flag, what in (("--min-file-size", "files below this are compacted"),
                       ("--max-file-size", "the size of the files written"),
                       ("--batch-size", "commit in batches of about this many input bytes")):  # fmt: skip
        p.add_argument(flag, type=_size, metavar="BYTES", help=f"{what} (e.g. 134217728, 128m, 1g)")
    p.add_argument("--dry-run", action="store_true", help="print the plan; write nothing")

    p = command("restore", "restore the table to an earlier version in a new commit (Delta's RESTORE)")
    when = p.add_mutually_exclusive_group(required=True)
    when.add_argument("--version", type=version_arg, metavar="N", help="restore to version N")
    when.add_argument("--timestamp", type=timestamp_arg, metavar="T",
                      help="restore to the latest version committed at or before T")  # fmt: skip
    p.add_argument("--no-enforce-retention", action="store_true",
                   help="allow a target older than delta.deletedFileRetentionDuration")  # fmt: skip
    p.add_argument("--ignore-missing-files", action="store_true",
                   help="restore even if files the target needs are gone (readers then fail)")  # fmt: skip


def _columns(text: str) -> list[str]:
    return [c.strip() for c in text.split(",") if c.strip()]


def _equality(text: str) -> tuple[str, str, str]:
    column, sep, value = text.partition("=")
    if not sep or not column.strip():
        raise argparse.ArgumentTypeError(f"expected COL=VALUE, not {text!r}")
    return column.strip(), "=", value


def _size(text: str) -> int:
    s = text.strip().lower().removesuffix("b")
    scale = {"k": 1024, "m": 1024**2, "g": 1024**3, "t": 1024**4}.get(s[-1:], 1)
    try:
        size = int(s[:-1] if scale > 1 else s) * scale
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a size (bytes, or with k, m, g, t)") from None
    if size <= 0:
        raise argparse.ArgumentTypeError(f"{text!r}: a size must be positive")
    return size


# -- optimize ---------------------------------------------------------------------------------------------
def optimize_doc(table: DeltaTable, args: argparse.Namespace) -> dict[str, Any]:
    options: dict[str, Any] = {
        "zorder_by": args.zorder_by, "partition_filter": args.partition or None,
        "min_file_size": args.min_file_size, "max_file_size": args.max_file_size,
        "batch_size": args.batch_size,
    }  # fmt: skip
    if args.dry_run:
        plan = plan_optimize(table.snapshot(), **options)
        return {"uri": table.uri, "dry_run": True, "mode": plan.mode, "columns": list(plan.columns),
                "version": plan.snapshot.version, "num_bins": len(plan.bins), "num_files": plan.num_files,
                "num_bytes": plan.num_bytes, "num_batches": len(plan.batches),
                "considered_files": plan.considered_files}  # fmt: skip
    bar = ProgressBar("optimizing", sys.stderr) if args.progress or sys.stderr.isatty() else None

    def progress(report: dict[str, Any]) -> None:
        if bar is not None:
            bar(report["bytes_read"], report["bytes_planned"])

    try:
        metrics: OptimizeMetrics = table.optimize(progress=progress, **options)
    finally:
        if bar is not None:
            bar.close()
    return {"uri": table.uri, "dry_run": False, "metrics": metrics.to_dict()}


def print_optimize(doc: dict[str, Any], out: IO[str]) -> None:
    if doc["dry_run"]:
        how = f"{doc['mode']}" + (f" by {', '.join(doc['columns'])}" if doc["columns"] else "")
        print(f"would optimize {doc['uri']} at version {doc['version']} ({how}): {doc['num_files']:,} of "
              f"{doc['considered_files']:,} file(s), {human_bytes(doc['num_bytes'])}, in {doc['num_bins']} "
              f"bin(s) and {doc['num_batches']} commit(s)", file=out)  # fmt: skip
        return
    m = doc["metrics"]
    versions = ", ".join(str(v) for v in m["versions"]) or "none (nothing to do)"
    print(f"optimized {doc['uri']}: version(s) {versions}", file=out)
    print(pairs([
        ("files removed", f"{m['numFilesRemoved']:,} ({human_bytes(m['filesRemoved']['totalSize'])})"),
        ("files added", f"{m['numFilesAdded']:,} ({human_bytes(m['filesAdded']['totalSize'])})"),
        ("partitions", f"{m['partitionsOptimized']:,}"),
        ("bins", f"{m['numBins']:,} in {m['numBatches']:,} commit(s)"),
    ], indent="  "), file=out)  # fmt: skip


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
    "optimize": (optimize_doc, print_optimize),
    "restore": (restore_doc, print_restore),
}  # fmt: skip
