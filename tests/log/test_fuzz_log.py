"""Fuzz test of the log reader: every malformed ``_delta_log`` is read, or refused with a named error.

Seeds are real logs (``fuzz_seeds``); each case applies one to three structure-aware mutations
(``fuzz_mutations``, drawn by ``fuzz_strategies``) to a copy, then reads the table as a user would:
``snapshot()``, the values a snapshot promises (schema, typed partition values, stats),
``snapshot(version=...)``, ``history()``, log cleanup (zero retention, clock two days ahead) and
``checkpoint()``, each followed by a re-read that must give the same state. The only failure allowed
is a ``DeltaError`` whose message names the table (or, for a partition value, the data file); no case
may run past ``DELTA_FUZZ_DEADLINE_S`` (a hang, or work proportional to a version number).

Budget and reproduction: ``DELTA_FUZZ_EXAMPLES`` cases (300 by default, 12-35 s; ``make fuzz`` runs
thousands); without ``DELTA_FUZZ_SEED`` the run is derandomized (the same cases every time), with it the
seed picks them. A failure prints the seed table, the mutations and the steps, and Hypothesis prints a
``@reproduce_failure`` blob. No example database is written.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from deadline import Hang, deadline
from fuzz_seeds import LogFiles, build_seeds, versions_named
from fuzz_strategies import mutations
from hypothesis import HealthCheck, event, given, note, settings
from hypothesis import seed as hypothesis_seed
from hypothesis import strategies as st

from airflow_provider_delta.log import DeltaTable
from airflow_provider_delta.log.base.errors import DeltaError

EXAMPLES = int(os.environ.get("DELTA_FUZZ_EXAMPLES", "300"))
SEED = os.environ.get("DELTA_FUZZ_SEED")
DEADLINE_S = float(os.environ.get("DELTA_FUZZ_DEADLINE_S", "20"))
INT64_MAX = 2**63 - 1
RERUN = (
    f"DELTA_FUZZ_SEED={SEED} DELTA_FUZZ_EXAMPLES={EXAMPLES}"
    if SEED is not None
    else f"DELTA_FUZZ_EXAMPLES={EXAMPLES} (derandomized: the same cases every run)"
)


@pytest.fixture(scope="module")
def seeds(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, st.SearchStrategy]]:
    """Seed name -> (its table, the strategy of mutations that fit its files)."""
    built = build_seeds(tmp_path_factory.mktemp("fuzz-seeds"))
    return {name: (root, mutations(LogFiles.of(root))) for name, root in built.items()}


@dataclass
class Verdict:
    """What reading a mutated table did: each step's outcome, and the first that was not acceptable."""

    root: Path
    steps: list[str] = field(default_factory=list)
    bad: str | None = None

    def step(
        self,
        name: str,
        fn: Callable[[], Any],
        names_file: Callable[[str], bool] | None = None,
        io_error: type[OSError] | None = None,
    ) -> Any:
        """Run one step; a failure is acceptable only as a ``DeltaError`` naming the table (or a file
        that ``names_file`` accepts), or as the filesystem's ``io_error`` for a step that writes."""
        try:
            out = fn()
        except Hang:
            raise
        except Exception as exc:  # noqa: BLE001 - the kind of error is what is judged here
            self.steps.append(f"{name}: {type(exc).__name__}")
            text = str(exc)
            named = str(self.root) in text or (
                names_file is not None and names_file(getattr(exc, "path", None) or "")
            )
            kind_ok = isinstance(exc, DeltaError) or (io_error is not None and isinstance(exc, io_error))
            if not (kind_ok and named) and self.bad is None:
                self.bad = f"{name} raised {type(exc).__name__}: {text[:500]}"
            return None
        self.steps.append(f"{name}: ok")
        return out


def read_every_way(root: Path, version_pick: int) -> Verdict:
    """Read the table as a user would; a snapshot's derived values and a checkpoint of it too."""
    v = Verdict(root)
    table = str(root)
    # A snapshot reads its file list when first asked (a checksum may spare it the checkpoint): reading it
    # is part of reading the table, and fails, when it does, with a named error as the rest does.
    snap = v.step("snapshot()", lambda: with_files(DeltaTable(table).snapshot()))
    if snap is None:
        v.step("history()", lambda: DeltaTable(table).history())
        v.step("snapshot(version=0)", lambda: with_files(DeltaTable(table).snapshot(version=0)))
        return v
    # What a snapshot promises once built must not fail later, lazily; a partition value that does not
    # parse is reported when partition values are typed, naming its data file.
    v.step("schema", lambda: snap.schema)
    data_files = set(snap.file_paths())
    v.step("partition_values()", snap.partition_values, names_file=data_files.__contains__)
    v.step("file_stats()", snap.file_stats)
    versions = [x for x in versions_named(root) if x <= INT64_MAX] or [0]
    version = versions[version_pick % len(versions)]
    v.step(f"snapshot(version={version})", lambda: with_files(DeltaTable(table).snapshot(version=version)))
    v.step("history()", lambda: DeltaTable(table).history())
    # Log cleanup decides from exactly what the reader reconstructs: whatever the mutation left (a broken
    # newest checkpoint, a foreign sidecar, a stale copy), a readable latest version stays readable and
    # the same after it, whether it deleted anything or refused by name.
    now = int(time.time() * 1000) + 2 * 86_400_000
    v.step(
        "cleanup_expired_logs()", lambda: DeltaTable(table).cleanup_expired_logs(retention_ms=0, now_ms=now)
    )
    cleaned = v.step("snapshot() after cleanup", lambda: DeltaTable(table).snapshot())
    if v.bad is None and (cleaned is None or state(cleaned) != state(snap)):
        v.bad = "log cleanup turned the readable latest version into an unreadable or different one"
    # A mutation may leave a directory where the checkpoint writes (``_last_checkpoint``): the filesystem
    # refuses, and says where.
    written = v.step("checkpoint()", lambda: DeltaTable(table).checkpoint(), io_error=IsADirectoryError)
    if written is not None:
        again = v.step("snapshot() after checkpoint()", lambda: DeltaTable(table).snapshot())
        if again is not None and v.bad is None and state(again) != state(snap):
            v.bad = "the snapshot read back from our checkpoint differs from the one it was written from"
    return v


def with_files(snap: Any) -> Any:
    snap.files  # noqa: B018 - read here, inside the step
    return snap


def state(snap: Any) -> tuple:
    files = snap.files.select(["path", "size", "partitionValues"]).to_pylist()
    key = sorted(repr((f["path"], f["size"], sorted(f["partitionValues"] or [], key=repr))) for f in files)
    return (snap.version, key, snap.protocol, snap.metadata, snap.app_transactions, snap.domain_metadata)


def _settings(fn: Callable) -> Callable:
    fn = settings(
        max_examples=EXAMPLES,
        deadline=None,  # the per-case deadline above is the one that counts
        derandomize=SEED is None,
        database=None,
        print_blob=True,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )(fn)
    return hypothesis_seed(int(SEED))(fn) if SEED is not None else fn


@_settings
@given(data=st.data())
def test_every_mutated_log_is_read_or_refused_with_a_named_error(seeds, data) -> None:
    name = data.draw(st.sampled_from(sorted(seeds)), label="seed table")
    source, strategy = seeds[name]
    muts = data.draw(st.lists(strategy, min_size=1, max_size=3), label="mutations")
    version_pick = data.draw(st.integers(0, 1000), label="version pick")
    recipe = f"seed table {name}; " + "; ".join(m.describe() for m in muts)
    note(recipe)
    with tempfile.TemporaryDirectory(prefix="fuzz-") as tmp:
        root = Path(tmp) / "t"
        shutil.copytree(source, root)
        for m in muts:
            m.apply(root)
        logging.disable(logging.WARNING)  # ignored stray files and fallbacks warn: expected here
        try:
            with deadline(DEADLINE_S, recipe):
                verdict = read_every_way(root, version_pick)
        finally:
            logging.disable(logging.NOTSET)
    event(f"snapshot(): {verdict.steps[0].split(': ', 1)[1]}")
    assert verdict.bad is None, f"{verdict.bad}\n  case: {recipe}\n  steps: {verdict.steps}\n  rerun: {RERUN}"
