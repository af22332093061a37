"""`federator cluster add | list | remove | cordon | uncordon | drain`: member clusters on the hub (admin).

    federator cluster add NAME --kubeconfig FILE ... | cluster add -f FILE
    federator cluster list | cluster remove NAME
    federator cluster cordon NAME... | cluster uncordon NAME...
    federator cluster drain NAME [--max-concurrent N] [--timeout D]

`register` builds the `cluster` group from `_SUBCOMMANDS`: a new subcommand
is a function that adds its parser to the group, listed there (the group's
usage line names every subcommand). Registration reads the member's
kubeconfig and hands the hub its server, CA and credentials; nothing here
prints what it reads. This module imports no other command module of the CLI.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from federator.apis.views import Body
from federator.cli.common import (
    GROUP_VERSION,
    InputError,
    check_kind,
    cmd_get,
    each_request,
    hub_flags,
    parse_duration,
    read_documents,
    render_table,
    run_on_hub,
)
from federator.apis.membercluster import DEFAULT_SCHEDULER_NAMES, MAX_DRAIN_CONCURRENCY
from federator.cli.hubclient import API_GROUP, HubClient, JSONObject, clusters_path

# ---------------------------------------------------------------- add


def member_connection(kubeconfig: Path, *, context: str | None) -> JSONObject:
    """spec.connection of a registration from a member's kubeconfig: the
    server, its CA, and the credentials the hub will store (token, or client
    certificate and key). Never prints what it reads."""
    where = str(kubeconfig)
    try:
        config = yaml.safe_load(kubeconfig.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise InputError(f"--kubeconfig {where}: no such file") from None
    except UnicodeDecodeError:
        raise InputError(f"--kubeconfig {where}: not UTF-8 text") from None
    except OSError as e:
        raise InputError(f"--kubeconfig {where}: cannot read it ({e.strerror or 'read failed'})") from None
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
    if args.gpu_model:
        spec["gpuModels"] = list(args.gpu_model)
    if args.cost_per_gpu_hour is not None:
        spec["costPerGpuHour"] = float(args.cost_per_gpu_hour)
    cost: dict[str, Any] = {}
    for item in args.model_cost or ():
        model, price = _pair(item, "--model-cost", "MODEL=PRICE")
        try:
            cost.setdefault("perModel", {})[model] = float(price)
        except ValueError:
            raise InputError(f"--model-cost {model}: price must be a number") from None
    if args.spot:
        cost["spot"] = True
    if args.interruption_rate is not None:
        cost["interruptionRatePerHour"] = float(args.interruption_rate)
    if cost:
        spec["cost"] = cost
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
    metadata: dict[str, Any] = {"name": args.name}
    if args.label:
        metadata["labels"] = dict(_pair(item, "--label", "KEY=VALUE") for item in args.label)
    return {"apiVersion": GROUP_VERSION, "kind": "MemberCluster", "metadata": metadata, "spec": spec}


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
                check_kind(document, "MemberCluster", "<stdin>" if args.filename == "-" else args.filename, index)
        else:
            documents = [registration_from_flags(args)]
    except InputError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2

    async def work(client: HubClient) -> int:
        def body(document: JSONObject) -> JSONObject:
            document.setdefault("apiVersion", GROUP_VERSION)
            return document

        return await each_request(
            documents, lambda document: client.request("POST", clusters_path(), body=body(document)),
            lambda _, created: f"membercluster.{API_GROUP}/{Body(created).name} registered")

    return run_on_hub(args, work)


# ---------------------------------------------------------------- remove


def _cmd_cluster_remove(args: argparse.Namespace) -> int:
    async def work(client: HubClient) -> int:
        return await each_request(args.names, lambda name: client.request("DELETE", clusters_path(name)),
                                  lambda name, _: f'membercluster.{API_GROUP} "{name}" removed')

    return run_on_hub(args, work)


# ---------------------------------------------------------------- cordon, uncordon, drain

_MERGE_PATCH = "application/merge-patch+json"


def _cmd_cluster_cordon(args: argparse.Namespace) -> int:
    cordon = args.cluster_command == "cordon"
    # uncordon also ends a drain: the cluster takes new gangs again
    patch: JSONObject = {"spec": {"cordoned": True}} if cordon else {"spec": {"cordoned": False, "drain": None}}

    async def work(client: HubClient) -> int:
        return await each_request(
            args.names,
            lambda name: client.request("PATCH", clusters_path(name), body=patch, content_type=_MERGE_PATCH),
            lambda name, _: f"membercluster.{API_GROUP}/{name} {'cordoned' if cordon else 'uncordoned'}")

    return run_on_hub(args, work)


def _drain_progress(name: str, drain: JSONObject, elapsed: float) -> str:
    return (f"draining {name}: {drain.get('moved', 0)}/{drain.get('gangs', 0)} gangs moved, "
            f"{drain.get('moving', 0)} moving, {drain.get('remaining', 0)} left, "
            f"{len(drain.get('unplaceable') or [])} fit nowhere now ({elapsed:.0f}s)")


def _cmd_cluster_drain(args: argparse.Namespace) -> int:
    try:
        timeout = parse_duration(args.timeout, flag="--timeout")
    except InputError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if not 1 <= args.max_concurrent <= MAX_DRAIN_CONCURRENCY:
        print(f"error: --max-concurrent {args.max_concurrent}: must be between 1 and {MAX_DRAIN_CONCURRENCY}",
              file=sys.stderr)
        return 2
    patch = {"spec": {"cordoned": True, "drain": {"maxConcurrent": args.max_concurrent}}}
    tty = sys.stderr.isatty()

    async def work(client: HubClient) -> int:
        await client.request("PATCH", clusters_path(args.name), body=patch, content_type=_MERGE_PATCH)
        print(f"membercluster.{API_GROUP}/{args.name} cordoned; draining at most {args.max_concurrent} gangs at "
              "a time (Ctrl-C stops watching; `federator cluster uncordon` stops the drain)", flush=True)
        loop = asyncio.get_running_loop()
        started = loop.time()
        last_line, last_printed = "", 0.0
        drain: JSONObject = {}
        while True:
            obj = await client.request("GET", clusters_path(args.name))
            drain = ((obj.get("status") or {}).get("drain")) or {}
            now = loop.time()
            phase = drain.get("phase")
            line = _drain_progress(args.name, drain, now - started) if drain else \
                f"draining {args.name}: waiting for the hub to start ({now - started:.0f}s)"
            if tty:
                print("\r" + line.ljust(len(last_line)), end="", file=sys.stderr, flush=True)
            elif line.split(" (")[0] != last_line.split(" (")[0] or now - last_printed >= 5:
                print(line, file=sys.stderr, flush=True)
                last_printed = now
            last_line = line
            if phase in ("Complete", "Stuck") or now - started >= timeout:
                break
            await asyncio.sleep(0.5)
        if tty:
            print(file=sys.stderr)
        unplaceable = drain.get("unplaceable") or []
        if drain.get("phase") == "Complete":
            print(f"drained {args.name}: {drain.get('moved', 0)} gangs moved", flush=True)
            return 0
        if unplaceable:
            print(f"{len(unplaceable)} gangs fit nowhere else now and stay in {args.name} (the hub keeps trying):",
                  flush=True)
            print(render_table(["NAMESPACE", "NAME", "REASON", "WHY NOT"],
                               [[str(u.get("namespace", "")), str(u.get("name", "")), str(u.get("reason", "")),
                                 str(u.get("message", ""))] for u in unplaceable]), flush=True)
        if drain.get("phase") != "Stuck":
            print(f"error: the drain of {args.name} did not finish within {args.timeout} "
                  f"({drain.get('remaining', '?')} gangs left); it goes on in the hub", file=sys.stderr)
        return 1

    return run_on_hub(args, work)


# ---------------------------------------------------------------- registration


def _add_add(csub: Any) -> None:
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
    p.add_argument("--scheduler", choices=list(DEFAULT_SCHEDULER_NAMES))
    p.add_argument("--scheduler-name", help="pod schedulerName (default: the scheduler's usual name)")
    p.add_argument("--label", action="append", metavar="KEY=VALUE",
                   help="cluster label in metadata.labels, matched by clusterSelector (repeatable; "
                        "later: kubectl label membercluster NAME KEY=VALUE)")
    p.add_argument("--gpu-model", action="append", metavar="MODEL", help="GPU model offered (repeatable)")
    p.add_argument("--cost-per-gpu-hour", type=float, metavar="COST",
                   help="price of one GPU-hour here, in the hub's currency (federator up --currency, default USD); "
                        "0: already paid (a Queue over its budget still runs jobs here)")
    p.add_argument("--model-cost", action="append", metavar="MODEL=PRICE",
                   help="price of one GPU-hour of one GPU model, over --cost-per-gpu-hour (repeatable)")
    p.add_argument("--spot", action="store_true",
                   help="spot capacity: only jobs with spec.placement.spot allowed or preferred go here")
    p.add_argument("--interruption-rate", type=float, metavar="RATE",
                   help="share of spot nodes expected lost per hour (0..1), shown in why-not tables")
    p.add_argument("--dataset", action="append", metavar="NAME=BYTES", help="cached dataset (repeatable)")
    p.add_argument("--cordoned", action="store_true", help="register without accepting new gangs")
    hub_flags(p, member_kubeconfig=True)
    p.set_defaults(handler=_cmd_cluster_add)


def _add_list(csub: Any) -> None:
    p = csub.add_parser("list", help="list member clusters")
    p.add_argument("-o", "--output", choices=["json", "yaml", "wide", "name"], help="output format")
    p.add_argument("-w", "--watch", action="store_true", help="after listing, print every change")
    hub_flags(p)
    # the same listing as `federator get clusters`
    p.set_defaults(handler=cmd_get, resource="clusters", name=None, all_namespaces=False, namespace=None,
                   selector=None)


def _add_remove(csub: Any) -> None:
    p = csub.add_parser("remove", help="remove member cluster registrations")
    p.add_argument("names", nargs="+", metavar="NAME")
    hub_flags(p)
    p.set_defaults(handler=_cmd_cluster_remove)


#: the subcommands of `federator cluster`, in the order `--help` lists them
def _add_cordon(csub: Any) -> None:
    for verb, text in (("cordon", "stop placing new gangs in clusters (running gangs stay)"),
                       ("uncordon", "let clusters take new gangs again (and stop a drain)")):
        p = csub.add_parser(verb, help=text, description=f"{text[0].upper()}{text[1:]}: sets spec.cordoned.")
        p.add_argument("names", nargs="+", metavar="NAME")
        hub_flags(p)
        p.set_defaults(handler=_cmd_cluster_cordon)


def _add_drain(csub: Any) -> None:
    p = csub.add_parser(
        "drain", help="move a cluster's gangs elsewhere, whole, a few at a time",
        description="Cordon the cluster and move every gang in it to another cluster, at most --max-concurrent "
                    "at a time. Each gang's new home is decided and reserved before its pods in this cluster "
                    "are deleted, and it starts there only once they are gone. Prints progress until the drain "
                    "completes, or only gangs that fit nowhere else are left (listed with why), or --timeout.",
        epilog="Example: federator cluster drain onprem-rdma-a100 --max-concurrent 5 --timeout 10m",
    )
    p.add_argument("name", metavar="NAME")
    p.add_argument("--max-concurrent", type=int, default=5, metavar="N", help="gangs moving at once (default: 5)")
    p.add_argument("--timeout", default="10m", metavar="DURATION",
                   help="stop watching after this long; the drain goes on in the hub (default: 10m)")
    hub_flags(p)
    p.set_defaults(handler=_cmd_cluster_drain)


_SUBCOMMANDS: tuple[Callable[[Any], None], ...] = (_add_add, _add_list, _add_remove, _add_cordon, _add_drain)


def register(sub: Any) -> None:
    """Add the `cluster` group and its subcommands to the `federator` parser."""
    cluster = sub.add_parser("cluster", help="register, list, remove, cordon and drain member clusters (admin)",
                             description="Manage MemberCluster registrations on the hub.")
    csub = cluster.add_subparsers(dest="cluster_command")
    csub.required = True
    for add_subcommand in _SUBCOMMANDS:
        add_subcommand(csub)
    csub.metavar = "|".join(csub.choices)  # add|list|remove...: usage and "required" errors name them all
