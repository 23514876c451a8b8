"""OpenLineage: the commit operator reports the table as its output dataset, with the schema facet.

The OpenLineage provider calls ``get_openlineage_facets_on_complete`` after a task succeeds; here it is called
the same way on the operator that ran, with the real OpenLineage classes.
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from airflow.providers.openlineage.extractors import OperatorLineage

from airflow_provider_delta.lineage import dataset_name
from airflow_provider_delta.log import DeltaTable
from airflow_provider_delta.operators.commit import DeltaCommitOperator


def test_commit_operator_reports_the_table_with_its_schema(tmp_path: Path):
    root = tmp_path / "t"
    schema = pa.schema([("id", pa.int64()), ("name", pa.string()), ("day", pa.string())])
    DeltaTable.create(str(root), schema, partition_by=["day"])
    rel = f"day=2024-01-02/part-{uuid.uuid4()}.parquet"
    os.makedirs(root / "day=2024-01-02")
    pq.write_table(pa.table({"id": [1], "name": ["a"]}), root / rel)
    op = DeltaCommitOperator(
        task_id="commit", table_uri=str(root), files=[rel], app_id="lineage", app_version=1
    )
    context = {"outlet_events": _Events(), "ti": None}
    op.execute(context)
    lineage = op.get_openlineage_facets_on_complete(task_instance=None)
    assert isinstance(lineage, OperatorLineage) and not lineage.inputs
    (out,) = lineage.outputs
    assert (out.namespace, out.name) == ("file", str(root))
    fields = [(f.name, f.type) for f in out.facets["schema"].fields]
    assert fields == [("id", "int64"), ("name", "string"), ("day", "string")]


def test_dataset_names_follow_openlineage_conventions():
    assert dataset_name("s3://bucket/a/b") == ("s3://bucket", "a/b")
    assert dataset_name("/data/t") == ("file", "/data/t")
    assert dataset_name("abfs://container@account.dfs.core.windows.net/t") == (
        "abfs://container@account.dfs.core.windows.net",
        "t",
    )


class _Events(dict):
    """The task context's ``outlet_events`` (a mapping of asset -> accessor with ``extra``)."""

    def __missing__(self, key):
        self[key] = type("Accessor", (), {"extra": {}})()
        return self[key]
