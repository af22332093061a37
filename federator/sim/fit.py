"""Pure scheduling arithmetic of the simulated member cluster.

What a pod asks for (`PodRequirements`), what a node offers (`NodeInfo`), the
filters kube-scheduler applies between the two (resources, nodeSelector and
required node affinity, taints and tolerations, unschedulable and not-ready
nodes), the kube-scheduler-style explanation of a miss ("0/500 nodes are
available: 500 Insufficient nvidia.com/gpu."), and all-or-nothing packing of
a gang onto nodes (`CyclePlanner`).

Units: every resource is an int. cpu is in millicores; every other resource
(memory, ephemeral-storage, nvidia.com/gpu, rdma/hca, pods) is in its base
unit, rounded up like `resource.Quantity.Value()`.

This module is pure: no I/O, no asyncio, no clock. It must never let a node
be overcommitted: a placement is recorded only after every resource of the
pod fitted the node's free amount.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from federator.apis.quantity import (
    BINARY_SUFFIXES,
    QuantityError,
    parse_millicores,
    parse_units,
)
from federator.apis.views import Body

CPU = "cpu"
MEMORY = "memory"
PODS = "pods"
GPU = "nvidia.com/gpu"
RDMA_HCA = "rdma/hca"

# ---------------------------------------------------------------- quantities


def resource_units(resource: str, value: str | int | float) -> int:
    """A quantity of `resource` as the int this module counts in: millicores
    for cpu, base units (rounded up) for everything else. Negative -> error."""
    if resource == CPU:
        return parse_millicores(value)
    return parse_units(value, what=resource)


def format_units(resource: str, units: int) -> str:
    """Inverse of `resource_units` with the shortest exact suffix, the way
    kubectl shows quantities ("95", "500m", "1Ti", "1048000Mi")."""
    if resource == CPU:
        return str(units // 1000) if units % 1000 == 0 else f"{units}m"
    if resource in (MEMORY, "ephemeral-storage", "hugepages-2Mi", "hugepages-1Gi") and units:
        for suffix in ("Ei", "Pi", "Ti", "Gi", "Mi", "Ki"):
            base = BINARY_SUFFIXES[suffix]
            if units % base == 0:
                return f"{units // base}{suffix}"
    return str(units)


def parse_resource_list(resources: Mapping[str, Any] | None, *, where: str) -> dict[str, int]:
    """A ResourceList (name -> quantity) as units. QuantityError names `where`."""
    out: dict[str, int] = {}
    if not resources:
        return out
    if not isinstance(resources, Mapping):
        raise QuantityError(f"{where} must be a map of resource name to quantity")
    for name, qty in resources.items():
        if not isinstance(name, str) or not name:
            raise QuantityError(f"{where} has a resource name that is not a string: {name!r}")
        try:
            out[name] = resource_units(name, qty)
        except QuantityError as e:
            raise QuantityError(f"{where}.{name}: {e}") from None
    return out


# ---------------------------------------------------------------- pods


class InvalidPodSpec(ValueError):
    """A pod whose spec the scheduler cannot interpret (bad quantity, bad toleration)."""


@dataclass(frozen=True, slots=True)
class Toleration:
    key: str | None
    operator: str  # "Exists" | "Equal"
    value: str
    effect: str | None  # None tolerates every effect

    def tolerates(self, taint: Taint) -> bool:
        if self.effect is not None and self.effect != taint.effect:
            return False
        if self.key is None:
            # An empty key with Exists tolerates every taint.
            return self.operator == "Exists"
        if self.key != taint.key:
            return False
        return self.operator == "Exists" or self.value == taint.value


@dataclass(frozen=True, slots=True)
class Taint:
    key: str
    value: str
    effect: str  # NoSchedule | PreferNoSchedule | NoExecute

    def describe(self) -> str:
        return f"{{{self.key}: {self.value}}}"


@dataclass(frozen=True, slots=True)
class SelectorTerm:
    """One nodeSelectorTerm of required node affinity: all expressions must hold."""

    expressions: tuple[tuple[str, str, tuple[str, ...]], ...]  # (key, operator, values)

    def matches(self, labels: Mapping[str, str]) -> bool:
        for key, op, values in self.expressions:
            present = key in labels
            if op == "In":
                if not present or labels[key] not in values:
                    return False
            elif op == "NotIn":
                if present and labels[key] in values:
                    return False
            elif op == "Exists":
                if not present:
                    return False
            elif op == "DoesNotExist":
                if present:
                    return False
            elif op in ("Gt", "Lt"):
                if not present:
                    return False
                try:
                    have, want = int(labels[key]), int(values[0])
                except (ValueError, IndexError):
                    return False
                if (op == "Gt" and not have > want) or (op == "Lt" and not have < want):
                    return False
            else:  # validated in _affinity_terms
                return False
        return True


@dataclass(frozen=True, slots=True)
class Placement:
    """The static half of a pod's requirements: where it may go at all."""

    node_selector: tuple[tuple[str, str], ...] = ()
    affinity_terms: tuple[SelectorTerm, ...] = ()  # ORed; empty means no constraint
    tolerations: tuple[Toleration, ...] = ()


@dataclass(frozen=True, slots=True)
class PodRequirements:
    """What one pod needs from a node. Hashable: pods with equal requirements
    share feasibility work within a scheduling cycle."""

    requests: tuple[tuple[str, int], ...]  # sorted; always includes ("pods", 1)
    placement: Placement = Placement()

    def request(self, resource: str) -> int:
        for name, units in self.requests:
            if name == resource:
                return units
        return 0


_NODE_SELECTOR_OPS = frozenset({"In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"})


def _containers(spec: Mapping[str, Any], field_name: str) -> list[Mapping[str, Any]]:
    value = spec.get(field_name) or []
    if not isinstance(value, list) or not all(isinstance(c, Mapping) for c in value):
        raise InvalidPodSpec(f"spec.{field_name} must be a list of containers")
    return value


def _container_requests(container: Mapping[str, Any], where: str) -> dict[str, int]:
    resources = container.get("resources") or {}
    if not isinstance(resources, Mapping):
        raise InvalidPodSpec(f"{where}.resources must be a map")
    try:
        requests = parse_resource_list(resources.get("requests"), where=f"{where}.resources.requests")
        limits = parse_resource_list(resources.get("limits"), where=f"{where}.resources.limits")
    except QuantityError as e:
        raise InvalidPodSpec(str(e)) from None
    # The API server defaults a missing request to its limit.
    for name, units in limits.items():
        requests.setdefault(name, units)
    return requests


def effective_requests(spec: Mapping[str, Any]) -> dict[str, int]:
    """kube-scheduler's pod request: per resource, max(sum over containers,
    max over init containers) plus overhead; plus one of `pods`."""
    total: dict[str, int] = {}
    for i, c in enumerate(_containers(spec, "containers")):
        for name, units in _container_requests(c, f"spec.containers[{i}]").items():
            total[name] = total.get(name, 0) + units
    for i, c in enumerate(_containers(spec, "initContainers")):
        for name, units in _container_requests(c, f"spec.initContainers[{i}]").items():
            if units > total.get(name, 0):
                total[name] = units
    try:
        overhead = parse_resource_list(spec.get("overhead"), where="spec.overhead")
    except QuantityError as e:
        raise InvalidPodSpec(str(e)) from None
    for name, units in overhead.items():
        total[name] = total.get(name, 0) + units
    total[PODS] = 1
    return {k: v for k, v in total.items() if v > 0 or k == PODS}


def _tolerations(spec: Mapping[str, Any]) -> tuple[Toleration, ...]:
    raw = spec.get("tolerations") or []
    if not isinstance(raw, list):
        raise InvalidPodSpec("spec.tolerations must be a list")
    out = []
    for i, t in enumerate(raw):
        if not isinstance(t, Mapping):
            raise InvalidPodSpec(f"spec.tolerations[{i}] must be a map")
        key = t.get("key") or None
        operator = t.get("operator") or "Equal"
        if operator not in ("Exists", "Equal"):
            raise InvalidPodSpec(f"spec.tolerations[{i}].operator must be Exists or Equal, not {operator!r}")
        effect = t.get("effect") or None
        if effect not in (None, "NoSchedule", "PreferNoSchedule", "NoExecute"):
            raise InvalidPodSpec(f"spec.tolerations[{i}].effect {effect!r} is not a taint effect")
        value = t.get("value") or ""
        if key is None and operator != "Exists":
            raise InvalidPodSpec(f"spec.tolerations[{i}]: an empty key requires operator Exists")
        out.append(Toleration(key=key, operator=operator, value=str(value), effect=effect))
    return tuple(out)


def _affinity_terms(spec: Mapping[str, Any]) -> tuple[SelectorTerm, ...]:
    affinity = spec.get("affinity") or {}
    if not isinstance(affinity, Mapping):
        raise InvalidPodSpec("spec.affinity must be a map")
    node_affinity = affinity.get("nodeAffinity") or {}
    required = node_affinity.get("requiredDuringSchedulingIgnoredDuringExecution") if isinstance(
        node_affinity, Mapping) else None
    if not required:
        return ()
    where = "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"
    terms = required.get("nodeSelectorTerms") if isinstance(required, Mapping) else None
    if not isinstance(terms, list):
        raise InvalidPodSpec(f"{where}.nodeSelectorTerms must be a list")
    out = []
    for i, term in enumerate(terms):
        exprs = (term or {}).get("matchExpressions") or [] if isinstance(term, Mapping) else None
        if not isinstance(exprs, list):
            raise InvalidPodSpec(f"{where}.nodeSelectorTerms[{i}].matchExpressions must be a list")
        parsed = []
        for j, e in enumerate(exprs):
            if not isinstance(e, Mapping) or e.get("operator") not in _NODE_SELECTOR_OPS or not e.get("key"):
                raise InvalidPodSpec(
                    f"{where}.nodeSelectorTerms[{i}].matchExpressions[{j}] needs a key and an operator "
                    f"among {sorted(_NODE_SELECTOR_OPS)}"
                )
            values = e.get("values") or []
            if not isinstance(values, list):
                raise InvalidPodSpec(f"{where}.nodeSelectorTerms[{i}].matchExpressions[{j}].values must be a list")
            parsed.append((str(e["key"]), str(e["operator"]), tuple(str(v) for v in values)))
        out.append(SelectorTerm(expressions=tuple(parsed)))
    return tuple(out)


def pod_requirements(pod: Mapping[str, Any]) -> PodRequirements:
    """What a pod object needs from a node. Raises InvalidPodSpec."""
    spec = pod.get("spec")
    if not isinstance(spec, Mapping):
        raise InvalidPodSpec("spec must be a map")
    selector = spec.get("nodeSelector") or {}
    if not isinstance(selector, Mapping):
        raise InvalidPodSpec("spec.nodeSelector must be a map of label to value")
    placement = Placement(
        node_selector=tuple(sorted((str(k), str(v)) for k, v in selector.items())),
        affinity_terms=_affinity_terms(spec),
        tolerations=_tolerations(spec),
    )
    return PodRequirements(requests=tuple(sorted(effective_requests(spec).items())), placement=placement)


# ---------------------------------------------------------------- nodes

REASON_UNSCHEDULABLE = "node(s) were unschedulable"
REASON_NOT_READY = "node(s) were not ready"
REASON_SELECTOR = "node(s) didn't match Pod's node affinity/selector"
REASON_TOO_MANY_PODS = "Too many pods"

_UNSCHEDULABLE_TAINT = Taint(key="node.kubernetes.io/unschedulable", value="", effect="NoSchedule")


@dataclass(slots=True)
class NodeInfo:
    """A node as the scheduler counts it. `used` is owned by `ClusterLedger`."""

    name: str
    allocatable: dict[str, int]
    labels: Mapping[str, str] = field(default_factory=dict)
    taints: tuple[Taint, ...] = ()
    unschedulable: bool = False
    ready: bool = True
    used: dict[str, int] = field(default_factory=dict)

    def free(self, resource: str) -> int:
        return self.allocatable.get(resource, 0) - self.used.get(resource, 0)

    def fits(self, requests: Sequence[tuple[str, int]]) -> bool:
        alloc, used = self.allocatable, self.used
        for name, units in requests:
            if units and alloc.get(name, 0) - used.get(name, 0) < units:
                return False
        return True


def node_info(node: Mapping[str, Any]) -> NodeInfo:
    """A NodeInfo from a Node object. Malformed quantities count as zero
    (a real scheduler would not see such a node advertise anything)."""
    meta = Body(node)
    spec = node.get("spec") or {}
    status = node.get("status") or {}
    allocatable: dict[str, int] = {}
    raw = status.get("allocatable") or status.get("capacity") or {}
    if isinstance(raw, Mapping):
        for name, qty in raw.items():
            try:
                allocatable[str(name)] = resource_units(str(name), qty)
            except QuantityError:
                allocatable[str(name)] = 0
    taints = []
    for t in spec.get("taints") or []:
        if isinstance(t, Mapping) and t.get("key") and t.get("effect"):
            taints.append(Taint(key=str(t["key"]), value=str(t.get("value") or ""), effect=str(t["effect"])))
    ready = False
    for c in status.get("conditions") or []:
        if isinstance(c, Mapping) and c.get("type") == "Ready":
            ready = c.get("status") == "True"
    return NodeInfo(
        name=meta.name,
        allocatable=allocatable,
        labels=dict(meta.labels),
        taints=tuple(taints),
        unschedulable=bool(spec.get("unschedulable", False)),
        ready=ready,
    )


def static_misfit(placement: Placement, node: NodeInfo) -> str | None:
    """The reason (kube-scheduler wording) why a pod with this placement can
    never go to `node` as it is now, or None. Resources are not considered.
    Checks run in kube-scheduler's filter order (NodeUnschedulable,
    TaintToleration, NodeAffinity); readiness comes last because a real
    cluster expresses it as a taint (node.kubernetes.io/not-ready or
    unreachable) that the taint check reports first."""
    if node.unschedulable and not any(t.tolerates(_UNSCHEDULABLE_TAINT) for t in placement.tolerations):
        return REASON_UNSCHEDULABLE
    for taint in node.taints:
        if taint.effect == "PreferNoSchedule":
            continue
        if not any(t.tolerates(taint) for t in placement.tolerations):
            return f"node(s) had untolerated taint {taint.describe()}"
    labels = node.labels
    for key, value in placement.node_selector:
        if labels.get(key) != value:
            return REASON_SELECTOR
    if placement.affinity_terms and not any(term.matches(labels) for term in placement.affinity_terms):
        return REASON_SELECTOR
    if not node.ready:
        return REASON_NOT_READY
    return None


def resource_misfits(requests: Sequence[tuple[str, int]], node: NodeInfo) -> list[str]:
    """Every resource of `requests` that `node` lacks, in kube-scheduler wording."""
    out = []
    for name, units in requests:
        if units and node.free(name) < units:
            out.append(REASON_TOO_MANY_PODS if name == PODS else f"Insufficient {name}")
    return out


def explain(req: PodRequirements, nodes: Iterable[NodeInfo]) -> str:
    """kube-scheduler's FitError message: '0/N nodes are available: <count>
    <reason>, ....' with the reasons sorted as strings."""
    histogram: dict[str, int] = {}
    total = 0
    for node in nodes:
        total += 1
        reason = static_misfit(req.placement, node)
        reasons = [reason] if reason else resource_misfits(req.requests, node)
        for r in reasons:
            histogram[r] = histogram.get(r, 0) + 1
    parts = sorted(f"{count} {reason}" for reason, count in histogram.items())
    msg = f"0/{total} nodes are available"
    return f"{msg}: {', '.join(parts)}." if parts else f"{msg}."


# ---------------------------------------------------------------- ledger


class LedgerError(RuntimeError):
    """An accounting call that would break the ledger (unknown node, double add)."""


class ClusterLedger:
    """Nodes and what the bound pods on them use. The scheduler's single
    source of truth for free capacity; rebuilt from the store on start.

    `account` is unconditional (a pod the store says is bound uses what it
    uses, even past allocatable, e.g. after GPUs went unhealthy); placement
    decisions go through `CyclePlanner`, which only accounts what fits.
    """

    def __init__(self) -> None:
        self.nodes: dict[str, NodeInfo] = {}
        self._order: list[NodeInfo] | None = None
        self._pods: dict[str, tuple[str, tuple[tuple[str, int], ...]]] = {}
        #: bumps whenever free capacity may have grown or nodes changed; the
        #: scheduler retries unschedulable pods only when it moved.
        self.generation = 0

    # nodes
    def upsert_node(self, info: NodeInfo) -> None:
        old = self.nodes.get(info.name)
        if old is not None:
            # update in place: ordered_nodes() and planners hold this object
            old.allocatable = info.allocatable
            old.labels = info.labels
            old.taints = info.taints
            old.unschedulable = info.unschedulable
            old.ready = info.ready
        else:
            self._order = None
            info.used = {}
            self.nodes[info.name] = info
        self.generation += 1

    def remove_node(self, name: str) -> None:
        if self.nodes.pop(name, None) is not None:
            self._order = None
            self.generation += 1
        # Pods still bound to a vanished node keep their entry (the node may
        # come back); they simply use nothing we can see.

    def ordered_nodes(self) -> list[NodeInfo]:
        if self._order is None:
            self._order = [self.nodes[n] for n in sorted(self.nodes)]
        return self._order

    # pods
    def account(self, pod_key: str, node_name: str, requests: tuple[tuple[str, int], ...]) -> None:
        if pod_key in self._pods:
            if self._pods[pod_key][0] == node_name:
                return
            self.release(pod_key)
        self._pods[pod_key] = (node_name, requests)
        node = self.nodes.get(node_name)
        if node is not None:
            used = node.used
            for name, units in requests:
                used[name] = used.get(name, 0) + units

    def release(self, pod_key: str, *, freed: bool = True) -> bool:
        """Stop accounting a pod. `freed=False` is for undoing a tentative
        placement of this cycle: nothing that existed before was freed, so
        unschedulable pods need not be retried for it."""
        entry = self._pods.pop(pod_key, None)
        if entry is None:
            return False
        node = self.nodes.get(entry[0])
        if node is not None:
            used = node.used
            for name, units in entry[1]:
                used[name] = used.get(name, 0) - units
        if freed:
            self.generation += 1
        return True

    def node_of(self, pod_key: str) -> str | None:
        entry = self._pods.get(pod_key)
        return entry[0] if entry else None

    def accounted(self) -> Mapping[str, tuple[str, tuple[tuple[str, int], ...]]]:
        return self._pods

    def reattach(self) -> None:
        """Recompute every node's `used` from the pod entries (after nodes
        were re-added by a re-list)."""
        for info in self.nodes.values():
            info.used = {}
        for node_name, requests in self._pods.values():
            node = self.nodes.get(node_name)
            if node is not None:
                for name, units in requests:
                    node.used[name] = node.used.get(name, 0) + units
        self.generation += 1

    def overcommitted(self) -> list[str]:
        """Nodes whose accounted use exceeds allocatable (test oracle)."""
        return [n.name for n in self.nodes.values() if any(n.free(r) < 0 for r in n.used)]


# ---------------------------------------------------------------- packing


@dataclass(frozen=True, slots=True)
class GangOutcome:
    """The result of trying to place a gang's pending pods.

    `committed` is True when at least `needed` pods fitted: `placed` (pod ->
    node) is then accounted in the ledger. Otherwise nothing is accounted and
    `placed` is empty. `message` is the FitError of the first pod that did
    not fit (None when every pod fitted)."""

    committed: bool
    placed: Mapping[str, str]
    fitted: int
    needed: int
    message: str | None


class CyclePlanner:
    """One scheduling cycle over a ledger: places single pods and whole gangs.

    Within a cycle, feasibility (selector, taints, readiness) is computed once
    per distinct `Placement`, and each distinct `PodRequirements` keeps a
    cursor into its feasible nodes: a node skipped because it was full stays
    full until the cycle ends (usage only grows inside a cycle; a rolled-back
    gang restores the cursors it moved). So a cycle costs O(nodes x shapes +
    pods), not O(nodes x pods).
    """

    def __init__(self, ledger: ClusterLedger) -> None:
        self.ledger = ledger
        self._feasible: dict[Placement, list[NodeInfo]] = {}
        self._cursor: dict[PodRequirements, int] = {}

    def feasible(self, placement: Placement) -> list[NodeInfo]:
        nodes = self._feasible.get(placement)
        if nodes is None:
            nodes = [n for n in self.ledger.ordered_nodes() if static_misfit(placement, n) is None]
            self._feasible[placement] = nodes
        return nodes

    def _find(self, req: PodRequirements) -> NodeInfo | None:
        nodes = self.feasible(req.placement)
        i = self._cursor.get(req, 0)
        requests = req.requests
        while i < len(nodes):
            node = nodes[i]
            if node.fits(requests):
                self._cursor[req] = i
                return node
            i += 1
        self._cursor[req] = i
        return None

    def place_one(self, pod_key: str, req: PodRequirements) -> str | None:
        """Place one pod (account it) and return its node, or None."""
        node = self._find(req)
        if node is None:
            return None
        self.ledger.account(pod_key, node.name, req.requests)
        return node.name

    def place_gang(
        self, members: Sequence[tuple[str, PodRequirements]], *, need: int, limit: int | None = None
    ) -> GangOutcome:
        """Place as many of `members` as fit, in order (at most `limit` of
        them: the rest are not tried). If at least `need` of them fit, keep
        them all (accounted); otherwise undo every tentative placement. Never
        leaves a node overcommitted."""
        saved = {req: self._cursor.get(req, 0) for _, req in members}
        placed: dict[str, str] = {}
        first_miss: PodRequirements | None = None
        for pod_key, req in members:
            if limit is not None and len(placed) >= limit:
                break
            node = self._find(req)
            if node is None:
                if first_miss is None:
                    first_miss = req
                continue
            self.ledger.account(pod_key, node.name, req.requests)
            placed[pod_key] = node.name
        message = explain(first_miss, self.ledger.ordered_nodes()) if first_miss is not None else None
        if len(placed) >= need:
            return GangOutcome(committed=True, placed=placed, fitted=len(placed), needed=need, message=message)
        for pod_key in placed:
            self.ledger.release(pod_key, freed=False)
        for req, cursor in saved.items():
            self._cursor[req] = cursor
        return GangOutcome(committed=False, placed={}, fitted=len(placed), needed=need, message=message)
