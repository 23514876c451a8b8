"""DeltaWriteOperator: write rows to a Delta table without Spark, exactly once per data interval.

The rows come from ``data`` (usually an upstream task's XCom: a list of dicts, or a dict of columns) or from
``python_callable(context)``, which may return a pyarrow Table or RecordBatchReader, a pandas or Polars
DataFrame, or anything with the Arrow C stream interface. The core's Arrow writer
(``airflow_provider_delta.log.writes.write_rows``) writes them with the table's rules (schema, NOT NULL, CHECK
constraints, generated columns) and commits once with the task's app transaction
(``airflow/<dag_id>/<task_id>/<map_index>/<interval>``, see ``operators.commit``): a retry or a clear whose
write already landed reads nothing, writes nothing and commits nothing, and returns the version that holds
the rows. A write that fails or is refused deletes its files.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from airflow.sdk import Asset, BaseOperator

from airflow_provider_delta.hooks.delta import DeltaHookMixin, rows_of
from airflow_provider_delta.hooks.secrets import redact_errors
from airflow_provider_delta.operators.commit import MODES, default_app_id, table_asset
from airflow_provider_delta.ui.links import DeltaTableLink, record_commit

if TYPE_CHECKING:
    from airflow.sdk import Context


class DeltaWriteOperator(BaseOperator, DeltaHookMixin):
    """Write rows to a Delta table (created on the first write) as one exactly-once commit.

    :param table_uri: the table root. Templated.
    :param data: the rows: a list of dicts, a dict of columns, or any Arrow-compatible object. Templated
        (pass an upstream task's XCom).
    :param python_callable: ``(context) -> rows``, instead of ``data``.
    :param mode: ``append`` or ``overwrite``.
    :param partition_by: partition columns when the write creates the table.
    :param replace_where: with ``overwrite``, a SQL predicate over partition columns. Templated.
    :param schema_mode: ``merge`` (add new columns) or ``overwrite`` (with mode ``overwrite``).
    :param configuration: table properties of a new table (``delta.feature.*`` for an existing one).
    :param app_id: exactly-once key; default: per task, map index and interval. Templated.
    :param app_version: version recorded with ``app_id``; write again by raising it. Templated.
    :param target_file_size: bytes after which a data file is closed.
    :param delta_conn_id: connection for the table's storage (``None``: no credentials).

    Returns (XCom ``return_value``) the version that holds the rows; XCom ``delta_commit`` also says
    whether they were already committed and how many files and rows were written.
    """

    template_fields: Sequence[str] = ("table_uri", "data", "replace_where", "app_id", "app_version")
    template_fields_renderers = {"data": "json"}
    operator_extra_links = (DeltaTableLink(),)
    ui_color = "#00add4"

    def __init__(
        self,
        *,
        table_uri: str,
        data: Any = None,
        python_callable: Callable[[Context], Any] | None = None,
        mode: str = "append",
        partition_by: list[str] | None = None,
        replace_where: str | None = None,
        schema_mode: str | None = None,
        configuration: dict[str, str] | None = None,
        app_id: str | None = None,
        app_version: int | str = 1,
        target_file_size: int | None = None,
        delta_conn_id: str | None = None,
        **kwargs: Any,
    ) -> None:
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, not {mode!r}")
        if (data is None) == (python_callable is None):
            raise ValueError("pass exactly one of data and python_callable")
        kwargs.setdefault("outlets", [table_asset(table_uri)] if "{{" not in table_uri else [])
        super().__init__(**kwargs)
        self.table_uri = table_uri
        self.data = data
        self.python_callable = python_callable
        self.mode = mode
        self.partition_by = partition_by
        self.replace_where = replace_where
        self.schema_mode = schema_mode
        self.configuration = configuration
        self.app_id = app_id
        self.app_version = app_version
        self.target_file_size = target_file_size
        self.delta_conn_id = delta_conn_id

    @redact_errors
    def execute(self, context: Context) -> int:
        table = self.delta_table()
        app_id = self.app_id or default_app_id(context)
        app_version = int(self.app_version)
        rows = rows_of(self.python_callable(context) if self.python_callable is not None else self.data)
        options: dict[str, Any] = {"mode": self.mode, "partition_by": self.partition_by,
                                   "replace_where": self.replace_where, "schema_mode": self.schema_mode,
                                   "configuration": self.configuration}  # fmt: skip
        if self.target_file_size is not None:
            options["target_file_size"] = int(self.target_file_size)
        result = table.write(rows, app_id=app_id, app_version=app_version, **options)
        info = {} if result.already_committed else _write_metrics(table, result.version)
        if result.already_committed:
            self.log.info("%s already holds app transaction %s version %d (table version %d): nothing "
                          "written", self.table_uri, app_id, app_version, result.version)  # fmt: skip
        else:
            self.log.info("wrote %s row(s) in %s file(s) to %s as version %d", info.get("numOutputRows"),
                          info.get("numFiles"), self.table_uri, result.version)  # fmt: skip
        files, records = int(info.get("numFiles", 0)), int(info.get("numOutputRows", 0))
        for outlet in self.outlets:
            if isinstance(outlet, Asset):
                context["outlet_events"][outlet].extra = {
                    "version": result.version, "operation": "WRITE", "appId": app_id,
                    "appVersion": app_version, "files": files, "records": records,
                    "alreadyCommitted": result.already_committed,
                }  # fmt: skip
        record_commit(context, self.table_uri, result.version, delta_conn_id=self.delta_conn_id,
                      already_committed=result.already_committed, files_added=files, records_added=records,
                      operation="WRITE")  # fmt: skip
        self._lineage_table = table
        return result.version

    def get_openlineage_facets_on_complete(self, task_instance: Any) -> Any:
        """OpenLineage: the table as the output dataset, with its schema facet (needs the OL provider)."""
        from airflow_provider_delta.lineage import table_lineage

        table = getattr(self, "_lineage_table", None)
        return table_lineage(self.table_uri, table.snapshot() if table is not None else None, output=True)


def _write_metrics(table: Any, version: int) -> dict[str, Any]:
    """The WRITE's operationMetrics from its commitInfo (strings, as Delta Spark writes them)."""
    from airflow_provider_delta.log.snapshot.history import read_commit_info

    return (read_commit_info(table.store, version) or {}).get("operationMetrics") or {}
