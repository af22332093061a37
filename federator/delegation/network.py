"""A placed gang's network identity in its member: one headless Service, and every pod's hostname and subdomain.

Every gang the hub places gets a headless core/v1 Service in the member namespace (`headless_service`):
`clusterIP: None`, `publishNotReadyAddresses: true` (pods are in DNS before they are ready, so a rendezvous can
start as soon as the processes do), and a selector of the gang's pods *at that epoch* (`federator.dev/hub`,
`federator.dev/job-uid`, `federator.dev/epoch`: a copy of an older epoch never answers for the new one). Every
pod gets `hostname` = its pod name and `subdomain` = the Service (`set_identity`), so kube's DNS gives it the
name `<pod>.<service>.<namespace>.svc` (kubernetes.io/docs/concepts/services-networking/dns-pod-service,
"A/AAAA records" and "Pod's hostname and subdomain fields"). This is how the MPI operator names its workers
(kubeflow/mpi-operator v0.8.2 pkg/controller/mpi_job_controller.go `newWorker`: Hostname = pod name, Subdomain =
the job's Service; `newJobService`: ClusterIP None, PublishNotReadyAddresses true) and JobSet its pods.

The Service's name is the job's (`adapter.service_name`: `<job>-<uid token>`, a DNS-1035 label of at most 63
characters), the same at every epoch, as pod names are: a pod's DNS name then stays the same across requeues
and failovers (a checkpoint or a log that recorded it stays right), and within one cluster the name is a lock
across epochs like a pod name (dispatch deletes an older epoch's Service that still holds it, then creates the
new one). The Service carries the gang's labels (hub, job, epoch), so it goes wherever the gang goes: the failed
dispatch's cleanup lists it with the adapter's `gvk_list()`, and every deletion of a whole gang (job deletion,
GC, failover, drain, pull-back) deletes it with the gang's pods (controllers/dispatch.py
`delete_member_objects`); the fence agent sweeps it with the pods (fencing/agent.py).

Upstream kinds (issue 28, render mode) get their operator's DNS names instead, with their pods' names unchanged
(the pod contract's `dns`, apis/jobkinds/base.py `PodDns`): each pod the operator's hostname and subdomain, and
for each subdomain a headless Service of that name selecting the gang's pods at that epoch (JobSet, TrainJob's
JobSet, MPIJob, an Indexed Job whose template names one), for a Kubeflow replica a headless Service of the
replica's name selecting that pod alone (also by `federator.dev/role` and `federator.dev/index`). They are named
as the operator names them, the same at every epoch, and carry the gang's labels: they come and go with the gang
exactly as the gang's own Service does. The gang's own Service is made all the same (its ports, the MPI
ConfigMap's name). adapter.py `_operator_dns` falls back to the hub's identity for the whole gang when a name would
not be valid (too long: the operator would refuse the job) or two would clash.

Nothing watches Services: the hub never reads their state (a headless Service has none that matters).

Pure: no I/O. It never names a pod or a Service itself (the adapter does), and never touches a container.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["ServicePort", "headless_service", "pod_address", "set_dns", "set_identity"]

JSON = dict[str, Any]


@dataclass(frozen=True, slots=True)
class ServicePort:
    """A port the gang's processes listen on (named, so a client can look it up by SRV record)."""

    name: str
    port: int


def pod_address(*, pod: str, service: str, namespace: str) -> str:
    """The DNS name of a pod of the gang, as the member's cluster DNS serves it (without the cluster domain, as
    the Kubeflow operators write it: TFJob's TF_CONFIG and the MPI operator's hostfile use `<host>.<ns>.svc`)."""
    return f"{pod}.{service}.{namespace}.svc"


def headless_service(*, name: str, namespace: str, labels: Mapping[str, str], annotations: Mapping[str, str],
                     selector: Mapping[str, str], ports: Sequence[ServicePort] = ()) -> JSON:
    """The gang's headless Service (see the module docstring)."""
    spec: JSON = {
        "clusterIP": "None",
        "publishNotReadyAddresses": True,
        "selector": dict(selector),
    }
    if ports:
        spec["ports"] = [{"name": p.name, "port": p.port, "targetPort": p.port, "protocol": "TCP"} for p in ports]
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "namespace": namespace, "labels": dict(labels),
                     "annotations": dict(annotations)},
        "spec": spec,
    }


def set_identity(pod: JSON, *, service: str) -> None:
    """hostname = the pod's name, subdomain = the gang's Service, on a rendered pod body (in place)."""
    set_dns(pod, hostname=pod["metadata"]["name"], subdomain=service)


def set_dns(pod: JSON, *, hostname: str, subdomain: str) -> None:
    """spec.hostname and spec.subdomain of a rendered pod body, in place ("" subdomain: none, the template's
    dropped)."""
    spec = pod.setdefault("spec", {})
    spec["hostname"] = hostname
    if subdomain:
        spec["subdomain"] = subdomain
    else:
        spec.pop("subdomain", None)
