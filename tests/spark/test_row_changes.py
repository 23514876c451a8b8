"""DELETE, UPDATE and MERGE on our Spark layer (local[2]): rows against a Python model of the table, the
commits' actions (deletion vectors or rewrites, change data), Delta Spark's operation names and metrics,
exactly-once app ids, and bad input refused by name with nothing committed and no file left behind.
Delta Spark's own results are compared in tests/oracle/test_row_changes_agree.py."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from airflow_provider_delta.log import DeltaTable
from airflow_provider_delta.log.base.errors import (
    InvalidCommitError,
    InvalidConditionError,
    MergeCardinalityError,
)
from airflow_provider_delta.log.expressions.expressions import ColumnNotFoundError
from airflow_provider_delta.spark import delete, merge, read, update, write

DV_CDF = {"delta.enableDeletionVectors": "true", "delta.enableChangeDataFeed": "true"}
LAYOUTS = {  # name: (table properties, partition columns)
    "dv-cdf-partitioned": (DV_CDF, ["p"]),
    "rewrite-cdf": ({"delta.enableChangeDataFeed": "true"}, None),
    "rewrite-column-mapping": ({"delta.columnMapping.mode": "name"}, ["p"]),
}  # fmt: skip


def _make(spark, path: Path, configuration: dict, partition_by: list[str] | None, n: int = 60) -> str:
    uri = str(path)
    df = spark.range(0, n).selectExpr("id", "id % 7 AS v", "concat('s', id) AS s",
                                      "char(97 + id % 3) AS p").repartition(3)  # fmt: skip
    write(df, uri, partition_by=partition_by, configuration=configuration)
    return uri


def _rows(spark, uri: str) -> dict[int, tuple]:
    return {r["id"]: (r["v"], r["s"], r["p"]) for r in read(spark, uri).toArrow().to_pylist()}


def _commit(uri: str, version: int) -> dict[str, list[dict]]:
    """The actions of one commit, by kind."""
    out: dict[str, list[dict]] = {}
    text = (Path(uri) / "_delta_log" / f"{version:020d}.json").read_text()
    for line in text.splitlines():
        for kind, body in json.loads(line).items():
            out.setdefault(kind, []).append(body)
    return out


def _change_rows(uri: str, commit: dict) -> list[tuple[str, int]]:
    """(change type, id) of the change data files of a commit (tables without column mapping)."""
    out = []
    for cdc in commit.get("cdc", []):
        table = pq.read_table(Path(uri) / cdc["path"])
        out += zip(table.column("_change_type").to_pylist(), table.column("id").to_pylist(), strict=True)
    return sorted(out)


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_delete_update_merge_on_each_layout(spark, tmp_path: Path, layout: str):
    configuration, partition_by = LAYOUTS[layout]
    uri = _make(spark, tmp_path / "t", configuration, partition_by)
    dv = "delta.enableDeletionVectors" in configuration
    cdf = "delta.enableChangeDataFeed" in configuration
    model = {i: (i % 7, f"s{i}", chr(97 + i % 3)) for i in range(60)}

    result = delete(spark, uri, "v = 3 AND id > 10")
    gone = [i for i, (v, _, _) in model.items() if v == 3 and i > 10]
    model = {i: r for i, r in model.items() if i not in gone}
    assert _rows(spark, uri) == model
    actions = _commit(uri, result.version)
    assert actions["commitInfo"][0]["operation"] == "DELETE"
    assert result.metrics["numDeletedRows"] == len(gone)
    if dv:
        assert all(a.get("deletionVector") for a in actions["add"]) and "cdc" not in actions
        assert result.metrics["numDeletionVectorsAdded"] > 0 and result.metrics["numCopiedRows"] == 0
    else:
        assert not any(a.get("deletionVector") for a in actions.get("add", []))
        assert result.metrics["numCopiedRows"] == sum(
            json.loads(a["stats"])["numRecords"] for a in actions["add"]
        )
        if cdf:
            assert _change_rows(uri, actions) == sorted(("delete", i) for i in gone)

    result = update(spark, uri, {"s": "upper(s)", "v": "v * 10"}, "id % 4 = 1")
    changed = [i for i in model if i % 4 == 1]
    for i in changed:
        model[i] = (model[i][0] * 10, model[i][1].upper(), model[i][2])
    assert _rows(spark, uri) == model
    actions = _commit(uri, result.version)
    assert actions["commitInfo"][0]["operation"] == "UPDATE"
    assert result.metrics["numUpdatedRows"] == len(changed)
    assert actions["commitInfo"][0]["operationParameters"] == {"predicate": "id % 4 = 1"}
    if cdf:
        want = sorted([("update_preimage", i) for i in changed] + [("update_postimage", i) for i in changed])
        assert _change_rows(uri, actions) == want

    source = spark.range(50, 70).selectExpr("id", "id % 5 AS v", "concat('n', id) AS s",
                                            "char(97 + id % 3) AS p")  # fmt: skip
    result = (merge(source, uri, "target.id = source.id")
              .when_matched_delete("source.v = 0")
              .when_matched_update({"s": "source.s"})
              .when_not_matched_insert_all("source.id < 65")
              .when_not_matched_by_source_delete("target.id < 3")
              .execute())  # fmt: skip
    deleted = [i for i in range(50, 70) if i in model and i % 5 == 0] + [i for i in model if i < 3]
    updated = [i for i in range(50, 70) if i in model and i % 5]
    inserted = [i for i in range(50, 65) if i not in model]
    for i in updated:
        model[i] = (model[i][0], f"n{i}", model[i][2])
    for i in inserted:
        model[i] = (i % 5, f"n{i}", chr(97 + i % 3))
    model = {i: r for i, r in model.items() if i not in deleted}
    assert _rows(spark, uri) == model
    m = result.metrics
    assert (m["numTargetRowsDeleted"], m["numTargetRowsUpdated"], m["numTargetRowsInserted"],
            m["numSourceRows"]) == (len(deleted), len(updated), len(inserted), 20)  # fmt: skip
    actions = _commit(uri, result.version)
    assert actions["commitInfo"][0]["operation"] == "MERGE"
    if cdf:
        images = [(k, i) for i in updated for k in ("update_preimage", "update_postimage")]
        want = sorted([("delete", i) for i in deleted] + [("insert", i) for i in inserted] + images)
        assert _change_rows(uri, actions) == want


def test_nothing_matching_commits_nothing(spark, tmp_path: Path):
    """Conditions and values may be Columns as well as SQL text."""
    uri = _make(spark, tmp_path / "t", {}, None, n=10)
    nothing = merge(spark.range(500, 501), uri, "target.id = source.id").when_matched_delete()
    from pyspark.sql import functions as F

    results = [delete(spark, uri, F.col("id") > 100), update(spark, uri, {"v": F.lit(0)}, "id > 100"),
               nothing.execute()]  # fmt: skip
    for result in results:
        assert result.version is None
    assert DeltaTable(uri).version() == 0


def test_app_id_makes_each_change_exactly_once(spark, tmp_path: Path):
    uri = _make(spark, tmp_path / "t", {}, None, n=10)
    first = update(spark, uri, {"v": "v + 1"}, app_id="nightly", app_version=1)
    again = update(spark, uri, {"v": "v + 1"}, app_id="nightly", app_version=1)
    assert again.already_committed and again.version == first.version
    assert {i: r[0] for i, r in _rows(spark, uri).items()} == {i: i % 7 + 1 for i in range(10)}
    source = spark.range(0, 3).selectExpr("id", "0 AS v", "'x' AS s", "'a' AS p")
    run = merge(source, uri, "target.id = source.id", app_id="nightly", app_version=2).when_matched_delete()
    assert not run.execute().already_committed
    assert run.execute().already_committed and sorted(_rows(spark, uri)) == list(range(3, 10))


def _listing(path: Path) -> list[str]:
    return sorted(str(p.relative_to(path)) for p in path.rglob("*") if p.is_file() and ".crc" not in p.name)


def test_bad_input_is_refused_by_name_with_nothing_written(spark, tmp_path: Path):
    uri = _make(spark, tmp_path / "t", {"delta.enableChangeDataFeed": "true"}, ["p"], n=20)
    before = _listing(tmp_path / "t")
    source = spark.range(0, 5).selectExpr("id", "1 AS v", "'x' AS s", "'a' AS p")
    twice = source.unionByName(source)
    attempts = {
        "unknown column": (ColumnNotFoundError, lambda: delete(spark, uri, "nope > 1")),
        "unknown column in a value": (ColumnNotFoundError, lambda: update(spark, uri, {"v": "nope + 1"})),
        "unknown column to set": (ColumnNotFoundError, lambda: update(spark, uri, {"nope": "1"})),
        "not SQL": (InvalidConditionError, lambda: delete(spark, uri, "id = = 1")),
        "not a predicate": (InvalidConditionError, lambda: delete(spark, uri, "id +")),
        "merge condition": (ColumnNotFoundError, lambda: merge(source, uri, "target.id = source.nope")
                            .when_matched_delete().execute()),
        "duplicate matches": (MergeCardinalityError, lambda: merge(twice, uri, "target.id = source.id")
                              .when_matched_update_all().when_not_matched_insert_all().execute()),
    }  # fmt: skip
    for name, (error, attempt) in attempts.items():
        with pytest.raises(error):
            attempt()
        assert DeltaTable(uri).version() == 0, name
        assert _listing(tmp_path / "t") == before, f"{name}: files were left behind"
    # An unconditional delete as the only matched clause takes duplicates, as Delta Spark's does.
    result = merge(twice, uri, "target.id = source.id").when_matched_delete().execute()
    assert result.metrics["numTargetRowsDeleted"] == 5


def test_tables_we_cannot_change_are_refused(spark, tmp_path: Path):
    append_only = _make(spark, tmp_path / "a", {"delta.appendOnly": "true"}, None, n=5)
    with pytest.raises(InvalidCommitError, match="append-only"):
        delete(spark, append_only, "id = 1")
    assert DeltaTable(append_only).version() == 0


def _tracked(spark, uri: str) -> dict[int, tuple[int, int]]:
    df = read(spark, uri, metadata=["row_id", "row_commit_version"])
    return {r["id"]: (r["row_id"], r["row_commit_version"]) for r in
            df.selectExpr("id", "_metadata.row_id", "_metadata.row_commit_version").collect()}  # fmt: skip


@pytest.mark.parametrize("dv", [True, False], ids=["deletion-vectors", "rewrite"])
def test_row_ids_are_kept_as_delta_spark_keeps_them(spark, tmp_path: Path, dv: bool):
    """"Row Tracking": rows written again keep their ids (UPDATE, MERGE) and, copied unchanged by a
    rewrite, their commit versions; updated rows take the commit's version; inserted rows get fresh ids
    above every id given before. Delta Spark's own ids are compared in tests/oracle."""
    config = {"delta.enableRowTracking": "true", "delta.enableDeletionVectors": str(dv).lower()}
    uri = _make(spark, tmp_path / "t", config, ["p"], n=40)
    update(spark, uri, {"v": "v + 1"}, "id < 5")  # rows of two versions before the operations under test
    ids = _tracked(spark, uri)
    assert len({i for i, _ in ids.values()}) == 40 and {v for _, v in ids.values()} == {0, 1}

    deleted = delete(spark, uri, "id % 5 = 2")
    ids = {i: r for i, r in ids.items() if i % 5 != 2}
    assert _tracked(spark, uri) == ids
    assert any(a.get("deletionVector") for a in _commit(uri, deleted.version)["add"]) == dv

    updated = update(spark, uri, {"s": "upper(s)"}, "id % 3 = 0")
    ids = {i: (r[0], updated.version) if i % 3 == 0 else r for i, r in ids.items()}
    assert _tracked(spark, uri) == ids

    source = spark.range(30, 50).selectExpr("id", "0 AS v", "'m' AS s", "char(97 + id % 3) AS p")
    merged = merge(source, uri, "target.id = source.id").when_matched_update_all() \
        .when_not_matched_insert_all().execute()  # fmt: skip
    got = _tracked(spark, uri)
    mark = max(json.loads(d["configuration"])["rowIdHighWaterMark"]
               for d in _commit(uri, updated.version).get("domainMetadata", []))  # fmt: skip
    for i in range(30, 50):
        ids[i] = (ids[i][0], merged.version) if i in ids else got[i]
        if i >= 40:
            assert got[i][0] > mark and got[i][1] == merged.version, f"inserted row {i}: {got[i]}"
    assert got == ids
    assert len({i for i, _ in got.values()}) == len(got)


def test_merge_reads_only_files_the_source_keys_can_match(spark, tmp_path: Path):
    """Three files of disjoint id ranges; a source whose ids fall in one of them: only that file is read
    (and, without deletion vectors, rewritten); a key of another type, or a NOT MATCHED BY SOURCE clause,
    reads every file."""
    from airflow_provider_delta.spark.merge_pruning import merge_files
    from airflow_provider_delta.spark.target import open_target

    uri = str(tmp_path / "t")
    for lo in (0, 100, 200):
        write(spark.range(lo, lo + 50, 1, 1).selectExpr("id", "0 AS v", "'s' AS s", "'a' AS p"), uri)
    source = spark.range(120, 125).selectExpr("id", "1 AS v", "'n' AS s", "'a' AS p")
    target = open_target(uri, None, "MERGE")
    assert merge_files(target, source, "target.id = source.id", "target", "source", False).num_rows == 1
    as_text = source.selectExpr("cast(id AS string) AS id")
    assert merge_files(target, as_text, "target.id = source.id", "target", "source", False).num_rows == 3
    assert merge_files(target, source, "target.id = source.id", "target", "source", True).num_rows == 3
    result = merge(source, uri, "target.id = source.id").when_matched_update_all().execute()
    assert result.metrics["numTargetFilesRemoved"] == 1 and result.metrics["numTargetRowsCopied"] == 45
    assert {i: r[0] for i, r in _rows(spark, uri).items()} == {
        i: int(120 <= i < 125) for lo in (0, 100, 200) for i in range(lo, lo + 50)
    }


@pytest.mark.parametrize("condition", ["p = 'a'", "upper(p) = 'A'", "p IN ('a', 'zz') AND p IS NOT NULL"])
def test_a_condition_on_partitions_only_removes_whole_files_unread(spark, tmp_path: Path, condition: str):
    uri = _make(spark, tmp_path / "t", {"delta.enableDeletionVectors": "true"}, ["p"], n=30)
    result = delete(spark, uri, condition)
    actions = _commit(uri, result.version)
    assert "add" not in actions and {dict(r["partitionValues"])["p"] for r in actions["remove"]} == {"a"}
    metrics = result.metrics
    assert metrics["numDeletedRows"] == 10 and metrics["numRemovedFiles"] == len(actions["remove"])
    assert sorted(_rows(spark, uri)) == [i for i in range(30) if i % 3]


def test_merge_joins_read_only_the_columns_they_need(spark, tmp_path: Path):
    """Spark cannot prune the columns of our read: the MERGE names those its join needs (a word that only
    looks like a column reads one column too many), all of them with change data or Column expressions."""
    from pyspark.sql import functions as F

    from airflow_provider_delta.spark.merge_clause import Clause
    from airflow_provider_delta.spark.merge_pruning import join_columns
    from airflow_provider_delta.spark.target import open_target

    plain = open_target(_make(spark, tmp_path / "t", {}, None, n=10), None, "MERGE")
    cdf = open_target(_make(spark, tmp_path / "c", {"delta.enableChangeDataFeed": "true"}, None, n=10), None,
                      "MERGE")  # fmt: skip
    source, on = ["id", "v", "s", "p"], "target.id = source.id"
    upsert = [Clause("matched", "delete", "source.v = 0"), Clause("matched", "update"),
              Clause("notMatched", "insert")]  # fmt: skip
    assert join_columns(plain, on, upsert, source, "source", False) == ["id", "v"]
    partial = [Clause("matched", "update", None, {"s": "'x'"})]
    assert join_columns(plain, on, partial, source, "source", False) == ["id", "v", "p"]  # v, p kept
    assert join_columns(plain, on, [Clause("matched", "update", F.col("target.v") > 1)], source, "source",
                        False) is None  # fmt: skip
    assert join_columns(cdf, on, upsert, source, "source", False) is None


@pytest.mark.parametrize("dv", [True, False], ids=["deletion-vectors", "rewrite"])
def test_each_merge_plan_gives_the_same_rows(spark, tmp_path: Path, dv: bool):
    """The MERGE's plans: the join's columns read by Spark's Parquet reader (where ``native_read`` allows)
    or by ours; with broadcasts off, no semi join to the source's matches and the target hinted to a
    sort-merge join. Each gives the same rows and metrics."""
    from airflow_provider_delta.spark import native_read
    from airflow_provider_delta.spark.target import open_target

    results = {}
    for broadcast, native in ((True, True), (True, False), (False, True)):
        config = {"delta.enableDeletionVectors": str(dv).lower()}
        uri = _make(spark, tmp_path / f"t{broadcast}{native}", config, ["p"], n=40)
        if native:
            files = DeltaTable(uri).snapshot().files
            assert native_read.native_read_blocker(open_target(uri, None, "MERGE"), files, ["id"]) is None
        source = spark.range(30, 50).selectExpr("id", "id % 5 AS v", "'m' AS s", "char(97 + id % 3) AS p")
        if not broadcast:
            spark.conf.set("spark.sql.autoBroadcastJoinThreshold", "-1")
        native_read.NATIVE_READS = native
        try:
            builder = merge(source, uri, "target.id = source.id") \
                .when_matched_update({"v": "source.v + target.v"}).when_not_matched_insert_all()  # fmt: skip
            m = builder.execute().metrics
        finally:
            spark.conf.unset("spark.sql.autoBroadcastJoinThreshold")
            native_read.NATIVE_READS = True
        counts = (m["numTargetRowsUpdated"], m["numTargetRowsInserted"])
        results[(broadcast, native)] = (_rows(spark, uri), *counts)
    first = results[(True, True)]
    assert all(r == first for r in results.values()) and first[1:] == (10, 10)
    assert first[0][35] == (35 % 7 + 0, "s35", chr(97 + 35 % 3))  # v = source.v (0) + target.v
