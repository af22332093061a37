"""`federator submit | get | describe | delete | logs`: a researcher's jobs on a running hub.

    federator submit -f FILE [-f FILE ...]          create TrainingJobs (YAML/JSON, several documents, - for stdin)
    federator get jobs|clusters|queues [NAME] [-n NS] [-A] [-w] [-o json|yaml|wide|name]
    federator describe job NAME                      placement (scores, why-not table), history, conditions, pods
    federator describe pytorchjob|jobset|jobs.batch|... NAME   an upstream job kind: its conditions and its gang
    federator delete job NAME [NAME ...]
    federator logs NAME [-n NS] [--role R] [--index I] [-f] [--tail N]   the job's pods' logs, through the hub

Every command talks only to the hub API through `federator.cli.hubclient` (the
kubeconfig as kubectl reads it). Output is an aligned table by default, or
JSON/YAML; errors are one line (federator/cli/common.py). This module imports
no other command module of the CLI.
"""

from __future__ import annotations

import argparse
import datetime as dt
import math
import os
import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from federator.apis.podtemplate import is_full_form, is_sidecar
from federator.apis.views import Body, Meta
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
    parse_duration,
    read_documents,
    render_table,
    run_on_hub,
)
from federator.cli.hubclient import API_GROUP, HubClient, HubError, JSONObject, jobs_path
from federator.placement.resources import template_requests

if TYPE_CHECKING:
    from federator.apis.jobkinds import JobKind

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
                name = Body(created).name or meta.get("name")
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


def describe_job(job: JSONObject, *, now: dt.datetime | None = None, pods: JSONObject | None = None,
                 pods_error: str | None = None) -> str:
    """The text of `federator describe job`: what the job asks for, where it is
    and why (placement with its scores, why-not table), what happened (history),
    its pods (counts from its status; with `pods`, the answer of its pods
    subresource, each member pod with its node and phase; `pods_error` says why
    that could not be read)."""
    now = now or dt.datetime.now(dt.UTC)
    meta = Body(job)
    spec = job.get("spec") or {}
    status = job.get("status") or {}
    placement_status = status.get("placement") or {}
    out: list[str] = []
    add = out.append
    add(f"Name:         {meta.name}")
    add(f"Namespace:    {meta.namespace}")
    add(f"Created:      {_time(meta.creation_timestamp, now)}")
    if meta.deleting:
        finalizers = ", ".join(str(f) for f in meta.finalizers)
        add(f"Deleting:     since {meta.deletion_timestamp} (finalizers: {finalizers})")
    add("Labels:       " + (", ".join(f"{k}={v}" for k, v in sorted(meta.labels.items())) or "<none>"))
    priority_class = spec.get("priorityClassName")
    add(f"Priority:     {spec.get('priority', 0)}" + (f" (class {priority_class})" if priority_class else ""))
    add(f"Queue:        {spec.get('queue') or '<none>'}")
    add(f"Suspended:    {'yes' if spec.get('suspend') else 'no'}")
    add(f"Phase:        {_phase_text(meta, spec, status)}")
    cluster = placement_status.get("cluster")
    add(f"Cluster:      {cluster or '<none>'}")
    add(f"Epoch:        {placement_status.get('epoch', 0)}")
    if cluster:
        add(f"Mode:         {_mode_text(placement_status.get('mode'))}")
    if placement_status.get("decisionResourceVersion"):
        add(f"Decision RV:  {placement_status['decisionResourceVersion']}")
    add(f"Requeues:     {status.get('requeues', 0)}")

    add("Roles:")
    roles = spec.get("roles") or []
    role_rows = []
    for role in roles:
        template = role.get("template") or {}
        role_rows.append([str(role.get("name", "")), str(role.get("replicas", "")), _images_text(template),
                          _requests_text(template)])
    add(_indent(render_table(["NAME", "REPLICAS", "IMAGE", "REQUESTS (per pod, as placement counts them)"],
                             role_rows)))
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
    add(f"Checkpoints:  {_checkpoint_text(spec.get('checkpoint'), status.get('checkpoint'))}")

    add("Placement explanation:")
    if cluster:
        add(f"  Placed in {cluster} (epoch {placement_status.get('epoch', 0)}).")
        out.extend(_score_lines(placement_status.get("scores") or [], cluster))
    by_type = {c.get("type"): c for c in status.get("conditions") or () if isinstance(c, Mapping)}
    quota = by_type.get("QuotaReserved")
    if cluster and quota and quota.get("status") == "True":
        add(f"  Quota:      {quota.get('message', '')} ({quota.get('reason', '')})")
    waiting = by_type.get("Schedulable")
    if not cluster and waiting and waiting.get("status") == "False":
        # QuotaExceeded / QueueNotFound say which quota and what it waits for; Preempted says by whom;
        # a plan placement would carry out says "would fit on X after preempting A, B"
        add(f"  Waiting:    {waiting.get('reason', '')}: {waiting.get('message', '')}")
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
    if pods_error:
        add(f"  Member pods: cannot be read now: {pods_error}")
    elif pods is not None and pods.get("cluster"):
        items = [p for p in pods.get("items") or () if isinstance(p, Mapping)]
        add(f"  Member pods in {pods['cluster']} (epoch {pods.get('epoch', 0)}):")
        if items:
            add(_indent(render_table(
                ["NAME", "ROLE", "INDEX", "NODE", "PHASE", "READY", "RESTARTS", "STARTED"],
                [[str(p.get("name", "")), str(p.get("role", "")), str(p.get("index", "")),
                  str(p.get("node") or "<none>"),
                  str(p.get("phase", "")) + (" (deleting)" if p.get("deletionTimestamp") else ""),
                  "yes" if p.get("ready") else "no", str(p.get("restarts", 0)),
                  f"{age(p['startTime'], now)} ago" if p.get("startTime") else "<not yet>"] for p in items]), 4))
        else:
            add("    <none yet>")

    add("Conditions:")
    conditions = [c for c in status.get("conditions") or () if isinstance(c, Mapping)]
    if conditions:
        add(_indent(render_table(["TYPE", "STATUS", "REASON", "AGE", "MESSAGE"],
                                 [[str(c.get("type", "")), str(c.get("status", "")), str(c.get("reason", "")),
                                   age(c.get("lastTransitionTime"), now) if c.get("lastTransitionTime") else "",
                                   str(c.get("message", ""))] for c in conditions])))
    else:
        add("  <none>")

    add("History:")
    history = [h for h in status.get("history") or () if isinstance(h, Mapping)]
    if history:
        add(_indent(render_table(["TIME", "EVENT", "CLUSTER", "EPOCH", "MESSAGE"],
                                 [[str(h.get("time", "")), str(h.get("event", "")), str(h.get("cluster") or ""),
                                   "" if h.get("epoch") is None else str(h.get("epoch")), str(h.get("message", ""))]
                                  for h in history])))
    else:
        add("  <none>")
    return "\n".join(out)


def _number(value: Any, spec: str) -> str:
    return format(value, spec) if isinstance(value, int | float) and not isinstance(value, bool) else "-"


def _score_lines(scores: list[Any], cluster: str) -> list[str]:
    """status.placement.scores: the chosen cluster's total and its breakdown per score plugin, then the
    other clusters that passed the filters, best first."""
    rows = [r for r in scores if isinstance(r, Mapping)]
    chosen = rows[0] if rows and rows[0].get("cluster") == cluster else None
    if chosen is None:
        return ["  Score:      not recorded (a preemption chose the cluster, or an older hub placed it)"]
    fit = ", ".join(x for x in (str(chosen.get("gpuModel") or ""),
                                f"{chosen['nodes']} nodes" if isinstance(chosen.get("nodes"), int) else "") if x)
    lines = [f"  Score:      {_number(chosen.get('total'), '.1f')}" + (f" ({fit})" if fit else "")
             + ", the sum of each score plugin's weighted part:"]
    parts = [p for p in chosen.get("parts") or () if isinstance(p, Mapping)]
    lines.append(_indent(render_table(
        ["PLUGIN", "RAW", "WEIGHT", "WEIGHTED"],
        [[str(p.get("plugin", "")), _number(p.get("raw"), ".4g"), _number(p.get("weight"), "g"),
          _number(p.get("weighted"), ".1f")] for p in parts]), 4))
    others = rows[1:]
    if others:
        lines.append("  Runners-up (passed every filter, scored lower; \"at most\": not fitted, could not win):")
        lines.append(_indent(render_table(
            ["CLUSTER", "TOTAL", "GPU", "NODES"],
            [[str(r.get("cluster", "")),
              ("at most " if r.get("outranked") else "") + _number(r.get("total"), ".1f"),
              str(r.get("gpuModel") or "-"), str(r["nodes"]) if isinstance(r.get("nodes"), int) else "-"]
             for r in others]), 4))
    return lines


def _phase_text(meta: Meta, spec: Mapping[str, Any], status: Mapping[str, Any]) -> str:
    """The Phase line: the phase, and what it means now (deleted, suspended) in words."""
    phase = status.get("phase")
    if meta.deleting:
        return (f"Terminating (was {phase or 'not yet seen by the hub'}): the job is being deleted; its member "
                "objects go first (condition Terminating)")
    if phase == "Suspended":
        condition = next((c for c in status.get("conditions") or () if isinstance(c, Mapping)
                          and c.get("type") == "Suspended" and c.get("status") == "True"), None)
        since = f" since {condition.get('lastTransitionTime')}" if condition and condition.get("lastTransitionTime") \
            else ""
        if spec.get("suspend") is not True:
            return f"Suspended{since}: spec.suspend is false again, so the job is queued for a placement"
        return (f"Suspended{since}: spec.suspend is true, so the job is not placed (a placed gang's member objects "
                "are deleted) until it is set to false")
    if not phase:
        return "<none> (not yet seen by the hub)"
    if spec.get("suspend") is True:
        return f"{phase} (spec.suspend is true: its gang is being deleted and the job suspended)"
    return str(phase)


def _images_text(template: Mapping[str, Any]) -> str:
    """The role's image (short form) or its containers' images (a full pod template; sidecars marked)."""
    if not is_full_form(template):
        return str(template.get("image", ""))
    spec = template.get("spec")
    spec = spec if isinstance(spec, Mapping) else {}
    images = [str(c.get("image", "")) for c in spec.get("containers") or () if isinstance(c, Mapping)]
    images += [f"{c.get('image', '')} (sidecar)" for c in spec.get("initContainers") or ()
               if isinstance(c, Mapping) and is_sidecar(c)]
    return ", ".join(images)


def _requests_text(template: Mapping[str, Any]) -> str:
    """What one pod requests as placement counts it (containers, sidecars and init containers for a full
    template); the raw short-form map when it cannot be parsed."""
    try:
        text = ", ".join(f"{k}={v}" for k, v in template_requests(template).to_kube().items())
    except ValueError:
        text = ", ".join(f"{k}={v}" for k, v in (template.get("resources") or {}).items())
    return text or "<none>"


def _indent(text: str, spaces: int = 2) -> str:
    return "\n".join(" " * spaces + line for line in text.splitlines())


def _selector_text(selector: Mapping[str, Any]) -> str:
    parts = [f"{k}={v}" for k, v in sorted((selector.get("matchLabels") or {}).items())]
    for expression in selector.get("matchExpressions") or []:
        values = ",".join(expression.get("values") or [])
        parts.append(f"{expression.get('key')} {str(expression.get('operator', '')).lower()} ({values})")
    return ", ".join(parts) or "any"


#: the names `federator describe` takes for a TrainingJob
TRAININGJOB_NAMES = ("job", "jobs", "tj", "trainingjob", "trainingjobs")


def source_kind_named(resource: str) -> JobKind:
    """The upstream job kind `resource` names as kubectl takes it (plural, singular, short name, or either
    qualified with the group: "pytorchjobs", "pytorchjob.kubeflow.org", "jobs.batch"); batch Job only by its
    qualified names, since "job" means a TrainingJob here. InputError listing the names it takes otherwise."""
    from federator.apis.jobkinds import JOB_KINDS

    wanted = resource.lower()
    for kind in JOB_KINDS:
        names = {f"{kind.plural}.{kind.group}", f"{kind.singular}.{kind.group}"}
        if kind.group != "batch":
            names |= {kind.plural, kind.singular, *kind.short_names}
        if wanted in names:
            return kind
    known = ", ".join([*TRAININGJOB_NAMES[:1], *(k.singular if k.group != "batch" else f"jobs.{k.group}"
                                                 for k in JOB_KINDS)])
    raise InputError(f"describe: unknown kind {resource!r}; one of: {known}")


def _checkpoint_text(spec: object, last: object) -> str:
    """spec.checkpoint (where, the eviction grace) and status.checkpoint (the latest reported), on one line."""
    parts: list[str] = []
    if isinstance(spec, Mapping):
        volume = spec.get("volume")
        if isinstance(volume, Mapping):
            parts.append(f"claim {volume.get('claimName')} at {spec.get('mountPath')}")
        if spec.get("uri"):
            parts.append(str(spec["uri"]))
        parts.append(f"save grace {spec.get('saveGraceSeconds', 30)}s")
    if isinstance(last, Mapping):
        parts.append(f"latest step {last.get('step')} at {last.get('location')} (cluster {last.get('cluster')}, "
                     f"epoch {last.get('epoch')}, {last.get('time')})")
    return "; ".join(parts) if parts else "<none>"


def _mode_text(mode: object) -> str:
    """How the member runs the gang (status.placement.mode, an upstream kind's status.mode), in words."""
    if mode == "operator":
        return "operator (the member's own operator runs a copy of the upstream object)"
    if mode == "render":
        return "render (the hub rendered the pods)"
    return "<not dispatched yet>"


def describe_source(source: JSONObject, kind: JobKind, twin: JSONObject | None, described_twin: str, *,
                    now: dt.datetime | None = None) -> str:
    """The text of `federator describe <upstream kind> NAME`: the object, its status conditions (what the twin
    controller mirrors, with the hub's phase and cluster), then its gang: the twin TrainingJob that placement,
    queues and failover act on (`described_twin`: describe_job's text of it), or why it has none."""
    now = now or dt.datetime.now(dt.UTC)
    meta = Body(source)
    status = Body(source).status
    out: list[str] = []
    add = out.append
    add(f"Kind:         {kind.kind} ({kind.api_version})")
    add(f"Name:         {meta.name}")
    add(f"Namespace:    {meta.namespace}")
    add(f"Created:      {_time(meta.creation_timestamp, now)}")
    if meta.deleting:
        add(f"Deleting:     since {meta.deletion_timestamp}")
    add(f"Phase:        {status.get('phase') or '<none>'}")
    add(f"Cluster:      {status.get('cluster') or '<none>'}")
    if status.get("cluster"):
        add(f"Mode:         {_mode_text(status.get('mode'))}")
    add("Conditions:")
    rows = [[str(c.get("type", "")), str(c.get("status", "")), str(c.get("reason", "")),
             str(c.get("lastTransitionTime", "")), str(c.get("message", ""))]
            for c in status.get("conditions") or () if isinstance(c, Mapping)]
    add(_indent(render_table(["TYPE", "STATUS", "REASON", "LAST TRANSITION", "MESSAGE"], rows)) if rows
        else "  <none>")
    if twin is None:
        add("Gang:         <none> (no TrainingJob of this name is this object's twin yet; the conditions say why)")
        return "\n".join(out)
    add(f"Gang:         TrainingJob {Body(twin).namespace}/{Body(twin).name} (its twin: placement, queues, "
        "failover and the member objects act on it)")
    add("")
    add(described_twin)
    return "\n".join(out)


def _cmd_describe(args: argparse.Namespace) -> int:
    kind: JobKind | None = None
    if args.resource.lower() not in TRAININGJOB_NAMES:
        try:
            kind = source_kind_named(args.resource)
        except InputError as e:
            print(f"error: {e}", file=sys.stderr)
            return 2

    async def describe_twin(client: HubClient, job: JSONObject, path: str) -> str:
        pods: JSONObject | None = None
        pods_error = None
        if ((job.get("status") or {}).get("placement") or {}).get("cluster"):
            try:
                pods = await client.request("GET", path + "/pods")
            except HubError as e:  # the job is still described; the member's pods are what is missing
                pods_error = str(e)
        return describe_job(job, pods=pods, pods_error=pods_error)

    async def work(client: HubClient) -> int:
        namespace = namespace_of(args, client)
        path = jobs_path(namespace, args.name)
        if kind is None:
            job = await client.request("GET", path)
            print(await describe_twin(client, job, path), flush=True)
            return 0
        source = await client.request("GET", f"/apis/{kind.api_version}/namespaces/{quote(namespace, safe='')}/"
                                             f"{kind.plural}/{quote(args.name, safe='')}")
        twin: JSONObject | None = None
        try:
            found = await client.request("GET", path)
        except HubError as e:
            if e.code != 404:
                raise
        else:
            from federator.apis.jobkinds import controller_of_kind

            ref = controller_of_kind(found, kind)
            if ref is not None and ref["uid"] == Body(source).uid:
                twin = found
        text = await describe_twin(client, twin, path) if twin is not None else ""
        print(describe_source(source, kind, twin, text), flush=True)
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


# ---------------------------------------------------------------- logs

LOGS_EXAMPLES = """\
examples:
  federator logs resnet-ps -n vision                          # every pod of the job, each line prefixed [role-index]
  federator logs resnet-ps -n vision --role worker --index 0  # one pod, as it printed it
  federator logs resnet-ps -n vision --role worker --tail 20  # the last 20 lines of each worker
  federator logs resnet-ps -n vision --role ps --index 1 -f   # follow one pod until it exits (Ctrl-C stops)
  federator logs resnet-ps --since 10m --timestamps           # the last ten minutes, with the kubelet's timestamps

The logs come through the hub from whichever member cluster runs the job now
(GET .../trainingjobs/NAME/log); a researcher reads the jobs of their own
namespaces only.
"""


def _log_params(args: argparse.Namespace) -> dict[str, str]:
    """The log subresource's query for the flags (InputError naming the flag for a bad one)."""
    if args.index is not None and args.role is None:
        raise InputError("--index needs --role: which role's pod?")
    if args.index is not None and args.index < 0:
        raise InputError(f"--index {args.index}: must be 0 or more")
    if args.tail < -1:
        raise InputError(f"--tail {args.tail}: must be -1 (every line) or more")
    if args.limit_bytes is not None and args.limit_bytes < 1:
        raise InputError(f"--limit-bytes {args.limit_bytes}: must be at least 1")
    params: dict[str, str] = {}
    if args.role is not None:
        params["role"] = args.role
    if args.index is not None:
        params["index"] = str(args.index)
    if args.follow:
        params["follow"] = "true"
    if args.tail >= 0:
        params["tailLines"] = str(args.tail)
    if args.since is not None:
        seconds = parse_duration(args.since, flag="--since")
        params["sinceSeconds"] = str(max(1, math.ceil(seconds)))
    if args.timestamps:
        params["timestamps"] = "true"
    if args.limit_bytes is not None:
        params["limitBytes"] = str(args.limit_bytes)
    return params


def _cmd_logs(args: argparse.Namespace) -> int:
    try:
        params = _log_params(args)
    except InputError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    out = sys.stdout.buffer

    async def work(client: HubClient) -> int:
        path = jobs_path(namespace_of(args, client), args.name) + "/log"
        async for chunk in client.stream(path, params=params, follow=args.follow):
            out.write(chunk)
            out.flush()
        return 0

    try:
        return run_on_hub(args, work)
    except BrokenPipeError:
        # `federator logs ... | head`: the reader has what it wanted; say nothing more.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0


# ---------------------------------------------------------------- registration


def register(sub: Any) -> None:
    """Add submit, get, describe, logs and delete to the `federator` parser."""
    p = sub.add_parser("submit", help="submit TrainingJobs from YAML/JSON files (several documents allowed)",
                       description="Create the TrainingJobs in FILE (YAML or JSON; several documents, or a "
                                   "kind: List; - reads stdin).")
    p.add_argument("-f", "--filename", action="append", required=True, metavar="FILE",
                   help="file with TrainingJobs ('-' for stdin); repeatable")
    p.add_argument("-n", "--namespace", help="namespace for jobs that do not name one (default: the context's)")
    p.add_argument("-o", "--output", choices=["json", "yaml"], help="print the created objects")
    hub_flags(p)
    p.set_defaults(handler=_cmd_submit)

    p = sub.add_parser("get", help="list jobs, clusters or queues (-w to watch)",
                       description="Show TrainingJobs (jobs, tj), MemberClusters (clusters, mc) or Queues "
                                   "(queues, q: quota, used, borrowed, pending and admitted jobs).")
    p.add_argument("resource", choices=sorted(RESOURCES), metavar="jobs|clusters|queues")
    p.add_argument("name", nargs="?", help="one object by name")
    p.add_argument("-n", "--namespace", help="namespace (default: the context's)")
    p.add_argument("-A", "--all-namespaces", action="store_true", help="jobs in every namespace")
    p.add_argument("-w", "--watch", action="store_true", help="after listing, print every change (Ctrl-C stops)")
    p.add_argument("-o", "--output", choices=["json", "yaml", "wide", "name"], help="output format")
    p.add_argument("-l", "--selector", help="label selector, e.g. team=vision")
    hub_flags(p)
    p.set_defaults(handler=cmd_get)

    p = sub.add_parser("describe", help="explain a job: placement, why-not table, history, pods",
                       description="Explain a TrainingJob (KIND job, tj or trainingjob) or a job of an upstream "
                                   "kind the hub serves (pytorchjob, tfjob, paddlejob, mpijob, jobset, trainjob, "
                                   "jobs.batch): its conditions, then its gang's placement, why-not table, "
                                   "history and pods.")
    p.add_argument("resource", metavar="KIND", help="job (a TrainingJob), or an upstream kind as kubectl names it")
    p.add_argument("name")
    p.add_argument("-n", "--namespace", help="namespace (default: the context's)")
    hub_flags(p)
    p.set_defaults(handler=_cmd_describe)

    p = sub.add_parser("logs", help="print (-f: follow) the logs of a job's pods, from whichever cluster runs it",
                       description="Print the logs of the pods of TrainingJob NAME, read through the hub from the "
                                   "member cluster that runs the job now. Without --role, every pod's lines come, "
                                   "each prefixed [role-index]; with --role and --index, one pod's.",
                       epilog=LOGS_EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("name", metavar="NAME", help="the TrainingJob")
    p.add_argument("-n", "--namespace", help="namespace (default: the context's)")
    p.add_argument("--role", help="only the pods of this role (e.g. worker, ps)")
    p.add_argument("--index", type=int, help="with --role: only the pod with this index (0, 1, ...)")
    p.add_argument("-f", "--follow", action="store_true", help="keep printing new lines until the pods exit")
    p.add_argument("--tail", type=int, default=-1, metavar="N",
                   help="only the last N lines of each pod (default: -1, every line)")
    p.add_argument("--since", metavar="DURATION", help="only lines newer than this, e.g. 30s, 10m, 2h")
    p.add_argument("--timestamps", action="store_true", help="prefix each line with the time it was printed")
    p.add_argument("--limit-bytes", type=int, metavar="N", help="stop after N bytes")
    hub_flags(p)
    p.set_defaults(handler=_cmd_logs)

    p = sub.add_parser("delete", help="delete jobs (their member objects are cleaned up first)")
    p.add_argument("resource", choices=["job", "jobs", "tj", "trainingjob"], metavar="job")
    p.add_argument("names", nargs="+", metavar="NAME")
    p.add_argument("-n", "--namespace", help="namespace (default: the context's)")
    hub_flags(p)
    p.set_defaults(handler=_cmd_delete)
