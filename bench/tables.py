"""Benchmark tables, generated once and cached under the data directory.

Two logs, no data files (reading a snapshot never opens them):

- ``checkpoint_1m``: a classic checkpoint of 1,000,000 adds written directly with pyarrow following the
  spec's "Checkpoint Schema" (one action per row in ``add``/``remove``/``metaData``/``protocol``/``txn``
  struct columns), its ``_last_checkpoint``, then 50 JSON commits of 10 adds and 3 removes each.
- ``json_10k``: 10,000 JSON commits of 10 adds each and no checkpoint.

And one table with its data files, for VACUUM:

- ``vacuum_100k``: a checkpoint of 50,000 adds and 25,000 tombstones, then 10 JSON commits that each replace
  10 checkpointed files with 10 new ones (the first also sets ``delta.vacuum.logging.enabled``); on disk,
  a 16-byte file for every path in the log (live or removed) and 24,900 orphans never in the log: 100,000
  files, 50,000 of them unreferenced, all modified 30 days before 2026-01-01.

Each comes in two shapes (``NAME`` and ``NAME-wide``), both partitioned by a string column with 100 values
and with 56-character paths:

- narrow: stats of 3 data columns (``id``, ``value``, ``name``), null fields left out of the JSON;
- wide: stats of 5 data columns (``ts`` and ``qty`` besides), and the add fields delta-rs writes spelt out as
  nulls (``tags``, ``deletionVector``, ``baseRowId``, ``defaultRowCommitVersion``, ``clusteringProvider``),
  in the commits and in the checkpoint; its VACUUM table has no tombstones, and 49,900 orphans instead.

``BENCH_SCALE`` (an environment variable; ``python -m bench --scale``) multiplies the sizes (files, commits)
for quick runs: ``0.1`` makes a checkpoint of 100,000 adds and 1,000 JSON commits. The recorded figures are
taken at scale 1.

A table is generated in a temporary folder, checked with deltalake (it must open the table and count the
files we expect), and only then renamed into place, so a half-written table is never reused.
"""

from __future__ import annotations

import json
import os
import shutil
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

# Bump when a generator changes, so cached tables from an older generator are not reused.
GENERATOR_VERSION = 1
_MARKER = "_bench_table.json"
_NOW_MS = 1_767_225_600_000  # 2026-01-01: fixed, so that every generation writes the same log
_PARTITIONS = 100
_SEED = 20260101
SHAPES = ("narrow", "wide")


def scale() -> float:
    """The size factor of generated tables (``BENCH_SCALE``, default 1)."""
    return float(os.environ.get("BENCH_SCALE", "1"))


def scaled(n: int) -> int:
    return max(1, round(n * scale()))

STRING_MAP = pa.map_(pa.string(), pa.string())
ADD = pa.struct(
    [
        ("path", pa.string()),
        ("partitionValues", STRING_MAP),
        ("size", pa.int64()),
        ("modificationTime", pa.int64()),
        ("dataChange", pa.bool_()),
        ("stats", pa.string()),
        ("tags", STRING_MAP),
    ]
)
REMOVE = pa.struct(
    [
        ("path", pa.string()),
        ("deletionTimestamp", pa.int64()),
        ("dataChange", pa.bool_()),
        ("extendedFileMetadata", pa.bool_()),
        ("partitionValues", STRING_MAP),
        ("size", pa.int64()),
    ]
)
METADATA = pa.struct(
    [
        ("id", pa.string()),
        ("name", pa.string()),
        ("description", pa.string()),
        ("format", pa.struct([("provider", pa.string()), ("options", STRING_MAP)])),
        ("schemaString", pa.string()),
        ("partitionColumns", pa.list_(pa.string())),
        ("createdTime", pa.int64()),
        ("configuration", STRING_MAP),
    ]
)
PROTOCOL = pa.struct([("minReaderVersion", pa.int32()), ("minWriterVersion", pa.int32())])
TXN = pa.struct([("appId", pa.string()), ("version", pa.int64()), ("lastUpdated", pa.int64())])
DELETION_VECTOR = pa.struct(
    [
        ("storageType", pa.string()),
        ("pathOrInlineDv", pa.string()),
        ("offset", pa.int32()),
        ("sizeInBytes", pa.int32()),
        ("cardinality", pa.int64()),
    ]
)
# The add fields delta-rs writes as explicit nulls, in JSON and in its checkpoints.
WIDE_ADD = pa.struct(
    list(ADD)
    + [
        ("deletionVector", DELETION_VECTOR),
        ("baseRowId", pa.int64()),
        ("defaultRowCommitVersion", pa.int64()),
        ("clusteringProvider", pa.string()),
    ]
)

_COLUMNS = {
    "narrow": (("id", "long"), ("value", "double"), ("name", "string"), ("region", "string")),
    "wide": (
        ("id", "long"), ("value", "double"), ("name", "string"), ("ts", "timestamp"), ("qty", "integer"),
        ("region", "string"),
    ),
}  # fmt: skip


def _schema_string(shape: str) -> str:
    fields = [{"name": n, "type": t, "nullable": True, "metadata": {}} for n, t in _COLUMNS[shape]]
    return json.dumps({"type": "struct", "fields": fields})


def _metadata(shape: str) -> dict:
    return {
        "id": "5fba94ed-9794-4965-ba6e-6ee3c0d22af9",
        "format": {"provider": "parquet", "options": {}},
        "schemaString": _schema_string(shape),
        "partitionColumns": ["region"],
        "configuration": {},
        "createdTime": _NOW_MS - 86_400_000 * 365,
    }


_PROTOCOL = {"minReaderVersion": 1, "minWriterVersion": 2}
_REGIONS = [f"r{i:03d}" for i in range(_PARTITIONS)]


@dataclass(frozen=True)
class BenchTable:
    """A generated table and what a correct reader must find in it."""

    name: str
    path: Path
    version: int
    num_files: int


# -- file actions as Arrow, vectorised --------------------------------------------------------------------
def _fixed_width_strings(chars: np.ndarray) -> pa.StringArray:
    """An (n, width) uint8 array of ASCII as a string array, without a Python object per row."""
    n, width = chars.shape
    offsets = np.arange(n + 1, dtype=np.int32) * width
    return pa.StringArray.from_buffers(n, pa.py_buffer(offsets), pa.py_buffer(np.ascontiguousarray(chars)))


def _paths(rng: np.random.Generator, regions: np.ndarray) -> pa.StringArray:
    """``region=r042/<uuid4>.parquet``: 56 characters, as a partitioned writer lays files out."""
    n = len(regions)
    hexdigits = np.frombuffer(b"0123456789abcdef", dtype=np.uint8)
    digits = hexdigits[rng.integers(0, 16, size=(n, 32), dtype=np.uint8)]
    digits[:, 12] = ord("4")  # a version-4 UUID, for looks
    prefixes = np.frombuffer("".join(f"region={r}/" for r in _REGIONS).encode(), dtype=np.uint8).reshape(
        _PARTITIONS, -1
    )
    suffix = np.frombuffer(b".parquet", dtype=np.uint8)
    parts = [prefixes[regions]]
    for start, stop in ((0, 8), (8, 12), (12, 16), (16, 20), (20, 32)):
        if start:
            parts.append(np.full((n, 1), ord("-"), dtype=np.uint8))
        parts.append(digits[:, start:stop])
    parts.append(np.broadcast_to(suffix, (n, len(suffix))))
    return _fixed_width_strings(np.hstack(parts))


def _stats(rng: np.random.Generator, n: int) -> pa.Array:
    """Delta's JSON stats string: numRecords, minValues, maxValues, nullCount for id, value, name."""

    def text(values: np.ndarray | pa.Array) -> pa.Array:
        return pc.cast(pa.array(values), pa.string())

    records = rng.integers(1_000, 2_000_000, n)
    lo_id = rng.integers(0, 1 << 40, n)
    lo_val = pc.round(pa.array(rng.random(n) * 1000), 2)
    hi_val = pc.round(pc.add(lo_val, pa.array(rng.random(n) * 1000)), 2)
    lo_name, hi_name = np.sort(rng.integers(0, 1_000_000, (2, n)), axis=0)
    return pc.binary_join_element_wise(
        '{"numRecords":', text(records),
        ',"minValues":{"id":', text(lo_id),
        ',"value":', text(lo_val),
        ',"name":"name_', text(lo_name),
        '"},"maxValues":{"id":', text(lo_id + records),
        ',"value":', text(hi_val),
        ',"name":"name_', text(hi_name),
        '"},"nullCount":{"id":0,"value":', text(rng.integers(0, 100, n)),
        ',"name":', text(rng.integers(0, 10, n)),
        "}}",
        "",
    )  # fmt: skip


def _stats_wide(rng: np.random.Generator, n: int) -> pa.Array:
    """The stats of the wide shape: ``_stats``'s columns and a timestamp ``ts`` and an integer ``qty``."""

    def text(values: np.ndarray | pa.Array) -> pa.Array:
        return pc.cast(pa.array(values), pa.string())

    def iso(ms: np.ndarray) -> pa.Array:
        return pc.strftime(pa.array(ms, pa.timestamp("ms", "UTC")), format="%Y-%m-%dT%H:%M:%SZ")

    records = rng.integers(1_000, 2_000_000, n)
    lo_id = rng.integers(0, 1 << 40, n)
    lo_val = pc.round(pa.array(rng.random(n) * 1000), 2)
    hi_val = pc.round(pc.add(lo_val, pa.array(rng.random(n) * 1000)), 2)
    lo_name, hi_name = np.sort(rng.integers(0, 1_000_000, (2, n)), axis=0)
    lo_ts = _NOW_MS - rng.integers(86_400_000, 86_400_000 * 365, n)
    lo_qty, hi_qty = np.sort(rng.integers(-1000, 100_000, (2, n)), axis=0)
    return pc.binary_join_element_wise(
        '{"numRecords":', text(records),
        ',"minValues":{"id":', text(lo_id),
        ',"value":', text(lo_val),
        ',"name":"name_', text(lo_name),
        '","ts":"', iso(lo_ts),
        '","qty":', text(lo_qty),
        '},"maxValues":{"id":', text(lo_id + records),
        ',"value":', text(hi_val),
        ',"name":"name_', text(hi_name),
        '","ts":"', iso(lo_ts + rng.integers(0, 86_400_000, n)),
        '","qty":', text(hi_qty),
        '},"nullCount":{"id":0,"value":', text(rng.integers(0, 100, n)),
        ',"name":', text(rng.integers(0, 10, n)),
        ',"ts":', text(rng.integers(0, 10, n)),
        ',"qty":0}}',
        "",
    )  # fmt: skip


def _adds(rng: np.random.Generator, n: int, shape: str = "narrow") -> pa.StructArray:
    regions = rng.integers(0, _PARTITIONS, n)
    region_names = pa.array(_REGIONS).take(pa.array(regions))
    partition_values = pa.MapArray.from_arrays(
        pa.array(np.arange(n + 1, dtype=np.int32)),
        pa.array(["region"]).take(pa.array(np.zeros(n, np.int32))),
        region_names,
    )
    columns = [
        _paths(rng, regions),
        partition_values,
        pa.array(rng.integers(1 << 20, 128 << 20, n)),
        pa.array(_NOW_MS - rng.integers(0, 86_400_000 * 365, n)),
        pa.array(np.ones(n, dtype=bool)),
        (_stats_wide if shape == "wide" else _stats)(rng, n),
        pa.nulls(n, STRING_MAP),
    ]
    if shape == "wide":
        columns += [pa.nulls(n, f.type) for f in list(WIDE_ADD)[len(ADD) :]]
    return pa.StructArray.from_arrays(columns, fields=list(WIDE_ADD if shape == "wide" else ADD))


def _removes(rng: np.random.Generator, n: int) -> pa.StructArray:
    adds = _adds(rng, n)
    return pa.StructArray.from_arrays(
        [
            adds.field("path"),
            pa.array(_NOW_MS - rng.integers(0, 86_400_000, n)),
            pa.array(np.ones(n, dtype=bool)),
            pa.array(np.ones(n, dtype=bool)),
            adds.field("partitionValues"),
            adds.field("size"),
        ],
        fields=list(REMOVE),
    )


# -- the checkpoint table ---------------------------------------------------------------------------------
def _column(values: pa.Array, before: int, total: int) -> pa.Array:
    """One action column of a checkpoint: ``values`` at rows ``before..``, null everywhere else."""
    after = total - before - len(values)
    return pa.concat_arrays([pa.nulls(before, values.type), values, pa.nulls(after, values.type)])


def write_checkpoint(
    log_dir: Path, version: int, adds: pa.StructArray, removes: pa.StructArray, shape: str = "narrow"
) -> int:
    """Write ``version``'s classic checkpoint and ``_last_checkpoint`` ("Checkpoints"); returns its size."""
    protocol = pa.array([_PROTOCOL], PROTOCOL)
    plain = {**_metadata(shape), "format": {"provider": "parquet", "options": []}, "configuration": []}
    metadata = pa.array([plain], METADATA)
    txn = pa.array([{"appId": "nightly-ingest", "version": version, "lastUpdated": _NOW_MS}], TXN)
    total = 3 + len(removes) + len(adds)
    table = pa.table(
        {
            "txn": _column(txn, 2, total),
            "add": _column(adds, 3 + len(removes), total),
            "remove": _column(removes, 3, total),
            "metaData": _column(metadata, 1, total),
            "protocol": _column(protocol, 0, total),
        }
    )
    path = log_dir / f"{version:020d}.checkpoint.parquet"
    # Spark writes 128 MB row groups: about half a million of these adds each.
    pq.write_table(table, path, row_group_size=500_000, compression="snappy")
    last = {"version": version, "size": total, "sizeInBytes": path.stat().st_size, "numOfAddFiles": len(adds)}
    (log_dir / "_last_checkpoint").write_text(json.dumps(last))
    return total


def _json_adds(adds: pa.StructArray) -> list[str]:
    """One JSON line per add; null fields are left out, except those delta-rs spells out (wide shape)."""
    spelt_out = {f.name for f in list(WIDE_ADD)[len(ADD) :]} | {"tags"} if adds.type == WIDE_ADD else set()
    lines = []
    for body in adds.to_pylist():
        body["partitionValues"] = dict(body["partitionValues"])
        kept = {k: v for k, v in body.items() if v is not None or k in spelt_out}
        lines.append(json.dumps({"add": kept}, separators=(",", ":")))
    return lines


def _json_removes(adds: pa.StructArray, deletion_timestamp: int) -> list[str]:
    lines = []
    for body in adds.to_pylist():
        remove = {
            "path": body["path"],
            "deletionTimestamp": deletion_timestamp,
            "dataChange": True,
            "extendedFileMetadata": True,
            "partitionValues": dict(body["partitionValues"]),
            "size": body["size"],
        }
        lines.append(json.dumps({"remove": remove}, separators=(",", ":")))
    return lines


def _commit_info(version: int, operation: str) -> str:
    info = {
        "timestamp": _NOW_MS + version,
        "operation": operation,
        "operationParameters": {"mode": "Append"},
        "engineInfo": "airflow-provider-delta-bench",
        "txnId": str(uuid.UUID(int=version)),
    }
    return json.dumps({"commitInfo": info}, separators=(",", ":"))


def _write_commit(log_dir: Path, version: int, lines: list[str]) -> None:
    (log_dir / f"{version:020d}.json").write_text("\n".join(lines) + "\n")


def build_checkpoint_table(
    root: Path, num_adds: int = 1_000_000, commits: int = 50, shape: str = "narrow"
) -> tuple[int, int]:
    """Returns (latest version, live files)."""
    rng = np.random.default_rng(_SEED)
    log_dir = root / "_delta_log"
    log_dir.mkdir(parents=True)
    cp_version = 1_000  # the commits before it were cleaned up, as on any long-lived table
    adds = _adds(rng, num_adds, shape)
    write_checkpoint(log_dir, cp_version, adds, _removes(rng, 1_000), shape)
    gone = rng.choice(num_adds, size=(commits, 3), replace=False)
    for i in range(commits):
        removes = _json_removes(adds.take(pa.array(gone[i])), deletion_timestamp=_NOW_MS + i)
        new = _json_adds(_adds(rng, 10, shape))
        lines = [_commit_info(cp_version + 1 + i, "WRITE"), *new, *removes]
        _write_commit(log_dir, cp_version + 1 + i, lines)
    return cp_version + commits, num_adds + commits * (10 - 3)


def build_task_table(
    root: Path, num_adds: int = 1_000_000, commits: int = 50, shape: str = "wide"
) -> tuple[int, int]:
    """``checkpoint_1m``'s log at any size, for ``bench.task``; returns (latest version, live files).

    The checkpoint (version 1000: protocol, metaData, the ``nightly-ingest`` txn, 1,000 tombstones, then
    ``num_adds`` adds) is written one row group of 500,000 rows at a time as its adds are generated, so a
    checkpoint of 10,000,000 files is never held whole. Then ``commits`` JSON commits of 10 adds and 3
    removes of checkpointed files; the one in the middle also sets the app transaction ``TASK_APP_ID`` to
    its own version (``task_app_version``).
    """
    rng = np.random.default_rng(_SEED + 3)
    log_dir = root / "_delta_log"
    log_dir.mkdir(parents=True)
    cp_version = 1_000
    gone = rng.choice(num_adds, size=(commits, 3), replace=False)
    wanted = np.sort(gone.ravel())
    taken: list[pa.StructArray] = []  # the removed adds, in the order of ``wanted``
    removes = _removes(rng, 1_000)
    protocol = pa.array([_PROTOCOL], PROTOCOL)
    plain = {**_metadata(shape), "format": {"provider": "parquet", "options": []}, "configuration": []}
    metadata = pa.array([plain], METADATA)
    txn = pa.array([{"appId": "nightly-ingest", "version": cp_version, "lastUpdated": _NOW_MS}], TXN)
    head = 3 + len(removes)
    total = head + num_adds
    path = log_dir / f"{cp_version:020d}.checkpoint.parquet"
    writer = None
    start = 0  # index of the chunk's first add
    try:
        while start < num_adds:
            first = start == 0
            n = min(num_adds - start, _ROW_GROUP - head if first else _ROW_GROUP)
            adds = _adds(rng, n, shape)
            lo, hi = np.searchsorted(wanted, [start, start + n])
            if hi > lo:
                taken.append(adds.take(pa.array(wanted[lo:hi] - start)))
            rows = n + (head if first else 0)
            table = pa.table(
                {
                    "txn": _column(txn, 2, rows) if first else pa.nulls(rows, TXN),
                    "add": _column(adds, head if first else 0, rows),
                    "remove": _column(removes, 3, rows) if first else pa.nulls(rows, REMOVE),
                    "metaData": _column(metadata, 1, rows) if first else pa.nulls(rows, METADATA),
                    "protocol": _column(protocol, 0, rows) if first else pa.nulls(rows, PROTOCOL),
                }
            )
            if writer is None:
                writer = pq.ParquetWriter(path, table.schema, compression="snappy")
            writer.write_table(table, row_group_size=_ROW_GROUP)
            start += n
    finally:
        if writer is not None:
            writer.close()
    last = {"version": cp_version, "size": total, "sizeInBytes": path.stat().st_size,
            "numOfAddFiles": num_adds}  # fmt: skip
    (log_dir / "_last_checkpoint").write_text(json.dumps(last))
    removed = pa.concat_arrays(taken)  # row i is the add ``wanted[i]``
    position = {int(w): i for i, w in enumerate(wanted)}
    txn_commit = task_app_version(cp_version, commits)
    for i in range(commits):
        version = cp_version + 1 + i
        gone_here = removed.take(pa.array([position[int(g)] for g in gone[i]]))
        lines = [_commit_info(version, "WRITE"), *_json_adds(_adds(rng, 10, shape)),
                 *_json_removes(gone_here, deletion_timestamp=_NOW_MS + i)]  # fmt: skip
        if version == txn_commit:
            body = {"appId": TASK_APP_ID, "version": version, "lastUpdated": _NOW_MS + i}
            lines.append(json.dumps({"txn": body}, separators=(",", ":")))
        _write_commit(log_dir, version, lines)
    return cp_version + commits, num_adds + commits * (10 - 3)


TASK_APP_ID = "bench-app"
_ROW_GROUP = 500_000  # Spark's 128 MB row groups: about half a million of these adds each


def task_app_version(cp_version: int = 1_000, commits: int = 50) -> int:
    """The version ``TASK_APP_ID`` is at in ``build_task_table``'s log: that of the commit setting it."""
    return cp_version + 1 + commits // 2


def build_json_table(
    root: Path, commits: int = 10_000, adds_per_commit: int = 10, shape: str = "narrow"
) -> tuple[int, int]:
    """Returns (latest version, live files)."""
    rng = np.random.default_rng(_SEED + 1)
    log_dir = root / "_delta_log"
    log_dir.mkdir(parents=True)
    adds = _json_adds(_adds(rng, commits * adds_per_commit, shape))
    head = [json.dumps({"protocol": _PROTOCOL}), json.dumps({"metaData": _metadata(shape)})]
    for v in range(commits):
        first = v * adds_per_commit
        lines = [_commit_info(v, "WRITE"), *adds[first : first + adds_per_commit]]
        _write_commit(log_dir, v, (head + lines) if v == 0 else lines)
    return commits - 1, commits * adds_per_commit


def write_remove_commit(log_dir: Path, version: int, adds: pa.StructArray, deletion_timestamp: int) -> None:
    """Commit ``version``: a commitInfo and one remove per add in ``adds`` (a struct array of ``ADD``)."""
    _write_commit(
        log_dir, version, [_commit_info(version, "DELETE"), *_json_removes(adds, deletion_timestamp)]
    )


# -- the vacuum table: a log and its data files -----------------------------------------------------------
def _touch(root: Path, paths: list[str], mtime_s: float) -> None:
    """A 16-byte file at each path, modified at ``mtime_s`` (vacuum only lists, stats and deletes them)."""
    for folder in sorted({p.rpartition("/")[0] for p in paths}):
        (root / folder).mkdir(parents=True, exist_ok=True)
    body = b"PAR1" + bytes(8) + b"PAR1"
    for p in paths:
        full = root / p
        full.write_bytes(body)
        os.utime(full, (mtime_s, mtime_s))


def build_vacuum_table(
    root: Path,
    live: int = 50_000,
    tombstones: int = 25_000,
    orphans: int = 24_900,
    commits: int = 10,
    shape: str = "narrow",
) -> tuple[int, int]:
    """Returns (latest version, live files); ``live + tombstones + orphans + 10 * commits`` files on disk,
    ``tombstones + orphans + 10 * commits`` of them unreferenced."""
    rng = np.random.default_rng(_SEED + 2)
    log_dir = root / "_delta_log"
    log_dir.mkdir(parents=True)
    cp_version = 100
    adds = _adds(rng, live, shape)
    removes = _removes(rng, tombstones)
    write_checkpoint(log_dir, cp_version, adds, removes, shape)
    gone = rng.choice(live, size=(commits, 10), replace=False)
    paths = adds.field("path").to_pylist() + removes.field("path").to_pylist()
    # VACUUM START/END commits on, as deltalake always writes them (Delta Spark: vacuum.logging.enabled).
    logged = {**_metadata(shape), "configuration": {"delta.vacuum.logging.enabled": "true"}}
    for i in range(commits):  # each commit replaces 10 checkpointed files with 10 new ones
        new = _adds(rng, 10, shape)
        removed = _json_removes(adds.take(pa.array(gone[i])), deletion_timestamp=_NOW_MS + i)
        head = [json.dumps({"metaData": logged})] if i == 0 else []
        lines = [_commit_info(cp_version + 1 + i, "WRITE"), *head, *_json_adds(new), *removed]
        _write_commit(log_dir, cp_version + 1 + i, lines)
        paths += new.field("path").to_pylist()
    paths += _paths(rng, rng.integers(0, _PARTITIONS, orphans)).to_pylist()  # never in the log
    _touch(root, paths, (_NOW_MS - 30 * 86_400_000) / 1000)
    return cp_version + commits, live


def _vacuum_sizes(shape: str) -> dict[str, int]:
    """50,000 live files and 50,000 unreferenced ones, at scale 1."""
    live = scaled(50_000)
    tombstones = 0 if shape == "wide" else scaled(25_000)
    commits = 10 if live >= 1_000 else 1
    return {"live": live, "tombstones": tombstones, "orphans": live - tombstones - 10 * commits,
            "commits": commits}  # fmt: skip


BUILDERS: dict[str, Callable[[Path, str], tuple[int, int]]] = {
    "checkpoint_1m": lambda root, shape: build_checkpoint_table(root, scaled(1_000_000), shape=shape),
    "json_10k": lambda root, shape: build_json_table(root, scaled(10_000), shape=shape),
    "vacuum_100k": lambda root, shape: build_vacuum_table(root, **_vacuum_sizes(shape), shape=shape),
}


def table_names(base: str) -> tuple[str, ...]:
    """``base`` in both shapes: ``checkpoint_1m``, ``checkpoint_1m-wide``."""
    return (base, f"{base}-wide")


# -- cache and verification -------------------------------------------------------------------------------
def verify_with_deltalake(path: Path, version: int, num_files: int) -> None:
    """deltalake must find ``version`` and ``num_files`` live files, else the generator is wrong."""
    import deltalake

    dt = deltalake.DeltaTable(str(path))
    got = (dt.version(), pa.table(dt.get_add_actions(flatten=False)).num_rows)
    if got != (version, num_files):
        raise RuntimeError(
            f"deltalake reads {path} as (version, files) = {got}, expected {(version, num_files)}"
        )


def ensure_table(name: str, data_dir: Path) -> BenchTable:
    """The cached table ``name``, generated and verified first if missing."""
    base, _, shape = name.partition("-")
    suffix = "" if scale() == 1 else f"-x{scale():g}"
    path = data_dir / f"{name}-v{GENERATOR_VERSION}{suffix}"
    return ensure_built(name, path, lambda root: BUILDERS[base](root, shape or "narrow"))


def ensure_built(
    name: str,
    path: Path,
    build: Callable[[Path], tuple[int, int]],
    verify: Callable[[Path, int, int], None] = verify_with_deltalake,
) -> BenchTable:
    """The table cached at ``path``; if missing, ``build`` (returning its version and live files) writes
    it into a temporary folder, ``verify`` checks it there, and only then is it renamed into place."""
    marker = path / _MARKER
    if marker.exists():
        facts = json.loads(marker.read_text())
        return BenchTable(name, path, facts["version"], facts["num_files"])
    tmp = path.parent / f".{name}-{os.getpid()}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        version, num_files = build(tmp)
        verify(tmp, version, num_files)
        (tmp / _MARKER).write_text(json.dumps({"version": version, "num_files": num_files}))
        shutil.rmtree(path, ignore_errors=True)
        tmp.rename(path)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return BenchTable(name, path, version, num_files)


# -- DELETE, UPDATE and MERGE in the task (bench.dml): rows in data files ---------------------------------
DML_REGIONS = ("north", "south", "east", "west")
DML_SCHEMA = pa.schema([("id", pa.int64()), ("value", pa.float64()), ("name", pa.string()),
                        ("region", pa.string())])  # fmt: skip
_DML_NAMES = 1_000
_DML_SEED = 20260036  # issue 36


def dml_file_rows(index: int, rows_per_file: int, *, with_region: bool = True) -> pa.Table:
    """The rows of data file ``index``: ids ``index * rows_per_file`` onwards, consecutive, so that each
    file's statistics cover one id range and skipping prunes by id as it does on a table written in key
    order; ``value`` in [0, 1) (an UPDATE's ``value + 1`` shows as values of 1 or more); one of 1,000
    names; and, unless the layout partitions by it, one of four regions per row."""
    rng = np.random.default_rng(_DML_SEED + index)
    first = index * rows_per_file
    names = pa.array([f"name-{i:04d}" for i in range(_DML_NAMES)])
    columns = {
        "id": pa.array(np.arange(first, first + rows_per_file, dtype=np.int64)),
        "value": pa.array(rng.random(rows_per_file)),
        "name": names.take(pa.array(rng.integers(0, _DML_NAMES, rows_per_file))),
    }
    if with_region:
        regions = rng.integers(0, len(DML_REGIONS), rows_per_file)
        columns["region"] = pa.array(DML_REGIONS).take(pa.array(regions))
    return pa.table(columns)


def build_dml_table(root: Path, files: int, rows_per_file: int, partitioned: bool = False) -> tuple[int, int]:
    """``files`` Parquet files of ``rows_per_file`` rows (one row group each, pyarrow's defaults), added
    by one commit of the core with statistics from their footers: version 1. Partitioned by ``region``,
    file ``i`` holds region ``DML_REGIONS[i % 4]`` (the ids stay consecutive per file either way).
    Returns (version, live files)."""
    from airflow_provider_delta.log import DeltaTable, add_file_from_parquet

    table = DeltaTable.create(str(root), DML_SCHEMA, partition_by=["region"] if partitioned else None)
    snapshot = table.snapshot()
    adds = []
    for i in range(files):
        region = DML_REGIONS[i % len(DML_REGIONS)] if partitioned else None
        rel = (f"region={region}/" if partitioned else "") + f"part-{i:05d}.snappy.parquet"
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(dml_file_rows(i, rows_per_file, with_region=not partitioned), root / rel)
        adds.append(add_file_from_parquet(snapshot, rel, {"region": region} if partitioned else None))
    table.transaction().add_files(adds).commit("WRITE")
    return 1, files


def build_dml_dv_table(root: Path, plain: Path) -> tuple[int, int]:
    """The table at ``plain`` again, data files hard-linked, under a new log whose version 0 sets
    ``delta.enableDeletionVectors=true`` (so its protocol has the feature): deltalake cannot write such a
    table, so it is built by the core. Returns (version, live files)."""
    from airflow_provider_delta.log import DeltaTable, add_file_from_parquet

    source = DeltaTable(str(plain)).snapshot()
    partition_by = list(source.partition_columns)
    table = DeltaTable.create(str(root), DML_SCHEMA, partition_by=partition_by or None,
                              configuration={"delta.enableDeletionVectors": "true"})  # fmt: skip
    snapshot = table.snapshot()
    adds = []
    for row in source.files.select(["path", "partitionValues"]).to_pylist():
        (root / row["path"]).parent.mkdir(parents=True, exist_ok=True)
        os.link(plain / row["path"], root / row["path"])
        values = dict(row["partitionValues"] or {})
        adds.append(add_file_from_parquet(snapshot, row["path"], values or None))
    table.transaction().add_files(adds).commit("WRITE")
    return 1, len(adds)
