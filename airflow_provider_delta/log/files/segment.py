"""The log segment: exactly which commit and checkpoint files make up one version of a table.

Computed before, and apart from, replay (as delta-kernel-rs does): first decide the files, then turn them
into state. Spec: "Delta Log Entries", "Checkpoints", "Last Checkpoint File".
"""

from __future__ import annotations

import logging
import posixpath
import re
from dataclasses import dataclass
from typing import NoReturn

from ..base.errors import CorruptLogError, TableNotFoundError, VersionNotFoundError
from .last_checkpoint import LAST_CHECKPOINT, LastCheckpoint, parse_last_checkpoint
from .storage import FileMeta, LogStore
from .version_checksum import checksum_version

log = logging.getLogger(__name__)

COMMIT_RE = re.compile(r"^(\d{20})\.json$")
CLASSIC_RE = re.compile(r"^(\d{20})\.checkpoint\.parquet$")
MULTI_RE = re.compile(r"^(\d{20})\.checkpoint\.(\d{10})\.(\d{10})\.parquet$")
V2_RE = re.compile(r"^(\d{20})\.checkpoint\.([0-9a-fA-F-]{36})\.(json|parquet)$")
COMPACTION_RE = re.compile(r"^(\d{20})\.(\d{20})\.compacted\.json$")
# How far back the first listing reaches when looking for a checkpoint before a time-travel target.
_BACKWARD_CHUNK = 1000
# Versions are signed 64-bit integers in every Delta implementation (Delta Spark's and the kernels' longs).
# A file named like a commit or checkpoint with a larger number cannot be part of any table's history: no
# writer can produce it, and no reader could address it. Such a file is ignored, with a warning, like any
# other stray file in ``_delta_log`` (a temporary file, a ``.crc``): refusing it would make an otherwise
# valid table unreadable because of one foreign file, and counting it would make the table's latest
# version a number no commit can follow. Versions within range are never ignored, however large: a commit
# named 9,000,000,000,000,000,000 makes the log end there, and reading its latest version is a gap error.
MAX_VERSION = 2**63 - 1
_MAX_VERSION_DIGITS = f"{MAX_VERSION:020d}"


@dataclass(frozen=True)
class Checkpoint:
    """A complete checkpoint: one file (classic or V2) or every part of a multi-part one."""

    version: int
    kind: str  # "classic" | "multi-part" | "v2"
    files: tuple[FileMeta, ...]

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(f.name for f in self.files)


@dataclass(frozen=True)
class LogSegment:
    """The files that reconstruct ``version``: an optional checkpoint, then contiguous commits after it."""

    version: int
    checkpoint: Checkpoint | None
    commits: tuple[FileMeta, ...]  # versions checkpoint.version+1 .. version, ascending
    # The newest version checksum (``NNN.crc``) after the checkpoint's version up to ``version``, if listed.
    checksum: FileMeta | None = None
    # Log compaction files (``x.y.compacted.json``) whose range lies within the commits, ascending by start.
    compactions: tuple[FileMeta, ...] = ()

    @property
    def checkpoint_version(self) -> int | None:
        return None if self.checkpoint is None else self.checkpoint.version

    def commit_cover(self, after: int | None = None) -> list[tuple[int, FileMeta]]:
        """The files that hold the commits after ``after`` (the checkpoint's version by default), ascending:
        each commit, except that a log compaction replaces the commits of its range ("Log Compaction
        Files"). Greedy, as delta-kernel-rs picks them: at one start the widest range, and a file whose
        start is already covered is skipped. Each is tagged with the first version it holds."""
        floor = self.checkpoint_version if after is None else after
        floor = -1 if floor is None else floor
        units = [(v, v, f) for f in self.commits if (v := commit_version(f.name)) is not None and v > floor]
        for f in self.compactions:
            lo, hi = compaction_range(f.name)
            if lo > floor and hi <= self.version:
                units.append((lo, hi, f))
        units.sort(key=lambda u: (u[0], u[1]))
        chosen: list[tuple[int, int, FileMeta]] = []
        for lo, hi, f in units:
            if chosen and chosen[-1][0] == lo:
                chosen.pop()  # the same start: the wider range (sorted last) wins
            elif chosen and lo <= chosen[-1][1]:
                continue  # already covered by a compaction before it
            chosen.append((lo, hi, f))
        return [(lo, f) for lo, _, f in chosen]


def commit_name(version: int) -> str:
    return f"{version:020d}.json"


def compaction_range(name: str) -> tuple[int, int]:
    """``(x, y)`` of a log compaction file's name ``x.y.compacted.json``."""
    m = COMPACTION_RE.match(name)
    if m is None:
        raise ValueError(f"{name} is not a log compaction file")
    return int(m.group(1)), int(m.group(2))


def commit_version(name: str) -> int | None:
    """The version of a commit file's name; ``None`` for other files and for versions beyond int64."""
    m = COMMIT_RE.match(name)
    return _in_range(int(m.group(1))) if m else None


def _in_range(version: int) -> int | None:
    return version if version <= MAX_VERSION else None


def _warn_out_of_range(store: LogStore, files: list[FileMeta]) -> None:
    """Name the files ignored for a version beyond int64 (20 digits sort as the numbers they spell)."""
    for f in files:
        digits = f.name[:20]
        if (
            digits > _MAX_VERSION_DIGITS
            and digits.isdigit()
            and (COMMIT_RE.match(f.name) or _is_checkpoint(f))
        ):
            log.warning(
                "ignoring %s: its version is beyond the largest a Delta log can hold", store.log_file(f.name)
            )


def _is_checkpoint(f: FileMeta) -> bool:
    return bool(CLASSIC_RE.match(f.name) or V2_RE.match(f.name) or MULTI_RE.match(f.name))


def group_checkpoints(files: list[FileMeta]) -> dict[int, list[Checkpoint]]:
    """Complete checkpoints by version; incomplete multi-part sets are dropped ("Checkpoints")."""
    parts: dict[tuple[int, int], dict[int, FileMeta]] = {}
    found: dict[int, list[Checkpoint]] = {}
    for f in files:
        m = CLASSIC_RE.match(f.name) or V2_RE.match(f.name) or MULTI_RE.match(f.name)
        if m is None or (version := _in_range(int(m.group(1)))) is None:
            continue
        if m.re is CLASSIC_RE:
            found.setdefault(version, []).append(Checkpoint(version, "classic", (f,)))
        elif m.re is V2_RE:
            found.setdefault(version, []).append(Checkpoint(version, "v2", (f,)))
        else:
            part, total = int(m.group(2)), int(m.group(3))
            parts.setdefault((version, total), {})[part] = f
    for (version, total), got in parts.items():
        if len(got) == total and set(got) == set(range(1, total + 1)):
            files_in_order = tuple(got[i] for i in range(1, total + 1))
            found.setdefault(version, []).append(Checkpoint(version, "multi-part", files_in_order))
        else:
            log.info(
                "ignoring incomplete multi-part checkpoint %d (%d of %d parts)", version, len(got), total
            )
    for cps in found.values():
        # Prefer a V2 checkpoint (it carries sidecars and checkpointMetadata), then classic, then multi-part.
        cps.sort(key=lambda c: ({"v2": 0, "classic": 1, "multi-part": 2}[c.kind], c.names))
    return found


# Checkpoints a reader found unreadable: their file names, or whole versions.
Exclusions = frozenset[int | tuple[str, ...]]


def _touches(exclude: Exclusions, version: int) -> bool:
    return version in exclude or any(isinstance(e, tuple) and _version_of(e) == version for e in exclude)


def _version_of(names: tuple[str, ...]) -> int:
    return int(names[0][:20])


def _newest_usable(
    checkpoints: dict[int, list[Checkpoint]], target: int, exclude: Exclusions, hint: LastCheckpoint | None
) -> Checkpoint | None:
    """The newest checkpoint at or before ``target`` not excluded. At one version, the V2 checkpoint that
    ``_last_checkpoint`` names comes first (a stale copy beside it must not win by name order)."""
    for v in sorted((v for v in checkpoints if v <= target and v not in exclude), reverse=True):
        candidates = [c for c in checkpoints[v] if c.names not in exclude]
        if not candidates:
            continue
        named = _named_v2(hint) if hint is not None and hint.version == v else None
        candidates.sort(key=lambda c: c.names != (named,))
        return candidates[0]
    return None


def _named_v2(hint: LastCheckpoint) -> str | None:
    """The file name of the V2 checkpoint ``_last_checkpoint`` points at, if it says ("Last Checkpoint File":
    ``v2Checkpoint.path``)."""
    v2 = hint.raw.get("v2Checkpoint")
    path = v2.get("path") if isinstance(v2, dict) else None
    return posixpath.basename(path) if isinstance(path, str) else None


def _earliest_readable(files: list[FileMeta]) -> int | None:
    """The first version a reader can reconstruct from these files: 0 while commit 0 is there, else the
    oldest checkpoint (log cleanup keeps the commits after it)."""
    if any(commit_version(f.name) == 0 for f in files):
        return 0
    return min(group_checkpoints(files), default=None)


def reconstructable_commits(files: list[FileMeta]) -> list[FileMeta]:
    """The commits of ``files`` (a listing, sorted by name) at versions a reader can reconstruct: commit 0
    and its successors, or a checkpoint's version or the one after it and their successors.

    Any other commit is an orphan: a writer that read the table before log cleanup removed the versions
    around it can still create its file (put-if-absent sees no file there) while every reader starts
    from a newer checkpoint ("Metadata Cleanup"). The writer finds out and commits again
    (``commits.visibility``); the orphan stays until the next cleanup, and history and time travel by
    timestamp must not count it as a version of the table.
    """
    checkpoints = group_checkpoints(files)
    out: list[FileMeta] = []
    previous = -2
    for f in files:
        v = commit_version(f.name)
        if v is None:
            continue
        if v == 0 or v in checkpoints or v - 1 in checkpoints or previous == v - 1:
            out.append(f)
            previous = v
    return out


def read_last_checkpoint(store: LogStore) -> LastCheckpoint | None:
    try:
        data = store.read_log_file(LAST_CHECKPOINT)
    except FileNotFoundError:
        return None
    except OSError as exc:
        log.warning("cannot read %s: %s; listing the log instead", LAST_CHECKPOINT, exc)
        return None
    return parse_last_checkpoint(data, where=store.log_file(LAST_CHECKPOINT))


class SegmentBuilder:
    """Lists the log (as little as possible) and picks the files for a version.

    ``exclude`` holds checkpoints that proved unreadable (their file names, or whole versions), so a
    rebuild tries another checkpoint of the same version, then an older one, then the JSON commits.
    """

    def __init__(self, store: LogStore) -> None:
        self.store = store

    def build(self, version: int | None = None, exclude: Exclusions = frozenset()) -> LogSegment:
        if version is not None and not 0 <= version <= MAX_VERSION:
            raise VersionNotFoundError(f"version {version} does not exist in {self.store.uri}")
        hint = read_last_checkpoint(self.store)
        start = 0
        if (
            hint is not None
            and not _touches(exclude, hint.version)
            and (version is None or hint.version <= version)
        ):
            start = hint.version
        elif version is not None:
            start = max(0, version - _BACKWARD_CHUNK)
        files = self.store.list_log(start)
        _warn_out_of_range(self.store, files)
        segment = self._select(files, version, exclude, start, hint)
        if segment is None and start > 0:
            # The hint was stale, or no checkpoint lies in the window: list the whole log, once. Stepping
            # back window by window would cost a listing per window, and a number of windows proportional
            # to the version asked for (or named by a stray file), not to the files there are.
            files = self.store.list_log(0)
            segment = self._select(files, version, exclude, 0, hint)
        if segment is None:
            self._raise_unreconstructable(files, version)
        return segment

    def _select(
        self,
        files: list[FileMeta],
        version: int | None,
        exclude: Exclusions,
        start: int,
        hint: LastCheckpoint | None = None,
    ) -> LogSegment | None:
        commits = {v: f for f in files if (v := commit_version(f.name)) is not None}
        checkpoints = group_checkpoints(files)
        latest = max(list(commits) + list(checkpoints), default=None)
        if latest is None:
            return None
        target = latest if version is None else version
        if target > latest:
            # The range a user can really read: this listing may start at the last checkpoint, so the
            # earliest version needs the whole log (once, on this error path only).
            everything = files if start == 0 else self.store.list_log(0)
            raise VersionNotFoundError(
                f"version {target} does not exist in {self.store.uri}",
                earliest=_earliest_readable(everything), latest=latest,
            )  # fmt: skip
        cp = _newest_usable(checkpoints, target, exclude, hint)
        first_commit = cp.version + 1 if cp else 0
        if cp is None and start > 0:
            return None  # no checkpoint in this window: the commits before `start` are needed too
        # Walk the listed versions, never the range first_commit..target: that range may be astronomically
        # long (a stray commit named 9,000,000,000,000,000,000), the listing is not.
        needed = sorted(v for v in commits if first_commit <= v <= target)
        missing = next((want for want, got in enumerate(needed, first_commit) if want != got), None)
        if missing is None and (needed[-1] if needed else first_commit - 1) != target:
            missing = len(needed) + first_commit
        if missing is not None:
            if cp is None and missing == 0:
                return None  # the log starts after 0 with no checkpoint: not reconstructable from here
            raise CorruptLogError(
                f"the log has a gap: commit {missing} is missing between "
                f"{first_commit - 1} and {target}; the table cannot be read at version {target}",
                path=self.store.log_file(commit_name(missing)),
            )
        # A checksum at the checkpoint's version or below adds nothing the checkpoint does not say, and
        # the checkpoint is the log: only a newer one spares the reader the checkpoint.
        floor = cp.version + 1 if cp else 0
        sums = [(v, f) for f in files if (v := checksum_version(f.name)) is not None and floor <= v <= target]
        newest = max(sums, key=lambda s: s[0])[1] if sums else None
        compactions = tuple(sorted(
            (f for f in files if (m := COMPACTION_RE.match(f.name)) and first_commit <= int(m.group(1))
             < int(m.group(2)) <= target),
            key=lambda f: compaction_range(f.name),
        ))  # fmt: skip
        return LogSegment(target, cp, tuple(commits[v] for v in needed), newest, compactions)

    def _raise_unreconstructable(self, files: list[FileMeta], version: int | None) -> NoReturn:
        commits = sorted(v for f in files if (v := commit_version(f.name)) is not None)
        if not commits and not group_checkpoints(files):
            raise TableNotFoundError(
                f"no Delta table at {self.store.uri}: {self.store.log_path} has no commits"
            )
        latest = commits[-1] if commits else None
        earliest = _earliest_readable(files) if commits else None
        raise VersionNotFoundError(
            f"version {version if version is not None else latest} of {self.store.uri} cannot be "
            "reconstructed: its early commits were cleaned up and no checkpoint covers them",
            earliest=earliest,
            latest=latest,
        )
