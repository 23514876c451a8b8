"""Write side of the core: commits, conflict matrix, writer rules, and interop with delta-rs and the kernel.

The oracles are deltalake (delta-rs) and delta-kernel-rs: what we commit, they must read identically;
what they wrote, we commit on top of and they read back.
"""

from __future__ import annotations

import dataclasses
import json
import urllib.parse
from pathlib import Path

import deltalake
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from delta_kernel_rust_sharing_wrapper import PythonInterface, ScanBuilder, Table

from airflow_provider_delta.log import (
    AddFile,
    ConcurrentAppendError,
    ConcurrentDeleteDeleteError,
    ConcurrentDeleteReadError,
    ConcurrentTransactionError,
    DeltaTable,
    InvalidCommitError,
    MetadataChangedError,
    ProtocolChangedError,
    UnsupportedFeatureError,
    add_file_from_parquet,
)
from airflow_provider_delta.log.actions.actions import Metadata, Protocol

SCHEMA = pa.schema([("id", pa.int64()), ("name", pa.string()), ("p", pa.string())])


def write_parquet(root: Path, rel: str, ids: list[int]) -> str:
    (root / rel).parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table({"id": ids, "name": [f"n{i}" for i in ids]}), root / rel)
    return rel


def kernel_rows(root: Path) -> tuple[int, int]:
    url = root.resolve().as_uri() + "/"
    engine = PythonInterface(url)
    snap = Table(url).snapshot(engine)
    return snap.version(), ScanBuilder(snap).build().execute(engine).read_all().num_rows


def delta_rs_state(root: Path) -> tuple[int, dict[str, int], dict[str, dict]]:
    dt = deltalake.DeltaTable(str(root))
    adds = pa.table(dt.get_add_actions(flatten=False)).to_pylist()
    return (
        dt.version(),
        {urllib.parse.unquote(a["path"]): a["size_bytes"] for a in adds},
        {urllib.parse.unquote(a["path"]): dict(a.get("partition") or {}) for a in adds},
    )


def ours_state(root: Path) -> tuple[int, dict[str, int], dict[str, dict]]:
    s = DeltaTable(str(root)).snapshot()
    rows = s.files.select(["path", "size", "partitionValues"]).to_pylist()
    return (
        s.version,
        {r["path"]: r["size"] for r in rows},
        {r["path"]: dict(r["partitionValues"]) for r in rows},
    )


@pytest.fixture
def table(tmp_path: Path) -> DeltaTable:
    return DeltaTable.create(str(tmp_path), SCHEMA, partition_by=["p"])


def add(t: DeltaTable, root: Path, p: str, ids: list[int], name: str | None = None) -> AddFile:
    rel = write_parquet(root, f"p={p}/{name or 'part-' + str(ids[0])}.parquet", ids)
    return add_file_from_parquet(t, rel, {"p": p})


# -- interop --------------------------------------------------------------------------------------------
def test_what_we_commit_delta_rs_and_the_kernel_read_identically(tmp_path: Path, table: DeltaTable):
    special = "a b%c/d=é"
    f1 = add(table, tmp_path, "x", [1, 2, 3])
    r1 = table.transaction().add_files([f1]).set_app_transaction("ingest", 1).commit()
    f2 = add(table, tmp_path, special.replace("/", "%2F"), [4, 5])
    f2 = AddFile(f2.path, f2.size, {"p": special}, f2.modification_time, stats=f2.stats)
    r2 = table.transaction().add_files([f2]).commit()
    snap = table.snapshot()
    r3 = table.transaction().remove_files([AddFile.from_dict(snap.files.to_pylist()[0])]).commit("DELETE")
    assert (r1.version, r2.version, r3.version) == (1, 2, 3)
    assert ours_state(tmp_path) == delta_rs_state(tmp_path)
    dt = deltalake.DeltaTable(str(tmp_path))
    assert dt.transaction_version("ingest") == 1
    assert [h["operation"] for h in dt.history()] == ["DELETE", "WRITE", "WRITE", "CREATE TABLE"]
    version, rows = kernel_rows(tmp_path)
    assert version == 3
    assert rows == dt.to_pyarrow_table().num_rows
    # every version, not just the last
    for v in range(4):
        ours = DeltaTable(str(tmp_path)).snapshot(version=v)
        theirs = deltalake.DeltaTable(str(tmp_path), version=v)
        assert sorted(ours.file_paths()) == sorted(
            urllib.parse.unquote(a["path"]) for a in pa.table(theirs.get_add_actions()).to_pylist()
        )


def test_stats_from_the_parquet_footer_match_what_delta_rs_computes(tmp_path: Path):
    rows = pa.table({"id": [3, None, 1], "name": ["b", "a", None], "p": ["x", "x", "x"]})
    deltalake.write_deltalake(str(tmp_path / "theirs"), rows, partition_by=["p"])
    theirs = deltalake.DeltaTable(str(tmp_path / "theirs"))
    their_add = pa.table(theirs.get_add_actions(flatten=False)).to_pylist()[0]
    t = DeltaTable.create(str(tmp_path / "ours"), SCHEMA, partition_by=["p"])
    src = tmp_path / "theirs" / urllib.parse.unquote(their_add["path"])
    (tmp_path / "ours" / "p=x").mkdir()
    (tmp_path / "ours" / "p=x" / src.name).write_bytes(src.read_bytes())
    ours = json.loads(add_file_from_parquet(t, f"p=x/{src.name}", {"p": "x"}).stats)
    their_stats = json.loads(
        next(
            json.loads(line)["add"]["stats"]
            for f in sorted((tmp_path / "theirs" / "_delta_log").glob("*.json"))
            for line in f.read_text().splitlines()
            if line.startswith('{"add"')
        )
    )
    for key in ("numRecords", "minValues", "maxValues", "nullCount"):
        assert ours[key] == their_stats[key], key


def test_we_commit_on_top_of_a_delta_rs_table(tmp_path: Path):
    root = tmp_path / "t"
    deltalake.write_deltalake(
        str(root), pa.table({"id": [1, 2], "name": ["a", "b"], "p": ["x", "y"]}), partition_by=["p"]
    )
    deltalake.write_deltalake(
        str(root), pa.table({"id": [3], "name": ["c"], "p": ["x"]}), partition_by=["p"], mode="append"
    )
    t = DeltaTable(str(root))
    snap = t.snapshot()
    new = add_file_from_parquet(snap, write_parquet(root, "p=z/ours.parquet", [10, 11]), {"p": "z"})
    victim = AddFile.from_dict(
        next(r for r in snap.files.to_pylist() if dict(r["partitionValues"])["p"] == "y")
    )
    res = t.transaction().add_files([new]).remove_files([victim]).commit("WRITE")
    assert res.version == 2
    assert ours_state(root) == delta_rs_state(root)
    got = deltalake.DeltaTable(str(root)).to_pyarrow_table().sort_by("id")
    assert got.column("id").to_pylist() == [1, 3, 10, 11]
    # and delta-rs can keep writing after us
    deltalake.write_deltalake(
        str(root), pa.table({"id": [99], "name": ["z"], "p": ["x"]}), partition_by=["p"], mode="append"
    )
    assert ours_state(root) == delta_rs_state(root)


# -- exactly-once app transactions ----------------------------------------------------------------------
def test_app_transaction_commits_once_and_reports_the_holding_version(tmp_path: Path, table: DeltaTable):
    f = add(table, tmp_path, "x", [1])
    first = table.transaction().add_files([f]).set_app_transaction("job", 7).commit()
    for _ in range(3):  # unrelated commits move the table on
        table.transaction().add_files([add(table, tmp_path, "y", [_ + 10])]).commit()
    again = table.transaction().add_files([f]).set_app_transaction("job", 7).commit()
    older = table.transaction().add_files([f]).set_app_transaction("job", 3).commit()
    assert first.version == 1 and not first.already_committed
    assert (again.version, again.already_committed) == (1, True)
    assert (older.version, older.already_committed) == (1, True)
    assert table.snapshot().version == 4
    assert (
        table.transaction()
        .add_files([add(table, tmp_path, "x", [50])])
        .set_app_transaction("job", 8)
        .commit()
        .version
        == 5
    )


def test_racing_same_app_id_with_a_stale_snapshot_does_not_land_twice(tmp_path: Path, table: DeltaTable):
    late = (
        table.transaction().add_files([add(table, tmp_path, "x", [1], "late")]).set_app_transaction("job", 1)
    )
    early = (
        table.transaction().add_files([add(table, tmp_path, "x", [1], "early")]).set_app_transaction("job", 1)
    )
    assert early.commit().version == 1
    res = late.commit()
    assert (res.version, res.already_committed) == (1, True)
    assert table.snapshot().file_paths() == ["p=x/early.parquet"]


def test_same_app_id_moving_to_a_lower_version_concurrently_is_a_conflict(tmp_path: Path, table: DeltaTable):
    mine = table.transaction().add_files([add(table, tmp_path, "x", [1], "a")]).set_app_transaction("job", 5)
    table.transaction().add_files([add(table, tmp_path, "x", [2], "b")]).set_app_transaction(
        "job", 4
    ).commit()
    with pytest.raises(ConcurrentTransactionError, match="version 1, WRITE"):
        mine.commit()


# -- conflict matrix ------------------------------------------------------------------------------------
def seeded(tmp_path: Path, table: DeltaTable) -> list[AddFile]:
    files = [add(table, tmp_path, p, [i]) for i, p in enumerate(["x", "x", "y"])]
    table.transaction().add_files(files).commit()
    return [AddFile.from_dict(r) for r in table.snapshot().files.to_pylist()]


def test_blind_appends_never_conflict(tmp_path: Path, table: DeltaTable):
    seeded(tmp_path, table)
    a = table.transaction().add_files([add(table, tmp_path, "x", [100])])
    b = table.transaction().add_files([add(table, tmp_path, "x", [200])])
    assert a.commit().version == 2
    res = b.commit()
    assert res.version == 3 and res.attempts == 2


def test_concurrent_append_into_a_partition_that_was_read(tmp_path: Path, table: DeltaTable):
    files = seeded(tmp_path, table)
    x_file = next(f for f in files if f.partition_values["p"] == "x")
    mine = table.transaction().read_partitions({"p": "x"}).remove_files([x_file])
    other = table.transaction().read_partitions({"p": "x"}).add_files([add(table, tmp_path, "x", [7])])
    other.remove_files([next(f for f in files if f.partition_values["p"] == "y")])  # not blind
    other.commit("MERGE")
    with pytest.raises(ConcurrentAppendError, match="version 2, MERGE"):
        mine.commit("DELETE")


def test_write_serializable_lets_blind_appends_pass_but_serializable_does_not(
    tmp_path: Path, table: DeltaTable
):
    files = seeded(tmp_path, table)
    x = [f for f in files if f.partition_values["p"] == "x"]
    ws = table.transaction("WriteSerializable").read_partitions({"p": "x"}).remove_files(x[:1])
    ser = table.transaction("Serializable").read_partitions({"p": "x"}).remove_files(x[1:])
    table.transaction().add_files([add(table, tmp_path, "x", [8])]).commit()  # blind append into p=x
    assert ws.commit("DELETE").version == 3
    with pytest.raises(ConcurrentAppendError):
        ser.commit("DELETE")


@pytest.mark.parametrize(
    ("level", "conflicts"), [(None, True), ("Serializable", True), ("WriteSerializable", False)]
)
def test_the_tables_isolation_level_decides_by_default(tmp_path: Path, level: str | None, conflicts: bool):
    """Delta Spark honours delta.isolationLevel and is Serializable without it."""
    config = {} if level is None else {"delta.isolationLevel": level}
    t = DeltaTable.create(str(tmp_path), SCHEMA, partition_by=["p"], configuration=config)
    files = seeded(tmp_path, t)
    mine = t.transaction().read_partitions({"p": "x"}).add_files([add(t, tmp_path, "x", [20])])
    t.transaction().add_files([add(t, tmp_path, "x", [21])]).commit()  # blind append into p=x
    if conflicts:
        with pytest.raises(ConcurrentAppendError):
            mine.commit()
    else:
        assert mine.commit().version == 3
    info = json.loads((tmp_path / "_delta_log" / f"{t.version():020d}.json").read_text().splitlines()[0])
    assert info["commitInfo"]["isolationLevel"] == (level or "Serializable")
    assert files


def test_a_bad_isolation_level_property_is_refused_by_name(tmp_path: Path):
    t = DeltaTable.create(
        str(tmp_path), SCHEMA, partition_by=["p"], configuration={"delta.isolationLevel": "Snapshot"}
    )
    with pytest.raises(InvalidCommitError, match="delta.isolationLevel='Snapshot'"):
        t.transaction().add_files([add(t, tmp_path, "x", [1])]).commit()
    assert t.version() == 0


def test_a_compaction_is_checked_with_snapshot_isolation(tmp_path: Path, table: DeltaTable):
    """A transaction that changes no data (dataChange=false, as OPTIMIZE) is not failed by appends."""
    files = seeded(tmp_path, table)
    x = [f for f in files if f.partition_values["p"] == "x"]
    packed = dataclasses.replace(add(table, tmp_path, "x", [0, 1], name="packed"), data_change=False)
    compaction = table.transaction().read_partitions({"p": "x"}).remove_files(x, data_change=False)
    compaction.add_files([packed])
    table.transaction().add_files([add(table, tmp_path, "x", [30])]).commit()
    assert compaction.commit("OPTIMIZE").version == 3
    info = json.loads((tmp_path / "_delta_log" / f"{3:020d}.json").read_text().splitlines()[0])
    assert info["commitInfo"]["isolationLevel"] == "SnapshotIsolation"


@pytest.mark.parametrize("level", ["Serializable", "WriteSerializable"])
def test_a_file_removed_from_a_partition_that_was_read_conflicts(
    tmp_path: Path, table: DeltaTable, level: str
):
    """Delta Spark: ConcurrentDeleteReadException when a winner removes a file matching the read filter."""
    files = seeded(tmp_path, table)
    x = [f for f in files if f.partition_values["p"] == "x"]
    mine = table.transaction(level).read_partitions({"p": "x"}).add_files([add(table, tmp_path, "x", [40])])
    other = table.transaction(level).read_partitions({"p": "y"}).add_files([add(table, tmp_path, "y", [41])])
    table.transaction().remove_files(x[:1]).commit("DELETE")
    with pytest.raises(ConcurrentDeleteReadError, match="partition this transaction read"):
        mine.commit()
    assert other.commit().version == 3  # p=y was not touched


def test_append_outside_the_read_partitions_does_not_conflict(tmp_path: Path, table: DeltaTable):
    files = seeded(tmp_path, table)
    mine = (
        table.transaction("Serializable")
        .read_partitions({"p": "y"})
        .remove_files([f for f in files if f.partition_values["p"] == "y"])
    )
    table.transaction().add_files([add(table, tmp_path, "x", [9])]).commit()
    assert mine.commit("DELETE").version == 3


def test_concurrent_delete_of_a_file_that_was_read(tmp_path: Path, table: DeltaTable):
    files = seeded(tmp_path, table)
    mine = table.transaction()
    mine.read.files.add(files[0].path)  # read without removing (e.g. an UPDATE rewriting it)
    mine.add_files([add(table, tmp_path, "x", [11])])
    table.transaction().remove_files([files[0]]).commit("DELETE")
    with pytest.raises(ConcurrentDeleteReadError, match="version 2, DELETE"):
        mine.commit("UPDATE")


def test_concurrent_delete_of_the_same_file(tmp_path: Path, table: DeltaTable):
    files = seeded(tmp_path, table)
    t1 = table.transaction()
    t1.remove_files([files[2]])
    t1.read = type(t1.read)()  # reads nothing but still removes: the delete-delete rule must catch it
    t2 = table.transaction().remove_files([files[2]])
    t2.commit("DELETE")
    with pytest.raises(ConcurrentDeleteDeleteError):
        t1.commit("DELETE")


def test_concurrent_metadata_and_protocol_changes(tmp_path: Path, table: DeltaTable):
    seeded(tmp_path, table)
    snap = table.snapshot()
    t_meta = table.transaction().add_files([add(table, tmp_path, "x", [21])])
    new_md = Metadata(**{**snap.metadata.__dict__, "configuration": {"delta.appendOnly": "true"}})
    table.transaction().update_metadata(new_md).commit("SET TBLPROPERTIES")
    with pytest.raises(MetadataChangedError, match="SET TBLPROPERTIES"):
        t_meta.commit()
    t_prot = table.transaction().add_files([add(table, tmp_path, "x", [22])])
    table.transaction().update_protocol(Protocol(1, 3)).commit("UPGRADE PROTOCOL")
    with pytest.raises(ProtocolChangedError):
        t_prot.commit()


# -- writer rules ---------------------------------------------------------------------------------------
def test_append_only_tables_refuse_data_removal(tmp_path: Path):
    t = DeltaTable.create(
        str(tmp_path), SCHEMA, partition_by=["p"], configuration={"delta.appendOnly": "true"}
    )
    f = add(t, tmp_path, "x", [1])
    t.transaction().add_files([f]).commit()
    before = sorted(p.name for p in (tmp_path / "_delta_log").iterdir())
    with pytest.raises(InvalidCommitError, match="append-only"):
        t.transaction().remove_files([f]).commit("DELETE")
    assert sorted(p.name for p in (tmp_path / "_delta_log").iterdir()) == before
    # rearranging (dataChange=false) is allowed
    g = add(t, tmp_path, "x", [1], "compacted")
    g = AddFile(g.path, g.size, g.partition_values, g.modification_time, data_change=False, stats=g.stats)
    assert t.transaction().remove_files([f], data_change=False).add_files([g]).commit("OPTIMIZE").version == 2


def test_partition_values_must_cover_the_partition_columns(tmp_path: Path, table: DeltaTable):
    with pytest.raises(InvalidCommitError, match=r"missing \['p'\]"):
        table.transaction().add_files([AddFile("p=x/a.parquet", 1, {})]).commit()
    with pytest.raises(InvalidCommitError, match="unexpected"):
        table.transaction().add_files([AddFile("p=x/a.parquet", 1, {"p": "x", "q": "1"})]).commit()


def test_one_action_per_path(tmp_path: Path, table: DeltaTable):
    f = AddFile("p=x/a.parquet", 1, {"p": "x"})
    with pytest.raises(InvalidCommitError, match="more than one"):
        table.transaction().add_files([f, f]).commit()


def test_data_for_tables_with_constraints_needs_the_rows_checked(tmp_path: Path):
    t = DeltaTable.create(
        str(tmp_path), SCHEMA, partition_by=["p"], configuration={"delta.constraints.pos": "id > 0"}
    )
    assert t.snapshot().protocol.min_writer_version == 3
    f = add(t, tmp_path, "x", [1])
    with pytest.raises(InvalidCommitError, match="CHECK constraints"):
        t.transaction().add_files([f]).commit()
    assert t.transaction().add_files([f], constraints_checked=True).commit().version == 1


def test_writing_a_table_with_an_unknown_writer_feature_is_refused(tmp_path: Path, table: DeltaTable):
    upgrade = Protocol(1, 7, None, ("appendOnly", "icebergCompatV9"))
    with pytest.raises(UnsupportedFeatureError):  # we never upgrade a table to what we cannot write
        table.transaction().update_protocol(upgrade).commit("UPGRADE")
    # another engine upgrades it
    (tmp_path / "_delta_log" / f"{1:020d}.json").write_text(
        json.dumps({"protocol": upgrade.to_json()}) + "\n"
    )
    assert table.snapshot().version == 1
    with pytest.raises(UnsupportedFeatureError) as err:
        table.transaction().add_files([AddFile("p=x/a.parquet", 1, {"p": "x"})]).commit()
    assert err.value.features == ("icebergCompatV9",)


def test_paths_outside_the_table_root_are_refused(tmp_path: Path, table: DeltaTable):
    for bad in ("../escape.parquet", "/abs/file.parquet", "_delta_log/00000000000000000009.json"):
        with pytest.raises(InvalidCommitError):
            add_file_from_parquet(table, bad, {"p": "x"})


def test_creating_over_an_existing_table_fails(tmp_path: Path, table: DeltaTable):
    with pytest.raises(InvalidCommitError, match="already exists"):
        DeltaTable.create(str(tmp_path), SCHEMA)


# -- table creation picks the lowest protocol ------------------------------------------------------------
@pytest.mark.parametrize(
    ("configuration", "schema", "protocol"),
    [
        ({}, SCHEMA, (1, 2, None, None)),
        ({"delta.enableChangeDataFeed": "true"}, SCHEMA, (1, 4, None, None)),
        ({"delta.columnMapping.mode": "name"}, SCHEMA, (2, 5, None, None)),
        ({"delta.enableDeletionVectors": "true"}, SCHEMA, (3, 7, ["deletionVectors"], ["deletionVectors"])),
        ({}, pa.schema([("t", pa.timestamp("us"))]), (3, 7, ["timestampNtz"], ["timestampNtz"])),
        ({"delta.enableInCommitTimestamps": "true"}, SCHEMA, (1, 7, None, ["inCommitTimestamp"])),
    ],
)
def test_created_tables_are_read_alike_by_delta_rs(tmp_path: Path, configuration, schema, protocol):
    DeltaTable.create(str(tmp_path), schema, configuration=configuration)
    ours = DeltaTable(str(tmp_path)).snapshot().protocol
    theirs = deltalake.DeltaTable(str(tmp_path)).protocol()
    got = (ours.min_reader_version, ours.min_writer_version, ours.reader_features, ours.writer_features)
    assert (got[0], got[1], got[2] and list(got[2]), got[3] and list(got[3])) == protocol
    assert (theirs.min_reader_version, theirs.min_writer_version) == protocol[:2]
    assert sorted(theirs.reader_features or []) == sorted(protocol[2] or [])
    assert sorted(theirs.writer_features or []) == sorted(protocol[3] or [])
    assert kernel_rows(tmp_path) == (0, 0)


def test_column_mapping_assigns_ids_and_physical_names(tmp_path: Path):
    schema = pa.schema([("a", pa.int64()), ("s", pa.struct([("x", pa.string())]))])
    DeltaTable.create(str(tmp_path), schema, configuration={"delta.columnMapping.mode": "name"})
    md = DeltaTable(str(tmp_path)).snapshot().metadata
    fields = md.schema["fields"]
    ids = [
        fields[0]["metadata"]["delta.columnMapping.id"],
        fields[1]["metadata"]["delta.columnMapping.id"],
        fields[1]["type"]["fields"][0]["metadata"]["delta.columnMapping.id"],
    ]
    assert sorted(ids) == [1, 2, 3] and md.configuration["delta.columnMapping.maxColumnId"] == "3"
    dt = deltalake.DeltaTable(str(tmp_path))
    assert dt.schema().to_arrow().names == ["a", "s"]


def test_in_commit_timestamps_are_written_and_increase(tmp_path: Path):
    t = DeltaTable.create(
        str(tmp_path), SCHEMA, partition_by=["p"], configuration={"delta.enableInCommitTimestamps": "true"}
    )
    for i in range(3):
        t.transaction().add_files([add(t, tmp_path, "x", [i])]).commit()
    icts = []
    for f in sorted((tmp_path / "_delta_log").glob("*.json")):
        first = json.loads(f.read_text().splitlines()[0])
        assert list(first) == ["commitInfo"] and list(first["commitInfo"])[0] == "inCommitTimestamp"
        icts.append(first["commitInfo"]["inCommitTimestamp"])
    assert icts == sorted(set(icts))
    assert t.snapshot().timestamp == icts[-1]
    assert deltalake.DeltaTable(str(tmp_path)).version() == 3
