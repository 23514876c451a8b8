"""Which texts give a credential away: the forms a storage library may print a secret in.

A storage client's error message rarely holds a secret as it was given. gcsfs puts an access token in a
token-info URL (percent-encoded: ``ya29.a\\b"c`` becomes ``ya29.a%5Cb%22c``); a service-account key passed
as text reaches the same URL as ``quote_plus`` of the JSON document, its PEM private key with ``\\n`` turned
into ``%5Cn``; a ``repr`` doubles backslashes; a JSON log escapes quotes; an HTTP header carries base64.
Masking the raw value alone (all a log masker does) lets every one of those through. This module lists the
forms, so that whoever masks (Airflow's secrets masker in the Airflow layer, ``deltalog``'s own output) can
register each of them.

Pure functions, no Airflow: the core's CLI uses them too.
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Callable, Iterable, Iterator
from typing import Any
from urllib.parse import quote, quote_plus

# Storage-option names whose values are secrets (fsspec's and the keys of Airflow's AWS, Google and Azure
# connections), and words that make any other name one. The S3 access key id counts: it is half a
# credential, and nothing a user needs to read in an error.
SECRET_OPTION_NAMES = frozenset(
    {"key", "secret", "token", "account_key", "sas_token", "connection_string", "client_secret", "credential",
     "credentials", "aws_access_key_id", "aws_secret_access_key", "aws_session_token", "shared_access_key",
     "keyfile_dict", "private_key", "private_key_id", "refresh_token", "password"}
)  # fmt: skip
_SECRET_WORDS = ("secret", "token", "password", "passwd", "credential", "private_key", "account_key",
                 "access_key", "api_key", "connection_string", "keyfile_dict")  # fmt: skip
# Shorter forms are not masked: they would hide ordinary words (Airflow's masker skips under 5 characters).
MIN_FORM_LENGTH = 5
# A PEM key may be cut anywhere by a message that quotes part of it, so its body is masked in pieces:
# windows of PEM_PIECE characters every PEM_STEP, within each line. Any run of PEM_PIECE + PEM_STEP - 1 or
# more characters of a line holds a whole window, so no more than that is ever left readable. Each form
# costs every masked log line a little, and Airflow's masker compiles its pattern again for each new one,
# so the pieces are as few as that bound allows (about 80 for a 2048-bit key).
PEM_PIECE = 32
PEM_STEP = 16
_PEM = re.compile(r"-----BEGIN [A-Z ]+-----(.*?)-----END [A-Z ]+-----", re.S)
# Connection strings (Azure) and SAS tokens hold their secret as one part among names that are not secret.
_SECRET_PARTS = re.compile(r"(?:AccountKey|SharedAccessSignature|SharedAccessKey)=([^;]+)", re.I)
_SAS_SIGNATURE = re.compile(r"(?:^|[?&])sig=([^&;]+)")
# The fields of a credentials document (a GCP service-account or authorized-user key) that are secret.
_SECRET_FIELD_WORDS = ("key", "secret", "token", "password")


def is_secret_option(name: str) -> bool:
    """Whether a storage option (or a connection extra's key) of this name holds a secret."""
    lowered = name.strip().lower()
    return lowered in SECRET_OPTION_NAMES or any(word in lowered for word in _SECRET_WORDS)


def secret_values(value: Any, is_secret: Callable[[str], bool] = is_secret_option,
                  secret: bool = False) -> Iterator[str]:
    """The secret strings in nested options (a connection's extra, ``client_kwargs={...}``): every string
    under a key ``is_secret`` names, at any depth; a dict under such a key is also a secret whole (a
    service-account key given as an object)."""
    if isinstance(value, dict):
        if secret:
            yield json.dumps(value)
        for name, inner in value.items():
            yield from secret_values(inner, is_secret, secret or is_secret(str(name)))
    elif isinstance(value, list | tuple):
        for inner in value:
            yield from secret_values(inner, is_secret, secret)
    elif isinstance(value, str) and secret and value:
        yield value


def _escapes(text: str) -> set[str]:
    """The text as string literals hold it: JSON (ASCII and not), ``repr``, Python's unicode escapes."""
    forms = {text, json.dumps(text)[1:-1], json.dumps(text, ensure_ascii=False)[1:-1]}
    forms.add(repr(text)[1:-1])
    forms.add(text.encode("unicode_escape").decode("ascii"))
    return forms


def _url_encodings(text: str) -> set[str]:
    """Percent-encodings URL libraries produce: path-safe, fully quoted, form-encoded (``+`` for spaces),
    and fully quoted twice (a URL inside a query string)."""
    once = quote(text, safe="")
    return {text, quote(text), once, quote_plus(text), quote_plus(text, safe="/"), quote(once, safe="")}


def _base64_forms(text: str) -> set[str]:
    """Base64 of the text, standard and URL-safe, also where it sits at any offset inside a longer
    encoded value (the encoded groups that hold only the secret's bytes)."""
    data = text.encode()
    forms = set()
    for shift in range(3):
        for encode in (base64.b64encode, base64.urlsafe_b64encode):
            encoded = encode(b"\0" * shift + data).decode("ascii")
            if shift:
                encoded = encoded[4:]  # the group mixing the unknown leading bytes with the secret's
            if (shift + len(data)) % 3:
                encoded = encoded[: len(encoded) // 4 * 4 - 4]  # the group mixing it with what follows
            forms.add(encoded)
            forms.add(encoded.rstrip("="))
    return forms


def _pem_pieces(text: str) -> set[str]:
    """The windows of every PEM block's body lines (see ``PEM_PIECE``)."""
    pieces = set()
    for pem in _PEM.finditer(text.replace("\\n", "\n")):
        for line in pem.group(1).split():
            last = max(len(line) - PEM_PIECE, 0)
            pieces.update(line[i : i + PEM_PIECE] for i in range(0, last + 1, PEM_STEP))
            pieces.add(line[last:])
    return pieces


def secret_pieces(secret: str) -> tuple[set[str], set[str]]:
    """The parts of ``secret`` that are secrets on their own, as (values, PEM pieces): the value itself,
    an Azure connection string's account key and signature, a SAS token's signature; for a JSON
    credentials document, its secret fields (not its names, ids and e-mail addresses); for a PEM key, the
    pieces of its body (base64, which no library escapes further than percent-encoding)."""
    values: set[str] = set()
    pems = _pem_pieces(secret)
    document = None
    if secret.lstrip().startswith("{"):
        try:
            document = json.loads(secret)
        except ValueError:
            document = None
    if isinstance(document, dict):
        for name, value in document.items():
            if isinstance(value, str) and any(w in str(name).lower() for w in _SECRET_FIELD_WORDS):
                more, more_pems = secret_pieces(value)
                values |= more
                pems |= more_pems
    elif not pems:
        values.add(secret)
        values.update(m.group(1) for m in _SECRET_PARTS.finditer(secret))
        values.update(m.group(1) for m in _SAS_SIGNATURE.finditer(secret))
    return values, pems


def secret_forms(secret: str) -> set[str]:
    """Every form of ``secret`` and of its secret pieces a library may print (see the module), each at
    least ``MIN_FORM_LENGTH`` long."""
    values, pems = secret_pieces(secret)
    forms: set[str] = set()
    for value in values:
        for escaped in _escapes(value):
            forms |= _url_encodings(escaped)
            forms |= _escapes(escaped)  # escaped twice: a repr of a repr, JSON inside a JSON string
        forms |= _base64_forms(value)
    for piece in pems:
        forms |= {piece, quote(piece), quote(piece, safe="")}
    return {f for f in forms if len(f) >= MIN_FORM_LENGTH}


def redact(text: str, secrets: Iterable[str], replacement: str = "***") -> str:
    """``text`` with every form of every secret replaced, longest first (a form holding another goes
    whole)."""
    forms: set[str] = set()
    for secret in secrets:
        if secret:
            forms |= secret_forms(secret)
    if not forms:
        return text
    pattern = re.compile("|".join(re.escape(f) for f in sorted(forms, key=len, reverse=True)))
    return pattern.sub(replacement, text)
