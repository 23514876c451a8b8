"""Cloud storage emulators: fake-gcs-server (GCS) and Azurite (Azure Blob), one of each per test session on
free ports of 127.0.0.1. A pytest plugin (``pytest_plugins`` in tests/conftest.py), so that the core's tests
and the hook's tests (tests/airflow/test_storage_options.py) share the same servers' fixtures.

Both are installed into ``.tools/`` by ``make tools`` (which ``make test`` runs). A missing emulator fails its
tests with what is missing and how to install it; set ``DELTA_SKIP_EMULATORS=1`` to skip them instead.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import fsspec
import pytest

TOOLS = Path(__file__).resolve().parents[1] / ".tools"
FAKE_GCS_SERVER = TOOLS / "bin" / "fake-gcs-server"
AZURITE_BLOB = TOOLS / "node_modules" / ".bin" / "azurite-blob"
# Azurite's well-known development account (published in its README; not a secret).
AZURITE_ACCOUNT = "devstoreaccount1"
AZURITE_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
STARTUP_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class Emulator:
    """A running emulator and how each client reaches one of its buckets (containers)."""

    name: str  # "gcs" or "azure"
    endpoint: str
    bucket: str
    scheme: str  # fsspec's: "gs" or "abfs"
    delta_scheme: str  # deltalake's: "gs" or "az"
    storage_options: dict[str, Any]  # for our core (gcsfs / adlfs)
    delta_storage_options: dict[str, str]  # for deltalake (object_store)

    def uri(self, path: str) -> str:
        return f"{self.scheme}://{self.bucket}/{path}"

    def delta_uri(self, path: str) -> str:
        return f"{self.delta_scheme}://{self.bucket}/{path}"

    def filesystem(self) -> fsspec.AbstractFileSystem:
        """A fresh (uncached) filesystem, as another process would have."""
        return fsspec.filesystem(self.scheme, **self.storage_options, skip_instance_cache=True)


def _require(present: bool, missing: str) -> None:
    """Fail (or, with DELTA_SKIP_EMULATORS=1, skip) naming what is missing and how to install it."""
    if present:
        return
    message = f"{missing}; `make tools` installs the emulators into {TOOLS}."
    if os.environ.get("DELTA_SKIP_EMULATORS") == "1":
        pytest.skip(f"DELTA_SKIP_EMULATORS=1: {message}")
    pytest.fail(message + " Set DELTA_SKIP_EMULATORS=1 to skip the emulator tests instead.", pytrace=False)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _start(name: str, command: Callable[[int], list[str]], probe: Callable[[int], str], workdir: Path):
    """Start ``command(port)`` and poll ``probe(port)`` until it answers over HTTP, within a deadline.

    A port taken between choosing and binding makes the process exit: try again on another port.
    """
    for _ in range(3):
        port = _free_port()
        log_path = workdir / f"{name}-{port}.log"
        with open(log_path, "wb") as log:
            proc = subprocess.Popen(command(port), stdout=log, stderr=subprocess.STDOUT, cwd=workdir)
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while proc.poll() is None and time.monotonic() < deadline:
            try:
                urllib.request.urlopen(probe(port), timeout=1).close()
                return proc, port
            except urllib.error.HTTPError:  # any HTTP answer means it is serving
                return proc, port
            except OSError:
                time.sleep(0.05)
        exited = proc.poll() is not None
        _stop(proc)
        output = log_path.read_text(errors="replace")[-2000:]
        if "address already in use" not in output.lower():
            why = f"exited with {proc.returncode}" if exited else f"did not start in {STARTUP_TIMEOUT_S:.0f}s"
            pytest.fail(f"{name} {why}:\n{output}", pytrace=False)
    pytest.fail(f"{name} could not bind a free port", pytrace=False)


def _stop(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


@pytest.fixture(scope="session")
def emulator_dir() -> Iterator[Path]:
    """Where emulators log; also keeps any HTTP proxy of the machine out of the way to 127.0.0.1."""
    path = Path(tempfile.mkdtemp(prefix="delta-emulators-"))
    with pytest.MonkeyPatch.context() as mp:
        for name in ("NO_PROXY", "no_proxy"):
            mp.setenv(name, ",".join(filter(None, [os.environ.get(name), "127.0.0.1", "localhost"])))
        yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="session")
def gcs_emulator(emulator_dir: Path) -> Iterator[Emulator]:
    _require(FAKE_GCS_SERVER.exists(), f"fake-gcs-server is not installed (no {FAKE_GCS_SERVER}; needs Go)")
    import gcsfs
    import gcsfs.core

    def command(port: int) -> list[str]:
        url = f"http://127.0.0.1:{port}"
        return [str(FAKE_GCS_SERVER), "-scheme", "http", "-host", "127.0.0.1", "-port", str(port),
                "-backend", "memory", "-public-host", f"127.0.0.1:{port}", "-external-url", url,
                "-log-level", "warn"]  # fmt: skip

    probe = lambda p: f"http://127.0.0.1:{p}/storage/v1/b"  # noqa: E731
    proc, port = _start("fake-gcs-server", command, probe, emulator_dir)
    endpoint = f"http://127.0.0.1:{port}"
    # gcsfs's default "gs" class (ExtendedGcsFileSystem) asks the Storage Control gRPC API for each bucket's
    # layout before most calls; fake-gcs-server has no such API, so every call would wait out a 60 s retry.
    # The classic class is what the extended one delegates to for ordinary (non-zonal) buckets.
    previous = {p: fsspec.registry.get(p, gcsfs.GCSFileSystem) for p in ("gs", "gcs")}
    options = {"endpoint_url": endpoint, "token": "anon", "project": "test-project"}
    # object_store reads an emulator's address from the service-account key ("gcs_base_url") and, with
    # disable_oauth, sends no token.
    key = {
        "gcs_base_url": endpoint,
        "disable_oauth": True,
        "client_email": "",
        "private_key": "",
        "private_key_id": "",
    }
    bucket = f"b-{uuid.uuid4().hex[:12]}"
    try:
        for protocol in previous:
            fsspec.register_implementation(protocol, gcsfs.core.GCSFileSystem, clobber=True)
        fsspec.filesystem("gs", **options, skip_instance_cache=True).mkdir(bucket)
        yield Emulator(
            "gcs", endpoint, bucket, "gs", "gs", options,
            {"google_service_account_key": json.dumps(key), "allow_http": "true"},
        )  # fmt: skip
    finally:
        for protocol, cls in previous.items():
            fsspec.register_implementation(protocol, cls, clobber=True)
        _stop(proc)


@pytest.fixture(scope="session")
def azure_emulator(emulator_dir: Path) -> Iterator[Emulator]:
    _require(AZURITE_BLOB.exists(), f"Azurite is not installed (no {AZURITE_BLOB}; needs Node.js and npm)")
    _require(shutil.which("node") is not None, "Azurite needs Node.js, but `node` is not on PATH")

    def command(port: int) -> list[str]:
        # --skipApiVersionCheck: the Azure SDK may speak a newer API version than this Azurite knows.
        return [str(AZURITE_BLOB), "--blobHost", "127.0.0.1", "--blobPort", str(port),
                "--skipApiVersionCheck", "--disableProductStyleUrl", "--silent",
                "--inMemoryPersistence"]  # fmt: skip

    proc, port = _start("Azurite", command, lambda p: f"http://127.0.0.1:{p}/{AZURITE_ACCOUNT}", emulator_dir)
    endpoint = f"http://127.0.0.1:{port}/{AZURITE_ACCOUNT}"
    connection = (
        f"DefaultEndpointsProtocol=http;AccountName={AZURITE_ACCOUNT};AccountKey={AZURITE_KEY};"
        f"BlobEndpoint={endpoint};"
    )
    options = {"connection_string": connection}
    bucket = f"c-{uuid.uuid4().hex[:12]}"
    delta_options = {
        "azure_storage_account_name": AZURITE_ACCOUNT,
        "azure_storage_account_key": AZURITE_KEY,
        "azure_endpoint": endpoint,
        "allow_http": "true",
    }
    try:
        fsspec.filesystem("abfs", **options, skip_instance_cache=True).mkdir(bucket)
        yield Emulator("azure", endpoint, bucket, "abfs", "az", options, delta_options)
    finally:
        _stop(proc)


@pytest.fixture(params=["gcs", "azure"])
def emulator(request: pytest.FixtureRequest) -> Emulator:
    """Each cloud emulator in turn."""
    return request.getfixturevalue(f"{request.param}_emulator")
