"""What the chaos test checks, during the run (reader, maintainer) and after it (the parent's audit).

- rows: no (writer, batch, row) twice; each writer's batches exactly ``0..txn`` of its app transaction,
  each with all its rows (a batch and its ``txn`` commit together, and batches commit in order);
- the log: commit versions contiguous from the earliest retained one up to the snapshot's version, any
  commit below a gap an orphan of a stale writer's put (``check_commits``);
- checkpoints: the state a checkpoint holds equals the replay of an older checkpoint (or the first
  commit) plus the commits up to its version, whenever those still exist;
- checksums: every version checksum left (writers are killed between their commit and its checksum, or
  while writing it) agrees with the replay of its version, when its commits still exist;
- storage: every live file exists; deltalake reads the same version and the same live files.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from airflow_provider_delta.log import ChecksumError, DeltaTable, VersionNotFoundError
from airflow_provider_delta.log.files.segment import SegmentBuilder, commit_version, group_checkpoints
from airflow_provider_delta.log.files.storage import FileMeta, LogStore
from airflow_provider_delta.log.snapshot.replay import CheckpointReadError, TableState, replay

from .data import batch_rows, read_snapshot_rows
from .faults import InjectedFault

_SHOWN = 8  # examples per problem in a message


def row_counts(rows: pa.Table) -> Counter[tuple[int, int, int]]:
    return Counter(zip(*(rows.column(c).to_pylist() for c in ("writer", "batch", "row")), strict=True))


def check_rows(rows: pa.Table, app_txns: Mapping[str, int], writers: int) -> list[str]:
    """Problems with the rows of one snapshot, as sentences; empty when the snapshot is consistent."""
    counts = row_counts(rows)
    problems = []
    twice = sorted(k for k, n in counts.items() if n > 1)
    if twice:
        problems.append(f"{len(twice)} rows more than once, e.g. (writer, batch, row) {twice[:_SHOWN]}")
    for w in range(writers):
        txn = app_txns.get(f"writer-{w}", -1)
        present = Counter(b for (ww, b, _) in counts if ww == w)
        missing = [b for b in range(txn + 1) if present[b] != batch_rows(w, b)]
        extra = sorted(b for b in present if b > txn)
        if missing:
            problems.append(
                f"writer-{w} (txn {txn}): {len(missing)} batches missing or partial {missing[:_SHOWN]}"
            )
        if extra:
            problems.append(f"writer-{w} (txn {txn}): batches beyond its txn {extra[:_SHOWN]}")
    return problems


def _state(store: LogStore, version: int, exclude: frozenset[int]) -> tuple[int | None, TableState]:
    segment = SegmentBuilder(store).build(version, exclude)
    return segment.checkpoint_version, replay(
        store, segment, store.read_log_files(f.name for f in segment.commits)
    )


def _summary(state: TableState) -> dict[str, Any]:
    return {
        "protocol": state.protocol,
        "metadata": state.metadata,
        "txns": {k: t.version for k, t in state.txns.items()},
        "domains": state.domains,
        "files": sorted(
            zip(state.files.column("path").to_pylist(), state.files.column("size").to_pylist(), strict=True)
        ),
        "tombstones": sorted(state.tombstones.column("path").to_pylist()),
    }


def compare_checkpoint(store: LogStore, version: int) -> tuple[str, str]:
    """``("equal" | "mismatch" | "unverifiable", detail)``: checkpoint ``version`` against the replay without
    it. Unverifiable when the commits before it were cleaned up (no older checkpoint covers them)."""
    try:
        used, with_cp = _state(store, version, frozenset())
        if used != version:
            return "mismatch", f"the snapshot of version {version} did not use its checkpoint (used {used})"
        try:
            older, without = _state(store, version, frozenset({version}))
        except VersionNotFoundError:
            return "unverifiable", f"nothing before checkpoint {version} is left to replay"
    except CheckpointReadError as exc:  # replay's own signal (load_snapshot falls back on it); not ours
        if isinstance(exc.__cause__, InjectedFault):
            raise exc.__cause__ from exc
        return "mismatch", f"a checkpoint needed to verify {version} cannot be read: {exc}"
    a, b = _summary(with_cp), _summary(without)
    diff = [k for k in a if a[k] != b[k]]
    if not diff:
        return "equal", f"replayed from checkpoint {older}"
    details = []
    for k in diff:
        if k in ("files", "tombstones"):
            only_cp, only_replay = set(a[k]) - set(b[k]), set(b[k]) - set(a[k])
            details.append(
                f"{k}: only in the checkpoint {sorted(only_cp)[:_SHOWN]}, only in the replay "
                f"{sorted(only_replay)[:_SHOWN]}"
            )
        else:
            details.append(f"{k}: checkpoint {a[k]} != replay {b[k]}")
    return "mismatch", f"replayed from checkpoint {older}: " + "; ".join(details)


@dataclass
class Audit:
    """The table after a run, against what the writers were told."""

    version: int = -1
    earliest_commit: int = -1
    orphans: int = 0  # commits a stale writer left below a gap (``check_commits``)
    live_files: int = 0
    acknowledged: int = 0
    present_batches: int = 0
    unacknowledged_present: int = 0
    lost: list[tuple[int, int]] = field(default_factory=list)
    # Lost batches that no missing live file's stats cover: the log lost them (the others went with a file).
    lost_from_log: list[tuple[int, int]] = field(default_factory=list)
    duplicated: list[tuple[int, int]] = field(default_factory=list)
    missing_files: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    checkpoints: Counter[str] = field(default_factory=Counter)
    checksums: Counter[str] = field(default_factory=Counter)

    @property
    def clean(self) -> bool:
        return not (self.lost or self.duplicated or self.missing_files or self.problems)


def audit_table(
    table: DeltaTable,
    acks: Mapping[int, set[int]],
    writers: int,
    delta: tuple[str, dict[str, str]] | None,
) -> Audit:
    """Audit ``table``: ``acks`` maps each writer to its acknowledged batches; ``delta`` is deltalake's
    (uri, storage options), or None to skip that comparison."""
    out = Audit()
    snap = table.snapshot()
    store = table.store
    out.version, out.live_files = snap.version, snap.num_files
    rows, out.missing_files = read_snapshot_rows(store, snap.file_paths())
    counts = row_counts(rows)
    per_batch: dict[tuple[int, int], Counter[int]] = {}
    for (w, b, r), n in counts.items():
        per_batch.setdefault((w, b), Counter())[r] += n
    out.present_batches = len(per_batch)
    for w in range(writers):
        for b in sorted(acks.get(w, set())):
            out.acknowledged += 1
            got = per_batch.get((w, b), Counter())
            if any(got[r] == 0 for r in range(batch_rows(w, b))):
                out.lost.append((w, b))
    ranges = _stats_ranges(snap.files, set(out.missing_files))
    out.lost_from_log = [
        (w, b) for w, b in out.lost if not any(w0 <= w <= w1 and b0 <= b <= b1 for w0, w1, b0, b1 in ranges)
    ]
    out.duplicated = sorted(k for k, rs in per_batch.items() if any(n > 1 for n in rs.values()))
    out.unacknowledged_present = sum(1 for (w, b) in per_batch if b not in acks.get(w, set()))
    out.problems += check_rows(rows, snap.app_transactions, writers)
    out.earliest_commit, out.orphans, problems = check_commits(store.list_log(), snap.version)
    out.problems += problems
    for version in sorted(group_checkpoints(store.list_log())):
        verdict, detail = compare_checkpoint(store, version)
        out.checkpoints[verdict] += 1
        if verdict == "mismatch":
            out.problems.append(f"checkpoint {version} differs from the replay: {detail}")
    for name in sorted(f.name for f in store.list_log(out.earliest_commit) if f.name.endswith(".crc")):
        verdict, detail = compare_checksum(table, int(name[:20]))
        out.checksums[verdict] += 1
        if verdict == "mismatch":
            out.problems.append(f"checksum {name} disagrees with the log: {detail}")
    if delta is not None:
        out.problems += _deltalake_disagrees(delta, snap.version, set(snap.file_paths()))
    return out


def check_commits(listed: list[FileMeta], version: int) -> tuple[int, int, list[str]]:
    """(earliest commit of the table, orphans, problems) of a log listing whose snapshot is at ``version``.

    The table's commits run without a gap from the earliest up to ``version``. Below a gap, a commit is
    an orphan a stale writer's put left in a prefix log cleanup had deleted (the writer saw it was
    invisible and committed again; the next cleanup removes it): it must be newer than the first commit
    after the gap, which the cleanup that made the gap had already kept. An older one means a cleanup
    deleted a commit and left an older one (a hole in the log), which is a problem.
    """
    commits = sorted(
        ((v, f) for f in listed if (v := commit_version(f.name)) is not None), key=lambda c: c[0]
    )
    versions = [v for v, _ in commits]
    problems = []
    start = len(commits) - 1
    while start > 0 and versions[start - 1] == versions[start] - 1:
        start -= 1
    earliest = versions[start] if commits else -1
    if not commits or versions[-1] != version:
        problems.append(f"commits listed up to {versions[-1] if commits else None}, snapshot at {version}")
    elif earliest > 0 and not any(earliest - 1 <= v <= version for v in group_checkpoints(listed)):
        problems.append(f"the log starts at commit {earliest} with no checkpoint to read it from")
    first_kept = commits[start][1].modification_time if commits else 0
    older = [v for v, f in commits[:start] if f.modification_time < first_kept]
    if older:
        problems.append(
            f"commit versions not contiguous: {older[:_SHOWN]} below the gap before {earliest} predate "
            f"commit {earliest}, so log cleanup deleted commits after them (listed {versions[:_SHOWN]}...)"
        )
    return earliest, start, problems


def compare_checksum(table: DeltaTable, version: int) -> tuple[str, str]:
    """("agrees" | "mismatch" | "gone", detail): the checksum of ``version`` against its replayed state."""
    try:
        table.validate_checksum(version)
    except ChecksumError as exc:
        return ("gone", str(exc)) if "has no checksum file" in str(exc) else ("mismatch", str(exc))
    except VersionNotFoundError as exc:  # log cleanup took the version since the listing
        return "gone", str(exc)
    return "agrees", ""


def _stats_ranges(files: pa.Table, paths: set[str]) -> list[tuple[int, int, int, int]]:
    """(min writer, max writer, min batch, max batch) of the files ``paths``, from their ``stats``."""
    out = []
    for path, stats in zip(files.column("path").to_pylist(), files.column("stats").to_pylist(), strict=True):
        if path in paths and stats:
            low, high = json.loads(stats)["minValues"], json.loads(stats)["maxValues"]
            out.append((low["writer"], high["writer"], low["batch"], high["batch"]))
    return out


def _deltalake_disagrees(delta: tuple[str, dict[str, str]], version: int, paths: set[str]) -> list[str]:
    import deltalake

    uri, options = delta
    dt = deltalake.DeltaTable(uri, storage_options=options or None)
    theirs = set(pa.table(dt.get_add_actions(flatten=True)).column("path").to_pylist())
    problems = []
    if dt.version() != version:
        problems.append(f"deltalake reads version {dt.version()}, we read {version}")
    if theirs != paths:
        problems.append(
            f"deltalake's live files differ: only theirs {sorted(theirs - paths)[:_SHOWN]}, "
            f"only ours {sorted(paths - theirs)[:_SHOWN]}"
        )
    return problems
