"""Hostile connections: no form of a secret reaches a page, a log, an exception, an XCom or the CLI.

Connections for GCS, S3 and Azure whose secrets have the shapes that leak (a token with a backslash and a
quote, a service-account key as JSON text and as an object, an S3 secret with ``/``, ``+``, ``=`` and a
space, a session token, a wrong Azure account key, a SAS token), on storage
that fails: GCS without a network for Google's OAuth endpoints (gcsfs asks them before any storage request,
and puts the token in the URL), an S3 endpoint nobody listens on, Azurite refusing a wrong key or SAS.

Searched, for every form a library may print a secret in (as given, percent-encoded with ``%20`` and
``+``, JSON-escaped, ``repr``, base64, and any 47 characters of a PEM key's line; the forms are listed here
with the standard library, not with the code under test): the Delta view's pages (over HTTP and as
Chromium renders them, from the real API server), the API server's log, the task logs a worker's
supervisor writes, the exceptions the tasks raised (as ``on_failure_callback`` sees them), the metadata DB
(XComs among them) and ``deltalog``'s output. What is not secret must stay readable there: endpoints,
buckets, the account name.

A service principal's client secret is registered like the others (the last test), but not tried end to
end: without a network azure.identity retries Microsoft Entra ID for 100 s per read.
"""

from __future__ import annotations

import base64
import datetime as dt
import json
import os
import subprocess
import sys
import urllib.parse
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from api_server import api_server, chromium, free_port, get
from task_logs import metadata_db_text, task_sdk_logging

SUFFIX = uuid.uuid4().hex[:10]
TOKEN = f'ya29.Sup3r\\S3cret"Tok{SUFFIX}'
S3_SECRET = f"s3cr3t/Key+With=Chars and {SUFFIX}"
S3_SESSION = f"FwoGZXIvYXdzE{SUFFIX}//+sessiontoken"
AZURE_WRONG_KEY = base64.b64encode(f"wrong-account-key-{SUFFIX}-0123456789abcdef".encode()).decode()
SAS = f"sv=2024-01-01&ss=b&srt=sco&sp=rl&se=2030-01-01&sig=Zm9v{SUFFIX}%2BYmFy%3D"
CLIENT_SECRET = f"cl1ent~secret.{SUFFIX}"
PEM_RUN = 47  # the longest run of a PEM key's line that may stay readable, minus one (docs/connections.md)
GCS_BUCKET = f"hostile-bucket-{SUFFIX[:6]}"


def service_account() -> dict[str, str]:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ).decode()
    return {
        "type": "service_account", "project_id": "hostile-project", "private_key_id": uuid.uuid4().hex * 2,
        "private_key": pem, "client_email": "loader@hostile-project.iam.gserviceaccount.com",
        "client_id": "1234567890", "token_uri": "https://oauth2.googleapis.com/token",
    }  # fmt: skip


KEY = service_account()
KEY_TEXT = json.dumps(KEY)


def forms(secret: str) -> set[str]:
    """How libraries print ``secret``, by the standard library's own functions."""
    found = set()
    for text in (secret, json.dumps(secret)[1:-1], repr(secret)[1:-1]):
        quote = urllib.parse.quote
        found |= {text, quote(text), quote(text, safe=""), urllib.parse.quote_plus(text)}
    found |= {base64.b64encode(secret.encode()).decode(), base64.urlsafe_b64encode(secret.encode()).decode()}
    return found


def pem_runs(pem: str) -> set[str]:
    """Every run of PEM_RUN characters of the key's lines, as given and percent-encoded."""
    runs = set()
    for line in pem.splitlines():
        if line.startswith("-----"):
            continue
        for i in range(max(len(line) - PEM_RUN, 0) + 1):
            run = line[i : i + PEM_RUN]
            runs |= {run, urllib.parse.quote(run, safe=""), urllib.parse.quote(run)}
    return runs


SECRET_FORMS = {
    **{form: "token" for form in forms(TOKEN)},
    **{form: "S3 secret" for form in forms(S3_SECRET)},
    **{form: "S3 session token" for form in forms(S3_SESSION)},
    **{form: "Azure key" for form in forms(AZURE_WRONG_KEY)},
    **{form: "SAS signature" for form in forms(SAS.split("sig=")[1])},
    **{form: "client secret" for form in forms(CLIENT_SECRET)},
    **{form: "key id" for form in forms(KEY["private_key_id"])},
    **{form: "key document" for form in forms(KEY_TEXT)},
    **{run: "private key" for run in pem_runs(KEY["private_key"])},
}


def assert_no_secret(texts: dict[str, str]) -> None:
    leaks = sorted({(where, what) for where, text in texts.items() for form, what in SECRET_FORMS.items()
                    if form in text})  # fmt: skip
    assert leaks == [], f"secrets leaked (where, which): {leaks}"


@dataclass
class Hostile:
    conn_id: str
    uri: str
    fields: dict
    heading: str  # what the table's page says
    readable: str  # something that is not secret and must stay readable in the page or the log


def _hostile(s3_endpoint: str, closed_endpoint: str, azure_endpoint: str, azure_bucket: str) -> list[Hostile]:
    azure_account = "devstoreaccount1"
    wrong = (f"DefaultEndpointsProtocol=http;AccountName={azure_account};AccountKey={AZURE_WRONG_KEY};"
             f"BlobEndpoint={azure_endpoint};")  # fmt: skip
    return [
        Hostile("hostile_gcs_token", f"gs://{GCS_BUCKET}/token", {"password": TOKEN},
                "Authentication failed", GCS_BUCKET),
        Hostile("hostile_gcs_key_text", f"gs://{GCS_BUCKET}/key-text", {"password": KEY_TEXT},
                "Authentication failed", "hostile-project"),
        Hostile("hostile_gcs_key_dict", f"gs://{GCS_BUCKET}/key-dict",
                {"extra": {"storage_options": {"keyfile_dict": KEY}}}, "Authentication failed", GCS_BUCKET),
        Hostile("hostile_s3_unreachable", "s3://hostile-s3/t",
                {"login": "AKIAHOSTILE", "password": S3_SECRET, "host": closed_endpoint,
                 "extra": {"storage_options": {"token": S3_SESSION, "region_name": "eu-west-1"}}},
                "Storage unreachable", closed_endpoint),
        Hostile("hostile_s3_no_bucket", f"s3://no-such-bucket-{SUFFIX}/t",
                {"login": "testing", "password": S3_SECRET, "host": s3_endpoint,
                 "extra": {"storage_options": {"token": S3_SESSION}}}, "No Delta table there", s3_endpoint),
        Hostile("hostile_azure_wrong_key", f"abfs://{azure_bucket}/t",
                {"extra": {"storage_options": {"connection_string": wrong}}}, "Access denied", azure_account),
        Hostile("hostile_azure_sas", f"abfs://{azure_bucket}/sas",
                {"login": azure_account, "host": azure_endpoint,
                 "extra": {"storage_options": {"sas_token": SAS}}},
                "Access denied", azure_account),
    ]  # fmt: skip


@dataclass
class Deployment:
    base: str
    token: str
    log: Path
    tables: list[Hostile]
    closed_endpoint: str
    s3_endpoint: str


def _connection_json(h: Hostile) -> dict:
    extra = dict(h.fields.get("extra", {}))
    extra["tables"] = h.uri
    return {**{k: v for k, v in h.fields.items() if k != "extra"}, "conn_type": "delta", "extra": extra}


@pytest.fixture(scope="module")
def deployment(airflow_db, s3_server, azure_emulator, gcs_emulator, tmp_path_factory) -> Iterator[Deployment]:
    """The hostile connections in the metadata DB (the view reads them there) and in the environment
    (tasks under dag.test read them there), and the API server. gcs_emulator is asked for only for the
    classic gcsfs class it registers (the default one spends a minute looking up each bucket's type)."""
    from airflow.models.connection import Connection
    from airflow.utils.session import create_session

    work = tmp_path_factory.mktemp("secrets")
    closed = f"http://127.0.0.1:{free_port()}"
    tables = _hostile(s3_server.endpoint_url, closed, azure_emulator.endpoint, azure_emulator.bucket)
    with pytest.MonkeyPatch.context() as mp:
        with create_session() as session:
            for h in tables:
                conn = _connection_json(h)
                session.add(Connection(conn_id=h.conn_id, conn_type="delta", login=conn.get("login"),
                                       password=conn.get("password"), host=conn.get("host"),
                                       extra=json.dumps(conn["extra"])))  # fmt: skip
                mp.setenv(f"AIRFLOW_CONN_{h.conn_id.upper()}", json.dumps(conn))
        # gcsfs's default class asks a gRPC API for each bucket's type first (a minute without network).
        env = {"GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT": "false"}
        with api_server(work, env) as server:
            yield Deployment(server.base, server.token, server.log, tables, closed, s3_server.endpoint_url)


def _page(uri: str) -> str:
    return "/delta/table?" + urllib.parse.urlencode({"uri": uri})


def test_pages_and_the_api_server_log_hold_no_secret(deployment):
    texts = {}
    with chromium(deployment.base, deployment.token) as browser:
        page = browser.new_page()
        page.goto(f"{deployment.base}/delta/")
        texts["index"] = page.content()
        for h in deployment.tables:
            status, body, _ = get(deployment.base, _page(h.uri), deployment.token)
            page.goto(deployment.base + _page(h.uri))
            shown = page.get_by_role("alert").inner_text()
            texts[f"{h.conn_id} (HTTP {status})"] = body
            texts[f"{h.conn_id} (Chromium)"] = page.content()
            assert h.heading in shown, (h.conn_id, shown)
            assert h.uri in shown and "Traceback" not in body
    log = deployment.log.read_text(errors="replace")
    texts["API server log"] = log
    assert_no_secret(texts)
    # Not secret, so readable: the endpoint nobody answered, the S3 server's endpoint, the account name.
    assert deployment.closed_endpoint in log
    assert "devstoreaccount1" in log and GCS_BUCKET in log


def test_task_logs_exceptions_and_xcoms_hold_no_secret(deployment, dag_file, capfd, caplog, tmp_path):
    failures = tmp_path / "failures.jsonl"
    tasks = "\n            ".join(  # one per line, indented under the DAG's with-block after dedent
        f"DeltaCheckpointOperator(task_id={h.conn_id!r}, table_uri={h.uri!r}, delta_conn_id={h.conn_id!r})"
        for h in deployment.tables
    )
    module = dag_file(
        "delta_hostile",
        f"""
        import datetime as dt, json
        from airflow.sdk import DAG
        from airflow_provider_delta.operators.maintenance import DeltaCheckpointOperator

        def record(context):
            with open({str(failures)!r}, "a") as out:
                error = context["exception"]
                out.write(json.dumps({{"task": context["ti"].task_id, "type": type(error).__name__,
                                       "message": str(error), "repr": repr(error)}}) + "\\n")

        with DAG("delta_hostile", schedule=None, start_date=dt.datetime(2024, 1, 1),
                 default_args={{"on_failure_callback": record, "retries": 0}}) as dag:
            {tasks}
        """,
    )
    logs = Path(os.environ["AIRFLOW_HOME"], "logs")
    log_file = logs / "delta_hostile" / "dag_test.log"
    with task_sdk_logging(log_file):
        run = module.dag.test(logical_date=dt.datetime(2024, 1, 2, tzinfo=dt.UTC))
    states = {ti.task_id: ti.state for ti in run.get_task_instances()}
    assert states == {h.conn_id: "failed" for h in deployment.tables}
    raised = [json.loads(line) for line in failures.read_text().splitlines()]
    assert sorted(r["task"] for r in raised) == sorted(states)

    out, err = capfd.readouterr()
    texts = {"stdout": out, "stderr": err, "caplog": caplog.text, "raised": failures.read_text()}
    texts.update({str(p): p.read_text(errors="replace") for p in logs.rglob("*") if p.is_file()})
    texts["metadata DB"] = metadata_db_text()
    assert_no_secret(texts)
    task_log = texts[str(log_file)]
    assert deployment.closed_endpoint in task_log  # the endpoint that failed is named
    assert "Task failed with exception" in task_log


def test_deltalog_output_holds_no_secret(deployment, tmp_path):
    deltalog = str(Path(sys.executable).with_name("deltalog"))
    env = {**os.environ, "GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT": "false"}
    calls = {
        "token": ["snapshot", f"gs://{GCS_BUCKET}/t", "-o", f"token={TOKEN}"],
        "key": ["history", f"gs://{GCS_BUCKET}/t", "-o", f"token={KEY_TEXT}", "--debug"],
        "s3": ["snapshot", "s3://hostile-s3/t", "-o", f"secret={S3_SECRET}", "-o", "key=AKIAHOSTILE",
               "-o", f"token={S3_SESSION}", "-o", f"endpoint_url={deployment.closed_endpoint}"],
        "azure": ["snapshot", deployment.tables[5].uri, "-o",
                  f"connection_string={deployment.tables[5].fields['extra']['storage_options']['connection_string']}"],
        "mistyped": ["snapshot", "s3://hostile-s3/t", "--storage-optoin", f"secret={S3_SECRET}"],
    }  # fmt: skip
    texts = {}
    for name, args in calls.items():
        done = subprocess.run([deltalog, *args], capture_output=True, text=True, env=env, timeout=300)
        assert done.returncode in (1, 2), (name, done.stderr[-500:])
        texts[name] = done.stdout + done.stderr
    assert_no_secret(texts)
    assert deployment.closed_endpoint in texts["s3"]  # the endpoint that failed stays readable
    assert "Server failed to authenticate" in texts["azure"]  # the storage's reason stays readable


def test_every_secret_of_a_connection_is_registered_and_nothing_else(monkeypatch):
    from airflow.sdk.log import redact

    from airflow_provider_delta.hooks.delta import DeltaHook

    principal = {"tenant_id": "00000000-0000-0000-0000-000000000001", "client_id": "app-id",
                 "client_secret": CLIENT_SECRET, "account_url": "http://127.0.0.1:10000/devstoreaccount1"}
    conn = {"conn_type": "delta", "login": "devstoreaccount1", "password": KEY_TEXT,
            "extra": {"storage_options": principal, "tables": "abfs://container/t"}}  # fmt: skip
    monkeypatch.setenv("AIRFLOW_CONN_DELTA_PRINCIPAL", json.dumps(conn))
    secrets = DeltaHook("delta_principal").secrets()
    assert CLIENT_SECRET in secrets and KEY_TEXT in secrets
    assert not any(value in secrets for value in ("devstoreaccount1", "app-id", principal["account_url"]))
    # Registered with Airflow's own masker: its redact() hides every form, and leaves the rest.
    text = " ".join([*forms(CLIENT_SECRET), *pem_runs(KEY["private_key"]), principal["account_url"]])
    masked = redact(text)
    assert_no_secret({"redact()": masked})
    assert principal["account_url"] in masked

