"""`federator drill`: a failover drill with a report, and the reports read back.

    federator drill --cluster NAME --fault partition|outage|node-failure|drain [--duration 60s]
                    [--dry-run] [-o text|json] [--state-dir .federator] [--member-kubeconfig FILE]
                    [--settle-timeout 2m] [--max-concurrent N]
    federator drill list [-o text|wide|json]
    federator drill show NAME [-o text|json]

`--dry-run` prints the hub's failover plan (memberclusters/NAME/failoverplan)
and changes nothing. A live drill (cli/drillrun.py does the work) injects
the fault into a simulated cluster, or tells the operator what to do to a
real one, observes, lifts, settles and stores a DrillReport, whose name it
prints. `--cluster` takes one name, several separated by commas, or `all`
(a partition or outage of several clusters at once: the hub should judge
itself cut off and move nothing).

Argument errors (a missing or unknown cluster, an unknown fault, a negative
or unparsable duration) are one line `error: ...` and exit code 2; an
unreachable hub is one line and exit code 1. This module imports `common`,
`drillrun` and `simfault` (through drillrun) of the CLI, none of which
imports it; it never prints a credential.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import json
import os
import re
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import quote

from federator.apis.drillreport import FAULTS, MAX_CLUSTERS
from federator.apis.membercluster import MAX_DRAIN_CONCURRENCY
from federator.apis.timestamps import parse_time
from federator.apis.views import Body
from federator.cli.common import InputError, Printer, dump, hub_flags, parse_duration, render_table, run_on_hub
from federator.cli.drillrun import (
    DRILLREPORTS_PATH,
    DrillError,
    DrillOptions,
    ProgressLine,
    fetch_plans,
    figures,
    render_report,
    report_name,
    run_drill,
)
from federator.cli.hubclient import API_GROUP, HubClient, HubError, JSONObject, clusters_path

_EXAMPLES = """\
examples:
  federator drill --cluster onprem-rdma-a100 --fault partition --dry-run
  federator drill --cluster onprem-rdma-a100 --fault partition --duration 20s -o json
  federator drill --cluster all --fault partition --duration 30s      (the hub cut off from everything)
  federator drill list; federator drill show drill-onprem-rdma-a100-20240501-120000

A cluster is simulated when STATE_DIR/sim/CLUSTER.kubeconfig exists (federator up writes it) and no
--member-kubeconfig is given: the drill injects the fault through the simulator's fault API and reads
that cluster as its fence agent (STATE_DIR/sim/CLUSTER-agent.kubeconfig), which a partition from the
hub does not cut off. Any other cluster is real: the drill prints what the operator must do, then
observes. The hub is reached with --kubeconfig, else $KUBECONFIG, else STATE_DIR/admin.kubeconfig if
it exists, else ~/.kube/config."""


def register(sub: Any) -> None:
    p = sub.add_parser(
        "drill", help="run a failover drill (partition, outage, node failure, drain) and report what moved",
        description="Fault one member cluster (or several), watch every gang of it fail over, and store a "
                    "DrillReport: gangs affected, and each counted once as moved, unplaceable, rode out (in "
                    "place, untouched), restarted in place or lost (the five sum to the affected; a gang in none "
                    "is reported as an accounting violation); seconds to detect, to redispatch and "
                    "to run again; jobs lost; the most copies of one job seen running at once (must be 1); "
                    "duplicates; stale pods killed; whether the moves matched the dry-run plan.",
        epilog=_EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--cluster", metavar="NAME", help="the cluster to fault (NAME, NAME,NAME..., or all)")
    p.add_argument("--fault", metavar="FAULT", help=f"one of {', '.join(FAULTS)}")
    p.add_argument("--duration", default="60s", metavar="D",
                   help="how long the fault is held (a drain: at most this long), e.g. 20s, 2m (default: 60s)")
    p.add_argument("--dry-run", action="store_true", help="print the failover plan and change nothing")
    p.add_argument("-o", "--output", default="text", metavar="FORMAT", help="text or json (default: text)")
    p.add_argument("--state-dir", default=".federator", metavar="DIR",
                   help="federator up's state directory: simulated clusters' kubeconfigs are in DIR/sim "
                        "(default: .federator)")
    p.add_argument("--member-kubeconfig", metavar="FILE",
                   help="the faulted cluster's kubeconfig, to observe it: treats the cluster as real")
    p.add_argument("--settle-timeout", default="2m", metavar="D",
                   help="after the fault is lifted, wait at most this long for the federation to settle "
                        "(default: 2m)")
    p.add_argument("--max-concurrent", type=int, default=None, metavar="N",
                   help="with --fault drain: gangs moving at once (default: 5)")
    hub_flags(p)
    # `--duration -5s` must reach our own check (one line, exit 2), not argparse's "expected one argument":
    # argparse takes only plain negative numbers for values, so teach this parser that negative durations are.
    p._negative_number_matcher = re.compile(r"^-(\d+\.?\d*|\.\d+)(ms|s|m|h)?$")
    p.set_defaults(handler=_cmd_drill)
    dsub = p.add_subparsers(dest="drill_command", metavar="list|show")
    lp = dsub.add_parser("list", help="list the stored drill reports")
    lp.add_argument("-o", "--output", default="text", metavar="FORMAT", help="text, wide or json (default: text)")
    lp.add_argument("--state-dir", default=".federator", metavar="DIR", help=argparse.SUPPRESS)
    hub_flags(lp)
    lp.set_defaults(handler=_cmd_list)
    sp = dsub.add_parser("show", help="show one stored drill report")
    sp.add_argument("name", metavar="NAME")
    sp.add_argument("-o", "--output", default="text", metavar="FORMAT", help="text or json (default: text)")
    sp.add_argument("--state-dir", default=".federator", metavar="DIR", help=argparse.SUPPRESS)
    hub_flags(sp)
    sp.set_defaults(handler=_cmd_show)


def _fail(message: str) -> int:
    print(f"error: {message}", file=sys.stderr)
    return 2


def _default_hub_kubeconfig(args: argparse.Namespace) -> None:
    """federator up's admin kubeconfig when neither --kubeconfig nor $KUBECONFIG says otherwise."""
    state = Path(getattr(args, "state_dir", None) or ".federator")
    if args.hub_kubeconfig is None and not os.environ.get("KUBECONFIG") and (state / "admin.kubeconfig").is_file():
        args.hub_kubeconfig = str(state / "admin.kubeconfig")


# ---------------------------------------------------------------- the drill


def _cmd_drill(args: argparse.Namespace) -> int:
    try:
        options, dry_run = _options(args)
    except InputError as e:
        return _fail(str(e))
    _default_hub_kubeconfig(args)
    named = args.cluster.strip()

    async def work(client: HubClient) -> int:
        listing = await client.request("GET", clusters_path())
        registered = sorted(Body(m).name for m in listing.get("items") or ())
        clusters = _resolve_clusters(named, registered)
        chosen = dataclasses.replace(options, clusters=tuple(clusters))
        if len(clusters) > 1 and chosen.fault not in ("partition", "outage"):
            raise InputError(f"--fault {chosen.fault} takes one cluster; only a partition or an outage may hit "
                             "several at once")
        if dry_run:
            return await _dry_run(client, chosen, output=args.output)
        return await _live(client, chosen, output=args.output)

    return run_on_hub(args, work)


def _options(args: argparse.Namespace) -> tuple[DrillOptions, bool]:
    """The drill's options, or InputError naming the bad flag."""
    if not args.cluster or not args.cluster.strip():
        raise InputError("--cluster NAME is required (e.g. federator drill --cluster onprem-rdma-a100 "
                         "--fault partition --dry-run)")
    if not args.fault:
        raise InputError(f"--fault is required: one of {', '.join(FAULTS)}")
    if args.fault not in FAULTS:
        raise InputError(f"--fault {args.fault!r}: unknown fault; one of {', '.join(FAULTS)}")
    if args.output not in ("text", "json"):
        raise InputError(f"-o {args.output!r}: one of text, json")
    duration = parse_duration(args.duration, flag="--duration")
    settle = parse_duration(args.settle_timeout, flag="--settle-timeout", allow_zero=True)
    if args.max_concurrent is not None:
        if args.fault != "drain":
            raise InputError("--max-concurrent goes with --fault drain")
        if not 1 <= args.max_concurrent <= MAX_DRAIN_CONCURRENCY:
            raise InputError(f"--max-concurrent {args.max_concurrent}: must be between 1 and "
                             f"{MAX_DRAIN_CONCURRENCY}")
    member = Path(args.member_kubeconfig) if args.member_kubeconfig else None
    if member is not None and not member.is_file():
        raise InputError(f"--member-kubeconfig {member}: no such file")
    if member is not None and ("," in args.cluster or args.cluster.strip() == "all"):
        raise InputError("--member-kubeconfig goes with one --cluster")
    names = tuple(n.strip() for n in args.cluster.split(","))
    return DrillOptions(clusters=names, fault=args.fault, duration=duration, state_dir=Path(args.state_dir),
                        member_kubeconfig=member, settle_timeout=settle, max_concurrent=args.max_concurrent,
                        label=args.cluster.strip()), bool(args.dry_run)


def _resolve_clusters(named: str, registered: Sequence[str]) -> list[str]:
    if named == "all":
        if not registered:
            raise InputError("--cluster all: the hub has no member clusters")
        return list(registered)
    names = [n.strip() for n in named.split(",")]
    if len(names) > MAX_CLUSTERS:
        raise InputError(f"--cluster: at most {MAX_CLUSTERS} clusters")
    for name in names:
        if name not in registered:
            known = ", ".join(registered) if registered else "none"
            raise InputError(f"--cluster {name!r}: no such member cluster (registered: {known})")
    if len(set(names)) != len(names):
        raise InputError(f"--cluster {named!r}: a cluster is named twice")
    return names


# ---------------------------------------------------------------- dry run


async def _dry_run(client: HubClient, options: DrillOptions, *, output: str) -> int:
    purpose = "drain" if options.fault == "drain" else "loss"
    plans, notes = await fetch_plans(client, options.clusters, purpose)
    if notes and not plans:
        raise DrillError(notes[0])
    if output == "json":
        if len(plans) == 1:
            dump(next(iter(plans.values())), "json", sys.stdout)
        else:
            dump({"apiVersion": "v1", "kind": "List", "items": list(plans.values())}, "json", sys.stdout)
    else:
        print("\n\n".join(render_plan(plan, fault=options.fault) for plan in plans.values()), flush=True)
    for note in notes:
        print(f"warning: {note}", file=sys.stderr)
    return 0


def render_plan(plan: Mapping[str, Any], *, fault: str) -> str:
    """Each affected gang, where it would go, and why the others fit nowhere."""
    gangs = [g for g in plan.get("gangs") or () if isinstance(g, Mapping)]
    cluster = plan.get("cluster")
    head = (f"Failover plan for a {fault} of {cluster} (for={plan.get('for')}, {plan.get('generatedAt')}): "
            f"{len(gangs)} gangs, {plan.get('movable', 0)} would move, {plan.get('unplaceable', 0)} fit nowhere "
            "else. Nothing was changed.")
    if not gangs:
        return head + f"\nNo active gangs in {cluster}: nothing would move."
    rows = []
    for g in gangs:
        target = g.get("target")
        if target:
            where = str(target)
        elif plan.get("for") == "loss" and g.get("onClusterLoss") in ("fail", "wait"):
            where = f"- (onClusterLoss {g.get('onClusterLoss')}: {'fails' if g.get('onClusterLoss') == 'fail' else 'waits'})"
        else:
            where = "<nowhere>"
        rows.append([str(g.get("namespace", "")), str(g.get("name", "")), str(g.get("epoch", "")),
                     str(g.get("phase", "")), str(g.get("pods", "")), str(g.get("onClusterLoss", "")), where])
    lines = [head, render_table(["NAMESPACE", "NAME", "EPOCH", "PHASE", "PODS", "ON LOSS", "WOULD GO TO"], rows)]
    stuck = [g for g in gangs if not g.get("target") and g.get("whyNot")]
    if stuck:
        lines.append("Why they fit nowhere else:")
        for g in stuck:
            lines.append(f"  {g.get('namespace')}/{g.get('name')}:")
            for row in g.get("whyNot") or ():
                # the faulted cluster itself is excluded by construction: not a reason worth a line
                if isinstance(row, Mapping) and row.get("cluster") != cluster:
                    lines.append(f"    {row.get('cluster')}: {row.get('filter')} {row.get('reason')}: "
                                 f"{row.get('message', '')}".rstrip(": "))
    return "\n".join(lines)


# ---------------------------------------------------------------- live


async def _live(client: HubClient, options: DrillOptions, *, output: str) -> int:
    result = await run_drill(client, options, progress=ProgressLine(sys.stderr))
    spec = result.report
    started = parse_time(spec.get("startedAt")) or dt.datetime.now(dt.UTC)
    base = report_name(options.clusters, started)
    stored: str | None = None
    error = ""
    for attempt in range(5):
        name = base if attempt == 0 else f"{base[:60]}-{attempt + 1}"
        body = {"apiVersion": f"{API_GROUP}/v1alpha1", "kind": "DrillReport", "metadata": {"name": name},
                "spec": spec}
        try:
            await client.request("POST", DRILLREPORTS_PATH, body=body)
        except HubError as e:
            if e.code == 409:
                continue
            error = str(e)
            break
        stored = name
        break
    if output == "json":
        print(json.dumps(figures(spec), indent=2), flush=True)
    else:
        print(render_report(spec, name=stored), flush=True)
    if stored is None:
        print(f"error: the drill ran, but its report could not be stored: {error or 'names taken'}",
              file=sys.stderr)
        return 1
    print(f"drillreport.{API_GROUP}/{stored} stored", file=sys.stderr if output == "json" else sys.stdout,
          flush=True)
    return 0


# ---------------------------------------------------------------- list, show


def _cmd_list(args: argparse.Namespace) -> int:
    if args.output not in ("text", "wide", "json"):
        return _fail(f"-o {args.output!r}: one of text, wide, json")
    _default_hub_kubeconfig(args)

    async def work(client: HubClient) -> int:
        listing = await client.request("GET", DRILLREPORTS_PATH)
        items = sorted((i for i in listing.get("items") or () if isinstance(i, dict)),
                       key=lambda i: (str(Body(i).creation_timestamp or ""),
                                      Body(i).name))
        if args.output == "json":
            dump({"apiVersion": "v1", "kind": "List", "metadata": {"resourceVersion": ""}, "items": items},
                 "json", sys.stdout)
        elif items:
            Printer("DrillReport", wide=args.output == "wide", all_namespaces=False, out=sys.stdout).print_all(items)
        else:
            print("No drill reports found.", file=sys.stderr)
        return 0

    return run_on_hub(args, work)


def _cmd_show(args: argparse.Namespace) -> int:
    if args.output not in ("text", "json"):
        return _fail(f"-o {args.output!r}: one of text, json")
    _default_hub_kubeconfig(args)

    async def work(client: HubClient) -> int:
        report: JSONObject = await client.request("GET", f"{DRILLREPORTS_PATH}/{quote(args.name, safe='')}")
        spec = report.get("spec") or {}
        if args.output == "json":
            print(json.dumps(figures(spec), indent=2), flush=True)
        else:
            print(render_report(spec, name=Body(report).name), flush=True)
        return 0

    return run_on_hub(args, work)
