"""Where UniForm's Iceberg metadata lives under the table, and which metadata file is the newest.

Iceberg's "Hadoop table" convention, which a reader given only a path understands: table metadata files
``metadata/v1.metadata.json``, ``v2``, ... each created only if absent (``storage.create_if_absent``), and
``metadata/version-hint.text`` naming the newest; manifests and manifest lists beside them. The newest is
found as Iceberg's ``HadoopTableOperations`` finds it: from the hint, then the next numbers while they exist
(a converter that published a file but not yet the hint is not missed); without a usable hint, by a listing.

What the status needs (the newest file and the Delta version it converts, its ``delta-version`` property)
is read as plain JSON, so the status works without the ``iceberg`` extra; the metadata itself is written
through pyiceberg (``conversion``).
"""

from __future__ import annotations

import json
import os
import posixpath
import re
from dataclasses import dataclass
from typing import Any

from ..base.errors import UniformError
from ..files.storage import LogStore

METADATA_DIR = "metadata"
VERSION_HINT = "version-hint.text"
# Delta Spark's properties of the converted table: the Delta version and commit timestamp it holds.
DELTA_VERSION = "delta-version"
DELTA_TIMESTAMP = "delta-timestamp"
_METADATA_FILE = re.compile(r"v(\d+)\.metadata\.json")


def metadata_file_name(number: int) -> str:
    return f"v{number}.metadata.json"


def metadata_path(store: LogStore, name: str) -> str:
    """The path of ``metadata/<name>`` on the table's filesystem."""
    return store.table_file(posixpath.join(METADATA_DIR, name))


def table_location(store: LogStore) -> str:
    """The table root as Iceberg readers name it: the table's URI (an object store's keeps its account or
    bucket as given), or ``file://`` and the absolute path of a local table."""
    if store.protocol in ("file", "local"):
        return "file://" + os.path.abspath(store.root)
    if "://" in store.uri:
        return store.uri.rstrip("/")
    return f"{store.protocol}://{store.root}"


def location_of(store: LogStore, relative: str) -> str:
    """The URI of ``relative`` (a path under the table root) as the metadata records it."""
    return f"{table_location(store)}/{relative.lstrip('/')}"


def fs_path(store: LogStore, location: str) -> str:
    """A location the metadata records, as a path on the table's filesystem."""
    return store.fs._strip_protocol(location)


@dataclass(frozen=True)
class NewestMetadata:
    """The newest table metadata file: its number ``N`` (``vN.metadata.json``), path, URI and bytes."""

    number: int
    path: str
    location: str
    data: bytes

    @property
    def document(self) -> dict[str, Any]:
        """The file as JSON; ``UniformError`` (rule ``metadata``) when it is not Iceberg table metadata,
        e.g. a file someone else put at that name: a converter may not publish past it."""
        try:
            doc = json.loads(self.data)
        except ValueError:
            doc = None
        if not isinstance(doc, dict) or not isinstance(doc.get("format-version"), int):
            raise UniformError(
                f"{self.location} is not Iceberg table metadata, so no Iceberg metadata can be published "
                "after it: move it out of the metadata folder, then convert again "
                "(DeltaTable.convert_to_iceberg())",
                rule="metadata",
            )
        return doc

    @property
    def delta_version(self) -> int | None:
        """The Delta version this metadata converts (its ``delta-version`` property), if it says."""
        value = (self.document.get("properties") or {}).get(DELTA_VERSION)
        try:
            return int(value) if value is not None else None
        except ValueError:
            return None


def newest_metadata(store: LogStore) -> NewestMetadata | None:
    """The newest ``vN.metadata.json`` under ``metadata/``, or ``None`` when there is none yet."""
    folder = store.table_file(METADATA_DIR)
    if store.protocol not in ("file", "local"):
        store.fs.invalidate_cache(folder)  # a listing cached by s3fs or adlfs would hide a new file
    number = _hinted(store)
    if number is None or not store.fs.exists(metadata_path(store, metadata_file_name(number))):
        number = _listed(store, folder)
    if number is None:
        return None
    while store.fs.exists(metadata_path(store, metadata_file_name(number + 1))):
        number += 1
    return metadata_at(store, number)


def metadata_at(store: LogStore, number: int) -> NewestMetadata | None:
    """``vN.metadata.json`` for ``number`` N, or ``None`` when there is no such file."""
    name = metadata_file_name(number)
    path = metadata_path(store, name)
    try:
        data = store.fs.cat_file(path)
    except FileNotFoundError:
        return None
    return NewestMetadata(number, path, location_of(store, f"{METADATA_DIR}/{name}"), data)


def _hinted(store: LogStore) -> int | None:
    try:
        text = store.fs.cat_file(metadata_path(store, VERSION_HINT)).decode("utf-8", "replace").strip()
    except FileNotFoundError:
        return None
    return int(text) if text.isdigit() and int(text) > 0 else None


def _listed(store: LogStore, folder: str) -> int | None:
    try:
        names = store.fs.ls(folder, detail=False)
    except FileNotFoundError:
        return None
    numbers = [int(m.group(1)) for n in names if (m := _METADATA_FILE.fullmatch(posixpath.basename(n)))]
    return max(numbers, default=None)


def write_version_hint(store: LogStore, number: int) -> None:
    """Point ``version-hint.text`` at ``number`` unless it already names a newer file. Readers probe past
    the hint, so a hint left one behind by a concurrent converter only costs them a request."""
    current = _hinted(store)
    if current is not None and current >= number:
        return
    store.write_replace(metadata_path(store, VERSION_HINT), str(number).encode())
