"""OpenLineage datasets for Delta tables (used when the OpenLineage provider is installed).

Naming follows OpenLineage's dataset conventions: namespace ``scheme://authority`` (``file`` for local
paths), name the path of the table root.
"""

from __future__ import annotations

import posixpath
from typing import Any
from urllib.parse import urlsplit


def dataset_name(table_uri: str) -> tuple[str, str]:
    parts = urlsplit(table_uri)
    if not parts.scheme or parts.scheme == "file":
        return "file", posixpath.abspath(parts.path or table_uri)
    return f"{parts.scheme}://{parts.netloc}", parts.path.lstrip("/")


def table_lineage(table_uri: str, snapshot: Any | None, *, output: bool) -> Any:
    """An ``OperatorLineage`` with the table as input or output, or ``None`` without OpenLineage."""
    try:
        from airflow.providers.common.compat.openlineage.facet import (
            Dataset,
            SchemaDatasetFacet,
            SchemaDatasetFacetFields,
        )
        from airflow.providers.openlineage.extractors import OperatorLineage
    except ImportError:
        return None
    namespace, name = dataset_name(table_uri)
    facets = {}
    if snapshot is not None:
        fields = [SchemaDatasetFacetFields(name=f.name, type=str(f.type)) for f in snapshot.schema]
        facets["schema"] = SchemaDatasetFacet(fields=fields)
    dataset = Dataset(namespace=namespace, name=name, facets=facets)
    return OperatorLineage(outputs=[dataset]) if output else OperatorLineage(inputs=[dataset])
