"""Deletion vectors in the core: byte-level round trips against the vectors Delta Spark wrote (golden tables),
decoded rows equal to delta-rs's, encode/decode properties, vectors written to files (local and S3), and
every corruption a reader can detect raising a named :class:`DeletionVectorError` that names the vector
and its data file. Delta Spark reading the vectors we write is in tests/oracle/test_deletion_vectors_agree.py.
"""

from __future__ import annotations

import json
import re
import shutil
import struct
import uuid
import zlib
from pathlib import Path
from urllib.parse import unquote

import deltalake
import fsspec
import numpy as np
import pyarrow as pa
import pytest
from delta_kernel_rust_sharing_wrapper import PythonInterface, ScanBuilder, Table
from golden import load_tables

from airflow_provider_delta.log import DeltaTable
from airflow_provider_delta.log.base.errors import (
    CorruptLogError,
    DataFileNotFoundError,
    DeletionVectorError,
    InvalidCommitError,
    UnsupportedFeatureError,
)
from airflow_provider_delta.log.files.deletion_vector_format import MAX_ENCODABLE_ROW_INDEX
from airflow_provider_delta.log.files.deletion_vectors import (
    DeletionVectorDescriptor,
    decode_bitmap,
    deleted_rows,
    dv_file_path,
    encode_bitmap,
    inline_descriptor,
    read_dv_bytes,
    union_deleted_rows,
    write_deletion_vectors,
    z85_decode,
    z85_encode,
)

SEED = 20261124
LOCAL = fsspec.filesystem("file")
_DV_NAME = re.compile(r"deletion_vector_[0-9a-f-]{36}\.bin$")


# -- golden tables: what Delta Spark wrote -------------------------------------------------------------
def _dv_tables() -> list[str]:
    return [
        t.id
        for t in load_tables()
        if any('"deletionVector":{' in p.read_text() for p in (t.root / "_delta_log").glob("*.json"))
    ]


DV_TABLES = _dv_tables()


def _copy(table_id: str, dest: Path) -> Path:
    """A copy of a golden table. Delta's own suite wrote some with a test-only prefix before each DV file's
    name (``test%dv%prefix-deletion_vector_<uuid>.bin``); the spec's name is restored so readers find them."""
    (table,) = [t for t in load_tables() if t.id == table_id]
    shutil.copytree(table.root, dest)
    for p in dest.glob("*.bin"):
        name = _DV_NAME.search(p.name)
        if name and name.group(0) != p.name:
            p.rename(p.with_name(name.group(0)))
    return dest


def _logged_descriptors(root: Path) -> dict[str, tuple[dict, str]]:
    """Every descriptor the table's JSON commits carry (adds and removes): unique id -> (descriptor, path)."""
    found = {}
    for commit in sorted((root / "_delta_log").glob("*.json")):
        for line in commit.read_text().splitlines():
            action = json.loads(line)
            for kind in ("add", "remove"):
                if (dv := (action.get(kind) or {}).get("deletionVector")) is not None:
                    found[DeletionVectorDescriptor.from_json(dv).unique_id] = (dv, action[kind]["path"])
    return found


def test_golden_tables_with_deletion_vectors_are_found():
    assert len(DV_TABLES) >= 6, DV_TABLES


@pytest.mark.parametrize("table_id", DV_TABLES)
def test_delta_spark_vectors_reencode_byte_for_byte(table_id, tmp_path):
    """Decoding then encoding each logged vector gives Delta Spark's bitmap bytes; each DV file, rewritten by
    our writer from the vectors it holds (walked frame by frame, referenced or not), is Delta Spark's file
    byte for byte."""
    root = _copy(table_id, tmp_path / "t")
    descriptors = _logged_descriptors(root)
    assert descriptors
    for dv, data_file in descriptors.values():
        rows = deleted_rows(dv, str(root), LOCAL, data_file=data_file)
        assert encode_bitmap(rows) == read_dv_bytes(dv, str(root), LOCAL), (dv, data_file)
    files = sorted(root.glob("deletion_vector_*.bin"))
    assert {dv_file_path(dv, str(root)) for dv, _ in descriptors.values()} <= {str(f) for f in files}
    for i, path in enumerate(files):
        vectors = [deleted_rows(dv, str(root), LOCAL) for dv in _frames(path)]
        ours = write_deletion_vectors(LOCAL, str(tmp_path / f"ours{i}"), vectors)
        assert [d.to_json() | {"pathOrInlineDv": path.name} for d in ours] == [
            dv | {"pathOrInlineDv": path.name} for dv in _frames(path)
        ]
        assert Path(dv_file_path(ours[0], str(tmp_path / f"ours{i}"))).read_bytes() == path.read_bytes(), path


def _frames(path: Path) -> list[dict]:
    """Descriptors of every vector a DV file holds, found by walking its frames (size, bitmap, CRC)."""
    blob, at, out = path.read_bytes(), 1, []
    uid = z85_encode(uuid.UUID(path.name.removeprefix("deletion_vector_").removesuffix(".bin")).bytes)
    while at < len(blob):
        (size,) = struct.unpack_from(">i", blob, at)
        cardinality = len(decode_bitmap(blob[at + 4 : at + 4 + size]))
        out.append({"storageType": "u", "pathOrInlineDv": uid, "offset": at, "sizeInBytes": size,
                    "cardinality": cardinality})  # fmt: skip
        at += size + 8
    assert at == len(blob), path
    return out


@pytest.mark.parametrize("table_id", DV_TABLES)
def test_decoded_rows_equal_delta_rs_and_kernel_counts(table_id, tmp_path):
    """Each live file's deleted rows equal the ones delta-rs reports; the kernel's scan has the rows left."""
    root = _copy(table_id, tmp_path / "t")
    files = DeltaTable(str(root)).snapshot().files.select(["path", "deletionVector", "stats"]).to_pylist()
    ours = {
        f["path"]: deleted_rows(f["deletionVector"], str(root), LOCAL, data_file=f["path"]).tolist()
        for f in files
        if f["deletionVector"] is not None
    }
    reader = pa.RecordBatchReader.from_stream(deltalake.DeltaTable(str(root)).deletion_vectors())
    theirs = {
        r["filepath"].removeprefix(root.as_uri() + "/"): np.flatnonzero(
            ~np.array(r["selection_vector"])
        ).tolist()
        for r in reader.read_all().to_pylist()
    }
    assert {unquote(k): v for k, v in theirs.items()} == {unquote(k): v for k, v in ours.items()}
    url = root.as_uri() + "/"
    engine = PythonInterface(url)
    scanned = ScanBuilder(Table(url).snapshot(engine)).build().execute(engine).read_all().num_rows
    records = sum(json.loads(f["stats"])["numRecords"] for f in files)
    assert scanned == records - sum(len(v) for v in ours.values())


# -- encode / decode properties ------------------------------------------------------------------------
def _reference_encode(rows: list[int]) -> bytes:
    """An independent, row-by-row encoder of the rule Delta Spark follows: array up to 4096 values, else
    bitmap; then runs when strictly smaller; one bucket per key from 0 up; offsets unless runs and < 4."""
    buckets: dict[int, list[int]] = {}
    for r in sorted(set(rows)):
        buckets.setdefault(r >> 32, []).append(r & 0xFFFFFFFF)
    n_buckets = max(buckets) + 1 if buckets else 0
    out = struct.pack("<iq", 1681511377, n_buckets)
    for key in range(n_buckets):
        containers: dict[int, list[int]] = {}
        for v in buckets.get(key, []):
            containers.setdefault(v >> 16, []).append(v & 0xFFFF)
        bodies, kinds = [], []
        for lows in containers.values():
            runs = []
            for v in lows:
                if runs and runs[-1][1] == v - 1:
                    runs[-1][1] = v
                else:
                    runs.append([v, v])
            plain = 2 * len(lows) if len(lows) <= 4096 else 8192
            if 2 + 4 * len(runs) < plain:
                kinds.append("run")
                bodies.append(
                    struct.pack("<H", len(runs)) + b"".join(struct.pack("<HH", s, e - s) for s, e in runs)
                )
            elif len(lows) <= 4096:
                kinds.append("array")
                bodies.append(b"".join(struct.pack("<H", v) for v in lows))
            else:
                kinds.append("bitmap")
                bits = bytearray(8192)
                for v in lows:
                    bits[v >> 3] |= 1 << (v & 7)
                bodies.append(bytes(bits))
        n = len(containers)
        has_run = "run" in kinds
        if has_run:
            flags = bytearray((n + 7) // 8)
            for i, k in enumerate(kinds):
                flags[i >> 3] |= (k == "run") << (i & 7)
            head = struct.pack("<I", 12347 | (n - 1) << 16) + bytes(flags)
        else:
            head = struct.pack("<II", 12346, n)
        head += b"".join(struct.pack("<HH", k, len(v) - 1) for k, v in containers.items())
        if not has_run or n >= 4:
            at = len(head) + 4 * n
            for body in bodies:
                head += struct.pack("<I", at)
                at += len(body)
        out += struct.pack("<I", key) + head + b"".join(bodies)
    return out


def _random_sets(rng: np.random.Generator) -> list[np.ndarray]:
    """Sparse, dense, runs, both sides of every container threshold, and values beyond 2**32."""
    sets = [
        np.array([], np.uint64),
        np.array([0]),
        np.array([65535, 65536, 2**32 - 1, 2**32, 2**32 + 65536, MAX_ENCODABLE_ROW_INDEX]),
        np.arange(3),  # one run of 3: 6 bytes either way, so an array (runs only when strictly smaller)
        np.arange(4),  # one run of 4: smaller than an array
        np.arange(0, 2 * 4096, 2),  # 4096 values: the largest array
        np.arange(0, 2 * 4097, 2),  # 4097 values: a bitmap
        np.arange(0, 2**17, 2),  # two full bitmaps
        np.arange(10, 200_000),  # long runs across containers
        (np.arange(0, 200_000, 7)[:, None] + np.arange(3)).ravel(),  # many short runs
    ]
    for _ in range(40):
        span = int(rng.choice([2**10, 2**17, 2**24, 2**33, 2**36]))
        sparse = rng.integers(0, span, int(rng.integers(1, 3000)))
        start = int(rng.integers(0, span))
        dense = np.arange(start, start + int(rng.integers(1, 100_000)))
        sets.append(np.concatenate([sparse, dense if rng.random() < 0.5 else dense[::3]]))
    return sets


def test_encode_decode_round_trip_and_match_the_reference_encoder():
    rng = np.random.default_rng(SEED)
    print(f"seed {SEED}")
    for i, rows in enumerate(_random_sets(rng)):
        expected = np.unique(rows).astype(np.uint64)
        data = encode_bitmap(rows)
        assert np.array_equal(decode_bitmap(data), expected), i
        if len(expected) < 150_000:
            assert data == _reference_encode(expected.tolist()), i
        assert decode_bitmap(data).dtype == np.uint64


def test_unsorted_and_repeated_indexes_are_normalised_and_bad_ones_refused():
    assert encode_bitmap([5, 1, 5, 3]) == encode_bitmap(np.array([1, 3, 5], np.uint64))
    assert decode_bitmap(encode_bitmap([])).tolist() == []
    with pytest.raises(InvalidCommitError, match="row index -1 is negative"):
        encode_bitmap([3, -1])
    with pytest.raises(InvalidCommitError, match="above"):
        encode_bitmap([MAX_ENCODABLE_ROW_INDEX + 1])
    with pytest.raises(TypeError, match="integers"):
        encode_bitmap(np.array([1.5]))
    with pytest.raises(TypeError, match="one-dimensional"):
        encode_bitmap(np.zeros((2, 2), np.int64))


def test_z85_and_inline_vectors_match_published_examples():
    assert z85_decode("HelloWorld") == bytes([0x86, 0x4F, 0xD2, 0x6F, 0xB5, 0x59, 0xF7, 0x5B])  # ZeroMQ's
    assert z85_encode(bytes([0x86, 0x4F, 0xD2, 0x6F, 0xB5, 0x59, 0xF7, 0x5B])) == "HelloWorld"
    # delta-kernel-rs's inline example (rows 3, 4, 7, 11, 18, 29): we write exactly its text.
    kernel = {"storageType": "i", "pathOrInlineDv": "^Bg9^0rr910000000000iXQKl0rr91000f55c8Xg0@@D72lkbi5=-{L",
              "sizeInBytes": 44, "cardinality": 6}  # fmt: skip
    assert deleted_rows(kernel, "/unused", LOCAL).tolist() == [3, 4, 7, 11, 18, 29]
    assert inline_descriptor([3, 4, 7, 11, 18, 29]).to_json() == kernel
    # The protocol's "JSON Example 3" holds the native layout written big-endian: Delta Spark's reader
    # refuses its magic number, and so do we, by name.
    spec = {
        **kernel,
        "pathOrInlineDv": "wi5b=000010000siXQKl0rr91000f55c8Xg0@@D72lkbi5=-{L",
        "sizeInBytes": 40,
    }
    with pytest.raises(DeletionVectorError, match="magic number -791463580.*inline"):
        deleted_rows(spec, "/unused", LOCAL)


def test_inline_and_stored_vectors_round_trip_and_union(tmp_path):
    rng = np.random.default_rng(SEED + 1)
    vectors = [np.unique(rng.integers(0, n, n // 3)) for n in (10, 5000, 300_000)] + [np.array([2**33])]
    descriptors = write_deletion_vectors(LOCAL, str(tmp_path), vectors, random_prefix_length=3)
    (folder,) = [p for p in tmp_path.iterdir()]
    assert re.fullmatch(r"[A-Za-z0-9]{3}", folder.name) and len(list(folder.iterdir())) == 1
    assert len({d.path_or_inline_dv for d in descriptors}) == 1  # one file shared by all vectors
    for d, rows in zip(descriptors, vectors, strict=True):
        assert d.storage_type == "u" and d.max_row_index == int(rows[-1])
        assert "maxRowIndex" not in d.to_json()
        logged = json.loads(json.dumps(d.to_json()))  # as a reader of the log gets it
        assert deleted_rows(logged, str(tmp_path), LOCAL).tolist() == rows.tolist()
        assert deleted_rows(d, str(tmp_path), LOCAL).tolist() == rows.tolist()  # maxRowIndex checked
        inline = inline_descriptor(rows)
        assert inline.offset is None and "offset" not in inline.to_json()
        assert deleted_rows(inline.to_json(), str(tmp_path), LOCAL).tolist() == rows.tolist()
    union = union_deleted_rows(descriptors[0].to_json(), [0, 99, 3], str(tmp_path), LOCAL)
    assert union.tolist() == sorted(set(vectors[0].tolist()) | {0, 99, 3})
    assert union_deleted_rows(None, [4, 2], str(tmp_path), LOCAL).tolist() == [2, 4]
    assert write_deletion_vectors(LOCAL, str(tmp_path / "none"), []) == []
    assert not (tmp_path / "none").exists()


@pytest.mark.s3
def test_vectors_written_and_read_on_s3(s3_server, s3_bucket):
    fs = fsspec.filesystem("s3", **s3_server.storage_options)
    root = f"{s3_bucket}/table"
    fs.pipe_file(f"{root}/marker", b"")
    vectors = [np.array([0, 5, 70_000]), np.arange(100_000)]
    descriptors = write_deletion_vectors(fs, root, vectors, random_prefix_length=2)
    keys = [k for k in fs.find(s3_bucket) if k.endswith(".bin")]
    assert len(keys) == 1 and keys[0].startswith(root + "/")
    for d, rows in zip(descriptors, vectors, strict=True):
        assert deleted_rows(d.to_json(), root, fs).tolist() == rows.tolist()
    absolute = {**descriptors[1].to_json(), "storageType": "p", "pathOrInlineDv": f"s3://{keys[0]}"}
    assert deleted_rows(absolute, "unused", fs).tolist() == vectors[1].tolist()


# -- corruption: each a named error --------------------------------------------------------------------
DATA_FILE = "part=a/part-00000.snappy.parquet"


@pytest.fixture
def stored(tmp_path):
    """A file holding two vectors; the second one's descriptor, its file and its bitmap bytes."""
    (first, second) = write_deletion_vectors(LOCAL, str(tmp_path), [[1, 2], [3, 70_000, 2**32 + 1]])
    path = Path(dv_file_path(second, str(tmp_path)))
    return second.to_json(), path, path.read_bytes()


def _refused(dv: dict, root: Path, match: str, *where: str) -> DeletionVectorError:
    with pytest.raises(DeletionVectorError, match=match) as info:
        deleted_rows(dv, str(root), LOCAL, data_file=DATA_FILE)
    message = str(info.value)
    assert DATA_FILE in message and all(w in message for w in where), message
    assert info.value.data_file == DATA_FILE
    return info.value


def test_stored_vector_corruptions_are_named(stored, tmp_path):
    dv, path, blob = stored
    name, offset, size = path.name, dv["offset"], dv["sizeInBytes"]
    cases = {
        "the deletion vector file is empty": b"",
        "format version 2": b"\x02" + blob[1:],
        "cut short": blob[: offset + 4 + size // 2],
        "CRC-32 checksum mismatch": blob[:-4] + bytes(4),
        "offset .* is past the end": blob[:offset],
    }
    for match, content in cases.items():
        path.write_bytes(content)
        _refused(dv, tmp_path, match, name, f"offset {offset}")
    path.write_bytes(blob)
    _refused({**dv, "offset": -5}, tmp_path, "offset -5 is not where a vector can start", name)
    _refused({**dv, "offset": None}, tmp_path, "offset 0 is not where a vector can start", name)
    _refused({**dv, "offset": len(blob) + 10}, tmp_path, "past the end", name)
    _refused(
        {**dv, "sizeInBytes": size + 1}, tmp_path, f"says the vector has {size} bytes.*sizeInBytes {size + 1}"
    )
    _refused({**dv, "cardinality": 2}, tmp_path, "holds 3 row indexes.*cardinality says 2", name)
    _refused(
        {**dv, "maxRowIndex": 70_000}, tmp_path, f"row index {2**32 + 1} is above.*maxRowIndex 70000", name
    )
    unknown = {**dv, "storageType": "p", "pathOrInlineDv": "nosuchstore://bucket/deletion_vector.bin"}
    _refused(unknown, tmp_path, "cannot be read.*nosuchstore", "nosuchstore://bucket/deletion_vector.bin")


def test_a_vector_file_that_is_gone_is_named_as_vacuumed_not_corrupt(stored, tmp_path):
    """A missing vector file is what VACUUM leaves of a version older than the retention: the file and the
    data file it belongs to are named, and it is no ``CorruptLogError``."""
    dv, path, _ = stored
    other = {**dv, "pathOrInlineDv": z85_encode(uuid.uuid4().bytes)}
    path.unlink()
    for gone, name in ((other, "deletion_vector_"), (dv, path.name)):
        with pytest.raises(DataFileNotFoundError, match="deletedFileRetentionDuration") as info:
            deleted_rows(gone, str(tmp_path), LOCAL, data_file=DATA_FILE)
        assert name in str(info.value) and DATA_FILE in str(info.value), info.value
        assert not isinstance(info.value, CorruptLogError) and isinstance(info.value, FileNotFoundError)
        assert name in info.value.path


def test_every_bit_flip_of_a_stored_vector_is_refused(stored, tmp_path):
    """The checksum covers the bitmap; the size prefix and checksum are checked themselves."""
    dv, path, blob = stored
    start, end = dv["offset"], dv["offset"] + 8 + dv["sizeInBytes"]
    for bit in range(start * 8, end * 8):
        flipped = bytearray(blob)
        flipped[bit // 8] ^= 1 << (bit % 8)
        path.write_bytes(bytes(flipped))
        with pytest.raises(DeletionVectorError, match="checksum|says the vector has|past the end|cut short"):
            deleted_rows(dv, str(tmp_path), LOCAL, data_file=DATA_FILE)


def _framed(tmp_path: Path, bitmap: bytes, cardinality: int) -> dict:
    """A file holding ``bitmap`` with a valid size and CRC, so the bitmap decoder itself must object."""
    uid = uuid.uuid4()
    frame = len(bitmap).to_bytes(4, "big") + bitmap + zlib.crc32(bitmap).to_bytes(4, "big")
    (tmp_path / f"deletion_vector_{uid}.bin").write_bytes(b"\x01" + frame)
    return {"storageType": "u", "pathOrInlineDv": z85_encode(uid.bytes), "offset": 1,
            "sizeInBytes": len(bitmap), "cardinality": cardinality}  # fmt: skip


def test_malformed_bitmaps_behind_a_valid_checksum_are_named(tmp_path):
    good = encode_bitmap([1, 2, 3, 10, 70_000])
    native = struct.pack("<i", 1681511376) + good[4:]
    run_past_end = encode_bitmap(np.arange(65530, 65536))
    run_past_end = run_past_end[:-2] + struct.pack("<H", 9)  # length of the last run: beyond 65535
    cases = {
        "magic number 0": (bytes(4) + good[4:], 5),
        "native RoaringBitmapArray form": (native, 5),
        "cut short": (good[:-3], 5),
        "bytes follow": (good + b"\x00", 5),
        "claims 1000 32-bit buckets": (good[:4] + struct.pack("<q", 1000) + good[12:], 5),
        "unknown RoaringBitmap cookie": (good[:16] + bytes(4) + good[20:], 5),
        "run goes past the end": (run_past_end, 6),
        "holds 6 row indexes.*cardinality says 7": (encode_bitmap(np.arange(6)), 7),
    }
    for match, (bitmap, cardinality) in cases.items():
        dv = _framed(tmp_path, bitmap, cardinality)
        _refused(
            dv, tmp_path, match, f"deletion_vector_{uuid.UUID(bytes=z85_decode(dv['pathOrInlineDv'][-20:]))}"
        )


def test_random_mutations_of_bitmaps_decode_or_raise_the_named_error():
    """Whatever the bytes, the decoder returns rows or raises DeletionVectorError, never struct.error,
    IndexError, ValueError or MemoryError."""
    rng = np.random.default_rng(SEED + 2)
    print(f"seed {SEED + 2}")
    samples = [encode_bitmap(s) for s in _random_sets(np.random.default_rng(SEED))[:12]]
    refused = 0
    for _ in range(3000):
        data = bytearray(samples[int(rng.integers(len(samples)))])
        how = rng.integers(3)
        if how == 0:
            data = data[: int(rng.integers(len(data)))]
        elif how == 1:
            for _ in range(int(rng.integers(1, 4))):
                data[int(rng.integers(len(data)))] ^= 1 << int(rng.integers(8))
        else:
            data[int(rng.integers(len(data)))] = int(rng.integers(256))
        try:
            rows = decode_bitmap(bytes(data))
        except DeletionVectorError:
            refused += 1
        else:
            assert rows.dtype == np.uint64 and np.all(rows[1:] > rows[:-1])
    assert refused > 1000


def test_inline_vector_corruptions_are_named():
    good = inline_descriptor([3, 4, 7]).to_json()
    text = good["pathOrInlineDv"]
    _refused(
        {**good, "pathOrInlineDv": text[:-5]},
        Path("/unused"),
        "inline deletion vector is cut short",
        "inline",
    )
    _refused({**good, "pathOrInlineDv": text + "00000"}, Path("/unused"), "has .* Z85 characters", "inline")
    _refused({**good, "pathOrInlineDv": "~" + text[1:]}, Path("/unused"), "invalid Z85", "inline")
    _refused({**good, "cardinality": 4}, Path("/unused"), "cardinality says 4", "inline")
    bad_magic = z85_encode(bytes(4) + z85_decode(text)[4:])
    _refused({**good, "pathOrInlineDv": bad_magic}, Path("/unused"), "magic number 0", "inline")


def test_malformed_descriptors_are_named(tmp_path):
    good = inline_descriptor([1]).to_json()
    for bad, match in [
        ({k: v for k, v in good.items() if k != "sizeInBytes"}, "malformed deletion vector descriptor"),
        ({**good, "cardinality": "1"}, "cardinality must be an integer"),
        ({**good, "sizeInBytes": -1}, "may be negative"),
        ({**good, "storageType": None}, "must be strings"),
        ({"storageType": "u", "pathOrInlineDv": "short", "offset": 1, "sizeInBytes": 1, "cardinality": 1},
         "not an optional folder prefix"),
        ({"storageType": "u", "pathOrInlineDv": "../" + z85_encode(uuid.uuid4().bytes), "offset": 1,
          "sizeInBytes": 1, "cardinality": 1}, "inside the table root"),
        ({"storageType": "u", "pathOrInlineDv": "~" * 20, "offset": 1, "sizeInBytes": 1, "cardinality": 1},
         "invalid Z85"),
    ]:  # fmt: skip
        _refused(bad, tmp_path, match)
    with pytest.raises(UnsupportedFeatureError, match="storage type 'x'.*part=a"):
        deleted_rows({**good, "storageType": "x"}, str(tmp_path), LOCAL, data_file=DATA_FILE)
