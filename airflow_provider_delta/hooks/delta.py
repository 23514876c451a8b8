"""DeltaHook: turns an Airflow connection into a Delta table handle. It owns all I/O set-up.

Credentials come from connections, never from DAG code: either a ``delta`` connection whose fields and
extra hold storage options (fsspec's keys or the ones Airflow's AWS, Google and Azure connections use,
mapped per scheme by ``hooks.storage_options``; anything else is refused by name), or any connection
Airflow's object storage knows for the table's scheme (``airflow.sdk.io``: e.g. ``aws_default`` with the
Amazon provider installed). A connection's extra is never passed through whole, and its secrets are
registered with Airflow's secrets masker in every form a storage client may print them (``hooks.secrets``).

The connection form (labels, placeholders, the ``region_name`` and ``tables`` fields) is declared in
``get_provider_info`` (``conn-fields`` / ``ui-field-behaviour``), as in-tree providers do since Airflow 3.2;
the form's Test button calls :meth:`DeltaHook.test_connection`.
"""

from __future__ import annotations

import json
from functools import cached_property
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from airflow.sdk import BaseHook

from airflow_provider_delta.extras import require_for_uri
from airflow_provider_delta.hooks.changes import (
    ChangeBound,
    ChangesProcessor,
    ConsumedChanges,
    ProgressStore,
    consume_changes,
)
from airflow_provider_delta.hooks.secrets import (
    connection_secrets,
    option_secrets,
    register,
    register_connection,
)
from airflow_provider_delta.hooks.storage_options import SCHEMES, fsspec_options
from airflow_provider_delta.log import DeltaTable
from airflow_provider_delta.log.base.redaction import redact

if TYPE_CHECKING:
    import pyarrow as pa

    from airflow_provider_delta.log import CommitResult

_ALIASES = {"s3a": "s3", "gcs": "gs", "az": "abfs", "abfss": "abfs", "local": "file", "": "file"}
# Connection fields mapped onto storage options, per scheme.
_FIELDS = {
    "s3": {"login": "key", "password": "secret"},
    "abfs": {"login": "account_name", "password": "account_key"},
    "gs": {"password": "token"},
}


def scheme_of(uri: str) -> str:
    scheme = urlsplit(str(uri)).scheme.lower()
    return _ALIASES.get(scheme, scheme)


class DeltaHook(BaseHook):
    """Delta Lake tables through an Airflow connection.

    :param delta_conn_id: a ``delta`` connection, any object-storage connection Airflow knows for the
        table's scheme, or ``None`` for no credentials (local tables, or the environment's defaults).
    """

    conn_name_attr = "delta_conn_id"
    default_conn_name = "delta_default"
    conn_type = "delta"
    hook_name = "Delta Lake"

    def __init__(self, delta_conn_id: str | None = default_conn_name, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.delta_conn_id = delta_conn_id

    def storage_options(self, uri: str) -> dict[str, Any]:
        """The fsspec storage options for ``uri`` from a ``delta`` connection: its fields, and the keys of
        its extra's ``storage_options`` (fsspec's or Airflow's, mapped by ``hooks.storage_options``; any
        other key is refused by name before any request). Every secret among them is registered with
        Airflow's masker in each form a storage client may print it (``hooks.secrets``)."""
        if not self.delta_conn_id:
            return {}
        conn = self.get_connection(self.delta_conn_id)
        scheme = scheme_of(uri)
        given = dict((conn.extra_dejson or {}).get("storage_options") or {})
        if scheme == "s3" and (region := extra_field(conn, "region_name")):
            given.setdefault("region_name", region)
        for name, option in _FIELDS.get(scheme, {}).items():
            if value := getattr(conn, name, None):
                given.setdefault(option, value)
        if conn.host and scheme == "abfs" and "connection_string" not in given:
            given.setdefault("account_url", conn.host)  # a blob endpoint, as Airflow's wasb connections
        options = fsspec_options(scheme, given, f"connection {self.delta_conn_id!r}")
        if conn.host and scheme == "s3":
            options.setdefault("client_kwargs", {})["endpoint_url"] = conn.host
        register(sorted(set(connection_secrets(conn)) | set(option_secrets(options))))
        return options

    def get_table(self, uri: str) -> DeltaTable:
        """A :class:`DeltaTable` for ``uri`` with this hook's credentials.

        Raises :class:`~airflow_provider_delta.extras.MissingExtraError` when the URI's filesystem is an
        extra that is not installed (``s3://`` without ``airflow-provider-delta[s3]``), and
        :class:`~airflow_provider_delta.hooks.storage_options.StorageOptionError` for a storage option the
        filesystem cannot take.
        """
        require_for_uri(uri)
        if not self.delta_conn_id:
            return DeltaTable(uri)
        conn = self.get_connection(self.delta_conn_id)
        if conn.conn_type == "delta":
            return DeltaTable(uri, storage_options=self.storage_options(uri))
        # Any other connection: let Airflow's object storage build the filesystem for the scheme.
        from airflow.sdk.io.fs import get_fs

        register_connection(conn)
        return DeltaTable(uri, filesystem=get_fs(urlsplit(uri).scheme or "file", conn_id=self.delta_conn_id))

    def secrets(self) -> list[str]:
        """The connection's secrets (registered with the masker): what a page or a message that does not
        pass through a masked log must redact (``log.redaction.redact``)."""
        if not self.delta_conn_id:
            return []
        return register_connection(self.get_connection(self.delta_conn_id))

    # -- rows (the core's Arrow scan and writer) ---------------------------------------------------------
    def read_rows(
        self,
        uri: str,
        columns: list[str] | None = None,
        filter: Any = None,
        *,
        version: int | None = None,
        timestamp: Any = None,
    ) -> pa.Table:
        """The table's rows (at ``version``/``timestamp``; latest by default) as a ``pyarrow.Table``;
        ``filter``: SQL text, DNF tuples or a ``pyarrow.compute.Expression`` (files skipped by partition
        values and statistics first)."""
        return self.get_table(uri).scan(columns, filter, version=version, timestamp=timestamp).to_table()

    def read_changes(
        self,
        uri: str,
        start: Any = None,
        end: Any = None,
        columns: list[str] | None = None,
        filter: Any = None,
        *,
        starting_timestamp: Any = None,
        ending_timestamp: Any = None,
    ) -> pa.Table:
        """The rows versions ``start``..``end`` (latest by default) changed, as Delta Spark's
        ``table_changes`` gives them: the table's columns and ``_change_type``, ``_commit_version``,
        ``_commit_timestamp`` (``DeltaTable.changes``). Bounds are versions or timestamps
        (``starting_timestamp=`` / ``ending_timestamp=`` take ms since the epoch too); for a range a
        sensor or an asset event hands on, exactly once, see :meth:`consume_changes`."""
        return self.get_table(uri).changes(start, end, starting_timestamp=starting_timestamp,
                                           ending_timestamp=ending_timestamp, columns=columns,
                                           filter=filter).to_table()  # fmt: skip

    def consume_changes(
        self,
        source_uri: str,
        app_id: str,
        process: ChangesProcessor,
        *,
        sink_uri: str | None = None,
        progress: ProgressStore | None = None,
        upto: ChangeBound = None,
        first_version: int = 0,
        columns: list[str] | None = None,
        filter: Any = None,
        write_options: dict[str, Any] | None = None,
    ) -> ConsumedChanges:
        """Read the changes of ``source_uri`` after this consumer's recorded progress up to ``upto``, hand
        them to ``process`` and record the progress exactly once: as the app transaction ``app_id`` of
        ``sink_uri`` in the commit of the rows ``process`` returns, or in a state store (``progress=``).
        Pass exactly one of ``sink_uri`` and ``progress``. See ``hooks.changes``.

        :param source_uri: the table whose changes are read (change data feed on, or appends only).
        :param app_id: the consumer's name: its progress is the sink's app transaction ``app_id``, or the
            state store key ``delta_consumer/<app_id>``.
        :param process: called once with the change rows (the source's columns, ``_change_type``,
            ``_commit_version``, ``_commit_timestamp``); with ``sink_uri`` it returns the rows to append
            (pyarrow, pandas, Polars).
        :param sink_uri: the table the consumer writes (created by its first write).
        :param progress: without a sink: ``context["asset_state_store"][asset]`` of the source's asset (an
            inlet of the task), or anything with ``get(key)`` and ``set(key, value)``. At least once.
        :param upto: the last version to read: a version, or the range a sensor or an asset event handed
            on (``change_range`` reads it); the latest by default. Reading always starts after the
            consumer's progress, whatever the range's ``from_version`` (``None`` after an app_id sensor).
        :param first_version: where a consumer with no progress yet starts.
        :param columns: read only these columns of the source (the change columns always come).
        :param filter: a row filter, as ``read_rows`` takes it (SQL text, DNF tuples, an expression).
        :param write_options: more keyword arguments of the sink's ``write_rows`` (``partition_by``,
            ``schema_mode``, ...).
        :return: :class:`~airflow_provider_delta.hooks.changes.ConsumedChanges`: versions read and rows, or
            ``already_committed`` when the range asked for was consumed before, or nothing new.
        """
        return consume_changes(self, source_uri, app_id, process, sink_uri=sink_uri, progress=progress,
                               upto=upto, first_version=first_version, columns=columns, filter=filter,
                               write_options=write_options)  # fmt: skip

    def read_version_range(
        self,
        uri: str,
        start_version: int,
        end_version: int | None = None,
        columns: list[str] | None = None,
        filter: Any = None,
    ) -> pa.Table:
        """The rows the commits ``start_version``..``end_version`` appended (the table's columns only):
        the input of an incremental task over an append-only table. A range that deleted or rewrote rows
        raises ``RowsChangedError``; :meth:`read_changes` reads such ranges."""
        from airflow_provider_delta.log.base.errors import RowsChangedError

        changes = self.get_table(uri).changes(start_version, end_version, columns=columns, filter=filter)
        version = changes.removes_rows()
        if version is not None:
            operation = changes.versions[version - changes.start].operation or "an unknown operation"
            raise RowsChangedError(
                f"version {version} of {uri} ({operation}) removed or rewrote rows, so the rows versions "
                f"{changes.start}..{changes.end} added are not all that changed; read_changes reads them",
                version=version,
            )
        rows = changes.to_table()
        return rows.select(rows.column_names[: len(rows.column_names) - 3])

    def write_rows(self, uri: str, data: Any, **options: Any) -> CommitResult:
        """Write rows (pyarrow, pandas, Polars...) as one commit; ``app_id``/``app_version`` make it
        exactly-once. See ``airflow_provider_delta.log.writes.write_rows.write_rows`` for the options."""
        return self.get_table(uri).write(rows_of(data), **options)

    def tables(self) -> list[str]:
        """The table URIs the connection names in its ``tables`` field (for the Delta view and the Test
        button): comma- or newline-separated, or a JSON list."""
        if not self.delta_conn_id:
            return []
        return split_tables(extra_field(self.get_connection(self.delta_conn_id), "tables"))

    def test_connection(self) -> tuple[bool, str]:
        """The connection form's Test button: build the storage options, then read the latest version of
        each table the connection names. Messages name the table and the error, never a credential."""
        try:
            tables = self.tables()
            if not tables:
                return self._test_fields()
            seen = []
            for uri in tables:
                seen.append(f"{uri} at version {self.get_table(uri).version()}")
        except Exception as exc:  # the form shows the message; every backend fails its own way
            return False, redact(f"{type(exc).__name__}: {exc}", self.secrets())
        return True, "read " + "; ".join(seen)

    def _test_fields(self) -> tuple[bool, str]:
        """Without tables to read: which schemes accept the connection's storage options."""
        conn = self.get_connection(self.delta_conn_id)
        given = set((conn.extra_dejson or {}).get("storage_options") or {})
        schemes = [s for s, spec in SCHEMES.items() if all(map(spec.accepts, given)) and s != "memory"]
        if not schemes:
            return False, f"storage option(s) {', '.join(sorted(given))} are allowed for no table scheme"
        return True, (
            f"the connection's fields are valid for {', '.join(f'{s}://' for s in schemes)} tables; name "
            "tables in its 'Tables' field to test reading them"
        )


def rows_of(data: Any) -> Any:
    """XCom-shaped rows (a list of dicts, or a dict of columns) as a pyarrow Table; anything else (pyarrow,
    pandas, Polars, an Arrow C stream) is passed to the writer as it is."""
    import pyarrow as pa

    if isinstance(data, list):
        return pa.Table.from_pylist(data)
    if isinstance(data, dict):
        return pa.table(data)
    return data


def extra_field(conn: Any, name: str) -> Any:
    """A form field's value from the connection's extra (also under the older ``extra__delta__`` name)."""
    extra = conn.extra_dejson or {}
    value = extra.get(name)
    return value if value not in (None, "") else extra.get(f"extra__delta__{name}")


def split_tables(value: Any) -> list[str]:
    """Table URIs from a ``tables`` field: a list, or text separated by commas or new lines."""
    if not value:
        return []
    if isinstance(value, str):
        text = value.strip()
        value = json.loads(text) if text.startswith("[") else text.replace(",", "\n").splitlines()
    return [str(v).strip().rstrip("/") for v in value if str(v).strip()]


class DeltaHookMixin:
    """One ``DeltaHook`` per instance, built one way, for the operators, the sensor and the triggers (as
    Airflow's ``AwsBaseOperator`` and ``GoogleCloudBaseOperator`` cache theirs): the ``hook`` of anything
    that names a table (``table_uri``) and its connection (``delta_conn_id``).

    The hook is cached: it depends only on ``delta_conn_id``, which is not templated, so building it before
    or after rendering gives the same hook. The table handle is not cached: ``table_uri`` is templated, and a
    handle is cheap next to the connection look-up the hook does.
    """

    delta_conn_id: str | None
    table_uri: str

    @cached_property
    def hook(self) -> DeltaHook:
        """The one ``DeltaHook`` of this instance (``delta_conn_id``; ``None``: no credentials)."""
        return DeltaHook(self.delta_conn_id)

    def delta_table(self) -> DeltaTable:
        """The table at ``table_uri`` (as rendered) with the hook's credentials."""
        return self.hook.get_table(self.table_uri)

    def table_storage_options(self) -> dict[str, Any]:
        """The fsspec storage options of ``table_uri`` (``{}`` without a connection): what Spark is given."""
        return self.hook.storage_options(self.table_uri)
