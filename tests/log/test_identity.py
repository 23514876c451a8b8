"""Identity columns on commits of the core ("Identity Columns"): generated values, the high-water mark
moved in the same commit, explicit values refused, and the conflicts of two writers that move it.

Delta Spark's side (its values, its conflict checker against our commits) is checked live in
tests/oracle/test_features_agree.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from airflow_provider_delta.log import DeltaTable, MetadataChangedError, add_file_from_parquet
from airflow_provider_delta.log.actions.commit_info import IDENTITY_SCHEMA_UPDATE
from airflow_provider_delta.log.base.errors import IdentityColumnError
from airflow_provider_delta.log.features.identity import (
    IdentityValues,
    columns_to_generate,
    identity_columns,
    with_high_water_marks,
)


def schema(start: int = 10, step: int = 5, explicit: bool = False) -> pa.Schema:
    md = {"delta.identity.start": str(start), "delta.identity.step": str(step),
          "delta.identity.allowExplicitInsert": json.dumps(explicit)}  # fmt: skip
    return pa.schema([pa.field("id", pa.int64(), metadata=md), ("name", pa.string())])


def write(t: DeltaTable, name: str, names: list[str], explicit_ids: list[int] | None = None):
    """Append rows the way a writer of the core does: identity values generated unless given."""
    snap = t.snapshot()
    data = pa.table({"name": names} if explicit_ids is None else {"id": explicit_ids, "name": names})
    generate = IdentityValues(columns_to_generate(snap.metadata.schema, data.column_names, "test"))
    data = generate.fill(data).select(["id", "name"])
    pq.write_table(data, Path(t.uri) / name)
    txn = t.transaction().add_files([add_file_from_parquet(snap, name)])
    return txn.set_identity_high_water_marks(generate.high_water_marks)


def ids(t: DeltaTable) -> list[int]:
    return sorted(pq.read_table(t.uri, columns=["id"]).column("id").to_pylist())


def mark(t: DeltaTable) -> int | None:
    return identity_columns(t.snapshot().metadata.schema)[0].high_water_mark


def commit_info(root: Path, version: int) -> dict:
    first = (root / "_delta_log" / f"{version:020d}.json").read_text().splitlines()[0]
    return json.loads(first)["commitInfo"]


def test_generated_values_move_the_mark_in_the_same_commit(tmp_path: Path):
    t = DeltaTable.create(str(tmp_path), schema())
    assert t.snapshot().protocol.min_writer_version == 6  # "Writer Version 6: Identity Columns"
    write(t, "a.parquet", ["a", "b", "c"]).commit()
    assert ids(t) == [10, 15, 20] and mark(t) == 20
    assert commit_info(tmp_path, 1)["tags"] == {IDENTITY_SCHEMA_UPDATE: "true"}
    write(t, "b.parquet", ["d"]).commit()
    assert ids(t) == [10, 15, 20, 25] and mark(t) == 25


def test_explicit_values_are_refused_unless_allowed(tmp_path: Path):
    t = DeltaTable.create(str(tmp_path), schema())
    with pytest.raises(IdentityColumnError, match="GENERATED ALWAYS") as err:
        write(t, "a.parquet", ["a"], explicit_ids=[1])
    assert err.value.column == "id"
    assert t.version() == 0
    allowed = DeltaTable.create(str(tmp_path / "by_default"), schema(explicit=True))
    write(allowed, "a.parquet", ["a"], explicit_ids=[1]).commit()
    assert ids(allowed) == [1] and mark(allowed) is None  # explicit values do not move the mark


def test_files_with_values_the_commit_did_not_generate_are_refused(tmp_path: Path):
    """A caller that wrote identity values itself but did not move the mark (or went past it) is stopped
    by the files' statistics, before anything is committed."""
    t = DeltaTable.create(str(tmp_path), schema())
    write(t, "a.parquet", ["a", "b"]).commit()
    pq.write_table(pa.table({"id": [15, 20], "name": ["x", "y"]}), tmp_path / "dup.parquet")
    txn = t.transaction().add_files([add_file_from_parquet(t, "dup.parquet")])
    with pytest.raises(IdentityColumnError, match="outside what this commit generates"):
        txn.commit()
    txn = t.transaction().add_files([add_file_from_parquet(t, "dup.parquet")])
    with pytest.raises(IdentityColumnError, match="from 15 to 20"):
        txn.set_identity_high_water_marks({"id": 20}).commit()  # 15 was handed out before
    assert t.version() == 1


def test_two_writers_that_both_move_the_mark_conflict(tmp_path: Path):
    """As Delta Spark's conflict checker: the loser's metaData would reset the winner's mark and its
    values would repeat the winner's, so it fails with MetadataChangedError."""
    t = DeltaTable.create(str(tmp_path), schema())
    loser = write(t, "a.parquet", ["a"])
    write(t, "b.parquet", ["b"]).commit()
    with pytest.raises(MetadataChangedError):
        loser.commit()
    assert t.snapshot().file_paths() == ["b.parquet"] and mark(t) == 10


def test_an_identity_only_change_passes_a_writer_that_changes_no_metadata(tmp_path: Path):
    t = DeltaTable.create(str(tmp_path), schema(explicit=True))
    plain = write(t, "explicit.parquet", ["x"], explicit_ids=[1000])  # no mark to move
    write(t, "generated.parquet", ["g"]).commit()
    assert plain.commit().attempts == 2
    assert mark(t) == 10 and t.snapshot().num_files == 2


def test_the_mark_moves_as_delta_spark_moves_it(tmp_path: Path):
    t = DeltaTable.create(str(tmp_path), schema(start=10, step=5))
    md = t.snapshot().metadata

    def moved(metadata, value):
        return identity_columns(with_high_water_marks(metadata, {"id": value}).schema)[0].high_water_mark

    assert moved(md, 12) == 15  # rounded onto start + k * step
    assert moved(md, 9) is None  # before the start: the next value stays the start
    later = with_high_water_marks(md, {"id": 40})
    assert moved(later, 20) == 40  # never moved back
    down = DeltaTable.create(str(tmp_path / "down"), schema(start=0, step=-3)).snapshot().metadata
    assert moved(down, -7) == -9 and moved(down, 2) is None


def test_overflow_is_refused(tmp_path: Path):
    t = DeltaTable.create(str(tmp_path), schema(start=2**63 - 3, step=2))
    gen = IdentityValues(columns_to_generate(t.snapshot().metadata.schema, ["name"], "test"))
    assert gen.fill(pa.table({"name": ["a", "b"]})).column("id").to_pylist() == [2**63 - 3, 2**63 - 1]
    with pytest.raises(IdentityColumnError, match="overflow"):
        gen.fill(pa.table({"name": ["c"]}))
