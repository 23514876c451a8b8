"""Our transaction-log core against every golden table in ``../shared/golden`` and two oracles.

Data-driven: each test is parametrized over ``tables.json`` and decides what to check from the table's folder
(expected data, DAT version metadata, commit mtimes, ``expected_outcome.json``) and from what the oracles make
of it, never from a list of table names (but for the xfails of reported core bugs, ``KNOWN_CORE_BUGS``).
A table added to the folder is covered without new code.

- deltalake (delta-rs) is the oracle for log state: version, live files, protocol, metadata, app transactions,
  every version's file list and the history.
- The Rust kernel is the oracle for the version and, through a full scan, the number of rows.
- Where both refuse a table, ours must refuse it too, with one of our named errors.
"""

from __future__ import annotations

import json
import os
import shutil
import urllib.parse
from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from golden import (
    GOLDEN_DIR,
    GoldenTable,
    Outcome,
    attempt,
    deltalake_files,
    expected_rows,
    implied_reader_features,
    kernel_read,
    live_rows,
    load_tables,
    open_deltalake,
    our_files,
)

from airflow_provider_delta.log import (
    AddFile,
    CorruptLogError,
    DeltaTable,
    TableNotFoundError,
    UnsupportedFeatureError,
    VersionNotFoundError,
)
from airflow_provider_delta.log.features.protocol import MAX_READER_VERSION, supported_reader_features
from airflow_provider_delta.log.maintenance.vacuum import VACUUM_FIELDS
from airflow_provider_delta.log.snapshot.snapshot import load_snapshot

NAMED_ERRORS = (CorruptLogError, UnsupportedFeatureError, VersionNotFoundError, TableNotFoundError)
TABLES = load_tables()
_BY_ID = {t.id: t for t in TABLES}

pytestmark = pytest.mark.skipif(not TABLES, reason=f"no golden tables in {GOLDEN_DIR}")


# Core bugs found by this suite, one reason each, with the (test, table) pairs they break. Each pair runs as
# xfail(strict=True): it must keep failing until the core is fixed, and then its entry must go. Fixed so
# far: partition values typed by JSON inference, txn retention ignored, null schemaString accepted.
_KNOWN: list[tuple[str, str, list[str]]] = []
KNOWN_CORE_BUGS: dict[tuple[str, str], str] = {(test, t): why for why, test, ids in _KNOWN for t in ids}


def over(tables: list[GoldenTable]) -> Callable[[Callable[..., None]], Callable[..., None]]:
    """Parametrize a test over ``tables``, marking the pairs a reported core bug breaks."""

    def decorate(test: Callable[..., None]) -> Callable[..., None]:
        params = []
        for t in tables:
            reason = KNOWN_CORE_BUGS.get((test.__name__, t.id))
            marks = [pytest.mark.xfail(strict=True, reason=reason)] if reason else []
            params.append(pytest.param(t, id=t.id, marks=marks))
        return pytest.mark.parametrize("table", params)(test)

    return decorate


@cache
def ours_latest(table_id: str) -> Outcome:
    return attempt(lambda: DeltaTable(str(_BY_ID[table_id].root)).snapshot())


@cache
def deltalake_latest(table_id: str) -> Outcome:
    return open_deltalake(_BY_ID[table_id].root)


def assert_named_error(outcome: Outcome, why: str) -> None:
    assert not outcome.ok, f"ours read the table, but {why}"
    assert isinstance(outcome.error, NAMED_ERRORS), f"{why}; ours crashed instead: {outcome.describe()}"


def expected_refusal(min_reader_version: int, reader_features: Any) -> set[str]:
    """The reader features we must name when refusing a table with this protocol (empty: we must read it)."""
    return implied_reader_features(min_reader_version, reader_features) - supported_reader_features()


def assert_justified_refusal(error: BaseException, min_reader_version: int, reader_features: Any) -> None:
    """Ours refused a table an oracle reads: allowed only for features the table needs and we lack."""
    assert isinstance(error, UnsupportedFeatureError), f"ours failed where an oracle reads: {error!r}"
    if min_reader_version > MAX_READER_VERSION:
        assert str(min_reader_version) in str(error)
        return
    missing = expected_refusal(min_reader_version, reader_features)
    assert missing, f"ours refused a table whose reader features are all supported: {error}"
    assert set(error.features) == missing, f"refusal names {error.features}, the protocol needs {missing}"


def log_app_ids(root: Path) -> set[str]:
    """Every ``txn.appId`` any commit or checkpoint of the log mentions, read without the core."""
    ids: set[str] = set()
    log_dir = root / "_delta_log"
    for p in log_dir.iterdir():
        if p.suffix == ".json" and p.name[:20].isdigit():
            for line in p.read_text().splitlines():
                if '"txn"' in line:
                    ids.add(json.loads(line).get("txn", {}).get("appId"))
        elif ".checkpoint" in p.name and p.suffix == ".parquet":
            schema = pq.read_schema(p)
            if "txn" in schema.names:
                ids |= {t["appId"] for t in pq.read_table(p, columns=["txn"]).column("txn").to_pylist() if t}
    ids.discard(None)
    return ids


def compare_with_deltalake(table: GoldenTable, ours: Any, dt: Any) -> None:
    assert ours.version == dt.version()
    theirs, part_schema = deltalake_files(dt)
    assert our_files(ours, part_schema) == theirs

    protocol = dt.protocol()
    assert ours.protocol.min_reader_version == protocol.min_reader_version
    assert ours.protocol.min_writer_version == protocol.min_writer_version
    assert set(ours.protocol.reader_features or ()) == set(protocol.reader_features or ())
    assert set(ours.protocol.writer_features or ()) == set(protocol.writer_features or ())

    metadata = dt.metadata()
    assert ours.metadata.id == metadata.id
    assert list(ours.metadata.partition_columns) == list(metadata.partition_columns)
    assert ours.metadata.configuration == metadata.configuration
    assert json.loads(ours.metadata.schema_string) == json.loads(dt.schema().to_json())

    # deltalake 1.6 answers app transactions only by appId: ask it about every appId the log mentions.
    app_ids = log_app_ids(table.root) | set(ours.app_transactions)
    assert {a: ours.app_transactions.get(a) for a in app_ids} == {
        a: dt.transaction_version(a) for a in app_ids
    }


# --- the latest snapshot ------------------------------------------------------------------------------------


@over(TABLES)
def test_latest_snapshot_agrees_with_oracles(table: GoldenTable) -> None:
    ours = ours_latest(table.id)
    if table.must_fail:
        assert_named_error(ours, f"{table.folder / 'expected_outcome.json'} says opening must fail")
        return
    dl = deltalake_latest(table.id)
    if dl.ok:
        # Tagged negative/corrupt or not: if an oracle reads the table, whatever is wrong with it is something
        # readers survive (a corrupt _last_checkpoint, a gap a checkpoint covers), so ours must read it too.
        if not ours.ok:
            protocol = dl.value.protocol()
            assert_justified_refusal(ours.error, protocol.min_reader_version, protocol.reader_features)
            return
        compare_with_deltalake(table, ours.value, dl.value)
        return
    kernel = kernel_read(table.url)
    if kernel.snapshot.ok and kernel.rows.ok:
        assert ours.ok, f"deltalake refuses ({dl.describe()}) but the kernel reads; ours: {ours.describe()}"
        assert ours.value.version == kernel.snapshot.value
        assert live_rows(table.root, ours.value.files) == kernel.rows.value
        return
    why = f"deltalake ({dl.describe()}) and the kernel ({kernel.rows.describe()}) both refuse it"
    assert_named_error(ours, why)


@over(TABLES)
def test_version_and_rows_agree_with_kernel(table: GoldenTable) -> None:
    kernel = kernel_read(table.url)
    if not kernel.snapshot.ok:
        pytest.skip(f"the kernel cannot build a snapshot: {kernel.snapshot.describe()}")
    ours = ours_latest(table.id)
    if not ours.ok:
        # The kernel builds snapshots without checking reader features (its scan refuses them), so the only
        # acceptable failure is a justified refusal; the protocol comes from deltalake, else the catalogue.
        dl = deltalake_latest(table.id)
        if dl.ok:
            protocol = dl.value.protocol()
            assert_justified_refusal(ours.error, protocol.min_reader_version, protocol.reader_features)
        else:
            assert_justified_refusal(ours.error, table.info["minReader"], table.info["readerFeatures"])
        assert not kernel.rows.ok, "the kernel scans a table ours refuses"
        return
    assert ours.value.version == kernel.snapshot.value
    if kernel.rows.ok:
        assert live_rows(table.root, ours.value.files) == kernel.rows.value


def _refused_by_protocol(table: GoldenTable) -> bool:
    reader = table.info.get("minReader")
    if reader is None:
        return False
    return reader > MAX_READER_VERSION or bool(expected_refusal(reader, table.info.get("readerFeatures")))


@over([t for t in TABLES if _refused_by_protocol(t)])
def test_unsupported_features_are_named(table: GoldenTable) -> None:
    """Variant, catalogManaged/catalogOwned and future reader versions: refuse, naming what is missing."""
    ours = ours_latest(table.id)
    assert not ours.ok, "ours read a table whose protocol needs features we do not support"
    assert_justified_refusal(ours.error, table.info["minReader"], table.info["readerFeatures"])


# --- a projected replay -------------------------------------------------------------------------------------


def _file_keys(t: pa.Table, fields: tuple[str, ...]) -> list[tuple[Any, ...]]:
    rows = t.select(list(fields)).to_pylist()
    return sorted(tuple(json.dumps(r[f], sort_keys=True) for f in fields) for r in rows)


@over(TABLES)
def test_projected_replay_agrees_with_the_full_replay(table: GoldenTable) -> None:
    """VACUUM's replay (paths, deletion vectors, deletion timestamps only: checkpoints read by column
    projection, sidecars and multi-part checkpoints included) finds the same files, deletion vectors and
    tombstones as the full replay, at the latest version and at every checkpoint."""
    store = DeltaTable(str(table.root)).store
    listing = table.log_listing
    versions = {None} | {v for v in listing.checkpoints if listing.reconstructable(v)}
    for version in versions:
        full = attempt(lambda v=version: load_snapshot(store, v, keep_expired_tombstones=True))
        projected = attempt(
            lambda v=version: load_snapshot(store, v, fields=VACUUM_FIELDS, keep_expired_tombstones=True)
        )
        if not full.ok:
            assert not projected.ok and type(projected.error) is type(full.error), (version, full.describe())
            continue
        assert projected.ok, (version, projected.describe())
        f, p = full.value, projected.value
        assert (p.version, p.protocol, p.metadata) == (f.version, f.protocol, f.metadata)
        assert p.segment == f.segment
        live, tomb = ("path", "deletionVector"), ("path", "deletionTimestamp", "deletionVector")
        assert (p.files.column_names, p.tombstones.column_names) == (list(live), list(tomb))
        assert _file_keys(p.files, live) == _file_keys(f.files, live)
        assert _file_keys(p.tombstones, tomb) == _file_keys(f.tombstones, tomb)


def test_add_files_from_a_table_equal_those_from_its_rows() -> None:
    """``AddFile.from_table`` (a column at a time) makes the same actions as ``from_dict`` of each row, on
    the live files of every golden table that opens: partition values with nulls, tags, deletion vectors,
    row tracking, clustering, absent columns and nulls where Delta Spark left fields out."""
    compared = 0
    for table in TABLES:
        opened = attempt(lambda t=table: DeltaTable(str(t.root)).snapshot())
        if not opened.ok:
            continue
        files = opened.value.files
        assert AddFile.from_table(files) == [AddFile.from_dict(r) for r in files.to_pylist()], table.id
        compared += files.num_rows
    assert compared > 0


# --- expected data ------------------------------------------------------------------------------------------


@over([t for t in TABLES if t.dat_versions])
def test_dat_expected_versions(table: GoldenTable) -> None:
    handle = DeltaTable(str(table.root))
    for label, folder in table.dat_versions:
        expected = json.loads((folder / "table_version_metadata.json").read_text())
        snapshot = handle.snapshot() if label == "latest" else handle.snapshot(version=expected["version"])
        assert snapshot.version == expected["version"], label
        assert snapshot.protocol.min_reader_version == expected["min_reader_version"], label
        assert snapshot.protocol.min_writer_version == expected["min_writer_version"], label
        if "properties" in expected:
            assert snapshot.metadata.configuration == expected["properties"], label
        for key in ("reader_features", "writer_features"):
            if key in expected:
                assert set(getattr(snapshot.protocol, key) or ()) == set(expected[key]), label
        content = folder / "table_content"
        if content.is_dir() and any(content.glob("*.parquet")):
            # Deletion vectors are not applied here (the data reader's job); live_rows subtracts their
            # cardinality from the footer counts, which is what a DV-aware reader returns.
            assert live_rows(table.root, snapshot.files) == expected_rows(content), label


@over([t for t in TABLES if t.spark_expected is not None])
def test_spark_expected_rows(table: GoldenTable) -> None:
    ours = ours_latest(table.id)
    assert ours.ok, ours.describe()
    assert table.spark_expected is not None
    assert live_rows(table.root, ours.value.files) == expected_rows(table.spark_expected)


# --- time travel --------------------------------------------------------------------------------------------


@over([t for t in TABLES if t.commit_mtimes])
def test_time_travel_by_commit_mtime(table: GoldenTable, tmp_path: Path) -> None:
    copy = tmp_path / "delta"
    shutil.copytree(table.root, copy)
    assert table.commit_mtimes is not None
    commits = sorted((int(name[:20]), mtime) for name, mtime in table.commit_mtimes.items())
    for name, mtime in table.commit_mtimes.items():
        os.utime(copy / "_delta_log" / name, ns=(mtime * 1_000_000, mtime * 1_000_000))
    handle = DeltaTable(str(copy))
    for i, (version, mtime) in enumerate(commits):
        assert handle.snapshot(timestamp=mtime).version == version
        if i == 0:
            with pytest.raises(VersionNotFoundError):
                handle.snapshot(timestamp=mtime - 1)
        else:
            assert handle.snapshot(timestamp=mtime - 1).version == commits[i - 1][0]
    assert handle.snapshot(timestamp=commits[-1][1] + 60_000).version == commits[-1][0]


@over(TABLES)
def test_every_version_agrees_with_deltalake(table: GoldenTable) -> None:
    if not deltalake_latest(table.id).ok or table.must_fail:
        pytest.skip("deltalake cannot read the table")
    listing = table.log_listing
    handle = DeltaTable(str(table.root))
    for version in listing.versions():
        ours = attempt(lambda v=version: handle.snapshot(version=v))
        if not listing.reconstructable(version):
            assert not ours.ok and isinstance(ours.error, VersionNotFoundError), (version, ours.describe())
            continue
        dl = open_deltalake(table.root, version)
        if not dl.ok:
            assert_named_error(ours, f"deltalake refuses version {version}: {dl.describe()}")
            continue
        if not ours.ok:
            protocol = dl.value.protocol()
            assert_justified_refusal(ours.error, protocol.min_reader_version, protocol.reader_features)
            continue
        assert ours.value.version == version
        theirs, part_schema = deltalake_files(dl.value)
        assert our_files(ours.value, part_schema) == theirs, f"files at version {version}"
    for version in listing.gap_versions():
        ours = attempt(lambda v=version: handle.snapshot(version=v))
        assert_named_error(ours, f"version {version} falls in a gap of the log")


@over(TABLES)
def test_history_agrees_with_deltalake(table: GoldenTable) -> None:
    dl = deltalake_latest(table.id)
    if not dl.ok or table.must_fail:
        pytest.skip("deltalake cannot read the table")
    ours = attempt(lambda: DeltaTable(str(table.root)).history())
    if not ours.ok:
        protocol = dl.value.protocol()
        assert_justified_refusal(ours.error, protocol.min_reader_version, protocol.reader_features)
        return
    listing = table.log_listing
    # Independent of any oracle: one entry per commit file still in the log, newest first.
    assert [h.version for h in ours.value] == sorted(listing.commits, reverse=True)
    # deltalake leaves out commits without a commitInfo (Delta Spark lists them, with a null operation, as
    # ours does), so compare the entries it can know about.
    with_info = [h for h in ours.value if h.commit_info]
    theirs = dl.value.history()
    assert [h.operation for h in with_info] == [h.get("operation") for h in theirs]
    if not listing.gap_versions():
        # With a gap in the log, deltalake numbers its entries by counting down from the latest version
        # (errlogs-table_g: commits 0..13 and 9999 come back as 9999..9985), so versions only compare without.
        assert [h.version for h in with_info] == [h["version"] for h in theirs]


@over(TABLES)
def test_typed_partition_values_agree_with_deltalake(table: GoldenTable) -> None:
    ours, dl = ours_latest(table.id), deltalake_latest(table.id)
    if not (ours.ok and dl.ok) or not ours.value.partition_columns:
        return  # the latest-snapshot test decides these tables; nothing typed to compare here
    adds = pa.table(dl.value.get_add_actions(flatten=False))
    theirs = {
        urllib.parse.unquote(p): dict(v)
        for p, v in zip(adds.column("path").to_pylist(), adds.column("partition").to_pylist(), strict=True)
    }
    typed = ours.value.partition_values().to_pylist()
    mine = dict(zip(ours.value.file_paths(), typed, strict=True))
    assert mine.keys() == theirs.keys()
    for path, values in mine.items():
        assert values == theirs[path], path
