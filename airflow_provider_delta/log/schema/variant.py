"""Variant columns ("Variant Data Type", "Variant Shredding") read into the spec's two binaries.

Readers hand a variant on as a struct of ``value`` and ``metadata`` binaries in the Parquet Variant
binary encoding, which is what Delta Spark writes unshredded and what PySpark's Arrow form of
``VariantType`` is. Files written with shredding (``variantShredding``: Delta Spark 4.4 writes it as
``variantShredding-preview`` when ``delta.enableVariantShredding`` is on) keep parts of each value in
typed ``typed_value`` columns; :func:`variant_column` puts them back into one value, following the
Parquet spec's "Reconstructing a Shredded Variant": a typed primitive is re-encoded, a shredded array is
rebuilt from its elements, a shredded object from its fields merged with the residual ``value`` object.
Unshredded columns are only re-ordered (no per-row work); shredded ones are rebuilt row by row.
"""

from __future__ import annotations

import json
import struct
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from ..base.errors import CorruptLogError

VARIANT = pa.struct([pa.field("value", pa.binary(), False), pa.field("metadata", pa.binary(), False)])
NULL = b"\x00"  # primitive null: what a missing top-level value reads as
FEATURES = ("variantType", "variantType-preview")
SHREDDING_FEATURES = ("variantShredding", "variantShredding-preview")


def is_file_variant(t: pa.DataType) -> bool:
    """Whether a file's column is a variant group: ``metadata`` and ``value``/``typed_value`` binaries."""
    if not pa.types.is_struct(t):
        return False
    names = {t.field(i).name for i in range(t.num_fields)}
    return "metadata" in names and names <= {"metadata", "value", "typed_value"}


def variant_column(array: pa.Array) -> pa.StructArray:
    """A file's variant column (unshredded or shredded, fields in any order) as :data:`VARIANT`."""
    if isinstance(array, pa.ChunkedArray):
        array = array.combine_chunks()
    t = array.type
    if not is_file_variant(t):
        raise CorruptLogError(f"a variant column must be a struct of metadata and value binaries, not {t}")
    mask = array.is_null() if array.null_count else None
    metadata = pc.fill_null(array.field("metadata").cast(pa.binary()), b"\x01\x00\x00")
    names = {t.field(i).name for i in range(t.num_fields)}
    if "typed_value" not in names:
        value = pc.fill_null(array.field("value").cast(pa.binary()), NULL)
        return pa.StructArray.from_arrays([value, metadata], fields=list(VARIANT), mask=mask)
    values = _unshred(array, metadata)
    return pa.StructArray.from_arrays([pa.array(values, pa.binary()), metadata], fields=list(VARIANT),
                                      mask=mask)  # fmt: skip


def file_variant(array: pa.Array) -> pa.StructArray:
    """A variant column of Arrow data (``value`` and ``metadata`` binaries, as PySpark gives it) as it is
    written unshredded: the two binaries required, so rows where the variant is null hold empty ones."""
    if isinstance(array, pa.ChunkedArray):
        array = array.combine_chunks()
    mask = array.is_null() if array.null_count else None
    children = [pc.fill_null(array.field(name).cast(pa.binary()), b"") for name in ("value", "metadata")]
    return pa.StructArray.from_arrays(children, fields=list(VARIANT), mask=mask)


def _unshred(array: pa.StructArray, metadata: pa.Array) -> list[bytes]:
    value = array.field("value").to_pylist() if "value" in _names(array.type) else [None] * len(array)
    typed_type = array.type.field("typed_value").type
    typed = _raw(array.field("typed_value")).to_pylist()
    valid = array.is_valid().to_pylist()
    out = []
    for md, v, tv, ok in zip(metadata.to_pylist(), value, typed, valid, strict=True):
        if not ok:
            out.append(NULL)
            continue
        keys = _dictionary(md)
        built = _construct(keys, v, tv, typed_type)
        out.append(NULL if built is None else built)
    return out


def _names(t: pa.StructType) -> set[str]:
    return {t.field(i).name for i in range(t.num_fields)}


def _raw(array: pa.Array) -> pa.Array:
    """``array`` with temporal leaves as their integers, so rows come out as plain numbers."""
    t = array.type
    if pa.types.is_struct(t):
        children = [_raw(array.field(i)) for i in range(t.num_fields)]
        mask = array.is_null() if array.null_count else None
        return pa.StructArray.from_arrays(children, names=[f.name for f in t], mask=mask)
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        values = _raw(array.values)
        mask = array.is_null() if array.null_count else None
        return type(array).from_arrays(array.offsets, values, mask=mask)
    if pa.types.is_timestamp(t) or pa.types.is_time64(t):
        return array.cast(pa.int64())
    if pa.types.is_date32(t):
        return array.cast(pa.int32())
    return array


def _construct(keys: dict[str, int], value: bytes | None, typed: Any, t: pa.DataType) -> bytes | None:
    """One value from its residual ``value`` and shredded ``typed`` parts; None when it is missing."""
    if typed is None:
        return value
    if pa.types.is_struct(t):
        fields: dict[str, bytes] = {}
        for i in range(t.num_fields):
            name = t.field(i).name
            part = typed.get(name) or {}
            child_type = t.field(i).type
            sub_typed_type = child_type.field("typed_value").type if "typed_value" in _names(child_type) \
                else pa.null()  # fmt: skip
            built = _construct(keys, part.get("value"), part.get("typed_value"), sub_typed_type)
            if built is not None:
                fields[name] = built
        if value is not None:  # a partially shredded object: the residual holds the other fields
            fields.update(_object_fields(value, keys))
        return _encode_object(fields, keys)
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        element = t.value_type
        sub_typed_type = element.field("typed_value").type if "typed_value" in _names(element) else pa.null()
        items = [_construct(keys, e.get("value"), e.get("typed_value"), sub_typed_type) for e in typed]
        return _encode_array([NULL if item is None else item for item in items])
    return encode_primitive(typed, t)


# -- the binary encoding ("Variant Binary Encoding") --------------------------------------------------------
def _dictionary(metadata: bytes) -> dict[str, int]:
    """Key -> field id of a variant's metadata dictionary."""
    if not metadata or metadata[0] & 0x0F != 1:
        version = metadata[0] & 0x0F if metadata else None
        raise CorruptLogError(f"variant metadata of version {version}, not 1")
    size = ((metadata[0] >> 6) & 3) + 1
    count = int.from_bytes(metadata[1 : 1 + size], "little")
    offsets = [int.from_bytes(metadata[1 + size * (1 + i) : 1 + size * (2 + i)], "little")
               for i in range(count + 1)]  # fmt: skip
    base = 1 + size * (count + 2)
    keys: dict[str, int] = {}
    for i in range(count):
        keys.setdefault(metadata[base + offsets[i] : base + offsets[i + 1]].decode("utf-8"), i)
    return keys


def _object_fields(value: bytes, keys: dict[str, int]) -> dict[str, bytes]:
    """The fields (name -> encoded value) of an encoded object."""
    header = value[0]
    if header & 3 != 2:
        raise CorruptLogError("a partially shredded variant's value is not an object")
    h = header >> 2
    offset_size, id_size, large = (h & 3) + 1, ((h >> 2) & 3) + 1, (h >> 4) & 1
    n_size = 4 if large else 1
    n = int.from_bytes(value[1 : 1 + n_size], "little")
    pos = 1 + n_size
    ids = [int.from_bytes(value[pos + i * id_size : pos + (i + 1) * id_size], "little") for i in range(n)]
    pos += n * id_size
    offsets = [int.from_bytes(value[pos + i * offset_size : pos + (i + 1) * offset_size], "little")
               for i in range(n + 1)]  # fmt: skip
    start = pos + (n + 1) * offset_size
    names = {i: k for k, i in keys.items()}
    ends = sorted(offsets)
    out = {}
    for field_id, offset in zip(ids, offsets[:n], strict=True):
        end = next(e for e in ends if e > offset)
        out[names[field_id]] = value[start + offset : start + end]
    return out


def _size_for(value: int) -> int:
    return 1 if value < 1 << 8 else 2 if value < 1 << 16 else 3 if value < 1 << 24 else 4


def _encode_object(fields: dict[str, bytes], keys: dict[str, int]) -> bytes:
    try:
        ordered = sorted(((name.encode("utf-8"), keys[name], data) for name, data in fields.items()))
    except KeyError as exc:
        raise CorruptLogError(f"shredded variant field {exc} is not in the value's metadata") from None
    n = len(ordered)
    total = sum(len(d) for *_, d in ordered)
    id_size, offset_size = _size_for(max((i for _, i, _ in ordered), default=0)), _size_for(total)
    large = n > 255
    header = ((int(large) << 4) | ((id_size - 1) << 2) | (offset_size - 1)) << 2 | 2
    out = bytearray([header]) + n.to_bytes(4 if large else 1, "little")
    for _, field_id, _ in ordered:
        out += field_id.to_bytes(id_size, "little")
    offset = 0
    for *_, data in ordered:
        out += offset.to_bytes(offset_size, "little")
        offset += len(data)
    out += offset.to_bytes(offset_size, "little")
    for *_, data in ordered:
        out += data
    return bytes(out)


def _encode_array(items: list[bytes]) -> bytes:
    n, total = len(items), sum(len(i) for i in items)
    offset_size, large = _size_for(total), len(items) > 255
    header = ((int(large) << 2) | (offset_size - 1)) << 2 | 3
    out = bytearray([header]) + n.to_bytes(4 if large else 1, "little")
    offset = 0
    for item in items:
        out += offset.to_bytes(offset_size, "little")
        offset += len(item)
    out += offset.to_bytes(offset_size, "little")
    return bytes(out + b"".join(items))


def _primitive(type_id: int, data: bytes = b"") -> bytes:
    return bytes([type_id << 2]) + data


def encode_primitive(value: Any, t: pa.DataType) -> bytes:
    """A shredded primitive (as read, temporal types as integers) in the variant encoding of its type."""
    if pa.types.is_boolean(t):
        return _primitive(1 if value else 2)
    if pa.types.is_integer(t):
        widths = {8: (3, "<b"), 16: (4, "<h"), 32: (5, "<i"), 64: (6, "<q")}
        type_id, fmt = widths[t.bit_width]
        return _primitive(type_id, struct.pack(fmt, value))
    if pa.types.is_float64(t):
        return _primitive(7, struct.pack("<d", value))
    if pa.types.is_float32(t):
        return _primitive(14, struct.pack("<f", value))
    if pa.types.is_decimal(t):
        unscaled = int(Decimal(value).scaleb(t.scale))
        type_id, width = (8, 4) if t.precision <= 9 else (9, 8) if t.precision <= 18 else (10, 16)
        return _primitive(type_id, bytes([t.scale]) + unscaled.to_bytes(width, "little", signed=True))
    if pa.types.is_date32(t):
        return _primitive(11, struct.pack("<i", value))
    if pa.types.is_timestamp(t):
        nanos = t.unit == "ns"
        type_id = (18 if nanos else 12) if t.tz is not None else (19 if nanos else 13)
        return _primitive(type_id, struct.pack("<q", value))
    if pa.types.is_time64(t):
        return _primitive(17, struct.pack("<q", value))
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        data = value.encode("utf-8")
        if len(data) < 64:
            return bytes([len(data) << 2 | 1]) + data
        return _primitive(16, struct.pack("<I", len(data)) + data)
    if pa.types.is_fixed_size_binary(t) and t.byte_width == 16:
        return _primitive(20, bytes(value))  # uuid, big-endian as stored
    if pa.types.is_binary(t) or pa.types.is_large_binary(t):
        return _primitive(15, struct.pack("<I", len(value)) + bytes(value))
    raise CorruptLogError(f"a shredded variant holds a typed_value of type {t}, which the spec does not have")


# -- Python values (tests, and callers that build variants) ----------------------------------------------
def from_python(obj: Any) -> tuple[bytes, bytes]:
    """``(value, metadata)`` of a JSON-like Python value (None, bool, int, float, Decimal, str, list, dict),
    with a sorted metadata dictionary, as ``parse_json`` would encode it."""
    names: set[str] = set()
    _collect_keys(obj, names)
    ordered = sorted(names, key=lambda k: k.encode("utf-8"))
    keys = {k: i for i, k in enumerate(ordered)}
    data = [k.encode("utf-8") for k in ordered]
    size = _size_for(max(len(ordered), sum(len(d) for d in data)))
    metadata = bytearray([1 | (1 << 4) | ((size - 1) << 6)]) + len(ordered).to_bytes(size, "little")
    offset = 0
    for d in data:
        metadata += offset.to_bytes(size, "little")
        offset += len(d)
    metadata += offset.to_bytes(size, "little") + b"".join(data)
    return _encode_python(obj, keys), bytes(metadata)


def _collect_keys(obj: Any, names: set[str]) -> None:
    if isinstance(obj, dict):
        names.update(obj)
        for v in obj.values():
            _collect_keys(v, names)
    elif isinstance(obj, list):
        for v in obj:
            _collect_keys(v, names)


def _encode_python(obj: Any, keys: dict[str, int]) -> bytes:
    if obj is None:
        return NULL
    if isinstance(obj, bool):
        return _primitive(1 if obj else 2)
    if isinstance(obj, int):
        for bits in (8, 16, 32, 64):
            if -(1 << (bits - 1)) <= obj < 1 << (bits - 1):
                return encode_primitive(obj, pa.int64() if bits == 64 else getattr(pa, f"int{bits}")())
        raise ValueError(f"{obj} does not fit a variant integer")
    if isinstance(obj, float):
        return encode_primitive(obj, pa.float64())
    if isinstance(obj, Decimal):
        exponent = obj.as_tuple().exponent
        scale = max(0, -exponent) if isinstance(exponent, int) else 0
        return encode_primitive(obj, pa.decimal128(38, scale))
    if isinstance(obj, str):
        return encode_primitive(obj, pa.string())
    if isinstance(obj, list):
        return _encode_array([_encode_python(v, keys) for v in obj])
    if isinstance(obj, dict):
        return _encode_object({k: _encode_python(v, keys) for k, v in obj.items()}, keys)
    raise ValueError(f"{type(obj).__name__} values have no variant encoding here")


def to_python(value: bytes, metadata: bytes) -> Any:
    """The Python value of an encoded variant (temporal values as their integers, binaries as bytes)."""
    keys = {i: k for k, i in _dictionary(metadata).items()}
    return _decode(value, keys)


def to_json(value: bytes, metadata: bytes) -> str:
    """The variant as compact JSON with sorted keys (what Spark's ``to_json`` prints, keys aside)."""
    return json.dumps(to_python(value, metadata), separators=(",", ":"), sort_keys=True, default=str)


def _decode(value: bytes, keys: dict[int, str]) -> Any:
    basic, header = value[0] & 3, value[0] >> 2
    if basic == 1:
        return value[1 : 1 + header].decode("utf-8")
    if basic == 2:
        inverse = {k: i for i, k in keys.items()}
        return {k: _decode(v, keys) for k, v in _object_fields(value, inverse).items()}
    if basic == 3:
        offset_size, n_size = (header & 3) + 1, 4 if (header >> 2) & 1 else 1
        n = int.from_bytes(value[1 : 1 + n_size], "little")
        pos = 1 + n_size
        offsets = [int.from_bytes(value[pos + i * offset_size : pos + (i + 1) * offset_size], "little")
                   for i in range(n + 1)]  # fmt: skip
        start = pos + (n + 1) * offset_size
        return [_decode(value[start + offsets[i] : start + offsets[i + 1]], keys) for i in range(n)]
    data = value[1:]
    simple = {0: None, 1: True, 2: False}
    if header in simple:
        return simple[header]
    fixed = {3: "<b", 4: "<h", 5: "<i", 6: "<q", 7: "<d", 11: "<i", 12: "<q", 13: "<q", 14: "<f", 17: "<q",
             18: "<q", 19: "<q"}  # fmt: skip
    if header in fixed:
        return struct.unpack_from(fixed[header], data)[0]
    if header in (8, 9, 10):
        width = {8: 4, 9: 8, 10: 16}[header]
        return Decimal(int.from_bytes(data[1 : 1 + width], "little", signed=True)).scaleb(-data[0])
    if header in (15, 16):
        size = struct.unpack_from("<I", data)[0]
        raw = data[4 : 4 + size]
        return raw.decode("utf-8") if header == 16 else raw
    if header == 20:
        return data[:16]
    raise CorruptLogError(f"variant primitive type {header} is not in the spec")
