"""A Delta schema as an Iceberg schema, the partition columns as an Iceberg partition spec, the name mapping.

Spec: "Iceberg Compatibility V2" and "Column Mapping". The two formats agree on field ids: an Iceberg field's
id is the column's ``delta.columnMapping.id``, and a list's element, a map's key and value take the ids
``delta.columnMapping.nested.ids`` gives them (keyed ``<physical name>.element``, ``.key``, ``.value``, on
the nearest struct field), the same ids the data files carry as Parquet field ids. Types map as Delta
Spark's converter maps them: ``timestamp`` is Iceberg's ``timestamptz``, ``timestamp_ntz`` its
``timestamp``, ``byte`` and ``short`` are ``int``. A column Iceberg cannot hold (a variant, a void, a column
without an id) is a :class:`UniformError` naming the table, the column and what to do.

pyiceberg is an optional dependency (the ``iceberg`` extra), imported where it is used.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

from ..actions.actions import Metadata
from ..base.errors import UniformError
from ..schema.schema import CM_ID, CM_NESTED_IDS, CM_PHYSICAL_NAME, decimal_params

if TYPE_CHECKING:
    from pyiceberg.partitioning import PartitionSpec
    from pyiceberg.schema import Schema
    from pyiceberg.types import IcebergType

# Iceberg numbers partition fields from 1000 ("Partition Specs"), apart from the schema's ids.
PARTITION_FIELD_BASE = 1000
_INT_TYPES = frozenset({"integer", "short", "byte"})


def iceberg_schema(metadata: Metadata, where: str, schema_id: int = 0) -> Schema:
    """The Iceberg schema of ``metadata``'s Delta schema, its ids the column-mapping ids."""
    from pyiceberg.schema import Schema

    return Schema(*(_field(f, where, f["name"]) for f in metadata.schema["fields"]), schema_id=schema_id)


def partition_spec(metadata: Metadata, schema: Schema, where: str) -> PartitionSpec:
    """Identity partitions on the table's partition columns, in their order (Delta Spark's spec)."""
    from pyiceberg.partitioning import PartitionField, PartitionSpec
    from pyiceberg.transforms import IdentityTransform

    fields = []
    for i, column in enumerate(metadata.partition_columns):
        source = schema.find_field(column, case_sensitive=False)
        fields.append(PartitionField(source_id=source.field_id, field_id=PARTITION_FIELD_BASE + i,
                                     transform=IdentityTransform(), name=source.name))  # fmt: skip
    if not fields:
        return PartitionSpec(spec_id=0)
    return PartitionSpec(*fields, spec_id=0)


def same_partitioning(spec: PartitionSpec, other: PartitionSpec) -> bool:
    """Whether two specs partition alike: the same source columns (by id: a renamed column is the same
    one) and transforms, in order."""
    key = [(f.source_id, str(f.transform)) for f in spec.fields]
    return key == [(f.source_id, str(f.transform)) for f in other.fields]


def name_mapping_json(schema: Schema) -> str:
    """``schema.name-mapping.default``: each field's name for its id, for data files without field ids
    (Delta Spark sets Iceberg's ``MappingUtil.create`` of the schema)."""
    from pyiceberg.table.name_mapping import create_mapping_from_schema

    return create_mapping_from_schema(schema).model_dump_json()


def stats_columns(metadata: Metadata) -> Iterator[tuple[tuple[str, ...], int, str]]:
    """(physical path, field id, Delta type) of every primitive column reachable through structs only: the
    columns Delta's per-file statistics can bound, as its ``stats`` name them under column mapping."""
    yield from _stats_columns(metadata.schema["fields"], ())


def _stats_columns(fields: Sequence[dict[str, Any]], prefix: tuple[str, ...]) -> Iterator[tuple]:
    for f in fields:
        md = f.get("metadata") or {}
        path = (*prefix, md.get(CM_PHYSICAL_NAME, f["name"]))
        t = f["type"]
        if isinstance(t, dict) and t.get("type") == "struct":
            yield from _stats_columns(t["fields"], path)
        elif isinstance(t, str) and CM_ID in md:
            yield path, int(md[CM_ID]), t


# -- fields and types ---------------------------------------------------------------------------------------
def _field(field: dict[str, Any], where: str, path: str) -> Any:
    from pyiceberg.types import NestedField

    md = field.get("metadata") or {}
    if CM_ID not in md:
        raise UniformError(
            f"{where}: column {path!r} has no column-mapping id, and Iceberg names columns by id: UniForm "
            "needs column mapping (set delta.columnMapping.mode to 'name', or create the table with "
            "delta.enableIcebergCompatV2=true)",
            rule="columnMapping",
        )
    physical = md.get(CM_PHYSICAL_NAME, field["name"])
    nested = md.get(CM_NESTED_IDS) or {}
    kind = _type(field["type"], where, path, physical, nested)
    comment = md.get("comment")
    return NestedField(field_id=int(md[CM_ID]), name=field["name"], field_type=kind,
                       required=not field.get("nullable", True),
                       doc=comment if isinstance(comment, str) else None)  # fmt: skip


def _type(delta_type: Any, where: str, path: str, key: str, nested: dict[str, Any]) -> IcebergType:
    """The Iceberg type of ``delta_type``; ``key`` is its nested-id key (the physical name of the struct
    field holding it, then ``.element``/``.key``/``.value`` per level)."""
    from pyiceberg.types import ListType, MapType, StructType

    if isinstance(delta_type, str):
        return primitive_type(delta_type, where, path)
    kind = delta_type.get("type")
    if kind == "struct":
        return StructType(*(_field(f, where, f"{path}.{f['name']}") for f in delta_type["fields"]))
    if kind == "array":
        element = _type(delta_type["elementType"], where, f"{path}.element", f"{key}.element", nested)
        return ListType(element_id=_nested_id(nested, f"{key}.element", where, path), element=element,
                        element_required=not delta_type.get("containsNull", True))  # fmt: skip
    if kind == "map":
        key_type = _type(delta_type["keyType"], where, f"{path}.key", f"{key}.key", nested)
        value_type = _type(delta_type["valueType"], where, f"{path}.value", f"{key}.value", nested)
        return MapType(key_id=_nested_id(nested, f"{key}.key", where, path), key_type=key_type,
                       value_id=_nested_id(nested, f"{key}.value", where, path), value_type=value_type,
                       value_required=not delta_type.get("valueContainsNull", True))  # fmt: skip
    raise UniformError(f"{where}: column {path!r} has a type Iceberg cannot hold: {kind!r}", rule="types")


def _nested_id(nested: dict[str, Any], key: str, where: str, path: str) -> int:
    value = nested.get(key)
    if value is None:
        raise UniformError(
            f"{where}: column {path!r} is an array or map without the id of its {key.rsplit('.', 1)[1]} "
            f"({CM_NESTED_IDS} has no {key!r}), which Iceberg needs: IcebergCompatV2 tables number them "
            "(create the table with delta.enableIcebergCompatV2=true)",
            rule="nestedIds",
        )
    return int(value)


def primitive_type(name: str, where: str, path: str) -> IcebergType:
    """The Iceberg type of a Delta primitive type (byte and short are Iceberg ints), or :class:`UniformError`
    naming ``path`` when Iceberg has none."""
    from pyiceberg.types import (
        BinaryType,
        BooleanType,
        DateType,
        DecimalType,
        DoubleType,
        FloatType,
        IntegerType,
        LongType,
        StringType,
        TimestampType,
        TimestamptzType,
    )

    simple = {
        "string": StringType, "long": LongType, "float": FloatType, "double": DoubleType,
        "boolean": BooleanType, "binary": BinaryType, "date": DateType, "timestamp": TimestamptzType,
        "timestamp_ntz": TimestampType,
    }  # fmt: skip
    if name in simple:
        return simple[name]()
    if name in _INT_TYPES:
        return IntegerType()  # Iceberg has no narrower integers; readers widen the file's values
    if (params := decimal_params(name)) is not None:
        return DecimalType(*params)
    raise UniformError(
        f"{where}: column {path!r} is of type {name!r}, which Iceberg format version 2 cannot hold: drop the "
        "column or turn UniForm off (delta.universalFormat.enabledFormats)",
        rule="types",
    )
