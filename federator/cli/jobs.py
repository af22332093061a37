"""`federator submit | get | describe | delete`: a researcher's jobs on a running hub.

    federator submit -f FILE [-f FILE ...]          create TrainingJobs (YAML/JSON, several documents, - for stdin)
    federator get jobs|clusters [NAME] [-n NS] [-A] [-w] [-o json|yaml|wide|name]
    federator describe job NAME                      placement, why-not table, history, conditions, pods
    federator delete job NAME [NAME ...]

Every command talks only to the hub API through `federator.hubclient` (the
kubeconfig as kubectl reads it). Output is an aligned table by default, or
JSON/YAML; errors are one line (federator/cli/common.py). This module imports
no other command module of the CLI.
"""

from __future__ import annotations

import argparse
import datetime as dt
import sys
from collections.abc import Mapping
from typing import Any

from federator.cli.common import (
    GROUP_VERSION,
    RESOURCES,
    InputError,
    age,
    check_kind,
    cmd_get,
    each_request,
    dump,
    hub_flags,
    namespace_of,
    read_documents,
    render_table,
    run_on_hub,
)
from federator.hubclient import API_GROUP, HubClient, HubError, JSONObject, jobs_path

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
                check_kind(document, "TrainingJob", "<stdin>" if where == "-" else where, index)
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
                namespace = str(body_ns or namespace_of(args, client))
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
                    dump(created, args.output, sys.stdout)
                else:
                    print(f"trainingjob.{API_GROUP}/{name} created", flush=True)
        return 1 if failures else 0

    return run_on_hub(args, work)


# ---------------------------------------------------------------- describe


def _time(value: Any, now: dt.datetime) -> str:
    if not value:
        return "<unknown>"
    return f"{value} ({age(value, now)} ago)"


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
                                   age(c.get("lastTransitionTime"), now) if c.get("lastTransitionTime") else "",
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
        job = await client.request("GET", jobs_path(namespace_of(args, client), args.name))
        print(describe_job(job), flush=True)
        return 0

    return run_on_hub(args, work)


# ---------------------------------------------------------------- delete


def _cmd_delete(args: argparse.Namespace) -> int:
    def deleted(name: str, answer: JSONObject) -> str:
        finalizing = answer.get("kind") == "TrainingJob"  # still there: its cleanup runs first
        return f'trainingjob.{API_GROUP} "{name}" deleted' + (" (cleaning up member clusters first)" if finalizing
                                                              else "")

    async def work(client: HubClient) -> int:
        namespace = namespace_of(args, client)
        return await each_request(args.names, lambda name: client.request("DELETE", jobs_path(namespace, name)),
                                  deleted)

    return run_on_hub(args, work)


# ---------------------------------------------------------------- registration


def register(sub: Any) -> None:
    """Add submit, get, describe and delete to the `federator` parser."""
    p = sub.add_parser("submit", help="submit TrainingJobs from YAML/JSON files (several documents allowed)",
                       description="Create the TrainingJobs in FILE (YAML or JSON; several documents, or a "
                                   "kind: List; - reads stdin).")
    p.add_argument("-f", "--filename", action="append", required=True, metavar="FILE",
                   help="file with TrainingJobs ('-' for stdin); repeatable")
    p.add_argument("-n", "--namespace", help="namespace for jobs that do not name one (default: the context's)")
    p.add_argument("-o", "--output", choices=["json", "yaml"], help="print the created objects")
    hub_flags(p)
    p.set_defaults(handler=_cmd_submit)

    p = sub.add_parser("get", help="list jobs or clusters (-w to watch)",
                       description="Show TrainingJobs (jobs, tj) or MemberClusters (clusters, mc).")
    p.add_argument("resource", choices=sorted(RESOURCES), metavar="jobs|clusters")
    p.add_argument("name", nargs="?", help="one object by name")
    p.add_argument("-n", "--namespace", help="namespace (default: the context's)")
    p.add_argument("-A", "--all-namespaces", action="store_true", help="jobs in every namespace")
    p.add_argument("-w", "--watch", action="store_true", help="after listing, print every change (Ctrl-C stops)")
    p.add_argument("-o", "--output", choices=["json", "yaml", "wide", "name"], help="output format")
    p.add_argument("-l", "--selector", help="label selector, e.g. team=vision")
    hub_flags(p)
    p.set_defaults(handler=cmd_get)

    p = sub.add_parser("describe", help="explain a job: placement, why-not table, history, pods")
    p.add_argument("resource", choices=["job", "jobs", "tj", "trainingjob"], metavar="job")
    p.add_argument("name")
    p.add_argument("-n", "--namespace", help="namespace (default: the context's)")
    hub_flags(p)
    p.set_defaults(handler=_cmd_describe)

    p = sub.add_parser("delete", help="delete jobs (their member objects are cleaned up first)")
    p.add_argument("resource", choices=["job", "jobs", "tj", "trainingjob"], metavar="job")
    p.add_argument("names", nargs="+", metavar="NAME")
    p.add_argument("-n", "--namespace", help="namespace (default: the context's)")
    hub_flags(p)
    p.set_defaults(handler=_cmd_delete)
