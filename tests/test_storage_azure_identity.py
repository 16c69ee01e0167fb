"""``az://`` without a shared key: an account name and a Microsoft Entra token, the way a
pod signs in on AKS with workload identity, and one clear line when nothing is configured.

The end-to-end tests run the store in a child process, as a trainer pod would, with only
the variables the AKS webhook injects (``AZURE_CLIENT_ID``, ``AZURE_TENANT_ID``,
``AZURE_FEDERATED_TOKEN_FILE``, ``AZURE_AUTHORITY_HOST``) plus
``AZURE_STORAGE_ACCOUNT_NAME``. The Entra token service is a local HTTPS stand-in that
exchanges the federated token for a bearer token; Azurite (``--oauth basic``, HTTPS)
checks that token's issuer, audience and lifetime. The child never sees the account key.
A child process, because aiohttp fixes its trusted CAs (``SSL_CERT_FILE``) at import.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import datetime
import ipaddress
import json
import os
import shutil
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from azure.core.credentials import AccessToken
from azure.identity.aio import DefaultAzureCredential, WorkloadIdentityCredential
from azure.storage.blob import BlobServiceClient
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from spotproof.runtime.storage import StorageURLError, open_store
from spotproof.runtime.storage.azure import adlfs_options
from spotproof.smoke.emulation.object_stores import azurite_command, free_port, running

pytestmark = pytest.mark.processes

ACCOUNT = "devstoreaccount1"
CONTAINER = "checkpoints"
TENANT = "72f988bf-86f1-41af-91ab-2d7cd011db47"
CLIENT = "0b5c8e2a-6f1e-4d3b-9a7c-1e2f3a4b5c6d"
SERVICE_ACCOUNT_TOKEN = "eyJhbGciOiJSUzI1NiJ9.projected-service-account-token.signature"
AZURE_VARIABLES = (
    "AZURE_STORAGE_CONNECTION_STRING",
    "AZURE_STORAGE_ACCOUNT_NAME",
    "AZURE_STORAGE_ACCOUNT_KEY",
    "AZURE_STORAGE_SAS_TOKEN",
    "AZURE_STORAGE_ANON",
    "AZURE_FEDERATED_TOKEN_FILE",
    "AZURE_CLIENT_ID",
    "AZURE_TENANT_ID",
    "AZURE_AUTHORITY_HOST",
)


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for name in AZURE_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def _close(credential: Any) -> None:
    asyncio.run(credential.close())


# --- which credentials, for which environment ----------------------------------------


def test_connection_string_is_used_as_it_is_even_with_an_account_name(
    clean_env: pytest.MonkeyPatch,
) -> None:
    clean_env.setenv("AZURE_STORAGE_CONNECTION_STRING", "UseDevelopmentStorage=true")
    clean_env.setenv("AZURE_STORAGE_ACCOUNT_NAME", "prodaccount")
    clean_env.setenv("AZURE_FEDERATED_TOKEN_FILE", "/var/run/secrets/token")

    assert adlfs_options("az://c/p") == {"connection_string": "UseDevelopmentStorage=true"}


def test_account_name_with_federated_token_file_signs_in_with_workload_identity(
    clean_env: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    token_file = tmp_path / "azure-identity-token"
    token_file.write_text(SERVICE_ACCOUNT_TOKEN)
    clean_env.setenv("AZURE_STORAGE_ACCOUNT_NAME", "prodaccount")
    clean_env.setenv("AZURE_FEDERATED_TOKEN_FILE", str(token_file))
    clean_env.setenv("AZURE_CLIENT_ID", CLIENT)
    clean_env.setenv("AZURE_TENANT_ID", TENANT)

    options = adlfs_options("az://c/p")

    assert options["account_name"] == "prodaccount" and options["anon"] is False
    assert isinstance(options["credential"], WorkloadIdentityCredential)
    assert "connection_string" not in options and "account_key" not in options
    _close(options["credential"])


def test_account_name_without_federated_token_file_signs_in_with_default_credential(
    clean_env: pytest.MonkeyPatch,
) -> None:
    clean_env.setenv("AZURE_STORAGE_ACCOUNT_NAME", "devaccount")

    options = adlfs_options("az://c/p")

    assert options["account_name"] == "devaccount" and options["anon"] is False
    assert isinstance(options["credential"], DefaultAzureCredential)
    _close(options["credential"])


def test_neither_account_name_nor_connection_string_is_one_line_naming_both(
    clean_env: pytest.MonkeyPatch,
) -> None:
    with pytest.raises(StorageURLError) as error:
        open_store("az://checkpoints/run-1")

    message = str(error.value)
    assert "az://checkpoints/run-1" in message and "\n" not in message
    assert "AZURE_STORAGE_ACCOUNT_NAME" in message
    assert "AZURE_STORAGE_CONNECTION_STRING" in message


def test_federated_token_file_without_client_and_tenant_names_what_is_missing(
    clean_env: pytest.MonkeyPatch,
) -> None:
    clean_env.setenv("AZURE_STORAGE_ACCOUNT_NAME", "prodaccount")
    clean_env.setenv("AZURE_FEDERATED_TOKEN_FILE", "/var/run/secrets/token")
    clean_env.setenv("AZURE_TENANT_ID", TENANT)

    with pytest.raises(StorageURLError) as error:
        open_store("az://checkpoints/run-1")

    message = str(error.value)
    assert "AZURE_CLIENT_ID" in message and "AZURE_TENANT_ID" not in message
    assert "\n" not in message


def test_missing_azure_identity_is_one_line(clean_env: pytest.MonkeyPatch) -> None:
    clean_env.setenv("AZURE_STORAGE_ACCOUNT_NAME", "prodaccount")
    clean_env.setitem(sys.modules, "azure.identity.aio", None)  # import now fails

    with pytest.raises(StorageURLError) as error:
        open_store("az://checkpoints/run-1")

    message = str(error.value)
    assert "azure-identity" in message and "not installed" in message and "\n" not in message


# --- end to end: a federated token, exchanged, accepted by Azurite over HTTPS ----------


@dataclass
class TokenService:
    """A stand-in for Microsoft Entra's token endpoint: exchanges the federated token
    (the client assertion) for a bearer token shaped like Entra's."""

    authority: str
    issuer: str = f"https://sts.windows.net/{TENANT}/"
    requests: list[dict[str, str]] = field(default_factory=list)

    def answer(self, path: str, form: dict[str, str]) -> tuple[int, dict[str, Any]]:
        self.requests.append({"path": path, **form})
        if (
            path != f"/{TENANT}/oauth2/v2.0/token"
            or form.get("client_id") != CLIENT
            or form.get("client_assertion") != SERVICE_ACCOUNT_TOKEN
        ):
            return 401, {"error": "invalid_client", "error_description": "AADSTS700213"}
        now = int(time.time())
        claims = {"aud": "https://storage.azure.com", "iss": self.issuer, "tid": TENANT}
        claims |= {"appid": CLIENT, "iat": now, "nbf": now - 60, "exp": now + 3600}
        return 200, {"token_type": "Bearer", "expires_in": 3600, "access_token": _jwt(claims)}


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _jwt(claims: dict[str, Any]) -> str:
    header = _b64(json.dumps({"alg": "RS256", "typ": "JWT"}).encode())
    return f"{header}.{_b64(json.dumps(claims).encode())}.{_b64(b'not-verified')}"


def _certificates(directory: Path) -> tuple[Path, Path, Path]:
    """A CA, and a server certificate it signed for 127.0.0.1: (ca, cert, key) PEM files."""
    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "spotproof test CA")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(False, False, False, False, False, True, True, False, False),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), False)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName(
                [x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("localhost")]
            ),
            critical=False,
        )
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), False
        )
        .sign(ca_key, hashes.SHA256())
    )
    paths = (directory / "ca.pem", directory / "server.pem", directory / "server-key.pem")
    paths[0].write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    paths[1].write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    paths[2].write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return paths


@contextlib.contextmanager
def _token_service(cert: Path, key: Path) -> Iterator[TokenService]:
    port = free_port()
    service = TokenService(authority=f"https://127.0.0.1:{port}")

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", 0))).decode()
            form = dict(urllib.parse.parse_qsl(body))
            status, answer = service.answer(urllib.parse.urlparse(self.path).path, form)
            data = json.dumps(answer).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield service
    finally:
        server.shutdown()
        server.server_close()


class _StaticToken:
    """A synchronous token credential for the test's own setup client."""

    def __init__(self, token: str) -> None:
        self.token = token

    def get_token(self, *scopes: str, **kwargs: Any) -> AccessToken:
        return AccessToken(self.token, int(time.time()) + 3600)


@dataclass
class AzuriteOAuth:
    blob_endpoint: str
    ca: Path
    token_file: Path
    tokens: TokenService

    def pod_env(self) -> dict[str, str]:
        """A pod's environment on AKS: the webhook's variables and the account name."""
        env = {k: v for k, v in os.environ.items() if k not in AZURE_VARIABLES}
        return env | {
            "AZURE_STORAGE_ACCOUNT_NAME": ACCOUNT,
            "AZURE_CLIENT_ID": CLIENT,
            "AZURE_TENANT_ID": TENANT,
            "AZURE_FEDERATED_TOKEN_FILE": str(self.token_file),
            "AZURE_AUTHORITY_HOST": self.tokens.authority,
            "SSL_CERT_FILE": str(self.ca),
        }

    def client(self) -> BlobServiceClient:
        """The test's own client, with a bearer token as well (never the shared key)."""
        _, answer = self.tokens.answer(
            f"/{TENANT}/oauth2/v2.0/token",
            {"client_id": CLIENT, "client_assertion": SERVICE_ACCOUNT_TOKEN},
        )
        self.tokens.requests.pop()
        return BlobServiceClient(
            self.blob_endpoint,
            credential=_StaticToken(answer["access_token"]),
            connection_verify=str(self.ca),
        )


@pytest.fixture(scope="module")
def azurite_oauth() -> Iterator[AzuriteOAuth]:
    azurite = azurite_command()
    if azurite is None:
        pytest.skip("Azurite is not installed: run `npm ci` in the project")
    directory = Path(tempfile.mkdtemp(prefix="azurite-oauth-"))
    try:
        ca, cert, key = _certificates(directory)
        token_file = directory / "azure-identity-token"
        token_file.write_text(SERVICE_ACCOUNT_TOKEN)
        port = free_port()
        command = [
            azurite,
            *("--blobHost", "127.0.0.1", "--blobPort", str(port)),
            *("--location", str(directory / "data"), "--cert", str(cert), "--key", str(key)),
            *("--oauth", "basic", "--skipApiVersionCheck", "--disableTelemetry"),
            *("--silent", "--loose"),
        ]
        with running(command, port, "Azurite"), _token_service(cert, key) as tokens:
            emulator = AzuriteOAuth(f"https://127.0.0.1:{port}/{ACCOUNT}", ca, token_file, tokens)
            emulator.client().create_container(CONTAINER)
            yield emulator
    finally:
        shutil.rmtree(directory, ignore_errors=True)


POD = """
import json, sys
from spotproof.runtime.storage import AlreadyExists, StorageError, open_store

try:
    store = open_store(sys.argv[1], account_host=sys.argv[2])
    store.put_if_absent("manifests/000000000001.json", b'{"step": 1}')
    try:
        store.put_if_absent("manifests/000000000001.json", b'{"step": 2}')
        refused = False
    except AlreadyExists:
        refused = True
    store.put("steps/000000000001/w0/state.00000", b"\\x00\\x01" * 4096)
    print(json.dumps({
        "manifest": store.get("manifests/000000000001.json").decode(),
        "second_create_refused": refused,
        "part_size": len(store.get("steps/000000000001/w0/state.00000")),
        "names": store.list("manifests"),
    }))
except StorageError as error:
    print(json.dumps({"error": str(error), "failure": error.failure.value}))
"""


def _run_pod(emulator: AzuriteOAuth, prefix: str) -> dict[str, Any]:
    account_host = emulator.blob_endpoint.removeprefix("https://")
    url = f"az://{CONTAINER}/{prefix}"
    result = subprocess.run(
        [sys.executable, "-c", POD, url, account_host],
        env=emulator.pod_env(),
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_checkpoint_objects_round_trip_through_azurite_with_a_workload_identity_token(
    azurite_oauth: AzuriteOAuth,
) -> None:
    azurite_oauth.tokens.requests.clear()

    outcome = _run_pod(azurite_oauth, "run-1")

    assert outcome == {
        "manifest": '{"step": 1}',
        "second_create_refused": True,
        "part_size": 8192,
        "names": ["manifests/000000000001.json"],
    }
    # The pod exchanged its projected service-account token, for storage's audience:
    (exchange,) = azurite_oauth.tokens.requests
    assert exchange["client_assertion"] == SERVICE_ACCOUNT_TOKEN
    assert exchange["grant_type"] == "client_credentials"
    assert exchange["scope"] == "https://storage.azure.com/.default"
    # ...and the object is really in the emulator's account.
    blob = azurite_oauth.client().get_blob_client(CONTAINER, "run-1/manifests/000000000001.json")
    assert blob.download_blob().readall() == b'{"step": 1}'


def test_token_the_storage_account_refuses_fails_in_one_line(
    azurite_oauth: AzuriteOAuth,
) -> None:
    azurite_oauth.tokens.issuer = "https://login.example.org/not-entra/"
    try:
        outcome = _run_pod(azurite_oauth, "run-2")
    finally:
        azurite_oauth.tokens.issuer = f"https://sts.windows.net/{TENANT}/"

    assert outcome["failure"] == "no usable credentials or permission"
    assert "reaching the bucket" in outcome["error"] and "\n" not in outcome["error"]
