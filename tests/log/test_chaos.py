"""Chaos: nothing acknowledged is lost while writers, compaction, maintenance and readers race on one table,
storage misbehaves and processes die (issue 21).

Exactly-once writer processes, a compactor, a maintainer (checkpoint; log cleanup and VACUUM, both with zero
retention) and a reader run as spawned processes on one table. Client-side faults are injected into the
core's storage calls in every actor (lost acknowledgements, unsent writes, transient read errors, slow calls,
interrupted deletes); on S3 moto's server also answers 500 before or after applying requests and answers
slowly (``S3Server.faults``). The parent SIGKILLs random actors on a seeded schedule and restarts them.
Afterwards the parent audits the table (see ``chaos/audit.py``), runs one quiet maintenance pass and audits
again. Each run prints a one-line summary; docs/reliability.md has the design, the rates and the figures.

``make test`` runs one bounded seed per backend; ``make chaos`` runs longer over several seeds. Settings:
``CHAOS_SEEDS`` (space- or comma-separated), ``CHAOS_DURATION_S`` (S3, default 30),
``CHAOS_EMULATOR_DURATION_S`` (GCS and Azure, default 15), ``CHAOS_KILL_EVERY_S`` (mean seconds between
kills, default 4 on S3 and 2.5 on the emulators), ``CHAOS_REPORT`` (a file each summary line, or for a
failed run the whole report, is appended to).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from chaos.audit import check_commits
from chaos.faults import ClientFaultRates
from chaos.run import ChaosConfig, ChaosResult, Location, run_chaos

from airflow_provider_delta.log.files.storage import FileMeta

pytestmark = pytest.mark.chaos

# Server-side fault rates per request (moto's middleware; error_before and slow for any request,
# dropped_response for PUT/POST/DELETE).
SERVER_RATES = {"error_before": 0.015, "dropped_response": 0.015, "slow": 0.01}


def _seeds(default: int) -> list[int]:
    text = os.environ.get("CHAOS_SEEDS", "").replace(",", " ")
    return [int(s) for s in text.split()] or [default]


def _config(seed: int, duration_env: str, default_s: float, writers: int, kill_every_s: float) -> ChaosConfig:
    return ChaosConfig(
        seed=seed,
        duration_s=float(os.environ.get(duration_env, default_s)),
        writers=writers,
        kill_every_s=float(os.environ.get("CHAOS_KILL_EVERY_S", kill_every_s)),
        rates=ClientFaultRates(),
    )


def _report(result: ChaosResult, capsys: pytest.CaptureFixture[str]) -> None:
    line = result.summary()
    with capsys.disabled():
        print("\n" + line)
    if path := os.environ.get("CHAOS_REPORT"):
        with open(path, "a") as fh:
            fh.write((line if result.clean else result.report()) + "\n")


def _assert_clean(result: ChaosResult, *, server_faults: bool) -> None:
    report = result.report()
    audit, final = result.audit, result.final
    assert final is not None
    # The run did what it claims (otherwise a clean audit proves nothing).
    assert audit.acknowledged > 0 and result.events["checkpoint"] > 0, report
    assert sum(result.client_faults.values()) > 0 and sum(result.kills.values()) > 0, report
    assert not server_faults or sum(result.server_faults.values()) > 0, report
    # Every version checksum left behind (the writers', the final checkpoint's) was compared with its
    # version's replay: a mismatch is a problem below, and at least one was there to compare. The race's
    # own may all be gone: log cleanup with zero retention deletes those below its newest checkpoint, and a
    # slow run (a loaded machine) may leave none after it.
    assert audit.checksums["agrees"] + final.checksums["agrees"] > 0, report
    # Nothing acknowledged lost, nothing twice, every live file there, the log, checkpoints and checksums
    # consistent.
    assert not result.failures, report
    assert (audit.lost, audit.duplicated, audit.missing_files, audit.problems) == ([], [], [], []), report
    assert (final.lost, final.duplicated, final.missing_files, final.problems) == ([], [], [], []), report


@pytest.mark.s3
@pytest.mark.parametrize("seed", _seeds(1))
def test_chaos_on_s3(s3_server, s3_bucket: str, tmp_path: Path, seed: int, capsys) -> None:
    uri = f"s3://{s3_bucket}/chaos"
    location = Location(uri, s3_server.storage_options, uri, s3_server.delta_storage_options)
    result = run_chaos(
        "s3",
        location,
        _config(seed, "CHAOS_DURATION_S", 30, writers=3, kill_every_s=4),
        tmp_path / "run",
        faults_on=lambda: s3_server.faults.start(s3_bucket, seed, **SERVER_RATES),
        faults_off=s3_server.faults.stop,
    )
    _report(result, capsys)
    _assert_clean(result, server_faults=True)


@pytest.mark.parametrize("seed", _seeds(2))
def test_chaos_on_emulator(emulator, tmp_path: Path, seed: int, capsys) -> None:
    path = f"chaos-{seed}-{tmp_path.name}"
    location = Location(
        emulator.uri(path),
        emulator.storage_options,
        emulator.delta_uri(path),
        emulator.delta_storage_options,
        fs_setup="gcs" if emulator.name == "gcs" else None,
    )
    result = run_chaos(
        emulator.name,
        location,
        _config(seed, "CHAOS_EMULATOR_DURATION_S", 15, writers=2, kill_every_s=2.5),
        tmp_path / "run",
    )
    _report(result, capsys)
    _assert_clean(result, server_faults=False)


def _listing(*entries: tuple[str, int]) -> list[FileMeta]:
    return [FileMeta(name, 1, mtime) for name, mtime in entries]


def test_the_audit_tells_a_stale_writers_orphan_from_a_hole_in_the_log() -> None:
    def c(v: int) -> str:
        return f"{v:020d}.json"

    cp = f"{54:020d}.checkpoint.parquet"
    kept = [(cp, 200), (c(54), 100), (c(55), 300), (c(56), 400)]
    # Commit 52 put after cleanup removed 52-53 (newer than commit 54, which that cleanup kept): an orphan.
    assert check_commits(_listing((c(52), 350), *kept), 56) == (54, 1, [])
    # Commit 52 older than commit 54: a cleanup deleted 53 and left 52, a hole.
    earliest, orphans, problems = check_commits(_listing((c(52), 50), *kept), 56)
    assert (earliest, orphans) == (54, 1) and problems and "[52]" in problems[0]
    # A log that starts after 0 with no checkpoint to read it from.
    assert check_commits(_listing(*kept[1:]), 56)[2]
    # The snapshot must end at the newest commit.
    assert check_commits(_listing(*kept), 57)[2]
    assert check_commits(_listing(*kept), 56) == (54, 0, [])
