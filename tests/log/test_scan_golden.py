"""The Arrow scan against the golden tables' expected contents: every DAT table at every version it has
expected rows for, and every Delta Spark golden table with a Spark-written ``expected/`` folder (deletion
vectors, column mapping by name and id, partitions with nulls, schema changes, all primitive types).
Tables the scan refuses must be refused by name (an unsupported reader feature), never misread.
"""

from __future__ import annotations

import datetime as dt
import json
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from golden import GoldenTable, load_tables

from airflow_provider_delta.log import DeltaTable, UnsupportedFeatureError

TABLES = [t for t in load_tables() if t.dat_versions or t.spark_expected]
# Timestamp partition values without an offset are in the writer's session time zone, which the log does
# not record; readers take them as UTC (partition_values.parse_partition_value). This table was written in
# US Pacific daylight time: our value is 7 hours earlier than the one its writer meant.
SESSION_ZONE = {"delta-golden/data-reader-partition-values": ("as_timestamp", dt.timedelta(hours=7))}


def _value(v: Any) -> Any:
    if isinstance(v, dt.datetime):
        return v.timestamp() if v.tzinfo else v.isoformat()
    if isinstance(v, Decimal):
        return str(v.normalize()) if v == v else "NaN"
    if isinstance(v, float) and v != v:
        return "NaN"
    if isinstance(v, dict):
        return tuple(sorted((k, _value(x)) for k, x in v.items()))
    if isinstance(v, list):
        return tuple(_value(x) for x in v)
    return v


def _rows(table: pa.Table, columns: list[str]) -> list[tuple]:
    return sorted((tuple(_value(r[c]) for c in columns) for r in table.select(columns).to_pylist()), key=repr)


def _expected(folder: Path) -> pa.Table:
    files = sorted(folder.rglob("*.parquet"))
    return pa.concat_tables([pq.read_table(f) for f in files], promote_options="permissive")


@pytest.mark.parametrize("table", TABLES, ids=[t.id for t in TABLES])
def test_golden_expected_rows(table: GoldenTable, tmp_path) -> None:
    handle = DeltaTable(str(table.root))  # read in place: a scan writes nothing
    checks: list[tuple[str, int | None, Path]] = []
    for label, folder in table.dat_versions:
        meta = json.loads((folder / "table_version_metadata.json").read_text())
        checks.append((label, meta["version"], folder / "table_content"))
    if table.spark_expected is not None and not checks:
        checks.append(("expected", None, table.spark_expected))
    for label, version, folder in checks:
        if not any(folder.rglob("*.parquet")):
            continue
        try:
            got = handle.scan(version=version).to_table()
        except UnsupportedFeatureError as exc:
            assert exc.features, f"{label}: refused without naming a feature: {exc}"
            continue
        expected = _expected(folder)
        if table.id in SESSION_ZONE:
            column, offset = SESSION_ZONE[table.id]
            i = got.schema.get_field_index(column)
            shifted = pa.array([v and v + offset for v in got[column].to_pylist()], got.schema.field(i).type)
            got = got.set_column(i, column, shifted)
        columns = [c for c in expected.column_names if c in got.column_names]
        assert columns, f"{label}: no common columns ({expected.column_names} vs {got.column_names})"
        where = f"{table.id} {label} (version {version})"
        if expected.num_rows > 50_000:  # big flat tables: compare sorted in Arrow, not row by row in Python
            ours, theirs = got.select(columns), expected.select(columns).cast(got.select(columns).schema)
            keys = [(c, "ascending") for c in columns]
            assert ours.sort_by(keys).equals(theirs.sort_by(keys)), where
            continue
        assert _rows(got, columns) == _rows(expected, columns), where


@pytest.mark.parametrize(
    "name",
    ["delta-rs/delta-1.2.1-only-struct-stats", "delta-kernel-rs/v1-multi-part-partitioned-struct-stats-only",
     "delta-kernel-rs/v2-classic-parquet-struct-stats-only"],
)  # fmt: skip
def test_struct_stats_of_checkpoints_skip_files(name: str) -> None:
    """Checkpoints with ``stats_parsed`` and no JSON ``stats``: files are still skipped by statistics,
    and the rows read are those a full read filters to."""
    from golden import GOLDEN_DIR

    handle = DeltaTable(str(GOLDEN_DIR / name / "delta"))
    column = "integer" if "1.2.1" in name else "id"
    everything = handle.to_pyarrow_table()
    assert handle.snapshot().files.column("stats").null_count > 0  # some files have only struct stats
    first = min(everything[column].to_pylist())
    scan = handle.scan(filter=f"{column} = {first}")
    assert scan.num_files_skipped > 0
    assert scan.to_table()[column].to_pylist() == [first]
