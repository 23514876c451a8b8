"""A version's table configuration: its protocol and metadata, with the feature registry's answers.

Every fact the core acts on that a table's ``protocol`` and ``metaData`` decide is read here, once per
version (as delta-kernel-rs's ``TableConfiguration``): which features are supported and active, the column
mapping mode, the identity, generated and constrained columns, the properties with Delta Spark's defaults
(retention intervals, checkpoint policy, statistics columns, Parquet codec). A snapshot carries the
configuration of its version; a transaction holds its effective one, with its pending protocol and metadata
applied. Nothing outside this folder reads a raw property string or searches the schema's JSON text, so a
property is interpreted the same way by every reader and writer.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from functools import cached_property
from typing import Any

import pyarrow as pa

from ..actions.actions import Metadata, Protocol
from ..base.errors import InvalidCommitError
from ..schema.file_layout import FileLayout, void_shapes
from ..schema.schema import COLLATIONS as COLLATIONS_KEY
from ..schema.schema import CURRENT_DEFAULT, GENERATION, IDENTITY_PREFIX, delta_schema_to_arrow
from ..schema.schema import INVARIANTS as INVARIANTS_KEY
from ..schema.schema import TYPE_CHANGES as TYPE_CHANGES_KEY
from ..schema.stats import stats_schema
from . import registry
from .properties import (
    APPEND_ONLY,
    CHECKPOINT_INTERVAL,
    DELETED_FILE_RETENTION,
    ENABLE_ICEBERG_COMPAT,
    LOG_RETENTION,
    SET_TRANSACTION_RETENTION,
    UNIVERSAL_FORMATS,
    bool_property,
    column_mapping_mode_of,
    ict_enablement_version,
    interval_property_ms,
)
from .protocol import check_read_supported, check_write_supported, reader_features, writer_features
from .registry import Usage
from .row_tracking import MATERIALIZED_ROW_COMMIT_VERSION, MATERIALIZED_ROW_ID

MAX_COLUMN_ID = "delta.columnMapping.maxColumnId"
CONSTRAINT_PREFIX = "delta.constraints."
ISOLATION_LEVEL = "delta.isolationLevel"
ISOLATION_LEVELS = ("Serializable", "WriteSerializable", "SnapshotIsolation")
DEFAULT_ISOLATION = "Serializable"  # Delta Spark's default for tables that do not set delta.isolationLevel
PARQUET_COMPRESSION = "delta.parquet.compression.codec"
TARGET_FILE_SIZE = "delta.targetFileSize"
PARQUET_FORMAT_VERSION = "delta.parquet.format.version"
# "Table Properties": codecs writers SHOULD know, matched case-insensitively, as pyarrow names them.
_CODECS = {"uncompressed": "none", "none": "none", "snappy": "snappy", "gzip": "gzip", "lz4": "zstd",
           "lz4_raw": "lz4", "zstd": "zstd"}  # fmt: skip
# pyarrow writes LZ4 only as LZ4_RAW: Hadoop-framed "lz4" (deprecated) falls back to the default (the spec
# allows it).
DEFAULT_CODEC = "zstd"
_FORMAT_VERSION = re.compile(r"1\.0\.0|2\.\d+\.\d+")



def _walk(schema: dict[str, Any], marks: set[str], identity: list[str], generated: dict[str, str],
          prefix: str = "") -> None:  # fmt: skip
    """One walk of a schema: the marks its fields carry, its identity and generated columns."""
    for f in schema.get("fields", ()):
        md = f.get("metadata") or {}
        name = prefix + f["name"]
        if any(k.startswith(IDENTITY_PREFIX) for k in md):
            marks.add(registry.IDENTITY)
            identity.append(name)
        if GENERATION in md:
            marks.add(registry.GENERATED)
            generated[name] = str(md[GENERATION])
        if INVARIANTS_KEY in md:
            marks.add(registry.INVARIANTS)
        if CURRENT_DEFAULT in md:
            marks.add(registry.DEFAULTS)
        if TYPE_CHANGES_KEY in md:
            marks.add(registry.TYPE_CHANGES)
        if COLLATIONS_KEY in md:
            marks.add(registry.COLLATIONS)
        _walk_type(f["type"], marks, identity, generated, name + ".")


def _walk_type(t: Any, marks: set[str], identity: list[str], generated: dict[str, str], prefix: str) -> None:
    if isinstance(t, str):
        if t == "timestamp_ntz":
            marks.add(registry.TIMESTAMP_NTZ)
        elif t == "variant":
            marks.add(registry.VARIANT)
        return
    kind = t.get("type")
    if kind == "struct":
        _walk(t, marks, identity, generated, prefix)
    elif kind == "array":
        _walk_type(t["elementType"], marks, identity, generated, prefix)
    elif kind == "map":
        _walk_type(t["keyType"], marks, identity, generated, prefix)
        _walk_type(t["valueType"], marks, identity, generated, prefix)


def schema_marks(schema: dict[str, Any]) -> frozenset[str]:
    """The marks a schema's fields carry (identity, generated, invariants, defaults, timestamp_ntz, ...)."""
    marks: set[str] = set()
    _walk(schema, marks, [], {})
    return frozenset(marks)


class TableConfiguration:
    """The protocol and metadata of one version (or of a pending commit), read once."""

    def __init__(self, protocol: Protocol, metadata: Metadata) -> None:
        self.protocol = protocol
        self.metadata = metadata
        self.properties: Mapping[str, str] = metadata.configuration
        self._layout: FileLayout | None = None

    def __repr__(self) -> str:
        return f"TableConfiguration(protocol={self.protocol!r}, metadata id={self.metadata.id!r})"

    # -- the schema, walked once -------------------------------------------------------------------------
    @cached_property
    def schema(self) -> dict[str, Any]:
        return self.metadata.schema

    @cached_property
    def physical_schema(self) -> pa.Schema:
        """The Arrow schema of the table's columns as data files name them: physical names and field ids
        under column mapping ("Writer Requirements for Column Mapping")."""
        return delta_schema_to_arrow(self.schema, physical=True)

    @cached_property
    def _schema_facts(self) -> tuple[frozenset[str], tuple[str, ...], dict[str, str]]:
        marks: set[str] = set()
        identity: list[str] = []
        generated: dict[str, str] = {}
        _walk(self.schema, marks, identity, generated)
        return frozenset(marks), tuple(identity), generated

    @property
    def schema_marks(self) -> frozenset[str]:
        return self._schema_facts[0]

    @property
    def identity_columns(self) -> tuple[str, ...]:
        """Dotted names of the identity columns."""
        return self._schema_facts[1]

    @property
    def generated_columns(self) -> dict[str, str]:
        """Dotted name -> generation expression."""
        return dict(self._schema_facts[2])

    @property
    def has_invariants(self) -> bool:
        return registry.INVARIANTS in self.schema_marks

    @cached_property
    def constraints(self) -> dict[str, str]:
        """CHECK constraints by name ("CHECK Constraints": ``delta.constraints.<name>``)."""
        return {
            k[len(CONSTRAINT_PREFIX) :]: v
            for k, v in self.properties.items()
            if k.startswith(CONSTRAINT_PREFIX)
        }

    # -- features ----------------------------------------------------------------------------------------
    @cached_property
    def usage(self) -> Usage:
        return Usage(self.properties, self.schema_marks)

    @cached_property
    def reader_features(self) -> frozenset[str]:
        return reader_features(self.protocol)

    @cached_property
    def writer_features(self) -> frozenset[str]:
        return writer_features(self.protocol)

    @cached_property
    def supported_features(self) -> frozenset[str]:
        """Every feature the protocol lists or implies, a preview name counting for its feature too (Delta
        Spark 4 tables list ``variantShredding-preview`` where the protocol names ``variantShredding``)."""
        listed = self.writer_features | self.reader_features
        previews = {r.preview_of for n in listed if (r := registry.feature(n)) is not None and r.preview_of}
        return frozenset(listed | previews)

    def supports(self, name: str) -> bool:
        """Whether the protocol lists or implies feature ``name`` ("Supported Features")."""
        return name in self.supported_features

    def unsupported(self, needed: set[str]) -> list[str]:
        """Of ``needed`` (e.g. what a new schema uses), the features the protocol does not support."""
        return sorted(n for n in needed if not self.supports(n))

    def check_read(self, where: str) -> None:
        check_read_supported(self.protocol, where=where)

    def check_write(self, where: str) -> None:
        check_write_supported(self.protocol, usage=self.usage, where=where)

    # -- what the features ask of readers and writers ----------------------------------------------------
    @cached_property
    def column_mapping_mode(self) -> str:
        return column_mapping_mode_of(self.properties)

    @property
    def max_column_id(self) -> int:
        return int(self.properties.get(MAX_COLUMN_ID, "0"))

    @property
    def append_only(self) -> bool:
        return bool_property(self.properties, APPEND_ONLY)

    @property
    def change_data_feed(self) -> bool:
        """Whether commits write change data ("Add CDC File"): the feature supported and the property on."""
        return self.supports("changeDataFeed") and bool_property(
            self.properties, "delta.enableChangeDataFeed"
        )

    @property
    def change_data_feed_property(self) -> bool:
        """The property alone: a change read asks it of every version of its range."""
        return bool_property(self.properties, "delta.enableChangeDataFeed")

    @property
    def deletion_vectors_supported(self) -> bool:
        return self.supports("deletionVectors")

    @property
    def deletion_vectors_enabled(self) -> bool:
        """Whether new deletion vectors may be written: the feature supported and the property on."""
        return self.deletion_vectors_supported and bool_property(
            self.properties, "delta.enableDeletionVectors"
        )

    @property
    def deletion_vectors_property(self) -> bool:
        return bool_property(self.properties, "delta.enableDeletionVectors")

    @property
    def row_tracking_supported(self) -> bool:
        return self.supports("rowTracking")

    @property
    def row_tracking_enabled(self) -> bool:
        """Whether readers may rely on row ids: ``delta.enableRowTracking`` on a table that supports them."""
        return self.row_tracking_supported and bool_property(self.properties, "delta.enableRowTracking")

    @property
    def materialized_row_id_column(self) -> str | None:
        """The hidden column that holds materialized row ids ("Row Tracking"), when the table names one."""
        return self.properties.get(MATERIALIZED_ROW_ID)

    @property
    def materialized_row_commit_version_column(self) -> str | None:
        return self.properties.get(MATERIALIZED_ROW_COMMIT_VERSION)

    @property
    def clustered(self) -> bool:
        return self.supports("clustering")

    @cached_property
    def iceberg_compat_properties(self) -> tuple[int, ...]:
        """The IcebergCompat versions whose property (``delta.enableIcebergCompatV<n>``) is true, whether
        or not the protocol lists the feature: what ``iceberg_compat`` checks against the protocol."""
        on = [v for v, key in sorted(ENABLE_ICEBERG_COMPAT.items()) if bool_property(self.properties, key)]
        return tuple(on)

    @property
    def iceberg_compat_version(self) -> int | None:
        """The IcebergCompat version writers must follow ("Iceberg Compatibility V1/V2": the feature
        supported and its property true), ``None`` when none is active. Two active at once is refused by
        ``iceberg_compat.check_table``; the newer one answers here meanwhile."""
        active = [v for v in self.iceberg_compat_properties if self.supports(f"icebergCompatV{v}")]
        return max(active) if active else None

    @cached_property
    def universal_formats(self) -> frozenset[str]:
        """The formats ``delta.universalFormat.enabledFormats`` names, lower case: with ``iceberg`` every
        commit is followed by the table's Iceberg metadata for its version (UniForm, ``uniform/``)."""
        raw = self.properties.get(UNIVERSAL_FORMATS) or ""
        return frozenset(name.strip().lower() for name in raw.split(",") if name.strip())

    @property
    def materialize_partition_columns(self) -> bool:
        """Whether data files hold the partition columns too (after the other columns): IcebergCompat
        active, or Delta Spark's ``materializePartitionColumns`` feature supported."""
        return self.iceberg_compat_version is not None or self.supports("materializePartitionColumns")

    @property
    def type_widening_enabled(self) -> bool:
        return bool_property(self.properties, "delta.enableTypeWidening")

    @property
    def in_commit_timestamps_from(self) -> int | None:
        """First version whose commits carry in-commit timestamps; ``None`` without them."""
        return ict_enablement_version(self.properties)

    @property
    def isolation_level(self) -> str:
        """The isolation level the table asks for: ``delta.isolationLevel``, Serializable when unset.

        Delta Spark honours the property on commit (and only accepts Serializable when setting it itself);
        a value that is not a level is refused rather than guessed, since it decides which races are allowed.
        """
        level = str(self.properties.get(ISOLATION_LEVEL, DEFAULT_ISOLATION))
        if level not in ISOLATION_LEVELS[:2]:
            raise InvalidCommitError(
                f"table property {ISOLATION_LEVEL}={level!r} is not an isolation level: use one of "
                f"{ISOLATION_LEVELS[:2]}"
            )
        return level

    # -- statistics, files and checkpoints ---------------------------------------------------------------
    @property
    def num_indexed_cols(self) -> int:
        return int(self.properties.get("delta.dataSkippingNumIndexedCols", 32))

    @property
    def stats_columns(self) -> str | None:
        return self.properties.get("delta.dataSkippingStatsColumns")

    @cached_property
    def stats_schema(self) -> pa.StructType:
        """The typed schema of this version's ``add.stats`` ("Per-file Statistics"): which columns are
        indexed (``delta.dataSkippingNumIndexedCols``, ``delta.dataSkippingStatsColumns``), by physical
        name."""
        return stats_schema(
            self.schema,
            mode=self.column_mapping_mode,
            partition_columns=list(self.metadata.partition_columns),
            num_indexed_cols=self.num_indexed_cols,
            stats_columns=self.stats_columns,
        )

    @property
    def random_prefix_length(self) -> int | None:
        """Length of random file-name prefixes (``delta.randomizeFilePrefixes``), ``None`` when off."""
        if not bool_property(self.properties, "delta.randomizeFilePrefixes"):
            return None
        return int(self.properties.get("delta.randomPrefixLength", "2"))

    @property
    def file_prefix_length(self) -> int | None:
        """Delta Spark writes new files under random prefixes instead of partition folders under column
        mapping or ``delta.randomizeFilePrefixes`` (change data files included): the prefix length then,
        ``None`` when files go into partition folders."""
        randomize = bool_property(self.properties, "delta.randomizeFilePrefixes")
        if self.column_mapping_mode == "none" and not randomize:
            return None
        return int(self.properties.get("delta.randomPrefixLength", "2"))

    @property
    def target_file_size(self) -> int | None:
        """``delta.targetFileSize`` in bytes (a Spark byte size: ``134217728``, ``128m``, ``1g``, ``64mb``);
        ``ValueError`` naming the property when it is not one."""
        value = self.properties.get(TARGET_FILE_SIZE)
        if value is None:
            return None
        text = str(value).strip().lower().removesuffix("b")
        scale = {"k": 1024, "m": 1024**2, "g": 1024**3, "t": 1024**4}.get(text[-1:], 1)
        try:
            number = int(text[:-1] if scale > 1 else text)
        except ValueError:
            number = 0
        if number <= 0:
            raise ValueError(f"table property {TARGET_FILE_SIZE}={value!r} is not a size")
        return number * scale

    @property
    def checkpoint_interval(self) -> int:
        return int(self.properties.get(CHECKPOINT_INTERVAL, "10"))

    @property
    def checkpoint_policy(self) -> str:
        """``delta.checkpointPolicy``: ``classic`` (the default) or ``v2``."""
        return str(self.properties.get("delta.checkpointPolicy", "classic")).lower()

    @property
    def v2_checkpoints(self) -> bool:
        """Whether checkpoints are written as V2 ("V2 Checkpoint Table Feature")."""
        return self.checkpoint_policy == "v2" or "v2Checkpoint" in self.writer_features

    @property
    def checkpoint_part_size(self) -> int | None:
        value = self.properties.get("delta.checkpoint.partSize")
        return None if value is None else int(value)

    @property
    def checkpoint_stats_as_json(self) -> bool:
        return bool_property(self.properties, "delta.checkpoint.writeStatsAsJson", True)

    @property
    def checkpoint_stats_as_struct(self) -> bool:
        return bool_property(self.properties, "delta.checkpoint.writeStatsAsStruct", False)

    @property
    def deleted_file_retention_ms(self) -> int:
        return interval_property_ms(self.properties, DELETED_FILE_RETENTION) or 0

    @property
    def log_retention_ms(self) -> int:
        return interval_property_ms(self.properties, LOG_RETENTION) or 0

    @property
    def set_transaction_retention_ms(self) -> int | None:
        return interval_property_ms(self.properties, SET_TRANSACTION_RETENTION)

    @property
    def expired_log_cleanup(self) -> bool:
        return bool_property(self.properties, "delta.enableExpiredLogCleanup", default=True)

    @property
    def vacuum_logging(self) -> bool:
        return bool_property(self.properties, "delta.vacuum.logging.enabled", default=True)

    def file_layout(self, hidden_columns: Sequence[str] = ()) -> FileLayout:
        """How rows become this table's data files (columns, partition folders, codec, statistics); with
        ``hidden_columns`` (row tracking's materialized ids, which OPTIMIZE keeps) written after the table's
        columns, and materialized partition columns after those."""
        if not hidden_columns and self._layout is not None:
            return self._layout
        layout = FileLayout.of(
            self.schema, self.metadata.partition_columns, self.column_mapping_mode, self.stats_schema,
            compression=self.parquet_compression, data_page_version=self.parquet_data_page_version,
            hidden_columns=hidden_columns, materialize_partitions=self.materialize_partition_columns,
            iceberg_compat_version=self.iceberg_compat_version,
        )  # fmt: skip
        if not hidden_columns:
            self._layout = layout
        return layout

    def check_data_writable(self, where: str) -> None:
        """Refuse, by name, to write new data files into a table whose schema no file can hold ("Void
        Type") or whose ``delta.parquet.*`` properties this writer cannot follow."""
        shapes = void_shapes(self.schema)
        if shapes:
            raise InvalidCommitError(
                f"{where} cannot take new data files: its schema has {'; '.join(shapes)} (void columns are "
                "never written to data files); change those columns to another type first"
            )
        _ = self.parquet_compression, self.parquet_data_page_version

    @cached_property
    def parquet_compression(self) -> str:
        """The codec new Parquet files are written with (``delta.parquet.compression.codec``, "Table
        Properties": zstd when absent), as pyarrow names it; an unknown codec is refused by name."""
        value = str(self.properties.get(PARQUET_COMPRESSION, DEFAULT_CODEC)).strip().lower()
        if value not in _CODECS:
            raise InvalidCommitError(
                f"table property {PARQUET_COMPRESSION}={value!r} is not a codec this writer knows "
                f"(one of {', '.join(sorted(_CODECS))})"
            )
        return _CODECS[value]

    @cached_property
    def parquet_data_page_version(self) -> str:
        """``delta.parquet.format.version``: "1.0" (DataPageV1, the default) or "2.0" (DataPageV2), as
        pyarrow names them; anything but ``1.0.0`` or ``2.MINOR.PATCH`` is refused, as the spec asks."""
        value = str(self.properties.get(PARQUET_FORMAT_VERSION, "1.0.0")).strip()
        if not _FORMAT_VERSION.fullmatch(value):
            raise InvalidCommitError(
                f"table property {PARQUET_FORMAT_VERSION}={value!r} is not 1.0.0 or 2.MINOR.PATCH"
            )
        return "1.0" if value == "1.0.0" else "2.0"
