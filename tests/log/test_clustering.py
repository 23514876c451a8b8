"""Clustered tables on commits of the core ("Clustered Table"): the ``delta.clustering`` domain kept
intact, changed only on purpose, statistics for clustering columns, and ``clusteringProvider`` carried.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from airflow_provider_delta.log import (
    ConcurrentTransactionError,
    DeltaTable,
    InvalidCommitError,
    add_file_from_parquet,
)
from airflow_provider_delta.log.features.clustering import DOMAIN, LIQUID, clustering_columns, logical_names
from airflow_provider_delta.log.schema.schema import delta_schema_to_arrow

SCHEMA = pa.schema([("id", pa.int64()), ("name", pa.string()), ("s", pa.struct([("x", pa.int32())]))])
CLUSTERED = {"delta.feature.clustering": "supported", "delta.columnMapping.mode": "name"}


def clustered(root: Path, *columns: str) -> DeltaTable:
    t = DeltaTable.create(str(root), SCHEMA, configuration=CLUSTERED)
    t.transaction().set_clustering_columns(list(columns)).commit("CLUSTER BY")
    return t


def data_file(t: DeltaTable, name: str, ids: list[int]):
    snap = t.snapshot()
    physical = delta_schema_to_arrow(snap.metadata.schema, physical=True)
    data = pa.table([pa.array(ids, pa.int64()), pa.array([str(i) for i in ids]),
                     pa.array([{"x": i} for i in ids], physical.field(2).type)], schema=physical)  # fmt: skip
    pq.write_table(data, Path(t.uri) / name)
    return add_file_from_parquet(snap, name)


def test_the_domain_names_physical_columns_and_survives_appends_and_checkpoints(tmp_path: Path):
    t = clustered(tmp_path, "id", "s.x")
    snap = t.snapshot()
    assert {"clustering", "domainMetadata"} <= set(snap.protocol.writer_features or ())
    paths = clustering_columns(snap.domain_metadata)
    assert all(part.startswith("col-") for path in paths for part in path) and len(paths[1]) == 2
    assert logical_names(snap.metadata, paths) == ["id", "s.x"]
    before = snap.domain_metadata[DOMAIN]
    for i in range(3):  # appends need not cluster: plain files, no provider
        t.transaction().add_files([data_file(t, f"f{i}.parquet", [i])]).commit()
    t.checkpoint()
    assert DeltaTable(str(tmp_path)).snapshot().domain_metadata[DOMAIN] == before


def test_files_a_clustering_job_writes_carry_their_provider(tmp_path: Path):
    t = clustered(tmp_path, "id")
    f = data_file(t, "a.parquet", [1, 2])
    t.transaction().add_files([f]).commit()
    rewritten = dataclasses.replace(data_file(t, "b.parquet", [1, 2]), data_change=False,
                                    clustering_provider=LIQUID)  # fmt: skip
    t.transaction().remove_files([f], data_change=False).add_files([rewritten]).commit("OPTIMIZE")
    assert t.snapshot().files.select(["path", "clusteringProvider"]).to_pylist() == [
        {"path": "b.parquet", "clusteringProvider": "liquid"}
    ]
    line = (tmp_path / "_delta_log" / f"{3:020d}.json").read_text()
    assert '"clusteringProvider":"liquid"' in line


def test_changing_the_columns_updates_the_domain(tmp_path: Path):
    t = clustered(tmp_path, "id")
    t.transaction().set_clustering_columns(["name"]).commit("CLUSTER BY")
    snap = t.snapshot()
    assert logical_names(snap.metadata, clustering_columns(snap.domain_metadata)) == ["name"]
    t.transaction().set_clustering_columns([]).commit("CLUSTER BY")
    assert clustering_columns(t.snapshot().domain_metadata) == []


def test_two_commits_that_change_the_columns_conflict(tmp_path: Path):
    t = clustered(tmp_path, "id")
    loser = t.transaction().set_clustering_columns(["name"])
    t.transaction().set_clustering_columns(["s.x"]).commit("CLUSTER BY")
    with pytest.raises(ConcurrentTransactionError, match="delta.clustering"):
        loser.commit("CLUSTER BY")


def test_added_files_need_statistics_for_the_clustering_columns(tmp_path: Path):
    t = clustered(tmp_path, "id")
    f = data_file(t, "a.parquet", [1])
    bad = dataclasses.replace(f, stats=json.dumps({"numRecords": 1, "nullCount": {}}))
    with pytest.raises(InvalidCommitError, match="a.parquet has none for"):
        t.transaction().add_files([bad]).commit()
    with pytest.raises(InvalidCommitError, match="has none for"):
        t.transaction().add_files([dataclasses.replace(f, stats=None)]).commit()
    assert t.version() == 1


def test_bad_clustering_columns_are_refused(tmp_path: Path):
    t = clustered(tmp_path, "id")
    with pytest.raises(InvalidCommitError, match="not in the table schema"):
        t.transaction().set_clustering_columns(["nope"])
    with pytest.raises(InvalidCommitError, match="no min/max"):
        t.transaction().set_clustering_columns(["s"])
    plain = DeltaTable.create(str(tmp_path / "plain"), SCHEMA)
    with pytest.raises(InvalidCommitError, match="without the clustering feature"):
        plain.transaction().set_clustering_columns(["id"]).commit()
    with pytest.raises(InvalidCommitError, match="cannot also be partitioned"):
        DeltaTable.create(str(tmp_path / "part"), SCHEMA, partition_by=["name"], configuration=CLUSTERED)
    assert not list((tmp_path / "part").glob("_delta_log/*.json"))
