"""Delta Spark and our core write the same table at the same time.

``test_conflicts_match_delta_spark``: one transaction reads the table, another commits in between, then the
first commits. Delta Spark's own ``OptimisticTransaction`` and conflict checker decide the outcome when it is
the late one; our ``Transaction`` when we are; for the same pair of transactions both must commit (after a
retry) or raise the same conflict. ``test_racing_writers``: Delta Spark jobs (INSERT, DELETE, OPTIMIZE) and
our commits (appends, app transactions, deletes) race on one table; every acknowledged commit is in the log
once, versions are contiguous, only legitimate conflicts happen, and both read the same final table.

Delta Spark's default LogStore for local disk is safe within one JVM only (check, then rename over): the
oracle uses ``LinkLocalLogStore`` (tests/oracle/java), which publishes commits with a hard link as our core
does, so that two processes can commit to one local table.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import random
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from oracle_client import Oracle
from oracle_compare import Mismatches, compare_step

from airflow_provider_delta.log import AddFile, ConcurrentModificationError, DeltaTable, add_file_from_parquet

SCHEMA = pa.schema([("k", pa.int64()), ("part", pa.string())])
_keys = itertools.count(1000)

# A transaction: what it reads, the partitions it appends to, the files it removes, its app transaction,
# the properties it sets. F is a file of partition a, G one of partition b.
TXNS: dict[str, dict[str, Any]] = {
    "blind append a": {"add": ["a"]},
    "blind append b": {"add": ["b"]},
    "read all, append a": {"read": "all", "add": ["a"]},
    "read a, append a": {"read": "a", "add": ["a"]},
    "read b, append b": {"read": "b", "add": ["b"]},
    "delete F": {"read": "a", "remove": ["F"]},
    "rewrite G": {"read": "b", "remove": ["G"], "add": ["b"]},
    "app X=5, append a": {"app": ("X", 5), "add": ["a"]},
    "app X=6, append a": {"app": ("X", 6), "add": ["a"]},
    "set property": {"configuration": {"custom.owner": "oracle"}},
}
WINNERS = ["blind append a", "blind append b", "delete F", "rewrite G", "app X=5, append a", "set property"]
LOSERS = ["blind append a", "read all, append a", "read a, append a", "read b, append b", "delete F",
          "app X=6, append a", "set property"]  # fmt: skip
# Tables without delta.isolationLevel are Serializable in Delta Spark (its default); the matrix above sets
# WriteSerializable explicitly. These pairs are where the two levels differ.
ISOLATION_CASES = [("blind append a", "read all, append a"), ("blind append a", "read a, append a"),
                   ("blind append b", "read a, append a")]  # fmt: skip


def _cases() -> list[Any]:
    # Every winner against every loser, less pairs that repeat another's logic: a blind append to b matters
    # only to transactions that read; app X=6 only to the other app transaction and to a plain append.
    cases = [
        (w, lo, "WriteSerializable")
        for w in WINNERS
        for lo in LOSERS
        if not (w == "blind append b" and "read" not in lo)
        and not (lo == "app X=6, append a" and w not in ("app X=5, append a", "blind append a"))
    ]
    cases += [(w, lo, level) for level in ("default", "Serializable") for w, lo in ISOLATION_CASES]
    return [pytest.param(*c, id=f"{c[0]} | {c[1]} | {c[2]}") for c in cases]


def _data_file(table: DeltaTable, part: str) -> AddFile:
    key = next(_keys)
    rel = f"part={part}/f-{key}.parquet"
    path = Path(table.uri) / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table({"k": pa.array([key], pa.int64())}), path)
    return add_file_from_parquet(table, rel, {"part": part})


def _table(path: Path, isolation: str) -> tuple[DeltaTable, dict[str, AddFile]]:
    """A table with file F in partition a and G in partition b, written by our core."""
    config = {} if isolation == "default" else {"delta.isolationLevel": isolation}
    table = DeltaTable.create(str(path), SCHEMA, partition_by=["part"], configuration=config)
    files = {"F": _data_file(table, "a"), "G": _data_file(table, "b")}
    table.transaction().add_files([files["F"]]).commit()
    table.transaction().add_files([files["G"]]).commit()
    return table, files


def _ours(table: DeltaTable, files: dict[str, AddFile], spec: dict[str, Any]) -> Any:
    txn = table.transaction()
    if spec.get("read") == "all":
        txn.read_whole_table()
    elif spec.get("read"):
        txn.read_partitions({"part": spec["read"]})
    txn.add_files([_data_file(table, p) for p in spec.get("add", [])])
    txn.remove_files([files[f] for f in spec.get("remove", [])])
    if "app" in spec:
        txn.set_app_transaction(*spec["app"])
    if "configuration" in spec:
        md = txn.snapshot.metadata
        txn.update_metadata(
            dataclasses.replace(md, configuration={**md.configuration, **spec["configuration"]})
        )
    return txn


def _delta_begin(oracle: Oracle, table: DeltaTable, files: dict[str, AddFile], spec: dict[str, Any]) -> int:
    read = spec.get("read")
    return oracle.call(
        "begin",
        table.uri,
        read="all" if read == "all" else f"part = '{read}'" if read else None,
        remove=[files[f].to_json()["path"] for f in spec.get("remove", [])],
        add=[json.dumps({"add": _data_file(table, p).to_json()}) for p in spec.get("add", [])],
        app=list(spec["app"]) if "app" in spec else None,
        configuration=spec.get("configuration"),
    )


def _outcome_ours(txn: Any) -> str:
    try:
        result = txn.commit()
    except ConcurrentModificationError as exc:
        return type(exc).__name__.removesuffix("Error")
    return "already committed" if result.already_committed else f"commits at v{result.version}"


def _outcome_delta(result: dict[str, Any]) -> str:
    if "version" in result:
        return f"commits at v{result['version']}"
    return result["error"].removesuffix("Exception")


@pytest.mark.parametrize(("winner", "loser", "isolation"), _cases())
def test_conflicts_match_delta_spark(winner, loser, isolation, oracle, tmp_path):
    # Delta Spark is late: its transaction reads v2, ours commits v3, Delta Spark's conflict checker decides.
    table, files = _table(tmp_path / "delta_late", isolation)
    handle = _delta_begin(oracle, table, files, TXNS[loser])
    _ours(table, files, TXNS[winner]).commit()
    delta = _outcome_delta(oracle.call("commit", handle))
    # We are late: our transaction reads v2, Delta Spark commits v3, our conflict checker decides.
    table, files = _table(tmp_path / "ours_late", isolation)
    txn = _ours(table, files, TXNS[loser])
    assert "version" in oracle.call("commit", _delta_begin(oracle, table, files, TXNS[winner]))
    ours = _outcome_ours(txn)
    assert ours == delta, f"{loser!r} after a concurrent {winner!r}: Delta Spark {delta}, ours {ours}"


def test_same_app_transaction_from_both_engines_lands_once(oracle, tmp_path):
    """Delta Spark raises ConcurrentTransactionException when a concurrent commit set the app id to the
    version it is committing; ours reports ``already_committed`` instead (exactly-once by design: see
    docs/compatibility.md). Either way, one commit holds the app version."""
    table, files = _table(tmp_path / "t", "WriteSerializable")
    handle = _delta_begin(oracle, table, files, TXNS["app X=5, append a"])
    _ours(table, files, TXNS["app X=5, append a"]).commit()
    assert oracle.call("commit", handle)["error"] == "ConcurrentTransactionException"
    txn = _ours(table, files, TXNS["app X=6, append a"])
    assert "version" in oracle.call("commit", _delta_begin(oracle, table, files, TXNS["app X=6, append a"]))
    assert _outcome_ours(txn) == "already committed"
    # Delta Spark's idempotent DataFrame writes skip an app version that is already there.
    before = table.version()
    options = {"txnAppId": "X", "txnVersion": "6"}
    oracle.call("write", table.uri, "SELECT CAST(1 AS BIGINT) AS k, 'a' AS part", "append", options)
    assert table.version() == before
    assert oracle.call("snapshot", table.uri)["txns"] == {"X": 6} == table.snapshot().app_transactions


# -- the race ---------------------------------------------------------------------------------------------
def _commit_versions(log_dir: Path) -> list[int]:
    return sorted(int(p.name[:20]) for p in log_dir.glob("*.json") if p.name[:20].isdigit())


def _commit_infos(log_dir: Path) -> dict[int, dict[str, Any]]:
    out = {}
    for v in _commit_versions(log_dir):
        for line in (log_dir / f"{v:020d}.json").read_text().splitlines():
            if '"commitInfo"' in line:
                out[v] = json.loads(line)["commitInfo"]
    return out


def _delta_script(uri: str, rng: random.Random) -> tuple[list[str], dict[int, list[int]]]:
    """Delta Spark's job: appends to partition d, deletes there (k % 3 = 0) and OPTIMIZE of everything."""
    queries, inserted = [], {}
    for i in range(10):
        if i in (3, 8):
            queries.append(f"DELETE FROM delta.`{uri}` WHERE part = 'd' AND k % 3 = 0")
        elif i in (5, 9):
            queries.append(f"OPTIMIZE delta.`{uri}`")
        else:
            keys = [next(_keys) for _ in range(rng.randint(1, 4))]
            inserted[len(queries)] = keys
            queries.append(f"INSERT INTO delta.`{uri}` VALUES " + ", ".join(f"({k}, 'd')" for k in keys))
    return queries, inserted


def test_racing_writers(oracle, spark, tmp_path):
    rng = random.Random(7)
    uri = str(tmp_path / "race")
    oracle.call(
        "sql", f"CREATE TABLE delta.`{uri}` (k BIGINT, part STRING) USING delta PARTITIONED BY (part)"
    )
    table = DeltaTable(uri)
    queries, delta_keys = _delta_script(uri, rng)
    job = oracle.spawn("sql_each", queries, "delta")
    ours: list[tuple[str, Any, Any]] = []  # (kind, the keys or file, CommitResult or error)
    live: list[AddFile] = []
    app_version = 0
    while not oracle.done(job) or len(ours) < 20:
        kind = rng.choice(["append", "append", "app", "delete"]) if live else "append"
        if kind == "delete":
            target = live.pop(rng.randrange(len(live)))
            txn = table.transaction().remove_files([target])
        else:
            target = _data_file(table, "o")
            txn = table.transaction().add_files([target])
            if kind == "app":
                app_version += 1
                txn.set_app_transaction("ours", app_version)
        try:
            result: Any = txn.commit("DELETE" if kind == "delete" else "WRITE")
            if kind != "delete":
                live.append(target)
        except ConcurrentModificationError as exc:
            result = exc
        ours.append((kind, target, result))
        # Seeded jitter, not a wait: it spreads our commits over Delta Spark's job so that the interleavings
        # differ from seed to seed; every assertion below holds whatever the interleaving was.
        time.sleep(rng.uniform(0, 0.05))
    delta_results = oracle.join(job)

    m = Mismatches("racing writers")
    log_dir = Path(uri) / "_delta_log"
    versions = _commit_versions(log_dir)
    m.diff("log", "versions", versions, list(range(len(versions))))
    infos = _commit_infos(log_dir)
    # Each acknowledged commit of ours is in the log exactly once, at the version we were told.
    for kind, _, result in ours:
        if isinstance(result, Exception):
            if kind != "delete" or result.winning_operation != "OPTIMIZE":
                m.add(f"our {kind} failed with {type(result).__name__} against {result.winning_operation}")
            continue
        holders = [v for v, info in infos.items() if info.get("txnId") == result.txn_id]
        m.diff(f"our {kind}", "versions holding its txnId", holders, [result.version])
    # Each acknowledged Delta Spark statement is in the log once (OPTIMIZE may have had nothing to do).
    deleted_before: dict[int, int] = {}
    for i, (query, res) in enumerate(zip(queries, delta_results, strict=True)):
        holders = [v for v, info in infos.items() if info.get("userMetadata") == f"delta-{i}"]
        op = query.split()[0]
        if not res["ok"]:
            if op != "OPTIMIZE" or "Concurrent" not in res["error"]:
                m.add(f"Delta Spark's {query[:40]} failed: {res['error']}: {res['message']}")
            m.diff(f"failed {op} {i}", "versions holding it", holders, [])
        elif op == "OPTIMIZE":
            m.diff(f"{op} {i}", "commits", len(holders) <= 1, True)
        else:
            m.diff(f"{op} {i}", "commits", len(holders), 1)
            if op == "DELETE" and holders:
                deleted_before[i] = holders[0]
    # The final rows: what each side added, less what each side deleted.
    expected = set()
    insert_version = {i: v for v, info in infos.items() if (i := _tag(info)) is not None}
    for i, keys in delta_keys.items():
        if delta_results[i]["ok"]:
            v = insert_version[i]
            deleted_later = any(d > v for d in deleted_before.values())
            expected |= {(k, "d") for k in keys if not (k % 3 == 0 and deleted_later)}
    gone = {f.path for kind, f, r in ours if kind == "delete" and not isinstance(r, Exception)}
    expected |= {(_key(f), "o") for kind, f, r in ours if kind != "delete" and not isinstance(r, Exception)
                 and f.path not in gone}  # fmt: skip
    rows = {(r["k"], r["part"]) for r in map(json.loads, oracle.call("rows", uri))}
    m.diff("final table", "rows", sorted(rows), sorted(expected))
    compare_step(m, oracle, spark, uri, table.version(), "final table")
    conflicts = sum(isinstance(r, Exception) for *_, r in ours) + sum(not r["ok"] for r in delta_results)
    retried = sum(r.attempts > 1 for *_, r in ours if not isinstance(r, Exception))
    print(f"race: {len(ours)} commits of ours ({retried} retried), {len(queries)} Delta Spark statements, "
          f"{conflicts} conflict(s), {len(versions)} versions")  # fmt: skip
    m.check()


def _tag(info: dict[str, Any]) -> int | None:
    meta = info.get("userMetadata") or ""
    return int(meta.split("-")[1]) if meta.startswith("delta-") else None


def _key(f: AddFile) -> int:
    return int(f.path.rsplit("-", 1)[1].split(".")[0])
