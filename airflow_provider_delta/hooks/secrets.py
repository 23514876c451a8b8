"""A connection's secrets, registered with Airflow's secrets masker in every form a library may print them.

Airflow masks a connection's password and the values of its extra whose key names a secret, but only as the
exact strings given. Storage clients print them otherwise: gcsfs puts a token percent-encoded in a URL, a
service-account key reaches it as form-encoded JSON, a ``repr`` doubles backslashes
(``log.redaction`` lists the forms). Here each form of each secret of a connection is registered with
Airflow's own masker (``mask_secret``: the task's, which also tells the supervisor, and the API server's
and scheduler's), so that task logs, the API server's log and anything Airflow redacts hide them.

Only secrets are registered: endpoint URLs, regions, bucket, container and account names stay readable in
errors, so that a user can tell which endpoint failed.
"""

from __future__ import annotations

import contextlib
import functools
import json
from collections.abc import Iterator
from functools import lru_cache
from typing import Any

from airflow_provider_delta.log.base.redaction import is_secret_option, redact, secret_forms, secret_values


def is_secret_name(name: str) -> bool:
    """Whether a value under this option or extra key is a secret (ours, or Airflow's sensitive names)."""
    if is_secret_option(name):
        return True
    try:
        from airflow.sdk._shared.secrets_masker import should_hide_value_for_key
    except ImportError:  # pragma: no cover - an Airflow without the Task SDK's masker
        return False
    return bool(should_hide_value_for_key(name))


def connection_secrets(conn: Any) -> list[str]:
    """The secrets of an Airflow connection: its password and every secret value of its extra."""
    found = [conn.password] if getattr(conn, "password", None) else []
    extra: Any = {}
    with contextlib.suppress(ValueError, TypeError):
        extra = json.loads(conn.extra or "{}")
    found += secret_values(extra, is_secret_name)
    return sorted(set(found))


def option_secrets(options: dict[str, Any]) -> list[str]:
    """The secret values among fsspec storage options (``token``, ``secret``, ``account_key``, ...)."""
    return sorted(set(secret_values(options, is_secret_name)))


@lru_cache(maxsize=256)
def _forms(secret: str) -> tuple[str, ...]:
    return tuple(sorted(secret_forms(secret)))


_REGISTERED: set[str] = set()


def register(secrets: list[str]) -> None:
    """Register every form of each secret with Airflow's masker, once per process: in a task each
    ``mask_secret`` is also a message to the supervisor, and the hook builds options on every call."""
    forms = [form for secret in secrets for form in _forms(secret) if form not in _REGISTERED]
    if not forms:
        return
    _REGISTERED.update(forms)
    from airflow.sdk.log import mask_secret

    for form in forms:
        mask_secret(form)
    # The API server's and the scheduler's logging filters use the core's masker, a separate instance.
    with contextlib.suppress(ImportError):
        from airflow._shared.secrets_masker import mask_secret as core_mask_secret

        for form in forms:
            core_mask_secret(form)


def register_connection(conn: Any) -> list[str]:
    """Register the connection's secrets (see :func:`register`); returns them."""
    secrets = connection_secrets(conn)
    register(secrets)
    return secrets


class StorageError(Exception):
    """A storage client's error whose own message could not be cleared of the connection's secrets: the
    message here is its text with every form of them replaced (the original is not chained)."""


def exception_chain(exc: BaseException) -> Iterator[BaseException]:
    """The exception and its causes (or contexts), each once."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


def scrubbed(exc: BaseException, secrets: list[str]) -> BaseException:
    """``exc`` with every form of ``secrets`` gone from its message and its causes' (their ``args``
    replaced in place, so the type, and what callers catch, stay), or a :class:`StorageError` with the
    redacted text when a message is not made from its ``args``.

    An exception a task raises reaches more than the masked log: ``on_failure_callback``'s
    ``context["exception"]`` (a chat alert, an e-mail), a retry's notes. gcsfs's reads a token
    percent-encoded, which Airflow's masker would only catch in the log."""
    if not secrets:
        return exc
    leaking = False
    for error in exception_chain(exc):
        text = str(error)
        clean = redact(text, secrets)
        if clean == text:
            continue
        with contextlib.suppress(Exception):
            error.args = (clean,)
        if redact(str(error), secrets) != str(error):
            leaking = True
    if leaking:
        replacement = StorageError(redact(f"{type(exc).__name__}: {exc}", secrets))
        replacement.__suppress_context__ = True
        return replacement
    return exc


def redact_errors(method: Any) -> Any:
    """Decorate an operator's or a sensor's ``execute``/``poke``: an exception leaving it carries no form
    of the secrets of the task's connection (``self.delta_conn_id``), see :func:`scrubbed`."""

    @functools.wraps(method)
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return method(self, *args, **kwargs)
        except Exception as exc:
            secrets = _task_secrets(getattr(self, "delta_conn_id", None))
            clean = scrubbed(exc, secrets)
            if clean is exc:
                raise
            raise clean from None

    return wrapper


def _task_secrets(conn_id: str | None) -> list[str]:
    if not conn_id:
        return []
    try:
        from airflow.sdk import BaseHook

        return connection_secrets(BaseHook.get_connection(conn_id))
    except Exception:  # no such connection: that error is the one to see
        return []
