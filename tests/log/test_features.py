"""The feature registry is the one answer to "what does this client do with feature X".

Checked against the newest protocol text (every feature it names has a record with a disposition), and by
adding a made-up feature to the registry in the test: reads, writes, checkpoints, VACUUM, log cleanup and
OPTIMIZE all take their answer from it, so one record decides for all of them.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pyarrow as pa
import pytest

from airflow_provider_delta.log import DeltaTable, Protocol, UnsupportedFeatureError
from airflow_provider_delta.log.commits.committer import committer_for
from airflow_provider_delta.log.features import registry
from airflow_provider_delta.log.features.configuration import TableConfiguration
from airflow_provider_delta.log.features.creation import initial_actions
from airflow_provider_delta.log.features.registry import (
    FEATURES,
    READ_ONLY,
    READ_WRITE,
    REFUSED,
    RW,
    Disposition,
    Kind,
    TableFeature,
    W,
)

PROTOCOL_TEXT = Path(os.environ["DELTA_SHARED_DIR"]) / "protocol" / "PROTOCOL-2026-08-22.md"


def _named_by_protocol() -> set[str]:
    """Feature names the newest protocol gives: its appendix table, and every ``name`` it calls a feature."""
    text = PROTOCOL_TEXT.read_text()
    appendix = text[text.index("## Valid Feature Names in Table Features") :]
    appendix = appendix[: appendix.index("\n## ", 10)]
    names = set(re.findall(r"^\[[^\]]+\]\([^)]*\) \| `([A-Za-z0-9-]+)` \|", appendix, re.M))
    # "the feature `x`", "`x` table feature", "feature name `x`", "`x` feature": in the sections' own words
    names |= set(re.findall(r"feature(?: name)? `([a-z][A-Za-z0-9-]+)`", text))
    names |= set(re.findall(r"`([a-z][A-Za-z0-9-]+)` (?:table )?feature", text))
    return names - {"readerFeatures", "writerFeatures", "protocol", "variant"}


def test_every_feature_the_newest_protocol_names_has_a_record():
    named = _named_by_protocol()
    assert {"catalogManaged", "icebergCompatV2", "allowColumnDefaults", "variantShredding"} <= named
    missing = sorted(named - set(FEATURES))
    assert not missing, f"features the protocol names without a registry record: {missing}"


def test_every_record_says_what_the_feature_is_and_what_this_client_does():
    kinds = {"Readers and writers": Kind.READER_WRITER, "Readers and Writers": Kind.READER_WRITER,
             "Writers only": Kind.WRITER}  # fmt: skip
    text = PROTOCOL_TEXT.read_text()
    rows = re.findall(r"^\[[^\]]+\]\([^)]*\) \| `([A-Za-z0-9-]+)` \| (.+)$", text, re.M)
    assert len(rows) >= 19
    for name, who in rows:
        assert FEATURES[name].kind is kinds[who.strip()], name  # as the appendix says
    for f in FEATURES.values():
        assert isinstance(f.disposition, Disposition) and f.spec, f.name
        if f.disposition is not READ_WRITE:
            assert f.note, f"{f.name}: a refused feature says why"
        for needed in f.requires:
            assert needed in FEATURES, f"{f.name} requires unknown {needed}"
        if f.legacy is not None:
            assert f.legacy[1] in range(2, 7) and f.legacy[0] in (1, 2), f.name
    # Features refused today are recorded, not missing.
    for name in ("catalogManaged", "icebergCompatV3", "icebergWriterCompatV1", "allowColumnDefaults",
                 "checkpointProtection", "collations-preview"):  # fmt: skip
        assert FEATURES[name].disposition is not READ_WRITE, name


def test_legacy_versions_and_requirements_come_from_the_records():
    assert registry.legacy_features() == {
        "appendOnly": (1, 2), "invariants": (1, 2), "checkConstraints": (1, 3), "changeDataFeed": (1, 4),
        "generatedColumns": (1, 4), "columnMapping": (2, 5), "identityColumns": (1, 6),
    }  # fmt: skip
    assert registry.with_requirements({"rowTracking"}) == {"rowTracking", "domainMetadata"}
    assert registry.with_requirements({"icebergWriterCompatV1"}) >= {"icebergCompatV2", "columnMapping"}


def test_table_creation_takes_features_from_the_registry():
    schema = pa.schema([pa.field("id", pa.int64()), pa.field("t", pa.timestamp("us"))])
    protocol, _ = initial_actions(schema, [], {"delta.enableRowTracking": "true"}, None, None)
    assert set(protocol.writer_features) == {"rowTracking", "domainMetadata", "timestampNtz"}
    assert protocol.reader_features == ("timestampNtz",)
    protocol, _ = initial_actions(schema.remove(1), [], {"delta.appendOnly": "true"}, None, None)
    assert protocol == Protocol(1, 2)
    # A schema with default values needs allowColumnDefaults, which this client refuses by name.
    defaults = {"type": "struct", "fields": [
        {"name": "x", "type": "long", "nullable": True, "metadata": {"CURRENT_DEFAULT": "1"}}]}  # fmt: skip
    protocol, _ = initial_actions(defaults, [], {}, None, None)
    assert "allowColumnDefaults" in protocol.writer_features


# -- a made-up feature, decided by its record alone ----------------------------------------------------------
MADE_UP = "madeUpFeature"


def _table_with_made_up_feature(root: Path, kind: Kind) -> DeltaTable:
    """A table whose latest protocol (version 2) lists a feature no Delta client knows, written by hand."""
    table = DeltaTable(str(root))
    table.write(pa.table({"id": pa.array([1, 2, 3], pa.int64())}))
    table.write(pa.table({"id": pa.array([4], pa.int64())}))
    readers = [MADE_UP] if kind is RW else []
    protocol = {"protocol": {"minReaderVersion": 3, "minWriterVersion": 7, "readerFeatures": readers,
                             "writerFeatures": [MADE_UP]}}  # fmt: skip
    info = {"commitInfo": {"timestamp": 1, "operation": "UPGRADE PROTOCOL", "txnId": "made-up"}}
    (root / "_delta_log" / f"{2:020d}.json").write_text(json.dumps(info) + "\n" + json.dumps(protocol) + "\n")
    return table


def _every_operation(table: DeltaTable) -> dict[str, Exception | None]:
    """What each operation does on the table: None when it ran, else the exception it raised."""
    operations = {
        "read": lambda: table.to_pyarrow_table(),
        "write": lambda: table.write(pa.table({"id": pa.array([5], pa.int64())})),
        "checkpoint": lambda: table.checkpoint(),
        "vacuum": lambda: table.vacuum(dry_run=True),
        "cleanup": lambda: table.cleanup_expired_logs(),
        "optimize": lambda: table.optimize(),
    }
    out: dict[str, Exception | None] = {}
    for name, run in operations.items():
        try:
            run()
            out[name] = None
        except UnsupportedFeatureError as exc:
            out[name] = exc
    return out


@pytest.mark.parametrize(
    ("kind", "disposition", "refused"),
    [
        (RW, REFUSED, {"read", "write", "checkpoint", "vacuum", "cleanup", "optimize"}),
        (W, READ_ONLY, {"write", "checkpoint", "vacuum", "cleanup", "optimize"}),
        (RW, READ_WRITE, set()),
        (W, READ_WRITE, set()),
    ],
)
def test_a_made_up_feature_is_decided_by_its_record(tmp_path, monkeypatch, kind, disposition, refused):
    table = _table_with_made_up_feature(tmp_path / "t", kind)
    unknown = _every_operation(DeltaTable(str(tmp_path / "t")))
    # Without a record, the feature is unknown: refused by every operation that needs it.
    assert {k for k, v in unknown.items() if v is not None} == (
        {"read", "write", "checkpoint", "vacuum", "cleanup", "optimize"} if kind is RW else
        {"write", "checkpoint", "vacuum", "cleanup", "optimize"}
    )  # fmt: skip
    record = TableFeature(MADE_UP, kind, disposition, None, spec="a test", note="made up for a test")
    monkeypatch.setitem(FEATURES, MADE_UP, record)
    table = DeltaTable(str(tmp_path / "t"))
    seen = _every_operation(table)
    assert {k for k, v in seen.items() if v is not None} == refused
    for name in refused:
        assert MADE_UP in seen[name].features and MADE_UP in str(seen[name]), name
        assert "made up for a test" in str(seen[name])  # the record's reason reaches the user


# -- the committer seam -----------------------------------------------------------------------------------
def test_a_catalog_managed_table_is_refused_at_the_committer_seam(tmp_path):
    _, metadata = initial_actions(pa.schema([("id", pa.int64())]), [], {}, None, None)
    for features in (["catalogManaged", "inCommitTimestamp", "vacuumProtocolCheck"],
                     ["coordinatedCommits-preview", "inCommitTimestamp"]):  # fmt: skip
        readers = [f for f in features if registry.is_reader_feature(f)]
        config = TableConfiguration(Protocol(3, 7, tuple(readers), tuple(features)), metadata)
        table = DeltaTable(str(tmp_path / "t"))
        with pytest.raises(UnsupportedFeatureError, match="catalog-managed") as caught:
            committer_for(config, table.store, table.uri, lambda state: False, allow_unsafe=False)
        assert features[0] in caught.value.features


def test_a_transaction_commits_through_the_committer_it_is_given(tmp_path):
    """The seam a catalog committer would plug into: the transaction hands each attempt to it."""
    table = DeltaTable(str(tmp_path / "t"))
    table.write(pa.table({"id": pa.array([1], pa.int64())}))
    snap = table.snapshot()
    inner = committer_for(
        snap.table_configuration, table.store, table.uri, lambda s: False, allow_unsafe=False
    )
    calls = []

    class Recording:
        maybe_landed = False

        @property
        def own_file(self):
            return inner.own_file

        def commit(self, version, data, txn_id, *, base_seen=False):
            calls.append((version, txn_id, json.loads(data.splitlines()[0])["commitInfo"]["txnId"]))
            return inner.commit(version, data, txn_id, base_seen=base_seen)

    from airflow_provider_delta.log import Transaction

    result = Transaction(table, snap, committer=Recording()).add_files([]).commit("WRITE")
    assert result.version == 1 and [c[0] for c in calls] == [1] and calls[0][1] == calls[0][2]
    assert table.snapshot().version == 1


def test_a_feature_asked_for_brings_the_features_it_requires(tmp_path):
    table = DeltaTable(str(tmp_path / "t"))
    table.write(pa.table({"id": pa.array([1], pa.int64())}))
    table.write(
        pa.table({"id": pa.array([2], pa.int64())}), configuration={"delta.feature.rowTracking": "supported"}
    )
    protocol = table.snapshot().protocol
    assert {"rowTracking", "domainMetadata"} <= set(protocol.writer_features)


def test_a_preview_name_supports_its_feature():
    """Delta Spark 4 lists ``variantShredding-preview``; a schema that needs ``variantShredding`` is
    satisfied by it, as Delta Spark's own writer is."""
    _, metadata = initial_actions(pa.schema([("id", pa.int64())]), [], {}, None, None)
    listed = ("variantShredding-preview", "variantType-preview")
    config = TableConfiguration(Protocol(3, 7, listed, listed), metadata)
    assert config.supports("variantShredding") and config.supports("variantType")
    assert config.unsupported({"variantShredding", "variantType", "rowTracking"}) == ["rowTracking"]
