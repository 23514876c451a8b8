"""Row tracking on commits of the core ("Row Tracking"): fresh ids from the domain's high-water mark,
recomputed on every retry, kept by re-added files, and nothing assigned while tracking is suspended.

Delta Spark's behaviour on the same tables is checked live in tests/oracle/test_features_agree.py; these
are the rules one by one, on local tables.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from airflow_provider_delta.log import AddFile, DeltaTable, InvalidCommitError, add_file_from_parquet
from airflow_provider_delta.log.features.row_tracking import DOMAIN, MATERIALIZED_ROW_ID, high_water_mark

SCHEMA = pa.schema([("id", pa.int64()), ("name", pa.string())])
ENABLED = {"delta.enableRowTracking": "true"}


def data_file(t: DeltaTable, name: str, rows: int, first: int = 0) -> AddFile:
    ids = list(range(first, first + rows))
    pq.write_table(pa.table({"id": ids, "name": [f"n{i}" for i in ids]}), Path(t.uri) / name)
    return add_file_from_parquet(t, name)


def row_ids(t: DeltaTable) -> dict[str, tuple[int, int, int]]:
    """path -> (baseRowId, defaultRowCommitVersion, numRecords) of the live files."""
    rows = t.snapshot().files.select(["path", "baseRowId", "defaultRowCommitVersion", "stats"]).to_pylist()
    return {r["path"]: (r["baseRowId"], r["defaultRowCommitVersion"], json.loads(r["stats"])["numRecords"])
            for r in rows}  # fmt: skip


def assert_disjoint(ids: dict[str, tuple[int, int, int]], mark: int) -> None:
    """No row id is given twice, and every id is at or below the table's high-water mark."""
    ranges = sorted((base, base + n - 1) for base, _, n in ids.values())
    for (_, end), (start, _) in zip(ranges, ranges[1:], strict=False):
        assert end < start, f"overlapping row ids: {ranges}"
    assert ranges[-1][1] <= mark


def test_creating_a_table_with_row_tracking_names_its_columns_and_features(tmp_path: Path):
    t = DeltaTable.create(str(tmp_path), SCHEMA, configuration=ENABLED)
    snap = t.snapshot()
    assert {"rowTracking", "domainMetadata"} <= set(snap.protocol.writer_features or ())
    assert snap.metadata.configuration[MATERIALIZED_ROW_ID].startswith("_row-id-col-")


def test_appends_get_fresh_ids_above_the_mark_and_their_commit_version(tmp_path: Path):
    t = DeltaTable.create(str(tmp_path), SCHEMA, configuration=ENABLED)
    a, b = data_file(t, "a.parquet", 3), data_file(t, "b.parquet", 2)
    txn = t.transaction().add_files([a, b])
    assert txn.commit().version == 1
    assert [(x.base_row_id, x.default_row_commit_version) for x in txn.committed_adds] == [(0, 1), (3, 1)]
    assert row_ids(t) == {"a.parquet": (0, 1, 3), "b.parquet": (3, 1, 2)}
    assert high_water_mark(t.snapshot().domain_metadata) == 4
    t.transaction().add_files([data_file(t, "c.parquet", 4)]).commit()
    assert row_ids(t)["c.parquet"] == (5, 2, 4)
    assert json.loads(t.snapshot().domain_metadata[DOMAIN].configuration)["rowIdHighWaterMark"] == 8


def test_a_retry_reassigns_ids_past_the_winner(tmp_path: Path):
    """The loser read the table at the same version as the winner; its retry must not reuse the ids the
    winner took, and its files carry the version they finally land in."""
    t = DeltaTable.create(str(tmp_path), SCHEMA, configuration=ENABLED)
    t.transaction().add_files([data_file(t, "base.parquet", 2)]).commit()
    loser = t.transaction().add_files([data_file(t, "late.parquet", 5)])
    winner = t.transaction().add_files([data_file(t, "early.parquet", 3)])
    assert winner.commit().version == 2
    result = loser.commit()
    assert (result.version, result.attempts) == (3, 2)
    ids = row_ids(t)
    assert ids["early.parquet"] == (2, 2, 3)
    assert ids["late.parquet"] == (5, 3, 5)  # was (2, 2, 5) in the attempt that lost
    assert_disjoint(ids, high_water_mark(t.snapshot().domain_metadata))
    assert high_water_mark(t.snapshot().domain_metadata) == 9


def test_a_retry_after_a_winner_without_new_ids_keeps_the_mark(tmp_path: Path):
    t = DeltaTable.create(str(tmp_path), SCHEMA, configuration=ENABLED)
    first = data_file(t, "first.parquet", 2)
    t.transaction().add_files([first]).commit()
    loser = t.transaction().add_files([data_file(t, "late.parquet", 1)])
    t.transaction().remove_files([AddFile.from_dict(t.snapshot().files.to_pylist()[0])]).commit()
    loser.commit()
    assert row_ids(t) == {"late.parquet": (2, 3, 1)}


def test_re_added_files_keep_their_ids_and_version(tmp_path: Path):
    t = DeltaTable.create(str(tmp_path), SCHEMA, configuration=ENABLED)
    a = data_file(t, "a.parquet", 3)
    t.transaction().add_files([a, data_file(t, "b.parquet", 2)]).commit()
    # The file as the caller built it, without ids: the table's ids for its path are kept.
    again = dataclasses.replace(a, data_change=False, tags={"note": "re-added"})
    txn = t.transaction().add_files([again])
    txn.commit()
    assert txn.committed_adds[0].base_row_id == 0 and txn.committed_adds[0].default_row_commit_version == 1
    # A row of Snapshot.files carries them already.
    row = next(r for r in t.snapshot().files.to_pylist() if r["path"] == "b.parquet")
    t.transaction().add_files([dataclasses.replace(AddFile.from_dict(row), data_change=False)]).commit()
    assert row_ids(t) == {"a.parquet": (0, 1, 3), "b.parquet": (3, 1, 2)}
    assert high_water_mark(t.snapshot().domain_metadata) == 4  # nothing new was assigned
    assert DOMAIN not in _commit_domains(tmp_path, 3)


def test_supported_but_not_enabled_still_assigns_ids(tmp_path: Path):
    """"Whenever Row Tracking is supported, fresh Row IDs must be assigned", enabled or not."""
    t = DeltaTable.create(str(tmp_path), SCHEMA, configuration={"delta.feature.rowTracking": "supported"})
    assert "delta.enableRowTracking" not in t.snapshot().metadata.configuration
    t.transaction().add_files([data_file(t, "a.parquet", 3)]).commit()
    assert row_ids(t) == {"a.parquet": (0, 1, 3)}


def test_suspended_tracking_assigns_nothing(tmp_path: Path):
    config = {"delta.feature.rowTracking": "supported", "delta.rowTrackingSuspended": "true"}
    t = DeltaTable.create(str(tmp_path), SCHEMA, configuration=config)
    a = data_file(t, "a.parquet", 3)
    txn = t.transaction().add_files([dataclasses.replace(a, base_row_id=7, default_row_commit_version=1)])
    txn.commit()
    assert row_ids(t) == {"a.parquet": (None, None, 3)}
    assert DOMAIN not in t.snapshot().domain_metadata


def test_enabled_and_suspended_together_is_refused_with_nothing_written(tmp_path: Path):
    t = DeltaTable.create(str(tmp_path), SCHEMA, configuration=ENABLED)
    md = t.snapshot().metadata
    bad = dataclasses.replace(md, configuration={**md.configuration, "delta.rowTrackingSuspended": "true"})
    with pytest.raises(InvalidCommitError, match="enabled and suspended"):
        t.transaction().update_metadata(bad).add_files([data_file(t, "a.parquet", 1)]).commit()
    assert t.version() == 0


def test_fresh_files_need_a_row_count(tmp_path: Path):
    t = DeltaTable.create(str(tmp_path), SCHEMA, configuration=ENABLED)
    a = dataclasses.replace(data_file(t, "a.parquet", 1), stats=None)
    with pytest.raises(InvalidCommitError, match="a.parquet has no numRecords"):
        t.transaction().add_files([a]).commit()
    assert t.version() == 0


def test_the_domain_cannot_be_set_by_hand(tmp_path: Path):
    t = DeltaTable.create(str(tmp_path), SCHEMA, configuration=ENABLED)
    txn = t.transaction().set_domain_metadata(DOMAIN, json.dumps({"rowIdHighWaterMark": 99}))
    with pytest.raises(InvalidCommitError, match="set by the commit itself"):
        txn.commit()
    assert t.version() == 0


def test_tables_without_the_feature_get_no_ids(tmp_path: Path):
    t = DeltaTable.create(str(tmp_path), SCHEMA)
    t.transaction().add_files([data_file(t, "a.parquet", 3)]).commit()
    assert row_ids(t) == {"a.parquet": (None, None, 3)}


def _commit_domains(root: Path, version: int) -> set[str]:
    lines = (root / "_delta_log" / f"{version:020d}.json").read_text().splitlines()
    return {json.loads(line)["domainMetadata"]["domain"] for line in lines if "domainMetadata" in line}


def test_a_lazy_snapshot_looks_up_only_the_re_added_files(tmp_path: Path):
    """A commit from a snapshot whose file list is not in memory finds the ids of the files it re-adds by
    streaming the log past them, and a commit without adds (VACUUM START and END, say) reads no file
    list at all: on a table of millions of files neither may hold every file."""
    t = DeltaTable.create(str(tmp_path), SCHEMA, configuration=ENABLED)
    a = data_file(t, "a.parquet", 3)
    t.transaction().add_files([a, data_file(t, "b.parquet", 2)]).commit()
    t.checkpoint()
    fresh = DeltaTable(str(tmp_path))
    empty = fresh.transaction()
    assert not empty.snapshot.files_loaded
    empty.commit()
    assert not empty.snapshot.files_loaded
    again = fresh.transaction().add_files([dataclasses.replace(a, data_change=False)])
    assert not again.snapshot.files_loaded
    again.commit()
    assert not again.snapshot.files_loaded
    assert (again.committed_adds[0].base_row_id, again.committed_adds[0].default_row_commit_version) == (0, 1)
    assert row_ids(t) == {"a.parquet": (0, 1, 3), "b.parquet": (3, 1, 2)}
    assert high_water_mark(t.snapshot().domain_metadata) == 4
