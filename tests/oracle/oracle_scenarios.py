"""Randomised Delta Spark workloads: a table shape and a sequence of Delta Spark operations, from a seed.

A seed picks a *profile* (``seed % len(PROFILES)``), which forces the features and operations that profile
exists to cover, and a random generator that fills in the rest: other table properties, the operations
between the forced ones, and every value written. The same seed gives the same SQL, so a failure reproduces
with ``DELTA_ORACLE_SEEDS=<seed>``.
"""

from __future__ import annotations

import os
import random
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from oracle_client import Oracle

# Features a profile forces; operations it always runs (at random positions among the random ones).
PROFILES: list[dict[str, Any]] = [
    {
        "shape": {"partitioned": True, "column_mapping": "name", "deletion_vectors": True,
                  "change_data_feed": True, "in_commit_timestamps": True, "generated": True, "nested": True,
                  "checkpoint_interval": 3},
        "ops": ["rename_partition", "rename", "drop", "merge", "delete", "restore", "vacuum", "replace_where",
                "app_txn"],
    },
    {
        "shape": {"partitioned": False, "clustered": True, "column_mapping": "id", "v2_checkpoints": True,
                  "v2_top_level": "json", "identity": True, "row_tracking": True, "type_widening": True,
                  "ntz": True, "deletion_vectors": True},
        "ops": ["widen", "rename", "add_column", "drop", "optimize", "merge", "delete", "log_cleanup"],
    },
    {
        "shape": {"partitioned": True, "column_mapping": "none", "deletion_vectors": True,
                  "v2_checkpoints": True, "v2_top_level": "parquet", "type_widening": True,
                  "checkpoint_interval": 4},
        "ops": ["widen", "constraint", "delete", "update", "optimize", "vacuum", "log_cleanup", "restore"],
    },
    {
        "shape": {"partitioned": True, "column_mapping": "none", "deletion_vectors": False,
                  "multipart": True, "change_data_feed": True, "checkpoint_interval": 2},
        "ops": ["enable_ict", "enable_dv", "delete", "merge", "overwrite", "restore", "log_cleanup",
                "app_txn"],
    },
]  # fmt: skip
DEFAULT_SEEDS = [0, 1, 2, 3]
RANDOM_OPS = {  # weights of the operations drawn between the forced ones
    "insert": 6, "delete": 2, "update": 2, "merge": 2, "optimize": 1, "checkpoint": 1,
    "add_column": 1, "app_txn": 1, "replace_where": 1, "overwrite": 1,
}  # fmt: skip


def seeds() -> list[int]:
    """``DELTA_ORACLE_SEEDS``: comma-separated seeds, or ``random`` for four fresh ones; else the defaults."""
    raw = os.environ.get("DELTA_ORACLE_SEEDS", "").strip()
    if raw == "random":
        return [random.randrange(10**6) for _ in range(4)]
    return [int(s) for s in raw.split(",")] if raw else list(DEFAULT_SEEDS)


@dataclass
class Shape:
    partitioned: bool = False
    clustered: bool = False
    column_mapping: str = "none"
    deletion_vectors: bool = False
    change_data_feed: bool = False
    in_commit_timestamps: bool = False
    v2_checkpoints: bool = False
    v2_top_level: str = "parquet"
    multipart: bool = False
    checkpoint_interval: int = 10
    type_widening: bool = False
    identity: bool = False
    generated: bool = False
    row_tracking: bool = False
    ntz: bool = False
    nested: bool = False

    def properties(self) -> dict[str, str]:
        props = {"delta.checkpointInterval": str(self.checkpoint_interval),
                 "delta.logRetentionDuration": "interval 2 days",
                 "delta.deletedFileRetentionDuration": "interval 1 days"}  # fmt: skip
        if self.column_mapping != "none":
            props["delta.columnMapping.mode"] = self.column_mapping
        flags = {
            "delta.enableDeletionVectors": self.deletion_vectors,
            "delta.enableChangeDataFeed": self.change_data_feed,
            "delta.enableInCommitTimestamps": self.in_commit_timestamps,
            "delta.enableTypeWidening": self.type_widening,
            "delta.enableRowTracking": self.row_tracking,
        }
        props.update({k: "true" for k, on in flags.items() if on})
        if self.v2_checkpoints:
            props["delta.checkpointPolicy"] = "v2"
        return props

    def session_conf(self) -> dict[str, str | None]:
        return {
            "spark.databricks.delta.checkpointV2.topLevelFileFormat": self.v2_top_level,
            "spark.databricks.delta.checkpoint.partSize": "3" if self.multipart else None,
        }


def _sql_str(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


@dataclass
class Column:
    role: str
    name: str
    type: str


@dataclass
class Scenario:
    """One table and the Delta Spark operations run on it; ``steps()`` runs them one by one."""

    seed: int
    path: str
    rng: random.Random = field(init=False)
    shape: Shape = field(init=False)
    ops: list[str] = field(init=False)
    columns: list[Column] = field(default_factory=list)
    next_key: int = 1
    version: int = -1
    floor: int = 0  # oldest version RESTORE may go back to (schema changes, VACUUM, log cleanup)
    vacuumed: int = 0  # oldest version whose data files VACUUM kept
    renames: int = 0
    extras: int = 0
    app_version: int = 0
    log: list[str] = field(default_factory=list)
    checks: list[tuple[str, Any, Any]] = field(default_factory=list)  # (what, Delta Spark's, ours)

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)
        profile = PROFILES[self.seed % len(PROFILES)]
        rng = self.rng
        shape = Shape(
            deletion_vectors=rng.random() < 0.5,
            change_data_feed=rng.random() < 0.3,
            checkpoint_interval=rng.choice([2, 3, 5, 10]),
            nested=rng.random() < 0.5,
            ntz=rng.random() < 0.3,
        )
        for key, value in profile["shape"].items():
            setattr(shape, key, value)
        self.shape = shape
        population, weights = zip(*RANDOM_OPS.items(), strict=True)
        ops = rng.choices(population, weights, k=rng.randint(1, 2))
        for forced in profile["ops"]:
            ops.insert(rng.randrange(len(ops) + 1), forced)
        self.ops = ["create", "insert", *ops]

    def __str__(self) -> str:
        return f"seed {self.seed} (profile {self.seed % len(PROFILES)}): {self.shape}"

    # -- the table's columns ----------------------------------------------------------------------------
    def _col(self, role: str) -> Column | None:
        return next((c for c in self.columns if c.role == role), None)

    def _name(self, role: str) -> str:
        col = self._col(role)
        assert col is not None, role
        return f"`{col.name}`"

    def writable(self) -> list[Column]:
        """Columns an INSERT names (identity and generated columns are computed by Delta Spark)."""
        return [c for c in self.columns if c.role not in ("id", "g")]

    def value(self, col: Column, key: int) -> str:
        rng, t = self.rng, col.type
        if col.role == "k":
            return str(key)
        if col.role != "part" and rng.random() < 0.1:
            return f"CAST(NULL AS {t})"
        if col.role == "v":
            big = t == "BIGINT" and rng.random() < 0.5
            return f"CAST({rng.randint(0, 500) + (3_000_000_000 if big else 0)} AS {t})"
        if col.role == "s":
            return f"CAST({_sql_str(rng.choice(['a', 'b b', 'c/d%', 'é', 'x']))} AS {t})"
        if col.role == "amt":
            return f"CAST('{rng.randint(-9999, 99999) / 100:.2f}' AS {t})"
        if col.role in ("ts", "ntz"):
            kind = "TIMESTAMP" if col.role == "ts" else "TIMESTAMP_NTZ"
            return f"{kind}'2024-0{rng.randint(1, 9)}-1{rng.randint(0, 9)} 1{rng.randint(0, 9)}:0{rng.randint(0, 9)}:00.{rng.randint(0, 999999):06d}'"  # noqa: E501
        if col.role == "d":
            return f"DATE'202{rng.randint(0, 5)}-0{rng.randint(1, 9)}-2{rng.randint(0, 8)}'"
        if col.role == "info":
            return f"named_struct('x', {rng.randint(0, 99)}, 'y', {_sql_str(rng.choice(['p', 'q r']))})"
        if col.role == "part":
            if rng.random() < 0.08:
                return "CAST(NULL AS STRING)"
            return _sql_str(rng.choice(["a", "b", "x y", "p=q", "é%"]))
        return f"CAST({rng.randint(0, 50)} AS {t})"  # added columns

    def rows_sql(self, n: int, keys: list[int] | None = None, fixed: dict[str, str] | None = None
                 ) -> tuple[str, str]:  # fmt: skip
        """(column list, VALUES rows) for ``n`` new rows (or for ``keys``); ``fixed``: role -> SQL value."""
        cols = self.writable()
        keys = keys or [self._key() for _ in range(n)]
        fixed = fixed or {}
        names = ", ".join(f"`{c.name}`" for c in cols)
        rows = ", ".join(
            "(" + ", ".join(fixed.get(c.role) or self.value(c, k) for c in cols) + ")" for k in keys
        )
        return names, rows

    def _key(self) -> int:
        self.next_key += 1
        return self.next_key - 1

    def select_sql(self, n: int, keys: list[int] | None = None, fixed: dict[str, str] | None = None) -> str:
        names, rows = self.rows_sql(n, keys, fixed)
        return f"SELECT * FROM VALUES {rows} AS src({names})"

    # -- operations -------------------------------------------------------------------------------------
    def steps(self, oracle: Oracle) -> Iterator[tuple[int, str, str]]:
        """Run the operations; after each, yield (step, op, what ran). ``self.version`` is then current."""
        oracle.call("conf", self.shape.session_conf())
        try:
            for i, op in enumerate(self.ops):
                text = getattr(self, f"op_{op}")(oracle)
                self.version = oracle.call("latest_version", self.path)
                self.log.append(f"step {i} {op} -> v{self.version}: {text}")
                yield i, op, text
        finally:
            oracle.call("conf", {k: None for k in self.shape.session_conf()})

    def _sql(self, oracle: Oracle, query: str) -> str:
        oracle.call("sql", query)
        return query

    def _table(self) -> str:
        return f"delta.`{self.path}`"

    def op_create(self, oracle: Oracle) -> str:
        s = self.shape
        cols = [Column("k", "k", "INT"), Column("v", "v", "INT"), Column("s", "s", "STRING"),
                Column("amt", "amt", "DECIMAL(10,2)"), Column("ts", "ts", "TIMESTAMP"),
                Column("d", "d", "DATE")]  # fmt: skip
        if s.ntz:
            cols.append(Column("ntz", "ntz", "TIMESTAMP_NTZ"))
        if s.nested:
            cols.append(Column("info", "info", "STRUCT<x: INT, y: STRING>"))
        cols.append(Column("part", "part", "STRING"))
        self.columns = cols
        ddl = [f"`{c.name}` {c.type}" + (" NOT NULL" if c.role == "k" else "") for c in cols]
        if s.identity:
            ddl.insert(1, "`id` BIGINT GENERATED ALWAYS AS IDENTITY")
            self.columns.insert(1, Column("id", "id", "BIGINT"))
        if s.generated:
            ddl.append("`g` INT GENERATED ALWAYS AS (k * 2)")
            self.columns.append(Column("g", "g", "INT"))
        layout = "PARTITIONED BY (part)" if s.partitioned else "CLUSTER BY (k)" if s.clustered else ""
        props = ", ".join(f"{_sql_str(k)} = {_sql_str(v)}" for k, v in s.properties().items())
        return self._sql(oracle, f"CREATE TABLE {self._table()} ({', '.join(ddl)}) USING delta {layout} "
                                 f"TBLPROPERTIES ({props})")  # fmt: skip

    def op_insert(self, oracle: Oracle) -> str:
        names, rows = self.rows_sql(self.rng.randint(1, 6))
        return self._sql(oracle, f"INSERT INTO {self._table()} ({names}) VALUES {rows}")

    def op_overwrite(self, oracle: Oracle) -> str:
        query = self.select_sql(self.rng.randint(2, 6))
        oracle.call("write", self.path, query, "overwrite")
        return f"DataFrame overwrite of {query}"

    def op_replace_where(self, oracle: Oracle) -> str:
        if self.shape.partitioned:
            part = self._name("part")
            value = self.rng.choice(["a", "b"])
            pred = f"{part} = '{value}'"
            query = self.select_sql(3, fixed={"part": f"'{value}'"})
        else:
            low = self.rng.randint(1, self.next_key)
            query = self.select_sql(3)
            pred = f"k >= {low}"
        oracle.call("write", self.path, query, "overwrite", {"replaceWhere": pred})
        return f"DataFrame overwrite replaceWhere {pred} of {query}"

    def _some_keys(self, n: int) -> list[int]:
        return sorted(self.rng.sample(range(1, self.next_key), min(n, self.next_key - 1)))

    def op_delete(self, oracle: Oracle) -> str:
        m = self.rng.choice([2, 3, 5])
        return self._sql(oracle, f"DELETE FROM {self._table()} WHERE k % {m} = {self.rng.randrange(m)}")

    def op_update(self, oracle: Oracle) -> str:
        sets = [f"{self._name('v')} = {self._name('v')} + 1"]
        if self._col("s"):
            sets.append(f"{self._name('s')} = 'u'")
        m = self.rng.choice([2, 3, 4])
        return self._sql(oracle, f"UPDATE {self._table()} SET {', '.join(sets)} WHERE k % {m} = 0")

    def op_merge(self, oracle: Oracle) -> str:
        keys = self._some_keys(3) + [self._key() for _ in range(self.rng.randint(1, 3))]
        cols = [f"`{c.name}`" for c in self.writable()]
        v = self._name("v")
        query = (
            f"MERGE INTO {self._table()} t USING ({self.select_sql(0, keys)}) s ON t.k = s.k "
            f"WHEN MATCHED AND s.{v} % 7 = 0 THEN DELETE "
            f"WHEN MATCHED THEN UPDATE SET t.{v} = s.{v} "
            f"WHEN NOT MATCHED THEN INSERT ({', '.join(cols)}) VALUES ({', '.join('s.' + c for c in cols)})"
        )
        return self._sql(oracle, query)

    def op_optimize(self, oracle: Oracle) -> str:
        zorder = " ZORDER BY (k)" if self.shape.partitioned and self.rng.random() < 0.5 else ""
        return self._sql(oracle, f"OPTIMIZE {self._table()}{zorder}")

    def op_restore(self, oracle: Oracle) -> str:
        if self.version - 1 < self.floor:
            return self.op_insert(oracle)
        target = self.rng.randint(self.floor, self.version - 1)
        return self._sql(oracle, f"RESTORE TABLE {self._table()} TO VERSION AS OF {target}")

    def op_vacuum(self, oracle: Oracle) -> str:
        """Before Delta Spark's VACUUM, its DRY RUN and ours must name the same files."""
        from airflow_provider_delta.log import DeltaTable

        self.floor = self.vacuumed = self.version
        listed = oracle.sql(f"VACUUM {self._table()} RETAIN 0 HOURS DRY RUN")
        root = self.path.rstrip("/") + "/"
        delta = sorted(r["path"].removeprefix("file:").removeprefix(root) for r in listed)
        report = DeltaTable(self.path).vacuum(
            retention_hours=0, dry_run=True, enforce_retention_duration=False
        )
        self.checks.append(("VACUUM DRY RUN files", delta, sorted(report.files)))
        return self._sql(oracle, f"VACUUM {self._table()} RETAIN 0 HOURS")

    def _schema_change(self, oracle: Oracle, query: str) -> str:
        self._sql(oracle, query)
        self.floor = self.version + 1
        return query

    def _rename(self, oracle: Oracle, role: str) -> str:
        col = self._col(role)
        assert col is not None
        self.renames += 1
        new = f"{role} renamed {self.renames}"  # a space: only column mapping allows it in Parquet
        query = f"ALTER TABLE {self._table()} RENAME COLUMN `{col.name}` TO `{new}`"
        col.name = new
        return self._schema_change(oracle, query)

    def op_rename(self, oracle: Oracle) -> str:
        roles = [r for r in ("s", "amt", "d", "info") if self._col(r)]
        return self._rename(oracle, self.rng.choice(roles))

    def op_rename_partition(self, oracle: Oracle) -> str:
        return self._rename(oracle, "part")

    def op_drop(self, oracle: Oracle) -> str:
        roles = [c.role for c in self.columns if c.role in ("s", "d", "info") or c.role.startswith("e")]
        col = self._col(self.rng.choice(roles))
        assert col is not None
        self.columns.remove(col)
        return self._schema_change(oracle, f"ALTER TABLE {self._table()} DROP COLUMN `{col.name}`")

    def op_add_column(self, oracle: Oracle) -> str:
        self.extras += 1
        col = Column(f"e{self.extras}", f"e{self.extras}", "INT")
        self.columns.append(col)
        return self._schema_change(oracle, f"ALTER TABLE {self._table()} ADD COLUMNS (`{col.name}` INT)")

    def op_constraint(self, oracle: Oracle) -> str:
        # On k: Delta Spark refuses to change the type of a column a constraint uses (see op_widen).
        query = f"ALTER TABLE {self._table()} ADD CONSTRAINT k_positive CHECK (k > 0)"
        return self._schema_change(oracle, query)

    def op_widen(self, oracle: Oracle) -> str:
        col = self._col("v")
        assert col is not None
        col.type = "BIGINT"
        query = f"ALTER TABLE {self._table()} CHANGE COLUMN `{col.name}` TYPE BIGINT"
        return self._schema_change(oracle, query)

    def _set(self, oracle: Oracle, key: str, value: str) -> str:
        return self._schema_change(
            oracle, f"ALTER TABLE {self._table()} SET TBLPROPERTIES ({_sql_str(key)} = {_sql_str(value)})"
        )

    def op_enable_ict(self, oracle: Oracle) -> str:
        self.shape.in_commit_timestamps = True
        return self._set(oracle, "delta.enableInCommitTimestamps", "true")

    def op_enable_dv(self, oracle: Oracle) -> str:
        self.shape.deletion_vectors = True
        return self._set(oracle, "delta.enableDeletionVectors", "true")

    def op_app_txn(self, oracle: Oracle) -> str:
        self.app_version += 1
        app = self.rng.choice(["app-1", "app-2"])
        query = self.select_sql(2)
        options = {"txnAppId": app, "txnVersion": str(self.app_version)}
        oracle.call("write", self.path, query, "append", options)
        return f"DataFrame append with {options}"

    def op_checkpoint(self, oracle: Oracle) -> str:
        oracle.call("checkpoint", self.path)
        return "checkpoint"

    def op_log_cleanup(self, oracle: Oracle) -> str:
        """Checkpoint, make every log file three days old, then run Delta Spark's metadata cleanup (the
        table keeps two days): versions before the checkpoint go."""
        version = oracle.call("checkpoint", self.path)
        age_log(Path(self.path) / "_delta_log", 3 * 86_400)
        oracle.call("clear_cache")
        oracle.call("cleanup_logs", self.path)
        self.floor = max(self.floor, version)
        return f"checkpoint at {version}, log files aged 3 days, Delta Spark's log cleanup"


def age_log(log_dir: Path, seconds: int) -> None:
    """Move the modification time of every log file back by ``seconds`` (order kept)."""
    for f in log_dir.rglob("*"):
        if f.is_file():
            st = f.stat()
            os.utime(f, ns=(st.st_atime_ns - seconds * 10**9, st.st_mtime_ns - seconds * 10**9))
