"""Root fixtures: a real S3 endpoint (moto's server, in this process) with a request log, and a real local
Spark (``spark``: one ``local[2]`` session per test module, for the Spark layer and the oracle tests).

The server is moto's own WSGI app served by werkzeug on 127.0.0.1, wrapped in a small middleware that records
every request before moto answers it. Tests use the log to pin the storage cost of an operation, e.g. "an idle
sensor poke costs exactly one request". The same middleware injects server-side faults when a test switches
them on (``S3Server.faults``: the chaos test). moto's ``ThreadedMotoServer`` has no hook for wrapping its app,
so this file builds the same server itself.

moto keeps its S3 state in process-wide backends: a test that also enters ``moto.mock_aws()`` resets them, and
with them every bucket this server holds.
"""

from __future__ import annotations

import atexit
import logging
import os
import random
import shutil
import sys
import tempfile
import threading
import time
import urllib.request
import uuid
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar
from urllib.parse import parse_qsl, unquote

import pytest

# The protocol texts and golden tables live in ../shared beside the repository (as in CI); override with
# DELTA_SHARED_DIR.
os.environ.setdefault("DELTA_SHARED_DIR", os.path.join(os.path.dirname(__file__), "..", "..", "shared"))

# Airflow reads these when its configuration is first loaded; set them before any test imports airflow, so
# that the tests run against a private AIRFLOW_HOME (SQLite metadata DB, dags folder) and never ~/airflow.
# One home per pytest process: xdist's workers inherit the controller's environment, so the marker holds the
# worker id ("main" without xdist) and a worker that finds another process's home makes its own.
os.environ["AIRFLOW__CORE__LOAD_EXAMPLES"] = "False"
_process = os.environ.get("PYTEST_XDIST_WORKER", "main")
if os.environ.get("PYTEST_AIRFLOW_HOME_SET") != _process:
    _home = tempfile.mkdtemp(prefix=f"airflow-home-{_process}-")
    # Removed when this process ends (a run used to leave one per process in the temp folder).
    atexit.register(shutil.rmtree, _home, ignore_errors=True)
    os.environ["AIRFLOW_HOME"] = _home
    os.environ["AIRFLOW__CORE__DAGS_FOLDER"] = os.path.join(_home, "dags")
    os.environ["AIRFLOW__CORE__UNIT_TEST_MODE"] = "False"
    os.environ["PYTEST_AIRFLOW_HOME_SET"] = _process
    os.makedirs(os.environ["AIRFLOW__CORE__DAGS_FOLDER"], exist_ok=True)

# Spark workers run this interpreter, so they import the provider and pyarrow from the same environment.
os.environ["PYSPARK_PYTHON"] = sys.executable
os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
# py4j logs at INFO when its connections are collected at exit, after pytest has closed the streams.
logging.getLogger("py4j").setLevel(logging.WARNING)

# fake-gcs-server and Azurite, for the core's and the hook's tests (tests/emulators.py).
pytest_plugins = ["emulators"]

FAKE_KEY = "testing"
FAKE_SECRET = "testing"
REGION = "us-east-1"


@dataclass(frozen=True)
class S3Request:
    """One request as the server saw it. Paths are path-style: ``/bucket/key``."""

    method: str
    path: str
    query: str = ""
    headers: Mapping[str, str] = field(default_factory=dict)  # lower-case names

    @property
    def bucket(self) -> str:
        return unquote(self.path.lstrip("/").partition("/")[0])

    @property
    def key(self) -> str:
        """The object key, or "" for a bucket-level request such as a listing."""
        return unquote(self.path.lstrip("/").partition("/")[2])

    @property
    def params(self) -> dict[str, str]:
        return dict(parse_qsl(self.query, keep_blank_values=True))


class RequestLog:
    """Requests the server received, in arrival order (moto's own /moto-api calls left out). Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._requests: list[S3Request] = []

    def record(self, request: S3Request) -> None:
        with self._lock:
            self._requests.append(request)

    def clear(self) -> None:
        with self._lock:
            self._requests.clear()

    @property
    def requests(self) -> list[S3Request]:
        with self._lock:
            return list(self._requests)

    def count(self, method: str | None = None, bucket: str | None = None) -> int:
        return sum(
            1
            for r in self.requests
            if (method is None or r.method == method) and (bucket is None or r.bucket == bucket)
        )

    def counts(self) -> Counter[tuple[str, str]]:
        """How many requests per (method, path)."""
        return Counter((r.method, r.path) for r in self.requests)

    def __len__(self) -> int:
        return self.count()


class ServerFaults:
    """Faults the middleware injects into one bucket's requests while switched on (off by default).

    Each request draws, from one seeded generator, at most one of:

    - ``error_before``: answer 500 InternalError without passing the request to moto (nothing happened);
    - ``dropped_response``: let moto apply a mutating request (PUT, POST, DELETE), then answer 500 instead
      of its response, as when a connection drops after S3 committed the write (a lost acknowledgement);
    - ``slow``: wait 50-500 ms before handling the request.

    Clients retry 500s (botocore does, as against AWS), so a dropped PUT with ``If-None-Match: *`` comes back
    as 412 on its own object: the commit protocol must recognise it. Request arrival order depends on
    threads, so the seed fixes the rates and the draws, not which request gets which fault.
    """

    KINDS = ("error_before", "dropped_response", "slow")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._bucket: str | None = None
        self._rates: dict[str, float] = {}
        self._rng = random.Random(0)
        self.counts: Counter[str] = Counter()

    def start(self, bucket: str, seed: int, **rates: float) -> None:
        unknown = set(rates) - set(self.KINDS)
        if unknown:
            raise ValueError(f"unknown server fault kinds {sorted(unknown)}; known: {self.KINDS}")
        with self._lock:
            self._bucket, self._rates, self._rng = bucket, dict(rates), random.Random(seed)
            self.counts = Counter()

    def stop(self) -> Counter[str]:
        """Switch faults off; return how many of each were injected."""
        with self._lock:
            self._bucket = None
            return Counter(self.counts)

    def draw(self, method: str, bucket: str) -> tuple[str | None, float]:
        """The fault for one request (or None) and, for ``slow``, the delay in seconds."""
        with self._lock:
            if self._bucket is None or bucket != self._bucket:
                return None, 0.0
            x = self._rng.random()
            for kind in self.KINDS:
                rate = self._rates.get(kind, 0.0)
                if kind == "dropped_response" and method not in ("PUT", "POST", "DELETE"):
                    continue
                if x < rate:
                    self.counts[kind] += 1
                    return kind, self._rng.uniform(0.05, 0.5) if kind == "slow" else 0.0
                x -= rate
            return None, 0.0


_INTERNAL_ERROR = (
    b'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>InternalError</Code>'
    b"<Message>We encountered an internal error (injected by the test server). Please try again.</Message>"
    b"<RequestId>injected</RequestId></Error>"
)


def _internal_error(environ: dict[str, Any], start_response: Any) -> list[bytes]:
    # Read the request body first: an unread body would be taken for the next request on a kept-alive
    # connection.
    length = int(environ.get("CONTENT_LENGTH") or 0)
    if length:
        environ["wsgi.input"].read(length)
    headers = [("Content-Type", "application/xml"), ("Content-Length", str(len(_INTERNAL_ERROR)))]
    start_response("500 Internal Server Error", [*headers, ("Connection", "close")])
    return [] if environ["REQUEST_METHOD"] == "HEAD" else [_INTERNAL_ERROR]


def _drop_response(app: Any, environ: dict[str, Any], start_response: Any) -> list[bytes]:
    """Run ``app`` to the end (its effects land), then answer 500 instead of what it said."""

    def discard(status: str, headers: list, exc_info: Any = None) -> Callable[[bytes], None]:
        return lambda data: None

    body = app(environ, discard)
    try:
        for _ in body:
            pass
    finally:
        close = getattr(body, "close", None)
        if close is not None:
            close()
    return _internal_error({**environ, "CONTENT_LENGTH": "0"}, start_response)


@dataclass(frozen=True)
class S3Server:
    endpoint_url: str
    requests: RequestLog
    # For s3fs / fsspec (``fsspec.filesystem("s3", **storage_options)``). skip_instance_cache keeps a cached
    # S3FileSystem, and its listings cache, from carrying over between tests.
    storage_options: dict[str, Any]
    # For deltalake / delta-rs (object_store keys). No AWS_S3_ALLOW_UNSAFE_RENAME: deltalake 1.6 commits with
    # conditional put (If-None-Match: *), which moto enforces, so concurrent writers are safe here as on AWS.
    delta_storage_options: dict[str, str]
    faults: ServerFaults = field(default_factory=ServerFaults)

    def client(self) -> Any:
        """A boto3 S3 client for this server."""
        import boto3

        return boto3.client(
            "s3",
            endpoint_url=self.endpoint_url,
            region_name=REGION,
            aws_access_key_id=FAKE_KEY,
            aws_secret_access_key=FAKE_SECRET,
        )

    def filesystem(self) -> Any:
        """A fresh (uncached) s3fs filesystem for this server."""
        import fsspec

        return fsspec.filesystem("s3", **self.storage_options)


def _serve(log: RequestLog, faults: ServerFaults) -> tuple[Any, threading.Thread]:
    from moto.server import DomainDispatcherApplication, MotoRequestHandler, create_backend_app
    from werkzeug.serving import make_server

    moto_app = DomainDispatcherApplication(create_backend_app)

    def counting_app(environ: dict[str, Any], start_response: Any) -> Any:
        path = environ.get("PATH_INFO", "")
        if not path.startswith("/moto-api"):
            headers = {k[5:].replace("_", "-").lower(): v for k, v in environ.items() if k[:5] == "HTTP_"}
            request = S3Request(environ["REQUEST_METHOD"], path, environ.get("QUERY_STRING", ""), headers)
            log.record(request)
            fault, delay = faults.draw(request.method, request.bucket)
            if fault == "slow":
                time.sleep(delay)
            elif fault == "error_before":
                return _internal_error(environ, start_response)
            elif fault == "dropped_response":
                return _drop_response(moto_app, environ, start_response)
        return moto_app(environ, start_response)

    class QuietHandler(MotoRequestHandler):
        def log_request(self, *args: Any, **kwargs: Any) -> None:
            pass

    server = make_server("127.0.0.1", 0, counting_app, threaded=True, request_handler=QuietHandler)
    thread = threading.Thread(target=server.serve_forever, name="moto-s3", daemon=True)
    thread.start()
    return server, thread


def _isolate_aws_env(mp: pytest.MonkeyPatch) -> None:
    """Drop the machine's AWS settings and use fake credentials, so nothing reaches a real account."""
    for name in list(os.environ):
        if name.startswith("AWS_"):
            mp.delenv(name)
    mp.setenv("AWS_ACCESS_KEY_ID", FAKE_KEY)
    mp.setenv("AWS_SECRET_ACCESS_KEY", FAKE_SECRET)
    mp.setenv("AWS_DEFAULT_REGION", REGION)
    mp.setenv("AWS_REGION", REGION)
    mp.setenv("AWS_EC2_METADATA_DISABLED", "true")
    mp.setenv("AWS_CONFIG_FILE", os.devnull)
    mp.setenv("AWS_SHARED_CREDENTIALS_FILE", os.devnull)
    for name in ("NO_PROXY", "no_proxy"):
        mp.setenv(name, ",".join(filter(None, [os.environ.get(name), "127.0.0.1", "localhost"])))


def _atomic_conditional_puts(mp: pytest.MonkeyPatch) -> None:
    """Make moto's ``If-None-Match: *`` check and its write one atomic step, as on AWS.

    moto 5.2's ``S3Response.put_object`` looks the key up and later stores the object, holding nothing in
    between, so two requests on two server threads could both pass the check: the test double's race, not
    the code under test's. One lock around the handler gives S3's guarantee.
    """
    from moto.s3.responses import S3Response

    original = S3Response.put_object
    lock = threading.Lock()

    def put_object(self: Any) -> Any:
        with lock:
            return original(self)

    mp.setattr(S3Response, "put_object", put_object)


@pytest.fixture(scope="session")
def s3_server() -> Iterator[S3Server]:
    with pytest.MonkeyPatch.context() as mp:
        _isolate_aws_env(mp)
        _atomic_conditional_puts(mp)
        log = RequestLog()
        faults = ServerFaults()
        server, thread = _serve(log, faults)
        endpoint = f"http://127.0.0.1:{server.server_port}"
        try:
            yield S3Server(
                endpoint_url=endpoint,
                requests=log,
                storage_options={
                    "key": FAKE_KEY,
                    "secret": FAKE_SECRET,
                    "client_kwargs": {"endpoint_url": endpoint, "region_name": REGION},
                    "skip_instance_cache": True,
                },
                delta_storage_options={
                    "AWS_ENDPOINT_URL": endpoint,
                    "AWS_ACCESS_KEY_ID": FAKE_KEY,
                    "AWS_SECRET_ACCESS_KEY": FAKE_SECRET,
                    "AWS_REGION": REGION,
                    "AWS_ALLOW_HTTP": "true",
                },
                faults=faults,
            )
        finally:
            # moto's documented reset drops every bucket, so no state outlives the session.
            reset = urllib.request.Request(f"{endpoint}/moto-api/reset", method="POST")
            urllib.request.urlopen(reset, timeout=10).close()
            server.shutdown()
            thread.join(timeout=10)
            server.server_close()


@pytest.fixture
def s3_bucket(s3_server: S3Server) -> Iterator[str]:
    """A new, empty bucket; the request log is cleared after creating it."""
    import s3fs

    name = f"test-{uuid.uuid4().hex[:16]}"
    s3_server.client().create_bucket(Bucket=name)
    s3fs.S3FileSystem.clear_instance_cache()
    s3_server.requests.clear()
    yield name
    s3fs.S3FileSystem.clear_instance_cache()


@pytest.fixture
def request_counter(s3_server: S3Server) -> RequestLog:
    """The server's request log, cleared at the start of the test (after any bucket fixture ran)."""
    s3_server.requests.clear()
    return s3_server.requests


# Test files that take over ~40 s of a worker (from ``--durations`` on two busy cores), heaviest first.
# xdist hands whole files to its workers in collection order (``make test`` turns off its own reordering by
# test count, which put these last), so the longest start first and the short ones fill the gaps at the end.
# Order only changes how long the run takes, never what it tests.
HEAVY_FIRST = [
    "tests/oracle/test_we_read_delta_spark.py",
    "tests/oracle/test_layout_agree.py",
    "tests/oracle/test_row_changes_agree.py",
    "tests/oracle/test_delta_spark_reads_ours.py",
    "tests/oracle/test_mixed_writers.py",
    "tests/oracle/test_features_agree.py",
    "tests/oracle/test_optimize_agree.py",
    "tests/oracle/test_changes_agree.py",
    "tests/oracle/test_merge_evolution_agree.py",
    "tests/spark/test_row_changes.py",
    "tests/oracle/test_row_tracking_agree.py",
    "tests/oracle/test_row_changes_conflicts.py",
    "tests/log/test_concurrency.py",
    "tests/oracle/test_row_deletes_agree.py",
    "tests/test_install.py",
    "tests/oracle/test_constraints_agree.py",
    "tests/oracle/test_arrow_rows_agree.py",
    "tests/log/test_chaos.py",
    "tests/airflow/test_spark_connection.py",
    "tests/spark/test_spark_s3.py",
    "tests/spark/test_merge_evolution.py",
    "tests/oracle/test_deletion_vectors_agree.py",
    "tests/oracle/test_change_data_agree.py",
    "tests/airflow/test_change_consumer.py",
    "tests/airflow/test_example_dags.py",
    "tests/spark/test_spark_write.py",
]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Modules that use the shared local Spark first, then the others; heavy ones first within each.

    A worker stops the shared Spark before a module that does not use it and starts a new JVM for the next
    one that does (about 9 s of CPU each, then its JIT warms up again): grouped, each worker starts it once
    or twice instead of six or seven times."""
    rank = {path: i for i, path in enumerate(HEAVY_FIRST)}
    with_spark = {item.nodeid.split("::", 1)[0] for item in items if "spark" in item.fixturenames}

    def key(item: pytest.Item) -> tuple[bool, int]:
        path = item.nodeid.split("::", 1)[0]
        return path not in with_spark, rank.get(path, len(rank))

    items.sort(key=key)  # stable: collection order within equal keys


# The test JVMs' options (our local Spark, the standalone cluster's daemons, the oracle's Delta Spark): they
# live minutes, on two busy cores. The JIT stops at C1: C2's compile time does not pay back that soon (C2
# cost a quarter of the CPU time of tests/spark, 110 s against 83 s). The serial collector: G1's concurrent
# work costs more CPU than these small heaps need (Delta Spark's scenarios: 6 % less CPU; tests/spark's
# driver: 11 % less; the same results).
TEST_JVM_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"


class _LocalSpark:
    """Our local Spark, one per test process: a JVM costs 7-12 s to start, and 17 modules use it.

    pyspark allows one SparkContext per process, and a module that makes its own session (a standalone
    cluster, an operator that starts and stops Spark) must not find this one running: such modules do not
    ask for ``spark``, and ``_local_spark_only_where_asked`` stops the shared session before them. The next
    module that asks starts it again.
    """

    def __init__(self) -> None:
        self.session: Any = None

    def get(self) -> Any:
        from pyspark import SparkContext

        from airflow_provider_delta.spark import spark_session

        if self.session is not None and SparkContext._active_spark_context is None:
            self.session = None  # a test stopped it
        if self.session is None:
            self.session = spark_session(
                "local[2]",
                {
                    "spark.sql.shuffle.partitions": "2",
                    "spark.default.parallelism": "2",
                    "spark.driver.memory": "1g",
                    "spark.driver.extraJavaOptions": f"{TEST_JVM_OPTIONS} -XX:ReservedCodeCacheSize=256m",
                    "spark.sql.session.timeZone": "UTC",
                },
            )
            self.session.sparkContext.setLogLevel("ERROR")
        return self.session

    def stop(self) -> None:
        if self.session is not None:
            session, self.session = self.session, None
            session.stop()


_local_spark = _LocalSpark()


@pytest.fixture(scope="module", autouse=True)
def _local_spark_only_where_asked(request: pytest.FixtureRequest) -> None:
    """Stop the shared local Spark before a module none of whose tests asks for ``spark``."""
    if _local_spark.session is None:
        return
    module = request.module
    if not any("spark" in item.fixturenames for item in request.session.items if item.module is module):
        _local_spark.stop()


@pytest.fixture(scope="session")
def _spark_session_end() -> Iterator[None]:
    yield
    _local_spark.stop()


@pytest.fixture(scope="module")
def spark(_spark_session_end: None) -> Any:
    """Our Spark (the product's pyspark), local[2] with small shuffles, so it stays quick on two cores; one
    session for this process's modules in turn (see :class:`_LocalSpark`).

    1 GiB of heap: two xdist workers may each hold this session and an oracle's at once. JVM options:
    ``TEST_JVM_OPTIONS``. C1's default code cache (48 MiB) is too small for a session shared by many
    modules: once full, compiling stops and tasks fail.
    """
    return _local_spark.get()


@dataclass(frozen=True)
class SparkStandalone:
    """A Spark standalone cluster on 127.0.0.1: ``master_url`` for sessions and spark-submit."""

    master_url: str
    host: str
    port: int
    web_url: str  # the master's web UI; ``/json/`` reports workers and applications
    spark_home: str
    # For the drivers and executors of applications on the cluster, as for the cluster's own daemons.
    jvm_options: ClassVar[str] = TEST_JVM_OPTIONS

    def session(self, conf: dict[str, str] | None = None) -> Any:
        """A session of ours on the cluster: executors of 512 MiB with the test JVMs' options (executors
        live for one test, too short for C2's compiling to pay back), small shuffles, plus ``conf``."""
        from airflow_provider_delta.spark import spark_session

        base = {
            "spark.executor.memory": "512m",
            "spark.executor.extraJavaOptions": self.jvm_options,
            "spark.sql.shuffle.partitions": "2",
        }
        return spark_session(self.master_url, {**base, **(conf or {})})

    def status(self) -> dict[str, Any]:
        import json

        with urllib.request.urlopen(f"{self.web_url}/json/", timeout=10) as response:
            return json.load(response)


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def spark_standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkStandalone]:
    """A master and two workers (1 core, 1 GiB each), each its own JVM started with pyspark's bundled
    ``spark-class``, all on 127.0.0.1; stopped at the end of the session.

    Workers run Python tasks with this interpreter (``PYSPARK_PYTHON``), so executors import the provider and
    pyarrow of the test environment. Waits, within a deadline, until the master reports both workers alive.
    """
    import json
    import subprocess
    import time

    import pyspark

    spark_home = os.path.dirname(pyspark.__file__)
    spark_class = os.path.join(spark_home, "bin", "spark-class")
    work = tmp_path_factory.mktemp("spark-standalone")
    env = {
        **os.environ,
        "SPARK_HOME": spark_home,
        "PYSPARK_PYTHON": sys.executable,
        "SPARK_LOCAL_IP": "127.0.0.1",
        "SPARK_LOG_DIR": str(work),
        "SPARK_DAEMON_MEMORY": "256m",
        "SPARK_DAEMON_JAVA_OPTS": TEST_JVM_OPTIONS,
    }
    port, web_port = _free_port(), _free_port()
    master_url = f"spark://127.0.0.1:{port}"
    procs: list[subprocess.Popen] = []

    def start(name: str, *args: str) -> None:
        log = open(work / f"{name}.log", "wb")  # noqa: SIM115 (closed with the process below)
        procs.append(subprocess.Popen([spark_class, *args], stdout=log, stderr=subprocess.STDOUT, env=env,
                                      cwd=work))  # fmt: skip
        log.close()

    start("master", "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port", str(port),
          "--webui-port", str(web_port))  # fmt: skip
    for i in (1, 2):
        worker_dir = work / f"worker-{i}"
        worker_dir.mkdir()
        start(f"worker-{i}", "org.apache.spark.deploy.worker.Worker", master_url, "--host", "127.0.0.1",
              "--cores", "1", "--memory", "1g", "--webui-port", str(_free_port()),
              "--work-dir", str(worker_dir))  # fmt: skip
    cluster = SparkStandalone(master_url, "127.0.0.1", port, f"http://127.0.0.1:{web_port}", spark_home)
    try:
        deadline = time.monotonic() + 180
        alive = 0
        while time.monotonic() < deadline:
            if any(p.poll() is not None for p in procs):
                break
            try:
                alive = int(cluster.status().get("aliveworkers", 0))
            except (OSError, ValueError, json.JSONDecodeError):
                alive = 0
            if alive == 2:
                break
            time.sleep(0.3)
        if alive != 2:
            logs = "\n".join(
                f"--- {f.name}\n{f.read_text(errors='replace')[-1500:]}" for f in work.glob("*.log")
            )
            pytest.fail(f"the Spark standalone cluster did not come up ({alive} of 2 workers):\n{logs}",
                        pytrace=False)  # fmt: skip
        yield cluster
    finally:
        for proc in reversed(procs):
            proc.terminate()
        for proc in procs:
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
