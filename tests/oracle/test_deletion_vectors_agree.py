"""Deletion vectors, both ways between our core's codec and Delta Spark.

1. Delta Spark's bytes: Delta Spark DELETEs rows in patterns that make array, bitmap and run containers; every
   vector in its DV files, decoded and encoded again by our core, is its bytes exactly, and each whole file
   rewritten by our writer is its file. A second DELETE on the same file makes Delta Spark merge vectors,
   which it serializes without run optimisation: we decode those and say where our bytes differ.
2. Delta Spark reads ours: a table created by our core with ``delta.enableDeletionVectors``, Parquet files
   added, then commits written by hand (the commit API for DVs is another issue's work) with remove/add pairs
   carrying our vectors: inline, on disk (two vectors sharing one file, one in a random-prefix folder), then
   merged with new deletes. ``SELECT`` in Delta Spark returns exactly the rows not deleted, after each
   commit, after our checkpoint, and after Delta Spark's own DELETE merges its rows into our vector.
"""

from __future__ import annotations

import dataclasses
import json
import struct
import time
import uuid
from pathlib import Path

import fsspec
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from oracle_client import Oracle

from airflow_provider_delta.log import AddFile, DeltaTable, add_file_from_parquet
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
    z85_encode,
)

LOCAL = fsspec.filesystem("file")
SEED = 4242


def _frames(path: Path) -> list[dict]:
    """Descriptors of every vector a DV file holds, walking its frames (size, bitmap, CRC-32)."""
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


def _container_kinds(bitmap: bytes) -> set[str]:
    """Kinds of the containers of bucket 0 (enough for row indexes below 2**32)."""
    (cookie,) = struct.unpack_from("<I", bitmap, 16)
    if cookie & 0xFFFF == 12347:
        n = (cookie >> 16) + 1
        flags = np.unpackbits(np.frombuffer(bitmap, np.uint8, (n + 7) // 8, 20), bitorder="little")[:n]
        head = 20 + (n + 7) // 8
    else:
        n = struct.unpack_from("<I", bitmap, 20)[0]
        flags, head = np.zeros(n, np.uint8), 24
    cards = np.frombuffer(bitmap, "<u2", 2 * n, head).reshape(n, 2)[:, 1].astype(int) + 1
    return {"run" if f else ("bitmap" if c > 4096 else "array") for f, c in zip(flags, cards, strict=True)}


def test_our_codec_reproduces_delta_spark_vectors(oracle: Oracle, tmp_path):
    uri = str(tmp_path / "spark")
    oracle.call("sql", f"CREATE TABLE delta.`{uri}` (id BIGINT) USING delta "
                       "TBLPROPERTIES ('delta.enableDeletionVectors' = 'true')")  # fmt: skip
    for lo, hi in [(0, 200_000), (200_000, 260_000)]:  # one file each: range(..., 1 partition) keeps id order
        oracle.call("sql", f"INSERT INTO delta.`{uri}` SELECT id FROM range({lo}, {hi}, 1, 1)")
    # Row indexes equal ids - file start: a run (0..4999), a bitmap (every 3rd of 70000..131071), arrays.
    oracle.call("sql", f"DELETE FROM delta.`{uri}` WHERE id < 5000 OR (id >= 70000 AND id < 131072 "
                       "AND id % 3 = 0) OR id IN (140000, 140007, 150001) OR (id >= 200000 AND id % 997 = 0) "
                       "OR (id >= 210000 AND id < 211000 AND id % 2 = 0)")  # fmt: skip
    kinds = _reencode_every_vector(Path(uri), tmp_path / "ours")
    assert set().union(*kinds.values()) == {"array", "bitmap", "run"}, kinds
    # Delta Spark merges a second DELETE's rows into a file's vector and writes the union without run
    # optimisation (DeletionVectorWriter): 210000..210999 becomes one array container there, one run in ours.
    oracle.call("sql", f"DELETE FROM delta.`{uri}` WHERE id >= 210000 AND id < 211000")
    differ = []
    for f in DeltaTable(uri).snapshot().files.to_pylist():
        if dv := f["deletionVector"]:
            rows = deleted_rows(dv, uri, LOCAL, data_file=f["path"])
            theirs, ours = read_dv_bytes(dv, uri, LOCAL), encode_bitmap(rows)
            assert np.array_equal(decode_bitmap(ours), rows)
            if ours != theirs:
                differ.append((len(theirs), len(ours), _container_kinds(theirs), _container_kinds(ours)))
    print("merged vectors that differ (Delta Spark's size, ours, their kinds, our kinds):", differ)
    assert differ == [(differ[0][0], differ[0][1], {"array"}, {"run"})] and differ[0][1] < differ[0][0]


def _reencode_every_vector(root: Path, out: Path) -> dict[str, set[str]]:
    """Every vector of every DV file of ``root`` re-encoded byte for byte, and every file rewritten by our
    writer byte for byte; returns the container kinds of each file's vectors."""
    kinds = {}
    for i, path in enumerate(sorted(root.glob("deletion_vector_*.bin"))):
        frames = _frames(path)
        vectors = []
        for dv in frames:
            rows = deleted_rows(dv, str(root), LOCAL)
            bitmap = read_dv_bytes(dv, str(root), LOCAL)
            assert encode_bitmap(rows) == bitmap, (path.name, dv["offset"])
            vectors.append(rows)
            kinds[path.name] = kinds.get(path.name, set()) | _container_kinds(bitmap)
        ours = write_deletion_vectors(LOCAL, str(out / str(i)), vectors)
        assert Path(dv_file_path(ours[0], str(out / str(i)))).read_bytes() == path.read_bytes(), path.name
        assert [d.offset for d in ours] == [f["offset"] for f in frames]
    return kinds


# -- Delta Spark reads ours ----------------------------------------------------------------------------
SCHEMA = pa.schema([("k", pa.int64()), ("s", pa.string())])
FILES = {
    "a.parquet": (0, 10),
    "b.parquet": (1_000, 1_000),
    "c.parquet": (100_000, 200_000),
    "d.parquet": (900_000, 50),
}


def _commit_by_hand(
    table: DeltaTable, root: Path, pairs: list[tuple[AddFile, dict | None]], what: str
) -> int:
    """One commit of remove/add pairs, each file re-added with a new deletion vector ("Deletion Vectors":
    the pair reconciles by path and vector id), written with create-exclusive as a writer must."""
    version = table.version() + 1
    now = int(time.time() * 1000)
    info = {"timestamp": now, "operation": "DELETE", "operationParameters": {"predicate": what},
            "readVersion": version - 1, "isBlindAppend": False}  # fmt: skip
    lines = [{"commitInfo": info}]
    for old, dv in pairs:
        new = dataclasses.replace(old, deletion_vector=dv)
        lines += [{"remove": old.remove(now).to_json()}, {"add": new.to_json()}]
    with open(root / "_delta_log" / f"{version:020d}.json", "x") as fh:
        fh.write("\n".join(json.dumps(line) for line in lines) + "\n")
    return version


def _live(table: DeltaTable) -> dict[str, AddFile]:
    return {f["path"]: AddFile.from_dict(f) for f in table.snapshot().files.to_pylist()}


def _delta_spark_keys(oracle: Oracle, uri: str) -> list[int]:
    oracle.call("clear_cache")
    return sorted(json.loads(r)["k"] for r in oracle.call("rows", uri))


def _expected(deleted: dict[str, np.ndarray]) -> list[int]:
    keys = []
    for name, (base, n) in FILES.items():
        keep = np.setdiff1d(np.arange(n), deleted.get(name, np.empty(0, np.uint64)).astype(np.int64))
        keys += (base + keep).tolist()
    return sorted(keys)


def test_delta_spark_reads_vectors_we_write(oracle: Oracle, tmp_path):
    rng = np.random.default_rng(SEED)
    print(f"seed {SEED}")
    root = tmp_path / "ours"
    uri = str(root)
    table = DeltaTable.create(uri, SCHEMA, configuration={"delta.enableDeletionVectors": "true"})
    adds = []
    for name, (base, n) in FILES.items():
        keys = np.arange(base, base + n)
        pq.write_table(pa.table({"k": keys, "s": [f"s{k}" for k in keys]}, schema=SCHEMA), root / name)
        adds.append(add_file_from_parquet(table, name))
    table.transaction().add_files(adds).commit()
    assert _delta_spark_keys(oracle, uri) == _expected({})

    # Inline for a; b and c share one file (c: array, bitmap and run containers); d in a prefix folder.
    deleted = {
        "a.parquet": np.array([0, 3, 9], np.uint64),
        "b.parquet": np.arange(1, 1000, 2, dtype=np.uint64),
        "c.parquet": np.unique(np.concatenate([np.arange(5000), np.arange(70_000, 131_072, 3),
                                               rng.choice(200_000, 300, replace=False)])).astype(np.uint64),
        "d.parquet": np.array([49], np.uint64),
    }  # fmt: skip
    b_dv, c_dv = write_deletion_vectors(LOCAL, uri, [deleted["b.parquet"], deleted["c.parquet"]])
    (d_dv,) = write_deletion_vectors(LOCAL, uri, [deleted["d.parquet"]], random_prefix_length=2)
    assert b_dv.path_or_inline_dv == c_dv.path_or_inline_dv and c_dv.offset > b_dv.offset
    live = _live(table)
    dvs = {"a.parquet": inline_descriptor(deleted["a.parquet"]), "b.parquet": b_dv, "c.parquet": c_dv,
           "d.parquet": d_dv}  # fmt: skip
    _commit_by_hand(table, root, [(live[n], dvs[n].to_json()) for n in FILES], "our vectors")
    assert _delta_spark_keys(oracle, uri) == _expected(deleted)
    spark_files = dict(oracle.call("snapshot", uri)["files"])
    assert spark_files == {n: "|".join(["u" if n != "a.parquet" else "i", dvs[n].path_or_inline_dv,
                                        "" if dvs[n].offset is None else str(dvs[n].offset),
                                        str(dvs[n].cardinality)]) for n in FILES}  # fmt: skip

    # Merge new deletes into a's (inline) and b's (on disk) vectors: the union, in a new vector each.
    live = _live(table)
    more = {"a.parquet": [1, 2, 3], "b.parquet": rng.choice(1000, 100, replace=False)}
    merged = {
        n: union_deleted_rows(live[n].deletion_vector, r, uri, LOCAL, data_file=n) for n, r in more.items()
    }
    (b_merged,) = write_deletion_vectors(LOCAL, uri, [merged["b.parquet"]])
    pairs = [(live["a.parquet"], inline_descriptor(merged["a.parquet"]).to_json()),
             (live["b.parquet"], b_merged.to_json())]  # fmt: skip
    _commit_by_hand(table, root, pairs, "merged vectors")
    deleted.update(merged)
    assert _delta_spark_keys(oracle, uri) == _expected(deleted)

    # Our checkpoint carries the vectors; Delta Spark reads the table from it.
    table.checkpoint()
    assert _delta_spark_keys(oracle, uri) == _expected(deleted)

    # Delta Spark deletes more rows of c: it loads our vector, merges its rows in and writes its own.
    oracle.call("sql", f"DELETE FROM delta.`{uri}` WHERE k IN (107000, 107001, 299999)")
    deleted["c.parquet"] = np.union1d(deleted["c.parquet"], np.array([7000, 7001, 199_999], np.uint64))
    assert _delta_spark_keys(oracle, uri) == _expected(deleted)
    c_now = _live(table)["c.parquet"]
    assert DeletionVectorDescriptor.from_json(c_now.deletion_vector).unique_id != c_dv.unique_id
    assert deleted_rows(c_now.deletion_vector, uri, LOCAL).tolist() == deleted["c.parquet"].tolist()
