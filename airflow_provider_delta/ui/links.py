"""The "Delta table" button on the tasks that write a table, and the record it is built from.

Every table operator pushes one XCom, ``delta_commit``: the table, the version it committed (or, for
maintenance that commits nothing, the version it saw), whether it was already committed, the files and
records it added, and the connection it used. The operator link turns that record into the URL of the
table's page in the Delta view at that version; the view reads the same records to list the tables the
deployment's tasks have written and to name the task behind each version. A connection id is not a secret;
no credential is ever in the record.

Airflow 3 builds an operator's links once, in the worker after every try (succeeded, failed or deferred), and
stores each URL as an XCom the UI reads. So the link reads the record the running try kept on its operator
rather than the XCom: a try that failed before it committed pushed none, and asking the API for a missing
XCom logs ``XCom not found`` as an error after the task's real one.
"""

from __future__ import annotations

import posixpath
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode

from airflow.sdk import BaseOperatorLink

if TYPE_CHECKING:
    from airflow.sdk import BaseOperator, Context
    from airflow.sdk.types import TaskInstanceKey

COMMIT_XCOM_KEY = "delta_commit"
URL_PREFIX = "/delta"
_RECORD_ATTR = "_delta_commit_record"  # on the running operator (a copy per try): the record this try pushed


def canonical_uri(table_uri: str) -> str:
    """One spelling per table: the URI of its Asset (local paths as absolute ``file://`` URIs)."""
    uri = str(table_uri)
    uri = uri if "://" in uri else f"file://{posixpath.abspath(uri)}"
    return uri.rstrip("/")


def record_commit(
    context: Context,
    table_uri: str,
    version: int,
    *,
    delta_conn_id: str | None,
    already_committed: bool = False,
    files_added: int | None = None,
    records_added: int | None = None,
    operation: str | None = None,
) -> dict[str, Any]:
    """Push the task's ``delta_commit`` XCom and return it."""
    record = {
        "table_uri": canonical_uri(table_uri),
        "version": int(version),
        "operation": operation,
        "already_committed": already_committed,
        "files_added": files_added,
        "records_added": records_added,
        "delta_conn_id": delta_conn_id,
    }
    if (ti := context.get("ti")) is not None:  # None only when execute() is called by hand
        ti.xcom_push(key=COMMIT_XCOM_KEY, value=record)
        if (task := context.get("task")) is not None:
            setattr(task, _RECORD_ATTR, record)
    return record


def table_page_url(table_uri: str, version: int | None = None) -> str:
    """The Delta view's page of a table (at ``version``), under ``[api] base_url`` when it is set."""
    from airflow.configuration import conf

    base = (conf.get("api", "base_url", fallback="") or "").rstrip("/")
    query = {"uri": table_uri} if version is None else {"uri": table_uri, "version": int(version)}
    return f"{base}{URL_PREFIX}/table?{urlencode(query)}"


class DeltaTableLink(BaseOperatorLink):
    """Opens the task's table in the Delta view, at the version the task committed."""

    name = "Delta table"

    def get_link(self, operator: BaseOperator, *, ti_key: TaskInstanceKey) -> str:
        record = getattr(operator, _RECORD_ATTR, None)  # see the module: not the XCom
        if not isinstance(record, dict) or not record.get("table_uri"):
            return ""  # the try did not commit (it failed or deferred): Airflow shows the button disabled
        return table_page_url(record["table_uri"], record.get("version"))
