"""Airflow's API server for the browser tests: started on a free port of 127.0.0.1 with the simple auth
manager and a real user (not "all admins", which would let anonymous callers in), stopped after.

Shared by tests/airflow/test_ui.py and tests/airflow/test_secrets.py.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
# Flags without which Chromium's own connections are refused on this machine; a fresh profile per run.
CHROMIUM_ARGS = [
    "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
    "--disable-component-update", "--disable-sync",
]  # fmt: skip
STARTUP_S = 120
USER = "admin"
SIMPLE_AUTH_MANAGER = "airflow.api_fastapi.auth.managers.simple.simple_auth_manager.SimpleAuthManager"


@dataclass
class ApiServer:
    base: str
    password: str
    token: str
    log: Path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_http(url: str, proc: subprocess.Popen, log: Path, what: str) -> None:
    deadline = time.monotonic() + STARTUP_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"{what} exited with {proc.returncode}:\n{log.read_text()[-3000:]}", pytrace=False)
        try:
            urllib.request.urlopen(url, timeout=2).close()
            return
        except urllib.error.HTTPError:
            return
        except OSError:
            time.sleep(0.2)
    pytest.fail(f"{what} did not answer {url} within {STARTUP_S}s:\n{log.read_text()[-3000:]}", pytrace=False)


def stop(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


@contextmanager
def api_server(work: Path, env: dict[str, str] | None = None) -> Iterator[ApiServer]:
    """``airflow api-server`` on the session's metadata DB, its output in ``work/api-server.log``."""
    password = secrets.token_urlsafe(12)
    passwords = work / "passwords.json"
    passwords.write_text(json.dumps({USER: password}))
    port = free_port()
    full_env = {
        **os.environ,
        "AIRFLOW__CORE__AUTH_MANAGER": SIMPLE_AUTH_MANAGER,
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": f"{USER}:admin",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "False",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(passwords),
        "AIRFLOW__API__BASE_URL": f"http://127.0.0.1:{port}",
        **(env or {}),
    }
    log = work / "api-server.log"
    airflow = Path(sys.executable).with_name("airflow")
    with open(log, "wb") as out:
        server = subprocess.Popen(
            [str(airflow), "api-server", "--host", "127.0.0.1", "--port", str(port)],
            stdout=out, stderr=subprocess.STDOUT, env=full_env, cwd=work,
        )  # fmt: skip
    try:
        base = f"http://127.0.0.1:{port}"
        wait_http(f"{base}/api/v2/monitor/health", server, log, "airflow api-server")
        request = urllib.request.Request(
            f"{base}/auth/token", data=json.dumps({"username": USER, "password": password}).encode(),
            headers={"Content-Type": "application/json"}, method="POST",
        )  # fmt: skip
        token = json.load(urllib.request.urlopen(request, timeout=30))["access_token"]
        yield ApiServer(base, password, token, log)
    finally:
        stop(server)


def get(base: str, path: str, token: str | None) -> tuple[int, str, str]:
    """(status, body, Location) without following redirects."""

    class NoRedirect(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *args, **kwargs):
            return None

    headers = {"Cookie": f"_token={token}"} if token else {}
    opener = urllib.request.build_opener(NoRedirect)
    try:
        with opener.open(urllib.request.Request(base + path, headers=headers), timeout=120) as r:
            return r.status, r.read().decode(), ""
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode(), err.headers.get("Location", "")


@contextmanager
def chromium(base: str, token: str | None) -> Iterator:
    """A headless Chromium context (Debian's package, driven by playwright), logged in when ``token``."""
    if not Path(CHROMIUM).exists():
        pytest.fail("chromium is not installed: `make tools` installs Debian's chromium (apt-get install "
                    "chromium)", pytrace=False)  # fmt: skip
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        context = browser.new_context(viewport={"width": 1280, "height": 1000})
        if token:
            context.add_cookies([{"name": "_token", "value": token, "url": base}])
        try:
            yield context
        finally:
            context.close()
            browser.close()
