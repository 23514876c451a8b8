"""Every storage option docs/connections.md names, tried on moto's S3 server, fake-gcs-server and Azurite.

The docs' three tables are the list: a key documented but not taken by the hook, or taken but not
documented, fails; so does a key without a case here. Each case builds a ``delta`` connection with the key,
checks where the hook put it (the filesystem's own key), then creates a table, writes rows and reads them
back through the hook, so that s3fs, gcsfs or adlfs really took it. The connection commands the docs show
(``airflow connections add ...``) run with Airflow's CLI, placeholders filled for the emulators.

Two things cannot run here, and say so where they are used: Google's OAuth token endpoint (a service-account
key's token comes from a small token server on 127.0.0.1 that answers the JWT grant; fake-gcs-server
accepts any bearer token), and Microsoft Entra ID (a service principal is tried as far as the request its
sign-in makes).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import threading
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from airflow_provider_delta.hooks.delta import DeltaHook
from airflow_provider_delta.hooks.storage_options import SCHEMES, StorageOptionError

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs" / "connections.md"
ROWS = pa.table({"id": pa.array([1, 2, 3], pa.int64()), "name": ["a", "b", "c"]})


def documented(scheme: str) -> list[str]:
    """The keys in the docs' table of storage options for ``scheme``."""
    text = DOCS.read_text()
    match = re.search(rf"### Storage options for `{scheme}://`.*?\n\n(\|.*?)\n\n", text, re.S)
    assert match, f"{DOCS}: no table of storage options for {scheme}://"
    rows = match.group(1).splitlines()[2:]
    return [re.match(r"\| `([^`]+)` \|", row).group(1) for row in rows]


@pytest.mark.parametrize("scheme", ["s3", "gs", "abfs"])
def test_the_docs_list_exactly_the_keys_the_hook_takes(scheme):
    spec = SCHEMES[scheme]
    assert sorted(documented(scheme)) == sorted(spec.native | set(spec.aliases))


@dataclass
class Case:
    """A connection with one storage option, and where the filesystem must get it."""

    options: dict[str, Any]
    expect: tuple[tuple[str, ...], Any]  # (path in the filesystem's options, value)
    fields: dict[str, Any] = field(default_factory=dict)  # the connection's own fields, beside the base's
    drop: tuple[str, ...] = ()  # base fields the option replaces


def _set_connection(mp: pytest.MonkeyPatch, conn_id: str, **conn: Any) -> None:
    mp.setenv(f"AIRFLOW_CONN_{conn_id.upper()}", json.dumps(conn))


def _dig(options: dict[str, Any], path: tuple[str, ...]) -> Any:
    for name in path:
        options = options[name]
    return options


def _round_trip(conn_id: str, uri: str, create_options: dict[str, Any] | None = None) -> None:
    """Create a table through the hook (or with ``create_options``), append, read back through the hook."""
    from airflow_provider_delta.log import DeltaTable

    hook = DeltaHook(conn_id)
    DeltaTable.create(uri, ROWS.schema, storage_options=create_options or hook.storage_options(uri))
    if create_options is None:
        assert hook.write_rows(uri, ROWS).version == 1
    back = hook.read_rows(uri)
    expected = 3 if create_options is None else 0
    assert back.num_rows == expected and back.schema.names == ["id", "name"]


def _try(mp: pytest.MonkeyPatch, scheme: str, key: str, case: Case, base: dict[str, Any], uri: str) -> None:
    conn = {k: v for k, v in base.items() if k not in case.drop}
    extra = dict(conn.pop("extra", {}).get("storage_options", {}))
    for name in case.drop:
        extra.pop(name, None)
    extra.update(case.options)
    conn = {**conn, **case.fields, "conn_type": "delta", "extra": {"storage_options": extra}}
    conn_id = f"delta_{scheme}_{key}".replace("-", "_")
    _set_connection(mp, conn_id, **conn)
    options = DeltaHook(conn_id).storage_options(uri)
    path, value = case.expect
    assert _dig(options, path) == value, (key, options.keys())
    _round_trip(conn_id, uri)


# -- s3:// on moto -------------------------------------------------------------------------------------------
def _s3_cases(endpoint: str, profile: str) -> dict[str, Case]:
    region = ("client_kwargs", "region_name")
    return {
        "key": Case({"key": "testing"}, (("key",), "testing"), drop=("login",)),
        "secret": Case({"secret": "testing"}, (("secret",), "testing"), drop=("password",)),
        "token": Case({"token": "a-session-token"}, (("token",), "a-session-token")),
        "anon": Case({"anon": True}, (("anon",), True), drop=("login", "password")),
        "endpoint_url": Case({"endpoint_url": endpoint}, (("endpoint_url",), endpoint), drop=("host",)),
        "client_kwargs": Case({"client_kwargs": {"region_name": "us-east-1"}}, (region, "us-east-1")),
        "config_kwargs": Case({"config_kwargs": {"retries": {"max_attempts": 2}}},
                              (("config_kwargs", "retries", "max_attempts"), 2)),  # fmt: skip
        "use_ssl": Case({"use_ssl": False}, (("use_ssl",), False)),
        "requester_pays": Case({"requester_pays": True}, (("requester_pays",), True)),
        "s3_additional_kwargs": Case(
            {"s3_additional_kwargs": {"ServerSideEncryption": "AES256"}},
            (("s3_additional_kwargs", "ServerSideEncryption"), "AES256"),
        ),
        "profile": Case({"profile": profile}, (("profile",), profile), drop=("login", "password")),
        "version_aware": Case({"version_aware": True}, (("version_aware",), True)),
        "cache_regions": Case({"cache_regions": True}, (("cache_regions",), True)),
        "region_name": Case({"region_name": "us-east-1"}, (region, "us-east-1")),
        "region": Case({"region": "us-east-1"}, (region, "us-east-1")),
        "verify": Case({"verify": False}, (("client_kwargs", "verify"), False)),
        "aws_access_key_id": Case({"aws_access_key_id": "testing"}, (("key",), "testing"), drop=("login",)),
        "aws_secret_access_key": Case({"aws_secret_access_key": "testing"}, (("secret",), "testing"),
                                      drop=("password",)),  # fmt: skip
        "aws_session_token": Case({"aws_session_token": "a-session-token"}, (("token",), "a-session-token")),
        "profile_name": Case({"profile_name": profile}, (("profile",), profile), drop=("login", "password")),
        "aws_endpoint_url": Case({"aws_endpoint_url": endpoint}, (("endpoint_url",), endpoint),
                                 drop=("host",)),  # fmt: skip
        "host": Case({"host": endpoint}, (("endpoint_url",), endpoint), drop=("host",)),
    }


@pytest.fixture
def aws_profile(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A profile in a shared credentials file of the test's own (the session points AWS at /dev/null)."""
    credentials = tmp_path / "credentials"
    credentials.write_text("[delta-test]\naws_access_key_id = testing\naws_secret_access_key = testing\n")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(credentials))
    return "delta-test"


@pytest.mark.s3
@pytest.mark.parametrize("key", documented("s3"))
def test_every_documented_s3_option_works_on_moto(key, s3_server, s3_bucket, aws_profile, monkeypatch):
    cases = _s3_cases(s3_server.endpoint_url, aws_profile)
    assert set(cases) == set(documented("s3"))
    if key == "anon":  # unsigned requests need a bucket anyone may write (moto enforces the bucket's ACL)
        s3_server.client().put_bucket_acl(Bucket=s3_bucket, ACL="public-read-write")
    base = {"login": "testing", "password": "testing", "host": s3_server.endpoint_url}
    _try(monkeypatch, "s3", key, cases[key], base, f"s3://{s3_bucket}/t-{key}")


# -- gs:// on fake-gcs-server --------------------------------------------------------------------------------
class _TokenEndpoint(BaseHTTPRequestHandler):
    """Google's OAuth token endpoint, which cannot be reached here: answers a service account's JWT grant
    with a bearer token (fake-gcs-server takes any). It counts the grants it answered."""

    grants = 0

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        body = self.rfile.read(int(self.headers.get("Content-Length", 0))).decode()
        ok = "grant_type=urn%3Aietf%3Aparams%3Aoauth%3Agrant-type%3Ajwt-bearer" in body
        _TokenEndpoint.grants += ok
        payload = {"access_token": "local-token", "expires_in": 3600, "token_type": "Bearer"}
        data = json.dumps(payload if ok else {"error": "unsupported_grant_type"}).encode()
        self.send_response(200 if ok else 400)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture(scope="module")
def token_endpoint() -> Iterator[str]:
    server = HTTPServer(("127.0.0.1", 0), _TokenEndpoint)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}/token"
    server.shutdown()
    server.server_close()


def service_account_key(token_uri: str) -> dict[str, str]:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ).decode()
    return {
        "type": "service_account", "project_id": "test-project", "private_key_id": uuid.uuid4().hex,
        "private_key": pem, "client_email": "loader@test-project.iam.gserviceaccount.com",
        "client_id": "1234567890", "token_uri": token_uri,
    }  # fmt: skip


def _gcs_cases(key_file: str, key: dict[str, str]) -> dict[str, Case]:
    token = ("token",)
    scope = "https://www.googleapis.com/auth/devstorage.read_write"
    return {
        "token": Case({"token": "anon"}, (token, "anon")),
        "project": Case({"project": "test-project"}, (("project",), "test-project")),
        "endpoint_url": Case({}, (("endpoint_url",), None)),  # the base's: checked in the test
        "access": Case({"access": "read_write"}, (("access",), "read_write")),
        "requester_pays": Case({"requester_pays": False}, (("requester_pays",), False)),
        "consistency": Case({"consistency": "size"}, (("consistency",), "size")),
        "default_location": Case({"default_location": "US"}, (("default_location",), "US")),
        "version_aware": Case({"version_aware": True}, (("version_aware",), True)),
        "project_id": Case({"project_id": "test-project"}, (("project",), "test-project"), drop=("project",)),
        "key_path": Case({"key_path": key_file}, (token, key_file), drop=("token",)),
        "keyfile_path": Case({"keyfile_path": key_file}, (token, key_file), drop=("token",)),
        "keyfile_dict": Case({"keyfile_dict": json.dumps(key)}, (token, key), drop=("token",)),
        "scope": Case({"scope": scope}, (("access",), "read_write")),
    }


@pytest.mark.parametrize("key", documented("gs"))
def test_every_documented_gcs_option_works_on_fake_gcs_server(key, gcs_emulator, token_endpoint, tmp_path,
                                                              monkeypatch):  # fmt: skip
    service_account = service_account_key(token_endpoint)
    key_file = tmp_path / "key.json"
    key_file.write_text(json.dumps(service_account))
    cases = _gcs_cases(str(key_file), service_account)
    assert set(cases) == set(documented("gs"))
    case = cases[key]
    if key == "endpoint_url":
        case.expect = (("endpoint_url",), gcs_emulator.endpoint)
    base = {"extra": {"storage_options": dict(gcs_emulator.storage_options)}}
    grants = _TokenEndpoint.grants
    _try(monkeypatch, "gs", key, case, base, gcs_emulator.uri(f"t-{key}-{uuid.uuid4().hex[:6]}"))
    if key in ("key_path", "keyfile_path", "keyfile_dict"):
        assert _TokenEndpoint.grants > grants  # the key signed a grant: the credentials were used


def test_a_service_account_key_as_the_password_is_read_as_a_key_document(gcs_emulator, token_endpoint,
                                                                          monkeypatch):  # fmt: skip
    key = service_account_key(token_endpoint)
    options = {k: v for k, v in gcs_emulator.storage_options.items() if k != "token"}
    _set_connection(monkeypatch, "delta_gcs_key", conn_type="delta", password=json.dumps(key),
                    extra={"storage_options": options})  # fmt: skip
    assert DeltaHook("delta_gcs_key").storage_options(gcs_emulator.uri("x"))["token"] == key
    _round_trip("delta_gcs_key", gcs_emulator.uri(f"pw-{uuid.uuid4().hex[:6]}"))


# -- abfs:// on Azurite --------------------------------------------------------------------------------------
def _sas(emulator) -> str:
    from datetime import UTC, datetime, timedelta

    from azure.storage.blob import AccountSasPermissions, ResourceTypes, generate_account_sas
    from emulators import AZURITE_ACCOUNT, AZURITE_KEY

    return generate_account_sas(
        AZURITE_ACCOUNT, AZURITE_KEY, ResourceTypes(service=True, container=True, object=True),
        AccountSasPermissions(read=True, write=True, delete=True, list=True, add=True, create=True),
        expiry=datetime.now(UTC) + timedelta(hours=1),
    )  # fmt: skip


def _azure_cases(emulator, sas: str) -> dict[str, Case]:
    from emulators import AZURITE_ACCOUNT, AZURITE_KEY

    def connection_string(secret: str) -> Callable[[str], bool]:
        return lambda text: secret in text and f"BlobEndpoint={emulator.endpoint};" in text

    key_string = connection_string(f"AccountKey={AZURITE_KEY}")
    return {
        "connection_string": Case(dict(emulator.storage_options), (("connection_string",),
                                  emulator.storage_options["connection_string"])),  # fmt: skip
        "account_name": Case({"account_name": AZURITE_ACCOUNT}, (("connection_string",), key_string),
                             fields={"password": AZURITE_KEY, "host": emulator.endpoint}),  # fmt: skip
        "account_key": Case({"account_key": AZURITE_KEY}, (("connection_string",), key_string),
                            fields={"login": AZURITE_ACCOUNT, "host": emulator.endpoint}),  # fmt: skip
        "shared_access_key": Case({"shared_access_key": AZURITE_KEY}, (("connection_string",), key_string),
                                  fields={"login": AZURITE_ACCOUNT, "host": emulator.endpoint}),  # fmt: skip
        "sas_token": Case({"sas_token": sas}, (("connection_string",), connection_string(sas)),
                          fields={"login": AZURITE_ACCOUNT, "host": emulator.endpoint}),  # fmt: skip
        "account_url": Case({"account_url": emulator.endpoint}, (("connection_string",), key_string),
                            fields={"login": AZURITE_ACCOUNT, "password": AZURITE_KEY}),  # fmt: skip
        "blob_endpoint": Case({"blob_endpoint": emulator.endpoint}, (("connection_string",), key_string),
                              fields={"login": AZURITE_ACCOUNT, "password": AZURITE_KEY}),  # fmt: skip
        "host": Case({"host": emulator.endpoint}, (("connection_string",), key_string),
                     fields={"login": AZURITE_ACCOUNT, "password": AZURITE_KEY}),  # fmt: skip
    }


@pytest.mark.parametrize("key", [k for k in documented("abfs") if k not in ("anon", "tenant_id", "client_id",
                                                                             "client_secret")])  # fmt: skip
def test_every_documented_azure_option_works_on_azurite(key, azure_emulator, monkeypatch):
    cases = _azure_cases(azure_emulator, _sas(azure_emulator))
    # anon and the service principal have tests of their own, below.
    assert set(cases) | {"anon", "tenant_id", "client_id", "client_secret"} == set(documented("abfs"))
    case = cases[key]
    conn_id = f"delta_abfs_{key}"
    _set_connection(monkeypatch, conn_id, conn_type="delta", **case.fields,
                    extra={"storage_options": case.options})  # fmt: skip
    uri = azure_emulator.uri(f"t-{key}-{uuid.uuid4().hex[:6]}")
    options = DeltaHook(conn_id).storage_options(uri)
    path, expected = case.expect
    value = _dig(options, path)
    assert expected(value) if callable(expected) else value == expected
    _round_trip(conn_id, uri)


def test_azure_anonymous_reads_of_a_public_container(azure_emulator, monkeypatch):
    from azure.storage.blob import BlobServiceClient

    service = BlobServiceClient.from_connection_string(azure_emulator.storage_options["connection_string"])
    container = f"public-{uuid.uuid4().hex[:8]}"
    service.create_container(container, public_access="container")
    uri = f"abfs://{container}/t"
    options = {"anon": True, "account_url": azure_emulator.endpoint}
    _set_connection(monkeypatch, "delta_abfs_anon", conn_type="delta", login="devstoreaccount1",
                    extra={"storage_options": options})  # fmt: skip
    options = DeltaHook("delta_abfs_anon").storage_options(uri)
    assert options["anon"] is True and "AccountKey" not in options["connection_string"]
    _round_trip("delta_abfs_anon", uri, create_options=dict(azure_emulator.storage_options))


def test_an_azure_service_principal_reaches_adlfs(azure_emulator, monkeypatch):
    """Microsoft Entra ID cannot run here: the service principal's keys reach adlfs (no TypeError, no
    refusal), and the read fails in the Azure SDK's sign-in, which no emulator answers."""
    from emulators import AZURITE_ACCOUNT

    principal = {"tenant_id": "00000000-0000-0000-0000-000000000001", "client_id": "app-id",
                 "client_secret": "principal-secret-value"}  # fmt: skip
    _set_connection(monkeypatch, "delta_abfs_sp", conn_type="delta", login=AZURITE_ACCOUNT,
                    extra={"storage_options": principal})  # fmt: skip
    hook = DeltaHook("delta_abfs_sp")
    options = hook.storage_options(azure_emulator.uri("sp"))
    assert {k: options[k] for k in principal} == principal
    assert set(documented("abfs")) >= set(principal) | {"anon"}
    table = hook.get_table(azure_emulator.uri("sp"))
    assert {k: table.store.fs.storage_options[k] for k in principal} == principal


def test_keys_of_another_connection_kind_are_refused_with_where_they_belong(monkeypatch):
    options = {"role_arn": "arn:aws:iam::1:role/x", "sas_token": "x"}
    _set_connection(monkeypatch, "delta_role", conn_type="delta", extra={"storage_options": options})
    with pytest.raises(StorageOptionError) as err:
        DeltaHook("delta_role").get_table("s3://bucket/t")
    message = str(err.value)
    assert "'role_arn': assuming a role (role_arn) is done by Airflow's Amazon provider" in message
    assert "'sas_token' is an option of abfs:// tables, not of s3://" in message
    assert "arn:aws:iam" not in message  # names keys, never values


# -- the commands the docs show ------------------------------------------------------------------------------
def _doc_commands() -> list[list[str]]:
    """Every ``airflow connections add delta_...`` command in the quickstart and the connections guide."""
    commands = []
    for doc in ("quickstart.md", "connections.md"):
        text = (ROOT / "docs" / doc).read_text()
        for block in re.findall(r"```sh\n(.*?)```", text, re.S):
            for command in re.findall(r"airflow connections add delta_.*?(?:\n(?!  )|\Z)", block, re.S):
                commands.append(shlex.split(command.replace("\\\n", " ")))
    return commands


def test_the_connection_commands_in_the_docs_work_on_the_emulators(
    airflow_db, s3_server, s3_bucket, gcs_emulator, azure_emulator, token_endpoint, tmp_path, monkeypatch
):
    """Each command runs with Airflow's CLI into the metadata DB; the connections stored are exported with
    the CLI (URIs, as the Task SDK reads connections from the environment outside a task) and handed to the
    hook as tasks get them."""
    from emulators import AZURITE_ACCOUNT, AZURITE_KEY

    from airflow_provider_delta.log import DeltaTable

    commands = _doc_commands()
    assert len(commands) >= 4  # the quickstart's, and one per scheme in the guide
    key_file = tmp_path / "loader.json"
    key_file.write_text(json.dumps(service_account_key(token_endpoint)))
    airflow = str(Path(sys.executable).with_name("airflow"))
    added = []
    for args in commands:
        conn_id = f"{args[3]}_{uuid.uuid4().hex[:6]}"
        args = [a.replace("AKIA...", "testing").replace("$ACCOUNT_KEY", AZURITE_KEY) for a in args]
        args = ["testing" if a == "..." else a for a in args]
        args = [a.replace("myaccount", AZURITE_ACCOUNT) for a in args]
        extra = json.loads(args[args.index("--conn-extra") + 1])
        options = extra.setdefault("storage_options", {})
        if "key_path" in options:
            options["key_path"] = str(key_file)
            options["endpoint_url"] = gcs_emulator.endpoint
            scheme, uri = "gs", gcs_emulator.uri(f"doc-{conn_id}")
        elif "--conn-login" in args and args[args.index("--conn-login") + 1] == AZURITE_ACCOUNT:
            args += ["--conn-host", azure_emulator.endpoint]
            scheme, uri = "abfs", azure_emulator.uri(f"doc-{conn_id}")
        else:
            args += ["--conn-host", s3_server.endpoint_url]
            scheme, uri = "s3", f"s3://{s3_bucket}/doc-{conn_id}"
        extra.pop("tables", None)
        args[args.index("--conn-extra") + 1] = json.dumps(extra)
        args[3] = conn_id
        subprocess.run([airflow, *args[1:]], check=True, capture_output=True, env=os.environ.copy())
        added.append((conn_id, scheme, uri))
    # One export of what the commands stored (each Airflow CLI start costs seconds of CPU).
    exported = tmp_path / "connections.env"
    export = ["connections", "export", str(exported), "--file-format", "env", "--serialization-format", "uri"]
    subprocess.run([airflow, *export], check=True, capture_output=True, env=os.environ.copy())
    stored = dict(line.split("=", 1) for line in exported.read_text().splitlines() if line.strip())
    used = []
    for conn_id, scheme, uri in added:
        monkeypatch.setenv(f"AIRFLOW_CONN_{conn_id.upper()}", stored[conn_id])
        hook = DeltaHook(conn_id)
        DeltaTable.create(uri, ROWS.schema, storage_options=hook.storage_options(uri))
        hook.write_rows(uri, ROWS)
        assert hook.read_rows(uri).num_rows == 3
        used.append(scheme)
    assert sorted(set(used)) == ["abfs", "gs", "s3"]
