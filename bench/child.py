"""One measured run in a fresh interpreter: ``python -m bench.child BENCH IMPL [ARG ...]``.

``bench.BENCH.prepare(IMPL, *ARGS)`` does the imports and returns the work to time. The child then takes
its import baseline, runs the work once and prints one JSON line:

- ``wall_s``: ``time.perf_counter`` around the work only (no interpreter start, no imports);
- ``peak_rss_kib``: ``ru_maxrss`` of this process at the end, the absolute high-water mark;
- ``baseline_rss_kib``: ``ru_maxrss`` after the imports, before the work;
- ``peak_delta_kib``: the difference, the memory the work itself needed at its peak;
- ``user_s``, ``sys_s``, ``minor_faults``: CPU time and page faults of the work, to tell computing from
  memory traffic when wall times are noisy;
- ``pandas_loaded_by_work``: whether the work imported pandas (pyarrow does so lazily on the first
  ``pa.array``/``pa.scalar`` of non-Arrow data: about 0.15 s and 45 MiB in a fresh process);
- whatever facts the work returns (version, number of files), so the parent can check the answers; a fact
  given as a function is called after the figures are taken (reading back what the work wrote costs the
  work nothing).

Each implementation runs in its own process so that one's allocations never count against the other's.
"""

from __future__ import annotations

import gc
import importlib
import json
import resource
import sys
import time


def _usage() -> resource.struct_rusage:
    return resource.getrusage(resource.RUSAGE_SELF)  # ru_maxrss in KiB on Linux


def _high_water_kib() -> int:
    """This process's own peak RSS (``VmHWM``). ``ru_maxrss`` would start from the parent's high-water mark
    on Linux (execve keeps it), which hides a child that peaks lower than the bench harness itself."""
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    return _usage().ru_maxrss


def main(argv: list[str]) -> None:
    bench, impl, *args = argv
    work = importlib.import_module(f"bench.{bench}").prepare(impl, *args)
    gc.collect()
    pandas_before = "pandas" in sys.modules
    before = _usage()
    baseline = _high_water_kib()
    start = time.perf_counter()
    facts = work()
    wall = time.perf_counter() - start
    after = _usage()
    peak = _high_water_kib()
    result = {
        "wall_s": wall,
        "peak_rss_kib": peak,
        "baseline_rss_kib": baseline,
        "peak_delta_kib": peak - baseline,
        "user_s": after.ru_utime - before.ru_utime,
        "sys_s": after.ru_stime - before.ru_stime,
        "minor_faults": after.ru_minflt - before.ru_minflt,
        "pandas_loaded_by_work": not pandas_before and "pandas" in sys.modules,
    }
    # A fact given as a function is a check of what the work wrote, run once the figures are taken.
    facts = {key: value() if callable(value) else value for key, value in facts.items()}
    print(json.dumps({**result, **facts}))


if __name__ == "__main__":
    main(sys.argv[1:])
