"""DeltaSparkWriteOperator and DeltaSparkMergeOperator: run a PySpark function and write (or MERGE) its
DataFrame into a Delta table, exactly once.

The user's callable builds a DataFrame from a SparkSession (local by default, or a cluster named by a
master URL or by an Airflow ``spark`` connection); the Spark writer (``airflow_provider_delta.spark.write``)
writes it, or ``spark.merge`` merges it as Delta Spark's MERGE does, and commits with the task's app
transaction (see ``operators.commit``: one appId per task and
interval), so a retry or a cleared run whose write already landed writes nothing and commits nothing.

The ``spark`` connection is the one the Apache Spark provider defines (host: the master URL, ``local``,
``yarn`` or ``k8s://...``; port; extra ``deploy-mode``, ``queue``, ``namespace``), read here without
that provider. The session's driver runs inside the task, so the deploy mode is ``client``: for
``cluster`` mode submit a job that calls ``airflow_provider_delta.spark.write`` itself (docs/spark.md).

Importing this module does not import pyspark (the ``spark`` extra); running the operator does.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from airflow.sdk import Asset, BaseHook, BaseOperator

from airflow_provider_delta.extras import require
from airflow_provider_delta.hooks.delta import DeltaHookMixin
from airflow_provider_delta.hooks.secrets import redact_errors
from airflow_provider_delta.operators.commit import MODES, default_app_id, table_asset
from airflow_provider_delta.ui.links import DeltaTableLink, record_commit

if TYPE_CHECKING:
    from airflow.sdk import Context
    from pyspark.sql import DataFrame, SparkSession


# Masters given as they are; any other host is a standalone master's host name.
_MASTER_PREFIXES = ("local", "yarn", "k8s://", "spark://", "mesos://")


def spark_settings(conn: Any) -> tuple[str, dict[str, str]]:
    """The master URL and Spark conf an Airflow ``spark`` connection describes.

    Host ``spark://h`` / ``h`` with port ``7077`` gives ``spark://h:7077``; ``yarn``, ``local[4]`` and
    ``k8s://https://...`` are used as they are. Extra ``queue`` and ``namespace`` become
    ``spark.yarn.queue`` and ``spark.kubernetes.namespace``, extra ``conf`` (a dict) is passed through.
    """
    host = (conn.host or "").strip()
    if not host:
        raise ValueError(f"spark connection {conn.conn_id!r} has no host: set it to the master URL")
    master = host if host.startswith(_MASTER_PREFIXES) or "://" in host else f"spark://{host}"
    if conn.port and master.startswith(("spark://", "k8s://")) and not re.search(r":\d+$", master):
        master = f"{master}:{conn.port}"
    extra = conn.extra_dejson or {}
    deploy_mode = extra.get("deploy-mode") or extra.get("deploy_mode")
    if deploy_mode and deploy_mode != "client":
        raise ValueError(
            f"spark connection {conn.conn_id!r} asks for deploy-mode {deploy_mode!r}: a task's SparkSession "
            "runs its driver in the Airflow worker (client mode). For cluster mode, submit a job that calls "
            "airflow_provider_delta.spark.write with the task's app_id (see docs/spark.md)"
        )
    conf: dict[str, str] = {}
    if queue := extra.get("queue"):
        conf["spark.yarn.queue"] = str(queue)
    if namespace := extra.get("namespace"):
        conf["spark.kubernetes.namespace"] = str(namespace)
    conf.update({str(k): str(v) for k, v in (extra.get("conf") or {}).items()})
    return master, conf


class _DeltaSparkOperator(BaseOperator, DeltaHookMixin):
    """What the Spark operators share: the session (local, a master URL or a ``spark`` connection), the
    table's storage options, the task's exactly-once key, and the commit's metrics, XCom and outlet event."""

    operator_extra_links = (DeltaTableLink(),)
    ui_color = "#e25a1c"

    def __init__(
        self,
        *,
        table_uri: str,
        app_id: str | None = None,
        app_version: int | str = 1,
        master: str = "local[2]",
        spark_conn_id: str | None = None,
        spark_conf: Mapping[str, Any] | None = None,
        delta_conn_id: str | None = None,
        **kwargs: Any,
    ) -> None:
        kwargs.setdefault("outlets", [table_asset(table_uri)] if "{{" not in table_uri else [])
        super().__init__(**kwargs)
        self.table_uri = table_uri
        self.app_id = app_id
        self.app_version = app_version
        self.master = master
        self.spark_conn_id = spark_conn_id
        self.spark_conf = dict(spark_conf or {})
        self.delta_conn_id = delta_conn_id

    def _session_settings(self) -> tuple[str, dict[str, str]]:
        if not self.spark_conn_id:
            return self.master, dict(self.spark_conf)
        master, conf = spark_settings(BaseHook.get_connection(self.spark_conn_id))
        return master, {**conf, **self.spark_conf}

    def _in_session(self, work: Callable[[SparkSession], Any]) -> Any:
        """``work(spark)`` in the task's session, stopped afterwards unless it was there before."""
        require("pyspark")
        from pyspark.sql import SparkSession

        from airflow_provider_delta.spark.session import spark_session

        existing = SparkSession.getActiveSession()
        master, conf = self._session_settings()
        self.log.info("Spark session on %s", master)
        spark = spark_session(master, conf)
        try:
            return work(spark)
        finally:
            if existing is None:  # only stop a session this task started
                spark.stop()

    def _key(self, context: Context) -> tuple[str, int]:
        return self.app_id or default_app_id(context), int(self.app_version)

    def _announce(self, context: Context, version: int, operation: str, app_id: str, app_version: int
                  ) -> None:  # fmt: skip
        for outlet in self.outlets:
            if isinstance(outlet, Asset):
                context["outlet_events"][outlet].extra = {
                    "version": version, "operation": operation, "appId": app_id, "appVersion": app_version,
                }  # fmt: skip

    def _metrics(self, version: int) -> dict[str, Any]:
        """The operationMetrics recorded in the commit's commitInfo."""
        from airflow_provider_delta.log.snapshot.history import read_commit_info

        store = self.delta_table().store
        return dict((read_commit_info(store, version) or {}).get("operationMetrics") or {})


class DeltaSparkWriteOperator(_DeltaSparkOperator):
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
    :param spark_conn_id: an Airflow ``spark`` connection: master URL, deploy mode, conf (see
        :func:`spark_settings`).
    :param spark_conf: extra Spark configuration (wins over the connection's). Templated.
    :param delta_conn_id: connection holding the table's storage options (shipped to executors).

    Returns (XCom ``return_value``) the version that holds the data; XCom ``delta_commit`` also says
    whether it was already committed and how many files and rows were written.
    """

    template_fields: Sequence[str] = ("table_uri", "replace_where", "app_id", "app_version", "spark_conf")
    template_fields_renderers = {"spark_conf": "json"}

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
        super().__init__(table_uri=table_uri, app_id=app_id, app_version=app_version, master=master,
                         spark_conn_id=spark_conn_id, spark_conf=spark_conf, delta_conn_id=delta_conn_id,
                         **kwargs)  # fmt: skip
        self.python_callable = python_callable
        self.mode = mode
        self.partition_by = partition_by
        self.replace_where = replace_where
        self.merge_schema = merge_schema

    @redact_errors
    def execute(self, context: Context) -> int:
        from airflow_provider_delta.spark.write import write

        app_id, app_version = self._key(context)
        options = self.table_storage_options()

        def work(spark: SparkSession) -> Any:
            return write(
                self.python_callable(spark, context), self.table_uri, mode=self.mode,
                partition_by=self.partition_by, replace_where=self.replace_where, app_id=app_id,
                app_version=app_version, storage_options=options, merge_schema=self.merge_schema,
            )  # fmt: skip

        result = self._in_session(work)
        metrics = {} if result.already_committed else self._metrics(result.version)
        record_commit(
            context, self.table_uri, result.version, delta_conn_id=self.delta_conn_id,
            already_committed=result.already_committed, operation="WRITE",
            files_added=int(metrics.get("numFiles", 0)), records_added=int(metrics.get("numOutputRows", 0)),
        )  # fmt: skip
        if result.already_committed:
            self.log.info("%s already holds app transaction %s version %d (table version %d): nothing "
                          "written", self.table_uri, app_id, app_version, result.version)  # fmt: skip
        else:
            self.log.info("committed version %d of %s: %s file(s), %s row(s)", result.version,
                          self.table_uri, metrics.get("numFiles"), metrics.get("numOutputRows"))  # fmt: skip
            self._announce(context, result.version, "WRITE", app_id, app_version)
        return result.version


# -- MERGE ------------------------------------------------------------------------------------------------
UPSERT = ({"when": "matched", "then": "update", "set": "*"},
          {"when": "not_matched", "then": "insert", "values": "*"})  # fmt: skip
_CLAUSES = {  # (when, then) -> (builder method, method taking "*", the key of its assignments)
    ("matched", "update"): ("when_matched_update", "when_matched_update_all", "set"),
    ("matched", "delete"): ("when_matched_delete", None, None),
    ("not_matched", "insert"): ("when_not_matched_insert", "when_not_matched_insert_all", "values"),
    ("not_matched_by_source", "update"): ("when_not_matched_by_source_update", None, "set"),
    ("not_matched_by_source", "delete"): ("when_not_matched_by_source_delete", None, None),
}


def check_clauses(clauses: Sequence[Mapping[str, Any]]) -> None:
    """Refuse a clause list the MERGE builder could not take, at DAG parse time where possible."""
    if not clauses:
        raise ValueError("a MERGE needs at least one clause")
    for i, clause in enumerate(clauses):
        key = (clause.get("when"), clause.get("then"))
        if key not in _CLAUSES:
            raise ValueError(f"clause {i + 1}: when/then {key} is not one of {sorted(_CLAUSES)}")
        _, star, field = _CLAUSES[key]
        assignments = clause.get(field) if field else None
        if field and not (isinstance(assignments, Mapping) and assignments or assignments == "*" and star):
            raise ValueError(f"clause {i + 1} ({key[0]} {key[1]}) needs {field!r}: a dict of column -> SQL"
                             + (" or '*'" if star else ""))  # fmt: skip
        extra = set(clause) - {"when", "then", "condition", field}
        if extra:
            raise ValueError(f"clause {i + 1}: unknown key(s) {sorted(extra)}")


def apply_clauses(builder: Any, clauses: Sequence[Mapping[str, Any]]) -> Any:
    """Add ``clauses`` (dicts: ``when``, ``then``, optional ``condition``, ``set``/``values``) to a
    ``spark.merge`` builder, in order."""
    check_clauses(clauses)
    for clause in clauses:
        method, star, field = _CLAUSES[(clause["when"], clause["then"])]
        condition = clause.get("condition")
        if field is None:
            builder = getattr(builder, method)(condition)
        elif clause[field] == "*":
            builder = getattr(builder, star)(condition)
        else:
            builder = getattr(builder, method)(dict(clause[field]), condition)
    return builder


class DeltaSparkMergeOperator(_DeltaSparkOperator):
    """MERGE the DataFrame returned by ``source_callable(spark, context)`` into a Delta table, exactly once.

    The MERGE is ``airflow_provider_delta.spark.merge`` (Delta Spark's semantics, one commit) with the
    task's app transaction: a retry or a clear of a run whose MERGE already landed finds its key in the
    table and merges nothing; a batch that changes no row commits nothing, as in Delta Spark.

    :param table_uri: the target table. Templated.
    :param source_callable: ``(spark, context) -> DataFrame``: the change batch.
    :param on: the merge condition, with ``target`` and ``source`` as aliases. Templated.
    :param clauses: WHEN clauses in order, each a dict: ``when`` (``matched``, ``not_matched``,
        ``not_matched_by_source``), ``then`` (``update``, ``delete``, ``insert``), optional ``condition``,
        and ``set`` (update) or ``values`` (insert): ``{column: SQL}`` or ``"*"``. Default: upsert (update
        matched rows with every source column, insert the others). Templated.
    :param merge_schema: evolve the table's schema from the source (Delta Spark's schema evolution).
    :param app_id: exactly-once key; default: per task, map index and interval. Templated.
    :param app_version: version recorded with ``app_id``; merge again by raising it. Templated.
    :param master, spark_conn_id, spark_conf, delta_conn_id: as :class:`DeltaSparkWriteOperator`.

    Returns (XCom ``return_value``) the version that holds the MERGE (None when it changed nothing); XCom
    ``delta_commit`` also says whether it was already committed, and the rows inserted.
    """

    template_fields: Sequence[str] = ("table_uri", "on", "clauses", "app_id", "app_version", "spark_conf")
    template_fields_renderers = {"spark_conf": "json", "clauses": "json"}

    def __init__(
        self,
        *,
        table_uri: str,
        source_callable: Callable[[SparkSession, Context], DataFrame],
        on: str,
        clauses: Sequence[Mapping[str, Any]] = UPSERT,
        merge_schema: bool = False,
        app_id: str | None = None,
        app_version: int | str = 1,
        master: str = "local[2]",
        spark_conn_id: str | None = None,
        spark_conf: Mapping[str, Any] | None = None,
        delta_conn_id: str | None = None,
        **kwargs: Any,
    ) -> None:
        if not callable(source_callable):
            raise TypeError("source_callable must be a callable (spark, context) -> DataFrame")
        if not isinstance(clauses, str):  # a template is checked when rendered
            check_clauses(clauses)
        super().__init__(table_uri=table_uri, app_id=app_id, app_version=app_version, master=master,
                         spark_conn_id=spark_conn_id, spark_conf=spark_conf, delta_conn_id=delta_conn_id,
                         **kwargs)  # fmt: skip
        self.source_callable = source_callable
        self.on = on
        self.clauses = [dict(c) for c in clauses] if not isinstance(clauses, str) else clauses
        self.merge_schema = merge_schema

    @redact_errors
    def execute(self, context: Context) -> int | None:
        from airflow_provider_delta.spark.merge import merge

        app_id, app_version = self._key(context)
        options = self.table_storage_options()

        def work(spark: SparkSession) -> Any:
            builder = merge(self.source_callable(spark, context), self.table_uri, self.on, app_id=app_id,
                            app_version=app_version, storage_options=options,
                            merge_schema=self.merge_schema)  # fmt: skip
            return apply_clauses(builder, self.clauses).execute()

        result = self._in_session(work)
        m = result.metrics
        if result.version is None:
            self.log.info("the MERGE into %s changed no row: nothing committed", self.table_uri)
            return None
        record_commit(
            context, self.table_uri, result.version, delta_conn_id=self.delta_conn_id,
            already_committed=result.already_committed, operation="MERGE",
            files_added=m.get("numTargetFilesAdded"), records_added=m.get("numTargetRowsInserted"),
        )  # fmt: skip
        if result.already_committed:
            self.log.info("%s already holds app transaction %s version %d (table version %d): nothing "
                          "merged", self.table_uri, app_id, app_version, result.version)  # fmt: skip
        else:
            self.log.info("MERGE committed version %d of %s: %s row(s) updated, %s inserted, %s deleted",
                          result.version, self.table_uri, m.get("numTargetRowsUpdated"),
                          m.get("numTargetRowsInserted"), m.get("numTargetRowsDeleted"))  # fmt: skip
            self._announce(context, result.version, "MERGE", app_id, app_version)
        return result.version
