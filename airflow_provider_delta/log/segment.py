"""The log segment: exactly which commit and checkpoint files make up one version of a table.

Computed before, and apart from, replay (as delta-kernel-rs does): first decide the files, then turn them
into state. Spec: "Delta Log Entries", "Checkpoints", "Last Checkpoint File".
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass

from .errors import CorruptLogError, TableNotFoundError, VersionNotFoundError
from .last_checkpoint import LAST_CHECKPOINT, LastCheckpoint, parse_last_checkpoint
from .storage import FileMeta, LogStore

log = logging.getLogger(__name__)

COMMIT_RE = re.compile(r"^(\d{20})\.json$")
CLASSIC_RE = re.compile(r"^(\d{20})\.checkpoint\.parquet$")
MULTI_RE = re.compile(r"^(\d{20})\.checkpoint\.(\d{10})\.(\d{10})\.parquet$")
V2_RE = re.compile(r"^(\d{20})\.checkpoint\.([0-9a-fA-F-]{36})\.(json|parquet)$")
# How far back each listing reaches when looking for a checkpoint before a time-travel target.
_BACKWARD_CHUNK = 1000


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

    @property
    def checkpoint_version(self) -> int | None:
        return None if self.checkpoint is None else self.checkpoint.version


def commit_name(version: int) -> str:
    return f"{version:020d}.json"


def commit_version(name: str) -> int | None:
    m = COMMIT_RE.match(name)
    return int(m.group(1)) if m else None


def group_checkpoints(files: list[FileMeta]) -> dict[int, list[Checkpoint]]:
    """Complete checkpoints by version; incomplete multi-part sets are dropped ("Checkpoints")."""
    parts: dict[tuple[int, int], dict[int, FileMeta]] = {}
    found: dict[int, list[Checkpoint]] = {}
    for f in files:
        if m := CLASSIC_RE.match(f.name):
            found.setdefault(int(m.group(1)), []).append(Checkpoint(int(m.group(1)), "classic", (f,)))
        elif m := V2_RE.match(f.name):
            found.setdefault(int(m.group(1)), []).append(Checkpoint(int(m.group(1)), "v2", (f,)))
        elif m := MULTI_RE.match(f.name):
            version, part, total = int(m.group(1)), int(m.group(2)), int(m.group(3))
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

    ``exclude`` holds checkpoint versions that proved unreadable, so a rebuild skips them and falls back
    to an older checkpoint or to the JSON commits.
    """

    def __init__(self, store: LogStore) -> None:
        self.store = store

    def build(self, version: int | None = None, exclude: frozenset[int] = frozenset()) -> LogSegment:
        hint = read_last_checkpoint(self.store)
        start = 0
        if hint is not None and hint.version not in exclude and (version is None or hint.version <= version):
            start = hint.version
        elif version is not None:
            start = max(0, version - _BACKWARD_CHUNK)
        while True:
            files = self.store.list_log(start)
            segment = self._select(files, version, exclude, start)
            if segment is not None:
                return segment
            if start == 0:
                self._raise_unreconstructable(files, version)
            # The hint was stale or pointed at a checkpoint that is missing: list further back.
            start = max(0, start - _BACKWARD_CHUNK) if hint is None or start != hint.version else 0

    def _select(
        self, files: list[FileMeta], version: int | None, exclude: frozenset[int], start: int
    ) -> LogSegment | None:
        commits = {v: f for f in files if (v := commit_version(f.name)) is not None}
        checkpoints = group_checkpoints(files)
        latest = max(list(commits) + list(checkpoints), default=None)
        if latest is None:
            return None
        target = latest if version is None else version
        if target > latest:
            earliest = min(list(commits) + list(checkpoints))
            raise VersionNotFoundError(
                f"version {target} does not exist in {self.store.uri}", earliest=earliest, latest=latest
            )
        usable = [v for v in checkpoints if v <= target and v not in exclude]
        cp = checkpoints[max(usable)][0] if usable else None
        first_commit = cp.version + 1 if cp else 0
        if cp is None and start > 0:
            return None  # no checkpoint in this window: the commits before `start` are needed too
        needed = range(first_commit, target + 1)
        missing = [v for v in needed if v not in commits]
        if missing:
            if cp is None and missing[0] == 0:
                return None  # the log starts after 0 with no checkpoint: not reconstructable from here
            raise CorruptLogError(
                f"the log has a gap: commit {missing[0]} is missing between "
                f"{first_commit - 1} and {target}; the table cannot be read at version {target}",
                path=self.store.log_file(commit_name(missing[0])),
            )
        return LogSegment(target, cp, tuple(commits[v] for v in needed))

    def _raise_unreconstructable(self, files: list[FileMeta], version: int | None) -> None:
        commits = sorted(v for f in files if (v := commit_version(f.name)) is not None)
        if not commits and not group_checkpoints(files):
            raise TableNotFoundError(
                f"no Delta table at {self.store.uri}: {self.store.log_path} has no commits"
            )
        earliest, latest = (commits[0], commits[-1]) if commits else (None, None)
        raise VersionNotFoundError(
            f"version {version if version is not None else latest} of {self.store.uri} cannot be "
            "reconstructed: its early commits were cleaned up and no checkpoint covers them",
            earliest=earliest,
            latest=latest,
        )
