"""The deletion-vector decoder on its own: Z85, every RoaringBitmap container kind, files and checks."""

from __future__ import annotations

import uuid

import fsspec
import numpy as np
import pytest
from spark_helpers import bitmap_array, dv_file, z85_encode

from airflow_provider_delta.log.base.errors import UnsupportedFeatureError
from airflow_provider_delta.log.files.deletion_vectors import (
    DataFileNotFoundError,
    DeletionVectorError,
    decode_bitmap,
    deleted_rows,
    dv_file_path,
    z85_decode,
)


def test_z85_round_trip():
    data = bytes(range(40))
    assert z85_decode(z85_encode(data)) == data
    assert z85_decode("HelloWorld") == bytes([0x86, 0x4F, 0xD2, 0x6F, 0xB5, 0x59, 0xF7, 0x5B])  # ZeroMQ's


@pytest.mark.parametrize("kind", ["array", "bitmap", "run"])
def test_every_container_kind(kind):
    rows = [0, 1, 2, 3, 7, 100, 65535, 65536, 65537, 200_000, 2**32 + 5, 2**33 + 1]
    if kind == "bitmap":
        rows += list(range(300_000, 305_000))  # more than 4096 values in one container
    got = decode_bitmap(bitmap_array(rows, kind))
    assert got.dtype == np.uint64
    assert got.tolist() == sorted(set(rows))


def test_empty_bitmap():
    assert decode_bitmap(bitmap_array([])).tolist() == []


def test_relative_path_with_prefix():
    uid = uuid.uuid4()
    value = "ab" + z85_encode(uid.bytes)
    path = dv_file_path({"storageType": "u", "pathOrInlineDv": value}, "/t")
    assert path == f"/t/ab/deletion_vector_{uid}.bin"


def test_stored_vector_checks_size_and_checksum(tmp_path):
    fs = fsspec.filesystem("file")
    uid = uuid.uuid4()
    bitmap = bitmap_array([1, 5])
    blob = dv_file(bitmap)
    (tmp_path / f"deletion_vector_{uid}.bin").write_bytes(blob)
    dv = {"storageType": "u", "pathOrInlineDv": z85_encode(uid.bytes), "offset": 1,
          "sizeInBytes": len(bitmap), "cardinality": 2}  # fmt: skip
    assert deleted_rows(dv, str(tmp_path), fs).tolist() == [1, 5]
    corrupt = bytearray(blob)
    corrupt[-1] ^= 0xFF
    (tmp_path / f"deletion_vector_{uid}.bin").write_bytes(bytes(corrupt))
    with pytest.raises(DeletionVectorError, match="checksum"):
        deleted_rows(dv, str(tmp_path), fs)
    with pytest.raises(DeletionVectorError, match="cardinality says 3"):
        (tmp_path / f"deletion_vector_{uid}.bin").write_bytes(blob)
        deleted_rows({**dv, "cardinality": 3}, str(tmp_path), fs)
    with pytest.raises(DataFileNotFoundError, match="deletion vector file .* is gone"):
        deleted_rows({**dv, "pathOrInlineDv": z85_encode(uuid.uuid4().bytes)}, str(tmp_path), fs)


def test_inline_and_absolute_vectors(tmp_path):
    fs = fsspec.filesystem("file")
    bitmap = bitmap_array([0, 3])
    inline = {"storageType": "i", "pathOrInlineDv": z85_encode(bitmap), "sizeInBytes": len(bitmap),
              "cardinality": 2}  # fmt: skip
    assert deleted_rows(inline, "/unused", fs).tolist() == [0, 3]
    (tmp_path / "elsewhere.bin").write_bytes(dv_file(bitmap))
    absolute = {"storageType": "p", "pathOrInlineDv": (tmp_path / "elsewhere.bin").as_uri(), "offset": 1,
                "sizeInBytes": len(bitmap), "cardinality": 2}  # fmt: skip
    assert deleted_rows(absolute, "/unused", fs).tolist() == [0, 3]


def test_unknown_storage_type_and_magic():
    with pytest.raises(UnsupportedFeatureError):
        dv_file_path({"storageType": "x", "pathOrInlineDv": "abc"}, "/t")
    with pytest.raises(DeletionVectorError, match="magic"):
        decode_bitmap(b"\x00" * 12)
