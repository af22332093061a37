"""The CLI's one way to talk to the hub API: kubeconfig loading like kubectl, then HTTPS.

`load_connection` reads the kubeconfig the way kubectl does (`--kubeconfig`,
then `$KUBECONFIG` (a path list), then `~/.kube/config`) with the official
`kubernetes` client's loader, so contexts, CA files or data, tokens, token
files, client certificates and exec plugins mean what they mean to kubectl.
`HubClient` then speaks plain HTTPS with aiohttp (for streaming watches and
bounded timeouts) to the server, CA and credentials the loader resolved.

Every failure is a `HubError` whose message is one line, worded like kubectl:
`Error from server (NotFound): trainingjobs.federator.dev "x" not found`,
`error: You must be logged in to the server (Unauthorized)`, or
`error: cannot reach the hub at https://...: connection refused`.

It talks only to the hub API; it must never log, print or put into an error
a token or any part of a kubeconfig's credentials.
"""

from __future__ import annotations

import asyncio
import binascii
import json
import os
import re
import ssl
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

import aiohttp
import yaml

from federator.apis.common import json_type
from federator.apis.views import Body

API_GROUP = "federator.dev"
API_VERSION = "v1alpha1"
GROUP_PATH = f"/apis/{API_GROUP}/{API_VERSION}"
DEFAULT_KUBECONFIG = "~/.kube/config"

JSONObject = dict[str, Any]


class HubError(Exception):
    """A failure to show the user as one line (already worded; print as is)."""

    def __init__(self, message: str, *, code: int = 0, reason: str = "") -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason


@dataclass(frozen=True, slots=True)
class HubConnection:
    """Where the hub is and how to authenticate; `describe()` never shows credentials."""

    server: str
    namespace: str
    context: str
    kubeconfig: str
    ssl_context: ssl.SSLContext | bool
    headers: Mapping[str, str]

    def describe(self) -> str:
        return f"{self.server} (context {self.context or '-'}, kubeconfig {self.kubeconfig})"


def kubeconfig_path(explicit: str | None) -> str:
    """The kubeconfig path (list) kubectl would use."""
    if explicit:
        return explicit
    return os.environ.get("KUBECONFIG") or DEFAULT_KUBECONFIG


def load_connection(*, kubeconfig: str | None = None, context: str | None = None) -> HubConnection:
    """The hub connection of the kubeconfig's (or the given) context, or HubError."""
    from kubernetes import client as kube_client
    from kubernetes.config.config_exception import ConfigException
    from kubernetes.config.kube_config import list_kube_config_contexts, load_kube_config

    path = kubeconfig_path(kubeconfig)
    expanded = os.pathsep.join(os.path.expanduser(p) for p in path.split(os.pathsep) if p)
    if not any(Path(p).is_file() for p in expanded.split(os.pathsep)):
        hint = "" if kubeconfig or os.environ.get("KUBECONFIG") else (
            "; pass --kubeconfig or set KUBECONFIG (federator up writes .federator/admin.kubeconfig)")
        raise HubError(f"error: no kubeconfig at {path}{hint}")
    configuration = kube_client.Configuration()
    try:
        load_kube_config(config_file=expanded, context=context,  # type: ignore[no-untyped-call]
                         client_configuration=configuration, persist_config=False)
        contexts, active = list_kube_config_contexts(config_file=expanded)  # type: ignore[no-untyped-call]
    except ConfigException as e:
        # The loader's messages end with the Python repr of the entry it choked on: not for a user.
        said = re.sub(r"\s*/?[{\[]'.*$", "", _first_line(str(e))) or "not a usable kubeconfig"
        raise HubError(f"error: cannot use kubeconfig {path}: {said}") from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        at = f" at line {mark.line + 1}" if mark is not None else ""
        raise HubError(f"error: cannot use kubeconfig {path}: not valid YAML{at}") from None
    except UnicodeDecodeError:
        raise HubError(f"error: cannot use kubeconfig {path}: not UTF-8 text") from None
    except binascii.Error:
        raise HubError(f"error: cannot use kubeconfig {path}: its certificate or key data is not valid base64") \
            from None
    except OSError as e:
        raise HubError(f"error: cannot use kubeconfig {path}: {e.strerror or 'cannot read a file it names'}"
                       f"{f' ({e.filename})' if e.filename else ''}") from None
    except (ValueError, TypeError, KeyError, AttributeError):  # fields the loader trips on
        raise HubError(f"error: cannot use kubeconfig {path}: not a kubeconfig (a YAML mapping with clusters, "
                       "contexts and users, each a list of named entries)") from None
    chosen = next((c for c in contexts or [] if c.get("name") == context), None) if context else active
    namespace = ((chosen or {}).get("context") or {}).get("namespace") or "default"
    headers: dict[str, str] = {"Accept": "application/json", "User-Agent": "federator-cli"}
    if configuration.refresh_api_key_hook is not None:  # exec plugins and auth providers fetch tokens here
        configuration.refresh_api_key_hook(configuration)
    api_keys = configuration.api_key or {}
    # kubernetes >= 35 files the bearer token under "BearerToken", older ones under "authorization".
    key_name = next((k for k in ("BearerToken", "authorization") if api_keys.get(k)), None)
    if key_name is not None:
        authorization = str(api_keys[key_name])
        prefix = (configuration.api_key_prefix or {}).get(key_name)
        headers["Authorization"] = f"{prefix} {authorization}" if prefix else authorization
    server = str(configuration.host or "").rstrip("/")
    if not server.startswith(("https://", "http://")):
        raise HubError(f"error: cannot use kubeconfig {path}: the cluster has no server URL")
    ssl_context: ssl.SSLContext | bool = False
    if server.startswith("https://"):
        if configuration.verify_ssl:
            ssl_context = ssl.create_default_context(cafile=configuration.ssl_ca_cert or None)
        else:
            ssl_context = ssl.create_default_context()
            ssl_context.check_hostname = False
            ssl_context.verify_mode = ssl.CERT_NONE
        if configuration.cert_file and configuration.key_file:
            ssl_context.load_cert_chain(configuration.cert_file, configuration.key_file)
    return HubConnection(server=server, namespace=namespace, context=(chosen or {}).get("name", ""),
                         kubeconfig=path, ssl_context=ssl_context, headers=headers)


def _first_line(text: str) -> str:
    return (text.strip().splitlines() or [""])[0][:300]


def jobs_path(namespace: str | None, name: str | None = None) -> str:
    base = f"{GROUP_PATH}/namespaces/{quote(namespace, safe='')}/trainingjobs" if namespace \
        else f"{GROUP_PATH}/trainingjobs"
    return f"{base}/{quote(name, safe='')}" if name else base


def clusters_path(name: str | None = None) -> str:
    base = f"{GROUP_PATH}/memberclusters"
    return f"{base}/{quote(name, safe='')}" if name else base


def queues_path(name: str | None = None) -> str:
    base = f"{GROUP_PATH}/queues"
    return f"{base}/{quote(name, safe='')}" if name else base


def server_error(status: int, body: bytes, content_type: str) -> HubError:
    """kubectl's wording for a non-2xx answer (kube-api-notes §2, §10)."""
    status_obj: Any = None
    if "json" in content_type:
        try:
            status_obj = json.loads(body)
        except ValueError:
            status_obj = None
    if isinstance(status_obj, dict) and status_obj.get("kind") == "Status":
        reason = str(status_obj.get("reason") or "")
        message = _first_line(str(status_obj.get("message") or "")) or f"HTTP {status}"
        if reason == "Unauthorized" or status == 401:
            return HubError(f"error: You must be logged in to the server ({message})", code=status, reason=reason)
        if reason:
            return HubError(f"Error from server ({reason}): {message}", code=status, reason=reason)
        return HubError(f"Error from server: {message}", code=status)
    if status == 401:
        return HubError("error: You must be logged in to the server (Unauthorized)", code=401, reason="Unauthorized")
    return HubError(f"Error from server: the server answered HTTP {status}", code=status)


class HubClient:
    """Requests to the hub. Use as `async with HubClient(connection) as hub:`."""

    def __init__(self, connection: HubConnection, *, timeout_seconds: float = 30.0) -> None:
        self.connection = connection
        self.timeout_seconds = timeout_seconds
        self._session: aiohttp.ClientSession | None = None

    async def __aenter__(self) -> HubClient:
        self._session = aiohttp.ClientSession(headers=dict(self.connection.headers))
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    @property
    def session(self) -> aiohttp.ClientSession:
        if self._session is None:
            raise RuntimeError("HubClient used outside `async with`")
        return self._session

    def _transport_error(self, error: BaseException) -> HubError:
        where = self.connection.server
        if isinstance(error, aiohttp.ClientConnectorCertificateError):
            return HubError(f"error: cannot verify the certificate of the hub at {where} "
                            "(does the kubeconfig carry the hub's CA?)")
        if isinstance(error, aiohttp.ClientConnectorSSLError | aiohttp.ClientSSLError):
            return HubError(f"error: TLS handshake with the hub at {where} failed")
        if isinstance(error, aiohttp.ClientConnectorError):
            why = error.strerror or (str(error.os_error) if error.os_error else "") or "cannot connect"
            return HubError(f"error: cannot reach the hub at {where}: {_first_line(why).lower()}")
        if isinstance(error, asyncio.TimeoutError | TimeoutError):
            return HubError(f"error: the hub at {where} did not answer within {self.timeout_seconds:g}s")
        if isinstance(error, aiohttp.ClientPayloadError | aiohttp.ServerDisconnectedError):
            return HubError(f"error: the connection to the hub at {where} broke off")
        if isinstance(error, aiohttp.InvalidURL):
            return HubError(f"error: the hub's server URL in the kubeconfig, {where}, is not a valid URL")
        return HubError(f"error: request to the hub at {where} failed: the connection broke off or was refused")

    async def request(self, method: str, path: str, *, body: Any = None,
                      params: Mapping[str, str] | None = None,
                      content_type: str = "application/json") -> JSONObject:
        """One request; the decoded JSON answer, or HubError. A PATCH names its kind in `content_type`
        (application/merge-patch+json, application/json-patch+json...)."""
        data = json.dumps(body).encode() if body is not None else None
        headers = {"Content-Type": content_type} if data is not None else None
        try:
            async with self.session.request(
                method, self.connection.server + path, data=data, headers=headers, params=params,
                ssl=self.connection.ssl_context, timeout=aiohttp.ClientTimeout(total=self.timeout_seconds),
            ) as response:
                raw = await response.read()
                if response.status >= 400:
                    raise server_error(response.status, raw, response.content_type)
        except HubError:
            raise
        except (aiohttp.ClientError, asyncio.TimeoutError, OSError) as e:
            raise self._transport_error(e) from None
        try:
            decoded = json.loads(raw) if raw else {}
        except ValueError:
            raise HubError(f"error: the hub at {self.connection.server} answered with something other "
                           "than JSON") from None
        if not isinstance(decoded, dict):
            raise HubError(f"error: the hub at {self.connection.server} answered with a JSON {json_type(decoded)}, "
                           "not an object")
        return decoded

    async def stream(self, path: str, *, params: Mapping[str, str] | None = None,
                     follow: bool = False) -> AsyncIterator[bytes]:
        """A GET whose body is read as it comes (a log): its chunks; a non-2xx answer is HubError. A follow has
        no read timeout (a job may print nothing for long); other reads give up after a silent timeout."""
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=self.timeout_seconds,
                                        sock_read=None if follow else self.timeout_seconds)
        try:
            async with self.session.get(self.connection.server + path, params=params,
                                        ssl=self.connection.ssl_context, timeout=timeout) as response:
                if response.status >= 400:
                    raise server_error(response.status, await response.read(), response.content_type)
                async for chunk in response.content.iter_any():
                    yield chunk
        except HubError:
            raise
        except (aiohttp.ClientError, asyncio.TimeoutError, OSError) as e:
            raise self._transport_error(e) from None

    async def watch(self, path: str, *, resource_version: str,
                    params: Mapping[str, str] | None = None) -> AsyncIterator[JSONObject]:
        """Watch events (dicts with type and object) from `resource_version`,
        reconnecting from the last one seen when the server ends the stream;
        an ERROR event (e.g. 410 Expired) becomes HubError."""
        last = resource_version
        while True:
            query = {**(params or {}), "watch": "true", "resourceVersion": last, "allowWatchBookmarks": "true"}
            try:
                async with self.session.get(
                    self.connection.server + path, params=query, ssl=self.connection.ssl_context,
                    timeout=aiohttp.ClientTimeout(total=None, connect=self.timeout_seconds,
                                                  sock_connect=self.timeout_seconds),
                ) as response:
                    if response.status >= 400:
                        raise server_error(response.status, await response.read(), response.content_type)
                    async for line in response.content:
                        if not line.strip():
                            continue
                        try:
                            event = json.loads(line)
                        except ValueError:
                            raise HubError("error: the hub sent a malformed watch event") from None
                        kind = event.get("type")
                        obj = event.get("object") or {}
                        if kind == "ERROR":
                            raise server_error(int(obj.get("code") or 500), json.dumps(obj).encode(),
                                               "application/json")
                        rv = Body(obj).resource_version
                        if rv:
                            last = rv
                        if kind != "BOOKMARK":
                            yield event
            except HubError:
                raise
            except (aiohttp.ClientError, asyncio.TimeoutError, OSError) as e:
                raise self._transport_error(e) from None
