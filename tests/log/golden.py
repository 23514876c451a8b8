"""Helpers for the golden-table harness (``test_golden.py``): the catalogue, the oracles, and normalisation.

The catalogue is ``../shared/golden/tables.json`` (``DELTA_GOLDEN_DIR`` overrides the folder); everything a
test needs to know about a table is read from the table's folder, so a table added there is covered without
new code. Two oracles read the same tables: ``deltalake`` (delta-rs) for the log state, and the Rust kernel
(``delta_kernel_rust_sharing_wrapper``) for the version and a scan's row count.
"""

from __future__ import annotations

import json
import os
import re
import struct
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, date, datetime
from decimal import Decimal
from functools import cache, cached_property
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

GOLDEN_DIR = Path(os.environ.get("DELTA_GOLDEN_DIR", Path(os.environ["DELTA_SHARED_DIR"]) / "golden"))

_COMMIT = re.compile(r"^(\d{20})\.json$")
_CHECKPOINT = re.compile(r"^(\d{20})\.checkpoint(\.\d{10}\.\d{10}|\.[0-9a-fA-F-]{36})?\.(parquet|json)$")
_MULTI_PART = re.compile(r"^(\d{20})\.checkpoint\.(\d{10})\.(\d{10})\.parquet$")


@dataclass(frozen=True)
class GoldenTable:
    """One entry of ``tables.json``; ``root`` (``<source>/<name>/delta``) holds ``_delta_log``."""

    id: str
    folder: Path
    info: dict[str, Any]

    @property
    def root(self) -> Path:
        return self.folder / "delta"

    @property
    def url(self) -> str:
        """The root as the kernel wants it: an absolute ``file://`` URL with a trailing slash."""
        return self.root.resolve().as_uri() + "/"

    @property
    def tags(self) -> list[str]:
        return list(self.info.get("tags") or ())

    @cached_property
    def expected_outcome(self) -> dict[str, Any] | None:
        path = self.folder / "expected_outcome.json"
        return json.loads(path.read_text()) if path.exists() else None

    @property
    def must_fail(self) -> bool:
        """The table's source says opening it must fail (delta-rs ``exotic_tables.rs`` verdicts)."""
        return (self.expected_outcome or {}).get("expected_open_table") == "error"

    @cached_property
    def commit_mtimes(self) -> dict[str, int] | None:
        path = self.folder / "expected_commit_mtimes.json"
        return json.loads(path.read_text())["commit_file_mtime_ms"] if path.exists() else None

    @cached_property
    def dat_versions(self) -> list[tuple[str, Path]]:
        """DAT expectations: ``(label, folder)`` for every ``expected/*/table_version_metadata.json``."""
        expected = self.folder / "expected"
        if not expected.is_dir():
            return []
        return sorted((p.parent.name, p.parent) for p in expected.glob("*/table_version_metadata.json"))

    @cached_property
    def spark_expected(self) -> Path | None:
        """A Spark-written ``expected/`` folder of parquet part files (the latest snapshot's rows)."""
        expected = self.folder / "expected"
        return expected if expected.is_dir() and any(expected.glob("*.parquet")) else None

    @cached_property
    def log_listing(self) -> LogListing:
        return LogListing.of(self.root / "_delta_log")


def load_tables() -> list[GoldenTable]:
    catalogue = GOLDEN_DIR / "tables.json"
    if not catalogue.exists():
        return []
    entries = json.loads(catalogue.read_text())
    return [
        GoldenTable(f"{e['source']}/{e['name']}", GOLDEN_DIR / e["source"] / e["name"], e) for e in entries
    ]


@dataclass(frozen=True)
class LogListing:
    """Commit and checkpoint versions present in ``_delta_log``, read independently of the core."""

    commits: frozenset[int]
    checkpoints: frozenset[int]

    @classmethod
    def of(cls, log_dir: Path) -> LogListing:
        names = [p.name for p in log_dir.iterdir()] if log_dir.is_dir() else []
        commits = {int(m.group(1)) for n in names if (m := _COMMIT.match(n))}
        checkpoints = {
            int(m.group(1)) for n in names if (m := _CHECKPOINT.match(n)) and not _MULTI_PART.match(n)
        }
        parts: dict[tuple[int, int], set[int]] = {}
        for n in names:
            if m := _MULTI_PART.match(n):
                parts.setdefault((int(m.group(1)), int(m.group(3))), set()).add(int(m.group(2)))
        checkpoints |= {v for (v, total), got in parts.items() if got == set(range(1, total + 1))}
        return cls(frozenset(commits), frozenset(checkpoints))

    @property
    def latest(self) -> int:
        return max(self.commits | self.checkpoints)

    def reconstructable(self, version: int) -> bool:
        """True when a checkpoint at or before ``version`` (or version 0) is followed by all commits to it."""
        starts = [c for c in self.checkpoints if c <= version]
        first = max(starts) + 1 if starts else 0
        return all(v in self.commits for v in range(first, version + 1))

    def versions(self) -> list[int]:
        """Every version a file of the log names, ascending."""
        return sorted(self.commits | self.checkpoints)

    def gap_versions(self) -> list[int]:
        """The first missing version of each gap between two versions the log names."""
        present = self.versions()
        return [a + 1 for a, b in zip(present, present[1:], strict=False) if b > a + 1]


# --- outcomes -----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Outcome:
    """A call's value, or the exception it raised."""

    value: Any = None
    error: BaseException | None = None

    @property
    def ok(self) -> bool:
        return self.error is None

    def describe(self) -> str:
        return "ok" if self.ok else f"{type(self.error).__name__}: {str(self.error).splitlines()[0][:300]}"


def attempt(fn: Callable[[], Any]) -> Outcome:
    """Run ``fn``; the Rust oracles raise ``BaseException`` subclasses (pyo3 panics), so catch those too."""
    try:
        return Outcome(value=fn())
    except (KeyboardInterrupt, SystemExit):
        raise
    except BaseException as exc:  # noqa: BLE001 - an oracle's failure is data here, whatever its type
        return Outcome(error=exc)


@dataclass(frozen=True)
class KernelResult:
    """What the Rust kernel makes of a table: its snapshot version and, if the scan ran, the row count."""

    snapshot: Outcome
    rows: Outcome


@cache
def kernel_read(url: str) -> KernelResult:
    import delta_kernel_rust_sharing_wrapper as dk

    def snapshot() -> tuple[Any, Any]:
        engine = dk.PythonInterface(url)
        return engine, dk.Table(url).snapshot(engine)

    snap = attempt(snapshot)
    if not snap.ok:
        return KernelResult(snap, Outcome(error=snap.error))
    engine, ksnap = snap.value
    version = Outcome(value=ksnap.version())
    rows = attempt(lambda: dk.ScanBuilder(ksnap).build().execute(engine).read_all().num_rows)
    return KernelResult(version, rows)


def open_deltalake(root: Path, version: int | None = None) -> Outcome:
    import deltalake

    return attempt(lambda: deltalake.DeltaTable(str(root), version=version))


# --- normalisation ------------------------------------------------------------------------------------------


def physical_to_logical(schema: dict[str, Any]) -> dict[str, str]:
    """Top-level physical column names (column mapping) to logical names; identity without mapping."""
    out = {}
    for f in schema.get("fields", []):
        physical = (f.get("metadata") or {}).get("delta.columnMapping.physicalName", f["name"])
        out[physical] = f["name"]
    return out


def typed_partition_value(raw: str | None, arrow_type: pa.DataType) -> Any:
    """A serialized partition value ("Partition Value Serialization") as the value deltalake returns."""
    if raw is None or raw == "":
        return None  # "An empty string for any type translates to a null partition value"
    if pa.types.is_string(arrow_type) or pa.types.is_large_string(arrow_type):
        return raw
    if pa.types.is_boolean(arrow_type):
        return raw.lower() == "true"
    if pa.types.is_integer(arrow_type):
        return int(raw)
    if pa.types.is_float32(arrow_type):
        return struct.unpack("f", struct.pack("f", float(raw)))[0]
    if pa.types.is_floating(arrow_type):
        return float(raw)
    if pa.types.is_decimal(arrow_type):
        return Decimal(raw)
    if pa.types.is_date(arrow_type) or pa.types.is_timestamp(arrow_type):
        try:
            return _parse_datetime(raw, arrow_type)
        except ValueError:
            return ("not a valid serialized value", raw)  # compares unequal and shows the raw string
    if pa.types.is_binary(arrow_type) or pa.types.is_large_binary(arrow_type):
        return raw.encode("utf-8")  # the JSON string's characters, as deltalake returns them
    raise AssertionError(f"no parser for partition type {arrow_type}")


def _parse_datetime(raw: str, arrow_type: pa.DataType) -> date | datetime:
    if pa.types.is_date(arrow_type):
        return date.fromisoformat(raw)  # strictly `{year}-{month}-{day}`
    # `{year}-{month}-{day} {hour}:{minute}:{second}[.{micros}]`, or ISO-8601 adjusted to UTC (`...T...Z`)
    parsed = datetime.fromisoformat(raw.replace("T", " ").removesuffix("Z"))
    if arrow_type.tz is None:
        return parsed
    return parsed.replace(tzinfo=UTC) if parsed.tzinfo is None else parsed.astimezone(UTC)


FileKey = tuple[int, tuple[tuple[str, Any], ...]]


def deltalake_files(dt: Any) -> tuple[dict[str, FileKey], pa.Schema | None]:
    """deltalake's live files: decoded path -> (size, sorted typed partition values by logical name)."""
    adds = pa.table(dt.get_add_actions(flatten=False))
    paths = [urllib.parse.unquote(p) for p in adds.column("path").to_pylist()]
    sizes = adds.column("size_bytes").to_pylist()
    if "partition" in adds.column_names:
        parts = [tuple(sorted((p or {}).items())) for p in adds.column("partition").to_pylist()]
        part_type = adds.schema.field("partition").type
        part_schema = pa.schema(list(part_type)) if pa.types.is_struct(part_type) else None
    else:
        parts, part_schema = [()] * len(paths), None
    return dict(zip(paths, zip(sizes, parts, strict=True), strict=True)), part_schema


def our_files(snapshot: Any, part_schema: pa.Schema | None) -> dict[str, FileKey]:
    """Our live files in deltalake's terms: partition values typed by ``part_schema`` and keyed logically."""
    names = physical_to_logical(json.loads(snapshot.metadata.schema_string))
    out: dict[str, FileKey] = {}
    files = snapshot.files
    for path, size, pvs in zip(
        files.column("path").to_pylist(),
        files.column("size").to_pylist(),
        files.column("partitionValues").to_pylist(),
        strict=True,
    ):
        typed = []
        for physical, raw in pvs or ():
            logical = names.get(physical, physical)
            if part_schema is None or part_schema.get_field_index(logical) < 0:
                typed.append((logical, raw))
            else:
                typed.append((logical, typed_partition_value(raw, part_schema.field(logical).type)))
        out[path] = (size, tuple(sorted(typed)))
    return out


# --- data rows ----------------------------------------------------------------------------------------------


def data_file_location(root: Path, path: str) -> Path:
    """Where a decoded AddFile path points: relative to the table root, or an absolute ``file:`` URI/path."""
    if "://" in path or path.startswith("file:"):
        return Path(urllib.parse.urlparse(path).path)
    return Path(path) if path.startswith("/") else root / path


def parquet_rows(paths: list[Path]) -> int:
    """Total rows from parquet footers: the count does not depend on column names or types."""
    return sum(pq.ParquetFile(p).metadata.num_rows for p in paths)


def expected_rows(folder: Path) -> int:
    return parquet_rows(sorted(folder.glob("*.parquet")))


def deletion_vector_cardinalities(files: pa.Table) -> list[int | None]:
    """Per live file: rows its deletion vector removes (0 without one, None without a cardinality)."""
    if "deletionVector" not in files.column_names:
        return [0] * files.num_rows
    out: list[int | None] = []
    for dv in files.column("deletionVector").to_pylist():
        out.append(0 if dv is None else dv.get("cardinality"))
    return out


def live_rows(root: Path, files: pa.Table) -> int:
    """Rows our live files hold after their deletion vectors: footer rows minus each DV's ``cardinality``.

    Applying DVs to data is the data reader's job, not this harness's; the log's ``cardinality`` (a required
    field of the DV descriptor) is enough to count what a reader would return.
    """
    paths = [data_file_location(root, p) for p in files.column("path").to_pylist()]
    deleted = deletion_vector_cardinalities(files)
    assert all(d is not None for d in deleted), "a deletion vector without cardinality"
    return parquet_rows(paths) - sum(d for d in deleted if d is not None)


def implied_reader_features(min_reader_version: int, reader_features: Any) -> set[str]:
    """Reader features a protocol requires: listed from reader version 3, ``columnMapping`` at version 2."""
    if min_reader_version >= 3:
        return set(reader_features or ())
    return {"columnMapping"} if min_reader_version == 2 else set()
