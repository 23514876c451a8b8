"""Seed tables for the fuzz test of the log reader (``test_fuzz_log.py``): real logs to mutate.

A few golden tables (their ``_delta_log`` only: reading the log never opens a data file) and tables the core
writes itself, so that between them the seeds hold partitions of several types, column mapping, deletion
vectors, classic, multi-part and V2 checkpoints (JSON and Parquet, with sidecars), in-commit timestamps, app
transactions (with and without ``lastUpdated``), domain metadata and ``_last_checkpoint``.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa

from airflow_provider_delta.log import AddFile, DeltaTable

GOLDEN = Path(os.environ.get("DELTA_GOLDEN_DIR", Path(os.environ["DELTA_SHARED_DIR"]) / "golden"))
GOLDEN_SEEDS = (
    "delta-golden/data-reader-partition-values",  # every partition type
    "delta-golden/dv-with-columnmapping",  # deletion vectors under column mapping, classic checkpoint
    "delta-kernel-java/kernel-pagination-v2-checkpoint-json",  # V2 checkpoint as JSON, sidecars
    "delta-golden/v2-checkpoint-parquet",  # V2 checkpoint as Parquet, sidecars
    "delta-kernel-java/kernel-pagination-multi-part-checkpoints",
    "delta-kernel-rs/app-txn-checkpoint",
    "delta-kernel-rs/app-txn-with-last-updated",
    "delta-kernel-rs/crc-full",  # domain metadata, in-commit timestamps, deletion vectors
)


def _commit(t: DeltaTable, adds: list[AddFile], **kw: Any) -> None:
    txn = t.transaction().add_files(adds)
    if "remove" in kw:
        txn.remove_files(kw["remove"])
    if "app" in kw:
        txn.set_app_transaction(*kw["app"])
    for domain, conf in kw.get("domains", ()):
        txn.set_domain_metadata(domain, conf)
    txn.commit(auto_checkpoint=False)


def _stats(n: int) -> str:
    return json.dumps(
        {"numRecords": n, "minValues": {"id": 0}, "maxValues": {"id": n}, "nullCount": {"id": 0}}
    )


def build_partitioned(root: Path) -> None:
    """Partitions of four types, app transactions, domain metadata, a classic checkpoint then commits."""
    schema = pa.schema([("id", pa.int64()), ("p", pa.string()), ("d", pa.date32()), ("n", pa.int32())])
    t = DeltaTable.create(str(root), schema, partition_by=["p", "d", "n"])
    for i in range(1, 7):
        pv = {"p": f"v {i % 3}", "d": f"2024-01-0{i}", "n": str(i - 3)}
        add = AddFile(f"p=v%20{i % 3}/d=2024-01-0{i}/n={i - 3}/f{i}.parquet", 100 + i, pv, stats=_stats(i))
        kw: dict[str, Any] = {"app": ("app", i), "domains": [("myapp", json.dumps({"i": i}))]}
        if i == 4:
            kw["remove"] = [AddFile.from_dict(t.snapshot().files.to_pylist()[0])]
        _commit(t, [add], **kw)
        if i == 3:
            t.checkpoint()


def build_column_mapping(root: Path) -> None:
    """Column mapping (name) with a nested struct, partitioned, a multi-part checkpoint then commits."""
    schema = pa.schema(
        [("id", pa.int64()), ("s", pa.struct([("a", pa.string()), ("b", pa.float64())])), ("k", pa.string())]
    )
    t = DeltaTable.create(
        str(root), schema, partition_by=["k"], configuration={"delta.columnMapping.mode": "name"}
    )
    fields = json.loads(t.snapshot().metadata.schema_string)["fields"]
    k = fields[2]["metadata"]["delta.columnMapping.physicalName"]
    for i in range(1, 6):
        _commit(t, [AddFile(f"k={i}/f{i}.parquet", 10 * i, {k: str(i)})])
        if i == 3:
            t.checkpoint(parts=2)


def build_v2_dv_ict(root: Path) -> None:
    """A V2 checkpoint with sidecars, in-commit timestamps and a deletion vector, then a commit."""
    schema = pa.schema([("id", pa.int64()), ("x", pa.string())])
    config = {
        "delta.checkpointPolicy": "v2",
        "delta.enableInCommitTimestamps": "true",
        "delta.enableDeletionVectors": "true",
    }
    t = DeltaTable.create(str(root), schema, configuration=config)
    for i in range(1, 6):
        _commit(t, [AddFile(f"f{i}.parquet", 10 + i, stats=_stats(i))], app=("loader", i))
    victim = AddFile.from_dict(t.snapshot().files.to_pylist()[0])
    dv = {"storageType": "i", "pathOrInlineDv": "wi5b=000010000siXQKl0rr91000f55c8Xg0@@D72lkbi5=",
          "offset": None, "sizeInBytes": 36, "cardinality": 2}  # fmt: skip
    stats = json.dumps({**json.loads(victim.stats), "tightBounds": False})  # a new vector's bounds are wide
    with_dv = AddFile(victim.path, victim.size, stats=stats, deletion_vector=dv)
    t.transaction().remove_files([victim]).add_files([with_dv]).commit(auto_checkpoint=False)
    t.checkpoint(parts=2)
    _commit(t, [AddFile("f9.parquet", 99)])


CORE_SEEDS: dict[str, Callable[[Path], None]] = {
    "core/partitioned": build_partitioned,
    "core/column-mapping-multipart": build_column_mapping,
    "core/v2-dv-ict": build_v2_dv_ict,
}


def build_seeds(where: Path) -> dict[str, Path]:
    """Every seed table under ``where``: name -> table root."""
    seeds = {}
    for name, build in CORE_SEEDS.items():
        root = where / name.replace("/", "__")
        build(root)
        seeds[name] = root
    for name in GOLDEN_SEEDS:
        source = GOLDEN / name / "delta" / "_delta_log"
        if not source.is_dir():
            raise AssertionError(f"golden table {name} is missing under {GOLDEN}")
        root = where / name.replace("/", "__")
        shutil.copytree(source, root / "_delta_log", ignore=shutil.ignore_patterns(".*.crc"))
        seeds[name] = root
    return seeds


@dataclass(frozen=True)
class LogFiles:
    """What a mutation may target in one seed: its JSON files with line counts, its Parquet files."""

    json_files: tuple[tuple[str, int], ...]  # (name relative to _delta_log, number of lines), checksums too
    parquet_files: tuple[str, ...]
    all_files: tuple[str, ...]
    actions: dict[str, tuple[str, ...]]  # action name -> the JSON files that hold one

    @classmethod
    def of(cls, root: Path) -> LogFiles:
        log = root / "_delta_log"
        names = sorted(str(p.relative_to(log)) for p in log.rglob("*") if p.is_file())
        json_files = tuple(
            (n, len((log / n).read_bytes().splitlines()))
            for n in names
            if n.endswith((".json", ".crc")) or n == "_last_checkpoint"  # a checksum is one JSON object
        )
        parquet = tuple(n for n in names if n.endswith(".parquet"))
        actions: dict[str, list[str]] = {}
        for name, _ in json_files:
            for line in (log / name).read_bytes().splitlines():
                try:
                    obj = json.loads(line)
                except ValueError:
                    continue
                for action in obj if isinstance(obj, dict) else ():
                    if name not in actions.setdefault(action, []):
                        actions[action].append(name)
        return cls(json_files, parquet, tuple(names), {k: tuple(v) for k, v in actions.items()})


def versions_named(root: Path) -> list[int]:
    """The versions of the commit files in the log, as their names say (beyond int64 included)."""
    return sorted(
        int(p.name[:20]) for p in (root / "_delta_log").iterdir() if re.fullmatch(r"\d{20}\.json", p.name)
    )
