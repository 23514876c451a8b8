"""The chaos test's actors. Each runs in its own process, which the parent SIGKILLs and restarts at random.

- ``writer``: an exactly-once writer. Batch ``b`` of writer ``i`` is one Parquet file committed together
  with ``txn(appId="writer-i", version=b)``; ``commit()`` returning (also as ``already_committed``) is the
  acknowledgement, journalled and fsynced. A restarted writer resumes after the table's app transaction.
- ``compactor``: replaces a few live files by one file with the same rows, ``dataChange=false``.
- ``maintainer``: checkpoint (each one compared with a replay of the commits without it), log cleanup with
  zero retention and the clock a day ahead, VACUUM with zero retention, in a loop.
- ``reader``: opens snapshots (fresh handles and one long-lived handle that updates incrementally) and
  checks their rows: no row twice, every writer's batches exactly ``0..txn``, versions never backwards.

Errors fall into three kinds: a fault the test injected (expected), a named ``DeltaError`` (counted by
class) and anything else, which is a failure of the core: journalled with its traceback.
"""

from __future__ import annotations

import contextlib
import faulthandler
import logging
import os
import random
import signal
import time
import traceback
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import fsspec
import gcsfs.core
import pyarrow as pa

from airflow_provider_delta.log import (
    AddFile,
    ConcurrentModificationError,
    ConcurrentVacuumError,
    DeltaError,
    DeltaTable,
    add_file_from_parquet,
)

from .audit import check_rows, compare_checkpoint
from .data import NOT_FOUND, SCHEMA, batch_table, file_exists, read_snapshot_rows, write_parquet
from .faults import ClientFaultRates, ClientFaults, InjectedFault
from .journal import Journal

T = TypeVar("T")
DAY_MS = 86_400_000
_DETAILED_FAILURES = 3  # per (what, exception class) and process: tracebacks beyond these say nothing new


@dataclass(frozen=True)
class ActorSpec:
    """Everything an actor process needs (picklable)."""

    role: str  # "writer" | "compactor" | "maintainer" | "reader"
    index: int
    incarnation: int
    uri: str
    storage_options: dict[str, Any]
    fs_setup: str | None  # "gcs": register gcsfs's classic class, as the emulator fixture does
    workdir: str
    seed: int
    rates: ClientFaultRates
    writers: int
    maintenance_pause_s: float
    writer_think_s: float  # a writer's pause between reading the table and committing (20%: 2-8 times)
    env: dict[str, str]  # the parent's storage settings (credentials, proxies) at the time of the start

    @property
    def name(self) -> str:
        return f"{self.role}-{self.index}"

    @property
    def journal_path(self) -> Path:
        return Path(self.workdir) / f"{self.name}.jsonl"

    @property
    def stacks_path(self) -> Path:
        return Path(self.workdir) / f"{self.name}.stacks"

    @property
    def stop_path(self) -> Path:
        return Path(self.workdir) / "stop"


def main(spec: ActorSpec) -> None:
    """Process target: warm up, set up faults, run the role until the stop file appears."""
    os.environ.update(spec.env)
    # The core's warnings (e.g. "automatic checkpoint failed") go to the actor's own log, not to pytest's.
    logging.basicConfig(
        filename=Path(spec.workdir) / f"{spec.name}.log", level=logging.WARNING, force=True,
        format=f"%(asctime)s {spec.name}#{spec.incarnation} %(name)s %(levelname)s %(message)s",
    )  # fmt: skip
    if spec.fs_setup == "gcs":
        for protocol in ("gs", "gcs"):
            fsspec.register_implementation(protocol, gcsfs.core.GCSFileSystem, clobber=True)
    # The parent sends SIGUSR1 to a child that does not stop, to learn where it hangs.
    stacks = open(spec.stacks_path, "a")  # noqa: SIM115 (open for the life of the process)
    faulthandler.register(signal.SIGUSR1, file=stacks, all_threads=True)
    journal = Journal(spec.journal_path)
    journal.write({"t": "start", "inc": spec.incarnation, "pid": os.getpid()})
    actor = Actor(spec, journal, random.Random(f"{spec.seed}/{spec.name}/{spec.incarnation}"))
    # Warm up before faults: the first snapshot of a process creates its storage client and imports what
    # replay needs lazily (seconds on a busy machine); the parent starts its clock once every actor is here.
    while not actor.attempt("warm-up", lambda: actor.table().snapshot())[0]:
        if actor.stopping():
            return
    journal.write({"t": "ready", "inc": spec.incarnation})
    ClientFaults(spec.rates, actor.rng.getrandbits(64), actor.record_fault).install()
    ROLES[spec.role](actor)
    journal.write({"t": "exit", "inc": spec.incarnation})


class Actor:
    """One actor process: its journal, its generator, and the error classification all roles share."""

    def __init__(self, spec: ActorSpec, journal: Journal, rng: random.Random) -> None:
        self.spec = spec
        self.journal = journal
        self.rng = rng
        self._failures: Counter[tuple[str, str]] = Counter()
        self._missing: set[str] = set()

    def stopping(self) -> bool:
        return self.spec.stop_path.exists()

    def table(self) -> DeltaTable:
        return DeltaTable(self.spec.uri, self.spec.storage_options)

    def record_fault(self, kind: str, call: str) -> None:
        self.journal.write({"t": "fault", "kind": kind, "call": call})

    def failure(self, what: str, detail: str) -> None:
        self.journal.write({"t": "failure", "what": what, "detail": detail}, sync=True)

    def attempt(self, what: str, fn: Callable[[], T]) -> tuple[bool, T | None]:
        """Run ``fn``; an injected fault or a named error is journalled and returns ``(False, None)``, as
        does any other exception, which is also journalled as a failure."""
        try:
            return True, fn()
        except InjectedFault as exc:
            self.journal.write({"t": "error", "class": "injected", "what": what, "msg": str(exc)[:200]})
        except DeltaError as exc:
            self.journal.write(
                {"t": "error", "class": type(exc).__name__, "what": what, "msg": str(exc)[:400]}
            )
        except Exception as exc:
            key = (what, type(exc).__name__)
            self._failures[key] += 1
            detail = traceback.format_exc() if self._failures[key] <= _DETAILED_FAILURES else repr(exc)[:400]
            self.failure(f"{what}: {type(exc).__name__}", detail)
        time.sleep(self.rng.uniform(0, 0.1))  # a failed step is retried; never spin on a persistent error
        return False, None

    def pause(self, seconds: float) -> None:
        """Idle up to ``seconds``, returning early once the stop file appears."""
        end = time.monotonic() + seconds
        while time.monotonic() < end and not self.stopping():
            time.sleep(min(0.05, max(0.0, end - time.monotonic())))

    def live_file_missing(self, path: str, what: str) -> None:
        """A file of some snapshot was not found: a failure only if the latest snapshot still lists it.

        With zero VACUUM retention, a file that a compaction removed after our snapshot may be gone by the
        time we read it: that is the race retention exists to prevent, not a lost file.
        """
        def reopen() -> tuple[Any, set[str]]:  # the lazy snapshot reads its file list here, under the faults
            snap = self.table().snapshot()
            return snap, set(snap.file_paths())

        ok, opened = self.attempt("re-open after a missing file", reopen)
        if not ok or opened is None:
            return
        latest, live = opened
        if path in live and not file_exists(latest.store, path):
            if path not in self._missing:  # once per file: the audit counts them all
                self._missing.add(path)
                self.failure(
                    f"{what}: live file missing",
                    f"{path} is live at version {latest.version} but absent from storage",
                )
        else:
            self.journal.write({"t": "race", "what": what, "path": path})


# -- roles (each loops over one step; a step's closures see only that step's values) ---------------------
def run_writer(a: Actor) -> None:
    table = a.table()  # long-lived: its snapshots update incrementally
    app = f"writer-{a.spec.index}"
    batch = None
    while batch is None:
        if a.stopping():
            return
        ok, snap = a.attempt("open", table.snapshot)
        if ok:
            batch = snap.app_transactions.get(app, -1) + 1  # exactly once: resume after the table's txn
    a.journal.write({"t": "resume", "batch": batch})
    path: str | None = None
    while not a.stopping():
        batch, path = _writer_step(a, table, app, batch, path)


def _writer_step(
    a: Actor, table: DeltaTable, app: str, batch: int, path: str | None
) -> tuple[int, str | None]:
    """Commit batch ``batch`` from file ``path`` (written first if missing); return the next state.

    As a real job does: read the table, write the data (taking its time), then commit, so that log cleanup,
    checkpoints and VACUUM can run while the transaction is open.
    """
    i = a.spec.index
    ok, txn = a.attempt("open", table.transaction)
    if not ok:
        return batch, path
    if path is None or not a.attempt("file exists", lambda: file_exists(table.store, path))[1]:
        new = f"w{i}/b{batch:06d}-{uuid.uuid4().hex[:8]}.parquet"
        if not a.attempt("write file", lambda: write_parquet(table.store, new, batch_table(i, batch)))[0]:
            return batch, path
        a.journal.write({"t": "wrote", "batch": batch, "path": new})
        if path is not None:
            a.journal.write({"t": "rewrite", "batch": batch, "gone": path, "new": new})
        path = new
    # Now and then a slow job: its transaction stays open across a checkpoint and a log cleanup.
    slow = a.rng.random() < 0.2
    a.pause(a.rng.uniform(2, 8) * a.spec.writer_think_s if slow else a.rng.uniform(0, a.spec.writer_think_s))

    def commit() -> Any:
        try:
            add = add_file_from_parquet(txn.snapshot, path)
        except NOT_FOUND:
            return None  # VACUUM took the file before it was committed: write it again
        try:
            return txn.add_files([add]).set_app_transaction(app, batch).commit()
        except ConcurrentVacuumError as exc:
            # A concurrent VACUUM may delete the file even though it still exists: write it again.
            a.journal.write({"t": "conflict", "class": type(exc).__name__, "msg": str(exc)[:300]})
            return None

    ok, res = a.attempt("commit", commit)
    if not ok:
        return batch, path  # unknown outcome or named conflict: a new transaction decides (txn check)
    if res is None:
        return batch, None
    record = {
        "t": "ack",
        "batch": batch,
        "version": res.version,
        "already": res.already_committed,
        "path": path,
    }
    a.journal.write(record, sync=True)
    return batch + 1, None


def run_compactor(a: Actor) -> None:
    table = a.table()
    while not a.stopping():
        _compactor_step(a, table)


def _compactor_step(a: Actor, table: DeltaTable) -> None:
    def open_with_files() -> tuple[Any, pa.Table]:  # the lazy snapshot reads its file list here, in the guard
        txn = table.transaction()
        return txn, txn.snapshot.files

    ok, opened = a.attempt("open", open_with_files)
    if not ok or opened is None:
        return
    txn, files = opened
    if files.num_rows < 3:
        a.pause(0.3)
        return
    count = a.rng.randint(2, min(6, files.num_rows))
    inputs = files.take(sorted(a.rng.sample(range(files.num_rows), count))).to_pylist()
    ok, read = a.attempt("read inputs", lambda: read_snapshot_rows(table.store, [f["path"] for f in inputs]))
    if not ok:
        return
    rows, gone = read
    if gone:
        a.live_file_missing(gone[0], "compactor input")
        return
    out = f"compact/c{a.spec.index}-{uuid.uuid4().hex[:12]}.parquet"
    if not a.attempt(
        "write output",
        lambda: write_parquet(table.store, out, rows.sort_by([(c, "ascending") for c in SCHEMA.names])),
    )[0]:
        return

    def commit() -> Any:
        try:
            add = add_file_from_parquet(txn.snapshot, out, data_change=False)
        except NOT_FOUND:  # VACUUM took the output before it was committed
            a.journal.write({"t": "race", "what": "compactor output vacuumed before its commit"})
            return None
        txn.remove_files([AddFile.from_dict(f) for f in inputs], data_change=False).add_files([add])
        try:
            return txn.commit(operation="OPTIMIZE")
        except ConcurrentModificationError as exc:
            # A named conflict: our commit did not land, so the output is ours alone and no version lists
            # it. After an unknown outcome (a kill, any other error) it stays, for VACUUM to take.
            a.journal.write({"t": "conflict", "class": type(exc).__name__, "msg": str(exc)[:300]})
            with contextlib.suppress(OSError):
                table.store.fs.rm_file(table.store.table_file(out))
            return None

    ok, res = a.attempt("commit", commit)
    if ok and res is not None:
        paths = [f["path"] for f in inputs]
        a.journal.write({"t": "compaction", "version": res.version, "inputs": paths, "output": out})


def run_maintainer(a: Actor) -> None:
    table = a.table()  # long-lived, as a scheduler's maintenance task would hold it
    steps = (_checkpoint_step, _cleanup_step, _vacuum_step)
    n = 0
    while not a.stopping():
        steps[n % len(steps)](a, table)
        n += 1
        a.pause(a.rng.uniform(0, a.spec.maintenance_pause_s))


def _checkpoint_step(a: Actor, table: DeltaTable) -> None:
    ok, cp = a.attempt("checkpoint", table.checkpoint)
    if not ok:
        return
    a.journal.write({"t": "checkpoint", "version": cp.version})
    ok, verdict = a.attempt("verify checkpoint", lambda: compare_checkpoint(table.store, cp.version))
    if ok:
        kind, detail = verdict
        a.journal.write({"t": "checkpoint-verified", "version": cp.version, "verdict": kind})
        if kind == "mismatch":
            a.failure("checkpoint differs from replay", f"version {cp.version}: {detail}")


def _cleanup_step(a: Actor, table: DeltaTable) -> None:
    now = int(time.time() * 1000) + DAY_MS  # with zero retention: everything before the newest checkpoint
    ok, names = a.attempt("cleanup", lambda: table.cleanup_expired_logs(retention_ms=0, now_ms=now))
    if ok:
        a.journal.write({"t": "cleanup", "deleted": len(names)})


def _vacuum_step(a: Actor, table: DeltaTable) -> None:
    ok, report = a.attempt(
        "vacuum", lambda: table.vacuum(retention_hours=0, enforce_retention_duration=False, dry_run=False)
    )
    if ok:
        # What it deleted, to trace a missing live file to the VACUUM that took it.
        a.journal.write({"t": "vacuum", "deleted": len(report.files), "files": report.files[:300]})


def run_reader(a: Actor) -> None:
    long_lived = a.table()
    newest = {"fresh": -1, "long-lived": -1}
    n = 0
    while not a.stopping():
        kind = "long-lived" if n % 2 else "fresh"
        _reader_step(a, long_lived if kind == "long-lived" else a.table(), kind, newest)
        n += 1


def _reader_step(a: Actor, handle: DeltaTable, kind: str, newest: dict[str, int]) -> None:
    ok, snap = a.attempt(f"snapshot ({kind})", handle.snapshot)
    if not ok:
        return
    if snap.version < newest[kind]:
        a.failure("version went backwards", f"{kind} handle: version {snap.version} after {newest[kind]}")
    newest[kind] = max(newest[kind], snap.version)
    ok, read = a.attempt("read rows", lambda: read_snapshot_rows(snap.store, snap.file_paths()))
    if not ok:
        return
    rows, gone = read
    if gone:
        a.live_file_missing(gone[0], f"reader ({kind} handle, version {snap.version})")
        return
    problems = check_rows(rows, snap.app_transactions, a.spec.writers)
    if problems:
        a.failure("snapshot rows wrong", f"{kind} handle, version {snap.version}: " + "; ".join(problems))
    a.journal.write({"t": "read", "version": snap.version, "kind": kind, "files": snap.num_files})


ROLES: dict[str, Callable[[Actor], None]] = {
    "writer": run_writer,
    "compactor": run_compactor,
    "maintainer": run_maintainer,
    "reader": run_reader,
}
