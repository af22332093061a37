"""`federator sim`: serve simulated member clusters from one process.

    federator sim --profile clusterconfigs/sim/onprem-rdma-a100.yaml [--profile ...]
                  [--state-dir .federator/sim] [--port-base 7443] [--sim-ephemeral]
                  [--rbac FILE [--hub-service-account NS/NAME] [--agent-service-account NS/NAME]]

Each profile (a file, or a directory of *.yaml) becomes one SimCluster on
127.0.0.1 (HTTPS with a development CA under the state dir, bearer token);
a kubeconfig per cluster is written to <state-dir>/<cluster>.kubeconfig (the
fence agent's identity to <state-dir>/<cluster>-agent.kubeconfig), its
MemberCluster registration to <state-dir>/registrations/<cluster>.yaml (for
`federator up --clusters`: hub replicas that must outlive the clusters' process)
and an index of all of them to <state-dir>/clusters.json. Each cluster keeps
its objects in <state-dir>/<cluster>.db and, when started again on the same
state dir, comes back as it was, on the port and with the tokens of its last
run (federator/sim/server.py, `start_sim_cluster`); `--sim-ephemeral` keeps
them in memory instead (every start is a fresh cluster).

With `--rbac FILE` (Roles, ClusterRoles and their bindings, e.g. the output of
`kubectl kustomize deploy/member/schedulers/volcano`) every cluster enforces
that policy as kube's RBAC authorizer would (federator/sim/rbac.py), mints a
token for each ServiceAccount it names (kubeconfig
<state-dir>/<cluster>-sa-<namespace>-<name>.kubeconfig), registers the
cluster with the hub's ServiceAccount (`--hub-service-account`) instead of
the admin, and writes the fence agent's (`--agent-service-account`) as
<cluster>-agent.kubeconfig. The admin kubeconfig (group system:masters)
still may do everything. Runs until Ctrl-C or
SIGTERM, then stops every cluster cleanly.

Sub-commands of `federator sim` (`federator sim fault ...`, in
federator/cli/simfault.py) are registered here, under the `sim` parser.
This module never prints or logs a token.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from federator.cli import simfault
from federator.cli.common import UserError

if TYPE_CHECKING:
    from federator.sim.profile import ClusterProfile
    from federator.sim.rbac import RbacPolicy

DEFAULT_STATE_DIR = ".federator/sim"
#: deploy/member's identities of the hub and of the fence agent in a member cluster
DEFAULT_HUB_ACCOUNT = "federator-system/federator-hub-access"
DEFAULT_AGENT_ACCOUNT = "federator-system/federator-agent"


def register(sub: Any) -> None:
    p = sub.add_parser(
        "sim",
        help="serve simulated member clusters (kube-style API, gang scheduler, kubelet) from one process",
        description=(
            "Serve one simulated Kubernetes member cluster per profile on 127.0.0.1 and write a kubeconfig for "
            "each. kubectl and the kubernetes Python client work against them. Stops on Ctrl-C."
        ),
        epilog="Example: federator sim --profile clusterconfigs/sim/ --port-base 7443",
    )
    p.add_argument("--profile", action="append", default=[], metavar="PATH",
                   help="a cluster profile YAML file, or a directory of them (repeatable)")
    p.add_argument("--state-dir", default=DEFAULT_STATE_DIR,
                   help=f"where kubeconfigs and the development CA go (default: {DEFAULT_STATE_DIR})")
    p.add_argument("--port-base", type=int, default=None, metavar="N",
                   help="serve cluster i on port N+i (default: the port of the cluster's last run in the state "
                        "dir if free, else a free random one)")
    p.add_argument("--sim-ephemeral", action="store_true",
                   help="keep the clusters in memory: a restart starts them empty (default: each keeps its objects "
                        "in STATE_DIR/<cluster>.db and comes back as it was)")
    p.add_argument("--rbac", default=None, metavar="FILE",
                   help="enforce the RBAC (Role, ClusterRole, RoleBinding, ClusterRoleBinding) in this YAML file in "
                        "every cluster, as kube does, e.g. the output of `kubectl kustomize "
                        "deploy/member/schedulers/volcano`; a token is minted for every ServiceAccount it names")
    p.add_argument("--hub-service-account", default=None, metavar="NAMESPACE/NAME",
                   help=f"with --rbac: the ServiceAccount the registrations give the hub (default: "
                        f"{DEFAULT_HUB_ACCOUNT})")
    p.add_argument("--agent-service-account", default=None, metavar="NAMESPACE/NAME",
                   help=f"with --rbac: the ServiceAccount of <cluster>-agent.kubeconfig, the fence agent's identity "
                        f"(default: {DEFAULT_AGENT_ACCOUNT})")
    p.set_defaults(handler=_cmd_sim)
    nested = p.add_subparsers(dest="sim_command", metavar="SUBCOMMAND")
    nested.required = False
    simfault.register(nested)


def _cmd_sim(args: argparse.Namespace) -> int:
    nested_handler = getattr(args, "sim_handler", None)
    if nested_handler is not None:
        result: int = nested_handler(args)
        return result
    if not args.profile:
        raise UserError("federator sim needs at least one --profile FILE_OR_DIRECTORY")
    profiles = _load(args.profile)
    port_base: int | None = args.port_base
    if port_base is not None and not (1 <= port_base and port_base + len(profiles) - 1 <= 65535):
        raise UserError(f"--port-base {port_base}: ports {port_base}..{port_base + len(profiles) - 1} "
                        "must lie within 1..65535")
    access = _rbac(args)
    from federator.runtime.gcpolicy import server_gc
    from federator.obs import configure_logging

    configure_logging(level=args.log_level)
    with server_gc():  # no full-heap GC pauses in the members' API (see gcpolicy)
        return asyncio.run(serve(profiles, state_dir=Path(args.state_dir), port_base=port_base, rbac=access,
                                 ephemeral=args.sim_ephemeral))


def _account(value: str, flag: str) -> tuple[str, str]:
    namespace, slash, name = value.partition("/")
    if not slash or not namespace or not name or "/" in name:
        raise UserError(f"{flag} {value[:120]!r}: expected NAMESPACE/NAME")
    return namespace, name


def _rbac(args: argparse.Namespace) -> RbacAccess | None:
    """The RBAC policy of --rbac and the hub's and agent's ServiceAccounts in it (UserError naming the flag)."""
    if args.rbac is None:
        for flag, value in (("--hub-service-account", args.hub_service_account),
                            ("--agent-service-account", args.agent_service_account)):
            if value is not None:
                raise UserError(f"{flag} needs --rbac FILE (without it the clusters enforce no RBAC)")
        return None
    from federator.sim.rbac import PolicyError, load_policy

    try:
        policy = load_policy(args.rbac)
    except PolicyError as e:
        raise UserError(f"--rbac: {e}") from None
    accounts = []
    for flag, value, default in (("--hub-service-account", args.hub_service_account, DEFAULT_HUB_ACCOUNT),
                                 ("--agent-service-account", args.agent_service_account, DEFAULT_AGENT_ACCOUNT)):
        account = _account(value if value is not None else default, flag)
        if account not in policy.service_accounts:
            known = ", ".join(f"{ns}/{name}" for ns, name in policy.service_accounts) or "none"
            raise UserError(f"{flag} {account[0]}/{account[1]}: {args.rbac} names no such ServiceAccount "
                            f"(it names: {known})")
        accounts.append(account)
    return RbacAccess(policy=policy, hub=accounts[0], agent=accounts[1])


@dataclass(frozen=True, slots=True)
class RbacAccess:
    """`federator sim --rbac`: the policy every cluster enforces, and whom the hub and the agent act as."""

    policy: RbacPolicy
    #: (namespace, name) of the hub's ServiceAccount and of the fence agent's
    hub: tuple[str, str]
    agent: tuple[str, str]


def _load(paths: list[str]) -> list[ClusterProfile]:
    from federator.sim.profile import ProfileError, load_profile_paths

    try:
        return load_profile_paths(paths)
    except ProfileError as e:
        raise UserError(str(e)) from None


async def serve(profiles: list[ClusterProfile], *, state_dir: Path, port_base: int | None,
                ready: asyncio.Event | None = None, stop: asyncio.Event | None = None,
                rbac: RbacAccess | None = None, ephemeral: bool = True) -> int:
    """Serve `profiles` until SIGINT/SIGTERM (or `stop`); 0 on a clean stop. With `rbac`, every cluster
    enforces its policy and the registrations and agent kubeconfigs use its ServiceAccounts. Unless
    `ephemeral` (the command's --sim-ephemeral), every cluster keeps its objects in the state dir."""
    from federator.dev.certs import ensure_dev_tls
    from federator.sim.server import SimCluster, start_sim_cluster
    from federator.store.protocol import StoreError

    state_dir.mkdir(parents=True, exist_ok=True)
    tls = ensure_dev_tls(state_dir)
    stop = stop or asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        try:
            loop.add_signal_handler(sig, stop.set)
        except (NotImplementedError, RuntimeError):  # pragma: no cover - not the main thread / platform
            pass
    clusters: list[SimCluster] = []
    try:
        for i, prof in enumerate(profiles):
            port = port_base + i if port_base is not None else None
            try:
                cluster = await start_sim_cluster(prof, directory=None if ephemeral else state_dir, port=port, tls=tls,
                                                  rbac=rbac.policy if rbac is not None else None)
            except OSError as e:
                raise UserError(f"cluster {prof.name}: cannot listen on 127.0.0.1:{port or 0}: "
                                f"{e.strerror or e}") from None
            except StoreError as e:
                raise UserError(f"cluster {prof.name}: {e} (is another `federator sim` serving this state dir? "
                                "--sim-ephemeral keeps the clusters in memory)", exit_code=1) from None
            clusters.append(cluster)
        index = []
        registrations = state_dir / "registrations"
        registrations.mkdir(parents=True, exist_ok=True)
        for cluster in clusters:
            path = cluster.write_kubeconfig(state_dir / f"{cluster.name}.kubeconfig")
            hub_path = path
            accounts: dict[str, str] = {}
            if rbac is None:
                agent_path = cluster.write_agent_kubeconfig(state_dir / f"{cluster.name}-agent.kubeconfig")
            else:
                for namespace, name in rbac.policy.service_accounts:
                    written = cluster.write_service_account_kubeconfig(
                        state_dir / f"{cluster.name}-sa-{namespace}-{name}.kubeconfig", namespace=namespace, name=name)
                    accounts[f"{namespace}/{name}"] = str(written)
                hub_path = Path(accounts["/".join(rbac.hub)])
                agent_path = cluster.write_service_account_kubeconfig(
                    state_dir / f"{cluster.name}-agent.kubeconfig", namespace=rbac.agent[0], name=rbac.agent[1])
            registration = registrations / f"{cluster.name}.yaml"
            _write_registration(registration, cluster.profile, hub_path)
            entry: dict[str, Any] = {"name": cluster.name, "server": cluster.url, "kubeconfig": str(path),
                                     "agentKubeconfig": str(agent_path), "registration": str(registration),
                                     "nodes": cluster.profile.node_count,
                                     "schedulers": [s.name for s in cluster.profile.schedulers]}
            if rbac is not None:
                entry["rbac"] = {"hubKubeconfig": str(hub_path), "serviceAccountKubeconfigs": accounts}
            index.append(entry)
        _write_index(state_dir / "clusters.json", index)
        _print_usage(index, state_dir, rbac=rbac)
        if ready is not None:
            ready.set()
        await stop.wait()
    finally:
        for cluster in reversed(clusters):
            await cluster.stop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            try:
                loop.remove_signal_handler(sig)
            except (NotImplementedError, RuntimeError):  # pragma: no cover
                pass
    print("federator sim: all clusters stopped", flush=True)
    return 0


def _write_registration(path: Path, profile: ClusterProfile, kubeconfig: Path) -> None:
    import yaml

    from federator.dev.clusters import registration_for

    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(yaml.safe_dump(registration_for(profile, kubeconfig=kubeconfig), sort_keys=False),
                   encoding="utf-8")
    os.replace(tmp, path)


def _write_index(path: Path, index: list[dict[str, Any]]) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps({"clusters": index}, indent=2) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def _print_usage(index: list[dict[str, Any]], state_dir: Path, *, rbac: RbacAccess | None = None) -> None:
    width = max(len(c["name"]) for c in index)
    lines = [f"federator sim: serving {len(index)} simulated cluster(s); Ctrl-C stops them"]
    if rbac is not None:
        lines.append(f"  RBAC enforced ({rbac.policy.source}); the registrations use ServiceAccount "
                     f"{rbac.hub[0]}/{rbac.hub[1]}, the agent kubeconfigs {rbac.agent[0]}/{rbac.agent[1]}")
    for c in index:
        lines.append(f"  {c['name']:<{width}}  {c['server']}  {c['nodes']} nodes  "
                     f"schedulers: {', '.join(c['schedulers'])}  kubeconfig: {c['kubeconfig']}")
    first = index[0]["kubeconfig"]
    lines += [
        "Try:",
        f"  kubectl --kubeconfig {first} get nodes",
        f"  kubectl --kubeconfig {first} get pods -A -w",
        f"  federator up --clusters {state_dir / 'registrations'}    # a hub that registers them",
        f"Index of all clusters: {state_dir / 'clusters.json'}",
    ]
    print("\n".join(lines), flush=True)
