"""``map_value``: the fast lookup of one key in maps (partition values) answers as Arrow's ``map_lookup``.

The fast path takes the value from one position of every map; any other shape (keys in another order,
missing, repeated, null maps, different widths, slices) must fall back and still answer the same.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from airflow_provider_delta.log.base.arrow_utils import map_value

MAPS = pa.map_(pa.string(), pa.string())

CASES = {
    "same order": [[("a", "1"), ("b", "2")], [("a", "3"), ("b", None)]],
    "other order": [[("b", "1"), ("a", "2")], [("a", "3"), ("b", "4")]],
    "null map": [[("a", "1")], None, [("a", "2")]],
    "empty map": [[("a", "1")], []],
    "no rows": [],
    "key absent": [[("x", "1")], [("x", "2")]],
    "repeated key": [[("b", "0"), ("a", "1"), ("a", "2")], [("b", "3"), ("a", "4"), ("a", "5")]],
    "earlier in some": [[("a", "0"), ("b", "1")], [("b", "2"), ("b", "3")]],
}


@pytest.mark.parametrize("rows", CASES.values(), ids=CASES.keys())
@pytest.mark.parametrize("key", ["a", "b"])
def test_map_value_answers_as_map_lookup(rows: list, key: str) -> None:
    maps = pa.array(rows, MAPS)
    for array in (maps, maps.slice(1), pa.chunked_array([maps, maps.slice(1)], MAPS)):
        expected = pc.map_lookup(array, pa.scalar(key), "first")
        assert map_value(array, key).to_pylist() == expected.to_pylist()
