"""The parent side of a chaos run: start the actors, SIGKILL and restart them, stop them, audit the table.

The run is seeded: the actors' fault draws and the parent's kill schedule (when, and whom) come from the
seed. Which request a fault hits and how the processes interleave is up to the OS, so a seed reproduces
the pressure, not the exact history; the summary line says what happened.
"""

from __future__ import annotations

import multiprocessing
import os
import random
import signal
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from airflow_provider_delta.log import DeltaTable

from .actors import ActorSpec, main
from .audit import Audit, audit_table, compare_checkpoint
from .data import SCHEMA
from .faults import ClientFaultRates
from .journal import read_journal

# Imported once by the fork server, so that each actor (and each restart after a kill) starts in a fraction
# of a second instead of importing pyarrow, pandas and the storage clients anew.
_PRELOAD = ["chaos.actors", "pandas", "pyarrow.parquet", "s3fs", "gcsfs", "adlfs"]
# What an actor takes over from the parent's environment: credentials and proxy settings of the backends.
_ENV_PREFIXES = ("AWS_", "NO_PROXY", "no_proxy")
_READY_TIMEOUT_S = 300.0

# Relative chances of being the next one killed: writers hold the acknowledgements that must survive.
_KILL_WEIGHT = {"writer": 3.0, "compactor": 1.5, "maintainer": 1.5, "reader": 0.5}


@dataclass(frozen=True)
class ChaosConfig:
    seed: int
    duration_s: float
    writers: int = 3
    compactors: int = 1
    readers: int = 1
    kill_every_s: float = 4.0  # mean time between SIGKILLs (exponential)
    rates: ClientFaultRates = field(default_factory=ClientFaultRates)
    maintenance_pause_s: float = 0.5  # at most, between two maintenance steps
    # At most, between a writer's read of the table and its commit; one commit in five waits 2-8 times it.
    writer_think_s: float = 0.5
    stop_timeout_s: float = 120.0


@dataclass(frozen=True)
class Location:
    uri: str
    storage_options: dict[str, Any]
    delta_uri: str
    delta_storage_options: dict[str, str]
    fs_setup: str | None = None  # see ActorSpec.fs_setup


@dataclass
class ChaosResult:
    backend: str
    config: ChaosConfig
    race_s: float = 0.0  # from every actor ready to every actor stopped
    total_s: float = 0.0  # the whole run: start-up, race, audits, final maintenance
    kills: Counter[str] = field(default_factory=Counter)
    client_faults: Counter[str] = field(default_factory=Counter)
    server_faults: Counter[str] = field(default_factory=Counter)
    events: Counter[str] = field(default_factory=Counter)
    named_errors: Counter[str] = field(default_factory=Counter)
    inline_checks: Counter[str] = field(default_factory=Counter)  # the maintainer's checkpoint verdicts
    failures: list[str] = field(default_factory=list)
    audit: Audit = field(default_factory=Audit)
    final: Audit | None = None

    @property
    def clean(self) -> bool:
        """Nothing lost, duplicated or missing, no failure, during the run and after the final pass."""
        return not self.failures and self.audit.clean and (self.final is None or self.final.clean)

    def summary(self) -> str:
        """One line: the seed, what was done and injected, and what the audit found."""
        a, e = self.audit, self.events

        def fmt(c: Counter[str]) -> str:
            return ",".join(f"{k}:{n}" for k, n in sorted(c.items())) or "none"

        parts = [
            f"chaos {self.backend} seed={self.config.seed} race={self.race_s:.0f}s total={self.total_s:.0f}s",
            f"commits={a.version} earliest={a.earliest_commit} orphans={a.orphans} acked={a.acknowledged}",
            f"already-committed={e['already-committed']} unacked-present={a.unacknowledged_present}",
            f"client-faults={fmt(self.client_faults)} server-faults={fmt(self.server_faults)}",
            f"kills={sum(self.kills.values())}({fmt(self.kills)})",
            f"checkpoints={e['checkpoint']} cleanups={e['cleanup']} vacuums={e['vacuum']}",
            f"compactions={e['compaction']} reads={e['read']} rewrites={e['rewrite']} races={e['race']}",
            f"checkpoint-checks=[inline {fmt(self.inline_checks)}; audit {fmt(a.checkpoints)}]",
            f"checksum-checks={fmt(a.checksums)}",
            f"named-errors={fmt(self.named_errors)}",
            f"lost={len(a.lost)}(from-log:{len(a.lost_from_log)})",
            f"duplicated={len(a.duplicated)} missing={len(a.missing_files)}",
            f"problems={len(a.problems)} failures={len(self.failures)}",
        ]
        if (f := self.final) is not None:
            parts.append(
                f"final-pass=[lost {len(f.lost)} dup {len(f.duplicated)} missing {len(f.missing_files)} "
                f"problems {len(f.problems)} checkpoint {fmt(f.checkpoints)}]"
            )
        return " ".join(parts)

    def report(self) -> str:
        """Everything that went wrong, for an assertion message."""
        a = self.audit
        lines = [self.summary()]
        lines += [f"lost (writer, batch): {a.lost[:20]}"] if a.lost else []
        lines += [f"lost from the log (in no missing file): {a.lost_from_log}"] if a.lost_from_log else []
        lines += [f"duplicated (writer, batch): {a.duplicated[:20]}"] if a.duplicated else []
        lines += [f"missing live files: {a.missing_files[:20]}"] if a.missing_files else []
        lines += [f"problem: {p}" for p in a.problems]
        if self.final is not None:
            lines += [f"after the final maintenance pass: {p}" for p in self.final.problems]
            lines += (
                [f"final pass missing files: {self.final.missing_files[:20]}"]
                if self.final.missing_files
                else []
            )
        lines += [f"failure: {f}" for f in self.failures[:30]]
        lines += [f"named errors: {dict(self.named_errors.most_common())}"]
        return "\n".join(lines)


def run_chaos(
    backend: str,
    location: Location,
    config: ChaosConfig,
    workdir: Path,
    *,
    faults_on: Callable[[], None] = lambda: None,
    faults_off: Callable[[], Counter[str]] = Counter,
) -> ChaosResult:
    """Create a table at ``location``, race the actors on it for ``config.duration_s``, then audit it.

    ``faults_on``/``faults_off`` switch server-side faults (S3's middleware) around the racing part.
    """
    workdir.mkdir(parents=True, exist_ok=True)
    DeltaTable.create(location.uri, SCHEMA, storage_options=location.storage_options)
    result = ChaosResult(backend, config)
    started = time.monotonic()
    roster = (
        [("writer", i) for i in range(config.writers)]
        + [("compactor", i) for i in range(config.compactors)]
        + [("maintainer", 0)]
        + [("reader", i) for i in range(config.readers)]
    )
    supervisor = _Supervisor(location, config, workdir)
    faults_on()
    try:
        for role, index in roster:
            supervisor.start(role, index)
        supervisor.wait_ready(result)
        raced = time.monotonic()
        supervisor.race(config.duration_s, result)
        supervisor.stop(result)
        result.race_s = time.monotonic() - raced
    finally:
        supervisor.kill_all()
        result.server_faults = faults_off()
    acks = _collect(workdir, roster, result)
    table = DeltaTable(location.uri, location.storage_options)
    delta = (location.delta_uri, location.delta_storage_options)
    result.audit = audit_table(table, acks, config.writers, delta)
    # One quiet pass of maintenance (no faults, no actors): it must keep every live file and every row, and
    # its checkpoint (verified before cleanup removes what it is compared with) must equal the replay.
    version = table.checkpoint().version
    verdict, detail = compare_checkpoint(table.store, version)
    table.cleanup_expired_logs(retention_ms=0, now_ms=int(time.time() * 1000) + 86_400_000)
    table.vacuum(retention_hours=0, enforce_retention_duration=False, dry_run=False)
    fresh = DeltaTable(location.uri, location.storage_options)
    result.final = audit_table(fresh, acks, config.writers, delta)
    result.final.checkpoints = Counter({verdict: 1})
    if verdict == "mismatch":
        result.final.problems.append(f"the final checkpoint {version} differs from the replay: {detail}")
    result.total_s = time.monotonic() - started
    return result


class _Supervisor:
    """Starts the actors, kills and restarts them on the seeded schedule, stops them."""

    def __init__(self, location: Location, config: ChaosConfig, workdir: Path) -> None:
        self.location, self.config, self.workdir = location, config, workdir
        # Each actor is its own process, forked from a clean single-threaded fork server (never from this
        # process, whose moto server threads hold locks): its own interpreter state and storage clients.
        self.ctx = multiprocessing.get_context("forkserver")
        self.ctx.set_forkserver_preload(_PRELOAD)
        self.procs: dict[tuple[str, int], tuple[Any, int]] = {}
        self.rng = random.Random(f"{config.seed}/supervisor")

    def start(self, role: str, index: int, incarnation: int = 0) -> None:
        loc, cfg = self.location, self.config
        spec = ActorSpec(
            role, index, incarnation, loc.uri, loc.storage_options, loc.fs_setup, str(self.workdir),
            cfg.seed, cfg.rates, cfg.writers, cfg.maintenance_pause_s, cfg.writer_think_s,
            {k: v for k, v in os.environ.items() if k.startswith(_ENV_PREFIXES)},
        )  # fmt: skip
        proc = self.ctx.Process(target=main, args=(spec,), name=spec.name, daemon=True)
        proc.start()
        self.procs[(role, index)] = (proc, incarnation)

    def wait_ready(self, result: ChaosResult) -> None:
        """Wait until every actor has warmed up (a record "ready" in its journal), within a deadline."""
        deadline = time.monotonic() + _READY_TIMEOUT_S
        waiting = set(self.procs)
        while waiting and time.monotonic() < deadline:
            for role, index in list(waiting):
                records = read_journal(self.workdir / f"{role}-{index}.jsonl")
                if any(r["t"] == "ready" for r in records):
                    waiting.discard((role, index))
            time.sleep(0.1)
        if waiting:
            result.failures.append(f"not ready after {_READY_TIMEOUT_S:.0f}s: {sorted(waiting)}")

    def race(self, duration_s: float, result: ChaosResult) -> None:
        deadline = time.monotonic() + duration_s
        next_kill = time.monotonic() + self.rng.expovariate(1 / self.config.kill_every_s)
        while (now := time.monotonic()) < deadline:
            for (role, index), (proc, inc) in list(self.procs.items()):
                if proc.exitcode is not None:  # nobody killed it and it was not told to stop
                    result.failures.append(f"{role}-{index} (incarnation {inc}) exited with {proc.exitcode}")
                    self.start(role, index, inc + 1)
            if now >= next_kill:
                keys = sorted(self.procs)
                role, index = self.rng.choices(keys, [_KILL_WEIGHT[r] for r, _ in keys])[0]
                proc, inc = self.procs[(role, index)]
                proc.kill()
                proc.join(30)
                result.kills[role] += 1
                self.start(role, index, inc + 1)
                next_kill = now + self.rng.expovariate(1 / self.config.kill_every_s)
            # A scheduler tick, not a wait for some condition: kills happen at their scheduled times.
            time.sleep(max(0.0, min(0.1, next_kill - now, deadline - now)))

    def stop(self, result: ChaosResult) -> None:
        """Ask every actor to stop; one that does not within the timeout has hung: its stacks are dumped."""
        (self.workdir / "stop").touch()
        deadline = time.monotonic() + self.config.stop_timeout_s
        for (role, index), (proc, inc) in sorted(self.procs.items()):
            proc.join(max(0.0, deadline - time.monotonic()))
            if proc.exitcode is None:
                stacks = self.workdir / f"{role}-{index}.stacks"
                before = stacks.stat().st_size if stacks.exists() else 0
                os.kill(proc.pid, signal.SIGUSR1)
                wait = time.monotonic() + 10
                while time.monotonic() < wait and (stacks.stat().st_size if stacks.exists() else 0) == before:
                    time.sleep(0.05)
                dump = stacks.read_text(errors="replace")[before:][-4000:] if stacks.exists() else ""
                result.failures.append(
                    f"{role}-{index} did not stop in {self.config.stop_timeout_s:.0f}s:\n{dump}"
                )
            elif proc.exitcode != 0:
                result.failures.append(f"{role}-{index} (incarnation {inc}) exited with {proc.exitcode}")

    def kill_all(self) -> None:
        for proc, _ in self.procs.values():
            if proc.exitcode is None:
                proc.kill()
                proc.join(30)


# CorruptLogError and its subclasses, by the name the journals record.
CORRUPT_LOG_ERRORS = frozenset({"CorruptLogError", "ChecksumError", "DeletionVectorError"})


def _collect(workdir: Path, roster: list[tuple[str, int]], result: ChaosResult) -> dict[int, set[int]]:
    """Read the journals into ``result``; return each writer's acknowledged batches."""
    acks: dict[int, set[int]] = {}
    for role, index in roster:
        for rec in read_journal(workdir / f"{role}-{index}.jsonl"):
            t = rec["t"]
            if t == "fault":
                result.client_faults[rec["kind"]] += 1
            elif t == "error" and rec["class"] != "injected" or t == "conflict":
                result.named_errors[rec["class"]] += 1
                if rec["class"] in CORRUPT_LOG_ERRORS:
                    # Faults drop, delay and repeat requests and kill processes, never corrupt a file:
                    # a reader that calls the log corrupt misread a valid table.
                    result.failures.append(f"{role}-{index}: {rec['class']}: {rec.get('msg', '')}")
            elif t == "failure":
                result.failures.append(f"{role}-{index}: {rec['what']}: {rec['detail']}")
            elif t == "checkpoint-verified":
                result.inline_checks[rec["verdict"]] += 1
            elif t == "ack":
                acks.setdefault(index, set()).add(rec["batch"])
                result.events["already-committed"] += rec["already"]
            result.events[t] += 1
    return acks
