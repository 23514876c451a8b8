"""Row tracking ("Row Tracking"): fresh row ids and row commit versions for the files a commit adds.

Where the table's protocol supports ``rowTracking`` and ``delta.rowTrackingSuspended`` is not true, every
``add`` must carry a ``baseRowId`` (its rows' fresh ids are ``baseRowId`` + row index) above the table's
high-water mark, kept in the ``delta.rowTracking`` domain, and a ``defaultRowCommitVersion`` (the version
of the commit that added it). Files a commit re-adds (a new deletion vector, new statistics, a re-add with
``dataChange=false``) keep the ids and version of the ``add`` they replace.

The ids depend on the high-water mark at the moment of the attempt, so a transaction computes them for
every attempt (:meth:`RowIdAssignment.actions`) and raises its mark past every winner of a race it lost
(:meth:`RowIdAssignment.observe`): a retry never hands out ids a concurrent commit took. Delta Spark does
the same (``RowId.assignFreshRowIds`` on the first attempt, ``ConflictChecker.reassignOverlappingRowIds``
and ``reassignRowCommitVersions`` on each retry).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.compute as pc

from ..actions.actions import AddFile, DomainMetadata, Metadata, Protocol
from ..base.errors import InvalidCommitError, UnsupportedFeatureError, shown
from .properties import bool_property
from .protocol import writer_features

DOMAIN = "delta.rowTracking"
FEATURE = "rowTracking"
ENABLED = "delta.enableRowTracking"
SUSPENDED = "delta.rowTrackingSuspended"
MATERIALIZED_ROW_ID = "delta.rowTracking.materializedRowIdColumnName"
MATERIALIZED_ROW_COMMIT_VERSION = "delta.rowTracking.materializedRowCommitVersionColumnName"
MISSING_HIGH_WATER_MARK = -1  # no id assigned yet: the first file gets baseRowId 0


def is_supported(protocol: Protocol) -> bool:
    """Writers must assign ids whenever the protocol supports the feature, enabled or not."""
    return FEATURE in writer_features(protocol)


def is_enabled(protocol: Protocol, metadata: Metadata) -> bool:
    """Whether readers may rely on row ids: ``delta.enableRowTracking`` on a table that supports them."""
    return is_supported(protocol) and bool_property(metadata.configuration, ENABLED)


def materialized_columns(protocol: Protocol, metadata: Metadata, where: str, operation: str
                         ) -> tuple[str, str] | None:  # fmt: skip
    """The file columns that rows written again keep their row ids and row commit versions in ("Row
    Tracking": a materialized value wins over ``baseRowId`` + row index), or None when the table does not
    enable row tracking (then rows may get fresh ids, as in Delta Spark). ``operation`` (OPTIMIZE, UPDATE,
    ...) is refused by name when the configuration lacks the column names."""
    if not is_enabled(protocol, metadata):
        return None
    config = metadata.configuration
    row_id, version = config.get(MATERIALIZED_ROW_ID), config.get(MATERIALIZED_ROW_COMMIT_VERSION)
    if not row_id or not version:
        missing = MATERIALIZED_ROW_ID if not row_id else MATERIALIZED_ROW_COMMIT_VERSION
        raise UnsupportedFeatureError(
            f"{where} tracks row ids but its configuration has no {missing}: {operation} cannot keep the "
            "ids of the rows it writes again without that column, so it is refused", features=(FEATURE,),
        )  # fmt: skip
    return row_id, version


def is_suspended(metadata: Metadata, where: str = "this table") -> bool:
    """``delta.rowTrackingSuspended``; refused together with ``delta.enableRowTracking``, as the spec
    forbids and Delta Spark refuses (a writer that missed the suspension would break the ids)."""
    suspended = bool_property(metadata.configuration, SUSPENDED)
    if suspended and bool_property(metadata.configuration, ENABLED):
        raise InvalidCommitError(
            f"{where} sets both {ENABLED}=true and {SUSPENDED}=true: row tracking cannot be enabled and "
            "suspended at once; unset one of them"
        )
    return suspended


def high_water_mark(domains: Mapping[str, DomainMetadata]) -> int:
    """The highest row id assigned so far, from the ``delta.rowTracking`` domain of a snapshot."""
    domain = domains.get(DOMAIN)
    if domain is None or domain.removed:
        return MISSING_HIGH_WATER_MARK
    return parse_high_water_mark(domain.configuration)


def parse_high_water_mark(configuration: str) -> int:
    """``rowIdHighWaterMark`` of the domain's configuration (Delta Spark also writes ``domainName``)."""
    try:
        value = json.loads(configuration)["rowIdHighWaterMark"]
    except (ValueError, KeyError, TypeError):
        raise InvalidCommitError(
            f"the {DOMAIN} domain holds {shown(configuration)}, not a rowIdHighWaterMark"
        ) from None
    if not isinstance(value, int) or isinstance(value, bool) or value < MISSING_HIGH_WATER_MARK:
        raise InvalidCommitError(f"the {DOMAIN} domain's rowIdHighWaterMark is {shown(value)}")
    return value


def domain_action(mark: int) -> DomainMetadata:
    """The domain that records ``mark``, shaped as Delta Spark writes it."""
    return DomainMetadata(DOMAIN, json.dumps({"rowIdHighWaterMark": mark, "domainName": DOMAIN},
                                             separators=(",", ":")))  # fmt: skip


def num_records(add: AddFile, where: str) -> int:
    """The physical row count of a file, from its statistics: fresh ids need it ("Row IDs")."""
    value = add.num_records
    if value is None:
        raise InvalidCommitError(
            f"{where} tracks row ids, which needs each added file's row count: {add.path} has no "
            "numRecords in its stats (build the add with add_file_from_parquet, which reads the footer)"
        )
    return value


@dataclass
class RowIdAssignment:
    """The row tracking of one transaction's adds, recomputed for every attempt.

    ``fresh`` are the indexes of adds that get new ids; ``kept`` maps the others (files re-added) to the
    ``(baseRowId, defaultRowCommitVersion)`` they keep. ``mark`` is the table's high-water mark as last
    seen: the read snapshot's, then raised past each winning commit.
    """

    mark: int
    fresh: list[int] = field(default_factory=list)
    sizes: list[int] = field(default_factory=list)
    kept: dict[int, tuple[int | None, int | None]] = field(default_factory=dict)
    suspended: bool = False

    def observe(self, configuration: str | None) -> None:
        """A winning commit's ``delta.rowTracking`` configuration (if it had one): ids up to its mark are
        taken, so this transaction's next attempt starts above it."""
        if configuration is not None:
            self.mark = max(self.mark, parse_high_water_mark(configuration))

    def actions(self, adds: Sequence[AddFile], version: int) -> tuple[list[AddFile], DomainMetadata | None]:
        """The adds as committed at ``version``, and the domain that advances the mark (None if no id is
        new). Pure: calling it again for a retry gives ids above whatever ``observe`` saw meanwhile."""
        if self.suspended:  # "writers should not assign the baseRowId or the defaultRowCommitVersion"
            return [dataclasses.replace(a, base_row_id=None, default_row_commit_version=None)
                    for a in adds], None  # fmt: skip
        out = list(adds)
        for i, (base, commit_version) in self.kept.items():
            # A file the table gave ids before it recorded versions gets this commit's, as in Delta Spark.
            out[i] = dataclasses.replace(out[i], base_row_id=base, default_row_commit_version=version
                                         if commit_version is None else commit_version)  # fmt: skip
        next_id = self.mark + 1
        for i, size in zip(self.fresh, self.sizes, strict=True):
            out[i] = dataclasses.replace(out[i], base_row_id=next_id, default_row_commit_version=version)
            next_id += size
        return out, (domain_action(next_id - 1) if next_id - 1 != self.mark else None)


def plan_row_ids(
    protocol: Protocol,
    metadata: Metadata,
    domains: Mapping[str, DomainMetadata],
    live_files: pa.Table | None,
    adds: Sequence[AddFile],
    where: str,
) -> RowIdAssignment | None:
    """How a commit's adds get row ids on a table at ``protocol``/``metadata``; None when it does not
    track them. Raises :class:`InvalidCommitError` before anything is written when a fresh file has no
    row count.

    A file is re-added, and keeps its ids, when its ``add`` already carries ids the table assigned
    (``baseRowId`` at or below the mark, as on a row of ``Snapshot.files``) or its path is live in
    ``live_files`` ("Writers must set the baseRowId field in recommitted ... add actions ... to the
    baseRowId value of the last committed add action with the same path"). Every other file is fresh.
    """
    if not is_supported(protocol):
        return None
    mark = high_water_mark(domains)
    if is_suspended(metadata, where):
        return RowIdAssignment(mark, suspended=True)
    plan = RowIdAssignment(mark)
    previous = _live_row_ids(live_files, [a.path for a in adds])
    for i, add in enumerate(adds):
        if add.base_row_id is not None and 0 <= add.base_row_id <= mark:
            plan.kept[i] = (add.base_row_id, add.default_row_commit_version)
        elif add.path in previous and previous[add.path][0] is not None:
            plan.kept[i] = previous[add.path]
        else:
            plan.fresh.append(i)
            plan.sizes.append(num_records(add, where))
    return plan


def _live_row_ids(files: pa.Table | None, paths: list[str]) -> dict[str, tuple[int | None, int | None]]:
    """Row ids of the live files among ``paths``: an Arrow lookup, never a loop over the table."""
    if files is None or not paths or files.num_rows == 0 or "baseRowId" not in files.column_names:
        return {}
    hits = files.filter(pc.is_in(files.column("path"), value_set=pa.array(paths, pa.string())))
    rows = hits.select(["path", "baseRowId", "defaultRowCommitVersion"]).to_pylist()
    return {r["path"]: (r["baseRowId"], r["defaultRowCommitVersion"]) for r in rows}
