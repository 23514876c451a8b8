"""The Delta view: a FastAPI app the Airflow API server mounts at ``/delta`` (see ``ui.plugin``).

``/`` lists the tables the deployment knows (``ui.catalog``); ``/table?uri=...&version=N`` shows one of
them (``ui.table_view``) opened at a version. Pages are rendered on the server: the table is read through
the core with its connection's credentials, which never reach the browser; only the connection's id does.

Airflow does not authenticate plugin apps, so every route checks the caller itself, the way the API's own
routes do: the user from the ``Authorization`` header or Airflow's ``_token`` cookie, allowed to read
assets. A browser without a session is sent to Airflow's login page and back.

Bad input ends in a page that says what is wrong (no such table, a corrupt log, access denied), with no
stack trace and no secret: our own errors say which file and why; a storage client's failure gets a named,
stable message (``ui.failures``) and its detail goes to the API server's log only, with every form of the
connection's secrets replaced by ``***``.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

from fastapi import FastAPI, HTTPException, Query, Request
from fastapi.responses import HTMLResponse, RedirectResponse
from jinja2 import Environment, FileSystemLoader, select_autoescape

from airflow_provider_delta.extras import MissingExtraError, require_for_uri
from airflow_provider_delta.hooks.secrets import exception_chain
from airflow_provider_delta.hooks.storage_options import StorageOptionError
from airflow_provider_delta.log import CorruptLogError, DeltaError, DeltaTable, TableNotFoundError
from airflow_provider_delta.log.base.redaction import redact
from airflow_provider_delta.ui import catalog
from airflow_provider_delta.ui.failures import storage_failure
from airflow_provider_delta.ui.links import URL_PREFIX, canonical_uri
from airflow_provider_delta.ui.plot import human_bytes, table_plot, when
from airflow_provider_delta.ui.table_view import TableView, build_view

log = logging.getLogger(__name__)

templates = Environment(
    loader=FileSystemLoader(Path(__file__).with_name("templates")),
    autoescape=select_autoescape(["html"]),
)
app = FastAPI(title="Delta Lake tables", docs_url=None, redoc_url=None, openapi_url=None)


class PageError(Exception):
    """A page that says what went wrong, with an HTTP status."""

    def __init__(self, status: int, heading: str, message: str, hint: str = "", uri: str = "") -> None:
        super().__init__(message)
        self.status, self.heading, self.message, self.hint, self.uri = status, heading, message, hint, uri


def _prefix() -> str:
    from airflow.api_fastapi.app import API_ROOT_PATH

    return f"{API_ROOT_PATH.rstrip('/')}{URL_PREFIX}"


def _render(name: str, status: int = 200, **values: Any) -> HTMLResponse:
    page = templates.get_template(name).render(
        prefix=_prefix(), human_bytes=human_bytes, when=when, type_text=_type_text, **values
    )
    return HTMLResponse(page, status_code=status)


async def _authorize(request: Request) -> HTMLResponse | RedirectResponse | None:
    """None when the caller may read assets; else the login redirect or a 403 page."""
    from airflow.api_fastapi.app import get_auth_manager
    from airflow.api_fastapi.core_api.security import get_user

    auth = request.headers.get("authorization", "")
    bearer = None
    if auth.lower().startswith("bearer "):
        from fastapi.security import HTTPAuthorizationCredentials

        bearer = HTTPAuthorizationCredentials(scheme="Bearer", credentials=auth[7:])
    try:
        user = await get_user(request, None, bearer)
    except HTTPException:
        next_url = _here(request)
        return RedirectResponse(get_auth_manager().get_url_login(next_url=next_url), status_code=307)
    if not get_auth_manager().is_authorized_asset(method="GET", user=user):
        message = "Your Airflow role may not read assets, which the Delta view needs."
        return _render("error.html", 403, heading="Not allowed", message=message)
    return None


def _here(request: Request) -> str:
    """The path and query the browser asked for, to come back to after logging in. Starlette's
    ``url.path`` of a mounted app already holds the mount's prefix (``/delta/table``); only a root path
    the server runs under is added."""
    from airflow.api_fastapi.app import API_ROOT_PATH

    path = request.url.path
    root = API_ROOT_PATH.rstrip("/")
    if root and not path.startswith(root + "/"):
        path = root + path
    return path + (f"?{request.url.query}" if request.url.query else "")


@app.get("/", response_class=HTMLResponse)
async def index(request: Request) -> Any:
    if denied := await _authorize(request):
        return denied
    import asyncio

    tables = await asyncio.to_thread(catalog.known_tables)
    rows = [{**vars(t), "query": urlencode({"uri": t.uri})} for t in tables.values()]
    return _render("index.html", tables=rows)


@app.get("/table", response_class=HTMLResponse)
async def table_page(
    request: Request, uri: str = Query(..., max_length=2000), version: str | None = Query(None)
) -> Any:
    if denied := await _authorize(request):
        return denied
    import asyncio

    try:
        return await asyncio.to_thread(_table_page, uri, version)
    except PageError as err:
        return _render("error.html", err.status, heading=err.heading, message=err.message, hint=err.hint,
                       uri=err.uri)  # fmt: skip


def _table_page(uri: str, version: str | None) -> HTMLResponse:
    selected = _version(version)
    entry = catalog.known_tables().get(canonical_uri(uri))
    if entry is None:
        raise PageError(404, "Unknown table", f"{uri} is not a Delta table this deployment knows.",
                        "Tables appear here once a Delta operator has written them, or when a delta "
                        "connection names them in its Tables field.", uri)  # fmt: skip
    view = _read(entry)(selected)
    if selected is not None and not any(r.version == selected for r in view.rows):
        view.selected = None
    rows = _with_tasks(entry.uri, view)
    return _render("table.html", v=view, m=view.maintenance, rows=rows, conn_id=entry.conn_id,
                   plot=table_plot(view.points, view.selected))  # fmt: skip


def _version(text: str | None) -> int | None:
    if text in (None, ""):
        return None
    try:
        value = int(text)
    except ValueError:
        raise PageError(400, "Bad version", f"version must be a whole number, not {text[:40]!r}") from None
    if value < 0:
        raise PageError(400, "Bad version", "version must not be negative")
    return value


def _read(entry: catalog.KnownTable):
    """A reader of the table's view; every failure becomes a PageError.

    A page never shows a storage client's own message: those carry credentials in forms no masker knows
    (gcsfs puts a token, percent-encoded, in a URL). It shows a named, stable message instead; the API
    server's log keeps the detail, with every form of the connection's secrets replaced by ``***``. Our own
    errors (no table, a corrupt log) say which file and why, redacted the same way."""

    def read(selected: int | None) -> TableView:
        secrets = _secrets(entry.conn_id)
        where = f"connection {entry.conn_id!r}" if entry.conn_id else "no connection"
        try:
            return build_view(_table(entry), selected=selected)
        except TableNotFoundError as exc:
            raise PageError(404, "No Delta table there", redact(str(exc), secrets),
                            "The path holds no _delta_log with commits: the table was never created "
                            "there, or was deleted.", entry.uri) from None  # fmt: skip
        except CorruptLogError as exc:
            log.warning("Delta view: corrupt log in %s: %s", entry.uri, redact(str(exc), secrets))
            raise PageError(500, "Corrupt Delta log", redact(str(exc), secrets),
                            "A log file cannot be read as Delta actions; readers of this version fail "
                            "the same way. Restore the file from a backup.", entry.uri) from None  # fmt: skip
        except StorageOptionError as exc:  # names the options, never their values
            raise PageError(500, "Bad connection", redact(str(exc), secrets),
                            "Edit the connection's storage options (docs/connections.md).",
                            entry.uri) from None  # fmt: skip
        except (MissingExtraError, DeltaError) as exc:
            raise PageError(500, "Cannot read the table", redact(f"{type(exc).__name__}: {exc}", secrets),
                            uri=entry.uri) from None  # fmt: skip
        except Exception as exc:
            status, heading, message, hint = storage_failure(exc, entry.uri, where)
            log.warning("Delta view: %s (%s): %s", message, where, redact(_detail(exc), secrets))
            raise PageError(status, heading, message, hint, entry.uri) from None

    return read


def _detail(exc: BaseException) -> str:
    """The exception and its causes, one line: for the log only."""
    parts = [f"{type(e).__name__}: {e}" for e in list(exception_chain(exc))[:5]]
    return " <- ".join(" ".join(p.split()) for p in parts)[:4000]


def _table(entry: catalog.KnownTable) -> DeltaTable:
    require_for_uri(entry.uri)
    if not entry.conn_id:
        return DeltaTable(entry.uri)
    from airflow_provider_delta.hooks.delta import DeltaHook

    return DeltaHook(entry.conn_id).get_table(entry.uri)


def _secrets(conn_id: str | None) -> list[str]:
    """The connection's secrets (registered with the API server's masker on the way)."""
    if not conn_id:
        return []
    from airflow_provider_delta.hooks.delta import DeltaHook

    try:
        return DeltaHook(conn_id).secrets()
    except Exception:  # no such connection: the read fails next, with its own page
        return []


def _with_tasks(uri: str, view: TableView) -> list[dict[str, Any]]:
    """Each version row with the task that committed it: from our appIds (with the run found in Airflow),
    else from the operators' ``delta_commit`` records."""
    pairs = {(r.task.dag_id, r.task.interval) for r in view.rows if r.task}
    runs = catalog.run_ids(pairs)
    records = catalog.tasks_by_version(uri)
    out = []
    for row in view.rows:
        tasks = []
        if row.task:
            run_id = runs.get((row.task.dag_id, row.task.interval))
            label = f"{row.task.dag_id} / {run_id or row.task.interval} / {row.task.task_id}"
            href = _ti_href(row.task.dag_id, run_id, row.task.task_id, row.task.map_index) if run_id else None
            tasks.append({"label": label, "href": href})
        else:
            for ref in records.get(row.version, []):
                if ref.operation and row.operation and not row.operation.startswith(ref.operation):
                    continue  # e.g. a checkpoint task's record of the version it checkpointed
                label = f"{ref.dag_id} / {ref.run_id} / {ref.task_id}"
                href = _ti_href(ref.dag_id, ref.run_id, ref.task_id, ref.map_index)
                tasks.append({"label": label, "href": href})
            if not tasks and row.app_id:
                tasks.append({"label": f"app {row.app_id} v{row.app_version}", "href": None})
        out.append({**vars(row), "tasks": tasks})
    return out


def _ti_href(dag_id: str, run_id: str, task_id: str, map_index: int) -> str:
    from airflow.api_fastapi.app import API_ROOT_PATH

    run = quote(run_id, safe="")
    base = f"{API_ROOT_PATH.rstrip('/')}/dags/{quote(dag_id)}/runs/{run}/tasks/{quote(task_id)}"
    return f"{base}/mapped/{map_index}" if map_index >= 0 else base


def _type_text(t: Any) -> str:
    return t if isinstance(t, str) else json.dumps(t, separators=(",", ":"))
