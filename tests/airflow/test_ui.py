"""The Delta view in a real browser: the example DAGs run, Airflow's API server serves the plugin on
127.0.0.1, and headless Chromium (Debian's package, installed by ``make tools``) looks at what a person sees.

One deployment per module: the ingest DAG loads three days (and re-runs one), the maintenance DAG runs;
then three tables that go wrong are named in ``delta`` connections kept in the metadata DB: one that does
not exist, one with a corrupt commit, and one in Azurite read with a wrong account key. The server uses the
simple auth manager with a real user (not "all admins", which would let anonymous callers in), and the
browser carries that user's ``_token`` cookie, as after a login.

The screenshot goes to the test's tmp path (printed), and with DELTA_UPDATE_SCREENSHOTS=1 also to
docs/images/delta-view.png, the picture docs/ui.md shows.
"""

from __future__ import annotations

import datetime as dt
import importlib.util
import json
import os
import shutil
import subprocess
import urllib.parse
import uuid
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

import pytest
from api_server import USER, api_server, chromium, free_port, get, stop, wait_http

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "dags_examples"
AZURITE = ROOT / ".tools" / "node_modules" / ".bin" / "azurite-blob"
AZURITE_ACCOUNT = "devstoreaccount1"
AZURITE_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
WRONG_KEY = "V3JvbmdLZXlXcm9uZ0tleVdyb25nS2V5V3JvbmdLZXlXcm9uZ0tleQ=="
DAYS = [dt.datetime(2024, 1, d, tzinfo=dt.UTC) for d in (1, 2, 3)]


@dataclass
class Deployment:
    base: str
    token: str
    log: Path
    events: str  # the example table's URI as the view names it
    missing: str
    corrupt: str
    denied: str
    commit_run_id: str  # the ingest run (a re-run) whose commit task found its day in version 2
    password: str  # the user's, for logging in through the login page


def _load(dags_folder: Path, name: str):
    spec = importlib.util.spec_from_file_location(f"ui_{name}_{uuid.uuid4().hex}", dags_folder / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _add_connection(conn_id: str, **fields) -> None:
    from airflow.models.connection import Connection
    from airflow.utils.session import create_session

    with create_session() as session:
        session.add(Connection(conn_id=conn_id, conn_type="delta", **fields))


def _azurite_table(workdir: Path) -> tuple[subprocess.Popen, str, str]:
    """Azurite with one Delta table; returns (process, table URI, the right connection string's endpoint)."""
    if not AZURITE.exists():
        pytest.fail(f"Azurite is not installed ({AZURITE}); `make tools` installs it", pytrace=False)
    port = free_port()
    log = workdir / "azurite.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [str(AZURITE), "--blobHost", "127.0.0.1", "--blobPort", str(port), "--skipApiVersionCheck",
             "--disableProductStyleUrl", "--silent", "--inMemoryPersistence"],
            stdout=out, stderr=subprocess.STDOUT, cwd=workdir,
        )  # fmt: skip
    endpoint = f"http://127.0.0.1:{port}/{AZURITE_ACCOUNT}"
    wait_http(endpoint, proc, log, "Azurite")
    import fsspec

    from airflow_provider_delta.log import DeltaTable

    good = (f"DefaultEndpointsProtocol=http;AccountName={AZURITE_ACCOUNT};AccountKey={AZURITE_KEY};"
            f"BlobEndpoint={endpoint};")  # fmt: skip
    fsspec.filesystem("abfs", connection_string=good, skip_instance_cache=True).mkdir("delta-ui")
    uri = "abfs://delta-ui/locked"
    schema = {"type": "struct", "fields": [{"name": "id", "type": "long", "nullable": True, "metadata": {}}]}
    DeltaTable.create(uri, schema, storage_options={"connection_string": good})
    return proc, uri, endpoint


@pytest.fixture(scope="module")
def deployment(airflow_db: Path, tmp_path_factory) -> Iterator[Deployment]:
    work = tmp_path_factory.mktemp("ui")
    dags_folder = Path(os.environ["AIRFLOW__CORE__DAGS_FOLDER"])
    copies = [Path(shutil.copy(p, dags_folder / p.name)) for p in sorted(EXAMPLES.glob("delta_*.py"))]
    azurite = None
    stack = ExitStack()
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("DELTA_EXAMPLE_ROOT", str(work / "tables"))
        mp.delenv("DELTA_EXAMPLE_CONN_ID", raising=False)
        try:
            ingest, maintenance = _load(dags_folder, "delta_ingest"), _load(dags_folder, "delta_maintenance")
            runs = [ingest.dag.test(logical_date=day) for day in DAYS]
            # A re-run of a loaded day (dag.test replaces the day's run): commits nothing, and its link
            # opens the version that holds the day.
            runs.append(ingest.dag.test(logical_date=DAYS[1]))
            runs.append(maintenance.dag.test(logical_date=DAYS[-1]))
            assert [r.state for r in runs] == ["success"] * 5

            import deltalake
            import pyarrow as pa

            corrupt = work / "corrupt"
            deltalake.write_deltalake(str(corrupt), pa.table({"id": [1]}))
            deltalake.write_deltalake(str(corrupt), pa.table({"id": [2]}), mode="append")
            (corrupt / "_delta_log" / f"{1:020d}.json").write_text('{"commitInfo":{}}\n{"add": {"path": \n')
            missing = work / "never-created"
            _add_connection("delta_local", extra=json.dumps({"tables": f"{missing}, {corrupt}"}))
            azurite, locked, endpoint = _azurite_table(work)
            wrong = (f"DefaultEndpointsProtocol=http;AccountName={AZURITE_ACCOUNT};AccountKey={WRONG_KEY};"
                     f"BlobEndpoint={endpoint};")  # fmt: skip
            extra = {"storage_options": {"connection_string": wrong}, "tables": locked}
            _add_connection("delta_azure_wrong_key", extra=json.dumps(extra))

            server = stack.enter_context(api_server(work))
            yield Deployment(
                server.base, server.token, server.log, f"file://{work}/tables/events", str(missing),
                str(corrupt), locked, runs[3].run_id, server.password,
            )  # fmt: skip
        finally:
            stack.close()
            if azurite is not None:
                stop(azurite)
            for path in copies:
                path.unlink(missing_ok=True)


def _get(d: Deployment, path: str, token: bool = True) -> tuple[int, str, str]:
    """(status, body, Location) without following redirects."""
    return get(d.base, path, d.token if token else None)


def _page(d: Deployment, uri: str, version: int | None = None) -> str:
    query = {"uri": uri} if version is None else {"uri": uri, "version": version}
    return "/delta/table?" + urllib.parse.urlencode(query)


def test_the_view_needs_an_airflow_session(deployment):
    status, _, location = _get(deployment, "/delta/", token=False)
    assert status == 307 and location.startswith("/auth/login?next=")
    status, body, _ = _get(deployment, "/delta/")
    assert status == 200 and deployment.events in body


@pytest.fixture(scope="module")
def browser(deployment) -> Iterator:
    with chromium(deployment.base, deployment.token) as context:
        yield context


def test_a_person_follows_the_task_link_to_the_table_at_its_version(deployment, browser, tmp_path):
    page = browser.new_page()
    run = urllib.parse.quote(deployment.commit_run_id, safe="")
    page.goto(f"{deployment.base}/dags/delta_ingest/runs/{run}/tasks/commit/details")
    link = page.get_by_role("link", name="Delta table")
    try:
        link.wait_for(timeout=60_000)
    except Exception:
        page.screenshot(path=str(tmp_path / "task-instance.png"))
        shot = tmp_path / "task-instance.png"
        raise AssertionError(f"no 'Delta table' link on {page.url}; see {shot}") from None
    # Relative: the tasks ran without [api] base_url (the server has it); the UI opens it on its own origin.
    assert link.get_attribute("href") == _page(deployment, deployment.events, 2)
    link.click()
    page.wait_for_url("**/delta/table?**")

    versions = page.locator("#versions tr[data-version]")
    assert versions.count() == 6  # create, three days, VACUUM START and END
    shown = versions.evaluate_all("rows => rows.map(r => Number(r.dataset.version))")
    assert shown == [5, 4, 3, 2, 1, 0]
    selected = page.locator("#versions tr.selected")
    assert selected.get_attribute("data-version") == "2"
    assert "WRITE" in selected.inner_text() and "delta_ingest" in selected.inner_text()
    assert deployment.commit_run_id in selected.inner_text() and "commit" in selected.inner_text()
    assert "+1" in selected.locator("td").nth(4).inner_text()  # one file added
    assert page.locator("#versions tr[data-version='0']").inner_text().count("CREATE TABLE") == 1
    plot = page.locator("svg.plot")
    assert plot.is_visible()
    assert plot.locator("circle.dot").count() == 12  # six versions, two panels
    assert plot.locator("circle.selected").count() == 2
    assert page.locator("#latest-version").inner_text() == "5"
    assert "1 commit(s) since" not in page.locator("#maintenance").inner_text()
    assert "since the last checkpoint, at version 3" in page.locator("#maintenance").inner_text()
    assert "would be deleted now" in page.locator("#maintenance").inner_text()
    assert "event_id" in page.locator("#schema").inner_text()
    assert "minWriterVersion" in page.locator("#protocol").inner_text()

    shot = tmp_path / "delta-view.png"
    page.screenshot(path=str(shot), full_page=True)
    print(f"screenshot for review: {shot}")
    if os.environ.get("DELTA_UPDATE_SCREENSHOTS") == "1":  # refresh the picture docs/ui.md shows
        images = ROOT / "docs" / "images"
        images.mkdir(exist_ok=True)
        shutil.copy(shot, images / "delta-view.png")


def test_the_tables_list_links_every_known_table(deployment, browser):
    page = browser.new_page()
    page.goto(f"{deployment.base}/delta/")
    text = page.locator("#tables").inner_text()
    for uri in (deployment.events, deployment.missing, deployment.corrupt, deployment.denied):
        assert uri.replace("file://", "") in text
    assert "delta_azure_wrong_key" in text and "delta_local" in text


@pytest.mark.parametrize(
    ("table", "status", "heading", "detail"),
    [
        ("missing", 404, "No Delta table there", "has no commits"),
        ("corrupt", 500, "Corrupt Delta log", "00000000000000000001.json"),
        ("denied", 403, "Access denied", "delta_azure_wrong_key"),
        ("unknown", 404, "Unknown table", "is not a Delta table this deployment knows"),
    ],
)
def test_bad_tables_get_a_clear_page_without_trace_or_secret(deployment, browser, table, status, heading,
                                                              detail):  # fmt: skip
    uri = "/tmp/not-a-table-anyone-named" if table == "unknown" else getattr(deployment, table)
    code, body, _ = _get(deployment, _page(deployment, uri))
    assert code == status
    page = browser.new_page()
    page.goto(deployment.base + _page(deployment, uri))
    alert = page.get_by_role("alert")
    assert heading in alert.inner_text() and detail in alert.inner_text()
    for text in (body, page.content(), deployment.log.read_text(errors="replace")):
        assert "Traceback" not in text
        assert WRONG_KEY not in text and AZURITE_KEY not in text


def test_a_bad_version_is_a_clear_400(deployment):
    code, body, _ = _get(deployment, _page(deployment, deployment.events) + "&version=abc")
    assert code == 400 and "whole number" in body


def test_logging_in_from_a_deep_link_lands_on_the_page_asked_for(deployment, browser, tmp_path):
    deep = _page(deployment, deployment.events, 2)
    status, _, location = _get(deployment, deep, token=False)
    assert status == 307
    assert urllib.parse.parse_qs(urllib.parse.urlsplit(location).query)["next"] == [deep]
    context = browser.browser.new_context()  # no session cookie: a person who has not logged in yet
    try:
        page = context.new_page()
        page.goto(deployment.base + deep)
        page.wait_for_url("**/auth/login**")
        try:
            page.locator("input[name='username']").fill(USER)
            page.locator("input[name='password']").fill(deployment.password)
            page.locator("button[type='submit']").click()
            page.wait_for_url("**/delta/table?**", timeout=60_000)
        except Exception:
            page.screenshot(path=str(tmp_path / "login.png"))
            raise AssertionError(f"login did not return to {deep}: at {page.url}; see {tmp_path}") from None
        landed = urllib.parse.urlsplit(page.url)
        assert f"{landed.path}?{landed.query}" == deep
        assert page.locator("#latest-version").inner_text() == "5"
        assert page.locator("#versions tr.selected").get_attribute("data-version") == "2"
    finally:
        context.close()


def test_the_ui_shows_the_view_under_plugin_delta(deployment, browser):
    """Where docs/ui.md says a person finds it: Browse › Delta tables opens /plugin/delta, Airflow's frame
    around the page the API server serves at /delta/."""
    page = browser.new_page()
    page.goto(f"{deployment.base}/plugin/delta")
    frame = page.frame_locator("iframe")
    assert deployment.events.replace("file://", "") in frame.locator("#tables").inner_text(timeout=60_000)
    inner = [f.url for f in page.frames if f is not page.main_frame]
    assert inner == [f"{deployment.base}/delta/"], inner
