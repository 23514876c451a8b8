"""Checkpoints built by Spark, for tables whose file lists outgrow one machine ("Checkpoints").

Same content as the core's ``DeltaTable.checkpoint()``, computed in parallel:

1. the driver picks the log segment (previous checkpoint + JSON commits) with the core;
2. executors parse those files with the core's own parsers (one task per file), so paths, maps and
   deletion vectors are decoded exactly as the core decodes them;
3. Spark reconciles file actions by (path, deletion vector id), latest version wins ("Action
   Reconciliation"), drops expired tombstones, and reconciles ``txn`` per app id (expired ones dropped);
4. the rows are range-partitioned by path and each task writes one part with the core's checkpoint
   layout; the driver then points ``_last_checkpoint`` at it.

Protocol, metadata and domain metadata are a handful of rows: the driver reconciles them.
"""

from __future__ import annotations

import json
import logging
import math
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from airflow_provider_delta.log import DeltaTable
from airflow_provider_delta.log.actions.actions import (
    ADD,
    REMOVE,
    DomainMetadata,
    Metadata,
    Protocol,
    SetTransaction,
)
from airflow_provider_delta.log.base.errors import UnsupportedFeatureError
from airflow_provider_delta.log.features.configuration import TableConfiguration
from airflow_provider_delta.log.features.protocol import check_read_supported
from airflow_provider_delta.log.files.last_checkpoint import LAST_CHECKPOINT, LastCheckpoint
from airflow_provider_delta.log.files.segment import LogSegment, SegmentBuilder, read_last_checkpoint
from airflow_provider_delta.log.files.storage import LogStore
from airflow_provider_delta.log.snapshot.checkpoint import DEFAULT_PART_SIZE, checkpoint_table, parquet_bytes
from airflow_provider_delta.log.snapshot.replay import TableState

from .read import task_frame
from .session import default_parallelism

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

TXN = pa.struct([("appId", pa.string()), ("version", pa.int64()), ("lastUpdated", pa.int64())])
ACTION_ROW = pa.schema(
    [
        ("version", pa.int64()),
        ("ord", pa.int64()),
        ("add", ADD),
        ("remove", REMOVE),
        ("txn", TXN),
        ("small", pa.string()),
    ]  # fmt: skip
)
CHECKPOINT_COLUMNS = ("add", "remove", "metaData", "protocol", "txn", "domainMetadata")
_BATCH_ROWS = 65_536
PART_ROW = pa.schema(
    [("part", pa.int64()), ("rows", pa.int64()), ("adds", pa.int64()), ("bytes", pa.int64())]
)


@dataclass(frozen=True)
class SmallActions:
    """The reconciled non-file actions of the version being checkpointed."""

    protocol: Protocol
    metadata: Metadata
    txns: dict[str, SetTransaction]
    domains: dict[str, DomainMetadata]


def checkpoint_with_spark(
    spark: SparkSession,
    table_uri: str,
    version: int | None = None,
    parts: int | None = None,
    storage_options: dict[str, Any] | None = None,
) -> LastCheckpoint:
    """Write a checkpoint of ``version`` (latest by default) in ``parts`` parts (by default one per
    ``delta.checkpoint.partSize`` actions); returns the new ``_last_checkpoint``."""
    from pyspark import StorageLevel

    options = dict(storage_options or {})
    store = DeltaTable(table_uri, options).store
    segment = SegmentBuilder(store).build(version)
    if segment.checkpoint is not None and segment.checkpoint.kind == "v2":
        raise UnsupportedFeatureError("checkpoint_with_spark cannot read V2 checkpoints yet: use "
                                      "DeltaTable.checkpoint()", features=("v2Checkpoint",))  # fmt: skip
    now = int(time.time() * 1000)
    actions = _read_actions(spark, table_uri, options, segment).persist(StorageLevel.MEMORY_AND_DISK)
    try:
        small = _small_actions(actions, segment.version, table_uri, now)
        config = TableConfiguration(small.protocol, small.metadata)
        if config.checkpoint_policy == "v2":
            raise UnsupportedFeatureError(
                "checkpoint_with_spark writes classic checkpoints; this table asks for V2 ones "
                "(delta.checkpointPolicy=v2): use DeltaTable.checkpoint()",
                features=("v2Checkpoint",),
            )
        files = _reconciled_files(actions, now - config.deleted_file_retention_ms)
        n_parts = parts
        if not n_parts:  # as the core: one part per delta.checkpoint.partSize actions
            total = files.count() + 2 + len(small.txns) + len(small.domains)
            n_parts = max(1, math.ceil(total / (config.checkpoint_part_size or DEFAULT_PART_SIZE)))
        written = _write_parts(files, n_parts, segment.version, table_uri, options, small)
    finally:
        actions.unpersist()
    pointer = LastCheckpoint(
        version=segment.version,
        size=sum(p["rows"] for p in written),
        parts=n_parts if n_parts > 1 else None,
        size_in_bytes=sum(p["bytes"] for p in written),
        num_of_add_files=sum(p["adds"] for p in written),
    )
    current = read_last_checkpoint(store)
    if current is None or current.version <= pointer.version:  # only ever move the pointer forward
        store.write_replace(store.log_file(LAST_CHECKPOINT), pointer.to_json().encode())
    log.info("wrote %d-part checkpoint of %s at version %d with Spark", n_parts, table_uri, segment.version)
    return pointer


# -- reading the segment --------------------------------------------------------------------------------
def _read_actions(spark: SparkSession, table_uri: str, options: dict[str, Any], segment: LogSegment):
    from pyspark.sql.pandas.types import from_arrow_schema

    tasks = (
        [(f.name, segment.checkpoint.version) for f in segment.checkpoint.files] if segment.checkpoint else []
    )
    tasks += [(f.name, int(f.name.split(".", 1)[0])) for f in segment.commits]
    files = pa.table({"name": [t[0] for t in tasks], "version": pa.array([t[1] for t in tasks], pa.int64())})
    n = max(1, min(len(tasks), 4 * default_parallelism(spark)))

    def read_task(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        return read_action_files(batches, table_uri, options)

    frame = task_frame(spark, files, n)
    return frame.mapInArrow(read_task, from_arrow_schema(ACTION_ROW))


def read_action_files(
    batches: Iterator[pa.RecordBatch], table_uri: str, options: dict
) -> Iterator[pa.RecordBatch]:
    """Executor side: parse commit and checkpoint files with the core's parsers into action rows."""
    from airflow_provider_delta.log.files.commit_json import Actions, parse_json_actions

    store = LogStore(table_uri, options)
    for batch in batches:
        for task in batch.to_pylist():
            name, version = task["name"], task["version"]
            if name.endswith(".json"):
                acc = Actions()
                parse_json_actions(acc, [(version, store.log_file(name), store.read_log_file(name))])
                yield _action_rows(acc, version)
            else:
                yield from _checkpoint_rows(store, name, version)


def _checkpoint_rows(store: LogStore, name: str, version: int) -> Iterator[pa.RecordBatch]:
    """One part of a classic or multi-part checkpoint, streamed batch by batch through the core's reader
    (which also reshapes what legacy writers stored), so a part of millions of actions is never whole."""
    import pyarrow.parquet as pq

    from airflow_provider_delta.log.files.commit_json import Actions
    from airflow_provider_delta.log.snapshot.replay import apply_checkpoint_batch

    with store.open_input_file(store.log_file(name)) as fh:
        pf = pq.ParquetFile(fh)
        present = [c for c in CHECKPOINT_COLUMNS if c in pf.schema_arrow.names]
        for batch in pf.iter_batches(batch_size=_BATCH_ROWS, columns=present):
            acc = Actions()
            apply_checkpoint_batch(acc, batch, version, None)
            yield _action_rows(acc, version)


def _action_rows(acc: Any, version: int) -> pa.RecordBatch:
    """One row per action: adds first, then removes (a remove wins a tie, as in the core's replay)."""
    adds = _file_struct(acc.adds, ADD)
    removes = _file_struct(acc.removes, REMOVE)
    txns = pa.array([t.to_json() for t in acc.txns.values()], TXN)
    small = [json.dumps({"protocol": acc.protocol.to_json()})] if acc.protocol else []
    small += [json.dumps({"metaData": acc.metadata.to_json()})] if acc.metadata else []
    small += [json.dumps({"domainMetadata": d.to_json()}) for d in acc.domains.values()]
    counts = [len(adds), len(removes), len(txns), len(small)]
    total = sum(counts)
    columns = {}
    offset = 0
    for name, values in zip(
        ("add", "remove", "txn", "small"), (adds, removes, txns, pa.array(small, pa.string())), strict=True
    ):
        columns[name] = pa.concat_arrays(
            [pa.nulls(offset, values.type), values, pa.nulls(total - offset - len(values), values.type)]
        )
        offset += len(values)
    return pa.RecordBatch.from_arrays(
        [pa.array([version] * total, pa.int64()), pa.array(range(total), pa.int64()),
         columns["add"], columns["remove"], columns["txn"], columns["small"]],
        schema=ACTION_ROW,
    )  # fmt: skip


def _file_struct(tables: list[pa.Table], target: pa.StructType) -> pa.StructArray:
    tables = [t.drop_columns(["_version"]) if "_version" in t.column_names else t for t in tables]
    if not tables:
        return pa.array([], target)
    table = pa.concat_tables(tables).select([f.name for f in target])
    return pa.StructArray.from_arrays([c.combine_chunks() for c in table.columns], fields=list(target))


# -- reconciling ----------------------------------------------------------------------------------------
def _small_actions(actions: Any, version: int, table_uri: str, now: int) -> SmallActions:
    """Latest protocol and metadata, live domains, and unexpired txns (reconciled by Spark per app id)."""
    from pyspark.sql import functions as F

    from airflow_provider_delta.log.base.errors import CorruptLogError

    protocol, metadata, domains = None, None, {}
    rows = actions.where("small IS NOT NULL").select("version", "ord", "small").collect()
    for row in sorted(rows, key=lambda r: (r["version"], r["ord"])):
        ((name, body),) = json.loads(row["small"]).items()
        if name == "protocol":
            protocol = Protocol.from_json(body)
        elif name == "metaData":
            metadata = Metadata.from_json(body)
        else:
            domains[body["domain"]] = DomainMetadata(body["domain"], body["configuration"], body["removed"])
    where = f"table {table_uri} at version {version}"
    if protocol is None or metadata is None:
        raise CorruptLogError(f"{where} has no {'protocol' if protocol is None else 'metaData'} action")
    check_read_supported(protocol, where=where)
    latest = F.max_by("txn", F.struct("version", "ord")).alias("t")
    txn_rows = actions.where("txn IS NOT NULL").groupBy("txn.appId").agg(latest).select("t.*").collect()
    retention = TableConfiguration(protocol, metadata).set_transaction_retention_ms
    txns = {
        r["appId"]: SetTransaction(r["appId"], r["version"], r["lastUpdated"])
        for r in txn_rows
        # delta.setTransactionRetentionDuration: forget txns not updated within it (never without lastUpdated)
        if retention is None or r["lastUpdated"] is None or r["lastUpdated"] > now - retention
    }
    live = {k: d for k, d in domains.items() if not d.removed}
    return SmallActions(protocol, metadata, dict(sorted(txns.items())), live)


def _reconciled_files(actions: Any, tombstone_cutoff: int) -> Any:
    """One row per (path, DV id): the latest add or remove; tombstones older than the cutoff dropped."""
    from pyspark.sql import functions as F

    path = F.coalesce("add.path", "remove.path")
    dv = F.coalesce("add.deletionVector", "remove.deletionVector")
    offset = F.coalesce(F.concat(F.lit("@"), dv["offset"].cast("string")), F.lit(""))
    dv_id = F.concat(dv["storageType"], dv["pathOrInlineDv"], offset)
    key = F.when(dv.isNull(), path).otherwise(F.concat(path, F.lit("\x00"), dv_id))
    latest = F.max_by(F.struct("add", "remove"), F.struct("version", "ord")).alias("w")
    winners = (
        actions.where("add IS NOT NULL OR remove IS NOT NULL")
        .withColumn("key", key)
        .groupBy("key")
        .agg(latest)
        .select("key", "w.add", "w.remove")
    )
    kept_tombstone = F.col("remove").isNotNull() & (
        F.coalesce("remove.deletionTimestamp", F.lit(0)) > F.lit(tombstone_cutoff)
    )
    return winners.where(F.col("add").isNotNull() | kept_tombstone)


# -- writing the parts ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class PartSpec:
    table_uri: str
    storage_options: dict[str, Any] = field(
        default_factory=dict, repr=False
    )  # credentials: never in a repr or a log
    version: int = 0
    parts: int = 1
    small: SmallActions | None = None

    def name(self, part: int) -> str:
        if self.parts == 1:
            return f"{self.version:020d}.checkpoint.parquet"
        return f"{self.version:020d}.checkpoint.{part + 1:010d}.{self.parts:010d}.parquet"


def _write_parts(
    files: Any, n_parts: int, version: int, table_uri: str, options: dict, small: SmallActions
) -> list[dict[str, int]]:
    from pyspark.sql.pandas.types import from_arrow_schema

    spec = PartSpec(table_uri, options, version, n_parts, small)

    def write_task(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        return write_checkpoint_part(batches, spec)

    # Clustered by path: each part holds a key range ("Checkpoints": parts may be split any way).
    ordered = files.repartitionByRange(n_parts, "key").sortWithinPartitions("key")
    written = ordered.mapInArrow(write_task, from_arrow_schema(PART_ROW)).toArrow().to_pylist()
    done = {p["part"] for p in written}
    for part in range(n_parts):  # a range partition that got no rows still needs its file
        if part not in done:
            written.append(write_part(part, [], spec))
    return written


def write_checkpoint_part(batches: Iterator[pa.RecordBatch], spec: PartSpec) -> Iterator[pa.RecordBatch]:
    """Executor side: write this task's rows as one checkpoint part (part 0 also holds the small actions)."""
    from pyspark import TaskContext

    part = TaskContext.get().partitionId()
    yield pa.RecordBatch.from_pylist([write_part(part, list(batches), spec)], schema=PART_ROW)


def write_part(part: int, batches: list[pa.RecordBatch], spec: PartSpec) -> dict[str, int]:


    from airflow_provider_delta.log.base.arrow_utils import conform

    adds, removes = [], []
    for batch in batches:
        for name, target, out in (("add", ADD, adds), ("remove", REMOVE, removes)):
            col = conform(batch.column(name), target)
            col = col.filter(col.is_valid())
            if len(col):
                out.append(pa.Table.from_arrays(col.flatten(), names=[f.name for f in target]))
    small = spec.small
    first = part == 0
    # The core lays out checkpoint rows from a reconciled state; this one holds only this part's files.
    files = pa.concat_tables(adds) if adds else ADD_TABLE.empty_table()
    view = TableState(
        protocol=small.protocol, metadata=small.metadata,
        txns=small.txns if first else {}, domains=small.domains if first else {},
        files=files, tombstones=pa.concat_tables(removes) if removes else REMOVE_TABLE.empty_table(),
        commit_infos={},
    )  # fmt: skip
    table = checkpoint_table(view)
    if not first:
        table = table.filter(
            pa.compute.or_(table.column("add").is_valid(), table.column("remove").is_valid())
        )
    data = parquet_bytes(table, TableConfiguration(small.protocol, small.metadata))
    store = LogStore(spec.table_uri, spec.storage_options)
    store.write_replace(store.log_file(spec.name(part)), data)
    return {"part": part, "rows": table.num_rows, "adds": view.files.num_rows, "bytes": len(data)}


ADD_TABLE = pa.schema(list(ADD))
REMOVE_TABLE = pa.schema(list(REMOVE))
