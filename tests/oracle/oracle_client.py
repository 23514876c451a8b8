"""The test side of the Delta Spark oracle: start ``server.py`` in the oracle's venv and call it.

``make oracle`` builds ``.oracle/`` (``venv/`` with the pyspark Delta Spark supports, ``jars/`` from Maven
Central). When either is missing the oracle tests fail saying so, unless ``DELTA_ORACLE=off`` turns them off.
"""

from __future__ import annotations

import glob
import itertools
import json
import os
import queue
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
HOME = Path(os.environ.get("DELTA_ORACLE_HOME", REPO / ".oracle"))
SERVER = Path(__file__).with_name("server.py")
START_TIMEOUT = 240.0  # JVM start plus Delta's first session on two busy cores
CALL_TIMEOUT = 600.0
# DELTA_ORACLE_PROFILE=<file>: each call's function, wall time and test appended there as a JSON line, to
# see where the oracle's time goes (it is most of the suite's).
PROFILE = os.environ.get("DELTA_ORACLE_PROFILE")


class OracleError(Exception):
    """Delta Spark raised: ``error`` is the Python class (py4j / AnalysisException), ``message`` the JVM's."""

    def __init__(self, fn: str, error: str, message: str, trace: str = "") -> None:
        super().__init__(f"Delta Spark {fn}: {error}: {message}")
        self.error = error
        self.message = message
        self.trace = trace


class OracleUnavailable(Exception):
    """The oracle environment is not there or does not start; the message says what is missing."""


def off() -> bool:
    return os.environ.get("DELTA_ORACLE", "").strip().lower() in ("off", "0", "false", "no")


def locate() -> tuple[Path, Path]:
    """The oracle's python and jar folder, or :class:`OracleUnavailable` naming what is missing."""
    python = HOME / "venv" / "bin" / "python"
    jars = HOME / "jars"
    missing = []
    if not python.exists():
        missing.append(f"its Python environment ({python}: pyspark for Delta Spark's Spark line, made by uv)")
    if not glob.glob(str(jars / "delta-spark_*.jar")):
        missing.append(f"the Delta Spark jars ({jars}: fetched from Maven Central with mvn)")
    if missing:
        raise OracleUnavailable(
            "the Delta Spark oracle is not set up: missing " + "; ".join(missing) + ". Run `make oracle` "
            "(needs uv, mvn, a JDK and access to PyPI and Maven Central), or set DELTA_ORACLE=off to turn "
            "the oracle tests off explicitly."
        )
    return python, jars


class Oracle:
    """One Delta-enabled SparkSession in a child process; ``call`` runs a function of ``server.API``."""

    def __init__(self, workdir: Path, name: str = "oracle", logstore: str | None = None) -> None:
        python, jars = locate()
        workdir.mkdir(parents=True, exist_ok=True)
        self.log_path = workdir / f"{name}.log"
        env = {k: v for k, v in os.environ.items() if not k.startswith(("PYSPARK_", "SPARK_", "PYTHON"))}
        env["PYSPARK_PYTHON"] = env["PYSPARK_DRIVER_PYTHON"] = str(python)
        if logstore:
            env["DELTA_ORACLE_LOGSTORE"] = logstore
        self._stderr = open(self.log_path, "wb")  # noqa: SIM115 - closed in close()
        try:
            self.proc = subprocess.Popen(
                [str(python), str(SERVER), str(jars), str(workdir / "warehouse")],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=self._stderr,
                env=env,
                cwd=workdir,
            )
        except OSError as exc:
            raise OracleUnavailable(f"cannot start the oracle's Python {python}: {exc}") from exc
        self._answers: queue.Queue[dict[str, Any] | None] = queue.Queue()
        self._reader = threading.Thread(target=self._read, name=f"{name}-reader", daemon=True)
        self._reader.start()
        self._ids = itertools.count(1)
        self._spawned: dict[int, tuple[str, tuple[Any, ...], float]] = {}  # profiled jobs
        try:
            self.versions: dict[str, str] = self._answer(0, "start", START_TIMEOUT)
        except OracleError as exc:
            raise OracleUnavailable(f"the Delta Spark oracle did not start: {exc}") from exc

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self._answers.put(json.loads(line))
        self._answers.put(None)

    def _answer(self, rid: int, fn: str, timeout: float) -> Any:
        try:
            reply = self._answers.get(timeout=timeout)
        except queue.Empty:
            raise OracleError(fn, "Timeout", f"no answer in {timeout:.0f} s; log: {self.log_path}") from None
        if reply is None:
            raise OracleError(fn, "Exited", f"the oracle process ended (code {self.proc.poll()}): "
                              f"{self._log_tail()}")  # fmt: skip
        assert reply["id"] == rid, (reply, rid)
        if not reply["ok"]:
            raise OracleError(fn, reply["error"], reply["message"], reply.get("trace", ""))
        return reply["value"]

    def _log_tail(self, n: int = 3000) -> str:
        self._stderr.flush()
        text = self.log_path.read_text(errors="replace")
        if "JAVA_GATEWAY_EXITED" in text or "java: not found" in text or "JAVA_HOME" in text:
            text += "\n(no working Java: Delta Spark needs a JDK 17 on PATH or JAVA_HOME)"
        return text[-n:]

    def _send(self, obj: dict[str, Any]) -> None:
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.write((json.dumps(obj) + "\n").encode())
            self.proc.stdin.flush()
        except BrokenPipeError:
            raise OracleError(obj.get("fn", "?"), "Exited", self._log_tail()) from None

    def call(self, fn: str, *args: Any, timeout: float = CALL_TIMEOUT, **kwargs: Any) -> Any:
        rid = next(self._ids)
        started = time.perf_counter()
        self._send({"id": rid, "op": "call", "fn": fn, "args": list(args), "kwargs": kwargs})
        try:
            return self._answer(rid, fn, timeout)
        finally:
            if PROFILE:
                self._profile(fn, args, time.perf_counter() - started)

    @staticmethod
    def _profile(fn: str, args: tuple[Any, ...], seconds: float) -> None:
        what = args[0].split(None, 2)[:2] if fn == "sql" and args and isinstance(args[0], str) else []
        line = {"fn": " ".join([fn, *what]), "s": round(seconds, 4),
                "test": os.environ.get("PYTEST_CURRENT_TEST", "").split(" ")[0]}  # fmt: skip
        with open(PROFILE, "a") as out:
            out.write(json.dumps(line) + "\n")

    def spawn(self, fn: str, *args: Any, **kwargs: Any) -> int:
        """Start ``fn`` on a thread of the oracle; :meth:`join` returns its result (or raises its error)."""
        rid = next(self._ids)
        self._send({"id": rid, "op": "spawn", "fn": fn, "args": list(args), "kwargs": kwargs})
        job = self._answer(rid, fn, CALL_TIMEOUT)
        if PROFILE:  # the job's time is counted from here to its join
            self._spawned[job] = (fn, args, time.perf_counter())
        return job

    def done(self, job: int) -> bool:
        """Whether a spawned job has finished (its result still waits for :meth:`join`)."""
        rid = next(self._ids)
        self._send({"id": rid, "op": "poll", "job": job})
        return self._answer(rid, f"job {job}", CALL_TIMEOUT)

    def join(self, job: int, timeout: float = CALL_TIMEOUT) -> Any:
        rid = next(self._ids)
        self._send({"id": rid, "op": "join", "job": job})
        try:
            return self._answer(rid, f"job {job}", timeout)
        finally:
            if PROFILE and job in self._spawned:
                fn, args, started = self._spawned.pop(job)
                self._profile(f"{fn} (spawned)", args, time.perf_counter() - started)

    def sql(self, query: str) -> list[dict[str, Any]]:
        return [json.loads(r) for r in self.call("sql", query)]

    def close(self) -> None:
        try:
            self._send({"op": "stop"})
            self.proc.wait(timeout=60)
        except (OracleError, subprocess.TimeoutExpired):
            self.proc.kill()
            self.proc.wait()
        finally:
            self._stderr.close()
