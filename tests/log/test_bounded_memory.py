"""Bounded memory: writing from a RecordBatchReader and reading through ``Scan.to_reader()`` never hold the
data, measured as the peak resident memory of a child process against a limit the data exceeds several
times over.

Each step runs in a fresh interpreter (``python -c``) that reports its own high-water mark (``VmHWM``) above
what it held after its imports. The writer consumes a generator of random int64 batches (incompressible, so
bytes on disk are bytes in memory) of ``DATA_BYTES`` in all; the reader streams the table back, checking
the row count and the sum, and holds only ``read_ahead`` files at once.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

LIMIT_BYTES = 160 * 1024 * 1024  # what a step may add to its resident memory
DATA_BYTES = 480 * 1024 * 1024  # the table: three times the limit
ROWS_PER_BATCH = 512 * 1024  # 4 MiB per int64 column
SEED = 20261126

_CHILD = """
import json, sys, numpy as np, pyarrow as pa
from airflow_provider_delta.log import DeltaTable

def high_water():
    with open("/proc/self/status") as fh:
        return next(int(line.split()[1]) * 1024 for line in fh if line.startswith("VmHWM:"))

uri, step = sys.argv[1], sys.argv[2]
batches, rows, seed = (int(a) for a in sys.argv[3:6])
schema = pa.schema([("a", pa.int64()), ("b", pa.int64())])
pa.array([1]).sum(); np.random.default_rng(0)  # warm up what the work would import
before = high_water()
if step == "write":
    def generate():
        rng = np.random.default_rng(seed)
        for _ in range(batches):
            columns = [pa.array(rng.integers(0, 2**62, rows)) for _ in schema]
            yield pa.record_batch(columns, schema=schema)
    reader = pa.RecordBatchReader.from_batches(schema, generate())
    result = DeltaTable(uri).write(reader, target_file_size=8 * 1024 * 1024)
    facts = {"version": result.version}
else:
    total, count = 0, 0
    for batch in DeltaTable(uri).scan(read_ahead=3).to_reader():
        count += batch.num_rows
        total += batch.nbytes
    facts = {"rows": count, "bytes": total}
print(json.dumps({"peak": high_water() - before, **facts}))
"""


def _run(uri: str, step: str, batches: int) -> dict:
    script = textwrap.dedent(_CHILD)
    args = [uri, step, str(batches), str(ROWS_PER_BATCH), str(SEED)]
    proc = subprocess.run([sys.executable, "-c", script, *args], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_writes_from_a_reader_and_streams_reads_in_bounded_memory(tmp_path: Path) -> None:
    batches = DATA_BYTES // (ROWS_PER_BATCH * 16)
    uri = str(tmp_path / "big")
    print(f"seed {SEED}: {batches} batches of {ROWS_PER_BATCH} rows, {DATA_BYTES >> 20} MiB of Arrow data")
    wrote = _run(uri, "write", batches)
    read = _run(uri, "read", batches)
    print(f"write peak {wrote['peak'] >> 20} MiB, read peak {read['peak'] >> 20} MiB, "
          f"limit {LIMIT_BYTES >> 20} MiB, data read {read['bytes'] >> 20} MiB")  # fmt: skip
    assert wrote["version"] == 0
    assert read["rows"] == batches * ROWS_PER_BATCH
    assert read["bytes"] >= DATA_BYTES > 2 * LIMIT_BYTES
    assert wrote["peak"] < LIMIT_BYTES, f"the writer held {wrote['peak'] >> 20} MiB"
    assert read["peak"] < LIMIT_BYTES, f"the streaming reader held {read['peak'] >> 20} MiB"
