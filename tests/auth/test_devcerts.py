"""Dev-mode TLS material and kubeconfigs: real handshakes, openssl, and the kubernetes client's loader."""

from __future__ import annotations

import asyncio
import base64
import shutil
import ssl
import stat
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client as kube_client
from kubernetes import config as kube_config

from federator.dev.certs import (
    ensure_dev_credentials,
    ensure_dev_tls,
    generate_ca,
    server_ssl_context,
    write_kubeconfig,
)


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_creates_ca_and_server_certificate_with_private_keys(tmp_path: Path) -> None:
    tls = ensure_dev_tls(tmp_path / "state")
    for path in (tls.ca_cert, tls.ca_key, tls.server_cert, tls.server_key):
        assert path.is_file()
    assert _mode(tls.ca_key) == 0o600 and _mode(tls.server_key) == 0o600
    assert _mode(tls.directory) == 0o700
    assert b"BEGIN CERTIFICATE" in tls.ca_pem()
    leftovers = [p.name for p in tls.directory.iterdir() if p.name.endswith(".tmp")]
    assert leftovers == []


def test_reuses_valid_material_and_renews_what_no_longer_fits(tmp_path: Path) -> None:
    first = ensure_dev_tls(tmp_path)
    ca, server = first.ca_cert.read_bytes(), first.server_cert.read_bytes()
    again = ensure_dev_tls(tmp_path)
    assert again.ca_cert.read_bytes() == ca and again.server_cert.read_bytes() == server
    # A new host needs a new server certificate, from the same CA (old kubeconfigs keep working).
    wider = ensure_dev_tls(tmp_path, hosts=("127.0.0.1", "::1", "localhost", "hub.example"))
    assert wider.ca_cert.read_bytes() == ca and wider.server_cert.read_bytes() != server
    # A damaged key is replaced rather than served.
    wider.server_key.write_bytes(b"garbage")
    repaired = ensure_dev_tls(tmp_path, hosts=("127.0.0.1", "localhost"))
    assert b"PRIVATE KEY" in repaired.server_key.read_bytes()
    server_ssl_context(repaired.server_cert, repaired.server_key)  # loads: cert and key match


@pytest.mark.skipif(shutil.which("openssl") is None, reason="openssl is not installed")
def test_openssl_verifies_the_chain_and_sans(tmp_path: Path) -> None:
    tls = ensure_dev_tls(tmp_path)
    verify = subprocess.run(
        ["openssl", "verify", "-CAfile", str(tls.ca_cert), "-purpose", "sslserver", str(tls.server_cert)],
        capture_output=True, text=True, timeout=30, check=False,
    )
    assert verify.returncode == 0 and verify.stdout.strip().endswith("OK"), verify.stderr
    text = subprocess.run(["openssl", "x509", "-noout", "-text", "-in", str(tls.server_cert)],
                          capture_output=True, text=True, timeout=30, check=True).stdout
    assert "IP Address:127.0.0.1" in text and "DNS:localhost" in text and "TLS Web Server Authentication" in text
    other_ca = tmp_path / "other-ca.crt"
    other_ca.write_bytes(generate_ca()[0])
    refused = subprocess.run(["openssl", "verify", "-CAfile", str(other_ca), str(tls.server_cert)],
                             capture_output=True, text=True, timeout=30, check=False)
    assert refused.returncode != 0


async def _serve_tls(context: ssl.SSLContext) -> tuple[asyncio.Server, int]:
    async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            data = await reader.readline()
            writer.write(b"hello " + data)
            await writer.drain()
        except (ssl.SSLError, ConnectionError):
            pass  # the refused clients
        finally:
            writer.close()

    server = await asyncio.start_server(echo, "127.0.0.1", 0, ssl=context)
    port = server.sockets[0].getsockname()[1]
    return server, port


async def test_trusting_clients_connect_and_others_are_refused(tmp_path: Path) -> None:
    tls = ensure_dev_tls(tmp_path)
    server, port = await _serve_tls(server_ssl_context(tls.server_cert, tls.server_key))
    try:
        trusting = ssl.create_default_context(cafile=str(tls.ca_cert))
        for host in ("127.0.0.1", "localhost"):
            reader, writer = await asyncio.wait_for(
                asyncio.open_connection("127.0.0.1", port, ssl=trusting, server_hostname=host), 10
            )
            writer.write(b"world\n")
            assert await asyncio.wait_for(reader.readline(), 10) == b"hello world\n"
            writer.close()

        system_trust = ssl.create_default_context()
        with pytest.raises(ssl.SSLCertVerificationError):
            await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port, ssl=system_trust,
                                                           server_hostname="127.0.0.1"), 10)
        other_ca = tmp_path / "other.crt"
        other_ca.write_bytes(generate_ca()[0])
        with pytest.raises(ssl.SSLCertVerificationError):
            await asyncio.wait_for(asyncio.open_connection(
                "127.0.0.1", port, ssl=ssl.create_default_context(cafile=str(other_ca)),
                server_hostname="127.0.0.1"), 10)
        with pytest.raises(ssl.SSLCertVerificationError, match="match|mismatch"):
            await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port, ssl=trusting,
                                                           server_hostname="hub.example"), 10)
    finally:
        server.close()
        await server.wait_closed()


def test_kubeconfig_loads_in_the_kubernetes_client(tmp_path: Path) -> None:
    tls = ensure_dev_tls(tmp_path)
    path = write_kubeconfig(
        tmp_path / "researcher.kubeconfig", server="https://127.0.0.1:6443", ca_pem=tls.ca_pem(),
        token="researcher-token-0123456789", user="bob", namespace="default", cluster_name="federator",
    )
    assert _mode(path) == 0o600
    document = yaml.safe_load(path.read_text())
    assert base64.b64decode(document["clusters"][0]["cluster"]["certificate-authority-data"]) == tls.ca_pem()
    assert "insecure-skip-tls-verify" not in path.read_text()

    configuration = kube_client.Configuration()
    kube_config.load_kube_config(config_file=str(path), client_configuration=configuration)
    assert configuration.host == "https://127.0.0.1:6443"
    # The header the client will send (the key name differs between client versions).
    assert configuration.auth_settings()["BearerToken"]["value"] == "Bearer researcher-token-0123456789"
    assert configuration.verify_ssl is True
    assert Path(configuration.ssl_ca_cert).read_bytes() == tls.ca_pem()
    contexts, current = kube_config.list_kube_config_contexts(config_file=str(path))
    assert current["name"] == "bob@federator" and current["context"]["namespace"] == "default"
    assert len(contexts) == 1


def test_kubeconfig_rejects_bad_arguments(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="token"):
        write_kubeconfig(tmp_path / "k", server="https://h", ca_pem=None, token="a b", user="u")
    with pytest.raises(ValueError, match="URL"):
        write_kubeconfig(tmp_path / "k", server="h:6443", ca_pem=None, token="t", user="u")
    with pytest.raises(ValueError, match="PEM"):
        write_kubeconfig(tmp_path / "k", server="https://h", ca_pem=b"nope", token="t", user="u")
    assert not (tmp_path / "k").exists()


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not installed")
def test_kubectl_reads_the_kubeconfig(tmp_path: Path) -> None:
    tls = ensure_dev_tls(tmp_path)
    path = write_kubeconfig(tmp_path / "admin.kubeconfig", server="https://127.0.0.1:6443", ca_pem=tls.ca_pem(),
                            token="admin-token-0123456789", user="admin", namespace="vision")
    result = subprocess.run(
        ["kubectl", "--kubeconfig", str(path), "config", "view", "--minify", "-o",
         "jsonpath={.contexts[0].context.namespace} {.clusters[0].cluster.server}"],
        capture_output=True, text=True, timeout=30, check=True,
    )
    assert result.stdout == "vision https://127.0.0.1:6443"


def test_dev_credentials_give_an_admin_and_a_default_researcher(tmp_path: Path) -> None:
    from federator.apiserver.auth import TokenAuthenticator, authorize

    tls = ensure_dev_tls(tmp_path)
    first = ensure_dev_credentials(tmp_path, server="https://127.0.0.1:40001", ca_pem=tls.ca_pem())
    assert set(first.kubeconfigs) == {"admin", "researcher"}
    assert _mode(first.token_file) == 0o600
    assert all(_mode(p) == 0o600 for p in first.kubeconfigs.values())
    authenticator = TokenAuthenticator.from_file(first.token_file)

    def principal_of(kubeconfig: Path) -> Any:
        token = yaml.safe_load(kubeconfig.read_text())["users"][0]["user"]["token"]
        assert len(token) >= 32
        return authenticator.principal_for_token(token)

    admin = principal_of(first.kubeconfigs["admin"])
    researcher = principal_of(first.kubeconfigs["researcher"])
    assert admin is not None and researcher is not None
    assert authorize(admin, verb="create", group="federator.dev", resource="memberclusters", namespace=None)[0]
    assert authorize(researcher, verb="create", group="federator.dev", resource="trainingjobs",
                     namespace="default")[0]
    assert not authorize(researcher, verb="list", group="federator.dev", resource="trainingjobs",
                         namespace="vision")[0]

    # A restart on another port keeps the tokens and rewrites the kubeconfigs.
    tokens_before = first.token_file.read_text()
    second = ensure_dev_credentials(tmp_path, server="https://127.0.0.1:40002", ca_pem=tls.ca_pem())
    assert second.token_file.read_text() == tokens_before
    assert yaml.safe_load(second.kubeconfigs["admin"].read_text())["clusters"][0]["cluster"]["server"] == (
        "https://127.0.0.1:40002"
    )
    assert principal_of(second.kubeconfigs["researcher"]) == researcher
