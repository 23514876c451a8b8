"""Clustered tables ("Clustered Table"): the ``delta.clustering`` domain and what commits owe it.

A table whose protocol has the ``clustering`` writer feature keeps its clustering columns in the
``delta.clustering`` domain, as physical name paths (Delta Spark writes
``{"clusteringColumns": [["col-…"], ["a", "b"]], "domainName": "delta.clustering"}``). Appends need not
be clustered; what a commit owes the table is that the domain stays intact (replay and checkpoints keep
every domain; only :func:`domain_for` builds a new one, when a commit changes the columns), that the
table is not also partitioned, and that every file it adds carries statistics for the clustering
columns, which clustering and data skipping read. Files a clustering job writes name it in
``clusteringProvider`` (Delta Spark's liquid clustering: ``"liquid"``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence

from ..actions.actions import AddFile, DomainMetadata, Metadata, Protocol
from ..base.errors import InvalidCommitError, shown
from ..schema.schema import physical_name
from .properties import column_mapping_mode_of
from .protocol import writer_features

DOMAIN = "delta.clustering"
FEATURE = "clustering"
LIQUID = "liquid"  # clusteringProvider of files Delta Spark's OPTIMIZE clusters


def is_clustered(protocol: Protocol) -> bool:
    return FEATURE in writer_features(protocol)


def clustering_columns(domains: Mapping[str, DomainMetadata]) -> list[list[str]] | None:
    """The clustering columns (physical name paths) of a snapshot's domains; None when it has none."""
    domain = domains.get(DOMAIN)
    if domain is None or domain.removed:
        return None
    return parse(domain.configuration)


def parse(configuration: str) -> list[list[str]]:
    """The ``clusteringColumns`` of the domain's configuration; a plain string counts as a one-part path
    (the spec's example spells them so)."""
    try:
        columns = json.loads(configuration)["clusteringColumns"]
    except (ValueError, KeyError, TypeError):
        raise InvalidCommitError(f"the {DOMAIN} domain holds {shown(configuration)}, not clusteringColumns") \
            from None  # fmt: skip
    paths = [[c] if isinstance(c, str) else c for c in columns] if isinstance(columns, list) else None
    if paths is None or not all(_is_path(p) for p in paths):
        raise InvalidCommitError(f"the {DOMAIN} domain's clusteringColumns are malformed: {shown(columns)}")
    return paths


def _is_path(path: object) -> bool:
    return isinstance(path, list) and bool(path) and all(isinstance(part, str) for part in path)


def domain_for(metadata: Metadata, columns: Sequence[str]) -> DomainMetadata:
    """The domain recording ``columns`` (logical names, ``a.b`` for a nested field) as the table's
    clustering columns, by physical name under column mapping ("Writer Requirements for Clustered
    Table"); an empty list turns clustering off, as ``ALTER TABLE ... CLUSTER BY NONE`` does."""
    mode = column_mapping_mode_of(metadata.configuration)
    paths = [_physical_path(metadata.schema, column, mode) for column in columns]
    body = {"clusteringColumns": paths, "domainName": DOMAIN}
    return DomainMetadata(DOMAIN, json.dumps(body, separators=(",", ":")))


def logical_names(metadata: Metadata, paths: Sequence[Sequence[str]]) -> list[str]:
    """Dotted logical names of clustering columns given as physical paths."""
    mode = column_mapping_mode_of(metadata.configuration)
    out = []
    for path in paths:
        fields, names = metadata.schema["fields"], []
        for part in path:
            field = next((f for f in fields if physical_name(f, mode) == part), None)
            if field is None:
                raise InvalidCommitError(f"clustering column {'.'.join(path)!r} is not in the table schema")
            names.append(field["name"])
            fields = field["type"].get("fields", []) if isinstance(field["type"], dict) else []
        out.append(".".join(names))
    return out


def _physical_path(schema: dict, column: str, mode: str) -> list[str]:
    fields, path, field = schema["fields"], [], None
    for part in column.split("."):
        field = next((f for f in fields if f["name"].lower() == part.lower()), None)
        if field is None:
            raise InvalidCommitError(f"clustering column {column!r} is not in the table schema")
        path.append(physical_name(field, mode))
        fields = field["type"].get("fields", []) if isinstance(field["type"], dict) else []
    assert field is not None
    kind = field["type"]
    if not isinstance(kind, str) or kind in ("variant", "binary", "boolean"):
        # Clustering orders files by the column's min/max statistics, which these types have none of.
        raise InvalidCommitError(f"clustering column {column!r} has type {shown(kind)}, which has no "
                                 "min/max statistics to cluster by")  # fmt: skip
    return path


def check_commit(
    protocol: Protocol,
    metadata: Metadata,
    domains: Mapping[str, DomainMetadata],
    adds: Sequence[AddFile],
    where: str,
) -> None:
    """What a commit to a clustered table must hold: no partition columns, a well-formed domain naming
    columns of the schema, and statistics for the clustering columns in every added file."""
    if not is_clustered(protocol):
        if DOMAIN in domains and not domains[DOMAIN].removed:
            raise InvalidCommitError(f"{where} sets the {DOMAIN} domain without the clustering feature")
        return
    if metadata.partition_columns:
        raise InvalidCommitError(f"{where} is clustered and cannot also be partitioned "
                                 f"(partition columns {list(metadata.partition_columns)})")  # fmt: skip
    paths = clustering_columns(domains) or []
    logical_names(metadata, paths)  # every column still resolves
    for add in adds:
        missing = _missing_stats(add, paths)
        if missing:
            raise InvalidCommitError(
                f"{where} is clustered by {['.'.join(p) for p in paths]}: every added file needs statistics "
                f"for them, and {add.path} has none for {missing}"
            )


def _missing_stats(add: AddFile, paths: list[list[str]]) -> list[str]:
    try:
        stats = json.loads(add.stats) if add.stats else None
    except ValueError:
        stats = None
    if not isinstance(stats, dict) or "numRecords" not in stats:
        return ["numRecords"]
    missing = []
    for path in paths:
        node = stats.get("nullCount")
        for part in path:
            node = node.get(part) if isinstance(node, dict) else None
        if node is None:
            missing.append(".".join(path))
    return missing
