"""Benchmarks of the Delta log core against deltalake; without a BENCH, every benchmark runs.

Usage: ``python -m bench [BENCH] [--runs N] [--out DIR] [--data-dir DIR] [--scale F]``.

A benchmark is a module of this package named in ``BENCHES`` with three functions: ``add_arguments(parser)``
for its own options, ``run(args) -> dict`` (the parent side: tables, runs, printing) and ``prepare(impl,
*args)`` (the child side, see ``bench.child``). Adding ``commit``, ``checkpoint`` or ``vacuum`` is a new
module and a name here.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from pathlib import Path

from . import measure

BENCHES = ("read", "update", "commit", "checkpoint", "vacuum", "spark", "scan", "optimize", "changes",
           "row_changes", "task", "scale", "dml")
DEFAULT_DATA_DIR = Path("/tmp/airflow-provider-delta-bench")
DEFAULT_OUT = Path(__file__).resolve().parent / "results"  # ignored by git


def _common_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--runs", type=int, default=5, help="runs per implementation (default 5); medians reported"
    )
    parser.add_argument(
        "--out", type=Path, default=DEFAULT_OUT, help=f"where BENCH.json goes (default {DEFAULT_OUT})"
    )
    parser.add_argument(
        "--data-dir",
        type=Path,
        default=DEFAULT_DATA_DIR,
        help=f"cache of generated tables (default {DEFAULT_DATA_DIR})",
    )
    parser.add_argument(
        "--scale",
        type=float,
        default=None,
        help="size factor of the generated tables for quick runs (BENCH_SCALE; default 1: recorded figures)",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.splitlines()[0])
    _common_options(parser)
    sub = parser.add_subparsers(dest="bench", metavar="BENCH")
    for name in BENCHES:
        module = importlib.import_module(f"bench.{name}")
        child = sub.add_parser(name, help=module.__doc__.splitlines()[0])
        _common_options(child)
        module.add_arguments(child)
        child.set_defaults(module=module)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = build_parser()
    first = parser.parse_args(argv)
    # Without a BENCH, run each with the options given (argparse keeps a subcommand's options after it).
    runs = [first] if first.bench else [parser.parse_args([name, *argv]) for name in BENCHES]
    for args in runs:
        if args.runs < 1:
            parser.error("--runs must be at least 1")
        if args.scale is not None:  # for the helper and child processes too
            os.environ["BENCH_SCALE"] = f"{args.scale:g}"
        payload = args.module.run(args)
        path = measure.write_results(args.out, args.bench, {"runs": args.runs, **payload})
        print(f"{args.bench}: results written to {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
