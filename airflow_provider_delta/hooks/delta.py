"""DeltaHook: turns an Airflow connection into a Delta table handle. It owns all I/O set-up.

Credentials come from connections, never from DAG code: either a ``delta`` connection whose fields and
extra hold an explicit allowlist of storage options, or any connection Airflow's object storage knows for
the table's scheme (``airflow.sdk.io``: e.g. ``aws_default`` with the Amazon provider installed). A
connection's extra is never passed through whole, and credential values are registered with Airflow's
secrets masker so they cannot reach task logs.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from airflow.sdk import BaseHook
from airflow.sdk.log import mask_secret

from airflow_provider_delta.log import DeltaTable

# Per scheme, the storage options a ``delta`` connection may set, and which of them are secrets.
ALLOWED_OPTIONS: dict[str, frozenset[str]] = {
    "s3": frozenset(
        {"key", "secret", "token", "anon", "endpoint_url", "region_name", "client_kwargs", "config_kwargs",
         "use_ssl", "requester_pays", "s3_additional_kwargs", "profile"}
    ),  # fmt: skip
    "gs": frozenset({"token", "project", "endpoint_url", "access", "requester_pays"}),
    "abfs": frozenset(
        {"account_name", "account_key", "sas_token", "connection_string", "tenant_id", "client_id",
         "client_secret", "anon"}
    ),  # fmt: skip
    "file": frozenset(),
    "memory": frozenset(),
}
_ALIASES = {"s3a": "s3", "gcs": "gs", "az": "abfs", "abfss": "abfs", "local": "file", "": "file"}
SECRET_OPTIONS = frozenset(
    {"secret", "token", "account_key", "sas_token", "connection_string", "client_secret"}
)
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

    @classmethod
    def get_ui_field_behaviour(cls) -> dict[str, Any]:
        return {
            "hidden_fields": ["schema", "port"],
            "relabeling": {
                "login": "Access key / account name",
                "password": "Secret / account key / token",
                "host": "Endpoint URL (optional)",
            },
            "placeholders": {
                "extra": '{"storage_options": {"region_name": "us-east-1"}}',
                "host": "http://127.0.0.1:9000",
            },
        }

    def storage_options(self, uri: str) -> dict[str, Any]:
        """Allowlisted storage options for ``uri`` from a ``delta`` connection."""
        if not self.delta_conn_id:
            return {}
        conn = self.get_connection(self.delta_conn_id)
        scheme = scheme_of(uri)
        allowed = ALLOWED_OPTIONS.get(scheme)
        if allowed is None:
            raise ValueError(f"DeltaHook: no storage-option allowlist for scheme {scheme!r} of {uri}")
        options: dict[str, Any] = {}
        for field, option in _FIELDS.get(scheme, {}).items():
            if value := getattr(conn, field, None):
                options[option] = value
        given = (conn.extra_dejson or {}).get("storage_options") or {}
        rejected = sorted(set(given) - allowed)
        if rejected:
            raise ValueError(
                f"connection {self.delta_conn_id!r}: storage option(s) {', '.join(rejected)} are not "
                f"allowed for {scheme}:// tables (allowed: {', '.join(sorted(allowed)) or 'none'})"
            )
        options.update(given)
        if conn.host and scheme == "s3":
            options.setdefault("client_kwargs", {})["endpoint_url"] = conn.host
        if scheme == "s3" and (region := (conn.extra_dejson or {}).get("region_name")):
            options.setdefault("client_kwargs", {})["region_name"] = region
        for name, value in options.items():
            if name in SECRET_OPTIONS and isinstance(value, str):
                mask_secret(value, name)
        if conn.password:
            mask_secret(conn.password)
        return options

    def get_table(self, uri: str) -> DeltaTable:
        """A :class:`DeltaTable` for ``uri`` with this hook's credentials."""
        if not self.delta_conn_id:
            return DeltaTable(uri)
        conn = self.get_connection(self.delta_conn_id)
        if conn.conn_type == "delta":
            return DeltaTable(uri, storage_options=self.storage_options(uri))
        # Any other connection: let Airflow's object storage build the filesystem for the scheme.
        from airflow.sdk.io.fs import get_fs

        return DeltaTable(uri, filesystem=get_fs(urlsplit(uri).scheme or "file", conn_id=self.delta_conn_id))

    def test_connection(self) -> tuple[bool, str]:
        return True, f"connection {self.delta_conn_id!r} builds storage options"
