"""A table whose protocol names a feature we do not implement is refused by name, and nothing is written:
not a commit, not a checkpoint, not a data file of ours."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from airflow_provider_delta.log import DeltaTable, UnsupportedFeatureError, add_file_from_parquet
from airflow_provider_delta.log.features.protocol import supported_reader_features, supported_writer_features


def upgraded(root: Path, protocol: dict) -> DeltaTable:
    """A table another engine upgraded to ``protocol`` at version 1."""
    t = DeltaTable.create(str(root), pa.schema([("k", pa.int64())]))
    (root / "_delta_log" / f"{1:020d}.json").write_text(json.dumps({"protocol": protocol}) + "\n")
    return t


def listing(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


def test_an_unknown_writer_feature_is_refused_by_name_with_nothing_written(tmp_path: Path):
    assert "futureWriterFeature" not in supported_writer_features()
    protocol = {"minReaderVersion": 1, "minWriterVersion": 7,
                "writerFeatures": ["rowTracking", "domainMetadata", "futureWriterFeature"]}  # fmt: skip
    t = upgraded(tmp_path, protocol)
    pq.write_table(pa.table({"k": [1]}), tmp_path / "a.parquet")
    add = add_file_from_parquet(t, "a.parquet")
    before = listing(tmp_path)
    with pytest.raises(UnsupportedFeatureError, match="futureWriterFeature") as err:
        t.transaction().add_files([add]).commit()
    assert err.value.features == ("futureWriterFeature",)  # the features we know are not named
    with pytest.raises(UnsupportedFeatureError, match="futureWriterFeature"):
        t.checkpoint()
    assert listing(tmp_path) == before and t.version() == 1
    assert t.snapshot().num_files == 0  # still readable: writer features do not concern readers


def test_an_unknown_reader_feature_is_refused_by_name_with_nothing_written(tmp_path: Path):
    assert "futureReaderFeature" not in supported_reader_features()
    protocol = {"minReaderVersion": 3, "minWriterVersion": 7,
                "readerFeatures": ["variantType", "futureReaderFeature"],
                "writerFeatures": ["variantType", "futureReaderFeature"]}  # fmt: skip
    t = upgraded(tmp_path, protocol)
    before = listing(tmp_path)
    with pytest.raises(UnsupportedFeatureError, match="futureReaderFeature") as err:
        t.snapshot()
    assert err.value.features == ("futureReaderFeature",)
    with pytest.raises(UnsupportedFeatureError, match="futureReaderFeature"):
        t.transaction().commit()
    assert listing(tmp_path) == before
