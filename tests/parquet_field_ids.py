"""Field ids of a Parquet file's schema, by dotted path: what IcebergCompat's writer requirements put in every
data file (column-mapping ids, and the nested element/key/value ids), for the tests of both writers."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq


def parquet_field_ids(schema: pq.ParquetSchema) -> dict[str, int | None]:
    """Dotted Parquet path -> field id of every element of a file's schema (None: it has none), Parquet's
    repeated ``list`` and ``key_value`` groups left out (they have none in Delta Spark's files either)."""
    out: dict[str, int | None] = {}
    for i in range(len(schema)):
        parts = schema.column(i).path.split(".")
        for depth in range(1, len(parts) + 1):
            if parts[depth - 1] not in ("list", "key_value"):
                out.setdefault(".".join(parts[:depth]), None)
    arrow = schema.to_arrow_schema()

    def walk(field: pa.Field, path: str) -> None:
        meta = field.metadata or {}
        if b"PARQUET:field_id" in meta:
            out[path] = int(meta[b"PARQUET:field_id"])
        kind = field.type
        if pa.types.is_struct(kind):
            for child in kind:
                walk(child, f"{path}.{child.name}")
        elif pa.types.is_list(kind) or pa.types.is_large_list(kind):
            walk(kind.value_field, f"{path}.list.element")
        elif pa.types.is_map(kind):
            walk(kind.key_field, f"{path}.key_value.key")
            walk(kind.item_field, f"{path}.key_value.value")

    for field in arrow:
        walk(field, field.name)
    return out
