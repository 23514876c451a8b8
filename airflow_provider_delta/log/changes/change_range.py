"""The versions a change read covers: its bounds, given as versions or timestamps, resolved to versions.

A change read ("the log as a message queue") is asked for versions ``start``..``end``. Each bound is a
version (an int) or a timestamp: an aware ``datetime`` or ISO-8601 text in the positional bound, or any
time-travel timestamp (ms since the epoch as int or float, ``datetime``, ISO-8601 text) in the
``starting_timestamp`` / ``ending_timestamp`` keywords, named as deltalake's ``load_cdf`` and Delta
Spark's ``startingTimestamp`` / ``endingTimestamp`` options name them (an int in the positional bound is
always a version). Timestamps resolve as Delta Spark's ``table_changes`` resolves them, on the commit
timeline time travel uses (``history``): the start to the first commit at or after it, the end to the last
commit at or before it; both between the same two commits is an empty read, not an error.
"""

from __future__ import annotations

from datetime import datetime
from typing import NamedTuple

from ..base.errors import ChangeRangeError, VersionNotFoundError
from ..features.configuration import TableConfiguration
from ..files.segment import commit_version
from ..files.storage import LogStore
from ..snapshot.history import CommitTimeline, list_commits, timestamp_ms
from ..snapshot.version_metadata import read_version_metadata

Bound = int | str | datetime  # a version (int) or a timestamp (aware datetime or ISO-8601 text)
Timestamp = int | float | str | datetime  # ms since the epoch, an aware datetime or ISO-8601 text


class ResolvedRange(NamedTuple):
    """The versions of a range: ``last`` is ``None`` for "the latest"; ``empty`` when both bounds were
    timestamps between the same two commits (``last == first - 1``: Delta Spark reads nothing)."""

    first: int
    last: int | None
    empty: bool = False


def resolve_range(
    store: LogStore,
    start: Bound | None,
    end: Bound | None,
    starting_timestamp: Timestamp | None = None,
    ending_timestamp: Timestamp | None = None,
) -> ResolvedRange:
    """Versions for the bounds: versions as they are; timestamps by the commit timeline (see the module)."""
    first_version, first_ms = _bound(start, starting_timestamp, "start", "starting_timestamp")
    if first_version is None and first_ms is None:
        raise TypeError("a change read needs a start: a version, or a timestamp (starting_timestamp=)")
    last_version, last_ms = _bound(end, ending_timestamp, "end", "ending_timestamp")
    if first_version is not None and first_version < 0:
        raise VersionNotFoundError(f"version {first_version} does not exist in {store.uri}")
    if first_ms is None and last_ms is None:
        assert first_version is not None
        return ResolvedRange(first_version, last_version)
    if first_ms is not None and last_ms is not None and first_ms > last_ms:
        raise ChangeRangeError(f"the changes of {store.uri} from timestamp {first_ms} to {last_ms} (ms since "
                               "the epoch): the end is before the start")  # fmt: skip
    latest = read_version_metadata(store)
    config = TableConfiguration(latest.protocol, latest.metadata)
    timeline = CommitTimeline(store, list_commits(store), config.in_commit_timestamps_from)
    first = first_version if first_ms is None else _first_at_or_after(store, timeline, first_ms)
    last = last_version if last_ms is None else _last_at_or_before(store, timeline, last_ms)
    empty = first_ms is not None and last_ms is not None and last == first - 1
    return ResolvedRange(first, last, empty)


def _bound(
    bound: Bound | None, timestamp: Timestamp | None, name: str, keyword: str
) -> tuple[int | None, int | None]:
    """One side of a range as (version, timestamp in ms): at most one of the two ways to give it."""
    if bound is not None and timestamp is not None:
        raise TypeError(f"pass the {name} as a version or timestamp, or as {keyword}=, not both")
    if timestamp is not None:
        if isinstance(timestamp, bool) or not isinstance(timestamp, int | float | str | datetime):
            raise TypeError(f"{keyword} is a timestamp (ms since the epoch, aware datetime, ISO-8601 text), "
                            f"not {type(timestamp).__name__} {timestamp!r}")  # fmt: skip
        return None, timestamp_ms(timestamp)
    if bound is None:
        return None, None
    if isinstance(bound, bool) or not isinstance(bound, int | str | datetime):
        raise TypeError(f"a change range's bounds are versions (int) or timestamps (aware datetime, "
                        f"ISO-8601 text; ms since the epoch as {keyword}=), not {type(bound).__name__} "
                        f"{bound!r}")  # fmt: skip
    return (bound, None) if isinstance(bound, int) else (None, timestamp_ms(bound))


def _first_at_or_after(store: LogStore, timeline: CommitTimeline, ts: int) -> int:
    """As Delta Spark's ``startingTimestamp``: the first commit at or after ``ts`` (the earliest commit
    for a time before it); refused after the latest commit."""
    if timeline.timestamp_at(0) >= ts:
        return timeline.versions[0]
    at = timeline.version_at(ts)
    i = timeline.versions.index(at)
    if timeline.timestamp_at(i) >= ts:
        return at
    if i + 1 < len(timeline.versions):
        return timeline.versions[i + 1]
    raise ChangeRangeError(f"the starting timestamp {ts} is after the latest commit of {store.uri} (version "
                           f"{at} at {timeline.timestamp_at(i)})")  # fmt: skip


def _last_at_or_before(store: LogStore, timeline: CommitTimeline, ts: int) -> int:
    """As Delta Spark's ``endingTimestamp``: the last commit at or before ``ts``; refused before the
    earliest commit and after the latest (time travel's rule)."""
    last = len(timeline.versions) - 1
    if timeline.timestamp_at(last) < ts:
        raise ChangeRangeError(
            f"the ending timestamp {ts} is after the latest commit of {store.uri} (version "
            f"{timeline.versions[last]} at {timeline.timestamp_at(last)})"
        )
    return timeline.version_at(ts)


def latest_version(store: LogStore) -> int:
    """The version of the newest commit file (a listing)."""
    commits = list_commits(store)
    return max(v for f in commits if (v := commit_version(f.name)) is not None)
