"""The Delta Spark oracle: a child process that runs Delta Spark (the reference implementation) for the tests.

It runs in its own environment, ``.oracle/venv`` (the pyspark of the Spark line Delta Spark publishes jars
for, with those jars from ``.oracle/jars``), because our product needs a newer pyspark than Delta Spark
supports. It imports nothing from the provider: the tests send it requests, one JSON object per line on
stdin, and read one JSON answer per line on the protocol stream (the process's original stdout; anything
Spark or the JVM prints goes to stderr).

Requests: ``{"id": n, "op": "call", "fn": name, "args": [...], "kwargs": {...}}`` runs ``name`` (a function
of ``API`` below) and answers ``{"id": n, "ok": true, "value": ...}`` or ``{"id": n, "ok": false, "error":
class name, "message": ..., "trace": ...}``; ``"op": "spawn"`` starts the same call on a thread and answers
at once with a job id, whose result ``"op": "join"`` returns (used to race Delta Spark against our commits).
"""

from __future__ import annotations

import glob
import json
import os
import sys
import threading
import traceback
from collections.abc import Callable
from typing import Any

spark: Any = None  # the Delta-enabled session, built by main()
_jobs: dict[int, threading.Thread] = {}
_results: dict[int, dict[str, Any]] = {}
API: dict[str, Callable[..., Any]] = {}  # what a request may call, by name
# Session settings as they were before ``conf`` first changed them (None: unset), so that ``reset`` can hand
# the session to the next test module as it started.
_conf_before: dict[str, str | None] = {}


def api(fn: Callable[..., Any]) -> Callable[..., Any]:
    API[fn.__name__] = fn
    return fn


def session(jars: list[str], warehouse: str) -> Any:
    from pyspark.sql import SparkSession

    conf = {
        "spark.jars": ",".join(jars),
        "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
        "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
        "spark.sql.warehouse.dir": warehouse,
        # C1 only (a test JVM lives minutes: C2's compile time does not pay back) and the serial collector
        # (6 % less CPU than G1 on the scenarios), as tests/conftest.py's TEST_JVM_OPTIONS; a code cache big
        # enough for a JVM shared by every oracle module (C1's default 48 MiB filled within a minute, which
        # stops compilation and then fails tasks with "Out of space in CodeCache").
        "spark.driver.extraJavaOptions": f"-Dderby.system.home={warehouse} -XX:TieredStopAtLevel=1 "
                                         "-XX:+UseSerialGC -XX:ReservedCodeCacheSize=256m",
        "spark.sql.codegen.wholeStage": "false",
        # Interpreted expressions and no adaptive re-planning: the oracle's queries touch a few rows, and
        # generating, compiling and re-planning cost it 10 % of its CPU time (same results either way).
        "spark.sql.codegen.factoryMode": "NO_CODEGEN",
        "spark.sql.adaptive.enabled": "false",
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.shuffle.partitions": "2",
        "spark.default.parallelism": "2",
        "spark.driver.memory": "1g",
        # Small, fast state reconstruction, as Delta's own test suites configure it.
        "spark.databricks.delta.snapshotPartitions": "2",
        # VACUUM lists files with a job of this many tasks (default 10000: minutes on two cores).
        "spark.sql.sources.parallelPartitionDiscovery.parallelism": "2",
        # VACUUM ... RETAIN 0 HOURS in scenarios: the retention check would refuse it.
        "spark.databricks.delta.retentionDurationCheck.enabled": "false",
        # Time travel beyond delta.deletedFileRetentionDuration is a policy of Delta Spark's that ours does
        # not share (docs/compatibility.md, Known difference 13; test_we_read_delta_spark checks both):
        # scenarios age the log by days, and the refusal would hide older versions' rows from comparison.
        "spark.databricks.delta.vacuum.enforceTimeTravelWithinDeletedFileRetentionDuration": "false",
    }
    store = os.environ.get("DELTA_ORACLE_LOGSTORE")
    if store:
        conf["spark.delta.logStore.file.impl"] = store
    builder = SparkSession.builder.master("local[2]").appName("delta-oracle")
    for key, value in conf.items():
        builder = builder.config(key, value)
    s = builder.getOrCreate()
    s.sparkContext.setLogLevel("ERROR")
    return s


# -- py4j helpers ---------------------------------------------------------------------------------------
def _none() -> Any:
    return spark._jvm.scala.Option.empty()


def scala_call(obj: Any, name: str, *args: Any) -> Any:
    """Call a Scala method whose trailing parameters have defaults (``name$default$i``), as Scala would."""
    arities = sorted(m.getParameterCount() for m in obj.getClass().getMethods() if m.getName() == name)
    arity = next((a for a in arities if a >= len(args)), None)
    if arity is None:
        raise TypeError(f"{name} takes none of {arities} parameters for {len(args)} arguments")
    full = list(args)
    for i in range(len(args) + 1, arity + 1):
        full.append(getattr(obj, f"{name}$default${i}")())
    return getattr(obj, name)(*full)


def _delta_log(path: str) -> Any:
    return spark._jvm.org.apache.spark.sql.delta.DeltaLog.forTable(spark._jsparkSession, path)


def _snapshot(path: str, version: int | None) -> Any:
    log = _delta_log(path)
    if version is None:
        return scala_call(log, "update")
    return scala_call(log, "getSnapshotAt", version)


def _json_rows(df: Any) -> list[str]:
    """Each row as JSON (nulls left out), sorted: the form ``oracle_compare.rows_json`` gives our rows."""
    from pyspark.sql import functions as F

    return sorted(r[0] for r in df.select(F.to_json(F.struct("*"))).collect())


# -- the API the tests call ----------------------------------------------------------------------------
@api
def ping() -> dict[str, str]:
    """Versions of the oracle (Spark, Delta Spark jar, Python)."""
    jar = spark.sparkContext.getConf().get("spark.jars")
    delta = next(
        (os.path.basename(j) for j in jar.split(",") if os.path.basename(j).startswith("delta-spark_")), ""
    )
    return {"spark": spark.version, "delta_jar": delta, "python": sys.version.split()[0]}


@api
def sql(query: str) -> list[str]:
    """Run SQL; its result rows as JSON (Spark's ``toJSON``), in result order."""
    return spark.sql(query).toJSON().collect()


@api
def sql_script(queries: list[str]) -> list[list[str]]:
    return [sql(q) for q in queries]


@api
def rows(path: str, version: int | None = None, timestamp: str | None = None) -> list[str]:
    """The table's rows as sorted JSON lines, at a version or timestamp (latest by default)."""
    reader = spark.read.format("delta")
    if version is not None:
        reader = reader.option("versionAsOf", version)
    if timestamp is not None:
        reader = reader.option("timestampAsOf", timestamp)
    return _json_rows(reader.load(path))


@api
def input_files(path: str, version: int | None = None) -> list[str]:
    reader = spark.read.format("delta")
    if version is not None:
        reader = reader.option("versionAsOf", version)
    return sorted(reader.load(path).inputFiles())


@api
def latest_version(path: str) -> int:
    """The latest version, as ``snapshot(path)["version"]`` gives it, without collecting the snapshot's files,
    app transactions and domains (three Spark jobs): what a scenario asks after each operation."""
    return _snapshot(path, None).version()


@api
def snapshot(path: str, version: int | None = None) -> dict[str, Any]:
    """Delta Spark's own snapshot of ``version``: what the reference implementation reconstructs."""
    snap = _snapshot(path, version)
    from pyspark.sql import DataFrame

    adds = DataFrame(snap.allFiles().toDF(), spark)
    dv = "deletionVector"
    files = adds.selectExpr(
        "path",
        f"if({dv} IS NULL, NULL, concat_ws('|', {dv}.storageType, {dv}.pathOrInlineDv, "
        f"coalesce(CAST({dv}.offset AS STRING), ''), CAST({dv}.cardinality AS STRING))) AS dv",
    ).collect()
    txns = snap.setTransactions()
    txn_list = [json.loads(txns.apply(i).json()) for i in range(txns.size())]
    domains = snap.domainMetadata()
    domain_list = [json.loads(domains.apply(i).json()) for i in range(domains.size())]
    return {
        "version": snap.version(),
        "timestamp": snap.timestamp(),
        "protocol": json.loads(snap.protocol().json())["protocol"],
        "metadata": json.loads(snap.metadata().json())["metaData"],
        "files": sorted([r["path"], r["dv"]] for r in files),
        "txns": {t["txn"]["appId"]: t["txn"]["version"] for t in txn_list},
        "domains": {d["domainMetadata"]["domain"]: d["domainMetadata"] for d in domain_list},
    }


@api
def files_read(path: str, predicates: list[str]) -> dict[str, Any]:
    """How many of the latest version's files Delta Spark's data skipping keeps for each predicate (its own
    ``filesForScan``: partition values and per-file statistics), and how many there are."""
    snap = _snapshot(path, None)
    counts = []
    for predicate in predicates:
        plan = spark.read.format("delta").load(path).where(predicate)._jdf.queryExecution().analyzed()
        counts.append(snap.filesForScan(_seq([plan.condition()]), False).files().size())
    return {"total": snap.allFiles().count(), "read": counts}


@api
def snapshots(path: str, versions: list[int]) -> list[dict[str, Any] | str]:
    """``snapshot`` of each version, or the first line of Delta Spark's error for it."""
    out: list[dict[str, Any] | str] = []
    for v in versions:
        try:
            out.append(snapshot(path, v))
        except Exception as exc:
            out.append(str(exc).splitlines()[0][:300] or type(exc).__name__)
    return out


@api
def view(path: str) -> dict[str, Any]:
    """Everything the tests compare after an operation, in one request, all of the latest version (time
    travel would rebuild the state each time): Delta Spark's snapshot, ``inputFiles()``, ``DESCRIBE
    DETAIL`` and the rows."""
    return {
        "snapshot": snapshot(path),
        "input_files": input_files(path),
        "detail": detail(path),
        "rows": rows(path),
    }


@api
def detail(path: str) -> dict[str, Any]:
    df = spark.sql(f"DESCRIBE DETAIL delta.`{path}`")
    return json.loads(df.toJSON().first())


@api
def history(path: str) -> list[dict[str, Any]]:
    """DESCRIBE HISTORY, newest first, timestamps as ms since the epoch."""
    df = spark.sql(f"DESCRIBE HISTORY delta.`{path}`").selectExpr(
        "version", "unix_millis(timestamp) AS ts", "operation", "operationParameters", "readVersion",
        "isolationLevel", "isBlindAppend", "operationMetrics", "userMetadata", "engineInfo",
    )  # fmt: skip
    return [json.loads(r) for r in df.toJSON().collect()]


@api
def version_at(path: str, timestamp_ms: int) -> int | None:
    """The version Delta Spark's time travel picks for a timestamp; None when it refuses."""
    ts = spark._jvm.java.sql.Timestamp(timestamp_ms)
    try:
        # canReturnLastCommit: a time after the last commit picks it (SQL time travel refuses instead; see
        # docs/compatibility.md); mustBeRecreatable: as time travel, only versions that can be rebuilt.
        commit = scala_call(_delta_log(path).history(), "getActiveCommitAtTime", ts, _none(), True, True)
    except Exception as exc:  # py4j: the JVM's exception
        if "DELTA_TIMESTAMP_EARLIER_THAN_COMMIT_RETENTION" in str(exc) or "earlier" in str(exc).lower():
            return None
        raise
    return commit.version()


@api
def checkpoint(path: str) -> int:
    """Write a checkpoint of the latest version with Delta Spark (classic or V2 per the table's policy)."""
    log = _delta_log(path)
    snap = scala_call(log, "update")
    log.checkpoint(snap, _none())
    return snap.version()


@api
def cleanup_logs(path: str) -> None:
    """Delta Spark's metadata cleanup (what a checkpoint triggers), run now."""
    log = _delta_log(path)
    snap = scala_call(log, "update")
    scala_call(log, "cleanUpExpiredLogs", snap)


@api
def clear_cache() -> None:
    """Forget cached DeltaLogs and snapshots: after a test changed log files behind Delta Spark's back."""
    spark._jvm.org.apache.spark.sql.delta.DeltaLog.clearCache()


# -- manual transactions: Delta Spark's own OptimisticTransaction and conflict checker -------------------
_txns: dict[int, tuple[Any, list[Any]]] = {}


def _module(name: str) -> Any:
    """A Scala object by its binary class name without the trailing ``$`` (``Foo`` for ``Foo$.MODULE$``)."""
    pkg, _, cls = name.rpartition(".")
    obj = spark._jvm
    for part in pkg.split("."):
        obj = getattr(obj, part)
    return getattr(getattr(obj, cls + "$"), "MODULE$")


def _seq(items: list[Any]) -> Any:
    converters = spark._jvm.scala.jdk.javaapi.CollectionConverters
    return converters.asScala(spark._jvm.java.util.ArrayList(items)).toSeq()


@api
def begin(path: str, read: str | list[str] | None = None, remove: list[str] | None = None,
          add: list[str] | None = None, app: list[Any] | None = None,
          configuration: dict[str, str] | None = None) -> int:  # fmt: skip
    """Start a transaction on the latest snapshot and do its reads now; ``commit`` commits it later.

    :param read: ``"all"`` (the whole table), a predicate such as ``part = 'a'``, or a list of conjuncts.
    :param remove: paths (as in the log) of live files to remove.
    :param add: ``add`` actions as JSON objects (``{"add": {...}}``).
    :param app: ``[appId, version]``: read the app's version now, set it in the commit.
    :param configuration: properties to add to the metadata (a metadata change).
    """
    log = _delta_log(path)
    txn = scala_call(log, "startTransaction")
    action_cls = _module("org.apache.spark.sql.delta.actions.Action")
    actions = [action_cls.fromJson(a) for a in add or []]
    if read == "all":
        txn.filterFiles()
    elif read:
        # A list is the conjuncts of one predicate, as DELETE/UPDATE/MERGE split it before filterFiles.
        table = spark.read.format("delta").load(path)
        conditions = [table.where(r)._jdf.queryExecution().analyzed().condition()
                      for r in ([read] if isinstance(read, str) else read)]  # fmt: skip
        txn.filterFiles(_seq(conditions), False)  # (filters, keepNumRecords)
    if remove:
        files = txn.snapshot().allFiles().collectAsList()
        live = {f.path(): f for f in files}
        actions += [live[p].remove() for p in remove]
    if app:
        txn.txnVersion(app[0])
        actions.append(action_cls.fromJson(json.dumps({"txn": {"appId": app[0], "version": app[1]}})))
    if configuration:
        md = json.loads(txn.metadata().json())
        md["metaData"]["configuration"].update(configuration)
        scala_call(txn, "updateMetadata", action_cls.fromJson(json.dumps(md)))
    handle = len(_txns) + 1
    _txns[handle] = (txn, actions)
    return handle


@api
def commit(handle: int) -> dict[str, Any]:
    """Commit a transaction from ``begin``: ``{"version": v}``, or the conflict Delta Spark raised."""
    txn, actions = _txns.pop(handle)
    op = _module("org.apache.spark.sql.delta.DeltaOperations$ManualUpdate")
    try:
        return {"version": txn.commit(_seq(actions), op)}
    except Exception as exc:
        return {"error": _error_class(exc), "message": _error_message(exc)}


@api
def begin_optimize(path: str, compact: list[str], add: list[str]) -> int:
    """An OPTIMIZE transaction as Delta Spark's ``OptimizeExecutor`` makes one, stopped before its commit:
    on the latest snapshot, ``trackFilesRead`` of the files it compacts (paths as in the log), their
    removes and the ``add`` actions (JSON) with ``dataChange=false``. ``commit_optimize`` commits it."""
    log = _delta_log(path)
    txn = scala_call(log, "startTransaction")
    live = {f.path(): f for f in txn.snapshot().allFiles().collectAsList()}
    files = [live[p] for p in compact]
    txn.trackFilesRead(_seq(files))
    action_cls = _module("org.apache.spark.sql.delta.actions.Action")
    now = spark._jvm.System.currentTimeMillis()
    actions = [action_cls.fromJson(a) for a in add] + [f.removeWithTimestamp(now, False) for f in files]
    handle = len(_txns) + 1
    _txns[handle] = (txn, actions)
    _optimizing[handle] = (path, files)
    return handle


_optimizing: dict[int, tuple[str, list[Any]]] = {}


@api
def commit_optimize(handle: int, retries: int = 10) -> dict[str, Any]:
    """Commit an OPTIMIZE from ``begin_optimize`` as Delta Spark's ``commitAndRetry`` does: on a
    ``ConcurrentModificationException``, start a new transaction and try again while every compacted file
    (path and deletion vector) is still live; else the exception stands."""
    txn, actions = _txns.pop(handle)
    path, files = _optimizing.pop(handle)
    op = _module("org.apache.spark.sql.delta.DeltaOperations$ManualUpdate")
    key = lambda f: (f.path(), None if f.deletionVector() is None else f.deletionVector().uniqueId())  # noqa: E731
    wanted = {key(f) for f in files}
    for _ in range(retries + 1):
        try:
            return {"version": txn.commit(_seq(actions), op)}
        except Exception as exc:
            if "ConcurrentModification" not in _ancestry(exc):
                return {"error": _error_class(exc), "message": _error_message(exc)}
            txn = scala_call(_delta_log(path), "startTransaction")
            live = {key(f) for f in txn.snapshot().allFiles().collectAsList()}
            if not wanted <= live:
                return {"error": _error_class(exc), "message": _error_message(exc)}
            txn.trackFilesRead(_seq(files))
    return {"error": "TooManyRetries", "message": f"{retries} retries"}


def _ancestry(exc: Exception) -> str:
    """The JVM exception's class and its superclasses' names (Delta's conflicts all extend
    java.util.ConcurrentModificationException)."""
    java = getattr(exc, "java_exception", None)
    names, cls = [], java.getClass() if java is not None else None
    while cls is not None:
        names.append(cls.getName())
        cls = cls.getSuperclass()
    return " ".join(names)


def _error_class(exc: Exception) -> str:
    """The JVM exception's class (e.g. ``ConcurrentAppendException``), else the Python one."""
    java = getattr(exc, "java_exception", None)
    return java.getClass().getSimpleName() if java is not None else type(exc).__name__


def _error_message(exc: Exception) -> str:
    """The JVM exception's message (py4j's own first line only says which call failed)."""
    java = getattr(exc, "java_exception", None)
    text = java.getMessage() if java is not None else str(exc)
    return (text or type(exc).__name__)[:600]


@api
def sql_each(queries: list[str], tag: str) -> list[dict[str, Any]]:
    """Run each statement, tagging its commit with userMetadata ``<tag>-<i>``; each outcome (error or not)."""
    key = "spark.databricks.delta.commitInfo.userMetadata"
    out = []
    for i, query in enumerate(queries):
        spark.conf.set(key, f"{tag}-{i}")
        try:
            spark.sql(query).collect()
            out.append({"ok": True})
        except Exception as exc:
            out.append({"ok": False, "error": _error_class(exc), "message": _error_message(exc)})
        finally:
            spark.conf.unset(key)
    return out


@api
def write(path: str, query: str, mode: str = "append", options: dict[str, str] | None = None,
          partition_by: list[str] | None = None) -> None:  # fmt: skip
    """A DataFrame write (``replaceWhere``, ``overwriteSchema`` ... options) of a query's result."""
    writer = spark.sql(query).write.format("delta").mode(mode).options(**(options or {}))
    if partition_by:
        writer = writer.partitionBy(*partition_by)
    writer.save(path)


@api
def conf(settings: dict[str, str | None]) -> None:
    """Set (or, with None, unset) session configuration."""
    for key, value in settings.items():
        if key not in _conf_before:
            _conf_before[key] = spark.conf.get(key, None)
        if value is None:
            spark.conf.unset(key)
        else:
            spark.conf.set(key, value)


@api
def reset() -> list[str]:
    """Undo what the last test module changed (one session serves the modules of a test worker in turn):
    settings back to their values at start, cached tables dropped, no job left running. Returns the keys
    it restored."""
    busy = [job for job, thread in _jobs.items() if thread.is_alive()]
    if busy:
        raise RuntimeError(f"jobs {busy} still run: the session cannot be handed on")
    restored = sorted(_conf_before)
    for key, value in _conf_before.items():
        if value is None:
            spark.conf.unset(key)
        else:
            spark.conf.set(key, value)
    _conf_before.clear()
    _jobs.clear()
    _results.clear()
    spark.catalog.clearCache()
    return restored


# -- the loop -------------------------------------------------------------------------------------------
def _run(req: dict[str, Any]) -> dict[str, Any]:
    try:
        # py4j serves each Python thread on its own JVM thread, where Delta finds no active session.
        spark._jvm.org.apache.spark.sql.SparkSession.setActiveSession(spark._jsparkSession)
        value = API[req["fn"]](*req.get("args", []), **req.get("kwargs", {}))
        return {"ok": True, "value": value}
    except Exception as exc:
        # AnalysisException and py4j errors: the JVM class and message are what the tests match on.
        return {"ok": False, "error": type(exc).__name__, "message": str(exc)[:4000],
                "trace": traceback.format_exc()[-4000:]}  # fmt: skip


def main() -> None:
    global spark
    proto = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)  # the JVM and Spark print to fd 1: keep the protocol stream clean
    lock = threading.Lock()

    def answer(obj: dict[str, Any]) -> None:
        with lock:
            proto.write(json.dumps(obj, default=str) + "\n")

    jars = sorted(glob.glob(os.path.join(sys.argv[1], "*.jar")))
    spark = session(jars, sys.argv[2])
    answer({"id": 0, "ok": True, "value": ping()})
    for line in sys.stdin:
        req = json.loads(line)
        op = req.get("op", "call")
        if op == "call":
            answer({"id": req["id"], **_run(req)})
        elif op == "spawn":
            job = req["id"]

            def work(job: int = job, req: dict[str, Any] = req) -> None:
                _results[job] = _run(req)

            _jobs[job] = threading.Thread(target=work, name=f"job-{job}", daemon=True)
            _jobs[job].start()
            answer({"id": job, "ok": True, "value": job})
        elif op == "poll":
            answer({"id": req["id"], "ok": True, "value": not _jobs[req["job"]].is_alive()})
        elif op == "join":
            job = req["job"]
            _jobs.pop(job).join()
            answer({"id": req["id"], **_results.pop(job)})
        elif op == "stop":
            break
    spark.stop()


if __name__ == "__main__":
    main()
