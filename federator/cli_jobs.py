"""The researcher's and operator's commands against a running hub.

    federator submit -f FILE [-f FILE ...]          create TrainingJobs (YAML/JSON, several documents, - for stdin)
    federator get jobs|clusters [NAME] [-n NS] [-A] [-w] [-o json|yaml|wide|name]
    federator describe job NAME                      placement, why-not table, history, conditions, pods
    federator delete job NAME [NAME ...]
    federator cluster add NAME --kubeconfig FILE ... | cluster add -f FILE
    federator cluster list | cluster remove NAME
    federator kubeconfig [--role admin|researcher]   where `federator up` wrote the kubeconfigs
    federator version [--client]                     client and hub versions

Every command talks only to the hub API through `federator.hubclient` (the
kubeconfig as kubectl reads it). Output is an aligned table by default, or
JSON/YAML. Every error is one line on stderr with a non-zero exit code: server
errors as kubectl words them (`Error from server (NotFound): ...`), file and
usage errors as `error: ...`; never a traceback, never a credential.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import datetime as dt
import json
import os
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

import yaml

from federator import __version__
from federator.hubclient import (
    API_GROUP,
    API_VERSION,
    HubClient,
    HubConnection,
    HubError,
    JSONObject,
    clusters_path,
    jobs_path,
    load_connection,
)

GROUP_VERSION = f"{API_GROUP}/{API_VERSION}"
_MAX_INPUT_BYTES = 8 * 1024 * 1024


class InputError(Exception):
    """A bad file or flag: printed as `error: <message>`, exit code 2."""


# ---------------------------------------------------------------- plumbing


def _hub_flags(parser: argparse.ArgumentParser, *, member_kubeconfig: bool = False) -> None:
    group = parser.add_argument_group("hub access")
    if member_kubeconfig:
        # --kubeconfig names the member cluster's kubeconfig in `cluster add`.
        group.add_argument("--hub-kubeconfig", dest="hub_kubeconfig", metavar="FILE",
                           help="kubeconfig of the hub (default: $KUBECONFIG, then ~/.kube/config)")
    else:
        group.add_argument("--kubeconfig", "--hub-kubeconfig", dest="hub_kubeconfig", metavar="FILE",
                           help="kubeconfig of the hub (default: $KUBECONFIG, then ~/.kube/config)")
    group.add_argument("--hub-context", dest="hub_context", metavar="NAME",
                       help="kubeconfig context to use (default: the current context)")
    group.add_argument("--request-timeout", type=float, default=30.0, metavar="SECONDS",
                       help="give up on a request after this long (default: 30)")


def _run(args: argparse.Namespace, work: Callable[[HubClient], Any]) -> int:
    """Connect as the kubeconfig says, run `work`, and turn failures into one line."""
    try:
        connection = load_connection(kubeconfig=args.hub_kubeconfig, context=args.hub_context)
        return int(asyncio.run(_with_client(connection, args.request_timeout, work)) or 0)
    except HubError as e:
        print(str(e), file=sys.stderr)
        return 1
    except InputError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


async def _with_client(connection: HubConnection, timeout: float, work: Callable[[HubClient], Any]) -> Any:
    async with HubClient(connection, timeout_seconds=timeout) as client:
        return await work(client)


def _namespace(args: argparse.Namespace, client: HubClient) -> str:
    return str(getattr(args, "namespace", None) or client.connection.namespace or "default")


# ---------------------------------------------------------------- reading manifests


def read_documents(path: str, *, stdin: TextIO | None = None) -> list[JSONObject]:
    """The objects in a YAML/JSON file ('-' = stdin); `kind: List` is unpacked."""
    if path == "-":
        text = (stdin or sys.stdin).read(_MAX_INPUT_BYTES + 1)
        where = "<stdin>"
    else:
        file = Path(path)
        where = path
        try:
            if file.stat().st_size > _MAX_INPUT_BYTES:
                raise InputError(f"{where}: larger than {_MAX_INPUT_BYTES // (1024 * 1024)} MiB")
            text = file.read_text(encoding="utf-8")
        except FileNotFoundError:
            raise InputError(f"{where}: no such file") from None
        except IsADirectoryError:
            raise InputError(f"{where}: is a directory") from None
        except UnicodeDecodeError:
            raise InputError(f"{where}: not UTF-8 text") from None
        except OSError as e:
            raise InputError(f"{where}: cannot read it ({e.strerror})") from None
    if len(text) > _MAX_INPUT_BYTES:
        raise InputError(f"{where}: larger than {_MAX_INPUT_BYTES // (1024 * 1024)} MiB")
    try:
        loaded = [d for d in yaml.safe_load_all(text) if d is not None]
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        at = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = getattr(e, "problem", None) or "malformed"
        raise InputError(f"{where}: not valid YAML or JSON{at}: {problem}") from None
    documents: list[JSONObject] = []
    for index, document in enumerate(loaded, start=1):
        if not isinstance(document, dict):
            raise InputError(f"{where}: document {index} is a {type(document).__name__}, not an object")
        if document.get("kind") == "List" and isinstance(document.get("items"), list):
            documents.extend(i for i in document["items"] if isinstance(i, dict))
        else:
            documents.append(document)
    if not documents:
        raise InputError(f"{where}: no objects in it")
    try:
        # JSON round trip: refuse what the API cannot hold (YAML dates, sets...) here, clearly.
        return [json.loads(json.dumps(d)) for d in documents]
    except (TypeError, ValueError) as e:
        raise InputError(f"{where}: {e}") from None


def _check_kind(document: JSONObject, kind: str, where: str, index: int) -> None:
    found_kind, found_version = document.get("kind"), document.get("apiVersion")
    if found_kind != kind or found_version not in (None, GROUP_VERSION):
        shown = f"{found_version}/{found_kind}" if found_version else str(found_kind)
        raise InputError(f"{where}: object {index} is a {shown}, not a {GROUP_VERSION} {kind}")


# ---------------------------------------------------------------- tables


def _age(timestamp: Any, now: dt.datetime) -> str:
    from federator.apiserver.table import age

    return age(timestamp, now)


@dataclass(frozen=True, slots=True)
class _Column:
    header: str
    cell: Callable[[JSONObject], Any]
    wide_only: bool = False
    date: bool = False


def _columns(kind: str) -> list[_Column]:
    from federator.apis.crd import KINDS, column_getter

    return [_Column(c.name.upper(), column_getter(c.json_path), wide_only=c.priority > 0, date=c.type == "date")
            for c in KINDS[kind].columns]


def _cell_text(value: Any) -> str:
    if value is None or value == "":
        return "<none>"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def render_table(headers: Sequence[str], rows: Iterable[Sequence[str]]) -> str:
    """kubectl-style columns: left-aligned, three spaces apart."""
    materialized = [list(headers)] + [list(r) for r in rows]
    widths = [max(len(r[i]) for r in materialized) for i in range(len(headers))]
    lines = ["   ".join(cell.ljust(widths[i]) for i, cell in enumerate(r)).rstrip() for r in materialized]
    return "\n".join(lines)


class _Printer:
    """Rows of one kind, with the header printed once (also across watch events)."""

    def __init__(self, kind: str, *, wide: bool, all_namespaces: bool, out: TextIO) -> None:
        self.columns = [c for c in _columns(kind) if wide or not c.wide_only]
        self.all_namespaces = all_namespaces
        self.out = out
        self.widths: list[int] | None = None

    def headers(self) -> list[str]:
        return (["NAMESPACE"] if self.all_namespaces else []) + ["NAME"] + [c.header for c in self.columns]

    def row(self, obj: JSONObject, now: dt.datetime) -> list[str]:
        meta = obj.get("metadata") or {}
        cells = [str(meta.get("namespace", ""))] if self.all_namespaces else []
        cells.append(str(meta.get("name", "")))
        for column in self.columns:
            value = column.cell(obj)
            cells.append(_age(value, now) if column.date else _cell_text(value))
        return cells

    def print_all(self, objects: Sequence[JSONObject]) -> None:
        now = dt.datetime.now(dt.UTC)
        rows = [self.row(o, now) for o in objects]
        table = [self.headers()] + rows
        self.widths = [max(len(r[i]) for r in table) for i in range(len(table[0]))]
        for r in table:
            self._line(r)

    def print_one(self, obj: JSONObject) -> None:
        if self.widths is None:
            self.print_all([obj])
            return
        self._line(self.row(obj, dt.datetime.now(dt.UTC)))

    def _line(self, cells: Sequence[str]) -> None:
        assert self.widths is not None
        self.widths = [max(w, len(c)) for w, c in zip(self.widths, cells, strict=True)]
        print("   ".join(c.ljust(w) for c, w in zip(cells, self.widths, strict=True)).rstrip(),
              file=self.out, flush=True)


def _dump(obj: Any, output: str, out: TextIO) -> None:
    if output == "json":
        print(json.dumps(obj, indent=4), file=out, flush=True)
    else:
        print(yaml.safe_dump(obj, sort_keys=False, default_flow_style=False).rstrip("\n"), file=out, flush=True)


# ---------------------------------------------------------------- submit


def _cmd_submit(args: argparse.Namespace) -> int:
    try:
        batches = [(f, read_documents(f)) for f in args.filename]
    except InputError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    for where, documents in batches:
        for index, document in enumerate(documents, start=1):
            try:
                _check_kind(document, "TrainingJob", "<stdin>" if where == "-" else where, index)
            except InputError as e:
                print(f"error: {e}", file=sys.stderr)
                return 2

    async def work(client: HubClient) -> int:
        failures = 0
        for _where, documents in batches:
            for document in documents:
                meta = document.setdefault("metadata", {})
                if not isinstance(meta, dict):
                    print("error: metadata must be an object", file=sys.stderr)
                    failures += 1
                    continue
                body_ns = meta.get("namespace")
                if args.namespace and body_ns and body_ns != args.namespace:
                    print(f'error: the namespace from the provided object "{body_ns}" does not match the '
                          f'namespace "{args.namespace}". You must pass \'--namespace={body_ns}\' to perform '
                          "this operation.", file=sys.stderr)
                    failures += 1
                    continue
                namespace = str(body_ns or _namespace(args, client))
                document.setdefault("apiVersion", GROUP_VERSION)
                try:
                    created = await client.request("POST", jobs_path(namespace), body=document)
                except HubError as e:
                    if e.code == 0:
                        raise  # the hub is unreachable: the next document would fail the same way
                    print(str(e), file=sys.stderr)
                    failures += 1
                    continue
                name = (created.get("metadata") or {}).get("name", meta.get("name"))
                if args.output in ("json", "yaml"):
                    _dump(created, args.output, sys.stdout)
                else:
                    print(f"trainingjob.{API_GROUP}/{name} created", flush=True)
        return 1 if failures else 0

    return _run(args, work)


# ---------------------------------------------------------------- get


_RESOURCES = {
    "jobs": "TrainingJob", "job": "TrainingJob", "tj": "TrainingJob", "trainingjobs": "TrainingJob",
    "trainingjob": "TrainingJob",
    "clusters": "MemberCluster", "cluster": "MemberCluster", "mc": "MemberCluster",
    "memberclusters": "MemberCluster", "membercluster": "MemberCluster",
}


def _collection(kind: str, namespace: str | None) -> str:
    return jobs_path(namespace) if kind == "TrainingJob" else clusters_path()


def _object_path(kind: str, namespace: str | None, name: str) -> str:
    return jobs_path(namespace, name) if kind == "TrainingJob" else clusters_path(name)


def _cmd_get(args: argparse.Namespace) -> int:
    kind = _RESOURCES[args.resource]
    if args.all_namespaces and args.name:
        print("error: a resource cannot be retrieved by name across all namespaces", file=sys.stderr)
        return 2

    async def work(client: HubClient) -> int:
        namespace = None if kind == "MemberCluster" or args.all_namespaces else _namespace(args, client)
        output = args.output or "table"
        printer = _Printer(kind, wide=output == "wide", all_namespaces=bool(args.all_namespaces and kind ==
                           "TrainingJob"), out=sys.stdout)
        params: dict[str, str] = {}
        if args.selector:
            params["labelSelector"] = args.selector
        if args.name:
            params["fieldSelector"] = f"metadata.name={args.name}"
            obj = await client.request("GET", _object_path(kind, namespace, args.name))
            items = [obj]
            resource_version = str((obj.get("metadata") or {}).get("resourceVersion") or "")
        else:
            listing = await client.request("GET", _collection(kind, namespace), params=params)
            items = [i for i in listing.get("items") or [] if isinstance(i, dict)]
            resource_version = str((listing.get("metadata") or {}).get("resourceVersion") or "")
        if output in ("json", "yaml"):
            if args.name:
                _dump(items[0], output, sys.stdout)
            else:
                _dump({"apiVersion": "v1", "kind": "List", "metadata": {"resourceVersion": ""}, "items": items},
                      output, sys.stdout)
        elif output == "name":
            for item in items:
                print(f"{kind.lower()}.{API_GROUP}/{(item.get('metadata') or {}).get('name')}", flush=True)
        elif items:
            printer.print_all(items)
        elif not args.watch:
            where = "" if namespace is None else f" in {namespace} namespace"
            print(f"No resources found{where}.", file=sys.stderr)
        if not args.watch:
            return 0
        async for event in client.watch(_collection(kind, namespace), resource_version=resource_version,
                                        params=params):
            obj = event.get("object") or {}
            if output in ("json", "yaml"):
                _dump(obj, output, sys.stdout)
            elif output == "name":
                print(f"{kind.lower()}.{API_GROUP}/{(obj.get('metadata') or {}).get('name')}", flush=True)
            else:
                printer.print_one(obj)
        return 0

    return _run(args, work)


# ---------------------------------------------------------------- describe


def _time(value: Any, now: dt.datetime) -> str:
    if not value:
        return "<unknown>"
    return f"{value} ({_age(value, now)} ago)"


def describe_job(job: JSONObject, *, now: dt.datetime | None = None) -> str:
    """The text of `federator describe job`: what the job asks for, where it is
    and why (placement, why-not table), what happened (history), its pods."""
    now = now or dt.datetime.now(dt.UTC)
    meta = job.get("metadata") or {}
    spec = job.get("spec") or {}
    status = job.get("status") or {}
    placement_status = status.get("placement") or {}
    out: list[str] = []
    add = out.append
    add(f"Name:         {meta.get('name', '')}")
    add(f"Namespace:    {meta.get('namespace', '')}")
    add(f"Created:      {_time(meta.get('creationTimestamp'), now)}")
    if meta.get("deletionTimestamp"):
        add(f"Deleting:     since {meta['deletionTimestamp']} (finalizers: {', '.join(meta.get('finalizers') or [])})")
    labels = meta.get("labels") or {}
    add("Labels:       " + (", ".join(f"{k}={v}" for k, v in sorted(labels.items())) or "<none>"))
    add(f"Priority:     {spec.get('priority', 0)}")
    add(f"Suspended:    {'yes' if spec.get('suspend') else 'no'}")
    add(f"Phase:        {status.get('phase') or '<none> (not yet seen by the hub)'}")
    cluster = placement_status.get("cluster")
    add(f"Cluster:      {cluster or '<none>'}")
    add(f"Epoch:        {placement_status.get('epoch', 0)}")
    if placement_status.get("decisionResourceVersion"):
        add(f"Decision RV:  {placement_status['decisionResourceVersion']}")
    add(f"Requeues:     {status.get('requeues', 0)}")

    add("Roles:")
    roles = spec.get("roles") or []
    role_rows = []
    for role in roles:
        template = role.get("template") or {}
        resources = template.get("resources") or {}
        role_rows.append([str(role.get("name", "")), str(role.get("replicas", "")), str(template.get("image", "")),
                          ", ".join(f"{k}={v}" for k, v in resources.items()) or "<none>"])
    add(_indent(render_table(["NAME", "REPLICAS", "IMAGE", "REQUESTS (per pod)"], role_rows)))
    add(f"  Gang size:  {sum(int(r.get('replicas') or 0) for r in roles)} pods, all in one cluster or none")

    wants = spec.get("placement") or {}
    add("Placement requirements:")
    add(f"  Network:    {wants.get('network', 'any')}")
    add(f"  GPU models: {', '.join(wants.get('gpuModels') or []) or 'any'}")
    add(f"  Datasets:   {', '.join(wants.get('datasets') or []) or '<none>'}")
    selector = wants.get("clusterSelector")
    add(f"  Clusters:   {_selector_text(selector) if selector else 'any'}")
    failover = spec.get("failover") or {}
    add(f"Failover:     on cluster loss {failover.get('onClusterLoss', 'requeue')}, "
        f"at most {failover.get('maxRequeues', 3)} requeues")

    add("Placement explanation:")
    if cluster:
        add(f"  Placed in {cluster} (epoch {placement_status.get('epoch', 0)}).")
    why_not = placement_status.get("whyNot") or []
    if why_not:
        add("  Why not the other clusters:")
        add(_indent(render_table(["CLUSTER", "FILTER", "REASON", "MESSAGE"],
                                 [[str(r.get("cluster", "")), str(r.get("filter", "")), str(r.get("reason", "")),
                                   str(r.get("message", ""))] for r in why_not]), 4))
    elif not cluster:
        add("  No placement decision yet.")

    add("Pods:")
    counts = status.get("podCounts") or {}
    if counts:
        add(_indent(render_table(["ROLE", "PENDING", "RUNNING", "SUCCEEDED", "FAILED"],
                                 [[str(role), *(str((c or {}).get(k, 0)) for k in
                                                ("pending", "running", "succeeded", "failed"))]
                                  for role, c in sorted(counts.items())])))
    else:
        add("  <none>")

    add("Conditions:")
    conditions = status.get("conditions") or []
    if conditions:
        add(_indent(render_table(["TYPE", "STATUS", "REASON", "AGE", "MESSAGE"],
                                 [[str(c.get("type", "")), str(c.get("status", "")), str(c.get("reason", "")),
                                   _age(c.get("lastTransitionTime"), now) if c.get("lastTransitionTime") else "",
                                   str(c.get("message", ""))] for c in conditions])))
    else:
        add("  <none>")

    add("History:")
    history = status.get("history") or []
    if history:
        add(_indent(render_table(["TIME", "EVENT", "CLUSTER", "EPOCH", "MESSAGE"],
                                 [[str(h.get("time", "")), str(h.get("event", "")), str(h.get("cluster") or ""),
                                   "" if h.get("epoch") is None else str(h.get("epoch")), str(h.get("message", ""))]
                                  for h in history])))
    else:
        add("  <none>")
    return "\n".join(out)


def _indent(text: str, spaces: int = 2) -> str:
    return "\n".join(" " * spaces + line for line in text.splitlines())


def _selector_text(selector: Mapping[str, Any]) -> str:
    parts = [f"{k}={v}" for k, v in sorted((selector.get("matchLabels") or {}).items())]
    for expression in selector.get("matchExpressions") or []:
        values = ",".join(expression.get("values") or [])
        parts.append(f"{expression.get('key')} {str(expression.get('operator', '')).lower()} ({values})")
    return ", ".join(parts) or "any"


def _cmd_describe(args: argparse.Namespace) -> int:
    async def work(client: HubClient) -> int:
        job = await client.request("GET", jobs_path(_namespace(args, client), args.name))
        print(describe_job(job), flush=True)
        return 0

    return _run(args, work)


# ---------------------------------------------------------------- delete


def _cmd_delete(args: argparse.Namespace) -> int:
    async def work(client: HubClient) -> int:
        failures = 0
        namespace = _namespace(args, client)
        for name in args.names:
            try:
                answer = await client.request("DELETE", jobs_path(namespace, name))
            except HubError as e:
                if e.code == 0:
                    raise
                print(str(e), file=sys.stderr)
                failures += 1
                continue
            finalizing = answer.get("kind") == "TrainingJob"  # still there: its cleanup runs first
            suffix = " (cleaning up member clusters first)" if finalizing else ""
            print(f'trainingjob.{API_GROUP} "{name}" deleted{suffix}', flush=True)
        return 1 if failures else 0

    return _run(args, work)


# ---------------------------------------------------------------- clusters


def member_connection(kubeconfig: Path, *, context: str | None) -> JSONObject:
    """spec.connection of a registration from a member's kubeconfig: the
    server, its CA, and the credentials the hub will store (token, or client
    certificate and key). Never prints what it reads."""
    where = str(kubeconfig)
    try:
        config = yaml.safe_load(kubeconfig.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise InputError(f"--kubeconfig {where}: no such file") from None
    except (OSError, UnicodeDecodeError) as e:
        raise InputError(f"--kubeconfig {where}: cannot read it ({type(e).__name__})") from None
    except yaml.YAMLError:
        raise InputError(f"--kubeconfig {where}: not valid YAML") from None
    if not isinstance(config, dict):
        raise InputError(f"--kubeconfig {where}: not a kubeconfig")
    base = kubeconfig.resolve().parent

    def named(section: str, name: Any) -> JSONObject:
        for entry in config.get(section) or []:
            if isinstance(entry, dict) and entry.get("name") == name:
                value = entry.get(section[:-1])
                if isinstance(value, dict):
                    return value
        raise InputError(f"--kubeconfig {where}: no {section[:-1]} named {name!r}")

    context_name = context or config.get("current-context")
    if not context_name:
        raise InputError(f"--kubeconfig {where}: no current-context; pass --context")
    ctx = named("contexts", context_name)
    cluster = named("clusters", ctx.get("cluster"))
    user = named("users", ctx.get("user"))

    def data(inline_key: str, file_key: str, holder: JSONObject) -> str | None:
        if holder.get(inline_key):
            return str(holder[inline_key])
        if holder.get(file_key):
            file = Path(os.path.expanduser(str(holder[file_key])))
            file = file if file.is_absolute() else base / file
            try:
                return base64.b64encode(file.read_bytes()).decode("ascii")
            except OSError:
                raise InputError(f"--kubeconfig {where}: cannot read {file_key} {file}") from None
        return None

    connection: JSONObject = {"server": cluster.get("server")}
    if not connection["server"]:
        raise InputError(f"--kubeconfig {where}: cluster {ctx.get('cluster')!r} has no server")
    ca = data("certificate-authority-data", "certificate-authority", cluster)
    if ca:
        connection["certificateAuthorityData"] = ca
    if cluster.get("insecure-skip-tls-verify"):
        connection["insecureSkipTLSVerify"] = True
    credentials: JSONObject = {}
    token = user.get("token")
    if not token and user.get("tokenFile"):
        try:
            token = Path(os.path.expanduser(str(user["tokenFile"]))).read_text(encoding="utf-8").strip()
        except OSError:
            raise InputError(f"--kubeconfig {where}: cannot read the user's tokenFile") from None
    if token:
        credentials["token"] = str(token)
    cert = data("client-certificate-data", "client-certificate", user)
    key = data("client-key-data", "client-key", user)
    if cert or key:
        credentials["clientCertificateData"] = cert
        credentials["clientKeyData"] = key
    if not credentials:
        how = "an exec plugin" if user.get("exec") else "an auth provider" if user.get("auth-provider") else \
            "no credentials"
        raise InputError(f"--kubeconfig {where}: user {ctx.get('user')!r} has {how}; the hub needs a token "
                         "or a client certificate and key it can store")
    connection["credentials"] = credentials
    return connection


def registration_from_flags(args: argparse.Namespace) -> JSONObject:
    """A MemberCluster from `cluster add` flags."""
    missing = [flag for flag, value in (("--kubeconfig", args.member_kubeconfig), ("--location", args.location),
                                        ("--network", args.network), ("--bandwidth-gbps", args.bandwidth_gbps),
                                        ("--scheduler", args.scheduler)) if value is None]
    if not args.name:
        raise InputError("cluster add needs a NAME (or -f FILE)")
    if missing:
        raise InputError(f"cluster add {args.name}: missing {', '.join(missing)} (or register from -f FILE)")
    spec: JSONObject = {
        "connection": member_connection(Path(args.member_kubeconfig), context=args.context),
        "location": {"type": args.location},
        "network": {"type": args.network, "bandwidthGbps": float(args.bandwidth_gbps)},
        "scheduler": {"name": args.scheduler},
    }
    if args.provider:
        spec["location"]["provider"] = args.provider
    if args.region:
        spec["location"]["region"] = args.region
    if args.rdma_kind:
        spec["network"]["rdmaKind"] = args.rdma_kind
    if args.scheduler_name:
        spec["scheduler"]["schedulerName"] = args.scheduler_name
    if args.label:
        spec["labels"] = dict(_pair(item, "--label", "KEY=VALUE") for item in args.label)
    if args.gpu_model:
        spec["gpuModels"] = list(args.gpu_model)
    if args.cost_per_gpu_hour is not None:
        spec["costPerGpuHour"] = float(args.cost_per_gpu_hour)
    if args.dataset:
        datasets = []
        for item in args.dataset:
            name, size = _pair(item, "--dataset", "NAME=BYTES")
            try:
                datasets.append({"name": name, "sizeBytes": int(size)})
            except ValueError:
                raise InputError(f"--dataset {name}: size must be a whole number of bytes") from None
        spec["datasets"] = datasets
    if args.cordoned:
        spec["cordoned"] = True
    return {"apiVersion": GROUP_VERSION, "kind": "MemberCluster", "metadata": {"name": args.name}, "spec": spec}


def _pair(item: str, flag: str, form: str) -> tuple[str, str]:
    key, sep, value = item.partition("=")
    if not sep or not key:
        raise InputError(f"{flag} {item!r}: expected {form}")
    return key, value


def _cmd_cluster_add(args: argparse.Namespace) -> int:
    try:
        if args.filename:
            if args.name or args.member_kubeconfig:
                raise InputError("cluster add takes either -f FILE or NAME with flags, not both")
            documents = read_documents(args.filename)
            for index, document in enumerate(documents, start=1):
                _check_kind(document, "MemberCluster", "<stdin>" if args.filename == "-" else args.filename, index)
        else:
            documents = [registration_from_flags(args)]
    except InputError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2

    async def work(client: HubClient) -> int:
        failures = 0
        for document in documents:
            document.setdefault("apiVersion", GROUP_VERSION)
            try:
                created = await client.request("POST", clusters_path(), body=document)
            except HubError as e:
                if e.code == 0:
                    raise
                print(str(e), file=sys.stderr)
                failures += 1
                continue
            print(f"membercluster.{API_GROUP}/{(created.get('metadata') or {}).get('name')} registered", flush=True)
        return 1 if failures else 0

    return _run(args, work)


def _cmd_cluster_remove(args: argparse.Namespace) -> int:
    async def work(client: HubClient) -> int:
        failures = 0
        for name in args.names:
            try:
                await client.request("DELETE", clusters_path(name))
            except HubError as e:
                if e.code == 0:
                    raise
                print(str(e), file=sys.stderr)
                failures += 1
                continue
            print(f'membercluster.{API_GROUP} "{name}" removed', flush=True)
        return 1 if failures else 0

    return _run(args, work)


# ---------------------------------------------------------------- kubeconfig, version


def _cmd_kubeconfig(args: argparse.Namespace) -> int:
    path = Path(args.state_dir) / f"{args.role}.kubeconfig"
    if not path.is_file():
        print(f"error: no {args.role} kubeconfig at {path}; start the hub with `federator up` "
              f"(it writes {args.role}.kubeconfig into its --state-dir)", file=sys.stderr)
        return 1
    if args.raw:
        sys.stdout.write(path.read_text(encoding="utf-8"))
    elif args.export:
        print(f"export KUBECONFIG={path.resolve()}")
    else:
        print(path.resolve())
    return 0


def _cmd_version(args: argparse.Namespace) -> int:
    print(f"Client Version: federator {__version__}", flush=True)
    if args.client:
        return 0

    async def work(client: HubClient) -> int:
        info = await client.request("GET", "/version")
        hub = info.get("federatorVersion") or "unknown"
        print(f"Server Version: federator {hub} (Kubernetes API {info.get('gitVersion', '?')}) "
              f"at {client.connection.server}", flush=True)
        return 0

    return _run(args, work)


# ---------------------------------------------------------------- registration


def register(sub: Any) -> None:
    """Add submit, get, describe, delete, cluster, kubeconfig and version to the `federator` parser."""
    p = sub.add_parser("submit", help="submit TrainingJobs from YAML/JSON files (several documents allowed)",
                       description="Create the TrainingJobs in FILE (YAML or JSON; several documents, or a "
                                   "kind: List; - reads stdin).")
    p.add_argument("-f", "--filename", action="append", required=True, metavar="FILE",
                   help="file with TrainingJobs ('-' for stdin); repeatable")
    p.add_argument("-n", "--namespace", help="namespace for jobs that do not name one (default: the context's)")
    p.add_argument("-o", "--output", choices=["json", "yaml"], help="print the created objects")
    _hub_flags(p)
    p.set_defaults(handler=_cmd_submit)

    p = sub.add_parser("get", help="list jobs or clusters (-w to watch)",
                       description="Show TrainingJobs (jobs, tj) or MemberClusters (clusters, mc).")
    p.add_argument("resource", choices=sorted(_RESOURCES), metavar="jobs|clusters")
    p.add_argument("name", nargs="?", help="one object by name")
    p.add_argument("-n", "--namespace", help="namespace (default: the context's)")
    p.add_argument("-A", "--all-namespaces", action="store_true", help="jobs in every namespace")
    p.add_argument("-w", "--watch", action="store_true", help="after listing, print every change (Ctrl-C stops)")
    p.add_argument("-o", "--output", choices=["json", "yaml", "wide", "name"], help="output format")
    p.add_argument("-l", "--selector", help="label selector, e.g. team=vision")
    _hub_flags(p)
    p.set_defaults(handler=_cmd_get)

    p = sub.add_parser("describe", help="explain a job: placement, why-not table, history, pods")
    p.add_argument("resource", choices=["job", "jobs", "tj", "trainingjob"], metavar="job")
    p.add_argument("name")
    p.add_argument("-n", "--namespace", help="namespace (default: the context's)")
    _hub_flags(p)
    p.set_defaults(handler=_cmd_describe)

    p = sub.add_parser("delete", help="delete jobs (their member objects are cleaned up first)")
    p.add_argument("resource", choices=["job", "jobs", "tj", "trainingjob"], metavar="job")
    p.add_argument("names", nargs="+", metavar="NAME")
    p.add_argument("-n", "--namespace", help="namespace (default: the context's)")
    _hub_flags(p)
    p.set_defaults(handler=_cmd_delete)

    cluster = sub.add_parser("cluster", help="register, list and remove member clusters (admin)",
                             description="Manage MemberCluster registrations on the hub.")
    csub = cluster.add_subparsers(dest="cluster_command", metavar="add|list|remove")
    csub.required = True
    p = csub.add_parser(
        "add", help="register a member cluster from a kubeconfig and flags, or from -f FILE",
        description="Register a member cluster. With --kubeconfig the hub stores the member's server, CA and "
                    "credentials (never shown again); the hub itself is reached with --hub-kubeconfig, "
                    "$KUBECONFIG or ~/.kube/config.",
    )
    p.add_argument("name", nargs="?", help="cluster name (a DNS-1123 label)")
    p.add_argument("-f", "--filename", metavar="FILE", help="MemberCluster YAML/JSON ('-' for stdin)")
    p.add_argument("--kubeconfig", dest="member_kubeconfig", metavar="FILE", help="the MEMBER cluster's kubeconfig")
    p.add_argument("--context", help="context in the member kubeconfig (default: its current context)")
    p.add_argument("--location", choices=["onPrem", "cloud"])
    p.add_argument("--provider", help="e.g. aws, gcp, or a datacenter name")
    p.add_argument("--region")
    p.add_argument("--network", choices=["rdma", "ethernet"])
    p.add_argument("--rdma-kind", choices=["infiniband", "roce"])
    p.add_argument("--bandwidth-gbps", type=float, metavar="GBPS")
    p.add_argument("--scheduler", choices=["volcano", "coscheduling", "kube-batch", "default"])
    p.add_argument("--scheduler-name", help="pod schedulerName (default: the scheduler's usual name)")
    p.add_argument("--label", action="append", metavar="KEY=VALUE", help="cluster label (repeatable)")
    p.add_argument("--gpu-model", action="append", metavar="MODEL", help="GPU model offered (repeatable)")
    p.add_argument("--cost-per-gpu-hour", type=float, metavar="COST")
    p.add_argument("--dataset", action="append", metavar="NAME=BYTES", help="cached dataset (repeatable)")
    p.add_argument("--cordoned", action="store_true", help="register without accepting new gangs")
    _hub_flags(p, member_kubeconfig=True)
    p.set_defaults(handler=_cmd_cluster_add)
    p = csub.add_parser("list", help="list member clusters")
    p.add_argument("-o", "--output", choices=["json", "yaml", "wide", "name"], help="output format")
    p.add_argument("-w", "--watch", action="store_true", help="after listing, print every change")
    _hub_flags(p)
    p.set_defaults(handler=_cmd_get, resource="clusters", name=None, all_namespaces=False, namespace=None,
                   selector=None)
    p = csub.add_parser("remove", help="remove member cluster registrations")
    p.add_argument("names", nargs="+", metavar="NAME")
    _hub_flags(p)
    p.set_defaults(handler=_cmd_cluster_remove)

    p = sub.add_parser("kubeconfig", help="where `federator up` wrote the admin/researcher kubeconfigs",
                       description="Print the path (default), an export line, or the content of a kubeconfig "
                                   "written by `federator up` in development mode.")
    p.add_argument("--role", choices=["admin", "researcher"], default="admin")
    p.add_argument("--state-dir", default=".federator", help="the hub's --state-dir (default: .federator)")
    shown = p.add_mutually_exclusive_group()
    shown.add_argument("--export", action="store_true", help="print `export KUBECONFIG=...`")
    shown.add_argument("--raw", action="store_true", help="print the file itself (it holds a token)")
    p.set_defaults(handler=_cmd_kubeconfig)

    p = sub.add_parser("version", help="print the client and hub versions")
    p.add_argument("--client", action="store_true", help="only the client version (no hub needed)")
    _hub_flags(p)
    p.set_defaults(handler=_cmd_version)
