"""The member pods of a TrainingJob's current attempt, read from whichever member cluster holds them now.

Behind the job's read-only `pods` subresource (`GET .../trainingjobs/NAME/pods`, hub/app.py; authorised
like the job's log, apiserver/auth.py), which the dashboard's Job page and `federator describe job`
show; the log subresource (joblogs.py) finds its pods here too:

- `job_member(hub, cluster)` is an async context manager whose value is the `MemberClient` member
  sync holds for that cluster or, on a hub that does not lead (no member sync runs there), one made
  for this request from the MemberCluster's connection and closed with it;
- `current_pods(client, job, cluster=, epoch=)`: one LIST of the member (by the job-uid and epoch
  labels the hub put on its pods) finds the pods of the current attempt;
- `job_pods(hub, job)` is the subresource's body, kind `TrainingJobPods`: the job's cluster and epoch
  and, per member pod, its name, role, index, node, phase, readiness, restarts and start time, in the
  job's role order (at most twice the gang's size: a member cannot make the answer grow without
  bound). A job that is not placed has no pods: its `items` are empty (200, not an error).

Errors are Statuses that name the cluster and nothing of how the hub reaches it: a member that does not
answer is 503, one that refuses the LIST is 500; the member's address, the kubeconfig's path and the
error's own text go only to the hub's log. It never returns a credential or a pod's spec, and never logs
a credential.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Mapping
from typing import Any

from federator.apis.trainingjob import placed_replicas
from federator.apis.views import Body
from federator.apiserver import errors
from federator.apiserver.errors import ApiError
from federator.clusters.client import PODS, MemberApiError, MemberClient, MemberClientError
from federator.controllers.context import HubContext
from federator.controllers.jobs import current_placement, job_ref, member_client, phase_of
from federator.delegation.adapter import LABEL_INDEX, LABEL_ROLE, selector_for
from federator.obs import get_logger

__all__ = ["POD_LIST_KIND", "current_pods", "job_member", "job_pods", "job_roles", "pod_slot", "unreachable"]

#: the kind of the pods subresource's answer
POD_LIST_KIND = "TrainingJobPods"

_log = get_logger("controllers.jobpods")


def job_roles(job: Mapping[str, Any]) -> list[tuple[str, int]]:
    """(role name, pods) in the job's spec order: the size the gang was placed at (`placed_replicas`: an
    elastic gang's status.replicas, else the spec's replicas)."""
    placed = placed_replicas(job)
    found: list[tuple[str, int]] = []
    for role in Body(job).spec.get("roles") or ():
        if isinstance(role, Mapping) and isinstance(role.get("name"), str):
            replicas = placed.get(role["name"])
            found.append((role["name"], replicas if replicas is not None and replicas > 0 else 1))
    return found


def pod_slot(pod: Mapping[str, Any]) -> tuple[str, int] | None:
    """The (role, index) a member pod fills, from the labels the hub put on it; None when it has none."""
    labels = Body(pod).labels
    role, raw = labels.get(LABEL_ROLE), labels.get(LABEL_INDEX)
    if not isinstance(role, str) or not isinstance(raw, str) or not raw.isascii() or not raw.isdigit() \
            or len(raw) > 9:
        return None
    return role, int(raw)


def unreachable(cluster: str, job: str, error: MemberClientError) -> ApiError:
    """503 for a member that did not answer. The error's text (it may name the member's address) is
    logged, not returned."""
    # one line per refused request, as for any request error (member sync's health reports the outage itself)
    _log.info("member cluster did not answer a request for a job's pods or logs", cluster=cluster, job=job,
              error=str(error))
    return errors.service_unavailable(f"cluster {cluster}, which holds trainingjob {job}, did not answer "
                                      f"({type(error).__name__}); try again later")


@contextlib.asynccontextmanager
async def job_member(hub: HubContext, cluster: str) -> AsyncIterator[MemberClient]:
    """Member sync's client for `cluster`, else one for this request (closed after it)."""
    shared = member_client(hub, cluster)
    if isinstance(shared, MemberClient):
        yield shared
        return
    try:
        registered = await hub.storage.get(hub.kind("MemberCluster"), namespace=None, name=cluster)
    except ApiError as e:
        if e.code == 404:
            raise errors.service_unavailable(f"cluster {cluster} is no longer registered with the hub") from None
        raise
    connection = Body(registered).spec.get("connection") or {}
    try:
        client = await MemberClient.from_connection(connection, cluster=cluster)
    except MemberClientError as e:
        _log.warning("cannot make a member client for a request", cluster=cluster, error=str(e))
        raise errors.service_unavailable(f"cannot reach cluster {cluster}: its registration gives no usable "
                                         "client (the hub's log says why)") from None
    try:
        yield client
    finally:
        await client.close()


async def current_pods(client: MemberClient, job: Mapping[str, Any], *, cluster: str,
                       epoch: int) -> list[dict[str, Any]]:
    """The member's pods of the job's attempt `epoch` (a Status error when the member fails)."""
    ref = job_ref(job)
    where = f"{ref.namespace}/{ref.name}"
    try:
        listing = await client.list_all(PODS, namespace=ref.namespace, label_selector=selector_for(ref.uid, epoch))
    except MemberApiError as e:
        # a 401/403 there is the hub's identity, not the caller's
        raise errors.internal(f"cluster {cluster} refused to list the pods of trainingjob {where}: "
                              f"{e.code} {e.reason}: {e.message[:512]}") from None
    except MemberClientError as e:
        raise unreachable(cluster, where, e) from None
    return [pod for pod in listing.items if isinstance(pod, dict)]


def _text(value: Any, limit: int) -> str | None:
    return value[:limit] if isinstance(value, str) and value else None


def _pod_row(pod: Mapping[str, Any], role: str, index: int) -> dict[str, Any]:
    body = Body(pod)
    status = body.status
    conditions = status.get("conditions") or ()
    ready = any(isinstance(c, Mapping) and c.get("type") == "Ready" and c.get("status") == "True"
                for c in conditions)
    restarts = sum(cs["restartCount"] for cs in status.get("containerStatuses") or ()
                   if isinstance(cs, Mapping) and type(cs.get("restartCount")) is int and cs["restartCount"] >= 0)
    row: dict[str, Any] = {"name": _text(body.name, 253) or "", "role": role, "index": index,
                           "phase": _text(body.phase, 64) or "Unknown", "ready": ready,
                           "restarts": restarts}
    for key, value in (("node", _text(body.spec.get("nodeName"), 253)),
                       ("startTime", _text(status.get("startTime"), 64)),
                       ("deletionTimestamp", _text(body.deletion_timestamp, 64))):
        if value is not None:
            row[key] = value
    return row


async def job_pods(hub: HubContext, job: Mapping[str, Any]) -> dict[str, Any]:
    """The pods subresource's body (see the module docstring)."""
    ref = job_ref(job)
    rt = hub.kind("TrainingJob")
    cluster, epoch = current_placement(job)
    body: dict[str, Any] = {"apiVersion": rt.api_version, "kind": POD_LIST_KIND,
                            "metadata": {"name": ref.name, "namespace": ref.namespace, "uid": ref.uid},
                            "phase": phase_of(job) or "", "epoch": epoch, "items": []}
    if cluster is None:
        return body
    body["cluster"] = cluster
    async with job_member(hub, cluster) as client:
        pods = await current_pods(client, job, cluster=cluster, epoch=epoch)
    roles = job_roles(job)
    order = {name: i for i, (name, _) in enumerate(roles)}
    rows = []
    for pod in pods:
        slot = pod_slot(pod)
        if slot is not None:
            rows.append(_pod_row(pod, *slot))
    rows.sort(key=lambda r: (order.get(r["role"], len(order)), r["role"], r["index"], r["name"]))
    most = 2 * max(1, sum(replicas for _, replicas in roles))
    body["items"] = rows[:most]
    return body
