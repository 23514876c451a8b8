"""Commits whose storage call fails with an unknown outcome: landed but unacknowledged, or never sent.

A put that times out or whose connection resets may or may not have created ``N.json``. The transaction
must then read ``N.json`` back and recognise its own commit by ``commitInfo.txnId`` (never write it again at
``N+1``), or see that the put did not happen and try again (never report a commit that is not there).
These tests wrap the core's put-if-absent to inject both failures and audit the log afterwards.
"""

from __future__ import annotations

import json
import threading
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pyarrow as pa
import pytest

from airflow_provider_delta.log import AddFile, DeltaTable
from airflow_provider_delta.log.commits import atomic_commit
from airflow_provider_delta.log.files import storage
from airflow_provider_delta.log.files.segment import commit_name, commit_version

SCHEMA = pa.schema([("id", pa.int64())])
REAL_PUT = storage.put_if_absent


class FaultyPut:
    """Stands in for ``put_if_absent``; every writer thread counts its own calls.

    - ``lost_ack``: every 5th call writes, then raises ``ConnectionResetError`` (the response was lost);
    - ``not_sent``: every 5th call raises ``TimeoutError`` without writing;
    - ``mixed``: both, on different calls (lost on the 5th, 10th, ...; not sent on the 3rd, 10th+3, ...).

    Per-thread counting keeps a writer from drawing five failures in a row, which would (rightly) exhaust
    the core's five tries of one put.
    """

    def __init__(self, fault: str) -> None:
        self.fault = fault
        self._local = threading.local()
        self._lock = threading.Lock()
        self.lost_acks = 0
        self.not_sent = 0

    def __call__(self, store: Any, name: str, data: bytes, **kwargs: Any) -> None:
        calls = self._local.calls = getattr(self._local, "calls", 0) + 1
        if self.fault in ("not_sent", "mixed") and calls % 5 == (3 if self.fault == "mixed" else 0):
            with self._lock:
                self.not_sent += 1
            raise TimeoutError(f"injected: {name} was never sent")
        REAL_PUT(store, name, data, **kwargs)
        if self.fault in ("lost_ack", "mixed") and calls % 5 == 0:
            with self._lock:
                self.lost_acks += 1
            raise ConnectionResetError(f"injected: {name} was written but its response was lost")


@pytest.fixture(params=["local", "memory", "s3"])
def location(request: pytest.FixtureRequest, tmp_path) -> Iterator[tuple[str, dict, str]]:
    """(uri, storage options, backend) of a not yet created table."""
    if request.param == "local":
        yield str(tmp_path / "t"), {}, "local"
    elif request.param == "memory":
        uri = f"memory://lost-acks-{uuid.uuid4().hex}"
        yield uri, {}, "memory"
        DeltaTable(uri).store.fs.rm(uri, recursive=True)
    else:
        s3 = request.getfixturevalue("s3_server")
        bucket = request.getfixturevalue("s3_bucket")
        yield f"s3://{bucket}/t", s3.storage_options, "s3"


def _install(monkeypatch: pytest.MonkeyPatch, put: Callable[..., None]) -> None:
    monkeypatch.setattr(atomic_commit, "put_if_absent", put)


def _commit_many(uri: str, options: dict, writer: int, commits: int) -> list[tuple[int, Any]]:
    table = DeltaTable(uri, options)
    out = []
    for n in range(commits):
        txn = table.transaction().add_files([AddFile(f"w{writer}/c{n}.parquet", 10 + n)])
        out.append((n, txn.set_app_transaction(f"writer-{writer}", n).commit()))
    return out


def _audit(table: DeltaTable, results: dict[int, list[tuple[int, Any]]]) -> None:
    """No commit lost, none duplicated, versions contiguous, each result pointing at its own commit."""
    store = table.store
    names = [f.name for f in store.list_log() if commit_version(f.name) is not None]
    log = {}
    for name, data in zip(names, store.read_log_files(names), strict=True):
        lines = [json.loads(line) for line in data.splitlines() if line.strip()]
        log[commit_version(name)] = (
            next(x["commitInfo"]["txnId"] for x in lines if "commitInfo" in x),
            [x["add"]["path"] for x in lines if "add" in x],
        )
    total = sum(len(r) for r in results.values())
    assert sorted(log) == list(range(total + 1)), "versions must be contiguous, one per logical commit"
    txn_ids = [txn_id for txn_id, _ in log.values()]
    assert len(set(txn_ids)) == len(txn_ids), "a commit was written twice"
    paths = Counter(p for _, adds in log.values() for p in adds)
    assert set(paths.values()) == {1}
    for writer, out in results.items():
        for n, res in out:
            assert not res.already_committed
            assert log[res.version] == (res.txn_id, [f"w{writer}/c{n}.parquet"]), (writer, n, res)
    snapshot = table.snapshot()
    assert snapshot.version == total and snapshot.num_files == total
    assert snapshot.app_transactions == {f"writer-{w}": len(out) - 1 for w, out in results.items()}


# -- many commits through a faulty store ------------------------------------------------------------------
@pytest.mark.parametrize("fault", ["lost_ack", "not_sent", "mixed"])
def test_single_writer_survives_unknown_outcomes(location, fault: str, monkeypatch) -> None:
    uri, options, backend = location
    table = DeltaTable.create(uri, SCHEMA, storage_options=options)
    put = FaultyPut(fault)
    _install(monkeypatch, put)
    commits = 20 if backend == "s3" else 40

    results = {0: _commit_many(uri, options, 0, commits)}

    _audit(table, results)
    assert put.lost_acks + put.not_sent >= commits // 5, "the faults were never injected"


@pytest.mark.parametrize("fault", ["lost_ack", "not_sent", "mixed"])
def test_four_threads_survive_unknown_outcomes(location, fault: str, monkeypatch) -> None:
    uri, options, backend = location
    table = DeltaTable.create(uri, SCHEMA, storage_options=options)
    put = FaultyPut(fault)
    _install(monkeypatch, put)
    commits = 10 if backend == "s3" else 25
    barrier = threading.Barrier(4)

    def writer(i: int) -> list[tuple[int, Any]]:
        barrier.wait()
        return _commit_many(uri, options, i, commits)

    with ThreadPoolExecutor(4) as pool:
        results = dict(enumerate(pool.map(writer, range(4))))

    _audit(table, results)
    assert put.lost_acks + put.not_sent >= commits // 5, "the faults were never injected"


# -- one put, precisely ------------------------------------------------------------------------------------
def _put_once(action: Callable[..., None]) -> Callable[..., None]:
    """Run ``action`` on the first put only; later puts go straight to storage."""
    calls = []

    def put(store: Any, name: str, data: bytes, **kwargs: Any) -> None:
        calls.append(name)
        if len(calls) == 1:
            return action(store, name, data, **kwargs)
        return REAL_PUT(store, name, data, **kwargs)

    put.calls = calls  # type: ignore[attr-defined]
    return put


def _txn_id_at(table: DeltaTable, version: int) -> str:
    first = table.store.read_log_file(commit_name(version)).split(b"\n", 1)[0]
    return json.loads(first)["commitInfo"]["txnId"]


@pytest.mark.parametrize(
    "error", [ConnectionResetError("reset"), TimeoutError("timed out"), OSError(104, "connection reset")]
)
def test_put_that_landed_but_failed_returns_its_version(location, error: Exception, monkeypatch) -> None:
    uri, options, _ = location
    table = DeltaTable.create(uri, SCHEMA, storage_options=options)
    table.transaction().add_files([AddFile("a.parquet", 1)]).commit()

    def landed_then_failed(store: Any, name: str, data: bytes, **kwargs: Any) -> None:
        REAL_PUT(store, name, data, **kwargs)
        raise error

    put = _put_once(landed_then_failed)
    _install(monkeypatch, put)
    res = table.transaction().add_files([AddFile("b.parquet", 1)]).set_app_transaction("app", 1).commit()

    assert (res.version, res.already_committed, res.attempts) == (2, False, 1)
    assert _txn_id_at(table, 2) == res.txn_id
    assert put.calls == [commit_name(2)]  # recognised by reading back, never put again
    assert table.snapshot().version == 2 and sorted(table.snapshot().file_paths()) == [
        "a.parquet",
        "b.parquet",
    ]


def test_client_retry_of_a_landed_put_is_recognised(location, monkeypatch) -> None:
    # An HTTP client retries a PUT whose response was lost: the retry meets its own object (412 on S3) and
    # reports FileExistsError. The read-back must tell "ours" from "someone else's".
    uri, options, _ = location
    table = DeltaTable.create(uri, SCHEMA, storage_options=options)

    def landed_then_retried(store: Any, name: str, data: bytes, **kwargs: Any) -> None:
        REAL_PUT(store, name, data, **kwargs)
        REAL_PUT(store, name, data, **kwargs)  # raises FileExistsError

    _install(monkeypatch, _put_once(landed_then_retried))
    res = table.transaction().add_files([AddFile("b.parquet", 1)]).commit()

    assert (res.version, res.already_committed) == (1, False)
    assert _txn_id_at(table, 1) == res.txn_id
    assert table.snapshot().version == 1


def test_put_not_sent_while_another_writer_takes_the_version(location, monkeypatch) -> None:
    # The put timed out before reaching storage, and meanwhile another writer committed that version: the
    # read-back finds a stranger's commit, so the transaction retries at the next version.
    uri, options, _ = location
    table = DeltaTable.create(uri, SCHEMA, storage_options=options)
    mine = table.transaction().add_files([AddFile("mine.parquet", 1)])
    other = DeltaTable(uri, options).transaction().add_files([AddFile("other.parquet", 1)])

    def other_wins_then_timeout(store: Any, name: str, data: bytes, **kwargs: Any) -> None:
        other.commit()
        raise TimeoutError("timed out before sending")

    put = _put_once(other_wins_then_timeout)
    _install(monkeypatch, put)
    res = mine.commit()

    assert (res.version, res.already_committed) == (2, False)
    assert _txn_id_at(table, 2) == res.txn_id
    assert put.calls == [commit_name(1), commit_name(1), commit_name(2)]  # ours, the other's, ours again
    assert sorted(table.snapshot().file_paths()) == ["mine.parquet", "other.parquet"]
