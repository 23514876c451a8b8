"""Our view of a table next to Delta Spark's, field by field, in one comparable shape.

Delta Spark's side comes from ``server.snapshot`` (its own ``Snapshot`` of a version, through the JVM), its
DataFrame reader, ``DESCRIBE DETAIL`` and ``DESCRIBE HISTORY``; ours from the core (``DeltaTable``) and our
Spark reader (``airflow_provider_delta.spark.read``). Rows are compared as Spark's JSON of each row, sorted,
which both Spark versions produce the same way.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote

from oracle_client import Oracle, OracleError

from airflow_provider_delta.log import DeltaError, DeltaTable, VersionNotFoundError


def dv_id(dv: dict[str, Any] | None) -> str | None:
    """A deletion vector as Delta Spark's snapshot query in ``server.snapshot`` spells it."""
    if not dv:
        return None
    offset = "" if dv.get("offset") is None else str(dv["offset"])
    return "|".join([dv["storageType"], dv["pathOrInlineDv"], offset, str(dv["cardinality"])])


def _metadata(md: dict[str, Any]) -> dict[str, Any]:
    out = {k: v for k, v in md.items() if v is not None}
    out["schema"] = json.loads(out.pop("schemaString"))
    out.setdefault("format", {"provider": "parquet", "options": {}})
    out["format"].setdefault("options", {})
    return out


def _protocol(p: dict[str, Any]) -> dict[str, Any]:
    return {k: sorted(v) if isinstance(v, list) else v for k, v in p.items() if v is not None}


def normalise(state: dict[str, Any], *, log_paths: bool) -> dict[str, Any]:
    """``log_paths``: paths as the log spells them (URI-encoded, as Delta Spark's snapshot returns them),
    decoded here; ours are decoded already."""
    return {
        "version": state["version"],
        "timestamp": state["timestamp"],
        "protocol": _protocol(state["protocol"]),
        "metadata": _metadata(state["metadata"]),
        "files": sorted((unquote(p) if log_paths else p, dv) for p, dv in state["files"]),
        "txns": dict(state["txns"]),
        "domains": {k: v["configuration"] for k, v in state["domains"].items()},
    }


def ours(path: str, version: int | None = None) -> dict[str, Any]:
    """The core's snapshot in the shape of ``server.snapshot``."""
    snap = DeltaTable(path).snapshot(version)
    files = snap.files.select(["path", "deletionVector"]).to_pylist()
    return normalise(
        {
            "version": snap.version,
            "timestamp": snap.timestamp,
            "protocol": snap.protocol.to_json(),
            "metadata": snap.metadata.to_json(),
            "files": [(f["path"], dv_id(f["deletionVector"])) for f in files],
            "txns": snap.app_transactions,
            "domains": {
                k: {"configuration": d.configuration}
                for k, d in snap.domain_metadata.items()
                if not d.removed
            },
        },
        log_paths=False,
    )


def rows_json(df: Any) -> list[str]:
    """Sorted JSON of every row (``to_json(struct(*))``, nulls left out), as ``server.rows`` makes them."""
    from pyspark.sql import functions as F

    return sorted(r[0] for r in df.select(F.to_json(F.struct("*"))).collect())


def our_rows(spark: Any, path: str, version: int | None = None) -> list[str]:
    from airflow_provider_delta.spark import read

    return rows_json(read(spark, path, version=version))


@dataclass
class Mismatches:
    """Differences found in one scenario, each with where it happened; asserted empty at the end."""

    context: str
    found: list[str] = field(default_factory=list)

    def diff(self, where: str, field_name: str, delta: Any, mine: Any) -> None:
        if delta != mine:
            self.found.append(f"{where}: {field_name}: Delta Spark={_short(delta)} ours={_short(mine)}")

    def add(self, text: str) -> None:
        self.found.append(text)

    def check(self) -> None:
        if self.found:
            lines = "\n  ".join(self.found[:25])
            more = f"\n  ... and {len(self.found) - 25} more" if len(self.found) > 25 else ""
            raise AssertionError(f"{self.context}: {len(self.found)} mismatch(es) with Delta Spark:\n  "
                                 f"{lines}{more}")  # fmt: skip


def _short(value: Any, limit: int = 600) -> str:
    text = json.dumps(value, default=str, sort_keys=True) if not isinstance(value, str) else value
    return text if len(text) <= limit else text[:limit] + "..."


def compare_state(m: Mismatches, where: str, delta: dict[str, Any], mine: dict[str, Any]) -> None:
    for key in ("version", "timestamp", "protocol", "metadata", "files", "txns", "domains"):
        m.diff(where, key, delta[key], mine[key])


def compare_versions(m: Mismatches, oracle: Oracle, path: str, versions: list[int], where: str) -> list[int]:
    """Log-level state of each version (time travel): both rebuild it identically, or both refuse. Delta
    Spark rebuilds them while we do; returns the versions both read."""
    job = oracle.spawn("snapshots", path, versions)
    mine: dict[int, dict[str, Any] | Exception] = {}
    for v in versions:
        try:
            mine[v] = ours(path, v)
        except DeltaError as exc:
            mine[v] = exc
    readable = []
    for v, delta in zip(versions, oracle.join(job), strict=True):
        at = f"{where} v{v}"
        if isinstance(delta, str) and isinstance(mine[v], Exception):
            continue
        if isinstance(delta, str):
            m.add(f"{at}: ours reads version {v}, Delta Spark refuses: {delta}")
        elif isinstance(mine[v], Exception):
            m.add(f"{at}: Delta Spark reads version {v}, ours raises {type(mine[v]).__name__}: {mine[v]}")
        else:
            compare_state(m, at, normalise(delta, log_paths=True), mine[v])
            readable.append(v)
    return readable


def compare_rows(
    m: Mismatches, oracle: Oracle, spark: Any, path: str, version: int | None, where: str
) -> None:
    """Rows at ``version`` through Delta Spark and through our Spark reader; both may only fail together."""
    try:
        delta: list[str] | None = oracle.call("rows", path, version)
    except OracleError:
        delta = None
    _compare_rows(m, delta, _try_our_rows(spark, path, version), version, where)


def _try_our_rows(spark: Any, path: str, version: int | None) -> list[str] | Exception:
    try:
        return our_rows(spark, path, version)
    except Exception as exc:  # our reader's task failure arrives as a Spark (Python or JVM) exception
        return exc


def _compare_rows(
    m: Mismatches, delta: list[str] | None, mine: list[str] | Exception, version: int | None, where: str
) -> None:
    if isinstance(mine, Exception):
        if delta is not None:
            m.add(f"{where}: Delta Spark reads the rows of version {version}, ours fails: "
                  f"{type(mine).__name__}: {str(mine)[:300]}")  # fmt: skip
        return
    if delta is None:
        m.add(f"{where}: ours reads the rows of version {version}, Delta Spark fails")
        return
    if delta != mine:
        only_delta = sorted(set(delta) - set(mine))[:5]
        only_ours = sorted(set(mine) - set(delta))[:5]
        m.add(f"{where}: rows at version {version} differ ({len(delta)} vs {len(mine)}): only Delta Spark "
              f"{only_delta}; only ours {only_ours}")  # fmt: skip


def compare_snapshot(m: Mismatches, oracle: Oracle, path: str, version: int, where: str) -> None:
    """The latest version's log-level state only (Delta Spark's snapshot against our core's): what a
    caller checks after every operation when it reads the rows another way and compares the rest of
    :func:`compare_step` once, at the end."""
    job = oracle.spawn("snapshot", path)
    try:
        mine = ours(path, version)
    except DeltaError as exc:
        oracle.join(job)
        m.add(f"{where}: Delta Spark reads version {version}, ours raises {type(exc).__name__}: {exc}")
        return
    compare_state(m, where, normalise(oracle.join(job), log_paths=True), mine)


def compare_step(m: Mismatches, oracle: Oracle, spark: Any, path: str, version: int, where: str) -> None:
    """Everything about the latest version, ``version``: Delta Spark's snapshot, ``DESCRIBE DETAIL``,
    ``inputFiles()`` and rows against our core and reader. Delta Spark works while ours does (two JVMs)."""
    job = oracle.spawn("view", path)
    try:
        mine: dict[str, Any] | Exception = ours(path, version)
    except DeltaError as exc:
        mine = exc
    mine_rows = _try_our_rows(spark, path, version)
    view = oracle.join(job)
    if isinstance(mine, Exception):
        m.add(f"{where}: Delta Spark reads version {version}, ours raises {type(mine).__name__}: {mine}")
        return
    compare_state(m, where, normalise(view["snapshot"], log_paths=True), mine)
    compare_detail(m, view["detail"], DeltaTable(path).snapshot(version), where)
    # inputFiles() gives Hadoop path strings: decoded already.
    delta_files = sorted(f.removeprefix("file:") for f in view["input_files"])
    m.diff(where, "inputFiles", delta_files, sorted(f"{path.rstrip('/')}/{p}" for p, _ in mine["files"]))
    _compare_rows(m, view["rows"], mine_rows, version, where)


def compare_detail(m: Mismatches, detail: dict[str, Any], snap: Any, where: str) -> None:
    """``DESCRIBE DETAIL`` (Delta Spark's public view of the latest version) against our snapshot."""
    from airflow_provider_delta.log.features.protocol import reader_features, writer_features

    features = set(reader_features(snap.protocol)) | set(writer_features(snap.protocol))
    m.diff(where, "DETAIL id", detail["id"], snap.metadata.id)
    m.diff(where, "DETAIL numFiles", detail["numFiles"], snap.num_files)
    m.diff(where, "DETAIL sizeInBytes", detail["sizeInBytes"], sum(snap.files.column("size").to_pylist()))
    m.diff(where, "DETAIL partitionColumns", detail["partitionColumns"], snap.partition_columns)
    m.diff(where, "DETAIL properties", detail["properties"], snap.configuration)
    m.diff(where, "DETAIL minReaderVersion", detail["minReaderVersion"], snap.protocol.min_reader_version)
    m.diff(where, "DETAIL minWriterVersion", detail["minWriterVersion"], snap.protocol.min_writer_version)
    m.diff(where, "DETAIL tableFeatures", sorted(detail["tableFeatures"]), sorted(features))


def _param(value: Any) -> str | None:
    return value if value is None or isinstance(value, str) else json.dumps(value, separators=(",", ":"))


def compare_history(m: Mismatches, oracle: Oracle, path: str, where: str) -> list[int]:
    """``DESCRIBE HISTORY`` against our ``history()``: versions, timestamps and the commitInfo fields.

    Returns the history timestamps, for the time-travel checks."""
    delta = oracle.call("history", path)
    mine = DeltaTable(path).history()
    m.diff(where, "history versions", [h["version"] for h in delta], [h.version for h in mine])
    for d, o in zip(delta, mine, strict=False):
        at = f"{where} history v{d['version']}"
        info = o.commit_info
        m.diff(at, "timestamp", d["ts"], o.timestamp)
        m.diff(at, "operation", d["operation"], o.operation)
        m.diff(at, "operationParameters", d.get("operationParameters") or {},
               {k: _param(v) for k, v in (info.get("operationParameters") or {}).items()})  # fmt: skip
        for key in ("readVersion", "isolationLevel", "isBlindAppend", "userMetadata", "engineInfo"):
            m.diff(at, key, d.get(key), info.get(key))
        m.diff(at, "operationMetrics", d.get("operationMetrics") or {},
               {k: str(v) for k, v in (info.get("operationMetrics") or {}).items()})  # fmt: skip
    return [h["ts"] for h in delta]


def compare_time_travel(m: Mismatches, oracle: Oracle, path: str, timestamps: list[int], where: str) -> None:
    """For each commit timestamp t: t-1, t and t+1 pick the same version in Delta Spark and in ours."""
    table = DeltaTable(path)
    probes = sorted({t + d for t in timestamps for d in (-1, 0, 1)})
    for t in probes:
        delta = oracle.call("version_at", path, t)
        try:
            mine: int | None = table.version_at(t)
        except VersionNotFoundError:
            mine = None
        m.diff(f"{where} timestamp {t}", "version_at", delta, mine)
