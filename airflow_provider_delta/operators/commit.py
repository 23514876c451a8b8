"""DeltaCommitOperator: commit files an upstream task wrote, exactly once per data interval.

Exactly-once design (see docs/exactly-once.md). Each commit records a Delta app transaction
("Transaction Identifiers"): ``appId`` names the task *and the interval it loads*
(``airflow/<dag_id>/<task_id>/<map_index>/<logical date or run id>``), ``version`` is ``app_version``
(default 1). The core commits nothing when the table already holds that appId at >= version and returns
the version that holds it, so:

- a retry or a clear of the same run finds its own appId and commits nothing the second time;
- a backfill of an older interval has an appId of its own, so it commits once; with one appId per task the
  usual "skip if version <= latest" rule would wrongly skip it;
- two runs racing on one table: each interval commits once; the same interval racing itself lands once
  (the loser sees the winner's appId after the conflict and returns "already committed").

One txn per interval accumulates in the log; ``delta.setTransactionRetentionDuration`` prunes them (set
it longer than the longest time after which you would clear or re-run a task).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from airflow.sdk import Asset, BaseOperator

from airflow_provider_delta.hooks.delta import DeltaHookMixin
from airflow_provider_delta.hooks.secrets import redact_errors
from airflow_provider_delta.log import AddFile, add_file_from_parquet
from airflow_provider_delta.log.actions.commit_info import write_metrics
from airflow_provider_delta.log.schema.file_layout import partition_values_of_path
from airflow_provider_delta.ui.links import DeltaTableLink, canonical_uri, record_commit

if TYPE_CHECKING:
    from airflow.sdk import Context

    from airflow_provider_delta.log import CommitResult, Snapshot

MODES = ("append", "overwrite")


def default_app_id(context: Context) -> str:
    """``airflow/<dag_id>/<task_id>/<map_index>/<interval>``: one exactly-once key per task and interval."""
    ti = context["ti"]
    logical = context.get("logical_date")
    interval = logical.isoformat() if logical is not None else context["run_id"]
    return f"airflow/{ti.dag_id}/{ti.task_id}/{ti.map_index}/{interval}"


def table_asset(table_uri: str) -> Asset:
    """The Asset of a table: its URI, with local paths as ``file://`` URIs."""
    return Asset(uri=canonical_uri(table_uri))


def partition_values_from_path(path: str, partition_columns: Sequence[str]) -> dict[str, str | None]:
    """Hive-style ``col=value`` folders of a relative path, for the table's partition columns."""
    found = partition_values_of_path(path)
    missing = [c for c in partition_columns if c not in found]
    if missing:
        raise ValueError(f"{path}: no {missing} folder(s) to take partition values from; pass AddFile dicts")
    return {c: found[c] for c in partition_columns}


class DeltaCommitOperator(BaseOperator, DeltaHookMixin):
    """Commit Parquet files already written under a Delta table's root, exactly once per interval.

    :param table_uri: the table root. Templated.
    :param files: files to add: AddFile dicts (``AddFile.to_json()`` shape or ``Snapshot.files`` rows), or
        paths relative to the table root (stats are then read from the Parquet footers, partition values
        from ``col=value`` folders). Usually an upstream task's XCom. Templated.
    :param remove: paths (relative) of live files to remove in the same commit. Templated.
    :param mode: ``append`` or ``overwrite`` (removes every live file in the same commit).
    :param app_id: exactly-once key; default: per task, map index and interval (see module docs). Templated.
    :param app_version: version recorded with ``app_id``; commit again by raising it. Templated.
    :param operation: the commitInfo operation (``WRITE`` by default).
    :param delta_conn_id: connection for the table's storage (``None``: no credentials).
    :param constraints_checked: the rows satisfy the table's invariants/CHECK constraints/generated columns.

    Returns (XCom ``return_value``) the version that holds the data; XCom ``delta_commit`` also says
    whether it was already committed and how many files and records were added.
    """

    template_fields: Sequence[str] = ("table_uri", "files", "remove", "app_id", "app_version")
    template_fields_renderers = {"files": "json", "remove": "json"}
    operator_extra_links = (DeltaTableLink(),)
    ui_color = "#00add4"

    def __init__(
        self,
        *,
        table_uri: str,
        files: Any,
        remove: Any = None,
        mode: str = "append",
        app_id: str | None = None,
        app_version: int | str = 1,
        operation: str = "WRITE",
        delta_conn_id: str | None = None,
        constraints_checked: bool = False,
        **kwargs: Any,
    ) -> None:
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, not {mode!r}")
        kwargs.setdefault("outlets", [table_asset(table_uri)] if "{{" not in table_uri else [])
        super().__init__(**kwargs)
        self.table_uri = table_uri
        self.files = files
        self.remove = remove
        self.mode = mode
        self.app_id = app_id
        self.app_version = app_version
        self.operation = operation
        self.delta_conn_id = delta_conn_id
        self.constraints_checked = constraints_checked

    def _adds(self, snap: Snapshot) -> list[AddFile]:
        adds = []
        for item in self.files or []:
            if isinstance(item, dict):
                adds.append(AddFile.from_dict(item))
            else:
                pv = partition_values_from_path(str(item), snap.partition_columns)
                adds.append(add_file_from_parquet(snap, str(item), pv))
        return adds

    def _removes(self, snap: Snapshot) -> list[AddFile]:
        if self.mode == "overwrite":
            return AddFile.from_table(snap.files)
        wanted = {str(p) for p in self.remove or []}
        if not wanted:
            return []
        live = [a for a in AddFile.from_table(snap.files) if a.path in wanted]
        if missing := sorted(wanted - {f.path for f in live}):
            raise ValueError(f"cannot remove {missing[:5]}: not live files of {self.table_uri}")
        return live

    @redact_errors
    def execute(self, context: Context) -> int:
        table = self.delta_table()
        app_id = self.app_id or default_app_id(context)
        app_version = int(self.app_version)
        txn = table.transaction()
        snap = txn.snapshot
        adds = self._adds(snap)
        removes = self._removes(snap)
        txn.add_files(adds, constraints_checked=self.constraints_checked).set_app_transaction(
            app_id, app_version
        )
        if self.mode == "overwrite":
            txn.read_whole_table()
        txn.remove_files(removes)
        params = {"mode": self.mode.capitalize(), "partitionBy": list(snap.partition_columns)}
        metrics = write_metrics(adds, removes)
        records = metrics["numOutputRows"]
        result = txn.commit(self.operation, params, operation_metrics=metrics)
        if result.already_committed:
            self.log.info(
                "%s already holds app transaction %s version %d (table version %d): nothing committed",
                self.table_uri, app_id, app_version, result.version,
            )  # fmt: skip
        else:
            self.log.info("committed %d file(s), %d record(s) to %s as version %d",
                          len(adds), records, self.table_uri, result.version)  # fmt: skip
        # Also when already committed (a retry after a lost acknowledgement): the run's asset event must
        # still say which version holds its data.
        self._emit_asset_event(context, result, app_id, app_version, len(adds), records)
        record_commit(
            context, self.table_uri, result.version, delta_conn_id=self.delta_conn_id,
            already_committed=result.already_committed, files_added=0 if result.already_committed
            else len(adds), records_added=0 if result.already_committed else records,
            operation=self.operation,
        )  # fmt: skip
        self._lineage = (snap, result.version)
        return result.version

    def _emit_asset_event(
        self, context: Context, result: CommitResult, app_id: str, app_version: int, files: int, records: int
    ) -> None:
        for outlet in self.outlets:
            if isinstance(outlet, Asset):
                context["outlet_events"][outlet].extra = {
                    "version": result.version,
                    "operation": self.operation,
                    "appId": app_id,
                    "appVersion": app_version,
                    "files": files,
                    "records": records,
                    "alreadyCommitted": result.already_committed,
                }

    def get_openlineage_facets_on_complete(self, task_instance: Any) -> Any:
        """OpenLineage: the table as the output dataset, with its schema facet (needs the OL provider)."""
        from airflow_provider_delta.lineage import table_lineage

        snap, _version = getattr(self, "_lineage", (None, None))
        return table_lineage(self.table_uri, snap, output=True)
