"""IcebergCompat: the writer requirements that keep a table convertible to Iceberg, V1 and V2.

Spec: "Iceberg Compatibility V1", "Iceberg Compatibility V2" and their "Writer Requirements". While the
feature is supported and its property (``delta.enableIcebergCompatV<n>``) is true, writers keep column
mapping on (``name`` or ``id``), write no deletion vectors, materialize partition values in every data file
after its other columns, give every ``add`` a ``numRecords``, keep the types Iceberg has (V2: an allow-list;
V1: no arrays, maps or voids), never change the partition columns' names on a replace, and make only type
changes Iceberg V2 can follow. V2 also numbers every array ``element`` and map ``key``/``value``: the ids
live in ``delta.columnMapping.nested.ids`` of the nearest struct field (keys ``<physical name>.element``,
nested ones prefixed by their parent's key), above the column ids and counted in
``delta.columnMapping.maxColumnId``, and go into the Parquet ``field_id``s (``schema.delta_schema_to_arrow``).

This module holds the rules as Delta Spark's ``IcebergCompat`` checks them; how files are laid out is the
file layout's (``TableConfiguration.materialize_partition_columns``). Every refusal is an
:class:`IcebergCompatError` naming the table, the version, the rule and what to do, raised by the table's
creation, the write planner and the commit's writer rules before anything is written.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..actions.actions import AddFile, stats_num_records
from ..base.arrow_utils import map_value, string_scalar, to_numpy
from ..base.errors import IcebergCompatError
from ..schema.file_layout import ICEBERG_COMPAT_TAG
from ..schema.schema import CM_ID, CM_NESTED_IDS, CM_PHYSICAL_NAME, TYPE_CHANGES, decimal_params
from ..schema.type_widening import iceberg_follows
from .configuration import TableConfiguration
from .properties import COLUMN_MAPPING_MODE, ENABLE_ICEBERG_COMPAT, bool_property

# Delta Spark sets this guard on every table it creates with IcebergCompat (``OptionalAtomicEligible``):
# its UniForm converter may then write Iceberg metadata as part of a commit.
ATOMIC_CONVERSION = "delta.universalFormat.iceberg.atomicConversion.supported"
# "Writer Requirements for IcebergCompatV2": the types a table's schema may hold (structs, arrays, maps
# around them).
V2_TYPES = frozenset({"byte", "short", "integer", "long", "float", "double", "string", "binary", "boolean",
                      "timestamp", "timestamp_ntz", "date"})  # fmt: skip
_VOID = frozenset({"void", "null"})


def _name(version: int) -> str:
    return f"IcebergCompatV{version} ({ENABLE_ICEBERG_COMPAT[version]})"


def asked_versions(configuration: Mapping[str, str]) -> tuple[int, ...]:
    """The IcebergCompat versions whose property is true in ``configuration`` (a new table's)."""
    return tuple(v for v, key in sorted(ENABLE_ICEBERG_COMPAT.items()) if bool_property(configuration, key))


def creation_properties(configuration: Mapping[str, str]) -> dict[str, str]:
    """A new table's properties as Delta Spark completes them when they turn IcebergCompat on: column
    mapping ``name`` unless a mode is given (``none`` is then refused by :func:`check_table`), and the
    atomic-conversion guard. Unchanged without IcebergCompat."""
    out = dict(configuration)
    if asked_versions(out):
        out.setdefault(COLUMN_MAPPING_MODE, "name")
        out.setdefault(ATOMIC_CONVERSION, "true")
    return out


# -- nested ids ("Writer Requirements for IcebergCompatV2") ------------------------------------------------
def _physical(field: dict[str, Any]) -> str:
    return (field.get("metadata") or {}).get(CM_PHYSICAL_NAME, field["name"])


def _nested_keys(delta_type: Any, path: str) -> Iterator[str]:
    """The keys of ``delta_type``'s elements, keys and values under ``path`` (a field's physical name), each
    before what it holds; struct fields inside hold their own (``assign_nested_ids`` numbers both in Delta
    Spark's order)."""
    if not isinstance(delta_type, dict):
        return
    kind = delta_type.get("type")
    if kind == "array":
        yield f"{path}.element"
        yield from _nested_keys(delta_type["elementType"], f"{path}.element")
    elif kind == "map":
        yield f"{path}.key"
        yield from _nested_keys(delta_type["keyType"], f"{path}.key")
        yield f"{path}.value"
        yield from _nested_keys(delta_type["valueType"], f"{path}.value")


def _struct_fields(delta_type: Any) -> Iterator[dict[str, Any]]:
    """The struct fields directly inside ``delta_type`` (a struct, or structs in arrays and maps)."""
    if not isinstance(delta_type, dict):
        return
    kind = delta_type.get("type")
    if kind == "struct":
        yield from delta_type["fields"]
    elif kind == "array":
        yield from _struct_fields(delta_type["elementType"])
    elif kind == "map":
        yield from _struct_fields(delta_type["keyType"])
        yield from _struct_fields(delta_type["valueType"])


def _walk_fields(fields: Sequence[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    """Every struct field: a field, then the fields inside its type."""
    for field in fields:
        yield field
        yield from _walk_fields(list(_struct_fields(field["type"])))


def max_id(schema: dict[str, Any]) -> int:
    """The largest column id or nested id in ``schema`` (Delta Spark's ``findMaxColumnId``)."""
    found = 0
    for field in _walk_fields(schema["fields"]):
        md = field.get("metadata") or {}
        found = max([found, int(md.get(CM_ID, 0)), *(int(v) for v in (md.get(CM_NESTED_IDS) or {}).values())])
    return found


def assign_nested_ids(schema: dict[str, Any], last_id: int) -> int:
    """Give every array element and map key and value without one an id above ``last_id``, in place, in
    Delta Spark's order (depth first: an element, then what it holds, struct fields inside included);
    every struct field gets its ``delta.columnMapping.nested.ids`` map (``{}`` when it has none), as Delta
    Spark writes it. Returns the largest id given. Ids already there are kept, so schema evolution numbers
    only what it adds."""
    next_id = last_id

    def number(delta_type: Any, ids: dict[str, Any], path: str) -> None:
        nonlocal next_id
        if not isinstance(delta_type, dict):
            return
        kind = delta_type.get("type")
        if kind == "struct":
            for field in delta_type["fields"]:
                visit(field)
            return
        parts = {"array": (("element", "elementType"),),
                 "map": (("key", "keyType"), ("value", "valueType"))}.get(kind, ())  # fmt: skip
        for name, child in parts:
            key = f"{path}.{name}"
            if key not in ids:
                next_id += 1
                ids[key] = next_id
            number(delta_type[child], ids, key)

    def visit(field: dict[str, Any]) -> None:
        md = field.setdefault("metadata", {})
        ids = dict(md.get(CM_NESTED_IDS) or {})
        number(field["type"], ids, _physical(field))
        md[CM_NESTED_IDS] = ids

    for field in schema["fields"]:
        visit(field)
    return next_id


# -- the rules ----------------------------------------------------------------------------------------------
def check_table(
    config: TableConfiguration, where: str, *, previous: TableConfiguration | None = None
) -> None:
    """Refuse, by name, a table configuration (a new table's, a write plan's, a commit's) that breaks a
    writer requirement of the IcebergCompat version it turns on; ``previous`` is the configuration of the
    version it follows (None for a new table). Nothing to check without IcebergCompat, except that UniForm
    iceberg needs it (Delta Spark's DELTA_UNIVERSAL_FORMAT_VIOLATION: Iceberg metadata can only describe
    a table kept convertible)."""
    asked = config.iceberg_compat_properties
    if not asked and "iceberg" in config.universal_formats:
        raise IcebergCompatError(
            f"{where}: delta.universalFormat.enabledFormats names iceberg (UniForm), which requires "
            "IcebergCompat: set delta.enableIcebergCompatV2=true too (it sets up column mapping)",
            version=2, rule="universalFormat",
        )  # fmt: skip
    if not asked:
        return
    version = max(asked)
    if len(asked) > 1:
        raise IcebergCompatError(
            f"{where}: {' and '.join(_name(v) for v in asked)} are both on; only one IcebergCompat version "
            "may be enabled: set the other property to false", version=version, rule="singleVersion",
        )  # fmt: skip
    feature = f"icebergCompatV{version}"
    if not config.supports(feature):
        raise IcebergCompatError(
            f"{where}: {_name(version)} is on but the protocol does not list the {feature} table feature; "
            f"commit a protocol that supports it (delta.feature.{feature}=supported)",
            version=version, rule="protocol",
        )  # fmt: skip
    _check_column_mapping(config, version, where, previous)
    _check_deletion_vectors(config, version, where, previous)
    _check_types(config.schema, version, where)
    if previous is not None:
        _check_partition_spec(previous.metadata.partition_columns, config.metadata.partition_columns,
                              version, where)  # fmt: skip
    if config.supports("typeWidening"):
        _check_type_changes(config.schema, version, where)
    if version >= 2:
        _check_nested_ids(config, version, where)


def _check_column_mapping(
    config: TableConfiguration, version: int, where: str, previous: TableConfiguration | None
) -> None:
    mode = config.column_mapping_mode
    if mode == "none":
        raise IcebergCompatError(
            f"{where}: {_name(version)} requires column mapping 'name' or 'id', and "
            f"{COLUMN_MAPPING_MODE} is 'none'; leave the mode out (IcebergCompat sets 'name') or set it to "
            "'name' or 'id'", version=version, rule="columnMapping",
        )  # fmt: skip
    if previous is not None and previous.column_mapping_mode != mode:
        raise IcebergCompatError(
            f"{where}: {_name(version)} cannot follow a change of {COLUMN_MAPPING_MODE} from "
            f"{previous.column_mapping_mode!r} to {mode!r} (files written under the old mode would need "
            "rewriting); keep the table's mode", version=version, rule="columnMapping",
        )  # fmt: skip


def _check_deletion_vectors(
    config: TableConfiguration, version: int, where: str, previous: TableConfiguration | None
) -> None:
    # V1: the feature must not even be supported; V2: it must not be active (supported and enabled). As
    # Delta Spark, the version this commit follows counts too: a concurrent writer may still write vectors.
    if version == 1 and config.deletion_vectors_supported:
        raise IcebergCompatError(
            f"{where}: {_name(version)} requires that the deletionVectors table feature is not supported, "
            "and the protocol lists it; use IcebergCompatV2 or a table without deletion vectors",
            version=version, rule="deletionVectors",
        )  # fmt: skip
    for state, what in ((config, "would enable"), (previous, "enables")):
        if state is not None and state.deletion_vectors_enabled:
            raise IcebergCompatError(
                f"{where}: {_name(version)} requires deletion vectors to be off, and the table {what} them "
                "(delta.enableDeletionVectors=true); do not enable them, or turn them off in a commit of "
                "its own and rewrite the files that carry vectors first", version=version,
                rule="deletionVectors",
            )  # fmt: skip


def _type_problem(delta_type: Any, version: int) -> str | None:
    """The first type of ``delta_type`` IcebergCompat ``version`` does not allow, spelled as Delta does."""
    if isinstance(delta_type, str):
        if version == 1:
            return delta_type if delta_type in _VOID else None
        return None if delta_type in V2_TYPES or decimal_params(delta_type) else delta_type
    kind = delta_type.get("type") if isinstance(delta_type, dict) else None
    if version == 1 and kind in ("array", "map"):
        return kind
    if kind == "struct":
        for field in delta_type["fields"]:
            if (found := _type_problem(field["type"], version)) is not None:
                return found
        return None
    if kind == "array":
        return _type_problem(delta_type["elementType"], version)
    if kind == "map":
        key = _type_problem(delta_type["keyType"], version)
        return key if key is not None else _type_problem(delta_type["valueType"], version)
    return str(kind)


def _check_types(schema: dict[str, Any], version: int, where: str) -> None:
    allowed = ("byte, short, integer, long, float, double, decimal, string, binary, boolean, timestamp, "
               "timestamp_ntz, date, and structs, arrays and maps of them") if version >= 2 else (
               "any type but map, array and void")  # fmt: skip
    for field in schema["fields"]:
        found = _type_problem(field["type"], version)
        if found is not None:
            raise IcebergCompatError(
                f"{where}: column {field['name']!r} holds type {found}, which {_name(version)} does not "
                f"allow ({allowed}); change the column's type or leave IcebergCompat off",
                version=version, rule="types",
            )  # fmt: skip


def _check_partition_spec(before: Sequence[str], after: Sequence[str], version: int, where: str) -> None:
    # Iceberg cannot follow a replace of a partitioned table by one partitioned by other columns (another
    # type of the same columns it can); Delta Spark compares the names exactly, as here.
    if before and list(before) != list(after):
        raise IcebergCompatError(
            f"{where}: {_name(version)} does not allow replacing a table partitioned by {list(before)} with "
            f"one partitioned by {list(after)}; keep the partition columns' names",
            version=version, rule="partitionSpec",
        )  # fmt: skip


def _type_changes(fields: Sequence[dict[str, Any]], prefix: str = "") -> Iterator[tuple[str, Any, Any]]:
    """(column path, from, to) of every change recorded in ``delta.typeChanges`` ("Type Change Metadata")."""
    for field in fields:
        path = f"{prefix}{field['name']}"
        for change in (field.get("metadata") or {}).get(TYPE_CHANGES) or ():
            where = f"{path}.{change['fieldPath']}" if change.get("fieldPath") else path
            yield where, change.get("fromType"), change.get("toType")
        yield from _type_changes(list(_struct_fields(field["type"])), f"{path}.")


def _check_type_changes(schema: dict[str, Any], version: int, where: str) -> None:
    for path, old, new in _type_changes(schema["fields"]):
        if not iceberg_follows(old, new):
            raise IcebergCompatError(
                f"{where}: column {path!r} was widened from {old} to {new}, a type change Iceberg V2 cannot "
                f"follow, which {_name(version)} refuses (Iceberg follows int to long, float to double and a "
                "decimal's precision raised at the same scale); keep the column's type",
                version=version, rule="typeWidening",
            )  # fmt: skip


def _check_nested_ids(config: TableConfiguration, version: int, where: str) -> None:
    """Every element, key and value has its id, unique, apart from the column ids, and counted in
    ``delta.columnMapping.maxColumnId``."""
    column_ids: set[int] = set()
    nested: dict[int, str] = {}
    for field in _walk_fields(config.schema["fields"]):
        md = field.get("metadata") or {}
        if CM_ID in md:
            column_ids.add(int(md[CM_ID]))
        ids = md.get(CM_NESTED_IDS) or {}
        for key in _nested_keys(field["type"], _physical(field)):
            if key not in ids:
                raise IcebergCompatError(
                    f"{where}: {_name(version)} requires an id for every array element and map key and "
                    f"value, and column {field['name']!r} has none for {key!r} in {CM_NESTED_IDS}; write "
                    "through this client (it numbers them) or number them with "
                    "iceberg_compat.assign_nested_ids", version=version, rule="nestedIds",
                )  # fmt: skip
            number = int(ids[key])
            if number in nested:
                raise IcebergCompatError(
                    f"{where}: nested ids of {key!r} and {nested[number]!r} are both {number}; each "
                    "element, key and value needs an id of its own", version=version, rule="nestedIds",
                )  # fmt: skip
            nested[number] = key
    clash = sorted(column_ids & set(nested))
    top = max([0, *column_ids, *nested])
    if clash or top > config.max_column_id:
        what = (f"nested id(s) {clash} are also column ids" if clash else
                f"delta.columnMapping.maxColumnId {config.max_column_id} is below the largest id {top}")
        raise IcebergCompatError(
            f"{where}: {_name(version)}: {what}; nested ids must be unique and counted in "
            "delta.columnMapping.maxColumnId", version=version, rule="nestedIds",
        )  # fmt: skip


def check_adds(config: TableConfiguration, adds: Sequence[AddFile], where: str) -> None:
    """Every ``add`` of a commit to an IcebergCompat table has ``numRecords`` in its ``stats`` ("Writer
    Requirements for IcebergCompatV1/V2"): Iceberg's manifests need each file's record count."""
    version = config.iceberg_compat_version
    if version is None:
        return
    for add in adds:
        if stats_num_records(add.stats) is None:
            raise IcebergCompatError(
                f"{where}: {_name(version)} requires numRecords in the stats of every added file, and "
                f"{add.path} has {'no stats' if not add.stats else 'none in ' + repr(add.stats[:80])}; add "
                "the file with its statistics (DeltaTable.add_file reads them from the Parquet footer)",
                version=version, rule="numRecords",
            )  # fmt: skip


def check_enabling(
    previous: TableConfiguration, config: TableConfiguration, files: pa.Table, where: str
) -> None:
    """A commit that turns IcebergCompat on for a table with live files (``files``: the snapshot's) is
    refused when some of them would have to be rewritten to meet the requirements: files with deletion
    vectors, and, unless Delta Spark tagged them as written under this version, files without
    ``numRecords`` or, in a partitioned table, without their partition values materialized, or, under V2,
    without nested ids in a table with arrays or maps. This client rewrites no files for a property change;
    Delta Spark's ``REORG TABLE ... APPLY (UPGRADE UNIFORM (ICEBERG_COMPAT_VERSION = n))`` does."""
    version = config.iceberg_compat_version
    if version is None or previous.iceberg_compat_version == version or files.num_rows == 0:
        return
    reasons = []
    with_vectors = to_numpy(pc.is_valid(files.column("deletionVector").combine_chunks()))
    tags = map_value(files.column("tags").combine_chunks(), ICEBERG_COMPAT_TAG)
    tagged = to_numpy(pc.fill_null(pc.equal(tags, string_scalar(str(version))), False))
    stats = files.column("stats").combine_chunks()
    counted = to_numpy(pc.fill_null(pc.match_substring(stats, '"numRecords"'), False))
    untagged = ~tagged
    need = with_vectors.copy()
    if with_vectors.any():
        reasons.append(f"{int(with_vectors.sum())} carry deletion vectors")
    if (untagged & ~counted).any():
        reasons.append(f"{int((untagged & ~counted).sum())} have no numRecords")
        need |= untagged & ~counted
    if config.metadata.partition_columns and untagged.any():
        reasons.append(f"{int(untagged.sum())} do not hold their partition values")
        need |= untagged
    nested = any(next(_nested_keys(f["type"], ""), None) for f in _walk_fields(config.schema["fields"]))
    if version >= 2 and nested and untagged.any():
        reasons.append(f"{int(untagged.sum())} have no ids for array elements and map keys and values")
        need |= untagged
    if reasons:
        raise IcebergCompatError(
            f"{where}: turning {_name(version)} on needs {int(np.count_nonzero(need))} of its "
            f"{files.num_rows} live data files rewritten ({'; '.join(reasons)}), which a property change "
            "does not do; rewrite them first (Delta Spark: REORG TABLE ... APPLY (UPGRADE UNIFORM "
            f"(ICEBERG_COMPAT_VERSION = {version}))), or create a table with the property and copy the rows "
            "into it", version=version, rule="rewrite",
        )  # fmt: skip
