"""A scan never loads pandas: pyarrow imports it the first time it converts a Python value (``pa.scalar``,
``pa.array``, a Python literal given to a compute function), which costs a fresh task about 0.2 s of CPU
and 45 MiB, more than reading a small table. Each read runs in a fresh interpreter that fails if pandas is
imported, over partition values of every type, filters that skip by partition values and by statistics,
``_metadata`` columns and deletion vectors; its row counts are checked against the same reads here. Not
covered: a ``pyarrow.compute.Expression`` filter, which Arrow evaluates with ``pyarrow.dataset``, whose
import loads pandas.
"""

from __future__ import annotations

import datetime as dt
import json
import subprocess
import sys
from decimal import Decimal

import pyarrow as pa

from airflow_provider_delta.log import DeltaTable, read_table, write

# Each read as the keyword arguments of ``to_pyarrow_table``, in Python source: the child evaluates them.
READS = {
    "everything": "{}",
    "partition =": "{'filter': [('s', '=', 'b')]}",
    "partition in": "{'filter': [('d', 'in', [dt.date(2024, 1, 2), dt.date(2024, 1, 3)])]}",
    "partition not null": "{'filter': 'ts IS NOT NULL AND dec > 0'}",
    "statistics <": "{'filter': [('id', '<', 10)]}",
    "statistics text": "{'filter': \"name >= 'n-0050' AND id != 3\"}",
    "statistics timestamp": "{'filter': [('at', '>', dt.datetime(2024, 1, 1, 0, 0, 30, tzinfo=dt.UTC))]}",
    "metadata": "{'columns': ['id'], 'metadata': ['file_path', 'row_index']}",
    "row count": "{'columns': []}",
}
CHILD = """
import datetime as dt, importlib.abc, json, sys
from airflow_provider_delta.log import DeltaTable

class Imports(importlib.abc.MetaPathFinder):
    seen = []

    def find_spec(self, name, path, target=None):
        self.seen.append(name)  # pyarrow swallows an ImportError here, so the attempt is what counts

sys.meta_path.insert(0, Imports())
counts = {}
for name, code in json.loads(sys.argv[2]).items():
    counts[name] = DeltaTable(sys.argv[1]).to_pyarrow_table(**eval(code)).num_rows
    assert "pandas" not in Imports.seen, f"the read {name!r} imported pandas"
print(json.dumps(counts))
"""


def _table(n: int) -> pa.Table:
    return pa.table(
        {
            "id": pa.array(range(n), pa.int64()),
            "value": pa.array([(i * 7919 % 1000) / 1000 for i in range(n)], pa.float64()),
            "name": pa.array([f"n-{i % 100:04d}" for i in range(n)]),
            "at": pa.array([dt.datetime(2024, 1, 1, 0, 0, i % 60, tzinfo=dt.UTC) for i in range(n)],
                           pa.timestamp("us", "UTC")),  # fmt: skip
            "s": pa.array(["a", "b", None, "c d"][i % 4] for i in range(n)),
            "d": pa.array([dt.date(2024, 1, 1 + i % 3) for i in range(n)], pa.date32()),
            "ts": pa.array([None if i % 5 == 0 else dt.datetime(2024, 2, 1, i % 2) for i in range(n)],
                           pa.timestamp("us", "UTC")),  # fmt: skip
            "dec": pa.array([Decimal(i % 3 - 1) / 4 for i in range(n)], pa.decimal128(10, 2)),
        }
    )


def _expected(uri: str) -> dict[str, int]:
    return {name: read_table(uri, **eval(code, {"dt": dt})).num_rows for name, code in READS.items()}


def _reads_in_a_fresh_interpreter(uri: str) -> dict[str, int]:
    done = subprocess.run(
        [sys.executable, "-c", CHILD, uri, json.dumps(READS)], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)


def test_reads_of_a_partitioned_table_do_not_import_pandas(tmp_path):
    uri = str(tmp_path / "t")
    write(uri, _table(400), partition_by=["s", "d", "ts", "dec"])
    write(uri, _table(200), partition_by=["s", "d", "ts", "dec"])
    expected = _expected(uri)
    assert expected["partition ="] < expected["everything"]  # the filters do select
    assert _reads_in_a_fresh_interpreter(uri) == expected


def test_a_read_with_deletion_vectors_does_not_import_pandas(tmp_path):
    uri = str(tmp_path / "dv")
    write(uri, _table(300), configuration={"delta.enableDeletionVectors": "true"})
    table = DeltaTable(uri)
    path = table.snapshot().file_paths()[0]
    table.transaction().delete_rows({path: list(range(0, 300, 3))}).commit("DELETE")
    expected = _expected(uri)
    assert expected["everything"] == 200
    assert _reads_in_a_fresh_interpreter(uri) == expected
