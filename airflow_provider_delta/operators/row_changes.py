"""DeltaMergeOperator, DeltaDeleteOperator and DeltaUpdateOperator: MERGE, DELETE and UPDATE in the task,
without Spark, exactly once per data interval.

Thin over the core's Arrow engine (``DeltaTable.merge``/``delete``/``update``, ``log/row_changes/``), which
runs them as Delta Spark's commands do: deletion vectors where the table enables them, else copy-on-write
of the touched files only; change data, row ids and the table's rules kept; one commit, none when no row
changes. Each commit records the task's app transaction
(``airflow/<dag_id>/<task_id>/<map_index>/<interval>``, see ``operators.commit``), so a retry or a clear
whose change already landed changes nothing: a MERGE is not applied twice, which matters for clauses that
are not idempotent (``set: {"total": "target.total + source.amount"}``).

The MERGE clauses take the shape of ``DeltaSparkMergeOperator``'s (``operators.spark``), so a DAG moves
between the engines by swapping the operator and the source argument. The in-task MERGE joins on the ON
condition's equalities between a target and a source column, holding the source in memory (of a
RecordBatchReader, the columns the join and conditions read; whole rows go to local disk): for a source
larger than that, or a join without such an equality, use the Spark operator.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import pyarrow as pa
from airflow.sdk import Asset, BaseOperator

from airflow_provider_delta.hooks.delta import DeltaHookMixin, rows_of
from airflow_provider_delta.hooks.secrets import redact_errors
from airflow_provider_delta.log import MergeBuilder, RowChangeResult
from airflow_provider_delta.log.row_changes.merge_clauses import check_clauses as check_clause_order
from airflow_provider_delta.operators.commit import default_app_id, table_asset
from airflow_provider_delta.operators.spark import UPSERT, apply_clauses
from airflow_provider_delta.ui.links import DeltaTableLink, record_commit

if TYPE_CHECKING:
    from airflow.sdk import Context

    from airflow_provider_delta.log import DeltaTable

# Delta Spark's metric names behind the asset event's and the commit record's counts, per operation.
_COUNTS = {
    "MERGE": {"files": "numTargetFilesAdded", "records": "numTargetRowsInserted",
              "rowsUpdated": "numTargetRowsUpdated", "rowsDeleted": "numTargetRowsDeleted"},
    "DELETE": {"files": "numAddedFiles", "rowsDeleted": "numDeletedRows"},
    "UPDATE": {"files": "numAddedFiles", "rowsUpdated": "numUpdatedRows"},
}  # fmt: skip


def check_merge_clauses(clauses: Sequence[Mapping[str, Any]]) -> None:
    """Refuse, when the DAG is parsed, what the MERGE would refuse when run: the clause dicts' shape (as
    ``DeltaSparkMergeOperator`` checks it) and their order (every clause of a kind but the last needs a
    condition, as Delta Spark requires). A builder without a table only collects the clauses."""
    check_clause_order(apply_clauses(MergeBuilder(None, None, "true"), clauses).clauses)


def summary(result: RowChangeResult) -> dict[str, Any]:
    """The task's ``return_value``: small and JSON-serialisable, so that it fits an XCom."""
    metrics = {str(k): int(v) for k, v in result.metrics.items()}
    return {"version": result.version, "metrics": metrics, "already_committed": result.already_committed}


class _RowChangeOperator(BaseOperator, DeltaHookMixin):
    """What the three share: the table, its connection, the exactly-once key, and what a finished change
    leaves (log line, asset event, ``delta_commit`` record for the link, lineage)."""

    operation = ""
    operator_extra_links = (DeltaTableLink(),)
    ui_color = "#00add4"

    def __init__(
        self,
        *,
        table_uri: str,
        app_id: str | None = None,
        app_version: int | str = 1,
        delta_conn_id: str | None = None,
        **kwargs: Any,
    ) -> None:
        kwargs.setdefault("outlets", [table_asset(table_uri)] if "{{" not in table_uri else [])
        super().__init__(**kwargs)
        self.table_uri = table_uri
        self.app_id = app_id
        self.app_version = app_version
        self.delta_conn_id = delta_conn_id

    def change(self, context: Context, table: DeltaTable, app_id: str, app_version: int) -> RowChangeResult:
        """Run the operation on ``table`` with the task's key (each operator's own part)."""
        raise NotImplementedError

    @redact_errors
    def execute(self, context: Context) -> dict[str, Any]:
        table = self.delta_table()
        app_id = self.app_id or default_app_id(context)
        app_version = int(self.app_version)
        result = self.change(context, table, app_id, app_version)
        counts = {name: int(result.metrics.get(m, 0)) for name, m in _COUNTS[self.operation].items()}
        if result.already_committed:
            self.log.info("%s already holds app transaction %s version %d (table version %s): nothing "
                          "changed", self.table_uri, app_id, app_version, result.version)  # fmt: skip
        elif result.version is None:
            self.log.info("the %s on %s changed no row: nothing committed", self.operation, self.table_uri)
        else:
            self.log.info("%s committed version %d of %s: %s", self.operation, result.version, self.table_uri,
                          " ".join(f"{k}={v}" for k, v in counts.items()))  # fmt: skip
        # Airflow emits an event on every outlet of a task that succeeds, so it says what happened even
        # when nothing was committed (version None) or the change had landed before (a retry).
        for outlet in self.outlets:
            if isinstance(outlet, Asset):
                context["outlet_events"][outlet].extra = {
                    "version": result.version, "operation": self.operation, "appId": app_id,
                    "appVersion": app_version, "alreadyCommitted": result.already_committed, **counts,
                }  # fmt: skip
        if result.version is not None:  # the view names a task for the versions it committed only
            record_commit(context, self.table_uri, result.version, delta_conn_id=self.delta_conn_id,
                          already_committed=result.already_committed, files_added=counts["files"],
                          records_added=counts.get("records", 0), operation=self.operation)  # fmt: skip
        self._lineage_table = table
        return summary(result)

    def get_openlineage_facets_on_complete(self, task_instance: Any) -> Any:
        """OpenLineage: the table as the output dataset, with its schema facet (needs the OL provider)."""
        from airflow_provider_delta.lineage import table_lineage

        table = getattr(self, "_lineage_table", None)
        return table_lineage(self.table_uri, table.snapshot() if table is not None else None, output=True)


class DeltaMergeOperator(_RowChangeOperator):
    """MERGE a task's payload into a Delta table in the task (no Spark), as one exactly-once commit.

    :param table_uri: the target table. Templated.
    :param on: the merge condition, with ``target`` and ``source`` as aliases; it needs at least one
        equality between a target and a source column (the join keys). Templated.
    :param data: the source rows: a list of dicts, a dict of columns, or any Arrow-compatible object.
        Templated (pass an upstream task's XCom).
    :param python_callable: ``(context) -> rows`` (pyarrow Table or RecordBatchReader, pandas, Polars),
        instead of ``data``.
    :param clauses: WHEN clauses in order, as ``DeltaSparkMergeOperator`` takes them: dicts of ``when``
        (``matched``, ``not_matched``, ``not_matched_by_source``), ``then`` (``update``, ``delete``,
        ``insert``), optional ``condition``, and ``set`` / ``values`` (``{column: SQL}`` or ``"*"``).
        Default: upsert. Checked when the DAG is parsed. Templated.
    :param merge_schema: add the source's new columns to the table (Delta Spark's schema evolution).
    :param app_id: exactly-once key; default: per task, map index and interval. Templated.
    :param app_version: version recorded with ``app_id``; merge again by raising it. Templated.
    :param delta_conn_id: connection for the table's storage (``None``: no credentials).

    Returns (XCom ``return_value``) ``{"version", "metrics", "already_committed"}``: the version that holds
    the MERGE (``None`` when it changed no row) and Delta Spark's MERGE metrics.
    """

    operation = "MERGE"
    template_fields: Sequence[str] = ("table_uri", "data", "on", "clauses", "app_id", "app_version")
    template_fields_renderers = {"data": "json", "clauses": "json", "on": "sql"}

    def __init__(
        self,
        *,
        table_uri: str,
        on: str,
        data: Any = None,
        python_callable: Callable[[Context], Any] | None = None,
        clauses: Sequence[Mapping[str, Any]] = UPSERT,
        merge_schema: bool = False,
        app_id: str | None = None,
        app_version: int | str = 1,
        delta_conn_id: str | None = None,
        **kwargs: Any,
    ) -> None:
        if (data is None) == (python_callable is None):
            raise ValueError("pass exactly one of data and python_callable")
        if not isinstance(clauses, str):  # a template is checked when rendered
            check_merge_clauses(clauses)
        super().__init__(table_uri=table_uri, app_id=app_id, app_version=app_version,
                         delta_conn_id=delta_conn_id, **kwargs)  # fmt: skip
        self.on = on
        self.data = data
        self.python_callable = python_callable
        self.clauses = [dict(c) for c in clauses] if not isinstance(clauses, str) else clauses
        self.merge_schema = merge_schema

    def change(self, context: Context, table: DeltaTable, app_id: str, app_version: int) -> RowChangeResult:
        source = rows_of(self.python_callable(context) if self.python_callable is not None else self.data)
        if isinstance(source, pa.Table) and source.num_columns == 0:  # ``[]``: an XCom of no rows
            if any(c.get("when") == "not_matched_by_source" for c in self.clauses):
                raise ValueError("the payload is empty and has no columns, and a not_matched_by_source "
                                 "clause would act on every target row: return a pyarrow Table with the "
                                 "source's schema from python_callable to MERGE an empty source")  # fmt: skip
            return RowChangeResult(None, {})
        builder = table.merge(source, self.on, merge_schema=self.merge_schema, app_id=app_id,
                              app_version=app_version)  # fmt: skip
        return apply_clauses(builder, self.clauses).execute()


class DeltaDeleteOperator(_RowChangeOperator):
    """DELETE the rows where a predicate holds, in the task (no Spark), as one exactly-once commit.

    :param table_uri: the table. Templated.
    :param predicate: Spark SQL over the table's columns, e.g. ``"day < '{{ macros.ds_add(ds, -30) }}'"``
        (retention). Required: ``"true"`` deletes every row. Templated.
    :param app_id: exactly-once key; default: per task, map index and interval. Templated.
    :param app_version: version recorded with ``app_id``; delete again by raising it. Templated.
    :param delta_conn_id: connection for the table's storage (``None``: no credentials).

    Returns (XCom ``return_value``) ``{"version", "metrics", "already_committed"}`` (version ``None`` when
    no row matched).
    """

    operation = "DELETE"
    template_fields: Sequence[str] = ("table_uri", "predicate", "app_id", "app_version")
    template_fields_renderers = {"predicate": "sql"}

    def __init__(
        self,
        *,
        table_uri: str,
        predicate: str,
        app_id: str | None = None,
        app_version: int | str = 1,
        delta_conn_id: str | None = None,
        **kwargs: Any,
    ) -> None:
        _check_predicate(predicate, "DeltaDeleteOperator")
        super().__init__(table_uri=table_uri, app_id=app_id, app_version=app_version,
                         delta_conn_id=delta_conn_id, **kwargs)  # fmt: skip
        self.predicate = predicate

    def change(self, context: Context, table: DeltaTable, app_id: str, app_version: int) -> RowChangeResult:
        _check_predicate(self.predicate, f"task {self.task_id}'s rendered predicate")
        return table.delete(self.predicate, app_id=app_id, app_version=app_version)


class DeltaUpdateOperator(_RowChangeOperator):
    """UPDATE columns of the rows where a predicate holds, in the task (no Spark), exactly once.

    :param table_uri: the table. Templated.
    :param set: ``{column: Spark SQL expression}``, e.g. ``{"status": "'late'"}``. Templated.
    :param predicate: Spark SQL over the table's columns; ``None`` updates every row. Templated.
    :param app_id: exactly-once key; default: per task, map index and interval. Templated.
    :param app_version: version recorded with ``app_id``; update again by raising it. Templated.
    :param delta_conn_id: connection for the table's storage (``None``: no credentials).

    Returns (XCom ``return_value``) ``{"version", "metrics", "already_committed"}`` (version ``None`` when
    no row matched).
    """

    operation = "UPDATE"
    template_fields: Sequence[str] = ("table_uri", "set", "predicate", "app_id", "app_version")
    template_fields_renderers = {"set": "json", "predicate": "sql"}

    def __init__(
        self,
        *,
        table_uri: str,
        set: Mapping[str, str],
        predicate: str | None = None,
        app_id: str | None = None,
        app_version: int | str = 1,
        delta_conn_id: str | None = None,
        **kwargs: Any,
    ) -> None:
        if not isinstance(set, str) and not (isinstance(set, Mapping) and set):
            raise ValueError("set must be a non-empty dict of column -> SQL expression")
        if predicate is not None:
            _check_predicate(predicate, "DeltaUpdateOperator")
        super().__init__(table_uri=table_uri, app_id=app_id, app_version=app_version,
                         delta_conn_id=delta_conn_id, **kwargs)  # fmt: skip
        self.set = dict(set) if not isinstance(set, str) else set
        self.predicate = predicate

    def change(self, context: Context, table: DeltaTable, app_id: str, app_version: int) -> RowChangeResult:
        if self.predicate is not None:
            _check_predicate(self.predicate, f"task {self.task_id}'s rendered predicate")
        return table.update(self.set, self.predicate, app_id=app_id, app_version=app_version)


def _check_predicate(predicate: Any, what: str) -> None:
    """A blank predicate (a template that rendered empty) is refused rather than read as "every row"."""
    if not isinstance(predicate, str) or not predicate.strip():
        raise ValueError(f"{what}: predicate must be Spark SQL text, not {predicate!r} ('true' selects every "
                         "row)")  # fmt: skip
