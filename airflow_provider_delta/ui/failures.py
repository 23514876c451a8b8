"""What a page says when the storage fails: a named, stable message per kind of failure.

Storage clients' own messages are kept off pages: they hold request URLs and bodies, and with them
credentials in forms no masker can be sure to know (gcsfs's token-info URL carries the token
percent-encoded, a service-account key form-encoded). Each fsspec backend fails its own way (s3fs raises
``PermissionError`` or botocore's errors, gcsfs ``requests``/``google.auth`` errors, adlfs the Azure SDK's),
so the kind is read from the exception's type, its HTTP status and its causes, never from text that could
be shown. The message names the table and the connection, both safe; the detail goes to the log, redacted.
"""

from __future__ import annotations

from airflow_provider_delta.hooks.secrets import exception_chain

_AUTH_WORDS = (
    "AccessDenied", "Forbidden", "AuthenticationFailed", "AuthorizationFailure", "InvalidAccessKeyId",
    "SignatureDoesNotMatch", "Unauthorized", "NoCredentials", "PartialCredentials", "RefreshError",
    "ClientAuthenticationError", "CredentialUnavailable", "InvalidToken", "ExpiredToken",
)  # fmt: skip
# Modules whose errors, or whose frames in a traceback, are the sign-in itself failing, even when the cause
# is the network: gcsfs checks a token, or gets one, from Google's OAuth endpoints before any storage
# request; azure.identity asks Microsoft Entra ID; botocore resolves credentials.
_SIGN_IN_MODULES = ("google.auth", "google.oauth2", "gcsfs.credentials", "azure.identity",
                    "botocore.credentials", "aiobotocore.credentials")  # fmt: skip
_UNREACHABLE = (
    "ConnectionError", "EndpointConnectionError", "ClientConnectorError", "ServerDisconnectedError",
    "NameResolutionError", "ServiceRequestError", "ConnectTimeout", "gaierror", "ConnectionRefusedError",
)  # fmt: skip


def _status(exc: BaseException) -> int | None:
    status = getattr(exc, "status_code", None) or getattr(exc, "status", None)
    status = status or getattr(getattr(exc, "response", None), "status_code", None)
    return status if isinstance(status, int) else None


def _names(exc: BaseException) -> list[str]:
    """The exception's class names, with their bases' (a subclass of ConnectionError is one)."""
    return [cls.__name__ for cls in type(exc).__mro__]


def _is_denied(exc: BaseException) -> bool:
    if isinstance(exc, PermissionError) or _status(exc) in (401, 403):
        return True
    return any(word in name for name in _names(exc) for word in _AUTH_WORDS)


def _in_sign_in(exc: BaseException) -> bool:
    """Whether the error came from, or passed through, a credentials library."""
    if (type(exc).__module__ or "").startswith(_SIGN_IN_MODULES):
        return True
    frame = exc.__traceback__
    while frame is not None:
        if str(frame.tb_frame.f_globals.get("__name__", "")).startswith(_SIGN_IN_MODULES):
            return True
        frame = frame.tb_next
    return False


def _is_unreachable(exc: BaseException) -> bool:
    return any(name in _UNREACHABLE for name in _names(exc)) or isinstance(exc, TimeoutError)


def storage_failure(exc: BaseException, uri: str, where: str) -> tuple[int, str, str, str]:
    """``(status, heading, message, hint)`` for a page about ``exc`` raised while reading ``uri`` with
    ``where`` (the connection); nothing of the exception's text is used."""
    chain = list(exception_chain(exc))[:10]
    if any(_in_sign_in(e) for e in chain):
        return (
            403,
            "Authentication failed",
            f"could not read the table: authentication failed at {uri} with {where}",
            "Signing in with the connection's credentials failed before any storage request: check them, "
            "and that the API server reaches the provider's sign-in endpoint; the API server's log has "
            "the credentials library's message.",
        )
    if any(_is_denied(e) for e in chain):
        return (
            403,
            "Access denied",
            f"could not read the table: access denied at {uri} with {where}",
            "Check the connection's credentials and the storage's permissions for this table; the API "
            "server's log has the storage client's message.",
        )
    if any(_is_unreachable(e) for e in chain):
        return (
            502,
            "Storage unreachable",
            f"could not read the table: the storage of {uri} did not answer ({where})",
            "Check the connection's endpoint and the network between the API server and the storage; "
            "the API server's log has the storage client's message.",
        )
    if any(isinstance(e, FileNotFoundError) for e in chain):
        return (
            404,
            "Not found",
            f"could not read the table: {uri} or its bucket was not found with {where}",
            "Check the table's URI and the bucket (or container) name.",
        )
    return (
        500,
        "Cannot read the table",
        f"could not read the table at {uri} with {where}: the storage client failed ({type(exc).__name__})",
        "The API server's log has the storage client's message.",
    )
