"""Tables Delta Spark makes with row tracking, identity columns, liquid clustering and variants: we commit to
them, Delta Spark reads what we meant, goes on writing, and we read its result.

Each table is created the way a managed platform creates it: features switched on by Delta Spark's session
defaults (``spark.databricks.delta.properties.defaults.*``) or by the DDL that asks for them (``GENERATED
ALWAYS AS IDENTITY``, ``CLUSTER BY``, a ``VARIANT`` column), then filled by Delta Spark. Our side appends
through the core's Arrow path (values from ``identity.IdentityValues``, variants from
``variant.from_python``) or through our Spark writer, and removes a file Delta Spark wrote. After each side's
turn the two engines must agree on the snapshot (domains included), the rows, ``_metadata.row_id`` and
``_metadata.row_commit_version``; identity values and row ids must never repeat, and ours must be above the
marks the table had. ``test_racing_writers_give_no_row_id_or_identity_value_twice`` races both engines on a
row-tracking + identity table.

One Delta Spark session serves the module; local commits from both processes go through hard links
(``LinkLocalLogStore``, as in test_mixed_writers.py).
"""

from __future__ import annotations

import json
import random
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from oracle_client import Oracle
from oracle_compare import Mismatches, compare_step

from airflow_provider_delta.log import AddFile, ConcurrentModificationError, DeltaTable, add_file_from_parquet
from airflow_provider_delta.log.features.clustering import clustering_columns, logical_names
from airflow_provider_delta.log.features.identity import IdentityValues, columns_to_generate, identity_columns
from airflow_provider_delta.log.features.row_tracking import high_water_mark
from airflow_provider_delta.log.schema.schema import delta_schema_to_arrow
from airflow_provider_delta.log.schema.variant import VARIANT, from_python

DEFAULTS = "spark.databricks.delta.properties.defaults."
IDENTITY = "id BIGINT GENERATED ALWAYS AS IDENTITY (START WITH 10 INCREMENT BY 5)"
SHREDDING = {"spark.sql.variant.writeShredding.enabled": "true",
             "spark.sql.variant.inferShreddingSchema": "true"}  # fmt: skip


@dataclass(frozen=True)
class Case:
    columns: str  # the DDL's columns
    defaults: dict[str, str] = field(default_factory=dict)  # session defaults while creating the table
    clause: str = ""  # CLUSTER BY / TBLPROPERTIES
    conf: dict[str, str] = field(default_factory=dict)  # session settings while Delta Spark writes
    ours: str = "arrow"  # which of our writers appends first: the core's Arrow path or our Spark writer
    # Delta Spark's commit that wins the race against our last append (which then retries), if any.
    racing: str | None = None


# Our second append always goes through the core's Arrow path. The variant table shreds (Delta Spark's
# files) next to our unshredded ones.
CASES = {
    "row tracking": Case("k INT, s STRING", {"enableRowTracking": "true"},
                         racing="INSERT INTO delta.`{uri}` (k, s) VALUES (41, 's41'), (42, 's42')"),
    "identity": Case(f"{IDENTITY}, k INT, s STRING", ours="spark"),
    "clustering": Case("k INT, s STRING", clause="CLUSTER BY (k)",
                       racing="INSERT INTO delta.`{uri}` (k, s) VALUES (41, 's41')"),
    "variant": Case("k INT, s STRING, v VARIANT", conf=SHREDDING, ours="spark",
                    clause="TBLPROPERTIES ('delta.enableVariantShredding' = 'true')"),
    "all together": Case(f"{IDENTITY}, k INT, s STRING, v VARIANT",
                         {"enableRowTracking": "true", "enableDeletionVectors": "true",
                          "enableInCommitTimestamps": "true", "enableChangeDataFeed": "true"},
                         clause="CLUSTER BY (k)", ours="spark",
                         racing="UPDATE delta.`{uri}` SET s = 'raced' WHERE k = 21"),
}  # fmt: skip


def _variant_sql(k: int) -> str:
    return f"""parse_json('{{"k": {k}, "tags": ["t{k}", {k % 3}], "nested": {{"x": {k / 2}}}}}')"""


def _variant_value(k: int) -> dict[str, Any]:
    return {"k": k, "tags": [f"t{k}", k % 3], "nested": {"x": k / 2}}


def _delta_insert(oracle: Oracle, uri: str, case: Case, keys: list[int]) -> None:
    has_v = "VARIANT" in case.columns
    rows = ", ".join(f"({k}, 's{k}'" + (f", {_variant_sql(k)})" if has_v else ")") for k in keys)
    names = "(k, s, v)" if has_v else "(k, s)"
    oracle.sql(f"INSERT INTO delta.`{uri}` {names} VALUES {rows}")


def _create(oracle: Oracle, uri: str, case: Case) -> None:
    oracle.call("conf", {DEFAULTS + k: v for k, v in case.defaults.items()})
    try:
        oracle.sql(f"CREATE TABLE delta.`{uri}` ({case.columns}) USING delta {case.clause}")
    finally:
        oracle.call("conf", {DEFAULTS + k: None for k in case.defaults})


# -- our writers ---------------------------------------------------------------------------------------------
def append_arrow(table: DeltaTable, keys: list[int], before_commit: Any = None) -> tuple[Any, list[AddFile]]:
    """An append through the core, as an Arrow writer does it: identity values generated from the table's
    rules, the row ids and the marks left to the transaction; ``before_commit`` runs between writing the
    file and committing (another writer's turn). Returns the CommitResult and the adds committed.

    The values are generated from the transaction's own snapshot: one taken before it would miss an
    identity mark another writer moved in between, and the commit would refuse the values as stale."""
    txn = table.transaction()
    snap = txn.snapshot
    schema = snap.metadata.schema
    names = {f["name"] for f in schema["fields"]}
    data = pa.table({"k": pa.array(keys, pa.int32()), "s": [f"s{k}" for k in keys]})
    if "v" in names:
        encoded = [from_python(_variant_value(k)) for k in keys]
        v = pa.StructArray.from_arrays([pa.array([e[0] for e in encoded], pa.binary()),
                                        pa.array([e[1] for e in encoded], pa.binary())], fields=list(VARIANT))
        data = data.append_column("v", v)
    generated = IdentityValues(columns_to_generate(schema, data.column_names, f"table {table.uri}"))
    data = generated.fill(data)
    physical = delta_schema_to_arrow(schema, physical=True)
    rel = f"ours-{uuid.uuid4()}.parquet"
    pq.write_table(data.select(physical.names).cast(physical), Path(table.uri) / rel)
    txn.add_files([add_file_from_parquet(snap, rel)])
    if before_commit is not None:
        before_commit()
    result = txn.set_identity_high_water_marks(generated.high_water_marks).commit()
    return result, txn.committed_adds


def append_spark(spark: Any, table: DeltaTable, keys: list[int]) -> int:
    from airflow_provider_delta.spark import write

    has_v = "v" in {f["name"] for f in table.snapshot().metadata.schema["fields"]}
    selects = [f"SELECT {k} AS k, 's{k}' AS s" + (f", {_variant_sql(k)} AS v" if has_v else "") for k in keys]
    columns = ["CAST(k AS INT) AS k", "s", *(["v"] if has_v else [])]
    return write(spark.sql(" UNION ALL ".join(selects)).selectExpr(*columns), table.uri).version


# -- what both engines read ------------------------------------------------------------------------------
def tracked_rows(oracle: Oracle, spark: Any, uri: str) -> tuple[list[tuple], list[tuple]]:
    """(k, id, row_id, row_commit_version) of every row, through Delta Spark and through our reader."""
    from airflow_provider_delta.spark import read

    snap = DeltaTable(uri).snapshot()
    has_id = "id" in {f["name"] for f in snap.metadata.schema["fields"]}
    tracked = snap.metadata.configuration.get("delta.enableRowTracking") == "true"
    meta = ", _metadata.row_id AS row_id, _metadata.row_commit_version AS rcv" if tracked else ""
    delta = oracle.sql(f"SELECT k{', id' if has_id else ''}{meta} FROM delta.`{uri}`")
    df = read(spark, uri, metadata=["row_id", "row_commit_version"] if tracked else [])
    ours = [r.asDict(recursive=True) for r in df.collect()]

    def key(r: dict[str, Any], row_id: Any, rcv: Any) -> tuple:
        return (r["k"], r.get("id"), row_id, rcv)

    theirs = sorted(key(r, r.get("row_id"), r.get("rcv")) for r in delta)
    mine = sorted(key(r, *((r.get("_metadata") or {}).get(f) for f in ("row_id", "row_commit_version")))
                  for r in ours)  # fmt: skip
    return theirs, mine


def check_turn(m: Mismatches, oracle: Oracle, spark: Any, uri: str, where: str) -> list[tuple]:
    """Both engines agree on the latest version; no row id or identity value repeats. Delta Spark's rows."""
    table = DeltaTable(uri)
    compare_step(m, oracle, spark, uri, table.version(), where)
    theirs, mine = tracked_rows(oracle, spark, uri)
    m.diff(where, "(k, id, row_id, row_commit_version)", theirs, mine)
    for i, name in ((1, "identity value"), (2, "row id")):
        values = [r[i] for r in theirs if r[i] is not None]
        if len(values) != len(set(values)):
            m.add(f"{where}: a {name} is given twice: {sorted(values)}")
    snap = table.snapshot()
    paths = clustering_columns(snap.domain_metadata)
    if paths is not None:
        clustered_by = oracle.call("detail", uri).get("clusteringColumns")
        m.diff(where, "clusteringColumns", clustered_by, logical_names(snap.metadata, paths))
    return theirs


def our_turn_was_intended(m: Mismatches, before: Any, version: int, keys: list[int], rows: list[tuple],
                          where: str) -> None:  # fmt: skip
    """Our rows carry what we meant: row ids above the mark the table had, our commit's version, identity
    values beyond the column's mark, moved in the same commit."""
    ours = [r for r in rows if r[0] in keys]
    m.diff(where, "our rows", sorted(r[0] for r in ours), sorted(keys))
    if "delta.rowTracking" in before.domain_metadata or before.metadata.configuration.get(
        "delta.enableRowTracking") == "true":  # fmt: skip
        mark = high_water_mark(before.domain_metadata)
        m.diff(where, "our row commit versions", {r[3] for r in ours}, {version})
        if any(r[2] is None or r[2] <= mark for r in ours):
            m.add(f"{where}: our row ids {sorted(r[2] for r in ours)} are not all above the mark {mark}")
    columns = identity_columns(before.metadata.schema)
    if columns:
        old = columns[0].high_water_mark
        after = identity_columns(DeltaTable(before.store.uri).snapshot(version).metadata.schema)[0]
        values = sorted(r[1] for r in ours)
        if old is not None and values[0] <= old or after.high_water_mark != max(values):
            m.add(f"{where}: our identity values {values} against marks {old} -> {after.high_water_mark}")


# -- the scenario ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", list(CASES))
def test_we_commit_to_tables_delta_spark_made(name, oracle, spark, tmp_path):
    case = CASES[name]
    uri = str(tmp_path / "t")
    m = Mismatches(name)
    oracle.call("conf", case.conf)
    try:
        _create(oracle, uri, case)
        _delta_insert(oracle, uri, case, [1, 2, 3, 4])
        table = DeltaTable(uri)
        # Our turn: an append, then a remove of a file Delta Spark wrote.
        before = table.snapshot()
        keys = [11, 12, 13]
        if case.ours == "spark":
            version = append_spark(spark, table, keys)
        else:
            version = append_arrow(table, keys)[0].version
        theirs = next(r for r in table.snapshot().files.to_pylist() if not r["path"].startswith("ours-")
                      and r["path"] not in _our_paths(table, version))  # fmt: skip
        table.transaction().remove_files([AddFile.from_dict(theirs)]).commit("DELETE")
        rows = check_turn(m, oracle, spark, uri, "after our append and remove")
        our_turn_was_intended(m, before, version, keys, rows, "our append")
        # Delta Spark goes on: more rows, row-level changes on our rows, OPTIMIZE; we read its result.
        _delta_insert(oracle, uri, case, [21, 22])
        oracle.sql(f"DELETE FROM delta.`{uri}` WHERE k = 11")
        oracle.sql(f"UPDATE delta.`{uri}` SET s = 'updated' WHERE k = 12")
        if "CLUSTER BY" in case.clause:
            oracle.sql(f"OPTIMIZE delta.`{uri}`")
        check_turn(m, oracle, spark, uri, "after Delta Spark's writes")
        # Ours again, through the Arrow path, above whatever Delta Spark handed out meanwhile, and (where
        # the case races) above what a commit of Delta Spark's took after we had read the table.
        racing = case.racing.format(uri=uri) if case.racing else None
        result, second = append_arrow(table, [31, 32],
                                      before_commit=racing and (lambda: oracle.sql(racing)))  # fmt: skip
        if result.attempts != (2 if racing else 1):
            m.add(f"our second append took {result.attempts} attempt(s) (a concurrent commit: {racing})")
        rows = check_turn(m, oracle, spark, uri, "after our second append")
        our_turn_was_intended(m, table.snapshot(result.version - 1), result.version, [31, 32], rows,
                              "our second append")  # fmt: skip
        if case.defaults.get("enableDeletionVectors") == "true":
            # Our deletion vector on a table with every feature on: row 0 of our file (key 31) goes; Delta
            # Spark reads the rest with the same row ids, and its table_changes (change data feed on) reports
            # exactly that row deleted.
            deleted = table.transaction().delete_rows({second[0].path: [0]}).commit("DELETE")
            after = check_turn(m, oracle, spark, uri, "after our deletion vector")
            left = sorted(r[0] for r in after if r[0] in (31, 32))
            m.diff("our deletion vector", "keys 31, 32 left", left, [32])
            m.diff("our deletion vector", "row ids kept", sorted(r for r in after if r[0] != 31),
                   sorted(r for r in rows if r[0] != 31))  # fmt: skip
            v = deleted.version
            changes = oracle.sql(f"SELECT k, _change_type FROM table_changes_by_path('{uri}', {v}, {v})")
            got = sorted((r["k"], r["_change_type"]) for r in changes)
            m.diff("our deletion vector", "table_changes", got, [(31, "delete")])
    finally:
        oracle.call("conf", {k: None for k in case.conf})
    m.check()


def _our_paths(table: DeltaTable, version: int) -> set[str]:
    lines = (Path(table.uri) / "_delta_log" / f"{version:020d}.json").read_text().splitlines()
    return {json.loads(line)["add"]["path"] for line in lines if line.startswith('{"add"')}


# -- the race ----------------------------------------------------------------------------------------------
def test_racing_writers_give_no_row_id_or_identity_value_twice(oracle, spark, tmp_path):
    """Delta Spark INSERTs (identity values, row ids), DELETEs (deletion vectors) and OPTIMIZEs (fresh row
    ids for rewritten files) race our appends (identity values, row ids) and removes. Commits that both move
    the identity mark conflict (as Delta Spark's own writers do); every other loser retries, ours with row
    ids reassigned above the winner's mark."""
    rng = random.Random(13)
    uri = str(tmp_path / "race")
    features = {"enableRowTracking": "true", "enableDeletionVectors": "true"}
    case = Case(f"{IDENTITY}, k INT, s STRING", features)
    _create(oracle, uri, case)
    _delta_insert(oracle, uri, case, [0])
    table = DeltaTable(uri)
    queries = []
    for i in range(10):
        if i in (3, 8):
            queries.append(f"DELETE FROM delta.`{uri}` WHERE k % 2 = 0")
        elif i in (5, 9):
            queries.append(f"OPTIMIZE delta.`{uri}`")
        else:
            keys = ", ".join(f"({1000 + 10 * i + j}, 'delta')" for j in range(rng.randint(1, 3)))
            queries.append(f"INSERT INTO delta.`{uri}` (k, s) VALUES {keys}")
    job = oracle.spawn("sql_each", queries, "delta")
    ours: list[tuple[str, Any]] = []
    live: list[AddFile] = []
    retried = 0
    deadline = time.monotonic() + 600
    while not oracle.done(job) and time.monotonic() < deadline:
        if live and rng.random() < 0.25:
            path = live.pop(rng.randrange(len(live))).path
            rows = [r for r in table.snapshot().files.to_pylist() if r["path"] == path]
            if not rows:  # an OPTIMIZE rewrote it meanwhile
                continue
            try:
                txn = table.transaction().remove_files([AddFile.from_dict(rows[0])])
                ours.append(("remove", txn.commit("DELETE")))
            except ConcurrentModificationError as exc:
                ours.append(("remove", exc))
            continue
        # Seeded pauses, between our transactions and between writing a file and committing it (a writer's
        # work): Delta Spark's statements take seconds, and commits of ours at a faster pace would fail
        # every INSERT of theirs (two commits that move the identity mark conflict); within the pause
        # Delta Spark's commits land, and ours retry above them.
        time.sleep(rng.uniform(0.5, 2.0))
        pause = rng.uniform(0.2, 1.0)
        try:
            result, adds = append_arrow(table, [5000 + len(ours)], before_commit=partial(time.sleep, pause))
            live.extend(adds)
            ours.append(("append", result))
            retried += result.attempts > 1
        except ConcurrentModificationError as exc:
            ours.append(("append", exc))
    results = oracle.join(job)
    m = Mismatches("racing writers")
    for kind, result in ours:
        if isinstance(result, ConcurrentModificationError) and not (
            type(result).__name__ == "MetadataChangedError" and kind == "append"
            or kind == "remove" and result.winning_operation in ("OPTIMIZE", "DELETE")
        ):
            m.add(f"our {kind} failed: {type(result).__name__}: {result}")
    for query, res in zip(queries, results, strict=True):
        allowed = ("MetadataChanged", "ConcurrentAppend", "ConcurrentDeleteRead", "ConcurrentDeleteDelete")
        if not res["ok"] and not any(a in res["error"] for a in allowed):
            m.add(f"Delta Spark's {query[:40]} failed: {res['error']}: {res['message'][:300]}")
    rows = check_turn(m, oracle, spark, uri, "after the race")
    versions = sorted(int(p.name[:20]) for p in (Path(uri) / "_delta_log").glob("*.json"))
    m.diff("log", "versions", versions, list(range(len(versions))))
    appended = sum(1 for kind, r in ours if kind == "append" and not isinstance(r, Exception))
    conflicts = Counter(f"ours: {type(r).__name__} against {r.winning_operation}" for _, r in ours
                        if isinstance(r, Exception))  # fmt: skip
    conflicts.update(f"Delta Spark's {q.split()[0]}: {r['error']}"
                     for q, r in zip(queries, results, strict=True) if not r["ok"])  # fmt: skip
    print(f"race: {len(ours)} commits of ours ({appended} appends, {retried} retried), {len(queries)} "
          f"Delta Spark statements ({sum(r['ok'] for r in results)} committed), conflicts {dict(conflicts)}, "
          f"{len(rows)} rows, {len(versions)} versions")
    m.check()
