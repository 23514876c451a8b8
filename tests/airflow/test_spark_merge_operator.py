"""DeltaSparkMergeOperator's clause lists: refused by name when the DAG is parsed, turned into the MERGE
builder's clauses in order (the operator's run is in tests/airflow/test_example_dags.py, with Spark)."""

from __future__ import annotations

import pytest

from airflow_provider_delta.operators.spark import UPSERT, DeltaSparkMergeOperator, apply_clauses


def _source(spark, context):
    raise AssertionError("not run here")


@pytest.mark.parametrize(("clauses", "message"), [
    ([], "at least one clause"),
    ([{"when": "matched", "then": "insert", "values": "*"}], "is not one of"),
    ([{"when": "matched", "then": "update"}], "needs 'set'"),
    ([{"when": "not_matched_by_source", "then": "update", "set": "*"}], "needs 'set'"),
    ([{"when": "matched", "then": "delete", "set": {"a": "1"}}], "unknown key"),
    ([{"when": "not_matched", "then": "insert", "values": {}}], "needs 'values'"),
])  # fmt: skip
def test_bad_clauses_are_refused_when_the_dag_is_parsed(clauses: list, message: str):
    with pytest.raises(ValueError, match=message):
        DeltaSparkMergeOperator(task_id="m", table_uri="/t", source_callable=_source, on="true",
                                clauses=clauses)  # fmt: skip


def test_clauses_become_the_builders_clauses_in_order():
    from airflow_provider_delta.spark.merge import merge
    from airflow_provider_delta.spark.merge_clause import Clause

    clauses = [*UPSERT, {"when": "matched", "then": "delete", "condition": "source.op = 'D'"},
               {"when": "not_matched_by_source", "then": "update", "set": {"live": "false"}}]  # fmt: skip
    builder = apply_clauses(merge(None, "/t", "true"), clauses)  # the source is only read by execute()
    assert builder.clauses == [
        Clause("matched", "update"), Clause("notMatched", "insert"),
        Clause("matched", "delete", "source.op = 'D'"),
        Clause("notMatchedBySource", "update", None, {"live": "false"}),
    ]  # fmt: skip
    op = DeltaSparkMergeOperator(task_id="m", table_uri="/t", source_callable=_source, on="true")
    assert "clauses" in op.template_fields and op.clauses == [dict(c) for c in UPSERT]
