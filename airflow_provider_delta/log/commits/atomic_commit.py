"""Writing one commit file atomically, and knowing how it went.

The commit protocol of the Delta paper (002): ``N.json`` is written only if absent (``put_if_absent``),
so of two writers of version N exactly one wins. Three things make the outcome less plain than the put's
answer:

- a put can fail with its outcome unknown (a timeout, a reset connection): the file may be ours. Every
  commit carries a ``txnId``, so the file there is read back and recognised;
- log cleanup may have removed the commit this one builds on: it would land on a log readers no longer
  replay from where it assumes;
- a commit that landed must also be visible to readers (``visibility.check_visible``), which on stores
  with listing lag or a checkpoint racing ahead is checked, not assumed.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from ..actions.commit_info import txn_id_of
from ..base.errors import CommitFailedError, CommitOutcomeUnknownError
from ..files.segment import commit_name
from ..files.storage import FileMeta, LogStore, put_if_absent
from ..snapshot.replay import TableState
from .visibility import base_present, check_visible

log = logging.getLogger(__name__)
_UNKNOWN_OUTCOME = (TimeoutError, ConnectionError, OSError)
_PUT_TRIES = 5


class FileSystemCommitter:
    """The committer of a filesystem table (``committer``): puts a transaction's commit files, attempt
    after attempt, with put-if-absent, and remembers what they showed.

    :param effects_in: whether a table state holds the transaction's effects (an attempt whose outcome was
        unknown is recognised by them when its file is gone from the log).
    """

    def __init__(
        self, store: LogStore, uri: str, effects_in: Callable[[TableState], bool], *, allow_unsafe: bool
    ) -> None:
        self.store = store
        self.uri = uri
        self.effects_in = effects_in
        self.allow_unsafe = allow_unsafe
        self.maybe_landed = False  # an attempt's outcome was unknown: it may be in the table
        self.own_file: FileMeta | None = None  # the commit file that landed, as listed

    def commit(self, version: int, data: bytes, txn_id: str, *, base_seen: bool = False) -> tuple[str, str]:
        """Write ``version`` and say how it went: ``"ours"`` (landed and visible to readers, also when only
        its acknowledgement was lost), ``"taken"`` (another commit holds it) or ``"stale"`` (log cleanup
        removed what this commit builds on, or readers would never see it; the reason comes second).

        ``base_seen`` (the transaction listed ``version - 1`` while reading the winners of its last attempt)
        skips the first look for that base: under contention most attempts are retries, and on an object
        store the look is a request each. Skipping it is safe because ``check_visible`` after the put is
        what guards against log cleanup; the look only spares writing a commit that would be invisible.
        """
        store = self.store
        unsure = False  # a put of this version had an unknown outcome: the file there may be ours
        for attempt in range(_PUT_TRIES):
            if not (base_seen and attempt == 0) and not base_present(store, version):
                return "stale", f"version {version - 1}, which this commit builds on, is no longer in the log"
            existed = False
            try:
                put_if_absent(store, commit_name(version), data, allow_unsafe=self.allow_unsafe)
            except FileExistsError:
                if not unsure:  # another writer's: the winners are read next, this one among them
                    return "taken", ""
                existed = True
            except _UNKNOWN_OUTCOME as exc:
                unsure = self.maybe_landed = True
                log.warning("outcome of writing commit %d is unknown (%s); checking the log", version, exc)
            else:
                return self._verify_visible(version)
            try:
                existing = store.read_log_file(commit_name(version))
            except FileNotFoundError:
                if existed:  # it was there a moment ago: log cleanup is deleting this part of the log
                    return "stale", f"version {version} was taken and then removed by log cleanup"
                continue  # the put did not happen: try it again
            if txn_id_of(existing) == txn_id:
                return self._verify_visible(version)
            return "taken", ""
        raise CommitFailedError(f"could not write commit {version} of {self.uri}: storage kept failing")

    def _verify_visible(self, version: int) -> tuple[str, str]:
        seen = check_visible(self.store, version, self.effects_in)
        if seen.visible is None:
            raise CommitOutcomeUnknownError(
                f"{commit_name(version)} was written to {self.uri}, but whether readers see it cannot "
                f"be established: {seen.reason}"
            )
        if not seen.visible:
            log.warning("commit %d of %s is not visible to readers: %s", version, self.uri, seen.reason)
            return "stale", seen.reason
        self.own_file = seen.commit
        return "ours", ""
