"""Concurrent writers: many OS processes commit to one table and every commit lands exactly once.

The Delta commit protocol ("Requirements for Writers") rests on put-if-absent of ``N.json``: a writer that
loses the race for a version reads the winners and retries at the next one. These tests race real processes
(spawned, so each has its own interpreter and storage clients) released together by a barrier, on local disk
and on moto's S3 server, then audit the log file by file and compare with deltalake's reading of it.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import sys
import threading
import uuid
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pytest

from airflow_provider_delta.log import AddFile, ConcurrentTransactionError, DeltaTable
from airflow_provider_delta.log.files.segment import commit_name, commit_version
from airflow_provider_delta.log.files.storage import LogStore, put_if_absent

SCHEMA = pa.schema([("id", pa.int64()), ("value", pa.string())])
WRITERS = 8
COMMITS_LOCAL = 50
# moto serves every request from threads of the pytest process: on 2 cores 8 x 50 S3 commits take 35 s on a
# quiet machine, 70-80 s on a busy one. The issue asks for 8 x 50 on S3 too, and CI has the time.
COMMITS_S3 = 50


def _location(request: pytest.FixtureRequest, backend: str, tmp_path) -> tuple[str, dict, dict]:
    """(uri, fsspec options, deltalake options) of a new table on ``backend``."""
    if backend == "local":
        return str(tmp_path / "t"), {}, {}
    s3 = request.getfixturevalue("s3_server")
    bucket = request.getfixturevalue("s3_bucket")
    return f"s3://{bucket}/t", s3.storage_options, s3.delta_storage_options


# -- children (spawned: module-level, picklable arguments only) ---------------------------------------------
def _writer(uri: str, options: dict, index: int, commits: int, barrier: Any, results: Any) -> None:
    try:
        table = DeltaTable(uri, options)
        barrier.wait()
        out = []
        for n in range(commits):
            txn = table.transaction()
            txn.add_files([AddFile(f"w{index}/c{n}.parquet", 100 + n)])
            txn.set_app_transaction(f"writer-{index}", n)
            res = txn.commit()
            out.append((n, res.version, res.already_committed, res.txn_id))
        results.put((index, out))
    except BaseException as exc:  # report instead of hanging the parent on the queue
        results.put((index, f"{type(exc).__name__}: {exc}"))
        raise


def _same_app_writer(uri: str, options: dict, index: int, batches: int, barrier: Any, results: Any) -> None:
    try:
        table = DeltaTable(uri, options)
        out = []
        for batch in range(batches):
            barrier.wait()
            txn = table.transaction()
            txn.add_files([AddFile(f"batch{batch}/p{index}.parquet", 100)])
            txn.set_app_transaction("shared-app", batch)
            res = txn.commit()
            out.append((batch, res.version, res.already_committed, res.txn_id, res.attempts))
        results.put((index, out))
    except BaseException as exc:
        barrier.abort()
        results.put((index, f"{type(exc).__name__}: {exc}"))
        raise


def _run_processes(target: Any, count: int, args: tuple) -> dict[int, list]:
    """Run ``count`` spawned processes of ``target(*args[:2], i, *args[2:], barrier, queue)``."""
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(count)
    results = ctx.Queue()
    procs = [
        ctx.Process(target=target, args=(*args[:2], i, *args[2:], barrier, results), daemon=True)
        for i in range(count)
    ]
    for p in procs:
        p.start()
    out = dict(results.get(timeout=600) for _ in procs)  # drain before join: a full pipe blocks a child
    for p in procs:
        p.join(timeout=60)
    failures = {i: r for i, r in out.items() if isinstance(r, str)}
    assert not failures, f"writers failed: {failures}"
    assert [p.exitcode for p in procs] == [0] * count
    return out


# -- log audit --------------------------------------------------------------------------------------------
def _read_commits(table: DeltaTable) -> dict[int, dict[str, Any]]:
    """Every commit file of the log: version -> {"txn_id", "adds", "txns"}."""
    store = table.store
    names = [f.name for f in store.list_log() if commit_version(f.name) is not None]
    commits = {}
    for name, data in zip(names, store.read_log_files(names), strict=True):
        lines = [json.loads(line) for line in data.splitlines() if line.strip()]
        info = next(x["commitInfo"] for x in lines if "commitInfo" in x)
        commits[commit_version(name)] = {
            "txn_id": info.get("txnId"),
            "adds": [x["add"]["path"] for x in lines if "add" in x],
            "txns": {x["txn"]["appId"]: x["txn"]["version"] for x in lines if "txn" in x},
        }
    return commits


def _assert_deltalake_agrees(uri: str, delta_options: dict, version: int, paths: set[str]) -> None:
    import deltalake

    dt = deltalake.DeltaTable(uri, storage_options=delta_options or None)
    assert dt.version() == version
    theirs = set(pa.table(dt.get_add_actions(flatten=True)).column("path").to_pylist())
    assert theirs == paths


# -- tests ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("backend", "commits"),
    [("local", COMMITS_LOCAL), ("s3", COMMITS_S3)],
)
def test_eight_processes_commit_every_version_exactly_once(
    request: pytest.FixtureRequest, tmp_path, backend: str, commits: int
) -> None:
    uri, options, delta_options = _location(request, backend, tmp_path)
    DeltaTable.create(uri, SCHEMA, storage_options=options)
    results = _run_processes(_writer, WRITERS, (uri, options, commits))
    total = WRITERS * commits

    table = DeltaTable(uri, options)
    log = _read_commits(table)
    # Contiguous versions 0..total, each a distinct commit: nothing lost, nothing written twice.
    assert sorted(log) == list(range(total + 1))
    txn_ids = [c["txn_id"] for c in log.values()]
    assert None not in txn_ids and len(set(txn_ids)) == len(txn_ids)
    path_counts = Counter(p for c in log.values() for p in c["adds"])
    expected_paths = {f"w{i}/c{n}.parquet" for i in range(WRITERS) for n in range(commits)}
    assert set(path_counts) == expected_paths and set(path_counts.values()) == {1}

    for index, out in results.items():
        assert [n for n, *_ in out] == list(range(commits))
        versions = [v for _, v, _, _ in out]
        assert len(set(versions)) == commits and versions == sorted(versions)
        for n, version, already, txn_id in out:
            assert not already
            # The version each commit() returned holds exactly that commit: not overwritten by another.
            assert log[version]["txn_id"] == txn_id
            assert log[version]["adds"] == [f"w{index}/c{n}.parquet"]
            assert log[version]["txns"] == {f"writer-{index}": n}

    snapshot = table.snapshot()
    assert snapshot.version == total
    assert snapshot.num_files == total and set(snapshot.file_paths()) == expected_paths
    assert snapshot.app_transactions == {f"writer-{i}": commits - 1 for i in range(WRITERS)}
    _assert_deltalake_agrees(uri, delta_options, total, expected_paths)


@pytest.mark.parametrize("backend", ["local", "s3"])
def test_same_app_id_race_lands_each_batch_once(
    request: pytest.FixtureRequest, tmp_path, backend: str
) -> None:
    uri, options, _ = _location(request, backend, tmp_path)
    batches = 20
    DeltaTable.create(uri, SCHEMA, storage_options=options)
    results = _run_processes(_same_app_writer, 2, (uri, options, batches))

    table = DeltaTable(uri, options)
    log = _read_commits(table)
    assert sorted(log) == list(range(batches + 1))  # one commit per batch, the loser wrote nothing
    lost_put_race = 0
    for batch in range(batches):
        (_, v0, a0, t0, n0), (_, v1, a1, t1, n1) = results[0][batch], results[1][batch]
        assert sorted([a0, a1]) == [False, True], f"batch {batch}: exactly one must land"
        winner_txn, loser_attempts = (t0, n1) if not a0 else (t1, n0)
        # The loser reports the version that holds the batch: the winner's.
        assert v0 == v1 == batch + 1
        assert log[v0]["txn_id"] == winner_txn
        assert log[v0]["txns"] == {"shared-app": batch}
        assert len(log[v0]["adds"]) == 1 and log[v0]["adds"][0].startswith(f"batch{batch}/")
        # attempts == 0: the loser's snapshot already held the batch; >= 1: it lost the put and found the
        # winner while resolving the conflict, the path this test exists for.
        lost_put_race += loser_attempts >= 1
    assert lost_put_race > 0, "the two writers never raced for the same version"

    snapshot = table.snapshot()
    assert snapshot.num_files == batches
    batch_dirs = sorted(p.split("/")[0] for p in snapshot.file_paths())
    assert batch_dirs == sorted(f"batch{b}" for b in range(batches))
    assert snapshot.app_transactions == {"shared-app": batches - 1}


def test_transaction_reading_before_a_same_app_commit_does_not_land(tmp_path) -> None:
    uri = str(tmp_path / "t")
    table = DeltaTable.create(uri, SCHEMA)
    late = table.transaction().add_files([AddFile("late.parquet", 1)]).set_app_transaction("job", 7)
    table.transaction().add_files([AddFile("other.parquet", 1)]).commit()  # unrelated: retried past
    first_txn = table.transaction().add_files([AddFile("first.parquet", 1)])
    first = first_txn.set_app_transaction("job", 7).commit()
    assert (first.version, first.already_committed) == (2, False)

    res = late.commit()

    assert res.already_committed and res.version == 2
    snapshot = table.snapshot()
    assert snapshot.version == 2
    assert set(snapshot.file_paths()) == {"other.parquet", "first.parquet"}
    assert snapshot.app_transactions == {"job": 7}


def test_transaction_reading_before_a_later_app_version_does_not_land(tmp_path) -> None:
    table = DeltaTable.create(str(tmp_path / "t"), SCHEMA)
    late = table.transaction().add_files([AddFile("late.parquet", 1)]).set_app_transaction("job", 3)
    table.transaction().add_files([AddFile("ahead.parquet", 1)]).set_app_transaction("job", 4).commit()

    res = late.commit()

    assert res.already_committed and res.version == 1
    assert table.snapshot().file_paths() == ["ahead.parquet"]


def test_app_id_moving_backwards_concurrently_conflicts(tmp_path) -> None:
    # A winner recorded the same app id at a lower version: neither "already done" nor safe to ignore.
    table = DeltaTable.create(str(tmp_path / "t"), SCHEMA)
    late = table.transaction().add_files([AddFile("late.parquet", 1)]).set_app_transaction("job", 5)
    table.transaction().add_files([AddFile("behind.parquet", 1)]).set_app_transaction("job", 4).commit()

    with pytest.raises(ConcurrentTransactionError):
        late.commit()
    assert table.snapshot().version == 1


# -- the two races underneath, made reproducible ----------------------------------------------------------
def test_local_listing_survives_a_commit_temp_file_vanishing(tmp_path, monkeypatch) -> None:
    # What 8 local writers ran into (in every run, before LogStore._list_local skipped vanished entries): a
    # writer's put_if_absent unlinks its ".N.json.<uuid>.tmp" between a reader's readdir and its stat. Here
    # the temp file vanishes exactly there, every time.
    table = DeltaTable.create(str(tmp_path / "t"), SCHEMA)
    log_dir = tmp_path / "t" / "_delta_log"
    (log_dir / f".{commit_name(1)}.{uuid.uuid4().hex}.tmp").write_bytes(b"{}")
    real_scandir = os.scandir

    class VanishingTempFiles:
        def __init__(self, path: Any) -> None:
            self._it = real_scandir(path)

        def __enter__(self) -> VanishingTempFiles:
            return self

        def __exit__(self, *exc: object) -> None:
            self._it.close()

        def __iter__(self) -> Iterator[os.DirEntry]:
            for entry in self._it:
                if entry.name.endswith(".tmp"):
                    os.unlink(entry.path)  # the writer has linked N.json and removes its temp file
                yield entry

    monkeypatch.setattr(os, "scandir", VanishingTempFiles)

    assert table.snapshot().version == 0


def test_memory_put_if_absent_admits_one_writer_per_name() -> None:
    store = LogStore(f"memory://race-{uuid.uuid4().hex}")
    threads = 4
    previous = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads as often as possible, to open any check-then-act window
    try:
        doubled = []
        for trial in range(200):
            barrier = threading.Barrier(threads)
            winners: list[int] = []

            def put(
                i: int, name: str = commit_name(trial), barrier: Any = barrier, winners: list = winners
            ) -> None:
                barrier.wait()
                try:
                    put_if_absent(store, name, b"%d" % i)
                    winners.append(i)
                except FileExistsError:
                    pass

            workers = [threading.Thread(target=put, args=(i,)) for i in range(threads)]
            for w in workers:
                w.start()
            for w in workers:
                w.join()
            if len(winners) != 1:
                doubled.append((trial, winners, store.read_log_file(commit_name(trial))))
    finally:
        sys.setswitchinterval(previous)
        store.fs.rm(store.root, recursive=True)
    assert not doubled, f"{len(doubled)} of 200 names had more than one creator, e.g. {doubled[:3]}"


def _commit_reads(requests: list, bucket: str) -> list[str]:
    """Keys of commit files read (GET of ``N.json``) among ``requests``."""
    return [r.key for r in requests if r.method == "GET" and r.bucket == bucket and r.key.endswith(".json")]


def test_a_retried_commit_does_not_look_again_for_the_version_it_just_listed(s3_server, s3_bucket) -> None:
    """A writer that lost version 1 lists and reads the winners (1-3) and puts version 4 at once: the look
    for its base (``N-1.json``, a HEAD on S3) is made before the first put only, since the winners' listing
    has just shown version 3. Under contention most attempts are retries."""
    uri = f"s3://{s3_bucket}/t"
    DeltaTable.create(uri, SCHEMA, storage_options=s3_server.storage_options)
    ours, other = (DeltaTable(uri, s3_server.storage_options) for _ in range(2))
    txn = ours.transaction().add_files([AddFile("ours.parquet", 10)])
    for n in range(3):
        other.transaction().add_files([AddFile(f"other-{n}.parquet", 10)]).commit()
    s3_server.requests.clear()
    result = txn.commit()
    assert (result.version, result.attempts) == (4, 2)
    commits = [r for r in s3_server.requests.requests if r.key.endswith(".json")]
    puts = [r.key.rsplit("/", 1)[1] for r in commits if r.method == "PUT"]
    assert puts == [commit_name(1), commit_name(4)]  # lost version 1, won version 4
    looks = [r.key.rsplit("/", 1)[1] for r in commits if r.method == "HEAD"]
    assert looks == [commit_name(0)]  # before the first put only
    reads = [key.rsplit("/", 1)[1] for key in _commit_reads(s3_server.requests.requests, s3_bucket)]
    assert [reads.count(commit_name(v)) for v in (1, 2, 3)] == [1, 1, 1]  # each winner read once


def test_a_commit_that_lost_races_hands_its_snapshot_to_the_next_transaction(s3_server, s3_bucket) -> None:
    """A writer that lost the race for versions 1-3 read those winners while retrying, and wrote version 4
    itself: the table's next snapshot lists the log once and reads none of those commits again (a GET each
    on S3, and under contention most of a writer's requests). It equals a fresh load of the table."""
    uri = f"s3://{s3_bucket}/t"
    DeltaTable.create(uri, SCHEMA, storage_options=s3_server.storage_options)
    ours, other = (DeltaTable(uri, s3_server.storage_options) for _ in range(2))
    txn = ours.transaction().add_files([AddFile("ours.parquet", 10)]).set_app_transaction("ours", 1)
    for n in range(3):
        other.transaction().add_files([AddFile(f"other-{n}.parquet", 10)]).commit()
    assert txn.commit().version == 4
    s3_server.requests.clear()
    snap = ours.snapshot()
    assert snap.version == 4
    assert _commit_reads(s3_server.requests.requests, s3_bucket) == []
    fresh = DeltaTable(uri, s3_server.storage_options).snapshot()
    assert snap.files.sort_by("path").to_pylist() == fresh.files.sort_by("path").to_pylist()
    assert (snap.app_transactions, snap.metadata, snap.protocol, snap.timestamp) == (
        fresh.app_transactions, fresh.metadata, fresh.protocol, fresh.timestamp
    )  # fmt: skip
    # Without races too: the commit just written is not read back.
    ours.transaction().add_files([AddFile("again.parquet", 10)]).commit()
    s3_server.requests.clear()
    assert ours.snapshot().version == 5
    assert _commit_reads(s3_server.requests.requests, s3_bucket) == []
