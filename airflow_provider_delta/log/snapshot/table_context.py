"""A table as operations see it: its storage, and its latest snapshot kept up to date cheaply.

Operations (commits, checkpoints, VACUUM, log cleanup, tailing) take a ``TableContext`` rather than the
``DeltaTable`` facade, which builds on this class and is imported by none of them: as in delta-kernel-rs,
an operation is handed what it needs, a store and snapshots, instead of reaching up for the table object.
"""

from __future__ import annotations

from ..features.configuration import TableConfiguration
from ..files.storage import LogStore
from .snapshot import Snapshot, load_snapshot, update_snapshot


class TableContext:
    """A table's ``LogStore`` and the newest snapshot read through it.

    Every ``snapshot()`` reads the log afresh (cheaply: a handle that has read the table before reads only
    the commits since, Delta's "update"), so a long-lived context never serves a stale version.
    """

    def __init__(self, store: LogStore) -> None:
        self.store = store
        self._latest: Snapshot | None = None

    @property
    def uri(self) -> str:
        return self.store.uri

    def snapshot(self, version: int | None = None) -> Snapshot:
        """The latest snapshot, or the one at ``version``."""
        cached = self._latest
        if version is None:
            snap = update_snapshot(cached) if cached is not None else load_snapshot(self.store)
            self._latest = snap
            return snap
        if cached is not None and cached.version == version:
            return cached
        if cached is not None and cached.version < version:
            # Usually the version just committed (an automatic checkpoint): catch up incrementally.
            latest = update_snapshot(cached)
            self._latest = latest
            if latest.version == version:
                return latest
        return load_snapshot(self.store, version)

    def after_commit(self, version: int, config: TableConfiguration | None) -> None:
        """Called by a transaction once its commit landed as ``version`` (after its automatic checkpoint),
        with the table configuration it committed (``None``: unknown):
        where a facade runs its post-commit hooks (``DeltaTable`` writes UniForm's Iceberg metadata), so
        that a transaction never reaches up for them. Must not raise: the commit stands whatever happens."""

    def advance(self, snap: Snapshot) -> None:
        """Keep ``snap``, newer than the snapshot held and read the same way, as the latest: a transaction
        hands over the snapshot after its commit (Delta Spark's update after a commit), built from the
        commits it read and wrote. The next ``snapshot()`` still lists the log from there."""
        held = self._latest
        if held is None or snap.store is not self.store or snap.version <= held.version:
            return
        if snap.fields == held.fields and snap.keep_expired_tombstones == held.keep_expired_tombstones:
            self._latest = snap
