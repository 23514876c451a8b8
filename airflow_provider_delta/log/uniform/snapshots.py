"""Iceberg table metadata built up one change at a time: new schemas and snapshots of data files.

``IcebergMetadata`` holds the table metadata a conversion starts from and applies changes to it with
pyiceberg's own updates (``update_table_metadata``): a Delta schema change becomes a new Iceberg schema
with the same ids, and a Delta commit's file actions one snapshot, as Delta Spark's converter makes them:
an append of new files, a delete of removed ones, an overwrite of both, a replace (OPTIMIZE's rewrite:
no data changed), or the whole file list when the metadata is built from scratch. New files go into new
manifests; a removed file is marked deleted in a rewrite of the manifest that listed it; untouched
manifests carry over. Every snapshot's summary records the Delta version it holds (``delta-version``), so
that Iceberg time travel maps back to Delta.

Manifests and manifest lists are written as they are built (unique names beside the metadata files); only
publishing the metadata file (``conversion``) makes them part of the table.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..base.errors import UniformError
from ..files.storage import LogStore
from .iceberg_schema import PARTITION_FIELD_BASE, same_partitioning
from .metadata_files import DELTA_VERSION, METADATA_DIR, location_of, table_location

if TYPE_CHECKING:
    from pyiceberg.io import FileIO
    from pyiceberg.manifest import DataFile, ManifestFile, ManifestWriter
    from pyiceberg.partitioning import PartitionSpec
    from pyiceberg.schema import Schema
    from pyiceberg.table.metadata import TableMetadata

# Entries per manifest when a whole file list is written: manifests stay small enough to read in parallel.
MANIFEST_ENTRIES = 50_000
# Every commit adds a manifest: past this many (Iceberg's commit.manifest.min-count-to-merge), the carried
# ones are merged, so readers and the next delete do not open a manifest per commit ever made.
MERGE_MANIFESTS_AT = 100
_AVRO_CODEC = "deflate"  # pyiceberg's and Iceberg Java's default for manifests


class FilesNotInIceberg(Exception):
    """Delta removed files the Iceberg snapshot does not list: the two have drifted apart, so the
    conversion builds the whole file list instead of applying the commit."""


@dataclass
class IcebergMetadata:
    """Table metadata being built, over the table's ``FileIO``. ``previous`` is the location of the
    metadata file it was read from (recorded in the new file's metadata log)."""

    store: LogStore
    io: FileIO
    metadata: TableMetadata
    previous: str | None = None
    _logged: bool = field(default=False, repr=False)

    @classmethod
    def new(cls, store: LogStore, io: FileIO, schema: Schema, spec: PartitionSpec, table_uuid: uuid.UUID,
            last_column_id: int) -> IcebergMetadata:  # fmt: skip
        """The metadata of a new table: one schema with the Delta ids, one spec, no snapshot yet."""
        from pyiceberg.table.metadata import TableMetadataV2
        from pyiceberg.table.sorting import UNSORTED_SORT_ORDER

        metadata = TableMetadataV2(
            location=table_location(store), table_uuid=table_uuid, schemas=[schema],
            current_schema_id=schema.schema_id, last_column_id=max(last_column_id, schema.highest_field_id),
            partition_specs=[spec], default_spec_id=spec.spec_id,
            last_partition_id=PARTITION_FIELD_BASE + len(spec.fields) - 1,
            sort_orders=[UNSORTED_SORT_ORDER], default_sort_order_id=UNSORTED_SORT_ORDER.order_id,
        )  # fmt: skip
        return cls(store, io, metadata)

    def apply(self, *updates: Any) -> None:
        from pyiceberg.table.update import update_table_metadata

        # The first change records the file this metadata was read from in the metadata log.
        previous = None if self._logged else self.previous
        self.metadata = update_table_metadata(self.metadata, tuple(updates), metadata_location=previous)
        self._logged = True

    # -- schemas and partitioning ------------------------------------------------------------------------
    def use_schema(self, schema: Schema, spec: PartitionSpec, where: str) -> None:
        """Make ``schema`` current (the one an existing schema equal to it has, else a new one); a
        partitioning other than the table's is refused: Iceberg's spec would have to evolve with it."""
        from pyiceberg.schema import Schema as IcebergSchema
        from pyiceberg.table.update import AddSchemaUpdate, SetCurrentSchemaUpdate

        if not same_partitioning(self.metadata.spec(), spec):
            raise UniformError(
                f"{where}: the partition columns changed, and UniForm's Iceberg metadata keeps one partition "
                "spec (IcebergCompatV2 forbids changing them): turn UniForm off, or recreate the table",
                rule="partitionSpec",
            )
        wanted = schema.as_struct()
        if self.metadata.schema().as_struct() == wanted:
            return
        for known in self.metadata.schemas:
            if known.as_struct() == wanted:
                self.apply(SetCurrentSchemaUpdate(schema_id=known.schema_id))
                return
        next_id = max(s.schema_id for s in self.metadata.schemas) + 1
        self.apply(AddSchemaUpdate(schema=IcebergSchema(*schema.fields, schema_id=next_id)),
                   SetCurrentSchemaUpdate(schema_id=-1))  # fmt: skip

    def set_properties(self, properties: dict[str, str]) -> None:
        from pyiceberg.table.update import SetPropertiesUpdate

        changed = {k: v for k, v in properties.items() if self.metadata.properties.get(k) != v}
        if changed:
            self.apply(SetPropertiesUpdate(updates=changed))

    def expire_snapshots(self, older_than_ms: int, keep: int) -> int:
        """Drop from the metadata the snapshots older than ``older_than_ms`` and all but the newest ``keep``
        (never the current one), so that the metadata file, written again by every conversion, does not
        grow with the table's history; returns how many. Only metadata: their manifests stay as orphans,
        and the data files are VACUUM's, whose horizon ``older_than_ms`` is (a snapshot older than it may
        name files already deleted)."""
        from pyiceberg.table.update import RemoveSnapshotsUpdate

        current = self.metadata.current_snapshot_id
        ordered = sorted(self.metadata.snapshots, key=lambda s: (s.timestamp_ms, s.sequence_number or 0))
        newest = {s.snapshot_id for s in ordered[-keep:]} if keep > 0 else set()
        gone = [s.snapshot_id for s in ordered if s.snapshot_id != current
                and (s.timestamp_ms < older_than_ms or s.snapshot_id not in newest)]  # fmt: skip
        if gone:
            self.apply(RemoveSnapshotsUpdate(snapshot_ids=gone))
        return len(gone)

    # -- snapshots ---------------------------------------------------------------------------------------
    def add_snapshot(
        self,
        operation: str,
        delta_version: int,
        added: Iterable[list[DataFile]],
        removed: frozenset[str] | set[str] = frozenset(),
        *,
        whole: bool = False,
    ) -> None:
        """One snapshot: ``added`` files (in chunks) and ``removed`` paths (full URIs) applied to the
        current one, or with ``whole`` the complete file list replacing it. ``operation`` is Iceberg's
        (``append``, ``delete``, ``overwrite``, ``replace``)."""
        from pyiceberg.manifest import write_manifest_list
        from pyiceberg.table.refs import MAIN_BRANCH, SnapshotRefType
        from pyiceberg.table.snapshots import Snapshot, SnapshotSummaryCollector
        from pyiceberg.table.update import AddSnapshotUpdate, SetSnapshotRefUpdate

        md = self.metadata
        parent = md.current_snapshot()
        snapshot_id = md.new_snapshot_id()
        sequence = md.next_sequence_number()
        commit = uuid.uuid4()
        summary = SnapshotSummaryCollector()
        manifests = self._added_manifests(snapshot_id, commit, added, summary)
        if parent is not None and not whole:
            carried = parent.manifests(self.io)
            carried = self._carried_manifests(carried, snapshot_id, commit, removed, summary)
            if len(manifests) + len(carried) > MERGE_MANIFESTS_AT:
                carried = self._merged(carried, snapshot_id, commit)
            manifests += carried
        parent_id = parent.snapshot_id if parent is not None else None
        manifest_list = location_of(self.store, f"{METADATA_DIR}/snap-{snapshot_id}-0-{commit}.avro")
        output = self.io.new_output(manifest_list)
        with write_manifest_list(format_version=2, output_file=output, snapshot_id=snapshot_id,
                                 parent_snapshot_id=parent_id, sequence_number=sequence,
                                 avro_compression=_AVRO_CODEC) as writer:  # fmt: skip
            writer.add_manifests(manifests)
        previous = None if whole or parent is None else parent.summary
        snapshot = Snapshot(
            snapshot_id=snapshot_id, parent_snapshot_id=parent_id, sequence_number=sequence,
            manifest_list=manifest_list, schema_id=md.current_schema_id,
            summary=_summary(operation, summary, delta_version, previous),
        )  # fmt: skip
        main = SetSnapshotRefUpdate(
            ref_name=MAIN_BRANCH, type=SnapshotRefType.BRANCH, snapshot_id=snapshot_id
        )
        self.apply(AddSnapshotUpdate(snapshot=snapshot), main)

    def _writer(self, snapshot_id: int, commit: uuid.UUID, number: int) -> ManifestWriter:
        from pyiceberg.manifest import write_manifest

        path = location_of(self.store, f"{METADATA_DIR}/{commit}-m{number}.avro")
        return write_manifest(format_version=2, spec=self.metadata.spec(), schema=self.metadata.schema(),
                              output_file=self.io.new_output(path), snapshot_id=snapshot_id,
                              avro_compression=_AVRO_CODEC)  # fmt: skip

    def _added_manifests(self, snapshot_id: int, commit: uuid.UUID, added: Iterable[list[DataFile]],
                         summary: Any) -> list[ManifestFile]:  # fmt: skip
        """New files as ADDED entries, streamed into manifests of at most ``MANIFEST_ENTRIES``."""
        from pyiceberg.manifest import ManifestEntry, ManifestEntryStatus

        schema, spec = self.metadata.schema(), self.metadata.spec()

        def add(writer: ManifestWriter, data_file: DataFile) -> None:
            writer.add(ManifestEntry.from_args(status=ManifestEntryStatus.ADDED, snapshot_id=snapshot_id,
                                               data_file=data_file))  # fmt: skip
            summary.add_file(data_file, schema=schema, partition_spec=spec)

        return self._chunked(snapshot_id, commit, 0, (f for chunk in added for f in chunk), add)

    def _carried_manifests(self, manifests: list[ManifestFile], snapshot_id: int, commit: uuid.UUID,
                           removed: set[str], summary: Any) -> list[ManifestFile]:  # fmt: skip
        """The parent's manifests with live files, those listing a removed file rewritten with it marked
        deleted (the rest of their entries kept as existing)."""
        out: list[ManifestFile] = []
        found: set[str] = set()
        schema, spec = self.metadata.schema(), self.metadata.spec()
        number = 1_000_000  # after any number ``_added_manifests`` used
        for manifest in manifests:
            if not (manifest.has_added_files() or manifest.has_existing_files()):
                continue  # only entries deleted by an earlier snapshot: nothing live to carry
            entries = manifest.fetch_manifest_entry(self.io, discard_deleted=True) if removed else []
            hits = [e for e in entries if e.data_file.file_path in removed]
            if not hits:
                out.append(manifest)
                continue
            with self._writer(snapshot_id, commit, number) as writer:
                for entry in entries:
                    if entry.data_file.file_path in removed:
                        writer.delete(entry)
                        summary.remove_file(entry.data_file, schema=schema, partition_spec=spec)
                        found.add(entry.data_file.file_path)
                    else:
                        writer.existing(entry)
            out.append(writer.to_manifest_file())
            number += 1
        if missing := removed - found:
            raise FilesNotInIceberg(f"{len(missing)} removed files, e.g. {sorted(missing)[0]}")
        return out

    def _merged(
        self, manifests: list[ManifestFile], snapshot_id: int, commit: uuid.UUID
    ) -> list[ManifestFile]:
        """The live entries of ``manifests`` rewritten as existing entries of as few manifests as
        ``MANIFEST_ENTRIES`` allows (Iceberg's merge append)."""
        entries = (e for m in manifests for e in m.fetch_manifest_entry(self.io, discard_deleted=True))
        return self._chunked(snapshot_id, commit, 2_000_000, entries, lambda writer, e: writer.existing(e))

    def _chunked(self, snapshot_id: int, commit: uuid.UUID, first: int, items: Iterable[Any],
                 write: Callable[[ManifestWriter, Any], None]) -> list[ManifestFile]:  # fmt: skip
        """``items`` written by ``write`` into manifests of at most ``MANIFEST_ENTRIES`` entries each,
        numbered from ``first``; a failure half-way leaves the open manifest unclosed, never written."""
        out: list[ManifestFile] = []
        writer: ManifestWriter | None = None
        count = 0
        for item in items:
            if writer is None:
                writer = self._writer(snapshot_id, commit, first + len(out)).__enter__()
            write(writer, item)
            count += 1
            if count == MANIFEST_ENTRIES:
                out.append(_closed(writer))
                writer, count = None, 0
        if writer is not None:
            out.append(_closed(writer))
        return out


def _closed(writer: ManifestWriter) -> ManifestFile:
    writer.__exit__(None, None, None)
    return writer.to_manifest_file()


def _summary(operation: str, collector: Any, delta_version: int, previous: Any) -> Any:
    """The snapshot summary: what changed, running totals over the parent's (from zero for a whole file
    list), and the Delta version. pyiceberg totals append, delete and overwrite; a replace adds up alike."""
    from pyiceberg.table.snapshots import Operation, Summary, update_snapshot_summaries

    counted = Operation.OVERWRITE if operation == "replace" else Operation(operation)
    summary = update_snapshot_summaries(Summary(operation=counted, **collector.build(),
                                                **{DELTA_VERSION: str(delta_version)}), previous)  # fmt: skip
    return Summary(operation=Operation(operation), **summary.additional_properties)
