"""Change data of our commits as Delta Spark's ``table_changes`` reads it, on tables Delta Spark made with
the change data feed and deletion vectors on through session defaults (as a managed platform sets them):
one plain, one with column mapping. One Delta Spark session.

Our core commits, in turn: an append; deletes by deletion vector (no change data written: Delta Spark infers
the deleted rows from the vectors, as for its own DELETE); a file removed whole (its live rows are the
deletes); an UPDATE (rows deleted by vector, their new versions appended, pre- and post-images given as
change data); a copy-on-write DELETE (a file rewritten without some rows, those rows given as change data).
``table_changes`` returns exactly the changes we meant, version by version. Then Delta Spark DELETEs (no
change data files, as ours) and UPDATEs (change data files), and our snapshot reads its rows.
"""

from __future__ import annotations

import json
from pathlib import Path
from urllib.parse import unquote

import fsspec
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from oracle_client import Oracle

from airflow_provider_delta.log import DeltaTable
from airflow_provider_delta.log.features.properties import column_mapping_mode_of as column_mapping_mode
from airflow_provider_delta.log.files.deletion_vectors import deleted_rows
from airflow_provider_delta.log.schema.schema import physical_name

LOCAL = fsspec.filesystem("file")
DEFAULTS = {
    "spark.databricks.delta.properties.defaults.enableChangeDataFeed": "true",
    "spark.databricks.delta.properties.defaults.enableDeletionVectors": "true",
}


@pytest.fixture(scope="module")
def spark(oracle: Oracle) -> Oracle:
    oracle.call("conf", DEFAULTS)
    return oracle


def _row(i: int, s: str | None = None) -> dict:
    return {"id": i, "s": s if s is not None else f"s{i}", "p": "a" if i % 2 == 0 else "b"}


class Ours:
    """Our core's view of one table: physical column names, each file's ids in row order."""

    def __init__(self, uri: str) -> None:
        self.table = DeltaTable(uri)
        self.root = Path(uri)
        md = self.table.snapshot().metadata
        mode = column_mapping_mode(md.configuration)
        self.physical = {f["name"]: physical_name(f, mode) for f in md.schema["fields"]}

    def ids(self, path: str) -> np.ndarray:
        return pq.read_table(self.root / path, columns=[self.physical["id"]]).column(0).to_numpy()

    def files(self, part: str) -> list[str]:
        """Delta Spark's live files of a partition."""
        key = self.physical["p"]
        files = [f for f in self.table.snapshot().files.to_pylist() if not f["path"].startswith("ours/")]
        return sorted(f["path"] for f in files if dict(f["partitionValues"])[key] == part)

    def write(self, name: str, rows: list[dict]) -> str:
        """A data file of ``rows`` (all of one partition) in physical names; its path."""
        data = pa.table({self.physical["id"]: pa.array([r["id"] for r in rows], pa.int64()),
                         self.physical["s"]: [r["s"] for r in rows]})  # fmt: skip
        (self.root / "ours").mkdir(exist_ok=True)
        pq.write_table(data, self.root / "ours" / name)
        return f"ours/{name}"

    def add(self, path: str, part: str):
        return self.table.add_file(path, {self.physical["p"]: part})

    def live_rows(self) -> list[int]:
        out = []
        for f in self.table.snapshot().files.to_pylist():
            ids = self.ids(f["path"])
            keep = np.ones(len(ids), bool)
            if f["deletionVector"]:
                keep[deleted_rows(f["deletionVector"], str(self.root), LOCAL, data_file=f["path"])] = False
            out += ids[keep].tolist()
        return sorted(out)


def _changes(spark: Oracle, uri: str, start: int) -> list[tuple]:
    rows = spark.sql(
        f"SELECT id, s, p, _change_type, _commit_version FROM table_changes_by_path('{uri}', {start})"
    )
    return sorted((r["_commit_version"], r["_change_type"], r["id"], r["s"], r["p"]) for r in rows)


def _expect(version: int, kind: str, rows: list[dict]) -> list[tuple]:
    return [(version, kind, r["id"], r["s"], r["p"]) for r in rows]


def _cdc_actions(root: Path, version: int) -> list[dict]:
    lines = (root / "_delta_log" / f"{version:020d}.json").read_text().splitlines()
    return [json.loads(x)["cdc"] for x in lines if '"cdc"' in x]


@pytest.mark.parametrize("column_mapping", [False, True], ids=["plain", "column-mapping"])
def test_table_changes_returns_the_changes_we_committed(spark: Oracle, tmp_path: Path, column_mapping: bool):
    uri = str(tmp_path / "t")
    props = " TBLPROPERTIES ('delta.columnMapping.mode' = 'name')" if column_mapping else ""
    spark.call("sql", f"CREATE TABLE delta.`{uri}` (id BIGINT, s STRING, p STRING) USING delta "
                      f"PARTITIONED BY (p){props}")  # fmt: skip
    for lo in (0, 100, 200):  # three INSERTs: three files per partition
        spark.call("sql", f"INSERT INTO delta.`{uri}` SELECT id, concat('s', id), IF(id % 2 = 0, 'a', 'b') "
                          f"FROM range({lo}, {lo + 100}, 1, 1)")  # fmt: skip
    ours = Ours(uri)
    config = ours.table.snapshot().configuration
    assert config["delta.enableChangeDataFeed"] == config["delta.enableDeletionVectors"] == "true"
    expected: list[tuple] = []
    live = {r: _row(r) for r in range(300)}

    # v4: an append: its rows are inserts (no change data written).
    appended = [_row(i) for i in range(1000, 1010, 2)]
    v = (
        ours.table.transaction()
        .add_files(ours.add(ours.write("append.parquet", appended), "a"))
        .commit()
        .version
    )
    expected += _expect(v, "insert", appended)
    live |= {r["id"]: r for r in appended}

    # v5: deletes by deletion vector in two files of partition a: the rows the vectors add are deletes.
    f1, f2 = ours.files("a")[:2]
    gone = {f1: ours.ids(f1)[[0, 5, 9]], f2: ours.ids(f2)[[1, 2]]}
    rows = {f: np.flatnonzero(np.isin(ours.ids(f), ids)) for f, ids in gone.items()}
    v = ours.table.transaction().delete_rows(rows).commit("DELETE").version
    assert _cdc_actions(ours.root, v) == []
    for i in np.concatenate(list(gone.values())).tolist():
        expected += _expect(v, "delete", [live.pop(i)])

    # v6: f1 (which has a vector now) removed whole: only its live rows are deletes.
    v = ours.table.transaction().remove_files(f1).commit("DELETE").version
    expected += _expect(v, "delete", [live.pop(i) for i in ours.ids(f1).tolist() if i in live])

    # v7: an UPDATE: rows of f2 deleted by vector, their new versions in a new file, both as change data.
    updated = [i for i in ours.ids(f2).tolist() if i in live][:4]
    pre, post = [live[i] for i in updated], [_row(i, "updated") for i in updated]
    txn = ours.table.transaction().delete_rows({f2: np.flatnonzero(np.isin(ours.ids(f2), updated))})
    txn.add_files(ours.add(ours.write("update.parquet", post), "a"))
    images = [{**r, "_change_type": "update_preimage"} for r in pre]
    images += [{**r, "_change_type": "update_postimage"} for r in post]
    txn.add_change_data(pa.Table.from_pylist(images))
    v = txn.commit("UPDATE").version
    (cdc,) = _cdc_actions(ours.root, v)  # all of partition a: one file
    folder = unquote(cdc["path"]).rsplit("/", 1)[0]
    assert len(folder) == 2 if column_mapping else folder == "_change_data/p=a"
    expected += _expect(v, "update_preimage", pre) + _expect(v, "update_postimage", post)
    live |= {r["id"]: r for r in post}

    # v8: a copy-on-write DELETE in partition b: a file rewritten without its ids divisible by 3.
    (g,) = ours.files("b")[:1]
    kept = [live[i] for i in ours.ids(g).tolist() if i % 3]
    dropped = [live[i] for i in ours.ids(g).tolist() if i % 3 == 0]
    txn = (
        ours.table.transaction().remove_files(g).add_files(ours.add(ours.write("rewrite.parquet", kept), "b"))
    )
    txn.add_change_data(pa.Table.from_pylist([{**r, "_change_type": "delete"} for r in dropped]))
    v = txn.commit("DELETE").version
    expected += _expect(v, "delete", dropped)
    for r in dropped:
        live.pop(r["id"])

    assert _changes(spark, uri, 4) == sorted(expected)
    assert sorted(json.loads(r)["id"] for r in spark.call("rows", uri)) == sorted(live) == ours.live_rows()

    # Delta Spark goes on: its DELETE by vector writes no change data (as ours), its UPDATE does.
    victims = [1000, *[i for i in sorted(live) if 100 < i < 200][:2]]
    spark.call("sql", f"DELETE FROM delta.`{uri}` WHERE id IN ({', '.join(map(str, victims))})")
    v_delete = ours.table.version()
    assert _cdc_actions(ours.root, v_delete) == []
    spark.call("sql", f"UPDATE delta.`{uri}` SET s = 'again' WHERE id = 1002")
    v_update = ours.table.version()
    assert len(_cdc_actions(ours.root, v_update)) == 1
    changes = _changes(spark, uri, v_delete)
    assert changes == sorted(_expect(v_delete, "delete", [live.pop(i) for i in victims])
                             + _expect(v_update, "update_preimage", [live[1002]])
                             + _expect(v_update, "update_postimage", [_row(1002, "again")]))  # fmt: skip
    assert ours.live_rows() == sorted(live)
