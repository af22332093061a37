"""The simulator's opt-in process runtime: a pod the kubelet starts runs as local processes.

A cluster profile turns it on (`processRuntime: {}` in the profile; off by default, when the kubelet
only simulates containers). Then, for every pod the kubelet starts (federator/sim/kubelet.py):

- each container's `command` + `args` (with kube's `$(VAR)` expansion) runs as one local process, in
  its own session (process group), under `unshare --mount --uts --map-root-user` so that it has a
  private mount namespace and hostname; federator/sim/podexec.py sets these up and execs the command.
  Images are not pulled: the command names a program of this machine (a container with no command is
  a StartError). Init containers run first, one after another, each to a zero exit; init containers
  with `restartPolicy: Always` (sidecars) start in order and run beside the containers; then every
  container runs at once. The pod's run ends when all its containers have exited (sidecars are then
  stopped); each container's exit code is its own terminated state.
- the environment is the container's `env` and `envFrom` as the kubelet resolves them: plain values,
  `fieldRef` (metadata.name/namespace/uid/labels/annotations, spec.nodeName, spec.serviceAccountName,
  status.podIP/podIPs/hostIP), `resourceFieldRef`, `configMapKeyRef`/`secretKeyRef` and
  `envFrom` read from the member's store when it serves those kinds; a missing object or key that is
  not optional is kube's CreateContainerConfigError (the pod waits, and the kubelet tries again), plus
  PATH and HOME of this machine and HOSTNAME.
- every pod gets its own loopback address as `status.podIP` (127.a.b.c from a hash of its namespace
  and name, unique among the member's live pods), and a hosts file bind-mounted on /etc/hosts: its
  own name, and what cluster DNS answers: `<hostname>.<subdomain>.<namespace>.svc.cluster.local`
  (and the search-path forms `.svc`, `<hostname>.<subdomain>.<namespace>` and, in its own namespace,
  `<hostname>.<subdomain>`) for each running pod whose subdomain names a headless Service of its
  namespace that selects it, and `<service>.<namespace>.svc.cluster.local` (same short forms) for each
  Service, answered with the addresses of the running pods it selects (there is no service proxy: a
  ClusterIP Service's name also gives its pods' addresses). The files are rewritten in place (same
  inode, so the bind mount sees it) whenever a pod or Service comes, changes or goes.
- volumes: `emptyDir` (a directory of the pod; `medium: Memory` a private tmpfs), `hostPath` and
  `persistentVolumeClaim` (directories under the runtime's root, `hostpath/<path>` and
  `pvc/<namespace>/<claim>`, shared by every pod of the member that names them), `configMap` and
  `secret` (their keys written as files), mounted at each volumeMount's mountPath (subPath, readOnly)
  in the container's mount namespace; /dev/shm is always a private tmpfs. A mountPath that does not
  exist on this machine is made without writing to the machine's filesystems (podexec.py: a private
  tmpfs over its nearest existing ancestor holding binds of what was there; for `/`, a new root).
  Other volume types are refused (CreateContainerConfigError).
- stdout and stderr are written, line by line with a timestamp, to the container's log file in kube's
  CRI format (`<root>/logs/<namespace>_<pod>_<uid>/<container>/<restartCount>.log`), which
  federator/sim/containerlogs.py serves; a file is rotated at LOG_ROTATE_BYTES (only the current one
  is served, as a kubelet serves its current file).
- `stop(uid, grace)` sends SIGTERM to the process groups of the pod, SIGKILL after `grace` seconds;
  `shutdown()` does that for every pod (the kubelet stopping), so no process outlives the cluster.

This module never writes to the store (the kubelet writes pod status) and never imports the hub.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import json
import os
import re
import shutil
import signal
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from federator.apis.timestamps import format_nano_time, parse_time
from federator.apis.views import Body
from federator.apiserver.errors import ApiError
from federator.apiserver.selectors import LabelSelector, SelectorError, selector_from_dict

if TYPE_CHECKING:
    from federator.apiserver.registry import Registry, ResourceType
    from federator.apiserver.storage import ObjectStorage

__all__ = [
    "CLUSTER_DOMAIN",
    "ContainerConfigError",
    "ContainerExit",
    "LOG_ROTATE_BYTES",
    "PodExit",
    "ProcessRuntime",
    "expand",
    "parse_cri_line",
]

JSON = dict[str, Any]
CLUSTER_DOMAIN = "cluster.local"
#: a container's log file is rotated (renamed to .1, replacing the last one) past this size
LOG_ROTATE_BYTES = 10 * 1024 * 1024
#: the CRI log format splits longer lines into partial (P) entries
_MAX_LINE_BYTES = 16 * 1024
_PODEXEC = Path(__file__).with_name("podexec.py")
_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
_VAR_REF = re.compile(r"\$\$|\$\(([-._a-zA-Z][-._a-zA-Z0-9]*)\)")
#: what `unshare` needs to give a container its mount namespace and hostname as an unprivileged user
_UNSHARE = ("unshare", "--mount", "--uts", "--map-root-user", "--propagation", "private")


class ContainerConfigError(Exception):
    """The container cannot be set up from the pod (kube's CreateContainerConfigError): the message
    says why; the kubelet leaves the pod waiting and tries again."""


@dataclass(frozen=True, slots=True)
class ContainerExit:
    """How one container's process ended."""

    name: str
    exit_code: int
    #: Completed, Error or StartError (kube's terminated reasons)
    reason: str
    message: str = ""
    started_at: str = ""
    finished_at: str = ""


@dataclass(frozen=True, slots=True)
class PodExit:
    """A pod's run ended: every container exited (or an init container failed)."""

    uid: str
    containers: tuple[ContainerExit, ...]

    @property
    def failed(self) -> bool:
        return any(c.exit_code != 0 for c in self.containers)

    @property
    def first_failure(self) -> ContainerExit | None:
        return next((c for c in self.containers if c.exit_code != 0), None)


def _now() -> str:
    return format_nano_time(time.time_ns())


def _stamp() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def expand(text: str, env: Mapping[str, str]) -> str:
    """kube's $(VAR) expansion (third_party/forked/golang/expansion): `$(NAME)` is NAME's value when
    NAME is defined, else left as it is; `$$` is `$`."""
    def one(m: re.Match[str]) -> str:
        if m.group(0) == "$$":
            return "$"
        name = m.group(1)
        return env[name] if name in env else m.group(0)

    return _VAR_REF.sub(one, text)


def parse_cri_line(line: bytes) -> tuple[int, str, bool, bytes] | None:
    """(time in ns, stream, full line?, text) of one CRI log line; None if it is not one."""
    parts = line.rstrip(b"\n").split(b" ", 3)
    if len(parts) < 3:
        return None
    when = _parse_nano(parts[0].decode(errors="replace"))
    if when is None or parts[1] not in (b"stdout", b"stderr") or parts[2] not in (b"F", b"P"):
        return None
    return when, parts[1].decode(), parts[2] == b"F", parts[3] if len(parts) > 3 else b""


def _parse_nano(text: str) -> int | None:
    """RFC3339Nano (UTC, as format_nano_time writes it) as ns since the epoch."""
    head, dot, rest = text.partition(".")
    fraction = rest[:-1] if dot and rest.endswith("Z") else ""
    moment = parse_time(head + "Z" if dot else text)
    if moment is None or (dot and not (fraction.isdigit() and len(fraction) <= 9)):
        return None
    return int(moment.timestamp()) * 1_000_000_000 + int(fraction.ljust(9, "0") or 0)


def _service_selector(spec: Mapping[str, Any]) -> LabelSelector | None:
    """A Service's spec.selector (a plain map); None selects no pod (kube manages no endpoints for it)."""
    selector = spec.get("selector")
    if not isinstance(selector, Mapping) or not selector:
        return None
    try:
        return selector_from_dict({"matchLabels": dict(selector)})
    except SelectorError:
        return None  # the API refuses such a Service; stored anyway, it selects nothing


def _label_matches(selector: LabelSelector | None, labels: Mapping[str, str]) -> bool:
    return selector is not None and selector.matches(labels)


@dataclass(slots=True)
class _DnsPod:
    uid: str
    namespace: str
    name: str
    hostname: str
    subdomain: str
    ip: str
    labels: Mapping[str, str]
    running: bool


@dataclass(slots=True)
class _DnsService:
    namespace: str
    name: str
    headless: bool
    selector: LabelSelector | None


@dataclass(slots=True)
class _Process:
    container: str
    proc: asyncio.subprocess.Process


@dataclass(slots=True)
class _PodRun:
    uid: str
    namespace: str
    name: str
    task: asyncio.Task[None] | None = None
    processes: list[_Process] = field(default_factory=list)
    stopping: asyncio.Task[None] | None = None
    #: set when the pod is being stopped: no new container starts
    halted: bool = False


class ProcessRuntime:
    """Runs the pods of one simulated cluster as local processes (see the module docstring)."""

    def __init__(self, *, root: Path, cluster: str, storage: ObjectStorage, registry: Registry, logger: Any,
                 stop_grace_seconds: float = 1.0) -> None:
        self.root = root
        self.stop_grace_seconds = stop_grace_seconds
        self.cluster = cluster
        self.storage = storage
        self.registry = registry
        self.log = logger
        #: uid -> the pod's run (its processes and the task that drives them)
        self.runs: dict[str, _PodRun] = {}
        #: uid -> what cluster DNS knows of a pod; (namespace, name) -> a Service
        self.dns_pods: dict[str, _DnsPod] = {}
        self.dns_services: dict[tuple[str, str], _DnsService] = {}
        #: address -> "namespace/name" of the live pod holding it
        self._addresses: dict[str, str] = {}
        #: uid -> the hosts file of a pod whose containers run (rewritten in place)
        self._hosts_files: dict[str, Path] = {}
        self._hosts_dirty = False
        self._shutdown: asyncio.Task[None] | None = None

    # ------------------------------------------------------------ paths

    def pod_dir(self, uid: str) -> Path:
        return self.root / "pods" / uid

    def log_path(self, *, namespace: str, name: str, uid: str, container: str, restart: int) -> Path:
        """Where a container run's log is (kube's /var/log/pods layout)."""
        return self.root / "logs" / f"{namespace}_{name}_{uid}" / container / f"{restart}.log"

    # ------------------------------------------------------------ addresses and DNS

    def pod_ip(self, namespace: str, name: str) -> str:
        """The pod's loopback address: stable for a namespace/name, unique among the member's live pods."""
        key = f"{namespace}/{name}"
        for ip, holder in self._addresses.items():
            if holder == key:
                return ip
        h = int(hashlib.sha256(f"{self.cluster}/{key}".encode()).hexdigest()[:8], 16)
        space = 254 * 256 * 254  # 127.1-254.0-255.1-254
        for probe in range(space):
            n = (h + probe) % space
            ip = f"127.{1 + n // (256 * 254)}.{(n // 254) % 256}.{1 + n % 254}"
            if ip not in self._addresses:
                self._addresses[ip] = key
                return ip
        raise ContainerConfigError("no loopback address is free")  # pragma: no cover - 16 M pods

    def observe_pod(self, obj: Mapping[str, Any]) -> None:
        body = Body(obj)
        spec, status = obj.get("spec") or {}, obj.get("status") or {}
        ip = str(status.get("podIP") or "")
        entry = _DnsPod(uid=body.uid, namespace=body.namespace, name=body.name,
                        hostname=str(spec.get("hostname") or body.name), subdomain=str(spec.get("subdomain") or ""),
                        ip=ip, labels=dict(body.labels),
                        running=status.get("phase") == "Running" and not body.deleting and bool(ip))
        if self.dns_pods.get(body.uid) != entry:
            self.dns_pods[body.uid] = entry
            self._hosts_dirty = True

    def forget_pod(self, uid: str) -> None:
        entry = self.dns_pods.pop(uid, None)
        if entry is not None:
            key = f"{entry.namespace}/{entry.name}"
            for ip in [ip for ip, holder in self._addresses.items() if holder == key]:
                del self._addresses[ip]
            self._hosts_dirty = True
        self._hosts_files.pop(uid, None)

    def release_address(self, namespace: str, name: str) -> None:
        key = f"{namespace}/{name}"
        if any(p.namespace == namespace and p.name == name for p in self.dns_pods.values()):
            return
        for ip in [ip for ip, holder in self._addresses.items() if holder == key]:
            del self._addresses[ip]

    def observe_service(self, obj: Mapping[str, Any]) -> None:
        body = Body(obj)
        spec = obj.get("spec") or {}
        entry = _DnsService(namespace=body.namespace, name=body.name, headless=spec.get("clusterIP") == "None",
                            selector=_service_selector(spec))
        if self.dns_services.get((body.namespace, body.name)) != entry:
            self.dns_services[(body.namespace, body.name)] = entry
            self._hosts_dirty = True

    def forget_service(self, namespace: str, name: str) -> None:
        if self.dns_services.pop((namespace, name), None) is not None:
            self._hosts_dirty = True

    def reset_dns(self) -> None:
        """Before a re-list: what was known is listed again."""
        self.dns_pods.clear()
        self.dns_services.clear()
        self._hosts_dirty = True

    def hosts_text(self, namespace: str, uid: str) -> str:
        """The hosts file of the pod `uid` of `namespace`: its own names, then cluster DNS's answers."""
        own = self.dns_pods.get(uid)
        lines = ["# Kubernetes-managed hosts file (federator simulator: process runtime).",
                 "127.0.0.1\tlocalhost", "::1\tlocalhost ip6-localhost ip6-loopback"]
        if own is not None and own.ip:
            names = [own.hostname]
            if own.subdomain:
                names.insert(0, f"{own.hostname}.{own.subdomain}.{own.namespace}.svc.{CLUSTER_DOMAIN}")
            lines.append(f"{own.ip}\t{' '.join(names)}")
        lines.append("# cluster DNS")
        answers: dict[str, list[str]] = {}

        def add(ip: str, fqdn_parts: Sequence[str], ns: str) -> None:
            base = ".".join(fqdn_parts)
            forms = [f"{base}.{ns}.svc.{CLUSTER_DOMAIN}", f"{base}.{ns}.svc", f"{base}.{ns}"]
            if ns == namespace:
                forms.append(base)
            answers.setdefault(ip, []).extend(forms)

        running = sorted((p for p in self.dns_pods.values() if p.running), key=lambda p: (p.namespace, p.name))
        services = sorted(self.dns_services.items())
        # a pod's own name first: the canonical name of its address (what `getent hosts` prints)
        for (ns, svc_name), svc in services:
            for p in running:
                if p.namespace == ns and svc.headless and p.subdomain == svc_name \
                        and _label_matches(svc.selector, p.labels):
                    add(p.ip, [p.hostname, svc_name], ns)
        for (ns, svc_name), svc in services:
            for p in running:
                if p.namespace == ns and _label_matches(svc.selector, p.labels):
                    add(p.ip, [svc_name], ns)
        for ip, names in answers.items():
            unique = list(dict.fromkeys(names))
            for i in range(0, len(unique), 8):  # glibc reads long lines, but keep them short
                lines.append(f"{ip}\t{' '.join(unique[i:i + 8])}")
        return "\n".join(lines) + "\n"

    def refresh_hosts(self) -> None:
        """Rewrite the hosts files of running pods whose contents changed (in place: the same inode)."""
        if not self._hosts_dirty:
            return
        self._hosts_dirty = False
        for uid, path in list(self._hosts_files.items()):
            entry = self.dns_pods.get(uid)
            if entry is None:
                continue
            _rewrite_in_place(path, self.hosts_text(entry.namespace, uid).encode())

    # ------------------------------------------------------------ environment and volumes

    def _rt(self, plural: str) -> ResourceType | None:
        return self.registry.get("", "v1", plural)

    async def _object(self, plural: str, kind: str, namespace: str, name: str, *, optional: bool) -> JSON | None:
        rt = self._rt(plural)
        if rt is None:
            if optional:
                return None
            raise ContainerConfigError(f'{kind.lower()} "{name}" not found (this simulated cluster serves no {kind}s)')
        try:
            return await self.storage.get(rt, namespace=namespace, name=name)
        except ApiError as e:
            if e.code == 404:
                if optional:
                    return None
                raise ContainerConfigError(f'{kind.lower()} "{name}" not found') from None
            raise

    @staticmethod
    def _data(obj: Mapping[str, Any], kind: str) -> dict[str, bytes]:
        out: dict[str, bytes] = {}
        if kind == "Secret":
            for k, v in (obj.get("data") or {}).items():
                try:
                    out[str(k)] = base64.b64decode(str(v), validate=True)
                except ValueError:
                    raise ContainerConfigError(f"secret key {k}: not base64") from None
            for k, v in (obj.get("stringData") or {}).items():
                out[str(k)] = str(v).encode()
        else:
            for k, v in (obj.get("data") or {}).items():
                out[str(k)] = str(v).encode()
            for k, v in (obj.get("binaryData") or {}).items():
                with contextlib.suppress(ValueError):
                    out[str(k)] = base64.b64decode(str(v))
        return out

    async def _key_ref(self, ref: Mapping[str, Any], *, plural: str, kind: str, namespace: str) -> str | None:
        name, key = str(ref.get("name") or ""), str(ref.get("key") or "")
        optional = bool(ref.get("optional"))
        obj = await self._object(plural, kind, namespace, name, optional=optional)
        if obj is None:
            return None
        data = self._data(obj, kind)
        if key not in data:
            if optional:
                return None
            raise ContainerConfigError(f"couldn't find key {key} in {kind} {namespace}/{name}")
        return data[key].decode(errors="replace")

    @staticmethod
    def _field_ref(pod: Mapping[str, Any], path: str, *, ip: str, var: str) -> str:
        meta = Body(pod)
        spec, status = pod.get("spec") or {}, pod.get("status") or {}
        simple = {
            "metadata.name": meta.name, "metadata.namespace": meta.namespace, "metadata.uid": meta.uid,
            "spec.nodeName": str(spec.get("nodeName") or ""),
            "spec.serviceAccountName": str(spec.get("serviceAccountName") or "default"),
            "status.podIP": ip, "status.podIPs": ip,
            "status.hostIP": str(status.get("hostIP") or ""), "status.hostIPs": str(status.get("hostIP") or ""),
        }
        if path in simple:
            return simple[path]
        m = re.fullmatch(r"metadata\.(labels|annotations)\['([^']*)'\]", path)
        if m:
            values = meta.labels if m.group(1) == "labels" else meta.annotations
            return str(values.get(m.group(2), ""))
        raise ContainerConfigError(f"env {var}: fieldRef {path!r} is not supported")

    async def container_env(self, pod: Mapping[str, Any], container: Mapping[str, Any], *, ip: str) -> dict[str, str]:
        """The container's environment as the kubelet makes it (ContainerConfigError for what kube refuses)."""
        namespace = Body(pod).namespace
        spec = pod.get("spec") or {}
        env: dict[str, str] = {}
        for source in container.get("envFrom") or ():
            if not isinstance(source, Mapping):
                continue
            prefix = str(source.get("prefix") or "")
            for ref_key, plural, kind in (("configMapRef", "configmaps", "ConfigMap"),
                                          ("secretRef", "secrets", "Secret")):
                ref = source.get(ref_key)
                if isinstance(ref, Mapping):
                    obj = await self._object(plural, kind, namespace, str(ref.get("name") or ""),
                                             optional=bool(ref.get("optional")))
                    if obj is not None:
                        for k, v in self._data(obj, kind).items():
                            env[prefix + k] = v.decode(errors="replace")
        for entry in container.get("env") or ():
            if not isinstance(entry, Mapping) or not isinstance(entry.get("name"), str):
                continue
            var = entry["name"]
            source = entry.get("valueFrom")
            if isinstance(source, Mapping):
                value: str | None
                if isinstance(source.get("fieldRef"), Mapping):
                    value = self._field_ref(pod, str(source["fieldRef"].get("fieldPath") or ""), ip=ip, var=var)
                elif isinstance(source.get("secretKeyRef"), Mapping):
                    value = await self._key_ref(source["secretKeyRef"], plural="secrets", kind="Secret",
                                                namespace=namespace)
                elif isinstance(source.get("configMapKeyRef"), Mapping):
                    value = await self._key_ref(source["configMapKeyRef"], plural="configmaps", kind="ConfigMap",
                                                namespace=namespace)
                elif isinstance(source.get("resourceFieldRef"), Mapping):
                    value = _resource_field(container, source["resourceFieldRef"], var=var)
                else:
                    raise ContainerConfigError(f"env {var}: valueFrom names no source")
                if value is not None:
                    env[var] = value
            else:
                env[var] = expand(str(entry.get("value") or ""), env)
        base = {"PATH": os.environ.get("PATH", "/usr/local/bin:/usr/bin:/bin"), "HOME": os.environ.get("HOME", "/root"),
                "HOSTNAME": str(spec.get("hostname") or Body(pod).name)}
        return {**base, **env}

    async def _volume_sources(self, pod: Mapping[str, Any]) -> dict[str, tuple[str, Path | None]]:
        """volume name -> ("bind", directory) or ("tmpfs", None)."""
        meta = Body(pod)
        out: dict[str, tuple[str, Path | None]] = {}
        for vol in (pod.get("spec") or {}).get("volumes") or ():
            if not isinstance(vol, Mapping) or not isinstance(vol.get("name"), str):
                continue
            name = vol["name"]
            if isinstance(vol.get("emptyDir"), Mapping):
                if vol["emptyDir"].get("medium") == "Memory":
                    out[name] = ("tmpfs", None)
                    continue
                path = self.pod_dir(meta.uid) / "volumes" / name
            elif isinstance(vol.get("hostPath"), Mapping):
                host = str(vol["hostPath"].get("path") or "")
                if not host.startswith("/") or ".." in host.split("/"):
                    raise ContainerConfigError(f"volume {name}: hostPath path {host!r} must be absolute, without ..")
                path = self.root / "hostpath" / host.lstrip("/")
            elif isinstance(vol.get("persistentVolumeClaim"), Mapping):
                claim = str(vol["persistentVolumeClaim"].get("claimName") or "")
                if not claim or "/" in claim or claim in (".", ".."):
                    raise ContainerConfigError(f"volume {name}: claimName {claim!r} is not a name")
                path = self.root / "pvc" / meta.namespace / claim
            elif isinstance(vol.get("configMap"), Mapping) or isinstance(vol.get("secret"), Mapping):
                kind = "ConfigMap" if isinstance(vol.get("configMap"), Mapping) else "Secret"
                ref = vol["configMap"] if kind == "ConfigMap" else vol["secret"]
                obj_name = str(ref.get("name") if kind == "ConfigMap" else ref.get("secretName") or "")
                obj = await self._object("configmaps" if kind == "ConfigMap" else "secrets", kind, meta.namespace,
                                         obj_name, optional=bool(ref.get("optional")))
                path = self.pod_dir(meta.uid) / "volumes" / name
                path.mkdir(parents=True, exist_ok=True)
                data = self._data(obj, kind) if obj is not None else {}
                items = ref.get("items")
                files = {str(i.get("path")): data.get(str(i.get("key")), b"") for i in items
                         if isinstance(i, Mapping)} if isinstance(items, list) else dict(data)
                for rel, content in files.items():
                    target = (path / rel).resolve()
                    if not str(target).startswith(str(path.resolve()) + "/"):
                        raise ContainerConfigError(f"volume {name}: item path {rel!r} leaves the volume")
                    target.parent.mkdir(parents=True, exist_ok=True)
                    target.write_bytes(content)
            else:
                kinds = sorted(k for k in vol if k != "name")
                raise ContainerConfigError(f"volume {name}: {', '.join(kinds) or 'no source'} is not supported by "
                                           "the process runtime (emptyDir, hostPath, persistentVolumeClaim, "
                                           "configMap and secret are)")
            path.mkdir(parents=True, exist_ok=True)
            out[name] = ("bind", path)
        return out

    # ------------------------------------------------------------ running pods

    def running(self, uid: str) -> bool:
        run = self.runs.get(uid)
        return run is not None and run.task is not None and not run.task.done()

    async def start(self, pod: Mapping[str, Any], *, ip: str, restart: int,
                    on_exit: Callable[[PodExit], None]) -> None:
        """Start the pod's containers (ContainerConfigError: nothing started). `on_exit` is called once
        when the run ends, unless the run was stopped."""
        meta = Body(pod)
        uid = meta.uid
        if self._shutdown is not None:
            raise ContainerConfigError("the kubelet is stopping")
        if self.running(uid):
            return
        spec = pod.get("spec") or {}
        containers = [c for c in spec.get("containers") or () if isinstance(c, Mapping)]
        inits = [c for c in spec.get("initContainers") or () if isinstance(c, Mapping)]
        for c in [*inits, *containers]:
            # names become file names (logs, specs): kube's DNS-label rule, checked again here
            if not _DNS_LABEL.fullmatch(str(c.get("name") or "")):
                raise ContainerConfigError(f"container name {str(c.get('name'))[:80]!r} is not a DNS label")
        volumes = await self._volume_sources(pod)
        prepared: list[tuple[Mapping[str, Any], dict[str, str], list[JSON]]] = []
        for c in [*inits, *containers]:
            env = await self.container_env(pod, c, ip=ip)
            prepared.append((c, env, self._mounts(c, volumes, uid)))
        pod_dir = self.pod_dir(uid)
        pod_dir.mkdir(parents=True, exist_ok=True)
        hosts = pod_dir / "hosts"
        if not hosts.exists():
            hosts.write_bytes(b"")
        self._hosts_files[uid] = hosts
        own = self.dns_pods.get(uid)
        if own is not None:
            own.ip = ip
        self._hosts_dirty = True
        _rewrite_in_place(hosts, self.hosts_text(meta.namespace, uid).encode())
        run = _PodRun(uid=uid, namespace=meta.namespace, name=meta.name)
        self.runs[uid] = run
        hostname = str(spec.get("hostname") or meta.name)
        run.task = asyncio.create_task(
            self._run_pod(run, prepared=prepared, inits=len(inits), hostname=hostname, restart=restart,
                          on_exit=on_exit),
            name=f"sim-process-runtime-{self.cluster}-{meta.namespace}/{meta.name}")

    def _mounts(self, container: Mapping[str, Any], volumes: Mapping[str, tuple[str, Path | None]],
                uid: str) -> list[JSON]:
        mounts: list[JSON] = []
        shm_mounted = False
        for vm in container.get("volumeMounts") or ():
            if not isinstance(vm, Mapping):
                continue
            name, target = str(vm.get("name") or ""), str(vm.get("mountPath") or "")
            if name not in volumes:
                raise ContainerConfigError(f"volumeMount {name}: the pod has no volume {name}")
            if not target.startswith("/") or ".." in target.split("/"):
                raise ContainerConfigError(f"volumeMount {name}: mountPath {target!r} must be absolute, without ..")
            kind, path = volumes[name]
            if kind == "tmpfs":
                mounts.append({"kind": "tmpfs", "target": target, "options": "mode=1777"})
                shm_mounted |= target.rstrip("/") == "/dev/shm"
                continue
            assert path is not None
            sub = str(vm.get("subPath") or "")
            if sub:
                if sub.startswith("/") or ".." in sub.split("/"):
                    raise ContainerConfigError(f"volumeMount {name}: subPath {sub!r} must be relative, without ..")
                path = path / sub
                path.mkdir(parents=True, exist_ok=True)
            shm_mounted |= target.rstrip("/") == "/dev/shm"
            mounts.append({"kind": "bind", "source": str(path), "target": target, "readOnly": bool(vm.get("readOnly"))})
        if not shm_mounted:
            mounts.insert(0, {"kind": "tmpfs", "target": "/dev/shm", "options": "mode=1777,size=64m"})
        mounts.append({"kind": "bind", "source": str(self.pod_dir(uid) / "hosts"), "target": "/etc/hosts"})
        # deeper paths after their parents (a volume on /data and one on /data/cache)
        mounts.sort(key=lambda m: str(m["target"]).rstrip("/").count("/"))
        return mounts

    async def _run_pod(self, run: _PodRun, *, prepared: list[tuple[Mapping[str, Any], dict[str, str], list[JSON]]],
                       inits: int, hostname: str, restart: int,
                       on_exit: Callable[[PodExit], None]) -> None:
        exits: list[ContainerExit] = []
        sidecars: list[asyncio.Task[ContainerExit]] = []
        try:
            for container, env, mounts in prepared[:inits]:
                if run.halted:
                    return
                if container.get("restartPolicy") == "Always":  # a sidecar: runs beside the containers
                    sidecars.append(asyncio.create_task(self._run_container(
                        run, container, env=env, mounts=mounts, hostname=hostname, restart=restart)))
                    continue
                result = await self._run_container(run, container, env=env, mounts=mounts, hostname=hostname,
                                                   restart=restart)
                if result.exit_code != 0:
                    exits.append(result)
                    return
            if run.halted:
                return
            mains = [asyncio.create_task(self._run_container(run, c, env=env, mounts=mounts, hostname=hostname,
                                                             restart=restart))
                     for c, env, mounts in prepared[inits:]]
            exits.extend(await asyncio.gather(*mains))
        finally:
            if sidecars:
                await self._signal_all(run, grace=5.0)
                for t in sidecars:
                    with contextlib.suppress(Exception):
                        await t
            if not run.halted and exits:
                on_exit(PodExit(uid=run.uid, containers=tuple(exits)))

    async def _run_container(self, run: _PodRun, container: Mapping[str, Any], *, env: dict[str, str],
                             mounts: list[JSON], hostname: str, restart: int) -> ContainerExit:
        name = str(container.get("name") or "main")
        started = _stamp()
        command = [str(a) for a in container.get("command") or ()]
        args = [str(a) for a in container.get("args") or ()]
        if not command:
            return ContainerExit(name=name, exit_code=128, reason="StartError", started_at=started,
                                 finished_at=_stamp(),
                                 message=f"container {name} has no command: the process runtime pulls no image, "
                                         "so it knows no entrypoint")
        argv = [expand(a, env) for a in [*command, *args]]
        pod_dir = self.pod_dir(run.uid)
        scratch = pod_dir / f"scratch-{name}-{restart}"
        scratch.mkdir(parents=True, exist_ok=True)
        spec = {"hostname": hostname, "mounts": mounts, "workingDir": str(container.get("workingDir") or ""),
                "argv": argv, "env": env, "scratch": str(scratch)}
        spec_path = pod_dir / f"{name}.{restart}.json"
        spec_path.write_text(json.dumps(spec), encoding="utf-8")
        spec_path.chmod(0o600)
        log_path = self.log_path(namespace=run.namespace, name=run.name, uid=run.uid, container=name, restart=restart)
        log_path.parent.mkdir(parents=True, exist_ok=True)
        log_path.write_bytes(b"")
        status_r, status_w = os.pipe()
        try:
            proc = await asyncio.create_subprocess_exec(
                *_UNSHARE, sys.executable, "-I", "-S", str(_PODEXEC), "--status-fd", str(status_w), str(spec_path),
                stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
                start_new_session=True, pass_fds=(status_w,))
        except OSError as e:
            os.close(status_r)
            return ContainerExit(name=name, exit_code=128, reason="StartError", started_at=started, finished_at=_stamp(),
                                 message=f"cannot start the container's process: {e}")
        finally:
            os.close(status_w)
        process = _Process(container=name, proc=proc)
        run.processes.append(process)
        writer = _LogWriter(log_path)
        assert proc.stdout is not None and proc.stderr is not None
        pumps = asyncio.gather(writer.pump(proc.stdout, "stdout"), writer.pump(proc.stderr, "stderr"))
        try:
            setup_error = await asyncio.to_thread(_read_all, status_r)
            code = await proc.wait()
            # the container ends with its first process, as when a pid namespace's init exits: what it
            # forked and left behind in its process group goes with it
            _killpg(proc.pid, signal.SIGKILL)
            try:
                await asyncio.wait_for(asyncio.shield(pumps), 10.0)
            except TimeoutError:  # a descendant that left the group holds the pipes: stop reading
                pass
        finally:
            if not pumps.done():
                pumps.cancel()
            with contextlib.suppress(BaseException):
                await pumps
            writer.close()
            with contextlib.suppress(ValueError):
                run.processes.remove(process)
        finished = _stamp()
        if setup_error:
            return ContainerExit(name=name, exit_code=128, reason="StartError", message=setup_error,
                                 started_at=started, finished_at=finished)
        exit_code = 128 - code if code < 0 else code  # killed by a signal: 128 + its number, as runc reports
        return ContainerExit(name=name, exit_code=exit_code, reason="Completed" if exit_code == 0 else "Error",
                             started_at=started, finished_at=finished)

    async def _signal_all(self, run: _PodRun, *, grace: float) -> None:
        """SIGTERM to every process group of the run, SIGKILL to what is left after `grace` seconds."""
        procs = [p.proc for p in run.processes]
        for p in procs:
            _killpg(p.pid, signal.SIGTERM)
        waits = [asyncio.ensure_future(p.wait()) for p in procs]
        try:
            if waits:
                await asyncio.wait(waits, timeout=max(0.0, grace))
        finally:
            # what is left, and what the container forked and left behind in its group (also when cancelled)
            for p in procs:
                _killpg(p.pid, signal.SIGKILL)
        if waits:
            await asyncio.wait(waits, timeout=10.0)
        await _groups_gone([p.pid for p in procs])

    def stop(self, uid: str, *, grace: float, then: Callable[[], None] | None = None) -> bool:
        """Stop the pod's processes (SIGTERM, SIGKILL after `grace` s) in the background; `then` runs once
        they are gone. False if the pod has no run going (nothing to wait for)."""
        run = self.runs.get(uid)
        if run is None or run.task is None or run.task.done():
            self.runs.pop(uid, None)
            return False
        if run.stopping is None:
            run.halted = True

            async def stopping() -> None:
                await self._signal_all(run, grace=grace)
                assert run.task is not None
                with contextlib.suppress(BaseException):
                    await asyncio.wait_for(asyncio.shield(run.task), 10.0)
                if self.runs.get(uid) is run:
                    del self.runs[uid]

            run.stopping = asyncio.create_task(stopping(), name=f"sim-process-stop-{run.namespace}/{run.name}")
        if then is not None:
            run.stopping.add_done_callback(lambda _t: then())
        return True

    def forget_run(self, uid: str) -> None:
        """The pod's run ended by itself: drop it."""
        run = self.runs.get(uid)
        if run is not None and (run.task is None or run.task.done()):
            del self.runs[uid]

    async def shutdown(self) -> None:
        """Stop every pod's processes (the kubelet stops): none outlives it. One stop for every caller, run
        to its end even when a caller is cancelled (a stopping task may be cancelled more than once)."""
        if self._shutdown is None:
            self._shutdown = asyncio.create_task(self._stop_all(), name=f"sim-process-runtime-stop-{self.cluster}")
        await asyncio.shield(self._shutdown)

    async def _stop_all(self) -> None:
        runs = list(self.runs.values())
        for run in runs:
            run.halted = True  # no container starts any more
        procs = [p.proc for run in runs for p in run.processes]
        for p in procs:
            _killpg(p.pid, signal.SIGTERM)
        try:
            waits = [asyncio.ensure_future(p.wait()) for p in procs]
            if waits:
                await asyncio.wait(waits, timeout=self.stop_grace_seconds)
        finally:
            # synchronous, so that a second cancel of the caller cannot skip it
            for run in runs:
                for p in [*procs, *(q.proc for q in run.processes)]:
                    _killpg(p.pid, signal.SIGKILL)
            for run in runs:
                if run.task is not None and not run.task.done():
                    run.task.cancel()
            self.runs.clear()
        await _groups_gone([p.pid for p in procs])

    def pids(self, uid: str | None = None) -> list[int]:
        """The pids of the container processes running now: the pod `uid`'s, else every pod's (each the
        leader of its process group)."""
        return [p.proc.pid for key, r in self.runs.items() if uid is None or key == uid
                for p in r.processes if p.proc.returncode is None]


def _resource_field(container: Mapping[str, Any], ref: Mapping[str, Any], *, var: str) -> str:
    resource = str(ref.get("resource") or "")
    part, _, name = resource.partition(".")
    resources = container.get("resources") or {}
    values = (resources.get(part) or {}) if isinstance(resources, Mapping) and part in ("limits", "requests") else None
    if values is None or not name:
        raise ContainerConfigError(f"env {var}: resourceFieldRef {resource!r} is not supported")
    return str(values.get(name, "0"))


def _killpg(pid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)


def _group_alive(pgid: int) -> bool:
    """Whether a process of the group lives (a zombie does not: it only waits to be reaped)."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    with os.scandir("/proc") as entries:  # closed on the early return too (else a ResourceWarning)
        for entry in entries:
            if not entry.name.isdigit():
                continue
            try:
                fields = Path(entry.path, "stat").read_text().rsplit(") ", 1)[1].split()
            except (OSError, IndexError):
                continue
            if len(fields) > 2 and fields[2] == str(pgid) and fields[0] != "Z":
                return True
    return False


async def _groups_gone(pgids: Sequence[int], *, timeout: float = 10.0) -> None:
    """Wait until the SIGKILLed groups have no live process (the kernel ends them soon after the signal)."""
    deadline = time.monotonic() + timeout
    for pgid in pgids:
        while _group_alive(pgid) and time.monotonic() < deadline:
            await asyncio.sleep(0.01)


def _read_all(fd: int) -> str:
    chunks = []
    try:
        while True:
            chunk = os.read(fd, 4096)
            if not chunk:
                break
            chunks.append(chunk)
    finally:
        os.close(fd)
    return b"".join(chunks).decode(errors="replace")


def _rewrite_in_place(path: Path, content: bytes) -> None:
    try:
        with open(path, "r+b") as f:
            if f.read() == content:
                return
            f.seek(0)
            f.write(content)
            f.truncate()
    except FileNotFoundError:
        return


class _LogWriter:
    """A container's log file in CRI format, rotated at LOG_ROTATE_BYTES."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.file = open(path, "ab")  # noqa: SIM115 - closed by close()
        self.size = 0

    def write(self, stream: str, text: bytes, *, full: bool) -> None:
        line = f"{_now()} {stream} {'F' if full else 'P'} ".encode() + text + b"\n"
        if self.size + len(line) > LOG_ROTATE_BYTES and self.size:
            self.file.close()
            os.replace(self.path, self.path.with_suffix(".log.1"))
            self.file = open(self.path, "ab")  # noqa: SIM115
            self.size = 0
        self.file.write(line)
        self.file.flush()
        self.size += len(line)

    async def pump(self, reader: asyncio.StreamReader, stream: str) -> None:
        pending = b""
        while True:
            chunk = await reader.read(65536)
            if not chunk:
                break
            pending += chunk
            while b"\n" in pending:
                line, pending = pending.split(b"\n", 1)
                while len(line) > _MAX_LINE_BYTES:
                    self.write(stream, line[:_MAX_LINE_BYTES], full=False)
                    line = line[_MAX_LINE_BYTES:]
                self.write(stream, line, full=True)
            while len(pending) > _MAX_LINE_BYTES:
                self.write(stream, pending[:_MAX_LINE_BYTES], full=False)
                pending = pending[_MAX_LINE_BYTES:]
        if pending:
            self.write(stream, pending, full=True)

    def close(self) -> None:
        self.file.close()


def default_root(cluster: str) -> Path:
    """A fresh directory for a cluster's runtime (the caller removes it)."""
    import tempfile

    return Path(tempfile.mkdtemp(prefix=f"federator-sim-{cluster}-processes-"))


def remove_root(root: Path) -> None:
    shutil.rmtree(root, ignore_errors=True)

