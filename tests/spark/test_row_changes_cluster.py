"""DELETE, UPDATE and MERGE on the Spark standalone cluster (a master and two workers on 127.0.0.1): the
same plan and commit as on local[2], with executors in other processes, so nothing may rely on state the
driver holds (the table's files are read and written by the workers). Its own module: a local session must
not be the one ``getOrCreate`` returns."""

from __future__ import annotations

from pathlib import Path

from airflow_provider_delta.log import DeltaTable
from airflow_provider_delta.spark import delete, merge, read, update, write


def test_row_changes_on_the_standalone_cluster(spark_standalone, tmp_path: Path):
    uri = str(tmp_path / "t")
    session = spark_standalone.session()
    try:
        rows = session.range(0, 40).selectExpr("id", "id % 4 AS v", "char(97 + id % 2) AS p").repartition(4)
        write(rows, uri, partition_by=["p"], configuration={"delta.enableDeletionVectors": "true"})
        assert delete(session, uri, "v = 0").metrics["numDeletedRows"] == 10
        assert update(session, uri, {"v": "v + 100"}, "id < 10").metrics["numUpdatedRows"] == 7
        source = session.range(35, 45).selectExpr("id", "-1 AS v", "char(97 + id % 2) AS p")
        result = (merge(source, uri, "target.id = source.id").when_matched_update_all()
                  .when_not_matched_insert_all().execute())  # fmt: skip
        apps = spark_standalone.status().get("activeapps", [])
        got = {r["id"]: r["v"] for r in read(session, uri).toArrow().to_pylist()}
    finally:
        session.stop()
    assert apps, "the row changes ran on the cluster"
    metrics = result.metrics  # 36 was deleted (v = 0), so the MERGE inserts it again
    assert (metrics["numTargetRowsUpdated"], metrics["numTargetRowsInserted"]) == (4, 6)
    expected = {i: i % 4 + (100 if i < 10 else 0) for i in range(40) if i % 4}
    expected.update({i: -1 for i in range(35, 45)})
    assert got == expected
    assert DeltaTable(uri).version() == 3
