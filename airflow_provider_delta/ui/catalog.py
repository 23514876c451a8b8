"""Which Delta tables the deployment knows, read from Airflow's metadata database.

Four sources, each naming the connection that reaches the table:

- ``delta_commit`` XComs: every table operator of this provider records the table, the version and the
  connection it used (``ui.links``);
- asset events our commit operators emitted (their extra carries ``appId`` and ``version``) for tables
  whose tasks ran before those records existed;
- assets watched by a ``DeltaTableWatcherTrigger``;
- the ``tables`` field of ``delta`` connections kept in the database (connections from environment
  variables or a secrets backend cannot be listed; name their tables in the DAGs instead).

The page serves only tables found here: a browser cannot make the API server read an arbitrary path or use
an arbitrary connection. The connection's credentials stay on the server; only its id is shown.
"""

from __future__ import annotations

import contextlib
import logging
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from airflow_provider_delta.hooks.delta import extra_field, split_tables
from airflow_provider_delta.ui.links import COMMIT_XCOM_KEY, canonical_uri

log = logging.getLogger(__name__)

WATCHER_CLASSPATH = "airflow_provider_delta.triggers.delta.DeltaTableWatcherTrigger"
RECENT_ROWS = 5000  # XCom records and asset events looked at per source, newest first


@dataclass
class KnownTable:
    uri: str
    conn_id: str | None = None
    sources: set[str] = field(default_factory=set)
    last_version: int | None = None


@dataclass(frozen=True)
class TaskRef:
    """A task instance that committed (or looked at) a version."""

    dag_id: str
    run_id: str
    task_id: str
    map_index: int
    operation: str | None


def known_tables() -> dict[str, KnownTable]:
    """Tables by canonical URI; a connection that names a table wins over the one a task used."""
    from airflow.utils.session import create_session

    found: dict[str, KnownTable] = {}

    def add(uri: str, source: str, conn_id: str | None, version: int | None = None) -> None:
        key = canonical_uri(uri)
        entry = found.setdefault(key, KnownTable(key))
        entry.sources.add(source)
        if conn_id and (entry.conn_id is None or source == "connection"):
            entry.conn_id = conn_id
        if version is not None and (entry.last_version is None or version > entry.last_version):
            entry.last_version = version

    with create_session() as session:
        for conn_id, uri in _connection_tables(session):
            add(uri, "connection", conn_id)
        for record, _ref in _commit_records(session):
            add(record["table_uri"], "task", record.get("delta_conn_id"), record.get("version"))
        for uri, version in _asset_events(session):
            add(uri, "asset", None, version)
        for uri, conn_id in _watched(session):
            add(uri, "watcher", conn_id)
    return dict(sorted(found.items()))


def tasks_by_version(uri: str) -> dict[int, list[TaskRef]]:
    """The task instances whose ``delta_commit`` record names ``uri``, by version."""
    from airflow.utils.session import create_session

    key = canonical_uri(uri)
    out: dict[int, list[TaskRef]] = {}
    with create_session() as session:
        for record, ref in _commit_records(session):
            if canonical_uri(record["table_uri"]) == key and record.get("version") is not None:
                out.setdefault(int(record["version"]), []).append(ref)
    return out


def run_ids(pairs: set[tuple[str, str]]) -> dict[tuple[str, str], str]:
    """``(dag_id, interval)`` -> run id, for the intervals our appIds name (a logical date or a run id)."""
    if not pairs:
        return {}
    from airflow.models.dagrun import DagRun
    from airflow.utils.session import create_session
    from sqlalchemy import or_, select

    out: dict[tuple[str, str], str] = {}
    dag_ids = {d for d, _ in pairs}
    intervals = {i for _, i in pairs}
    dates = []
    for interval in intervals:
        with contextlib.suppress(ValueError):
            dates.append(datetime.fromisoformat(interval))
    with create_session() as session:
        rows = session.execute(
            select(DagRun.dag_id, DagRun.run_id, DagRun.logical_date).where(
                DagRun.dag_id.in_(dag_ids), or_(DagRun.run_id.in_(intervals), DagRun.logical_date.in_(dates))
            )
        )
        for dag_id, run_id, logical_date in rows:
            for interval in (run_id, logical_date.isoformat() if logical_date else None):
                if (dag_id, interval) in pairs:
                    out[(dag_id, interval)] = run_id
    return out


def _commit_records(session: Any) -> list[tuple[dict[str, Any], TaskRef]]:
    from airflow.models.xcom import XComModel
    from sqlalchemy import select

    query = (
        select(XComModel)
        .where(XComModel.key == COMMIT_XCOM_KEY)
        .order_by(XComModel.timestamp.desc())
        .limit(RECENT_ROWS)
    )
    out = []
    for row in session.scalars(query):
        try:
            record = XComModel.deserialize_value(row)
        except Exception:  # a record we cannot read is skipped, not fatal to the page
            continue
        if isinstance(record, dict) and record.get("table_uri"):
            ref = TaskRef(row.dag_id, row.run_id, row.task_id, row.map_index, record.get("operation"))
            out.append((record, ref))
    return out


def _asset_events(session: Any) -> list[tuple[str, int | None]]:
    from airflow.models.asset import AssetEvent, AssetModel
    from sqlalchemy import select

    query = (
        select(AssetModel.uri, AssetEvent.extra)
        .join(AssetModel, AssetModel.id == AssetEvent.asset_id)
        .order_by(AssetEvent.timestamp.desc())
        .limit(RECENT_ROWS)
    )
    out = []
    for uri, extra in session.execute(query):
        if isinstance(extra, dict) and "appId" in extra and "version" in extra:
            out.append((uri, extra.get("version")))
    return out


def _watched(session: Any) -> list[tuple[str, str | None]]:
    from airflow.models.asset import AssetWatcherModel
    from airflow.models.trigger import Trigger
    from sqlalchemy import select

    query = select(Trigger).join(AssetWatcherModel, AssetWatcherModel.trigger_id == Trigger.id)
    out = []
    for trigger in session.scalars(query.where(Trigger.classpath == WATCHER_CLASSPATH)):
        try:
            kwargs = trigger.kwargs
        except Exception:  # kwargs encrypted with a key this server does not have
            log.warning("cannot read the arguments of trigger %s", trigger.id)
            continue
        if kwargs.get("table_uri"):
            out.append((kwargs["table_uri"], kwargs.get("delta_conn_id")))
    return out


def _connection_tables(session: Any) -> list[tuple[str, str]]:
    from airflow.models.connection import Connection
    from sqlalchemy import select

    out = []
    ids = session.scalars(select(Connection.id).where(Connection.conn_type == "delta")).all()
    for conn_id in ids:
        try:  # loading decrypts the password: a key this server lacks fails that connection alone
            conn = session.get(Connection, conn_id)
        except Exception as exc:
            log.warning("connection id %s cannot be read (%s): its tables are left out", conn_id,
                        type(exc).__name__)  # fmt: skip
            continue
        try:
            tables = split_tables(extra_field(conn, "tables"))
        except ValueError:
            log.warning("connection %s: its tables field is not a list of URIs", conn.conn_id)
            continue
        out += [(conn.conn_id, uri) for uri in tables]
    return out
