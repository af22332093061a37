"""The simulator's cluster DNS (federator/sim/processes.py hosts files) resolves the operator-style names the hub
renders for upstream kinds (delegation: the pod contract's DNS identity): a Kubeflow replica's per-replica Service
name, a JobSet pod's `<hostname>.<subdomain>`, each to that pod's address, and never an older epoch's pod."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from federator.delegation.adapter import POD_GVK, SERVICE_GVK, MemberObject
from federator.sim.processes import ProcessRuntime

from ..delegation.test_operator_dns import jobset, kubeflow, render, replica

NS = "team"


def runtime(tmp_path: Path) -> ProcessRuntime:
    return ProcessRuntime(root=tmp_path, cluster="c", storage=None, registry=None,  # type: ignore[arg-type]
                          logger=None)


def run(rt: ProcessRuntime, objects: list[MemberObject], *, uid_prefix: str, address_of: str = "") -> dict[str, str]:
    """Observe the rendered objects as running pods and Services; hostname -> (uid, ip)."""
    out: dict[str, str] = {}
    for o in objects:
        if o.gvk == SERVICE_GVK:
            rt.observe_service(o.body)
    for i, o in enumerate(x for x in objects if x.gvk == POD_GVK):
        body: dict[str, Any] = {**o.body, "metadata": {**o.body["metadata"], "uid": f"{uid_prefix}-{i}"}}
        ip = rt.pod_ip(NS, o.name + address_of)
        body["status"] = {"phase": "Running", "podIP": ip}
        rt.observe_pod(body)
        out[body["spec"]["hostname"]] = f"{uid_prefix}-{i} {ip}"
    return out


def resolves(hosts: str, name: str) -> set[str]:
    return {line.split()[0] for line in hosts.splitlines()
            if line and not line.startswith("#") and name in line.split()[1:]}


def test_a_pytorchjobs_replica_names_resolve_to_their_pods(tmp_path: Path) -> None:
    rt = runtime(tmp_path)
    source = kubeflow("PyTorchJob", "mnist", "pytorchReplicaSpecs", {"Master": replica(1), "Worker": replica(1)})
    _, objects = render(source)
    pods = run(rt, objects, uid_prefix="p")
    uid, _ = pods["mnist-worker-0"].split()
    hosts = rt.hosts_text(NS, uid)
    master_ip = pods["mnist-master-0"].split()[1]
    for name in ("mnist-master-0", "mnist-master-0.team.svc", "mnist-master-0.team.svc.cluster.local"):
        assert resolves(hosts, name) == {master_ip}, (name, hosts)


def test_jobset_hostnames_resolve_under_the_subdomain_and_an_old_epoch_never_answers(tmp_path: Path) -> None:
    rt = runtime(tmp_path)
    source = jobset("js")
    _, old = render(source, epoch=1)
    # the old epoch's pods still run (a partitioned copy, not yet fenced), at other addresses
    old_pods = run(rt, old, uid_prefix="old", address_of="-old")
    _, new = render(source, epoch=2)  # the new epoch's Service replaces the old one of the same name
    new_pods = run(rt, new, uid_prefix="new")
    assert set(old_pods) == set(new_pods)
    uid, _ = new_pods["js-workers-0-0"].split()
    hosts = rt.hosts_text(NS, uid)
    for host, pod in new_pods.items():
        for name in (f"{host}.js", f"{host}.js.team.svc", f"{host}.js.team.svc.cluster.local"):
            assert resolves(hosts, name) == {pod.split()[1]}, (name, hosts)
