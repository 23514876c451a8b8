"""log.redaction: every form a storage library may print a secret in is known, and only secrets are.

The texts searched are made by the libraries that make them in production (urllib's and requests' URL
encoding, json, repr, base64 as in an HTTP header), not by this module's own functions.
"""

from __future__ import annotations

import base64
import json
import urllib.parse

import pytest
import requests
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from airflow_provider_delta.log.base.redaction import (
    PEM_PIECE,
    PEM_STEP,
    is_secret_option,
    redact,
    secret_forms,
)

TOKEN = 'ya29.Sup3r\\S3cret"Tok en+/='
AZURITE_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="


@pytest.fixture(scope="module")
def service_account() -> dict[str, str]:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ).decode()
    return {
        "type": "service_account",
        "project_id": "my-project",
        "private_key_id": "0123456789abcdef0123456789abcdef01234567",
        "private_key": pem,
        "client_email": "loader@my-project.iam.gserviceaccount.com",
        "client_id": "104455667788990011223",
        "token_uri": "https://oauth2.googleapis.com/token",
    }


def _prepared_url(url: str, **params: str) -> str:
    return requests.Request("GET", url, params=params).prepare().url


def _renderings(secret: str) -> dict[str, str]:
    """How libraries print ``secret`` inside a longer text."""
    return {
        "raw": f"token={secret} failed",
        "requests query": _prepared_url("https://oauth2.googleapis.com/tokeninfo", access_token=secret),
        "quote": "/v1/" + urllib.parse.quote(secret),
        "quote_plus": "a=" + urllib.parse.quote_plus(secret),
        "json": json.dumps({"token": secret}),
        "json in a url": urllib.parse.quote_plus(json.dumps({"token": secret})),
        "repr": repr({"token": secret}),
        "repr of a repr": repr(repr(secret)),
        "base64 header": "Authorization: Basic " + base64.b64encode(f"user:{secret}".encode()).decode(),
        "base64 alone": base64.urlsafe_b64encode(secret.encode()).decode(),
        "double quoted": urllib.parse.quote(urllib.parse.quote(secret, safe=""), safe=""),
    }


@pytest.mark.parametrize("how", list(_renderings("x")))
def test_a_token_is_masked_in_every_form_a_library_prints(how):
    text = _renderings(TOKEN)[how]
    masked = redact(text, [TOKEN])
    assert "***" in masked
    for part in ("Sup3r", "S3cret"):
        assert part not in masked, (how, masked)
    if how == "requests query":
        # The endpoint stays readable.
        assert masked.startswith("https://oauth2.googleapis.com/tokeninfo?access_token=")


def _key_body_lines(pem: str) -> list[str]:
    return [line for line in pem.splitlines() if line and not line.startswith("-----")]


def test_a_service_account_key_is_masked_to_its_last_piece(service_account):
    document = json.dumps(service_account)
    texts = [
        # gcsfs with the document passed as a token string: requests form-encodes it into a URL.
        _prepared_url("https://oauth2.googleapis.com/tokeninfo", access_token=document),
        document,
        repr(service_account),
        json.dumps({"token": document}),
        urllib.parse.quote(json.dumps(service_account, indent=2)),
    ]
    lines = _key_body_lines(service_account["private_key"])
    window = PEM_PIECE + PEM_STEP - 1
    for text in texts:
        masked = redact(text, [document])
        assert service_account["private_key_id"] not in masked
        for line in lines:
            for start in range(0, max(len(line) - window, 0) + 1):
                piece = line[start : start + window]
                for form in {piece, urllib.parse.quote(piece, safe=""), urllib.parse.quote(piece)}:
                    assert form not in masked, (text[:60], piece)
        # What is not secret stays readable: the project, the account's address, the endpoint.
        assert "my-project" in urllib.parse.unquote_plus(masked)
        assert "loader@my-project.iam.gserviceaccount.com" in urllib.parse.unquote_plus(masked)


def test_a_pem_key_cut_anywhere_keeps_no_long_piece(service_account):
    pem = service_account["private_key"]
    body = "\n".join(_key_body_lines(pem))
    for cut in (0, 5, 31, 200, 777):
        text = f"error near: {body[cut : cut + 300]} (truncated)"
        masked = redact(text, [pem])
        for line in _key_body_lines(pem):
            for start in range(0, len(line) - (PEM_PIECE + PEM_STEP - 1) + 1):
                assert line[start : start + PEM_PIECE + PEM_STEP - 1] not in masked


def test_the_forms_of_a_key_are_few_enough_for_a_log_masker(service_account):
    # Airflow's masker compiles one pattern of every form again for each new one, and every log line is
    # matched against it: the pieces of a 2048-bit key must stay in the low hundreds.
    forms = secret_forms(json.dumps(service_account))
    assert 20 < len(forms) < 300
    assert all(len(f) >= 5 for f in forms)


def test_azure_secrets_inside_connection_strings_and_sas_tokens():
    endpoint = "http://127.0.0.1:10000/devstoreaccount1"
    connection = f"DefaultEndpointsProtocol=http;AccountName=devstoreaccount1;AccountKey={AZURITE_KEY};" \
                 f"BlobEndpoint={endpoint};"  # fmt: skip
    sas = "sv=2024-01-01&ss=b&srt=sco&sp=rl&se=2030-01-01&sig=AbCdEf0123456789%2BxyzSIG%3D"
    text = (f"failed with key {urllib.parse.quote(AZURITE_KEY, safe='')} at {endpoint}; "
            f"url {endpoint}/c/x?sig=AbCdEf0123456789%2BxyzSIG%3D")  # fmt: skip
    masked = redact(text, [connection, sas])
    assert "Eby8vdM02xNOcq" not in masked and "AbCdEf0123456789" not in masked
    assert endpoint in masked and "devstoreaccount1" in masked


def test_what_is_not_a_secret_stays():
    text = 'Could not connect to the endpoint URL: "http://127.0.0.1:9/bucket/t/_delta_log/"'
    assert redact(text, []) == text
    assert redact(text, ["s3cr3t-value"]) == text


@pytest.mark.parametrize(
    ("name", "secret"),
    [("secret", True), ("token", True), ("account_key", True), ("sas_token", True), ("key", True),
     ("client_secret", True), ("connection_string", True), ("aws_secret_access_key", True),
     ("keyfile_dict", True), ("endpoint_url", False), ("region_name", False), ("account_name", False),
     ("project", False), ("key_path", False), ("tables", False), ("client_kwargs", False)],
)  # fmt: skip
def test_secret_option_names(name, secret):
    assert is_secret_option(name) is secret
