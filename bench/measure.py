"""Shared by every benchmark: run implementations in alternating fresh processes, take medians, report.

A benchmark module gives ``prepare(impl, *args)`` (run inside ``bench.child``) and lets ``compare`` run it;
``compare`` returns the per-run samples and their medians, ``format_table`` prints them.
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import subprocess
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

IMPLS = ("ours", "deltalake")
# pyarrow alone reading (and, for checkpoints, writing) the same files, with no reconciliation: how far above
# the cheapest possible answer the core is. A benchmark that has one passes ``impls=WITH_FLOOR``.
FLOOR = "floor"
WITH_FLOOR = (*IMPLS, FLOOR)
METRICS = (
    # key in a sample, label, unit scale, format
    ("wall_s", "wall (s)", 1.0, "{:.3f}"),
    ("peak_delta_kib", "peak memory over imports (MiB)", 1 / 1024, "{:.0f}"),
    ("peak_rss_kib", "peak RSS, absolute (MiB)", 1 / 1024, "{:.0f}"),
    ("user_s", "user CPU (s)", 1.0, "{:.3f}"),
    ("sys_s", "system CPU (s)", 1.0, "{:.3f}"),
)
_ROOT = Path(__file__).resolve().parent.parent


def child_env(data_dir: Path) -> dict[str, str]:
    """The environment of measured runs: this repository importable, and a bytecode cache.

    Some environments set PYTHONDONTWRITEBYTECODE; every fresh child would then compile from source the
    modules it imports lazily inside the timed region. The cache lives under the data directory, so the
    virtualenv is never written to.
    """
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(_ROOT), os.environ.get("PYTHONPATH")]))
    env["PYTHONPYCACHEPREFIX"] = str(data_dir / "pycache")
    return env


def run_child(bench: str, impl: str, args: list[str], env: dict[str, str]) -> dict[str, Any]:
    """One run of ``impl`` in a fresh interpreter; its JSON report."""
    proc = subprocess.run(
        [sys.executable, "-m", "bench.child", bench, impl, *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=_ROOT,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"{bench} {impl} {args} failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def compare(
    bench: str,
    args: list[str],
    runs: int,
    expect: dict[str, Any],
    data_dir: Path,
    impls: tuple[str, ...] = IMPLS,
) -> dict[str, Any]:
    """``runs`` runs of each implementation, alternating and swapping who goes first each round.

    One unrecorded warm-up run each first fills the OS page cache and the bytecode cache, so that the
    first recorded run is not the odd one out. Every run must report the facts in ``expect`` (e.g. the
    version and the number of files), so a fast wrong answer never passes as a result.
    """
    env = child_env(data_dir)
    samples: dict[str, list[dict[str, Any]]] = {impl: [] for impl in impls}
    for i in range(-1, runs):
        for impl in impls if i % 2 == 0 else impls[::-1]:
            sample = run_child(bench, impl, args, env)
            # The floor answers only what pyarrow alone can (it does not reconcile): not checked.
            checked = {} if impl == FLOOR else expect
            wrong = {k: (sample.get(k), v) for k, v in checked.items() if sample.get(k) != v}
            if wrong:
                raise RuntimeError(f"{impl} gave wrong answers on {args}: (got, expected) = {wrong}")
            if i >= 0:
                samples[impl].append(sample)
    medians = {
        impl: {key: statistics.median(s[key] for s in samples[impl]) for key, *_ in METRICS} for impl in impls
    }
    ranges = {
        impl: {
            key: [min(s[key] for s in samples[impl]), max(s[key] for s in samples[impl])]
            for key, *_ in METRICS
        }
        for impl in impls
    }
    # Without deltalake (a table too big for it), no ratio to it.
    ratios = {key: _ratio(medians["ours"][key], medians["deltalake"][key]) if "deltalake" in medians else None
              for key, *_ in METRICS}  # fmt: skip
    result = {
        "runs": runs,
        "samples": samples,
        "median": medians,
        "range": ranges,
        "ratio_ours_over_deltalake": ratios,
    }
    if FLOOR in impls:
        result["ratio_ours_over_floor"] = {
            key: _ratio(medians["ours"][key], medians[FLOOR][key]) for key, *_ in METRICS
        }
    return result


def _ratio(ours: float, theirs: float) -> float | None:
    return ours / theirs if theirs else None


def format_table(title: str, result: dict[str, Any], goals: dict[str, float]) -> str:
    """A Markdown table of medians and ratios, with the goal per metric where there is one (a goal
    ``KEY@floor`` is judged on the ratio to the floor)."""
    floor = "ratio_ours_over_floor" in result
    head = "| metric | ours | deltalake | ours/deltalake |" + (" floor | ours/floor |" if floor else "")
    lines = [
        f"{title} (median of {result['runs']} runs)",
        "",
        head + " goal |",
        "| --- | ---: | ---: | ---: |" + (" ---: | ---: |" if floor else "") + " --- |",
    ]
    for key, label, scale, fmt in METRICS:
        ours, theirs = (result["median"][impl][key] * scale for impl in IMPLS)
        ratio = result["ratio_ours_over_deltalake"][key]
        verdicts = [_verdict(goals.get(key), ratio, "")]
        row = f"| {label} | {fmt.format(ours)} | {fmt.format(theirs)} | {_ratio_text(ratio)} |"
        if floor:
            to_floor = result["ratio_ours_over_floor"][key]
            row += f" {fmt.format(result['median'][FLOOR][key] * scale)} | {_ratio_text(to_floor)} |"
            verdicts.append(_verdict(goals.get(f"{key}@floor"), to_floor, " of floor"))
        lines.append(f"{row} {'; '.join(v for v in verdicts if v)} |")
    ranges = result["range"]
    text = ", ".join(f"{impl} {lo:.3f}-{hi:.3f} s" for impl, (lo, hi) in
                     ((i, ranges[i]["wall_s"]) for i in ranges))  # fmt: skip
    lines += ["", f"wall range: {text}"]
    return "\n".join(lines)


def _ratio_text(ratio: float | None) -> str:
    return "n/a" if ratio is None else f"{ratio:.2f}x"


def _verdict(goal: float | None, ratio: float | None, what: str) -> str:
    if goal is None or ratio is None:
        return ""
    return f"<= {goal:.1f}x{what}: {'met' if ratio <= goal else 'MISSED'}"


def environment() -> dict[str, Any]:
    """What the figures depend on: machine, Python and library versions."""
    mem_kib = 0
    if os.path.exists("/proc/meminfo"):
        with open("/proc/meminfo") as f:
            mem_kib = int(next(line for line in f if line.startswith("MemTotal")).split()[1])
    return {
        "cpus": os.cpu_count(),
        "memory_gib": round(mem_kib / 1024**2, 1),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "versions": {name: _version(name) for name in ("pyarrow", "deltalake", "numpy", "fsspec")},
    }


def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def write_results(out_dir: Path, bench: str, payload: dict[str, Any]) -> Path:
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"{bench}.json"
    path.write_text(json.dumps({"bench": bench, "environment": environment(), **payload}, indent=2) + "\n")
    return path
