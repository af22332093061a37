"""Development-mode TLS material and kubeconfigs for the hub.

`ensure_dev_tls(state_dir)` creates (or reuses, while still valid) a
self-signed CA and a server certificate for 127.0.0.1 / ::1 / localhost under
`<state_dir>/tls/`; `server_ssl_context` turns them into the context the hub's
HTTPS listener uses; `write_kubeconfig` writes a kubeconfig that kubectl and
the official Python client accept (CA inlined as certificate-authority-data,
bearer token, default namespace).

For development and tests only: a production hub is given its certificate and
key. Private keys and kubeconfigs (which hold tokens) are created with mode
0600 from the first byte (never written wider, then narrowed) and replaced
atomically; this module never logs or prints a key or token.
"""

from __future__ import annotations

import base64
import csv
import datetime as dt
import io
import secrets
import ipaddress
import os
import ssl
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from federator.store.etcd_process import EtcdServerTLS

__all__ = [
    "DEFAULT_HOSTS",
    "DEV_USERS",
    "DevCredentials",
    "DevTLS",
    "ensure_dev_credentials",
    "ensure_dev_tls",
    "ensure_etcd_tls",
    "generate_ca",
    "generate_certificate",
    "generate_server_certificate",
    "server_ssl_context",
    "write_kubeconfig",
    "write_private_file",
]

DEFAULT_HOSTS: tuple[str, ...] = ("127.0.0.1", "::1", "localhost")
CA_VALID_DAYS = 365
SERVER_VALID_DAYS = 90
# Regenerate a certificate that would expire within this window rather than hand out one about to break.
_RENEW_BEFORE = dt.timedelta(days=7)
# Issue certificates slightly in the past so a client whose clock is a little behind still accepts them.
_CLOCK_SKEW = dt.timedelta(minutes=5)

PrivateKey = ec.EllipticCurvePrivateKey


@dataclass(frozen=True, slots=True)
class DevTLS:
    """Where the development TLS files are."""

    directory: Path
    ca_cert: Path
    ca_key: Path
    server_cert: Path
    server_key: Path

    def ca_pem(self) -> bytes:
        return self.ca_cert.read_bytes()


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def _new_key() -> PrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _key_pem(key: PrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def generate_ca(*, common_name: str = "federator-dev-ca", valid_days: int = CA_VALID_DAYS) -> tuple[bytes, bytes]:
    """A self-signed CA: (certificate PEM, private key PEM)."""
    key = _new_key()
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name),
                      x509.NameAttribute(NameOID.ORGANIZATION_NAME, "federator development")])
    now = _now()
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - _CLOCK_SKEW)
        .not_valid_after(now + dt.timedelta(days=valid_days))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True, content_commitment=False,
                          key_encipherment=False, data_encipherment=False, key_agreement=False,
                          encipher_only=False, decipher_only=False),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return cert.public_bytes(serialization.Encoding.PEM), _key_pem(key)


def _san(hosts: Sequence[str]) -> list[x509.GeneralName]:
    names: list[x509.GeneralName] = []
    for host in hosts:
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            names.append(x509.DNSName(host))
    return names


def generate_server_certificate(
    ca_cert_pem: bytes,
    ca_key_pem: bytes,
    *,
    hosts: Sequence[str] = DEFAULT_HOSTS,
    valid_days: int = SERVER_VALID_DAYS,
) -> tuple[bytes, bytes]:
    """A server certificate for `hosts` (IPs and DNS names as SANs), signed by the CA: (cert PEM, key PEM)."""
    if not hosts:
        raise ValueError("a server certificate needs at least one host")
    return generate_certificate(ca_cert_pem, ca_key_pem, common_name=hosts[0], hosts=hosts, server=True,
                                client=False, valid_days=valid_days)


def generate_certificate(
    ca_cert_pem: bytes,
    ca_key_pem: bytes,
    *,
    common_name: str,
    hosts: Sequence[str] = (),
    server: bool,
    client: bool,
    valid_days: int = SERVER_VALID_DAYS,
) -> tuple[bytes, bytes]:
    """A certificate signed by the CA for serving (`server`: extended key usage serverAuth, `hosts` as SANs),
    for authenticating as a client (`client`: clientAuth, the subject `common_name` being who it is), or both
    (an etcd peer certificate): (cert PEM, key PEM)."""
    if not (server or client):
        raise ValueError("a certificate is for a server, a client or both")
    if server and not hosts:
        raise ValueError("a server certificate needs at least one host")
    ca_cert = x509.load_pem_x509_certificate(ca_cert_pem)
    ca_key = serialization.load_pem_private_key(ca_key_pem, password=None)
    if not isinstance(ca_key, ec.EllipticCurvePrivateKey):
        raise ValueError("the CA key must be an EC key (as generate_ca makes)")
    key = _new_key()
    now = _now()
    usages = [oid for oid, wanted in ((ExtendedKeyUsageOID.SERVER_AUTH, server),
                                      (ExtendedKeyUsageOID.CLIENT_AUTH, client)) if wanted]
    builder = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)]))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - _CLOCK_SKEW)
        .not_valid_after(min(now + dt.timedelta(days=valid_days), ca_cert.not_valid_after_utc))
    )
    if hosts:
        builder = builder.add_extension(x509.SubjectAlternativeName(_san(hosts)), critical=False)
    cert = (
        builder
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(digital_signature=True, key_encipherment=False, key_cert_sign=False, crl_sign=False,
                          content_commitment=False, data_encipherment=False, key_agreement=False,
                          encipher_only=False, decipher_only=False),
            critical=True,
        )
        .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False
        )
        .sign(ca_key, hashes.SHA256())
    )
    return cert.public_bytes(serialization.Encoding.PEM), _key_pem(key)


def write_private_file(path: Path, data: bytes, *, mode: int = 0o600) -> None:
    """Write `data` atomically; the file has `mode` from creation on (no window with wider permissions)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, mode)  # mkstemp creates 0600 already; be explicit for other modes
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp_name, path)
    except BaseException:
        try:
            os.unlink(tmp_name)
        except FileNotFoundError:
            pass
        raise


def _still_good(tls: DevTLS, hosts: Sequence[str]) -> bool:
    """Whether existing files form a usable chain for `hosts` that does not expire soon."""
    return _issued_and_good(tls.ca_cert, tls.ca_key, tls.server_cert, tls.server_key, hosts)


def _issued_and_good(ca_cert: Path, ca_key: Path, cert_file: Path, key_file: Path, hosts: Sequence[str]) -> bool:
    """Whether `cert_file` (with `key_file`) was issued by the CA, names `hosts` and expires not soon."""
    try:
        ca = x509.load_pem_x509_certificate(ca_cert.read_bytes())
        cert = x509.load_pem_x509_certificate(cert_file.read_bytes())
        cert_key = serialization.load_pem_private_key(key_file.read_bytes(), password=None)
        serialization.load_pem_private_key(ca_key.read_bytes(), password=None)
    except (OSError, ValueError):
        return False
    deadline = _now() + _RENEW_BEFORE
    if ca.not_valid_after_utc < deadline or cert.not_valid_after_utc < deadline:
        return False
    if cert.issuer != ca.subject:
        return False
    try:
        cert.verify_directly_issued_by(ca)
    except (ValueError, TypeError, InvalidSignature):
        return False
    spki = serialization.PublicFormat.SubjectPublicKeyInfo
    if cert.public_key().public_bytes(serialization.Encoding.DER, spki) != cert_key.public_key().public_bytes(
        serialization.Encoding.DER, spki
    ):
        return False
    if not hosts:
        return True
    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return False
    return set(_san(hosts)) <= set(san)


def _ensure_ca(ca_cert: Path, ca_key: Path, *, common_name: str) -> tuple[bytes, bytes, bool]:
    """The CA in these files if usable and not expiring soon, else a new one written there: (cert PEM,
    key PEM, whether it is new)."""
    try:
        ca = x509.load_pem_x509_certificate(ca_cert.read_bytes())
        if ca.not_valid_after_utc > _now() + _RENEW_BEFORE:
            cert_pem, key_pem = ca_cert.read_bytes(), ca_key.read_bytes()
            serialization.load_pem_private_key(key_pem, password=None)
            return cert_pem, key_pem, False
    except (OSError, ValueError):
        pass
    cert_pem, key_pem = generate_ca(common_name=common_name)
    write_private_file(ca_key, key_pem)
    write_private_file(ca_cert, cert_pem, mode=0o644)
    return cert_pem, key_pem, True


def ensure_dev_tls(state_dir: str | os.PathLike[str], *, hosts: Sequence[str] = DEFAULT_HOSTS) -> DevTLS:
    """The dev CA and server certificate under `<state_dir>/tls/`, created or renewed as needed.

    Reuses valid existing files (so kubeconfigs written earlier keep working);
    a new CA is made only when the old one is unusable or about to expire.
    """
    directory = Path(state_dir) / "tls"
    directory.mkdir(parents=True, exist_ok=True)
    os.chmod(directory, 0o700)
    tls = DevTLS(
        directory=directory,
        ca_cert=directory / "ca.crt",
        ca_key=directory / "ca.key",
        server_cert=directory / "server.crt",
        server_key=directory / "server.key",
    )
    if _still_good(tls, hosts):
        return tls
    ca_cert_pem, ca_key_pem, _ = _ensure_ca(tls.ca_cert, tls.ca_key, common_name="federator-dev-ca")
    server_cert_pem, server_key_pem = generate_server_certificate(ca_cert_pem, ca_key_pem, hosts=hosts)
    write_private_file(tls.server_key, server_key_pem)
    write_private_file(tls.server_cert, server_cert_pem, mode=0o644)
    return tls


ETCD_CLIENT_NAME = "federator-hub"


def ensure_etcd_tls(directory: str | os.PathLike[str], *, hosts: Sequence[str] = DEFAULT_HOSTS) -> EtcdServerTLS:
    """A CA and the certificates of a local etcd over mutual TLS under `directory` (`federator etcd --tls`
    puts them in DIR/tls/): server.crt for the members' client URLs and peer.crt for their peer URLs (both
    naming `hosts`; the peer certificate serves and authenticates as a client), and client.crt for the hub
    (subject CN=federator-hub). Valid files are reused, so a restarted cluster and its clients keep working;
    a new CA reissues everything. Keys are 0600, the directory 0700."""
    base = Path(directory)
    base.mkdir(parents=True, exist_ok=True)
    os.chmod(base, 0o700)
    tls = EtcdServerTLS(
        directory=base, ca=base / "ca.crt", ca_key=base / "ca.key",
        server_cert=base / "server.crt", server_key=base / "server.key",
        peer_cert=base / "peer.crt", peer_key=base / "peer.key",
        client_cert=base / "client.crt", client_key=base / "client.key",
    )
    ca_pem, ca_key_pem, new_ca = _ensure_ca(tls.ca, tls.ca_key, common_name="federator-etcd-ca")
    wanted = ((tls.server_cert, tls.server_key, hosts, "etcd-server", True, False),
              (tls.peer_cert, tls.peer_key, hosts, "etcd-peer", True, True),
              (tls.client_cert, tls.client_key, (), ETCD_CLIENT_NAME, False, True))
    for cert_file, key_file, names, common_name, server, client in wanted:
        if not new_ca and _issued_and_good(tls.ca, tls.ca_key, cert_file, key_file, names):
            continue
        cert_pem, key_pem = generate_certificate(ca_pem, ca_key_pem, common_name=common_name, hosts=names,
                                                 server=server, client=client)
        write_private_file(key_file, key_pem)
        write_private_file(cert_file, cert_pem, mode=0o644)
    return tls


def server_ssl_context(cert_file: str | os.PathLike[str], key_file: str | os.PathLike[str]) -> ssl.SSLContext:
    """The TLS context of an HTTPS listener: TLS 1.2+, the given certificate chain and key."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(certfile=os.fspath(cert_file), keyfile=os.fspath(key_file))
    return context


def write_kubeconfig(
    path: str | os.PathLike[str],
    *,
    server: str,
    ca_pem: bytes | None,
    token: str,
    user: str,
    namespace: str = "default",
    cluster_name: str = "federator",
    context_name: str | None = None,
) -> Path:
    """Write a kubeconfig (mode 0600) with one cluster, user and context, which is current.

    `ca_pem=None` writes no CA (for a plain-http server); an https server
    should always get its CA, never insecure-skip-tls-verify.
    """
    if not token or any(c.isspace() for c in token):
        raise ValueError("token must be non-empty and contain no whitespace")
    if not server.startswith(("https://", "http://")):
        raise ValueError("server must be an http:// or https:// URL")
    context = context_name or f"{user}@{cluster_name}"
    cluster: dict[str, Any] = {"server": server}
    if ca_pem is not None:
        if b"-----BEGIN CERTIFICATE-----" not in ca_pem:
            raise ValueError("ca_pem must be a PEM certificate")
        cluster["certificate-authority-data"] = base64.b64encode(ca_pem).decode("ascii")
    document = {
        "apiVersion": "v1",
        "kind": "Config",
        "preferences": {},
        "clusters": [{"name": cluster_name, "cluster": cluster}],
        "users": [{"name": user, "user": {"token": token}}],
        "contexts": [{"name": context, "context": {"cluster": cluster_name, "user": user, "namespace": namespace}}],
        "current-context": context,
    }
    target = Path(path)
    write_private_file(target, yaml.safe_dump(document, sort_keys=False).encode("utf-8"))
    return target


DEV_USERS: tuple[tuple[str, str], ...] = (
    ("admin", "federator:admin"),
    ("researcher", "federator:researcher,ns:default"),
)
"""The users dev mode creates: (user name, groups column of the token file)."""


@dataclass(frozen=True, slots=True)
class DevCredentials:
    """The dev token file and one kubeconfig per dev user found in it."""

    token_file: Path
    kubeconfigs: Mapping[str, Path]


def _read_dev_tokens(token_file: Path) -> dict[str, str]:
    """user -> token for the dev users in an existing token file (other lines are left alone)."""
    wanted = {user for user, _ in DEV_USERS}
    tokens: dict[str, str] = {}
    for row in csv.reader(io.StringIO(token_file.read_text(encoding="utf-8"))):
        if len(row) >= 3 and not row[0].lstrip().startswith("#") and row[1].strip() in wanted:
            tokens[row[1].strip()] = row[0].strip()
    return tokens


def ensure_dev_credentials(
    state_dir: str | os.PathLike[str], *, server: str, ca_pem: bytes | None
) -> DevCredentials:
    """Dev-mode access to a hub at `server`: `<state_dir>/tokens.csv` and a kubeconfig per dev user.

    A missing token file is created with random tokens for `DEV_USERS` (admin,
    and a researcher for namespace default); an existing one is never
    rewritten, so tokens survive restarts and hand edits are kept. The
    kubeconfigs are rewritten every time, because the server address may change.
    """
    directory = Path(state_dir)
    directory.mkdir(parents=True, exist_ok=True)
    token_file = directory / "tokens.csv"
    if not token_file.exists():
        lines = ["# token,user,uid,groups  (kube-apiserver --token-auth-file format; see federator/apiserver/auth.py)"]
        for user, groups in DEV_USERS:
            lines.append(f'{secrets.token_hex(32)},{user},{user}-{secrets.token_hex(4)},"{groups}"')
        write_private_file(token_file, ("\n".join(lines) + "\n").encode("utf-8"))
    tokens = _read_dev_tokens(token_file)
    kubeconfigs: dict[str, Path] = {}
    for user, _groups in DEV_USERS:
        if user in tokens:
            kubeconfigs[user] = write_kubeconfig(
                directory / f"{user}.kubeconfig", server=server, ca_pem=ca_pem, token=tokens[user], user=user,
                namespace="default", cluster_name="federator", context_name=f"federator-{user}",
            )
    return DevCredentials(token_file=token_file, kubeconfigs=kubeconfigs)
