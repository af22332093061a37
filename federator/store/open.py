"""`open_store(url)`: the one way to get a store backend from a URL.

    memory://                         in-process, not durable
    memory://?retain=N                ... keeping only the last N revisions of history
    sqlite://PATH                     one SQLite file (relative or absolute: sqlite:///abs/path)
    sqlite://PATH?retain=N&sync=FULL  ... with auto-compaction / fsync per commit
    etcd://HOST:PORT[,HOST:PORT...]   real etcd v3 (etcd+http:// is accepted too)

Every malformed URL is a StoreError that says what was wrong and what a good
one looks like; nothing is opened or created for a bad URL. This module must
never hold a store open itself: the caller owns and closes what it returns.
"""

from __future__ import annotations

import os
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

from federator.obs import Metrics
from federator.store._base import DEFAULT_PREFIX
from federator.store.protocol import Store, StoreError

_FORMS = "memory://, sqlite://PATH or etcd://HOST:PORT[,HOST:PORT...]"


def _bad(url: str, why: str) -> StoreError:
    return StoreError(f"bad store URL {url!r}: {why}; expected {_FORMS}")


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
    endpoints = []
    for part in netloc.split(","):
        host, sep, port = part.strip().rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise _bad(url, f"etcd endpoint {part!r} must be HOST:PORT")
        endpoints.append(f"{host}:{int(port)}")
    return endpoints


async def open_store(
    url: str,
    *,
    prefix: str = DEFAULT_PREFIX,
    metrics: Metrics | None = None,
    connect_timeout_seconds: float = 10.0,
) -> Store:
    """Open the store named by `url` (see the module docstring for the forms)."""
    if not isinstance(url, str) or "://" not in url:
        raise _bad(str(url), "no scheme")
    scheme, rest = url.split("://", 1)
    scheme = scheme.lower()
    parts = urlsplit("x://" + rest)
    if parts.fragment:
        raise _bad(url, "fragments (#...) are not allowed")

    if scheme == "memory":
        if parts.netloc or parts.path not in ("", "/"):
            raise _bad(url, "memory:// takes no host or path")
        options = _options(url, parts.query, {"retain"})
        retain = _positive_int(url, "retain", options["retain"]) if "retain" in options else None
        from federator.store.memory import MemoryStore

        return MemoryStore(prefix=prefix, retain_revisions=retain, metrics=metrics)

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
        from federator.store.sqlite import SqliteStore

        return await SqliteStore.open(
            Path(raw_path),
            prefix=prefix,
            synchronous="FULL" if sync == "FULL" else "NORMAL",
            retain_revisions=retain,
            metrics=metrics,
        )

    if scheme in ("etcd", "etcd+http"):
        if parts.path not in ("", "/"):
            raise _bad(url, "etcd:// takes endpoints only, no path (the key prefix is separate)")
        if not parts.netloc:
            raise _bad(url, "etcd:// needs at least one HOST:PORT")
        endpoints = parse_etcd_endpoints(url, parts.netloc)
        _options(url, parts.query, set())
        from federator.store.etcd import EtcdStore

        return await EtcdStore.connect(
            endpoints, prefix=prefix, metrics=metrics, connect_timeout_seconds=connect_timeout_seconds
        )

    raise _bad(url, f"unknown scheme {scheme!r}")
