"""DeltaCreateTableOperator: create a Delta table, or check that the existing one is the table asked for.

Creation is the core's ``DeltaTable.create`` (version 0 with the lowest protocol the table's features
need). With ``exist_ok`` the operator is safe to run at the start of every DAG run: an existing table with
the same columns and partitioning is left alone; one that differs fails the task, naming the difference,
rather than letting the writers that follow commit files of the wrong shape.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import pyarrow as pa
from airflow.sdk import BaseOperator

from airflow_provider_delta.hooks.delta import DeltaHookMixin
from airflow_provider_delta.hooks.secrets import redact_errors
from airflow_provider_delta.log import DeltaTable, InvalidCommitError, TableNotFoundError
from airflow_provider_delta.log.schema.schema import arrow_schema_to_delta
from airflow_provider_delta.ui.links import DeltaTableLink, record_commit

if TYPE_CHECKING:
    from airflow.sdk import Context

    from airflow_provider_delta.log import Snapshot

SchemaLike = pa.Schema | dict[str, Any] | str | Sequence[Sequence[Any]]


def delta_schema(schema: SchemaLike) -> dict[str, Any]:
    """A Delta schema dict ("Schema Serialization Format") from any of the operator's schema forms.

    Accepts a pyarrow schema; a Delta schema dict or its JSON text (what a rendered template gives); or a
    list of ``(name, type)`` / ``(name, type, nullable)`` where ``type`` is a Delta type name (``long``,
    ``string``, ``timestamp``, ``decimal(10,2)`` ...) or a Delta type dict.
    """
    if isinstance(schema, pa.Schema):
        return arrow_schema_to_delta(schema)
    if isinstance(schema, str):
        schema = json.loads(schema)
    if isinstance(schema, dict):
        if schema.get("type") != "struct" or not isinstance(schema.get("fields"), list):
            raise ValueError(f"schema dict must be a Delta struct type, got {str(schema)[:200]}")
        return schema
    fields = []
    for column in schema:
        name, type_, *rest = column
        nullable = bool(rest[0]) if rest else True
        fields.append({"name": str(name), "type": type_, "nullable": nullable, "metadata": {}})
    if not fields:
        raise ValueError("schema has no columns")
    return {"type": "struct", "fields": fields}


def _shape(schema: dict[str, Any]) -> Any:
    """Type and nullability without field metadata (column mapping ids, comments), for comparison."""
    if isinstance(schema, dict):
        return {k: _shape(v) for k, v in schema.items() if k != "metadata"}
    if isinstance(schema, list):
        return [_shape(v) for v in schema]
    return schema


def _type_text(field: dict[str, Any]) -> str:
    t = field["type"]
    text = t if isinstance(t, str) else json.dumps(_shape(t), separators=(",", ":"))
    return text + ("" if field.get("nullable", True) else " NOT NULL")


def differences(snap: Snapshot, schema: dict[str, Any], partition_by: Sequence[str]) -> list[str]:
    """How the table ``snap`` differs from the requested columns and partitioning (column order and field
    metadata are not compared)."""
    have = {f["name"]: f for f in snap.metadata.schema["fields"]}
    want = {f["name"]: f for f in schema["fields"]}
    out = []
    if missing := [n for n in want if n not in have]:
        out.append(f"column(s) {missing} are not in the table")
    if extra := [n for n in have if n not in want]:
        out.append(f"the table has column(s) {extra} that the schema does not")
    for name in (n for n in want if n in have):
        if _shape(have[name]) != _shape(want[name]):
            out.append(
                f"column {name!r} is {_type_text(have[name])} in the table, {_type_text(want[name])} asked"
            )
    if list(snap.partition_columns) != list(partition_by):
        out.append(f"the table is partitioned by {snap.partition_columns}, not {list(partition_by)}")
    return out


def create_on(
    table: DeltaTable, schema: dict[str, Any], partition_by: list[str], configuration: dict[str, str]
) -> None:
    """Version 0 of ``table`` on the hook's handle (its filesystem keeps an object-storage connection's
    credentials). Raises ``InvalidCommitError`` when version 0 is taken."""
    store = table.store
    DeltaTable.create(
        store.uri, schema, partition_by, configuration, store.storage_options, filesystem=store.fs
    )


class DeltaCreateTableOperator(BaseOperator, DeltaHookMixin):
    """Create a Delta table; with ``exist_ok``, accept an existing table of the same shape.

    Returns (and pushes to XCom) the table's version: 0 when created, the latest when it existed.

    :param table_uri: the table root. Templated.
    :param schema: the columns: a pyarrow schema, a Delta schema dict or its JSON text, or a list of
        ``(name, type)`` / ``(name, type, nullable)`` with Delta type names (``long``, ``string``,
        ``timestamp``, ``decimal(10,2)``). Templated (the dict and list forms render field by field).
    :param partition_by: partition columns. Templated.
    :param configuration: table properties (``delta.*``), e.g. ``{"delta.logRetentionDuration":
        "interval 30 days"}``. Only used when creating. Templated.
    :param exist_ok: when a table exists at ``table_uri``, check its columns and partitioning instead of
        failing; a difference fails the task and names it. Properties are not compared.
    :param delta_conn_id: connection for the table's storage (``None``: no credentials).
    """

    template_fields: Sequence[str] = ("table_uri", "schema", "partition_by", "configuration")
    template_fields_renderers = {"schema": "json", "configuration": "json"}
    operator_extra_links = (DeltaTableLink(),)
    ui_color = "#00add4"

    def __init__(
        self,
        *,
        table_uri: str,
        schema: SchemaLike,
        partition_by: Sequence[str] | None = None,
        configuration: dict[str, str] | None = None,
        exist_ok: bool = True,
        delta_conn_id: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.table_uri = table_uri
        self.schema = schema
        self.partition_by = partition_by
        self.configuration = configuration
        self.exist_ok = exist_ok
        self.delta_conn_id = delta_conn_id

    @redact_errors
    def execute(self, context: Context) -> int:
        table = self.delta_table()
        schema = delta_schema(self.schema)
        partition_by = list(self.partition_by or [])
        existing = self._existing(table)
        if existing is None:
            try:
                create_on(table, schema, partition_by, dict(self.configuration or {}))
                self.log.info("created %s (partitioned by %s) at version 0", self.table_uri, partition_by)
                record_commit(context, self.table_uri, 0, delta_conn_id=self.delta_conn_id,
                              operation="CREATE TABLE")  # fmt: skip
                return 0
            except InvalidCommitError:
                # Another run created it between our look and our commit: check it like any existing one.
                if not self.exist_ok or (existing := self._existing(table)) is None:
                    raise
        if not self.exist_ok:
            raise FileExistsError(f"a Delta table already exists at {self.table_uri} (exist_ok=False)")
        if problems := differences(existing, schema, partition_by):
            raise ValueError(
                f"{self.table_uri} exists but differs from the table asked for: " + "; ".join(problems)
            )
        self.log.info("%s exists at version %d with the same columns and partitioning", self.table_uri,
                      existing.version)  # fmt: skip
        record_commit(context, self.table_uri, existing.version, delta_conn_id=self.delta_conn_id,
                      already_committed=True)  # fmt: skip
        return existing.version

    @staticmethod
    def _existing(table: DeltaTable) -> Snapshot | None:
        try:
            return table.snapshot()
        except TableNotFoundError:
            return None
