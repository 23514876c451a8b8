"""DeltaSparkWriteOperator: run a PySpark function and commit its DataFrame to a Delta table, exactly once.

The user's callable builds a DataFrame from a SparkSession (local by default, or a cluster named by a
master URL or a Spark connection); the Spark writer (``airflow_provider_delta.spark.write``) writes it
and commits with the task's app transaction (see ``operators.commit``: one appId per task and interval),
so a retry or a cleared run whose write already landed writes nothing and commits nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from airflow.sdk import Asset, BaseHook, BaseOperator

from airflow_provider_delta.operators.commit import MODES, default_app_id, table_asset

if TYPE_CHECKING:
    from airflow.sdk import Context
    from pyspark.sql import DataFrame, SparkSession


class DeltaSparkWriteOperator(BaseOperator):
    """Write the DataFrame returned by ``python_callable(spark, context)`` to a Delta table.

    :param table_uri: the table root (created on the first write). Templated.
    :param python_callable: ``(spark, context) -> DataFrame``.
    :param mode: ``append`` or ``overwrite``.
    :param partition_by: partition columns when the write creates the table.
    :param replace_where: with ``overwrite``, a SQL predicate over partition columns: only matching
        partitions are replaced, and every written row must match it. Templated.
    :param app_id: exactly-once key; default: per task, map index and interval. Templated.
    :param app_version: version recorded with ``app_id``; write again by raising it. Templated.
    :param merge_schema: add new DataFrame columns to the table.
    :param master: Spark master URL (``local[2]`` by default); ignored when ``spark_conn_id`` is set.
    :param spark_conn_id: an Airflow connection whose host (and port) is the master URL.
    :param spark_conf: extra Spark configuration.
    :param delta_conn_id: connection holding the table's storage options (shipped to executors).
    """

    template_fields: Sequence[str] = ("table_uri", "replace_where", "app_id", "app_version")
    ui_color = "#e25a1c"

    def __init__(
        self,
        *,
        table_uri: str,
        python_callable: Callable[[SparkSession, Context], DataFrame],
        mode: str = "append",
        partition_by: list[str] | None = None,
        replace_where: str | None = None,
        app_id: str | None = None,
        app_version: int | str = 1,
        merge_schema: bool = False,
        master: str = "local[2]",
        spark_conn_id: str | None = None,
        spark_conf: Mapping[str, Any] | None = None,
        delta_conn_id: str | None = None,
        **kwargs: Any,
    ) -> None:
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, not {mode!r}")
        if not callable(python_callable):
            raise TypeError("python_callable must be a callable (spark, context) -> DataFrame")
        kwargs.setdefault("outlets", [table_asset(table_uri)] if "{{" not in table_uri else [])
        super().__init__(**kwargs)
        self.table_uri = table_uri
        self.python_callable = python_callable
        self.mode = mode
        self.partition_by = partition_by
        self.replace_where = replace_where
        self.app_id = app_id
        self.app_version = app_version
        self.merge_schema = merge_schema
        self.master = master
        self.spark_conn_id = spark_conn_id
        self.spark_conf = dict(spark_conf or {})
        self.delta_conn_id = delta_conn_id

    def _master(self) -> str:
        if not self.spark_conn_id:
            return self.master
        conn = BaseHook.get_connection(self.spark_conn_id)
        host = conn.host or self.master
        return f"{host}:{conn.port}" if conn.port else host

    def _storage_options(self) -> dict[str, Any]:
        if not self.delta_conn_id:
            return {}
        from airflow_provider_delta.hooks.delta import DeltaHook

        return DeltaHook(self.delta_conn_id).storage_options(self.table_uri)

    def execute(self, context: Context) -> int:
        from pyspark.sql import SparkSession

        from airflow_provider_delta.spark.session import spark_session
        from airflow_provider_delta.spark.write import write

        app_id = self.app_id or default_app_id(context)
        app_version = int(self.app_version)
        options = self._storage_options()
        existing = SparkSession.getActiveSession()
        spark = spark_session(self._master(), self.spark_conf)
        try:
            df = self.python_callable(spark, context)
            result = write(
                df, self.table_uri, mode=self.mode, partition_by=self.partition_by,
                replace_where=self.replace_where, app_id=app_id, app_version=app_version,
                storage_options=options, merge_schema=self.merge_schema,
            )  # fmt: skip
        finally:
            if existing is None:  # only stop a session this task started
                spark.stop()
        if result.already_committed:
            self.log.info("%s already holds app transaction %s version %d (table version %d): nothing "
                          "written", self.table_uri, app_id, app_version, result.version)  # fmt: skip
        else:
            self.log.info("committed version %d of %s", result.version, self.table_uri)
            for outlet in self.outlets:
                if isinstance(outlet, Asset):
                    context["outlet_events"][outlet].extra = {
                        "version": result.version, "operation": "WRITE", "appId": app_id,
                        "appVersion": app_version,
                    }  # fmt: skip
        return result.version
