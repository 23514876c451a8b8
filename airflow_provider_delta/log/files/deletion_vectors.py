"""Deletion vectors ("Deletion Vectors", "Deletion Vector Descriptor", "Deletion Vector File Storage Format"):
which rows of a data file are deleted, where that set is stored, and how to read and write it.

A descriptor (``add.deletionVector``) points at a set of row indexes: inline in the log (``i``: Z85 text),
in a file beside the data named by a Z85-encoded UUID (``u``: after an optional random prefix, a folder),
or in a file at an absolute path (``p``). A file holds a format version byte, then for each vector its
big-endian size, the bitmap and a CRC-32 of the bitmap; several vectors may share one file. The bitmap
itself ("Deletion Vector Format") is encoded and decoded in :mod:`.deletion_vector_format`.

Reading checks everything the format lets a reader check and raises :class:`DeletionVectorError` naming
the vector and the data file it belongs to: a reader that went on would return rows the table deleted.
Writing stays under the table root: a ``u`` file's name is a fresh UUID in the root or a random
alphanumeric folder of it, so it can neither overwrite nor escape.
"""

from __future__ import annotations

import posixpath
import secrets
import string
import uuid
import zlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote

import fsspec
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..base.arrow_utils import decode_uri_paths
from ..base.errors import (
    GONE_BECAUSE,
    CorruptLogError,
    DataFileNotFoundError,
    DeletionVectorError,
    InvalidCommitError,
    UnsupportedFeatureError,
)
from .deletion_vector_format import as_row_indexes, decode_bitmap, encode_bitmap, z85_decode, z85_encode

_HEX = np.frombuffer(b"0123456789abcdef", np.uint8)
_UUID_HEX_POS = [i for i in range(36) if i not in (8, 13, 18, 23)]

__all__ = [
    "FILE_FORMAT_VERSION",
    "DeletionVectorDescriptor",
    "DeletionVectorError",
    "decode_bitmap",
    "deleted_rows",
    "dv_file_path",
    "encode_bitmap",
    "inline_descriptor",
    "read_dv_bytes",
    "union_deleted_rows",
    "write_deletion_vectors",
    "z85_decode",
    "z85_encode",
]

FILE_FORMAT_VERSION = 1  # "Deletion Vector File Storage Format": the first byte of every DV file
_UUID_CHARS = 20  # a 16-byte UUID is 20 Z85 characters ("Deletion Vector Descriptor Schema")
_FRAME_BYTES = 8  # per stored vector: a 4-byte size before the bitmap and a 4-byte CRC-32 after it
_INT_MAX = 2**31 - 1  # ``offset`` and ``sizeInBytes`` are Ints in the descriptor schema
_PREFIX_CHARS = string.ascii_letters + string.digits


@dataclass(frozen=True)
class DeletionVectorDescriptor:
    """The ``deletionVector`` struct of an ``add`` or ``remove`` ("Deletion Vector Descriptor Schema").

    ``max_row_index`` is the largest deleted row index: known to whoever encoded the vector and checked by
    readers when given, but, as in Delta Spark, never written to the log (:meth:`to_json` leaves it out).
    """

    storage_type: str
    path_or_inline_dv: str
    size_in_bytes: int
    cardinality: int
    offset: int | None = None
    max_row_index: int | None = None

    @classmethod
    def from_json(cls, d: Mapping[str, Any], *, data_file: str | None = None) -> DeletionVectorDescriptor:
        """From a JSON ``deletionVector`` object or a row of ``Snapshot.files`` (Arrow ``to_pylist``)."""
        try:
            kind, value = d["storageType"], d["pathOrInlineDv"]
            if not isinstance(kind, str) or not isinstance(value, str):
                raise TypeError("storageType and pathOrInlineDv must be strings")
            optional = {k: None if d.get(k) is None else _integer(d[k], k) for k in ("offset", "maxRowIndex")}
            size, cardinality = (
                _integer(d["sizeInBytes"], "sizeInBytes"),
                _integer(d["cardinality"], "cardinality"),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise DeletionVectorError(
                f"malformed deletion vector descriptor {dict(d)!r}: {exc}", data_file=data_file
            ) from None
        if size < 0 or cardinality < 0:
            raise DeletionVectorError(
                f"deletion vector descriptor with sizeInBytes {size} and cardinality "
                f"{cardinality}: neither may be negative",
                data_file=data_file,
            )
        return cls(kind, value, size, cardinality, optional["offset"], optional["maxRowIndex"])

    def to_json(self) -> dict[str, Any]:
        """The descriptor as the log records it (``offset`` only for stored vectors, no ``maxRowIndex``)."""
        out: dict[str, Any] = {"storageType": self.storage_type, "pathOrInlineDv": self.path_or_inline_dv}
        if self.offset is not None:
            out["offset"] = self.offset
        out["sizeInBytes"] = self.size_in_bytes
        out["cardinality"] = self.cardinality
        return out

    @property
    def unique_id(self) -> str:
        """``uniqueId`` ("Derived Fields"): tells apart the same data file with different vectors."""
        base = self.storage_type + self.path_or_inline_dv
        return base if self.offset is None else f"{base}@{self.offset}"


def _integer(value: Any, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int | np.integer):
        raise TypeError(f"{name} must be an integer, got {value!r}")
    return int(value)


def _descriptor(
    descriptor: Mapping[str, Any] | DeletionVectorDescriptor, data_file: str | None
) -> DeletionVectorDescriptor:
    if isinstance(descriptor, DeletionVectorDescriptor):
        return descriptor
    return DeletionVectorDescriptor.from_json(descriptor, data_file=data_file)


# -- where a vector is ---------------------------------------------------------------------------------
def dv_file_path(
    descriptor: Mapping[str, Any] | DeletionVectorDescriptor, table_root: str, *, data_file: str | None = None
) -> str:
    """``absolutePath`` ("Derived Fields"): ``<root>/<random prefix>/deletion_vector_<uuid>.bin`` for
    ``u``, the path itself for ``p``. ``table_root`` is the root as ``fs`` names it (no scheme).
    Only ``storageType`` and ``pathOrInlineDv`` are needed."""
    if isinstance(descriptor, Mapping):
        descriptor = DeletionVectorDescriptor.from_json(
            {"sizeInBytes": 0, "cardinality": 0, **descriptor}, data_file=data_file
        )
    d = descriptor
    if d.storage_type == "p":
        return d.path_or_inline_dv
    if d.storage_type == "i":
        raise DeletionVectorError(
            "an inline deletion vector has no file", dv_file="inline", data_file=data_file
        )
    if d.storage_type != "u":
        raise UnsupportedFeatureError(
            f"deletion vector storage type {d.storage_type!r} of data file {data_file or '?'} "
            "(known: u, i, p)",
            features=("deletionVectors",),
        )
    value = d.path_or_inline_dv
    prefix, encoded = value[:-_UUID_CHARS], value[-_UUID_CHARS:]
    if len(value) < _UUID_CHARS or prefix.startswith("/") or ".." in prefix.split("/"):
        raise DeletionVectorError(
            f"deletion vector id {value!r} is not an optional folder prefix and a 20-character Z85 UUID "
            "inside the table root",
            dv_file=value,
            data_file=data_file,
        )
    try:
        name = f"deletion_vector_{uuid.UUID(bytes=z85_decode(encoded))}.bin"
    except DeletionVectorError as exc:
        raise exc.located(value, data_file) from None
    return posixpath.join(table_root, prefix, name) if prefix else posixpath.join(table_root, name)


def _location(d: DeletionVectorDescriptor, table_root: str, data_file: str | None) -> str:
    """How errors name a vector: ``inline``, or its file and offset."""
    if d.storage_type == "i":
        return "inline"
    return f"{dv_file_path(d, table_root, data_file=data_file)} at offset {d.offset or 0}"


def _filesystem_of(path: str, fs: Any) -> tuple[Any, str]:
    """A ``p`` vector may live on any store: its path is a URI, escaped as ``add.path`` is."""
    if "://" in path or path.startswith("file:"):
        protocols = fs.protocol if isinstance(fs.protocol, tuple | list) else (fs.protocol,)
        options = fs.storage_options if path.split(":", 1)[0] in protocols else {}
        return fsspec.core.url_to_fs(unquote(path), **options)
    return fs, unquote(path)


# -- reading -------------------------------------------------------------------------------------------
def read_dv_bytes(
    descriptor: Mapping[str, Any] | DeletionVectorDescriptor,
    table_root: str,
    fs: Any,
    *,
    data_file: str | None = None,
) -> bytes:
    """The serialized bitmap of a vector: decoded inline text, or the checked bytes of its stored frame.

    A stored vector is read from ``offset`` as size, bitmap, CRC-32; the size must equal ``sizeInBytes``,
    the checksum must match, and the file's first byte must be format version 1.
    """
    d = _descriptor(descriptor, data_file)
    if d.storage_type == "i":
        return _inline_bytes(d, data_file)
    path = dv_file_path(d, table_root, data_file=data_file)
    offset = 0 if d.offset is None else d.offset  # "Interpret as 0 if absent"

    def fail(reason: str) -> DeletionVectorError:
        return DeletionVectorError(reason, dv_file=f"{path} at offset {offset}", data_file=data_file)

    if offset < 1:
        raise fail(
            f"offset {offset} is not where a vector can start: byte 0 of the file is its format version"
        )
    try:
        file_fs, file_path = _filesystem_of(path, fs)
        with file_fs.open(file_path, "rb") as fh:
            version = fh.read(1)
            fh.seek(offset)
            frame = fh.read(d.size_in_bytes + _FRAME_BYTES)
    except FileNotFoundError:
        # Not a corrupt log: VACUUM deletes the vectors of files no version inside the retention needs.
        of = f" of data file {data_file}" if data_file else ""
        raise DataFileNotFoundError(
            f"the deletion vector file {path}{of} is gone ({GONE_BECAUSE})", path=path
        ) from None
    except (OSError, ValueError, ImportError) as exc:  # ValueError, ImportError: fsspec's unknown protocols
        raise fail(f"the deletion vector file cannot be read: {exc!r}") from exc
    if not version:
        raise fail("the deletion vector file is empty")
    if version[0] != FILE_FORMAT_VERSION:
        raise fail(
            f"the file has format version {version[0]}; this reader knows version {FILE_FORMAT_VERSION}"
        )
    if not frame:
        raise fail(f"offset {offset} is past the end of the file")
    if len(frame) >= 4 and (stored := int.from_bytes(frame[:4], "big", signed=True)) != d.size_in_bytes:
        raise fail(
            f"the file says the vector has {stored} bytes, its descriptor's sizeInBytes {d.size_in_bytes}"
        )
    if len(frame) < d.size_in_bytes + _FRAME_BYTES:
        raise fail(
            f"the file is cut short: {len(frame)} of the vector's {d.size_in_bytes + _FRAME_BYTES} bytes "
            "(size, bitmap, checksum) are there"
        )
    data = frame[4 : 4 + d.size_in_bytes]
    stored_crc, crc = int.from_bytes(frame[-4:], "big"), zlib.crc32(data)
    if stored_crc != crc:
        raise fail(f"CRC-32 checksum mismatch: the file says {stored_crc:#010x}, the bitmap's is {crc:#010x}")
    return data


def _inline_bytes(d: DeletionVectorDescriptor, data_file: str | None) -> bytes:
    """Z85 text padded to whole 4-byte words; ``sizeInBytes`` says how many bytes are the bitmap."""
    text, size = d.path_or_inline_dv, d.size_in_bytes
    needed = -(-size // 4) * 5
    if len(text) != needed:
        short = "is cut short: it has" if len(text) < needed else "has"
        raise DeletionVectorError(
            f"the inline deletion vector {short} {len(text)} Z85 characters; "
            f"sizeInBytes {size} needs {needed}",
            dv_file="inline",
            data_file=data_file,
        )
    try:
        return z85_decode(text)[:size]
    except DeletionVectorError as exc:
        raise exc.located("inline", data_file) from None


def deleted_rows(
    descriptor: Mapping[str, Any] | DeletionVectorDescriptor,
    table_root: str,
    fs: Any,
    *,
    data_file: str | None = None,
) -> np.ndarray:
    """The row indexes a descriptor marks as deleted, sorted (numpy ``uint64``).

    ``table_root`` is the root as ``fs`` names it; ``data_file`` (the ``add.path``) is named in errors.
    The decoded set must hold exactly ``cardinality`` rows, none above ``maxRowIndex`` when it is given.
    """
    d = _descriptor(descriptor, data_file)
    data = read_dv_bytes(d, table_root, fs, data_file=data_file)
    where = _location(d, table_root, data_file)
    try:
        rows = decode_bitmap(data)
    except DeletionVectorError as exc:
        raise exc.located(where, data_file) from None
    if len(rows) != d.cardinality:
        raise DeletionVectorError(
            f"the vector holds {len(rows)} row indexes, its descriptor's cardinality says {d.cardinality}",
            dv_file=where,
            data_file=data_file,
        )
    if d.max_row_index is not None and len(rows) and int(rows[-1]) > d.max_row_index:
        raise DeletionVectorError(
            f"row index {int(rows[-1])} is above the descriptor's maxRowIndex {d.max_row_index}",
            dv_file=where,
            data_file=data_file,
        )
    return rows


def union_deleted_rows(
    existing: Mapping[str, Any] | DeletionVectorDescriptor | None,
    rows: Iterable[int] | np.ndarray,
    table_root: str,
    fs: Any,
    *,
    data_file: str | None = None,
) -> np.ndarray:
    """The rows of a file's existing vector (if any) together with newly deleted ``rows``, sorted, each
    once: what a new vector for that file must hold, as rows once deleted stay deleted."""
    new = as_row_indexes(rows)
    if existing is None:
        return new
    return np.union1d(deleted_rows(existing, table_root, fs, data_file=data_file), new)


# -- writing -------------------------------------------------------------------------------------------
def inline_descriptor(rows: Iterable[int] | np.ndarray) -> DeletionVectorDescriptor:
    """A vector stored in the log itself (``i``): no file to write, for small sets of rows."""
    rows = as_row_indexes(rows)
    data = encode_bitmap(rows)
    return DeletionVectorDescriptor("i", z85_encode(data), len(data), len(rows), None, _max_row(rows))


def write_deletion_vectors(
    fs: Any,
    table_root: str,
    vectors: Iterable[Iterable[int] | np.ndarray],
    *,
    random_prefix_length: int = 0,
) -> list[DeletionVectorDescriptor]:
    """Write vectors (one set of row indexes per data file) into one new file under ``table_root``, as
    Delta Spark packs them; returns their ``u`` descriptors, in the order given.

    The file is ``deletion_vector_<new uuid>.bin``, in a folder of ``random_prefix_length`` random
    letters and digits when asked (object stores spread keys by prefix). Nothing is written for no vectors.
    The caller commits the descriptors; until then the file is unreferenced, which VACUUM may delete.
    """
    if not 0 <= random_prefix_length <= 64:
        raise InvalidCommitError(f"random_prefix_length must be 0..64, got {random_prefix_length}")
    encoded = [(rows, encode_bitmap(rows)) for rows in map(as_row_indexes, vectors)]
    if not encoded:
        return []
    prefix = "".join(secrets.choice(_PREFIX_CHARS) for _ in range(random_prefix_length))
    name = prefix + z85_encode(uuid.uuid4().bytes)
    blob = bytearray([FILE_FORMAT_VERSION])
    descriptors = []
    for rows, data in encoded:
        offset = len(blob)
        if offset + len(data) + _FRAME_BYTES > _INT_MAX:
            raise InvalidCommitError("deletion vectors too large for one file: offsets are 32-bit in the log")
        blob += len(data).to_bytes(4, "big") + data + zlib.crc32(data).to_bytes(4, "big")
        descriptors.append(DeletionVectorDescriptor("u", name, len(data), len(rows), offset, _max_row(rows)))
    path = dv_file_path(descriptors[0], table_root)
    fs.makedirs(posixpath.dirname(path), exist_ok=True)
    with fs.open(path, "wb") as fh:
        fh.write(bytes(blob))
    return descriptors


def _max_row(rows: np.ndarray) -> int | None:
    return int(rows[-1]) if len(rows) else None


# -- many descriptors at once ---------------------------------------------------------------------------
def stored_dv_paths(dv: pa.StructArray) -> list[pa.Array]:
    """Deletion-vector files ("Deletion Vector Files"): ``u`` is a UUID (Z85, after an optional random
    prefix that names a sub-directory) relative to the root, ``p`` an absolute URI, ``i`` inline (no file).

    Vectorised over a ``deletionVector`` column (VACUUM keeps the files of millions of adds): the ``u`` paths
    root-relative, the ``p`` ones decoded; what a descriptor cannot name is a ``CorruptLogError``."""
    if dv.null_count == len(dv):
        return []
    kind = pc.fill_null(dv.field("storageType"), "")
    value = dv.field("pathOrInlineDv")
    absolute = decode_uri_paths(pc.unique(value.filter(pc.equal(kind, "p"))))
    ids = pc.unique(value.filter(pc.equal(kind, "u")))
    if len(ids) == 0:
        return [absolute]
    if not pc.all(pc.greater_equal(pc.binary_length(ids), 20)).as_py():
        raise CorruptLogError(
            "a deletion vector with storageType 'u' has no 20-character Z85 id"
        )
    prefix = pc.utf8_slice_codeunits(ids, 0, -20)
    folder = pc.if_else(pc.equal(prefix, ""), "", pc.binary_join_element_wise(prefix, "/", ""))
    uuids = _z85_uuids(pc.utf8_slice_codeunits(ids, -20))
    return [absolute, pc.binary_join_element_wise(folder, "deletion_vector_", uuids, ".bin", "")]


def _z85_uuids(encoded: pa.Array) -> pa.Array:
    """Decode 20-character Z85 strings to canonical UUID strings, all at once (``z85_decode`` of the
    concatenated text gives 16 bytes per id)."""
    n = len(encoded)
    offsets = np.frombuffer(encoded.buffers()[1], np.int32)[encoded.offset : encoded.offset + n + 1]
    data = np.frombuffer(encoded.buffers()[2], np.uint8)[offsets[0] : offsets[-1]]
    if len(data) != 20 * n:
        raise CorruptLogError("a deletion vector id is not 20 ASCII Z85 characters")
    raw = np.frombuffer(z85_decode(data.tobytes().decode("ascii", errors="replace")), np.uint8).reshape(n, 16)
    out = np.full((n, 36), ord("-"), np.uint8)
    out[:, _UUID_HEX_POS] = np.stack([_HEX[raw >> 4], _HEX[raw & 15]], axis=2).reshape(n, 32)
    return pa.array(out.view("S36").ravel()).cast(pa.string())
