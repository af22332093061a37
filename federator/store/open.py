"""`open_store(url)`: the one way to get a store backend from a URL.

    memory://                         in-process, not durable
    memory://?retain=N                ... keeping only the last N revisions of history
    sqlite://PATH                     one SQLite file (relative or absolute: sqlite:///abs/path)
    sqlite://PATH?retain=N&sync=FULL  ... with auto-compaction / fsync per commit
    etcd://HOST:PORT[,HOST:PORT...]   real etcd v3, plain gRPC (etcd+http:// is accepted too)
    etcds://HOST:PORT[,HOST:PORT...]  real etcd v3 over mutual TLS (etcd+https:// too), with an EtcdTLS:
                                      the CA that signed etcd's server certificate and this client's
                                      certificate and key (kube-apiserver's --etcd-cafile, --etcd-certfile,
                                      --etcd-keyfile; `etcd_tls_from_flags` builds it from those flags)

Every malformed URL, and every TLS option that is missing, contradicts the
URL or names a file that is not a readable PEM certificate or key, is a
StoreMisconfigured (a StoreError) of one line that says what was wrong and
which flag to change; nothing is opened or created for it (`check_store_url`
does these checks alone, for a CLI's flags before it starts anything). This module must
never hold a store open itself: the caller owns and closes what it returns.
"""

from __future__ import annotations

import os
import ssl
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

from federator.obs import Metrics
from federator.store._base import DEFAULT_PREFIX, is_ip_address
from federator.store.protocol import Store, StoreMisconfigured

_FORMS = "memory://, sqlite://PATH, etcd://HOST:PORT[,HOST:PORT...] or etcds://HOST:PORT[,HOST:PORT...]"
_TLS_SCHEMES = ("etcds", "etcd+https")
_PLAIN_SCHEMES = ("etcd", "etcd+http")
#: the flags, kube-apiserver's names, that a CLI taking a store URL offers for etcds://
CA_FLAG, CERT_FLAG, KEY_FLAG = "--etcd-cafile", "--etcd-certfile", "--etcd-keyfile"
_MUTUAL = (f"etcd over mutual TLS needs {CA_FLAG} (the CA that signed etcd's server certificate), {CERT_FLAG} and "
           f"{KEY_FLAG} (this client's certificate and key, signed by a CA etcd's --trusted-ca-file trusts)")


def _bad(url: str, why: str) -> StoreMisconfigured:
    return StoreMisconfigured(f"bad store URL {url!r}: {why}; expected {_FORMS}")


@dataclass(frozen=True, slots=True)
class EtcdTLS:
    """The files of etcds:// (mutual TLS): `ca` verifies etcd's server certificate, `cert` and `key` are the
    client certificate this store presents (etcd runs with --client-cert-auth)."""

    ca: Path
    cert: Path
    key: Path

    def load(self) -> EtcdCredentials:
        """The three files' PEM bytes, each checked (a readable PEM certificate; a key that matches the
        certificate); StoreMisconfigured naming the flag and file otherwise."""
        ca_pem = _read(CA_FLAG, self.ca, b"-----BEGIN CERTIFICATE-----", "a PEM CA certificate")
        cert_pem = _read(CERT_FLAG, self.cert, b"-----BEGIN CERTIFICATE-----", "a PEM certificate")
        key_pem = _read(KEY_FLAG, self.key, b"PRIVATE KEY-----", "a PEM private key")
        try:
            ssl.create_default_context(cafile=os.fspath(self.ca))
        except (ssl.SSLError, ValueError) as e:
            raise StoreMisconfigured(f"{CA_FLAG} {self.ca}: not a usable PEM CA certificate ({_ssl_why(e)})") from None
        try:
            ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT).load_cert_chain(os.fspath(self.cert), os.fspath(self.key))
        except (ssl.SSLError, ValueError) as e:
            raise StoreMisconfigured(f"{CERT_FLAG} {self.cert} with {KEY_FLAG} {self.key}: not a usable "
                                     f"certificate and key ({_ssl_why(e)}; does the key belong to the "
                                     "certificate?)") from None
        return EtcdCredentials(ca_pem=ca_pem, cert_pem=cert_pem, key_pem=key_pem)


@dataclass(frozen=True, slots=True)
class EtcdCredentials:
    """EtcdTLS's files as read (PEM bytes), what the etcd client's channel is built from."""

    ca_pem: bytes
    cert_pem: bytes
    key_pem: bytes

    def __repr__(self) -> str:  # never a key in a log or traceback
        return "EtcdCredentials(<PEM>)"


def _ssl_why(e: Exception) -> str:
    return str(getattr(e, "reason", None) or e).replace("_", " ").lower() if isinstance(e, ssl.SSLError) else str(e)


def _read(flag: str, path: Path, marker: bytes, what: str) -> bytes:
    try:
        data = path.read_bytes()
    except OSError as e:
        raise StoreMisconfigured(f"{flag} {path}: cannot read it ({e.strerror or e})") from None
    if marker not in data:
        raise StoreMisconfigured(f"{flag} {path}: not {what}")
    return data


def etcd_tls_from_flags(cafile: str | None, certfile: str | None, keyfile: str | None) -> EtcdTLS | None:
    """EtcdTLS from kube-apiserver-style flags, None when none is given; StoreMisconfigured naming the
    missing flag(s) when only some are (a certificate without its key, a client certificate without a CA,
    or a CA alone: mutual TLS is all three). The files are read by `EtcdTLS.load`."""
    given = {CA_FLAG: cafile, CERT_FLAG: certfile, KEY_FLAG: keyfile}
    if not any(given.values()):
        return None
    missing = [flag for flag, value in given.items() if not value]
    if missing:
        present = [flag for flag, value in given.items() if value]
        raise StoreMisconfigured(f"{' and '.join(missing)} missing (given: {', '.join(present)}): {_MUTUAL}")
    assert cafile and certfile and keyfile
    return EtcdTLS(ca=Path(cafile), cert=Path(certfile), key=Path(keyfile))


def _options(url: str, query: str, allowed: set[str]) -> dict[str, str]:
    options: dict[str, str] = {}
    for name, values in parse_qs(query, keep_blank_values=True, strict_parsing=False).items():
        if name not in allowed:
            raise _bad(url, f"unknown option {name!r} (known: {', '.join(sorted(allowed)) or 'none'})")
        if len(values) != 1 or not values[0]:
            raise _bad(url, f"option {name!r} needs exactly one value")
        options[name] = values[0]
    return options


def _positive_int(url: str, name: str, text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise _bad(url, f"option {name!r} must be a positive integer, not {text!r}") from None
    if value < 1:
        raise _bad(url, f"option {name!r} must be a positive integer, not {text!r}")
    return value


def parse_etcd_endpoints(url: str, netloc: str) -> list[str]:
    """HOST:PORT list of an etcd URL: IP addresses (any number: the client balances over them), or one DNS
    name that resolves to every member (a headless Service, `etcd:2379`; grpc re-resolves it when members
    move). Several DNS names are refused: grpc balances over one name's addresses, not over several names."""
    endpoints = []
    names = []
    for part in netloc.split(","):
        host, sep, port = part.strip().rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise _bad(url, f"etcd endpoint {part!r} must be HOST:PORT")
        endpoints.append(f"{host}:{int(port)}")
        if not is_ip_address(host):
            names.append(host)
    if names and len(endpoints) > 1:
        raise _bad(url, f"several etcd endpoints with a DNS name ({', '.join(names)}): give IP addresses, or one "
                        "name that resolves to every member (e.g. the headless Service: etcds://etcd:2379)")
    return endpoints


def check_store_url(url: str, etcd_tls: EtcdTLS | None = None, *, read_files: bool = True) -> None:
    """Every check `open_store` makes before it opens anything (the URL, and the TLS options and files against
    it; without `read_files`, not the files: a manifest's check, whose files exist only in its pods):
    StoreMisconfigured of one line, nothing opened or created."""
    _parse(url, etcd_tls, read_files=read_files)


async def open_store(
    url: str,
    *,
    prefix: str = DEFAULT_PREFIX,
    metrics: Metrics | None = None,
    connect_timeout_seconds: float = 10.0,
    etcd_tls: EtcdTLS | None = None,
) -> Store:
    """Open the store named by `url` (see the module docstring for the forms); `etcd_tls` is required by
    etcds:// and refused by every other scheme."""
    opener = _parse(url, etcd_tls)
    return await opener(prefix, metrics, connect_timeout_seconds)


_Opener = Callable[[str, "Metrics | None", float], Awaitable[Store]]


def _parse(url: str, etcd_tls: EtcdTLS | None, *, read_files: bool = True) -> _Opener:
    if not isinstance(url, str) or "://" not in url:
        raise _bad(str(url), "no scheme")
    scheme, rest = url.split("://", 1)
    scheme = scheme.lower()
    parts = urlsplit("x://" + rest)
    if parts.fragment:
        raise _bad(url, "fragments (#...) are not allowed")
    if etcd_tls is not None and scheme not in _TLS_SCHEMES:
        what = "etcd:// is plain gRPC" if scheme in _PLAIN_SCHEMES else f"{scheme}:// is not etcd"
        raise StoreMisconfigured(f"{CA_FLAG}, {CERT_FLAG} and {KEY_FLAG} are for etcds:// only, and the store URL "
                                 f"{url!r} says otherwise ({what}): use etcds://HOST:PORT[,...] for etcd over TLS, "
                                 "or drop the flags")

    if scheme == "memory":
        if parts.netloc or parts.path not in ("", "/"):
            raise _bad(url, "memory:// takes no host or path")
        options = _options(url, parts.query, {"retain"})
        retain = _positive_int(url, "retain", options["retain"]) if "retain" in options else None
        async def open_memory(prefix: str, metrics: Metrics | None, _timeout: float) -> Store:
            from federator.store.memory import MemoryStore

            return MemoryStore(prefix=prefix, retain_revisions=retain, metrics=metrics)

        return open_memory

    if scheme == "sqlite":
        # sqlite://relative/path or sqlite:///absolute/path: everything up to
        # '?' is the path, so a host part is just the first path component.
        raw_path = rest.split("?", 1)[0]
        if not raw_path:
            raise _bad(url, "sqlite:// needs a file path, e.g. sqlite://.federator/hub.db")
        if raw_path.endswith("/") or os.path.isdir(raw_path):
            raise _bad(url, f"sqlite path {raw_path!r} is a directory, not a file")
        options = _options(url, parts.query, {"retain", "sync"})
        retain = _positive_int(url, "retain", options["retain"]) if "retain" in options else None
        sync = options.get("sync", "NORMAL").upper()
        if sync not in ("NORMAL", "FULL"):
            raise _bad(url, f"option 'sync' must be NORMAL or FULL, not {options['sync']!r}")
        async def open_sqlite(prefix: str, metrics: Metrics | None, _timeout: float) -> Store:
            from federator.store.sqlite import SqliteStore

            return await SqliteStore.open(
                Path(raw_path),
                prefix=prefix,
                synchronous="FULL" if sync == "FULL" else "NORMAL",
                retain_revisions=retain,
                metrics=metrics,
            )

        return open_sqlite

    if scheme in _PLAIN_SCHEMES + _TLS_SCHEMES:
        if parts.path not in ("", "/"):
            raise _bad(url, f"{scheme}:// takes endpoints only, no path (the key prefix is separate)")
        if not parts.netloc:
            raise _bad(url, f"{scheme}:// needs at least one HOST:PORT")
        endpoints = parse_etcd_endpoints(url, parts.netloc)
        _options(url, parts.query, set())
        credentials: EtcdCredentials | None = None
        if scheme in _TLS_SCHEMES:
            if etcd_tls is None:
                raise StoreMisconfigured(f"{CA_FLAG}, {CERT_FLAG} and {KEY_FLAG} missing for the store URL {url!r} "
                                         f"(etcd over TLS): {_MUTUAL}")
            credentials = etcd_tls.load() if read_files else None

        async def open_etcd(prefix: str, metrics: Metrics | None, timeout: float) -> Store:
            from federator.store.etcd import EtcdStore

            return await EtcdStore.connect(
                endpoints, prefix=prefix, metrics=metrics, connect_timeout_seconds=timeout, tls=credentials
            )

        return open_etcd

    raise _bad(url, f"unknown scheme {scheme!r}")
