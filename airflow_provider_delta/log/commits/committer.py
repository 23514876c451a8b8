"""The committer seam: where a transaction's commit for a version goes, chosen from the table configuration.

A transaction builds a commit (its bytes, its ``txnId``) and decides conflicts; a *committer* makes it the
table's version N. On a filesystem table that is a put-if-absent of ``N.json`` (``atomic_commit``: the
:class:`FileSystemCommitter`). A catalog-managed table ("Catalog-managed tables" in the newest protocol)
commits by asking its catalog to ratify the commit instead, and readers ask the catalog for ratified commits
not yet published to ``_delta_log``; coordinated commits (Delta Spark's preview) work the same way through a
commit coordinator. This client has no catalog committer, so such tables are refused here, by name, before
anything is written. A catalog committer implements :class:`Committer` (see docs/architecture.md) and is
chosen by :func:`committer_for` from the table's configuration, as delta-kernel-rs chooses its committer.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal, Protocol

from ..base.errors import UnsupportedFeatureError
from ..features.configuration import TableConfiguration
from ..features.registry import FEATURES
from ..files.storage import FileMeta, LogStore
from ..snapshot.replay import TableState
from .atomic_commit import FileSystemCommitter

Outcome = Literal["ours", "taken", "stale"]


class Committer(Protocol):
    """Makes one attempt's commit the table's ``version``, and says how it went.

    ``commit`` returns ``("ours", "")`` when the version holds this commit (also when only its
    acknowledgement was lost: ``txn_id`` recognises it), ``("taken", "")`` when another commit holds it (the
    transaction reads the winners and retries), or ``("stale", reason)`` when what the commit builds on is
    gone. ``maybe_landed`` says an attempt's outcome was unknown; ``own_file`` is the commit file as listed
    once it landed (``None`` where commits are not files in ``_delta_log`` yet, e.g. unpublished catalog
    commits).
    """

    maybe_landed: bool
    own_file: FileMeta | None

    def commit(
        self, version: int, data: bytes, txn_id: str, *, base_seen: bool = False
    ) -> tuple[Outcome, str]:
        """``base_seen``: the transaction has just listed ``version - 1`` in the log (it read the winners
        of the attempt before), so the committer need not look for it again."""
        ...


def catalog_features(config: TableConfiguration) -> list[str]:
    """The features of the table whose commits must go through a catalog or a commit coordinator."""
    return sorted(f.name for f in FEATURES.values() if f.commits_through_catalog and config.supports(f.name))


def committer_for(
    config: TableConfiguration,
    store: LogStore,
    uri: str,
    effects_in: Callable[[TableState], bool],
    *,
    allow_unsafe: bool,
) -> Committer:
    """The committer of a table with ``config``: put-if-absent on its storage, or, for a catalog-managed
    table, a refusal naming the feature (this client has no catalog committer)."""
    managed = catalog_features(config)
    if managed:
        raise UnsupportedFeatureError(
            f"table {uri} is catalog-managed ({', '.join(managed)}): its commits must be ratified by its "
            "catalog, and this client has no committer for one; commit through an engine with the "
            "catalog's client",
            features=tuple(managed),
        )
    return FileSystemCommitter(store, uri, effects_in, allow_unsafe=allow_unsafe)
