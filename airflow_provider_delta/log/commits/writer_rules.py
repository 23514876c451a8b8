"""Rules every commit must follow before it is written ("Requirements for Writers").

Checked once, before the first attempt: a commit that breaks one is refused with
:class:`InvalidCommitError` (or :class:`UnsupportedFeatureError`) and nothing is written.
"""

from __future__ import annotations

import json
import typing
from collections.abc import Mapping
from typing import Any

import pyarrow.compute as pc

from ..actions.actions import AddFile, DomainMetadata, Metadata, Protocol, RemoveFile, SetTransaction
from ..base.arguments import bool_arg, json_value_arg, str_arg
from ..base.arrow_utils import from_strings
from ..base.errors import InvalidCommitError
from ..features import iceberg_compat
from ..features.clustering import check_commit as check_clustering
from ..features.configuration import TableConfiguration
from ..features.identity import check_generated_values
from ..features.protocol import check_write_supported
from ..features.row_tracking import DOMAIN as ROW_TRACKING_DOMAIN
from ..schema.schema import physical_partition_names
from ..snapshot.replay import check_metadata
from ..snapshot.snapshot import Snapshot
from ..snapshot.table_context import TableContext
from .row_deletion import check_deletion_vector_actions


class PendingCommit(typing.Protocol):
    """What the rules read of a commit about to be written; a ``Transaction`` is one."""

    table: TableContext
    snapshot: Snapshot | None
    metadata: Metadata | None
    protocol: Protocol | None
    adds: list[AddFile]
    removes: list[RemoveFile]
    app_transaction: SetTransaction | None
    domains: list[DomainMetadata]
    constraints_checked: bool

    @property
    def configuration(self) -> TableConfiguration | None: ...


def check_table_writable(snapshot: Snapshot, where: str) -> None:
    """A transaction on a table that needs a writer feature this client does not implement is refused
    when it starts, naming the feature, rather than when it commits."""
    snapshot.table_configuration.check_write(where)


def checked_metadata(metadata: Any, where: str) -> Metadata:
    """A metaData action a transaction is given: refused at the call when readers could not load it."""
    if not isinstance(metadata, Metadata):
        raise TypeError(f"metadata must be a Metadata action, not {type(metadata).__name__}")
    try:
        check_metadata(metadata)
    except ValueError as exc:
        problem = f"{where}: the new metaData would make the table unreadable: {exc}"
        raise InvalidCommitError(problem) from None
    return metadata


def checked_protocol(protocol: Any, where: str) -> Protocol:
    """A protocol action a transaction is given: refused at the call when this client cannot write it."""
    if not isinstance(protocol, Protocol):
        raise TypeError(f"protocol must be a Protocol action, not {type(protocol).__name__}")
    check_write_supported(protocol, where=where)
    return protocol


def domain_metadata(domain: Any, configuration: Any, removed: Any) -> DomainMetadata:
    """A ``domainMetadata`` action from a caller: a configuration mapping is stored as its JSON."""
    domain = str_arg(domain, "domain", empty=False)
    if isinstance(configuration, Mapping):
        configuration = json_value_arg(dict(configuration), "configuration")
        configuration = json.dumps(configuration, separators=(",", ":"))
    return DomainMetadata(domain, str_arg(configuration, "configuration"), bool_arg(removed, "removed"))


def validate_commit(txn: PendingCommit) -> None:
    snap, config = txn.snapshot, txn.configuration
    where = f"table {txn.table.uri}"
    if config is None:
        raise InvalidCommitError(f"the first commit of {where} must set both protocol and metaData")
    if txn.metadata is not None:
        try:  # what readers check when they load the table: never commit metaData they would refuse
            check_metadata(txn.metadata)
        except ValueError as exc:
            raise InvalidCommitError(
                f"{where}: the new metaData would make the table unreadable: {exc}"
            ) from None
    config.check_write(where)
    if snap is not None and txn.protocol is not None:
        old = snap.protocol
        if (txn.protocol.min_reader_version, txn.protocol.min_writer_version) < (
            old.min_reader_version,
            old.min_writer_version,
        ):
            raise InvalidCommitError(
                f"{where}: a commit may not downgrade the protocol from {old} to {txn.protocol}"
            )
    _check_unique_paths(txn, where)
    check_deletion_vector_actions(txn.adds, config, where)
    _check_append_only(txn, config, where)
    _check_partitions(txn, config, where)
    _check_constraints(txn, config, where)
    _check_features(txn, config, where)
    _check_iceberg_compat(txn, config, where)


def _check_iceberg_compat(txn: PendingCommit, config: TableConfiguration, where: str) -> None:
    """The writer requirements of "Iceberg Compatibility V1/V2": the table the commit leaves (against the
    version it read), numRecords in every add, and, when the commit turns IcebergCompat on, no live file
    that would need rewriting."""
    previous = txn.snapshot.table_configuration if txn.snapshot is not None else None
    if previous is not None and config.iceberg_compat_version not in (None, previous.iceberg_compat_version):
        # Turned on by this commit: first whether the live files would need rewriting, the likeliest reason
        # (what the metadata lacks for them, nested ids above all, follows from that).
        files = txn.snapshot.files
        if txn.removes and files.num_rows:  # files this commit removes need no rewriting
            gone = from_strings(sorted({r.path for r in txn.removes}))
            files = files.filter(pc.invert(pc.is_in(files.column("path"), value_set=gone)))
        iceberg_compat.check_enabling(previous, config, files, where)
    iceberg_compat.check_table(config, where, previous=previous)
    iceberg_compat.check_adds(config, txn.adds, where)


def _check_features(txn: PendingCommit, config: TableConfiguration, where: str) -> None:
    """Rules of the features that shape a commit: row ids, identity values, clustering."""
    if any(d.domain == ROW_TRACKING_DOMAIN for d in txn.domains):
        # "Writers must not allow users to modify ... system-controlled domains": the transaction sets
        # this one itself, from the ids it assigns.
        raise InvalidCommitError(f"{where}: the {ROW_TRACKING_DOMAIN} domain is set by the commit itself, "
                                 "from the row ids it assigns; do not set it")  # fmt: skip
    if txn.snapshot is not None and not txn.removes and config.identity_columns:
        # Only appends: a commit that rewrites files (removes some) copies values generated before.
        check_generated_values(txn.adds, txn.snapshot.metadata, config.metadata, where)
    domains = dict(txn.snapshot.domain_metadata if txn.snapshot else {})
    domains.update({d.domain: d for d in txn.domains})
    check_clustering(config.protocol, config.metadata, domains, txn.adds, where)


def _check_unique_paths(txn: PendingCommit, where: str) -> None:
    # "A single log entry MUST NOT include more than one action that reconciles with each other."
    seen: set[tuple[str, str | None]] = set()
    for action in (*txn.adds, *txn.removes):
        dv = action.deletion_vector
        key = (
            action.path,
            None if not dv else f"{dv.get('storageType')}{dv.get('pathOrInlineDv')}@{dv.get('offset')}",
        )
        # A vector update (remove with the old vector, add with the new) is two keys; the same key twice
        # would leave the file to whichever action replay reads last.
        if key in seen:
            raise InvalidCommitError(
                f"{where}: {action.path} appears in more than one file action of this commit"
            )
        seen.add(key)
    apps = [txn.app_transaction] if txn.app_transaction else []
    if len({a.app_id for a in apps}) != len(apps):
        raise InvalidCommitError(f"{where}: an application id is set twice in one commit")
    domains = [d.domain for d in txn.domains]
    if len(set(domains)) != len(domains):
        raise InvalidCommitError(f"{where}: a domain is set twice in one commit")


def _check_append_only(txn: PendingCommit, config: TableConfiguration, where: str) -> None:
    if config.append_only and any(r.data_change for r in txn.removes):
        raise InvalidCommitError(
            f"{where} is append-only (delta.appendOnly=true): this commit removes data; only rearranging "
            "files with dataChange=false is allowed"
        )


def _check_partitions(txn: PendingCommit, config: TableConfiguration, where: str) -> None:
    # "Values for all partition columns present in the schema MUST be present for all files", keyed by
    # physical names under column mapping ("Writer Requirements for Column Mapping").
    md = config.metadata
    mode = config.column_mapping_mode
    expected = set(physical_partition_names(md.schema, md.partition_columns, mode).values())
    for add in txn.adds:
        got = set(add.partition_values)
        if got != expected:
            missing, extra = sorted(expected - got), sorted(got - expected)
            detail = "; ".join(
                x for x in (missing and f"missing {missing}", extra and f"unexpected {extra}") if x
            )
            raise InvalidCommitError(
                f"{where}: partition values of {add.path} do not match the table's ({detail})"
            )


def _check_constraints(txn: PendingCommit, config: TableConfiguration, where: str) -> None:
    if not txn.adds or txn.constraints_checked or not any(a.data_change for a in txn.adds):
        return
    needs = []
    if config.has_invariants:
        needs.append("column invariants")
    if config.constraints:
        needs.append("CHECK constraints")
    if config.generated_columns:
        needs.append("generated columns")
    if needs:
        raise InvalidCommitError(
            f"{where} has {', '.join(needs)}, which the core cannot evaluate; write through the Spark "
            "writer, "
            "or pass constraints_checked=True to add_files() if the rows were checked"
        )
