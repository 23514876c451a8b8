"""``deltalog``: look at and maintain a Delta table from a shell, for people on call.

Part of the core, so it runs wherever the package is installed, without starting Airflow or Spark: stdlib,
pyarrow and the core only. Output is an aligned, human-readable listing, or with ``--json`` one JSON document
with stable keys for scripts. Exit codes: 0 success, 1 a table or storage error, 2 a usage error; an error
is one line on stderr, ``deltalog: <reason>`` (``--debug`` adds the traceback). Storage option values may
be credentials, so they are never printed, not even in an error.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import traceback
from collections.abc import Callable, Sequence
from typing import IO, Any, NoReturn

from ..base.errors import DeltaError
from ..base.redaction import is_secret_option, redact, secret_values
from ..snapshot.history import timestamp_ms
from ..table import DeltaTable
from . import layout, uniform
from .output import ProgressBar, columns, human_bytes, iso, pairs

PROG = "deltalog"
Printer = Callable[[dict[str, Any], IO[str]], None]


class UsageError(Exception):
    """Bad command-line arguments: exit code 2."""


class _Parser(argparse.ArgumentParser):
    # argparse prints usage plus a message and exits; we want one redacted line and an exit code from main().
    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{message} (see '{self.prog} --help')")


# -- arguments -------------------------------------------------------------------------------------------
def _version_arg(text: str) -> int:
    if not re.fullmatch(r"\d+", text.strip()):
        raise argparse.ArgumentTypeError(f"a version is a non-negative integer, not {text!r}")
    return int(text)


def _positive_int(text: str) -> int:
    if not re.fullmatch(r"\d+", text.strip()) or int(text) < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, not {text!r}")
    return int(text)


def _timestamp_arg(text: str) -> int:
    """Milliseconds since the epoch, or ISO-8601 (UTC when it has no offset), as the core accepts."""
    try:
        return int(text) if re.fullmatch(r"-?\d+", text.strip()) else timestamp_ms(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"a timestamp is ms since the epoch or ISO-8601 such as 2024-05-01T12:00:00Z, not {text!r}"
        ) from None


def _hours_arg(text: str) -> float:
    try:
        hours = float(text)
    except ValueError:
        hours = -1.0
    if not hours >= 0:
        raise argparse.ArgumentTypeError(f"retention hours must be a number >= 0, not {text!r}")
    return hours


def _add_globals(parser: argparse.ArgumentParser, *, sub: bool) -> None:
    # Accepted before and after the command; after it they use their own dests (argparse would let the
    # subcommand's empty list replace the one given before it) and are merged in main().
    default = argparse.SUPPRESS if sub else None
    parser.add_argument(
        "--storage-option",
        "-o",
        action="append",
        metavar="KEY=VALUE",
        dest="storage_option_sub" if sub else "storage_option",
        default=default,
        help="storage option for fsspec (repeatable): true/false and integers are converted, a value "
        "starting with { is JSON (client_kwargs={...}); values are never printed",
    )
    parser.add_argument("--debug", action="store_true", default=default, help="show tracebacks of errors")
    parser.add_argument(
        "--progress",
        action="store_true",
        default=default,
        help="draw a progress bar on stderr even when it is not a terminal",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog=PROG, description="Inspect and maintain Delta tables (reads the log directly).")
    _add_globals(parser, sub=False)
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND", parser_class=_Parser)

    def command(name: str, help: str) -> argparse.ArgumentParser:
        p = commands.add_parser(name, help=help, description=help)
        p.add_argument("uri", metavar="URI", help="table root: a path, file://, s3://, ... URL")
        _add_globals(p, sub=True)
        p.add_argument("--json", action="store_true", help="print one JSON document instead of a listing")
        return p

    p = command("snapshot", "the table's state at the latest version, at --version or at --timestamp")
    when = p.add_mutually_exclusive_group()
    when.add_argument("--version", type=_version_arg, metavar="N", help="the state at version N")
    when.add_argument(
        "--timestamp",
        type=_timestamp_arg,
        metavar="T",
        help="the latest version committed at or before T (ms since the epoch or ISO-8601, UTC by default)",
    )
    p.add_argument("--files", action="store_true", help="list the live data files too")

    p = command("history", "commits, newest first")
    p.add_argument("--limit", type=_positive_int, metavar="N", help="only the newest N commits")

    p = command("checkpoint", "write a checkpoint and point _last_checkpoint at it")
    p.add_argument("--version", type=_version_arg, metavar="N", help="checkpoint version N (default latest)")
    p.add_argument("--parts", type=_positive_int, metavar="P", help="split the checkpoint into P parts")

    p = command("vacuum", "delete data files no version within the retention needs (dry run with --dry-run)")
    p.add_argument(
        "--retention-hours",
        type=_hours_arg,
        metavar="H",
        help="keep files removed less than H hours ago (default: delta.deletedFileRetentionDuration)",
    )
    p.add_argument("--dry-run", action="store_true", help="only list what would be deleted")
    p.add_argument(
        "--no-enforce-retention",
        action="store_true",
        help="allow a retention shorter than the table's (unsafe while readers or writers are running)",
    )

    command("cleanup", "delete log files older than delta.logRetentionDuration that no version needs")

    p = command("compact-log", "write a log compaction of the commits since the newest checkpoint")
    p.add_argument(
        "--start", type=_version_arg, metavar="N", help="first commit (default: after the checkpoint)"
    )
    p.add_argument("--end", type=_version_arg, metavar="N", help="last commit (default: the latest)")

    p = command("validate", "compare a version's checksum (NNN.crc) with the state its log replays to")
    p.add_argument("--version", type=_version_arg, metavar="N", help="the version (default: the latest)")
    layout.add_commands(command, _version_arg, _timestamp_arg)
    uniform.add_commands(command)
    return parser


def parse_storage_options(pairs: Sequence[str]) -> dict[str, Any]:
    """``KEY=VALUE`` strings to fsspec options. A ValueError names the key at most, never the value."""
    options: dict[str, Any] = {}
    for index, pair in enumerate(pairs, start=1):
        key, sep, raw = pair.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"--storage-option #{index} is not KEY=VALUE")
        value: Any = raw
        if raw.lower() in ("true", "false"):
            value = raw.lower() == "true"
        elif re.fullmatch(r"-?\d+", raw):
            value = int(raw)
        elif raw.lstrip().startswith("{"):  # nested options, e.g. client_kwargs={"endpoint_url": ...}
            try:
                value = json.loads(raw)
            except ValueError:
                raise ValueError(f"--storage-option {key}: the value is not valid JSON") from None
        options[key.strip()] = value
    return options


def _secrets(argv: Sequence[str]) -> list[str]:
    """Values not to print: those of every ``KEY=VALUE`` argument whose key names a secret (``secret=``,
    ``token=``, ``account_key=``, also under a mistyped flag, which argparse would echo), and the secret
    values inside a JSON one (``client_kwargs={...}``). Endpoints, regions and account names stay
    readable, so that an error says which endpoint failed."""
    found = set()
    for arg in argv:
        for prefix in ("--storage-option=", "-o"):
            if arg.startswith(prefix) and "=" in arg[len(prefix) :]:
                arg = arg[len(prefix) :]
        key, sep, value = arg.partition("=")
        if not sep or not re.fullmatch(r"-{0,2}[A-Za-z_][\w.-]*", key):
            continue
        if is_secret_option(key.lstrip("-")):
            found.add(value)
        elif value.lstrip().startswith("{"):
            try:
                found.update(secret_values(json.loads(value)))
            except ValueError:
                continue
    return sorted(v for v in found if len(v) >= 3)


def _redact(text: str, secrets: Sequence[str]) -> str:
    """Every form of each secret (percent-encoded, JSON-escaped, base64, ...; ``redaction``), and the
    secret itself even when shorter than those forms' minimum."""
    for secret in sorted(secrets, key=len, reverse=True):
        text = text.replace(secret, "***")
    return redact(text, secrets)


# -- commands --------------------------------------------------------------------------------------------
def _files_doc(files: Any) -> list[dict[str, Any]]:
    rows = files.select(["path", "size", "partitionValues", "modificationTime", "deletionVector"]).to_pylist()
    return [
        {
            "path": r["path"],
            "size": r["size"],
            "partition_values": dict(r["partitionValues"] or []),
            "modification_time": r["modificationTime"],
            "deletion_vector": r["deletionVector"],
        }
        for r in rows
    ]


def snapshot_doc(table: DeltaTable, args: argparse.Namespace) -> dict[str, Any]:
    snap = table.snapshot(version=args.version, timestamp=args.timestamp)
    p, md = snap.protocol, snap.metadata
    total = snap.table_size_bytes  # from the version checksum when there is one: no file list read
    return {
        "uri": table.uri,
        "version": snap.version,
        "timestamp": snap.timestamp,
        "timestamp_iso": iso(snap.timestamp),
        "protocol": {
            "min_reader_version": p.min_reader_version,
            "min_writer_version": p.min_writer_version,
            "reader_features": None if p.reader_features is None else sorted(p.reader_features),
            "writer_features": None if p.writer_features is None else sorted(p.writer_features),
        },
        "metadata": {
            "id": md.id,
            "name": md.name,
            "description": md.description,
            "partition_columns": list(md.partition_columns),
            "configuration": dict(md.configuration),
            "created_time": md.created_time,
            "schema": md.schema,
        },
        "num_files": snap.num_files,
        "size_in_bytes": total,
        "app_transactions": dict(sorted(snap.app_transactions.items())),
        "files": _files_doc(snap.files) if args.files else None,
    }


def print_snapshot(doc: dict[str, Any], out: IO[str]) -> None:
    p, md = doc["protocol"], doc["metadata"]
    protocol = f"reader {p['min_reader_version']}, writer {p['min_writer_version']}"
    for kind in ("reader", "writer"):
        if p[f"{kind}_features"]:
            protocol += f"; {kind} features: " + ", ".join(p[f"{kind}_features"])
    items = [
        ("table", doc["uri"]),
        ("version", doc["version"]),
        ("timestamp", doc["timestamp_iso"]),
        ("protocol", protocol),
        ("partition columns", ", ".join(md["partition_columns"]) or "(none)"),
        ("files", f"{doc['num_files']:,}"),
        ("size", human_bytes(doc["size_in_bytes"])),
    ]
    print(pairs(items), file=out)
    for title, mapping in (
        ("app transactions", doc["app_transactions"]),
        ("properties", md["configuration"]),
    ):
        print(f"{title}:" + ("" if mapping else " (none)"), file=out)
        if mapping:
            print(pairs(sorted(mapping.items()), indent="  "), file=out)
    if doc["files"] is not None:
        rows = [
            (
                f["path"],
                f"{f['size']:,}",
                iso(f["modification_time"]),
                ", ".join(f"{k}={v}" for k, v in f["partition_values"].items()),
            )
            for f in doc["files"]
        ]
        print(file=out)
        print(columns(("PATH", "SIZE", "MODIFIED", "PARTITION"), rows), file=out)


def _parameters(params: Any, limit: int = 80) -> str:
    if not isinstance(params, dict):
        return ""
    text = ", ".join(f"{k}={v}" for k, v in sorted(params.items()) if v is not None)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def history_doc(table: DeltaTable, args: argparse.Namespace) -> dict[str, Any]:
    entries = table.history(limit=args.limit)
    commits = [
        {
            "version": e.version,
            "timestamp": e.timestamp,
            "timestamp_iso": iso(e.timestamp),
            "operation": e.operation,
            "operation_parameters": e.commit_info.get("operationParameters"),
            "commit_info": e.commit_info,
        }
        for e in entries
    ]
    return {"uri": table.uri, "history": commits}


def print_history(doc: dict[str, Any], out: IO[str]) -> None:
    rows = [
        (c["version"], c["timestamp_iso"], c["operation"] or "", _parameters(c["operation_parameters"]))
        for c in doc["history"]
    ]
    print(columns(("VERSION", "TIMESTAMP", "OPERATION", "PARAMETERS"), rows), file=out)


def checkpoint_doc(table: DeltaTable, args: argparse.Namespace) -> dict[str, Any]:
    cp = table.checkpoint(version=args.version, parts=args.parts)
    return {
        "uri": table.uri,
        "version": cp.version,
        "parts": cp.parts or 1,
        "size": cp.size,
        "size_in_bytes": cp.size_in_bytes,
        "num_of_add_files": cp.num_of_add_files,
    }


def print_checkpoint(doc: dict[str, Any], out: IO[str]) -> None:
    print(f"wrote a checkpoint of version {doc['version']} of {doc['uri']}", file=out)
    size = human_bytes(doc["size_in_bytes"]) if doc["size_in_bytes"] is not None else None
    items = [("parts", doc["parts"]), ("actions", doc["size"]), ("add files", doc["num_of_add_files"])]
    print(pairs([*items, ("size", size)], indent="  "), file=out)


def vacuum_doc(table: DeltaTable, args: argparse.Namespace) -> dict[str, Any]:
    options = {
        "retention_hours": args.retention_hours,
        "enforce_retention_duration": not args.no_enforce_retention,
    }
    doc = _vacuum_report(table.vacuum(dry_run=True, **options), table.uri)
    if args.dry_run:
        return doc
    # Say what is about to go before it goes: deletion cannot be undone.
    print(f"deleting {_vacuum_summary(doc)}", file=sys.stderr if args.json else sys.stdout, flush=True)
    if not (args.progress or sys.stderr.isatty()):
        return _vacuum_report(table.vacuum(dry_run=False, **options), table.uri)
    bar = ProgressBar("vacuum", sys.stderr)
    try:
        return _vacuum_report(table.vacuum(dry_run=False, progress=bar, **options), table.uri)
    finally:
        bar.close()


def _vacuum_report(report: Any, uri: str) -> dict[str, Any]:
    return {
        "uri": uri,
        "dry_run": report.dry_run,
        "retention_hours": report.retention_hours,
        "num_files": len(report.files),
        "bytes": report.bytes,
        "seconds": report.seconds,
        "files": list(report.files),
    }


def _vacuum_summary(doc: dict[str, Any]) -> str:
    return (
        f"{doc['num_files']:,} files, {human_bytes(doc['bytes'])}, from {doc['uri']} "
        f"(retention {doc['retention_hours']:g} hours)"
    )


def print_vacuum(doc: dict[str, Any], out: IO[str]) -> None:
    if not doc["dry_run"]:
        print(
            f"deleted {doc['num_files']:,} files, {human_bytes(doc['bytes'])}, in {doc['seconds']:.1f} s",
            file=out,
        )
        return
    print(f"dry run: would delete {_vacuum_summary(doc)}", file=out)
    for path in doc["files"]:
        print(f"  {path}", file=out)


def cleanup_doc(table: DeltaTable, args: argparse.Namespace) -> dict[str, Any]:
    deleted = table.cleanup_expired_logs()
    return {"uri": table.uri, "num_files": len(deleted), "deleted": list(deleted)}


def print_cleanup(doc: dict[str, Any], out: IO[str]) -> None:
    print(f"deleted {doc['num_files']:,} expired log files from {doc['uri']}", file=out)
    for name in doc["deleted"]:
        print(f"  {name}", file=out)


def compact_log_doc(table: DeltaTable, args: argparse.Namespace) -> dict[str, Any]:
    return {"uri": table.uri, "written": table.compact_log(args.start, args.end)}


def print_compact_log(doc: dict[str, Any], out: IO[str]) -> None:
    if doc["written"] is None:
        print(f"nothing to compact in {doc['uri']} (fewer than two commits, or already compacted)", file=out)
    else:
        print(f"wrote {doc['written']} in {doc['uri']}", file=out)


def validate_doc(table: DeltaTable, args: argparse.Namespace) -> dict[str, Any]:
    crc = table.validate_checksum(args.version)  # ChecksumError (named, one line) when they disagree
    totals = crc.totals
    return {
        "uri": table.uri,
        "version": crc.version,
        "num_files": totals.num_files if totals else None,
        "table_size_bytes": totals.table_size_bytes if totals else None,
    }


def print_validate(doc: dict[str, Any], out: IO[str]) -> None:
    print(f"the checksum of version {doc['version']} of {doc['uri']} agrees with its log: "
          f"{doc['num_files']:,} files, {human_bytes(doc['table_size_bytes'])}", file=out)  # fmt: skip


COMMANDS: dict[str, tuple[Callable[[DeltaTable, argparse.Namespace], dict[str, Any]], Printer]] = {
    "snapshot": (snapshot_doc, print_snapshot),
    "history": (history_doc, print_history),
    "checkpoint": (checkpoint_doc, print_checkpoint),
    "vacuum": (vacuum_doc, print_vacuum),
    "cleanup": (cleanup_doc, print_cleanup),
    "compact-log": (compact_log_doc, print_compact_log),
    "validate": (validate_doc, print_validate),
    **layout.COMMANDS,
    **uniform.COMMANDS,
}


def _run(args: argparse.Namespace, options: dict[str, Any]) -> None:
    make_doc, printer = COMMANDS[args.command]
    doc = make_doc(DeltaTable(args.uri, options or None), args)
    if args.json:
        json.dump(doc, sys.stdout, indent=2, default=str)
        sys.stdout.write("\n")
    else:
        printer(doc, sys.stdout)
    sys.stdout.flush()


def _reason(exc: BaseException, command: str) -> str:
    if isinstance(exc, ModuleNotFoundError) and (exc.name or "").startswith(__package__ + "."):
        return f"{command} is not available in this installation: it has no module {exc.name}"
    text = str(exc) or type(exc).__name__
    if not isinstance(exc, DeltaError | OSError):
        text = f"{type(exc).__name__}: {text}"
    return " ".join(text.split())  # one line, whatever the message holds


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``deltalog`` with ``argv`` (default ``sys.argv[1:]``); returns the exit code."""
    argv = list(sys.argv[1:] if argv is None else argv)
    secrets = _secrets(argv)
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
        try:
            options = parse_storage_options(
                (args.storage_option or []) + getattr(args, "storage_option_sub", [])
            )
        except ValueError as exc:
            parser.error(str(exc))
    except UsageError as exc:
        print(f"{PROG}: {_redact(str(exc), secrets)}", file=sys.stderr)
        return 2
    except SystemExit as exc:  # --help
        return exc.code if isinstance(exc.code, int) else 0
    try:
        _run(args, options)
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # The reader went away (deltalog history | head): not an error worth a line.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    except Exception as exc:
        if args.debug:
            sys.stderr.write(_redact("".join(traceback.format_exception(exc)), secrets))
        print(f"{PROG}: {_redact(_reason(exc, args.command), secrets)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
