"""A ``delta`` connection's storage options, as the fsspec filesystem of the table's scheme takes them.

Users write the keys they know from Airflow's AWS, Google and Azure connections (``region_name``,
``aws_secret_access_key``, ``key_path``, ``keyfile_dict``, ``shared_access_key``...) or from fsspec
(``client_kwargs``, ``anon``...). s3fs, gcsfs and adlfs take only their own, and fail late and obscurely on
anything else (s3fs hands an unknown key to aiobotocore: ``AioSession.__init__() got an unexpected keyword
argument 'region_name'``, before any request). So each scheme has:

- the filesystem's own keys, passed through;
- Airflow connection keys, each mapped to where the filesystem wants it (``region_name`` goes under s3fs's
  ``client_kwargs``);
- keys that belong to another kind of connection (assume-role, Secret Manager look-ups), refused with
  where they belong;
- anything else, refused by name with the keys the scheme takes, before any request.

``docs/connections.md`` lists them; ``tests/airflow/test_storage_options.py`` tries each against moto,
fake-gcs-server and Azurite.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any


class StorageOptionError(ValueError):
    """A connection's storage option that the table's filesystem cannot take."""


@dataclass(frozen=True)
class SchemeOptions:
    """What one scheme's filesystem takes.

    :param native: the filesystem's own keys, passed through as they are.
    :param aliases: Airflow connection keys -> the path of the filesystem's key (``("client_kwargs",
        "region_name")`` puts the value under ``client_kwargs``).
    :param elsewhere: keys that need another kind of connection -> what to use instead.
    """

    filesystem: str
    native: frozenset[str]
    aliases: dict[str, tuple[str, ...]] = field(default_factory=dict)
    elsewhere: dict[str, str] = field(default_factory=dict)

    def accepts(self, name: str) -> bool:
        return name in self.native or name in self.aliases


_AWS_CONNECTION = (
    "is done by Airflow's Amazon provider: use an `aws` connection as delta_conn_id for this table (the "
    "hook then takes the filesystem from Airflow's object storage)"
)
_GOOGLE_CONNECTION = (
    "is read by Airflow's Google provider: use a `google_cloud_platform` connection as delta_conn_id for "
    "this table, or give the key itself as `keyfile_dict` or its file as `key_path`"
)
_AZURE_CONNECTION = "needs Airflow's Microsoft Azure provider: use a `wasb` connection as delta_conn_id"

SCHEMES: dict[str, SchemeOptions] = {
    "s3": SchemeOptions(
        "s3fs",
        frozenset({"key", "secret", "token", "anon", "endpoint_url", "client_kwargs", "config_kwargs",
                   "use_ssl", "requester_pays", "s3_additional_kwargs", "profile", "version_aware",
                   "cache_regions"}),  # fmt: skip
        aliases={
            "region_name": ("client_kwargs", "region_name"),
            "region": ("client_kwargs", "region_name"),
            "verify": ("client_kwargs", "verify"),
            "aws_access_key_id": ("key",),
            "aws_secret_access_key": ("secret",),
            "aws_session_token": ("token",),
            "profile_name": ("profile",),
            "aws_endpoint_url": ("endpoint_url",),
            "host": ("endpoint_url",),
        },
        elsewhere={name: f"assuming a role ({name}) {_AWS_CONNECTION}"
                   for name in ("role_arn", "assume_role_method", "assume_role_kwargs", "external_id",
                                "aws_iam_role", "session_kwargs")},  # fmt: skip
    ),
    "gs": SchemeOptions(
        "gcsfs",
        frozenset({"token", "project", "endpoint_url", "access", "requester_pays", "consistency",
                   "default_location", "version_aware"}),  # fmt: skip
        aliases={
            "project_id": ("project",),
            "key_path": ("token",),
            "keyfile_path": ("token",),
            "keyfile_dict": ("token",),
            "scope": ("access",),
        },
        elsewhere={name: f"{name} {_GOOGLE_CONNECTION}" for name in
                   ("key_secret_name", "key_secret_project_id", "impersonation_chain",
                    "credential_config_file", "idp_issuer_url", "is_anonymous", "num_retries")},  # fmt: skip
    ),
    "abfs": SchemeOptions(
        "adlfs",
        frozenset({"account_name", "account_key", "sas_token", "connection_string", "tenant_id", "client_id",
                   "client_secret", "anon", "account_url"}),  # fmt: skip
        aliases={"shared_access_key": ("account_key",), "blob_endpoint": ("account_url",),
                 "host": ("account_url",)},  # fmt: skip
        elsewhere={name: f"{name} {_AZURE_CONNECTION}" for name in
                   ("managed_identity_client_id", "workload_identity_tenant_id",
                    "use_azure_cli")},  # fmt: skip
    ),
    "file": SchemeOptions("the local filesystem", frozenset()),
    "memory": SchemeOptions("fsspec's memory filesystem", frozenset()),
}

# gcsfs's access levels, from the OAuth scopes Airflow's Google connections name.
_SCOPES = {
    "https://www.googleapis.com/auth/devstorage.read_only": "read_only",
    "https://www.googleapis.com/auth/devstorage.read_write": "read_write",
    "https://www.googleapis.com/auth/devstorage.full_control": "full_control",
    "https://www.googleapis.com/auth/cloud-platform": "full_control",
}


def _nested_set(options: dict[str, Any], path: tuple[str, ...], value: Any) -> None:
    for name in path[:-1]:
        options = options.setdefault(name, {})
    options[path[-1]] = value


def _value(scheme: str, target: str, value: Any, given_as: str) -> Any:
    """A value as the filesystem takes it (gcsfs: a key document as a dict, an access level for a scope)."""
    if scheme == "gs" and target == "token" and isinstance(value, str) and value.lstrip().startswith("{"):
        try:
            return json.loads(value)  # a service-account key pasted as text: gcsfs wants it as a dict
        except ValueError:
            raise StorageOptionError(
                f"storage option {given_as!r} holds text that starts like a JSON key document but is not "
                "valid JSON"
            ) from None
    if scheme == "gs" and target == "access" and isinstance(value, str) and value.startswith("https://"):
        scopes = [s.strip() for s in value.split(",") if s.strip()]
        levels = {_SCOPES.get(s) for s in scopes}
        if None in levels or len(levels) != 1:
            raise StorageOptionError(
                f"storage option {given_as!r}: gcsfs takes one access level (read_only, read_write, "
                f"full_control); the scopes {value!r} name none of them"
            )
        return levels.pop()
    return value


def fsspec_options(scheme: str, given: dict[str, Any], where: str) -> dict[str, Any]:
    """``given`` (a connection's storage options, Airflow's or fsspec's keys) as the filesystem of
    ``scheme`` takes them; raises :class:`StorageOptionError` naming each key it cannot take and where it
    belongs. ``where`` names the connection in messages."""
    spec = SCHEMES.get(scheme)
    if spec is None:
        raise StorageOptionError(f"{where}: no storage options are known for {scheme}:// tables")
    problems = []
    for name in sorted(given):
        if spec.accepts(name):
            continue
        if name in spec.elsewhere:
            problems.append(f"{name!r}: {spec.elsewhere[name]}")
            continue
        others = [f"{s}://" for s, o in SCHEMES.items() if o.accepts(name)]
        if others:
            problems.append(f"{name!r} is an option of {' and '.join(others)} tables, not of {scheme}://")
        else:
            problems.append(f"{name!r} is not an option {spec.filesystem} takes")
    if problems:
        accepted = sorted(spec.native | set(spec.aliases))
        raise StorageOptionError(
            f"{where}: storage option(s) for {scheme}:// tables refused: {'; '.join(problems)}. Accepted: "
            f"{', '.join(accepted) or 'none'} (docs/connections.md)"
        )
    options: dict[str, Any] = {}
    for name, value in given.items():  # the filesystem's own keys first, so that an alias cannot hide one
        if name in spec.native:
            options[name] = dict(value) if isinstance(value, dict) else _value(scheme, name, value, name)
    for name, value in given.items():
        if name in spec.aliases:
            path = spec.aliases[name]
            _nested_set(options, path, _value(scheme, path[-1], value, name))
    if scheme == "abfs" and "account_url" in options:
        return _with_blob_endpoint(options, where)
    return options


def _with_blob_endpoint(options: dict[str, Any], where: str) -> dict[str, Any]:
    """An account URL (a connection's host, as Airflow's ``wasb`` connections have it: Azurite, a
    sovereign cloud, a private endpoint) as adlfs takes it: adlfs builds ``https://<account>.blob...``
    itself, so another endpoint goes in a connection string with the account's key or SAS token."""
    options = dict(options)
    url = str(options.pop("account_url")).rstrip("/")
    if "connection_string" in options:
        raise StorageOptionError(
            f"{where}: give the blob endpoint inside the connection string (BlobEndpoint=...) or as the "
            "account URL, not both"
        )
    protocol, sep, _ = url.partition("://")
    if not sep or protocol not in ("http", "https"):
        raise StorageOptionError(
            f"{where}: the account URL must start with https:// (or http://), not {url!r}"
        )
    parts = [f"DefaultEndpointsProtocol={protocol}"]
    if options.get("account_name"):
        parts.append(f"AccountName={options.pop('account_name')}")
    if options.get("account_key"):
        parts.append(f"AccountKey={options.pop('account_key')}")
    elif options.get("sas_token"):
        parts.append(f"SharedAccessSignature={str(options.pop('sas_token')).lstrip('?')}")
    parts.append(f"BlobEndpoint={url}")
    options["connection_string"] = ";".join(parts) + ";"
    return options
