"""The kinds a simulated member cluster serves, as kube-apiserver shapes them.

Namespace, Node (+status), Pod (+status, +binding), Service (+status), ConfigMap, Event, Lease
(coordination.k8s.io/v1: node heartbeats, the hub's fencing lease),
PriorityClass (scheduling.k8s.io/v1, with kube's Priority admission: a pod's
spec.priorityClassName, or the globalDefault class, becomes spec.priority and
spec.preemptionPolicy at create; an unknown class or a contradicting value is
403 Forbidden) and
PodGroup in the five gang-scheduler API groups (kube-api-notes §11; Kubernetes'
own scheduling.k8s.io/v1alpha2 and KAI's scheduling.run.ai/v2alpha2), each with
its real field names (`minMember`, `schedulingPolicy.gang.minCount`), the pod
label, annotation or spec field that ties a pod to its group, validation of
required fields and types (what the official Python client's models require,
§12), server-side defaults, field selectors, Table columns and an OpenAPI
schema for `kubectl explain`.

`sim_registry()` is the registry a SimCluster serves; `sim_subresources()`
the pods/binding subresource and the bindings resource.

This module describes kinds and answers bindings; it must never import the
hub, and never keep state of its own.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import datetime as dt
import hashlib
import ipaddress
import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import orjson
from aiohttp import web

from federator.apis.views import Body
from federator.apiserver import errors
from federator.apiserver.app import Subresource, SubresourceRequest, VerbOnlyResource, decode_body, json_response
from federator.apiserver.clientschema import client_schema_errors, client_unknown_fields, with_client_schema
from federator.apiserver.errors import ApiError, FieldError, as_field_error
from federator.apiserver.events import core_event_type, validate_event
from federator.apiserver.namespaces import NAMESPACES as NAMESPACES  # served here; tests reach it as kinds.NAMESPACES
from federator.apiserver.registry import (
    JSONObject,
    Registry,
    ResourceType,
    SMPListStrategy,
    TableColumn,
    jsonpath_cell,
)
from federator.apiserver.selectors import path_getter
from federator.apis import priorityclass
from federator.apis.common import dns1035_label_errors, dns1123_label_errors, label_key_errors, label_value_errors
from federator.apis.quantity import QuantityError, parse_quantity
from federator.apis.timestamps import format_micro_time, format_time, parse_micro_time

# ---------------------------------------------------------------- gang-scheduler wiring (kube-api-notes §11)

VOLCANO_GROUP = "scheduling.volcano.sh"
COSCHEDULING_GROUP = "scheduling.x-k8s.io"
KUBE_BATCH_GROUP = "scheduling.incubator.k8s.io"

#: Volcano and kube-batch: the pod annotation naming its PodGroup
GROUP_NAME_ANNOTATION = "scheduling.k8s.io/group-name"
VOLCANO_GROUP_NAME_ANNOTATION = "scheduling.volcano.sh/group-name"
#: scheduler-plugins coscheduling: the pod label naming its PodGroup
COSCHEDULING_POD_GROUP_LABEL = "scheduling.x-k8s.io/pod-group"

_CONDITION_STATUSES = ("True", "False", "Unknown")
_TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
_POD_PHASES = ("Pending", "Running", "Succeeded", "Failed", "Unknown")


def _now() -> str:
    return format_time(dt.datetime.now(dt.UTC))


# The official client's models as schema: federator.apiserver.clientschema.

def _quantity_strings(resources: Any) -> None:
    """kube accepts JSON numbers for quantities and serves strings; so do we."""
    if isinstance(resources, dict):
        for name, qty in list(resources.items()):
            if isinstance(qty, bool):
                continue
            if isinstance(qty, int):
                resources[name] = str(qty)
            elif isinstance(qty, float) and qty == qty and qty not in (float("inf"), float("-inf")):
                resources[name] = format(qty, "f").rstrip("0").rstrip(".") or "0"


# ---------------------------------------------------------------- validation helpers


class _Checker:
    """Collects field errors while walking an object."""

    def __init__(self) -> None:
        self.errors: list[FieldError] = []

    def object_at(self, value: Any, path: str, *, required: bool = False) -> dict[str, Any] | None:
        if value is None:
            if required:
                self.errors.append(FieldError.required(path))
            return None
        if not isinstance(value, dict):
            self.errors.append(FieldError.wrong_type(path, value, "an object"))
            return None
        return value

    def list_at(self, value: Any, path: str, *, required: bool = False) -> list[Any] | None:
        if value is None:
            if required:
                self.errors.append(FieldError.required(path))
            return None
        if not isinstance(value, list):
            self.errors.append(FieldError.wrong_type(path, value, "a list"))
            return None
        return value

    def string(self, value: Any, path: str, *, required: bool = False) -> str | None:
        if value is None or (required and value == ""):
            if required:
                self.errors.append(FieldError.required(path))
            return None
        if not isinstance(value, str):
            self.errors.append(FieldError.wrong_type(path, value, "a string"))
            return None
        return value

    def integer(self, value: Any, path: str, *, minimum: int | None = None, maximum: int | None = None,
            required: bool = False) -> int | None:
        if value is None:
            if required:
                self.errors.append(FieldError.required(path))
            return None
        if not isinstance(value, int) or isinstance(value, bool):
            self.errors.append(FieldError.wrong_type(path, value, "an integer"))
            return None
        if minimum is not None and value < minimum:
            self.errors.append(FieldError.invalid(path, value, f"must be greater than or equal to {minimum}"))
        if maximum is not None and value > maximum:
            self.errors.append(FieldError.invalid(path, value, f"must be less than or equal to {maximum}"))
        return value

    def boolean(self, value: Any, path: str) -> None:
        if value is not None and not isinstance(value, bool):
            self.errors.append(FieldError.wrong_type(path, value, "a boolean"))

    def one_of(self, value: Any, path: str, allowed: Iterable[str], *, required: bool = False) -> None:
        s = self.string(value, path, required=required)
        allowed = tuple(allowed)
        if s is not None and s not in allowed:
            self.errors.append(FieldError.not_supported(path, s, allowed))

    def string_map(self, value: Any, path: str) -> dict[str, Any] | None:
        m = self.object_at(value, path)
        if m is None:
            return None
        for k, v in m.items():
            if not isinstance(v, str):
                self.errors.append(FieldError.wrong_type(f"{path}.{k}", v, "a string"))
        return m

    def quantities(self, value: Any, path: str) -> None:
        m = self.object_at(value, path)
        if m is None:
            return
        for name, qty in m.items():
            if isinstance(qty, bool) or not isinstance(qty, (str, int, float)):
                self.errors.append(FieldError.wrong_type(f"{path}.{name}", qty, "a quantity string"))
                continue
            try:
                number = parse_quantity(qty)
            except QuantityError as e:
                self.errors.append(FieldError.invalid(f"{path}.{name}", qty, str(e)))
                continue
            if number < 0:
                self.errors.append(FieldError.invalid(f"{path}.{name}", qty, "must be greater than or equal to 0"))

    def dns_label(self, value: Any, path: str, *, required: bool = False) -> None:
        s = self.string(value, path, required=required)
        if s is not None:
            self.errors += [FieldError.invalid(path, s, why) for why in dns1123_label_errors(s)]

    def conditions(self, value: Any, path: str) -> None:
        items = self.list_at(value, path)
        if items is None:
            return
        for i, c in enumerate(items):
            p = f"{path}[{i}]"
            c = self.object_at(c, p)
            if c is None:
                continue
            self.string(c.get("type"), f"{p}.type", required=True)
            self.one_of(c.get("status"), f"{p}.status", _CONDITION_STATUSES, required=True)
            for f in ("reason", "message"):
                self.string(c.get(f), f"{p}.{f}")


# ---------------------------------------------------------------- Namespace: federator.apiserver.namespaces


# ---------------------------------------------------------------- Node


def _condition(obj: JSONObject, type_: str) -> dict[str, Any] | None:
    for c in (obj.get("status") or {}).get("conditions") or []:
        if isinstance(c, dict) and c.get("type") == type_:
            return c
    return None


def _node_status_cell(node: JSONObject) -> str:
    ready = _condition(node, "Ready")
    text = "Ready" if ready is not None and ready.get("status") == "True" else (
        "Unknown" if ready is None else "NotReady")
    if (node.get("spec") or {}).get("unschedulable"):
        text += ",SchedulingDisabled"
    return text


def _node_roles_cell(node: JSONObject) -> str:
    labels = Body(node).labels
    roles = sorted(k.split("/", 1)[1] for k in labels if k.startswith("node-role.kubernetes.io/") and "/" in k)
    if labels.get("kubernetes.io/role"):
        roles.append(labels["kubernetes.io/role"])
    return ",".join(r for r in roles if r) or "<none>"


def _node_address(kind: str) -> Callable[[JSONObject], str]:
    def cell(node: JSONObject) -> str:
        for a in (node.get("status") or {}).get("addresses") or []:
            if isinstance(a, dict) and a.get("type") == kind:
                return str(a.get("address", ""))
        return "<none>"

    return cell


def _node_defaults(node: JSONObject) -> None:
    if not isinstance(node.get("spec"), dict):
        node["spec"] = {}
    status = node.get("status")
    if not isinstance(status, dict):
        node["status"] = {}
    else:
        _quantity_strings(status.get("capacity"))
        _quantity_strings(status.get("allocatable"))


def _validate_node(node: JSONObject) -> list[FieldError]:
    c = _Checker()
    spec = c.object_at(node.get("spec"), "spec")
    if spec is not None:
        c.boolean(spec.get("unschedulable"), "spec.unschedulable")
        taints = c.list_at(spec.get("taints"), "spec.taints")
        for i, t in enumerate(taints or []):
            p = f"spec.taints[{i}]"
            t = c.object_at(t, p)
            if t is None:
                continue
            key = c.string(t.get("key"), f"{p}.key", required=True)
            if key is not None:
                c.errors += [FieldError.invalid(f"{p}.key", key, why) for why in label_key_errors(key)]
            c.string(t.get("value"), f"{p}.value")
            c.one_of(t.get("effect"), f"{p}.effect", _TAINT_EFFECTS, required=True)
        c.string(spec.get("podCIDR"), "spec.podCIDR")
        c.string(spec.get("providerID"), "spec.providerID")
    status = c.object_at(node.get("status"), "status")
    if status is not None:
        c.quantities(status.get("capacity"), "status.capacity")
        c.quantities(status.get("allocatable"), "status.allocatable")
        c.conditions(status.get("conditions"), "status.conditions")
        addresses = c.list_at(status.get("addresses"), "status.addresses")
        for i, a in enumerate(addresses or []):
            a = c.object_at(a, f"status.addresses[{i}]")
            if a is not None:
                c.string(a.get("type"), f"status.addresses[{i}].type", required=True)
                c.string(a.get("address"), f"status.addresses[{i}].address", required=True)
        c.object_at(status.get("nodeInfo"), "status.nodeInfo")
    return c.errors


_OBJECT_META_SMP = {
    "metadata.finalizers": SMPListStrategy(None),
    "metadata.ownerReferences": SMPListStrategy("uid"),
}

_node_unschedulable = path_getter("spec.unschedulable")

NODES = ResourceType(
    group="", version="v1", kind="Node", plural="nodes", singular="node", namespaced=False,
    short_names=("no",), reset_status_on_create=False,
    # kube's NodeToSelectableFields: strconv.FormatBool(node.Spec.Unschedulable), so an absent field is "false"
    field_selectors={"spec.unschedulable": lambda obj: _node_unschedulable(obj) or "false"},
    defaults=_node_defaults, validate=with_client_schema("V1Node", _validate_node),
    unknown_fields=client_unknown_fields("V1Node"),
    columns=(
        TableColumn("Status", _node_status_cell, description="The status of the node"),
        TableColumn("Roles", _node_roles_cell, description="The roles of the node"),
        TableColumn("Age", jsonpath_cell("metadata", "creationTimestamp", default=None), type="date"),
        TableColumn("Version", jsonpath_cell("status", "nodeInfo", "kubeletVersion"),
                    description="Kubelet Version reported by the node."),
        TableColumn("Internal-IP", _node_address("InternalIP"), priority=1,
                    description="List of addresses reachable to the node. Queried from cloud provider, if available."),
        TableColumn("External-IP", _node_address("ExternalIP"), priority=1,
                    description="List of addresses reachable to the node. Queried from cloud provider, if available."),
        TableColumn("OS-Image", jsonpath_cell("status", "nodeInfo", "osImage"), priority=1,
                    description="OS Image reported by the node from /etc/os-release (e.g. Debian GNU/Linux 7 (wheezy))."),
        TableColumn("Kernel-Version", jsonpath_cell("status", "nodeInfo", "kernelVersion"), priority=1,
                    description="Kernel Version reported by the node from 'uname -r' (e.g. 3.16.0-0.bpo.4-amd64)."),
        TableColumn("Container-Runtime", jsonpath_cell("status", "nodeInfo", "containerRuntimeVersion"), priority=1,
                    description="ContainerRuntime Version reported by the node through runtime remote API (e.g. containerd://1.4.2)."),
    ),
    strategic_merge={
        **_OBJECT_META_SMP,
        "spec.podCIDRs": SMPListStrategy(None),
        "status.conditions": SMPListStrategy("type"),
        "status.addresses": SMPListStrategy("type"),
    },
    openapi_schema={"properties": {
        "spec": {"type": "object", "description": "Spec defines the behavior of a node.", "properties": {
            "unschedulable": {"type": "boolean", "description": "Unschedulable controls node schedulability of new pods."},
            "taints": {"type": "array", "description": "If specified, the node's taints.",
                       "items": {"type": "object", "required": ["key", "effect"], "properties": {
                           "key": {"type": "string"}, "value": {"type": "string"},
                           "effect": {"type": "string", "enum": list(_TAINT_EFFECTS)}}}},
            "podCIDR": {"type": "string", "description": "PodCIDR represents the pod IP range assigned to the node."},
        }},
        "status": {"type": "object", "description": "Most recently observed status of the node.", "properties": {
            "capacity": {"type": "object", "additionalProperties": {"type": "string"},
                         "description": "Capacity represents the total resources of a node."},
            "allocatable": {"type": "object", "additionalProperties": {"type": "string"},
                            "description": "Allocatable represents the resources of a node that are available for scheduling."},
            "conditions": {"type": "array", "items": {"type": "object"},
                           "description": "Conditions is an array of current observed node conditions."},
            "nodeInfo": {"type": "object", "description": "Set of ids/uuids to uniquely identify the node."},
        }},
    }},
    description="Node is a worker node in Kubernetes. Each node will have a unique identifier in the cache (i.e. in etcd).",
)


# ---------------------------------------------------------------- PriorityClass and Priority admission
#
# The rules are federator.apis.priorityclass's, which the hub serves too: validation, defaults, the one
# globalDefault class, and Priority admission's resolution of a pod's spec.


def _validate_priority_class(pc: JSONObject) -> list[FieldError]:
    """The client model's type checks first (as for every built-in kind the simulator serves), then
    kube's ValidatePriorityClass rules on the fields those did not report."""
    typed = client_schema_errors(pc, "V1PriorityClass")
    seen = {e.field for e in typed}
    rules = priorityclass.validate_priorityclass(pc, include_generic_metadata=False)
    return typed + [as_field_error(e) for e in rules if e[0] not in seen]


async def _admit_priority_class(storage: Any, pc: JSONObject, old: JSONObject | None = None) -> None:
    """Priority admission on a PriorityClass create or update: only one class may be the global default."""
    if pc.get("globalDefault") is not True:
        return
    why = priorityclass.default_conflict(pc, (await storage.list(PRIORITY_CLASSES)).items)
    if why is not None:
        raise errors.forbidden(PRIORITY_CLASSES, Body(pc).name, why)


async def admit_pod_priority(storage: Any, pod: JSONObject) -> None:
    """kube's Priority admission plugin on a pod create (plugin/pkg/admission/priority): resolve
    spec.priorityClassName (none: the globalDefault class, else priority 0) into spec.priority and
    spec.preemptionPolicy. An unknown class, or a priority or preemptionPolicy the pod sets that differs
    from its class's, is refused with 403 Forbidden in kube's words."""
    spec = pod.get("spec")
    class_name = spec.get("priorityClassName") if isinstance(spec, dict) else None
    if not isinstance(spec, dict) or (class_name is not None and not isinstance(class_name, str)):
        return  # validation reports it
    resolved = priorityclass.resolve_priority(spec, (await storage.list(PRIORITY_CLASSES)).items, subject="pod")
    if resolved.error:
        raise errors.forbidden(PODS, Body(pod).name, resolved.error)
    if resolved.class_name:
        spec["priorityClassName"] = resolved.class_name
    if spec.get("priority") is None:
        spec["priority"] = resolved.priority
    if spec.get("preemptionPolicy") is None:
        spec["preemptionPolicy"] = resolved.preemption_policy


def _keep_pod_priority(proposed: JSONObject, stored: JSONObject) -> JSONObject:
    """Priority admission on a pod update: a body without spec.priority or spec.preemptionPolicy keeps the
    stored ones (admission set them at create; validation refuses any other change)."""
    new_spec, old_spec = proposed.get("spec"), stored.get("spec")
    if isinstance(new_spec, dict) and isinstance(old_spec, dict):
        for f in ("priority", "preemptionPolicy"):
            if new_spec.get(f) is None and old_spec.get(f) is not None:
                new_spec[f] = old_spec[f]
    return proposed


PRIORITY_CLASSES = ResourceType(
    group=priorityclass.GROUP, version=priorityclass.VERSION, kind=priorityclass.KIND, plural=priorityclass.PLURAL,
    singular=priorityclass.SINGULAR, namespaced=False, short_names=priorityclass.SHORT_NAMES,
    status_subresource=False, defaults=priorityclass.priorityclass_defaults, validate=_validate_priority_class,
    validate_update=priorityclass.priorityclass_update_validator(),
    admit_create=_admit_priority_class, admit_update=_admit_priority_class,
    unknown_fields=client_unknown_fields("V1PriorityClass"),
    # kube's printer: NAME, VALUE, GLOBAL-DEFAULT, AGE, PREEMPTIONPOLICY
    columns=(
        TableColumn("Value", jsonpath_cell("value", default=0), type="integer",
                    description="value represents the integer value of this priority class."),
        TableColumn("Global-Default", lambda pc: bool(pc.get("globalDefault")), type="boolean",
                    description="globalDefault specifies whether this PriorityClass should be considered as the "
                                "default priority for pods that do not have any priority class."),
        TableColumn("Age", jsonpath_cell("metadata", "creationTimestamp", default=None), type="date"),
        TableColumn("PreemptionPolicy",
                    jsonpath_cell("preemptionPolicy", default=priorityclass.DEFAULT_PREEMPTION_POLICY),
                    description="preemptionPolicy is the Policy for preempting pods with lower priority."),
    ),
    strategic_merge=dict(_OBJECT_META_SMP),
    openapi_schema={"required": ["value"], "properties": {
        "value": {"type": "integer", "format": "int32",
                  "description": "value represents the integer value of this priority class. This is the actual "
                                 "priority that pods receive when they have the name of this class in their pod spec."},
        "globalDefault": {"type": "boolean",
                          "description": "globalDefault specifies whether this PriorityClass should be considered as "
                                         "the default priority for pods that do not have any priority class."},
        "description": {"type": "string", "description": "description is an arbitrary string that usually provides "
                                                         "guidelines on when this priority class should be used."},
        "preemptionPolicy": {"type": "string", "enum": list(priorityclass.PREEMPTION_POLICIES),
                             "description": "preemptionPolicy is the Policy for preempting pods with lower priority."},
    }},
    openapi_name="io.k8s.api.scheduling.v1.PriorityClass",
    description="PriorityClass defines mapping from a priority class name to the priority integer value.",
)


# ---------------------------------------------------------------- Pod


def pod_grace_period(pod: JSONObject, requested: int | None) -> int:
    """K/pkg/registry/core/pod/strategy.go CheckGracefulDelete: unscheduled
    or finished pods go at once; otherwise the requested grace, else the
    pod's terminationGracePeriodSeconds (default 30)."""
    spec = pod.get("spec") or {}
    phase = (pod.get("status") or {}).get("phase")
    if not spec.get("nodeName") or phase in ("Succeeded", "Failed"):
        return 0
    if requested is not None:
        return requested
    grace = spec.get("terminationGracePeriodSeconds")
    return grace if isinstance(grace, int) and not isinstance(grace, bool) and grace >= 0 else 30


def _qos_class(spec: JSONObject) -> str:
    containers = [c for c in (spec.get("containers") or []) if isinstance(c, dict)]
    requests_any = False
    guaranteed = bool(containers)
    for c in containers:
        res = c.get("resources") or {}
        req = res.get("requests") or {}
        lim = res.get("limits") or {}
        if req or lim:
            requests_any = True
        for r in ("cpu", "memory"):
            if r not in lim or (r in req and req[r] != lim[r]):
                guaranteed = False
    if guaranteed and requests_any:
        return "Guaranteed"
    return "Burstable" if requests_any else "BestEffort"


def _container_defaults(c: JSONObject) -> None:
    image = c.get("image")
    if "imagePullPolicy" not in c and isinstance(image, str):
        tagged = ":" in image.rsplit("/", 1)[-1] or "@" in image
        c["imagePullPolicy"] = "IfNotPresent" if tagged and not image.endswith(":latest") else "Always"
    c.setdefault("terminationMessagePath", "/dev/termination-log")
    c.setdefault("terminationMessagePolicy", "File")
    res = c.get("resources")
    if not isinstance(res, dict):
        c["resources"] = {}
    else:
        _quantity_strings(res.get("requests"))
        _quantity_strings(res.get("limits"))
        if isinstance(res.get("limits"), dict) and "requests" not in res:
            # kube defaults requests to limits when only limits are set
            res["requests"] = dict(res["limits"])


#: plugin/pkg/admission/defaulttolerationseconds: every pod tolerates a not-ready or unreachable node for 300 s
_DEFAULT_TOLERATED_TAINTS = ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable")


def _default_toleration_seconds(spec: JSONObject) -> None:
    """kube-apiserver's DefaultTolerationSeconds admission: a NoExecute toleration of 300 s for the not-ready and
    unreachable taints, unless the pod already tolerates them (seen on a real v1.36 member, e2e/kube)."""
    tolerations = spec.get("tolerations")
    if tolerations is not None and not isinstance(tolerations, list):
        return  # validation reports it
    present = list(tolerations or [])
    added = []
    for key in _DEFAULT_TOLERATED_TAINTS:
        if any(isinstance(t, dict) and t.get("effect") in (None, "", "NoExecute")
               and (t.get("key") == key or (not t.get("key") and t.get("operator") == "Exists")) for t in present):
            continue
        added.append({"key": key, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300})
    if added:
        spec["tolerations"] = present + added


def _pod_defaults(pod: JSONObject) -> None:
    spec = pod.get("spec")
    if not isinstance(spec, dict):
        return  # validation reports it
    spec.setdefault("restartPolicy", "Always")
    spec.setdefault("terminationGracePeriodSeconds", 30)
    spec.setdefault("dnsPolicy", "ClusterFirst")
    spec.setdefault("schedulerName", "default-scheduler")
    spec.setdefault("securityContext", {})
    spec.setdefault("enableServiceLinks", True)
    # spec.priority and spec.preemptionPolicy are Priority admission's (admit_pod_priority), as in kube
    spec.setdefault("serviceAccountName", "default")
    _default_toleration_seconds(spec)
    for field in ("containers", "initContainers"):
        for c in spec.get(field) or []:
            if isinstance(c, dict):
                _container_defaults(c)
    status = pod.get("status")
    if not isinstance(status, dict):
        status = pod["status"] = {}
    status.setdefault("phase", "Pending")
    status.setdefault("qosClass", _qos_class(spec))


def _validate_container(c: _Checker, container: Any, *, path: str, names: set[str]) -> None:
    ctr = c.object_at(container, path)
    if ctr is None:
        return
    c.dns_label(ctr.get("name"), f"{path}.name", required=True)
    name = ctr.get("name")
    if isinstance(name, str) and name:
        if name in names:
            c.errors.append(FieldError.duplicate(f"{path}.name", name))
        names.add(name)
    c.string(ctr.get("image"), f"{path}.image", required=True)
    for f in ("command", "args"):
        items = c.list_at(ctr.get(f), f"{path}.{f}")
        for i, v in enumerate(items or []):
            c.string(v, f"{path}.{f}[{i}]")
    res = c.object_at(ctr.get("resources"), f"{path}.resources")
    if res is not None:
        c.quantities(res.get("requests"), f"{path}.resources.requests")
        c.quantities(res.get("limits"), f"{path}.resources.limits")
        req, lim = res.get("requests") or {}, res.get("limits") or {}
        if isinstance(req, dict) and isinstance(lim, dict):
            for r, q in req.items():
                if r in lim:
                    try:
                        if parse_quantity(q) > parse_quantity(lim[r]):
                            c.errors.append(FieldError.invalid(
                                f"{path}.resources.requests", q, f"must be less than or equal to {r} limit of {lim[r]}"))
                    except (QuantityError, TypeError):
                        pass
    ports = c.list_at(ctr.get("ports"), f"{path}.ports")
    for i, port in enumerate(ports or []):
        pp = f"{path}.ports[{i}]"
        port = c.object_at(port, pp)
        if port is not None:
            c.integer(port.get("containerPort"), f"{pp}.containerPort", minimum=1, maximum=65535, required=True)
            c.one_of(port.get("protocol"), f"{pp}.protocol", ("TCP", "UDP", "SCTP"))
    env = c.list_at(ctr.get("env"), f"{path}.env")
    for i, e in enumerate(env or []):
        e = c.object_at(e, f"{path}.env[{i}]")
        if e is not None:
            c.string(e.get("name"), f"{path}.env[{i}].name", required=True)
            c.string(e.get("value"), f"{path}.env[{i}].value")
    c.one_of(ctr.get("imagePullPolicy"), f"{path}.imagePullPolicy", ("Always", "IfNotPresent", "Never"))


def _validate_pod(pod: JSONObject) -> list[FieldError]:
    c = _Checker()
    spec = c.object_at(pod.get("spec"), "spec", required=True)
    if spec is not None:
        containers = c.list_at(spec.get("containers"), "spec.containers", required=True)
        if containers is not None and not containers:
            c.errors.append(FieldError.required("spec.containers"))
        names: set[str] = set()
        for i, ctr in enumerate(containers or []):
            _validate_container(c, ctr, path=f"spec.containers[{i}]", names=names)
        for i, ctr in enumerate(c.list_at(spec.get("initContainers"), "spec.initContainers") or []):
            _validate_container(c, ctr, path=f"spec.initContainers[{i}]", names=names)
        c.one_of(spec.get("restartPolicy"), "spec.restartPolicy", ("Always", "OnFailure", "Never"))
        c.integer(spec.get("terminationGracePeriodSeconds"), "spec.terminationGracePeriodSeconds", minimum=0)
        c.integer(spec.get("activeDeadlineSeconds"), "spec.activeDeadlineSeconds", minimum=1)
        c.integer(spec.get("priority"), "spec.priority")
        for f in ("nodeName", "schedulerName", "serviceAccountName", "priorityClassName"):
            c.string(spec.get(f), f"spec.{f}")
        for f in ("hostname", "subdomain"):  # ValidatePodSpec: each a DNS-1123 label when set
            if spec.get(f) not in (None, ""):
                c.dns_label(spec.get(f), f"spec.{f}")
        c.string_map(spec.get("nodeSelector"), "spec.nodeSelector")
        c.object_at(spec.get("affinity"), "spec.affinity")
        c.boolean(spec.get("hostNetwork"), "spec.hostNetwork")
        tolerations = c.list_at(spec.get("tolerations"), "spec.tolerations")
        for i, t in enumerate(tolerations or []):
            p = f"spec.tolerations[{i}]"
            t = c.object_at(t, p)
            if t is None:
                continue
            c.string(t.get("key"), f"{p}.key")
            c.one_of(t.get("operator"), f"{p}.operator", ("Exists", "Equal"))
            c.string(t.get("value"), f"{p}.value")
            effect = t.get("effect")
            if effect not in (None, ""):
                c.one_of(effect, f"{p}.effect", _TAINT_EFFECTS)
            c.integer(t.get("tolerationSeconds"), f"{p}.tolerationSeconds")
            if t.get("operator") == "Exists" and t.get("value") not in (None, ""):
                c.errors.append(FieldError.invalid(f"{p}.operator", "Exists",
                                                   "value must be empty when `operator` is 'Exists'"))
            if not t.get("key") and t.get("operator") not in ("Exists",):
                c.errors.append(FieldError.invalid(f"{p}.operator", t.get("operator") or "",
                                                   "operator must be Exists when `key` is empty, which means "
                                                   "\"match all values and all keys\""))
        for i, v in enumerate(c.list_at(spec.get("volumes"), "spec.volumes") or []):
            v = c.object_at(v, f"spec.volumes[{i}]")
            if v is not None:
                c.dns_label(v.get("name"), f"spec.volumes[{i}].name", required=True)
    status = c.object_at(pod.get("status"), "status")
    if status is not None:
        c.one_of(status.get("phase"), "status.phase", _POD_PHASES)
        c.conditions(status.get("conditions"), "status.conditions")
        statuses = c.list_at(status.get("containerStatuses"), "status.containerStatuses")
        for i, cs in enumerate(statuses or []):
            p = f"status.containerStatuses[{i}]"
            cs = c.object_at(cs, p)
            if cs is None:
                continue
            # V1ContainerStatus requires these four
            c.string(cs.get("name"), f"{p}.name", required=True)
            c.string(cs.get("image"), f"{p}.image", required=True)
            c.string(cs.get("imageID"), f"{p}.imageID", required=True)
            if not isinstance(cs.get("ready"), bool):
                c.errors.append(FieldError.required(f"{p}.ready") if cs.get("ready") is None
                                else FieldError.wrong_type(f"{p}.ready", cs.get("ready"), "a boolean"))
            c.integer(cs.get("restartCount"), f"{p}.restartCount", minimum=0, required=True)
    return c.errors


_MUTABLE_POD_SPEC = ("activeDeadlineSeconds", "tolerations", "terminationGracePeriodSeconds", "schedulingGates")


def _validate_pod_update(new: JSONObject, old: JSONObject) -> list[FieldError]:
    """Pod specs are immutable except images, tolerations, deadlines and
    scheduling gates; spec.nodeName may only go from unset to set (a bind)."""
    new_spec, old_spec = new.get("spec"), old.get("spec")
    if not isinstance(new_spec, dict) or not isinstance(old_spec, dict):
        return []
    a, b = _copy(new_spec), _copy(old_spec)
    for s in (a, b):
        for f in _MUTABLE_POD_SPEC:
            s.pop(f, None)
        for field in ("containers", "initContainers"):
            for ctr in s.get(field) or []:
                if isinstance(ctr, dict):
                    ctr.pop("image", None)
    if not b.get("nodeName"):
        a.pop("nodeName", None)
        b.pop("nodeName", None)
    if a != b:
        return [FieldError.forbidden(
            "spec", "pod updates may not change fields other than `spec.containers[*].image`, "
                    "`spec.initContainers[*].image`, `spec.activeDeadlineSeconds`, `spec.tolerations` "
                    "(only additions to existing tolerations), `spec.terminationGracePeriodSeconds` "
                    "(allow it to be set to 1 if it was previously negative)")]
    return []


def _copy(value: Any) -> Any:
    return orjson.loads(orjson.dumps(value))


def _pod_ready_cell(pod: JSONObject) -> str:
    total = len((pod.get("spec") or {}).get("containers") or [])
    ready = sum(1 for cs in (pod.get("status") or {}).get("containerStatuses") or []
                if isinstance(cs, dict) and cs.get("ready"))
    return f"{ready}/{total}"


def _pod_status_cell(pod: JSONObject) -> str:
    status = pod.get("status") or {}
    if Body(pod).deleting:
        # kubectl's printPod: a deleted pod of an unreachable node shows Unknown
        return "Unknown" if status.get("reason") == "NodeLost" else "Terminating"
    reason = status.get("reason")
    if reason:
        return str(reason)
    for cs in status.get("containerStatuses") or []:
        waiting = ((cs or {}).get("state") or {}).get("waiting") or {}
        if waiting.get("reason"):
            return str(waiting["reason"])
        terminated = ((cs or {}).get("state") or {}).get("terminated") or {}
        if terminated.get("reason") and status.get("phase") not in ("Succeeded", "Failed"):
            return str(terminated["reason"])
    if status.get("phase") == "Succeeded":
        return "Completed"
    if status.get("phase") == "Failed":
        return "Error"
    return str(status.get("phase") or "Pending")


def _pod_restarts_cell(pod: JSONObject) -> int:
    return sum(int((cs or {}).get("restartCount") or 0)
               for cs in (pod.get("status") or {}).get("containerStatuses") or [] if isinstance(cs, dict))


def _pod_bind_strategy(proposed: JSONObject, stored: JSONObject) -> JSONObject:
    """pods/binding: the stored pod with spec.nodeName, the binding's
    annotations and the PodScheduled condition taken from `proposed`, in one
    write (what POST pods/binding does)."""
    result = stored
    node = (proposed.get("spec") or {}).get("nodeName")
    result.setdefault("spec", {})["nodeName"] = node
    annotations = Body(proposed).metadata.get("annotations")  # None: the binding leaves them as they are
    if annotations is not None:
        result["metadata"]["annotations"] = annotations
    status = proposed.get("status")
    if isinstance(status, dict):
        result["status"] = status
    return result


_POD_SMP: dict[str, SMPListStrategy] = {
    **_OBJECT_META_SMP,
    "spec.containers": SMPListStrategy("name"),
    "spec.initContainers": SMPListStrategy("name"),
    "spec.ephemeralContainers": SMPListStrategy("name"),
    "spec.volumes": SMPListStrategy("name", retain_keys=True),
    "spec.imagePullSecrets": SMPListStrategy("name"),
    "spec.hostAliases": SMPListStrategy("ip"),
    "spec.topologySpreadConstraints": SMPListStrategy("topologyKey"),
    "spec.resourceClaims": SMPListStrategy("name", retain_keys=True),
    "spec.schedulingGates": SMPListStrategy("name"),
    "status.conditions": SMPListStrategy("type"),
    "status.podIPs": SMPListStrategy("ip"),
    "status.hostIPs": SMPListStrategy("ip"),
}
for _ctr in ("spec.containers[]", "spec.initContainers[]", "spec.ephemeralContainers[]"):
    _POD_SMP[f"{_ctr}.ports"] = SMPListStrategy("containerPort")
    _POD_SMP[f"{_ctr}.env"] = SMPListStrategy("name")
    _POD_SMP[f"{_ctr}.volumeMounts"] = SMPListStrategy("mountPath")
    _POD_SMP[f"{_ctr}.volumeDevices"] = SMPListStrategy("devicePath")

_CONTAINER_SCHEMA = {
    "type": "object", "required": ["name"],
    "description": "A single application container that you want to run within a pod.",
    "properties": {
        "name": {"type": "string", "description": "Name of the container specified as a DNS_LABEL."},
        "image": {"type": "string", "description": "Container image name."},
        "command": {"type": "array", "items": {"type": "string"}, "description": "Entrypoint array."},
        "args": {"type": "array", "items": {"type": "string"}, "description": "Arguments to the entrypoint."},
        "resources": {"type": "object", "description": "Compute Resources required by this container.",
                      "properties": {"requests": {"type": "object", "additionalProperties": {"type": "string"}},
                                     "limits": {"type": "object", "additionalProperties": {"type": "string"}}}},
    },
}

PODS = ResourceType(
    group="", version="v1", kind="Pod", plural="pods", singular="pod", namespaced=True,
    short_names=("po",), categories=("all",), allow_unconditional_update=True,
    graceful_delete=pod_grace_period, return_deleted_object=True,
    field_selectors={
        "spec.nodeName": path_getter("spec.nodeName"),
        "spec.restartPolicy": path_getter("spec.restartPolicy"),
        "spec.schedulerName": path_getter("spec.schedulerName"),
        "spec.serviceAccountName": path_getter("spec.serviceAccountName"),
        "spec.hostNetwork": lambda p: "true" if (p.get("spec") or {}).get("hostNetwork") else "false",
        "status.phase": path_getter("status.phase"),
        "status.podIP": path_getter("status.podIP"),
        "status.nominatedNodeName": path_getter("status.nominatedNodeName"),
    },
    subresource_strategies={"binding": _pod_bind_strategy},
    defaults=_pod_defaults, validate=with_client_schema("V1Pod", _validate_pod),
    admit_create=admit_pod_priority, prepare_update=_keep_pod_priority,
    validate_update=_validate_pod_update, unknown_fields=client_unknown_fields("V1Pod"),
    columns=(
        TableColumn("Ready", _pod_ready_cell, description="The aggregate readiness state of this pod for accepting traffic."),
        TableColumn("Status", _pod_status_cell, description="The aggregate status of the containers in this pod."),
        TableColumn("Restarts", _pod_restarts_cell, type="string",
                    description="The number of times the containers in this pod have been restarted."),
        TableColumn("Age", jsonpath_cell("metadata", "creationTimestamp", default=None), type="date"),
        TableColumn("IP", jsonpath_cell("status", "podIP", default="<none>"), priority=1,
                    description="IP address allocated to the pod. Routable at least within the cluster."),
        TableColumn("Node", jsonpath_cell("spec", "nodeName", default="<none>"), priority=1,
                    description="Name of the Node this pod runs on"),
        TableColumn("Nominated Node", jsonpath_cell("status", "nominatedNodeName", default="<none>"), priority=1,
                    description="Name of the node on which this pod is nominated to run"),
        TableColumn("Readiness Gates", lambda p: "<none>", priority=1,
                    description="The readiness gates of this pod"),
    ),
    strategic_merge=_POD_SMP,
    openapi_schema={"properties": {
        "spec": {"type": "object", "required": ["containers"],
                 "description": "Specification of the desired behavior of the pod.", "properties": {
                     "containers": {"type": "array", "items": _CONTAINER_SCHEMA,
                                    "description": "List of containers belonging to the pod."},
                     "initContainers": {"type": "array", "items": _CONTAINER_SCHEMA},
                     "nodeName": {"type": "string", "description": "NodeName indicates in which node this pod is scheduled."},
                     "nodeSelector": {"type": "object", "additionalProperties": {"type": "string"},
                                      "description": "NodeSelector is a selector which must be true for the pod to fit on a node."},
                     "schedulerName": {"type": "string", "description": "If specified, the pod will be dispatched by specified scheduler."},
                     "tolerations": {"type": "array", "items": {"type": "object"}, "description": "If specified, the pod's tolerations."},
                     "restartPolicy": {"type": "string", "description": "Restart policy for all containers within the pod."},
                     "terminationGracePeriodSeconds": {"type": "integer", "format": "int64",
                                                       "description": "Optional duration in seconds the pod needs to terminate gracefully."},
                 }},
        "status": {"type": "object", "description": "Most recently observed status of the pod.", "properties": {
            "phase": {"type": "string", "description": "The phase of a Pod is a simple, high-level summary of where the Pod is in its lifecycle."},
            "conditions": {"type": "array", "items": {"type": "object"}},
            "podIP": {"type": "string"},
        }},
    }},
    description="Pod is a collection of containers that can run on a host.",
)


# ---------------------------------------------------------------- Service (core/v1)
#
# kube-apiserver's shapes (pkg/apis/core/v1/defaults.go SetDefaults_Service, pkg/apis/core/validation
# ValidateService, pkg/registry/core/service/storage): type ClusterIP, sessionAffinity None, ports with protocol
# TCP and targetPort = port, internalTrafficPolicy Cluster, a single-stack IPv4 family; clusterIP "None" (a
# headless Service) is kept, anything else left empty gets an address of the service CIDR 10.96.0.0/12 (here
# derived from the namespace and name: the simulator keeps no allocator, so two Services may share one, which
# nothing in the simulator routes by). An update that leaves out clusterIP keeps the allocated one (kube's
# patchAllocatedValues); changing it is refused (immutable). Names are DNS-1035 labels.

_SERVICE_TYPES = ("ClusterIP", "NodePort", "LoadBalancer", "ExternalName")
_SERVICE_PROTOCOLS = ("TCP", "UDP", "SCTP")
_SERVICE_CIDR_BASE = (10 << 24) | (96 << 16)   # 10.96.0.0/12
_SERVICE_CIDR_SIZE = 1 << 20
_IANA_SVC_NAME = re.compile(r"[a-z0-9]([a-z0-9-]*[a-z0-9])?")


def _service_ip(namespace: str, name: str) -> str:
    digest = hashlib.sha256(f"{namespace}/{name}".encode()).digest()
    # skip the network address and the first host (kube's apiserver Service takes 10.96.0.1)
    offset = 2 + int.from_bytes(digest[:4], "big") % (_SERVICE_CIDR_SIZE - 3)
    return str(ipaddress.IPv4Address(_SERVICE_CIDR_BASE + offset))


def _service_defaults(svc: JSONObject) -> None:
    spec = svc.get("spec")
    if spec is None:
        spec = svc["spec"] = {}
    if not isinstance(spec, dict):
        return  # validation reports it
    spec.setdefault("type", "ClusterIP")
    spec.setdefault("sessionAffinity", "None")
    for port in spec.get("ports") or []:
        if isinstance(port, dict):
            port.setdefault("protocol", "TCP")
            if port.get("targetPort") in (None, 0, "") and isinstance(port.get("port"), int):
                port["targetPort"] = port["port"]
    if spec["type"] == "ExternalName":
        return
    spec.setdefault("internalTrafficPolicy", "Cluster")
    if spec.get("clusterIP") in (None, ""):
        ips = spec.get("clusterIPs")
        if isinstance(ips, list) and ips and isinstance(ips[0], str) and ips[0]:
            spec["clusterIP"] = ips[0]
        else:
            meta = svc.get("metadata") if isinstance(svc.get("metadata"), dict) else {}
            assert isinstance(meta, dict)
            spec["clusterIP"] = _service_ip(str(meta.get("namespace") or ""), str(meta.get("name") or ""))
    if isinstance(spec.get("clusterIP"), str):
        spec.setdefault("clusterIPs", [spec["clusterIP"]])
    spec.setdefault("ipFamilies", ["IPv4"])
    spec.setdefault("ipFamilyPolicy", "SingleStack")
    status = svc.get("status")
    if not isinstance(status, dict):
        svc["status"] = {"loadBalancer": {}}


def _validate_service(svc: JSONObject) -> list[FieldError]:
    c = _Checker()
    name = Body(svc).name
    if name:
        c.errors += [FieldError.invalid("metadata.name", name, why) for why in dns1035_label_errors(name)
                     if "DNS-1035" in why]
    spec = c.object_at(svc.get("spec"), "spec", required=True)
    if spec is None:
        return c.errors
    c.one_of(spec.get("type"), "spec.type", _SERVICE_TYPES)
    c.one_of(spec.get("sessionAffinity"), "spec.sessionAffinity", ("None", "ClientIP"))
    c.one_of(spec.get("internalTrafficPolicy"), "spec.internalTrafficPolicy", ("Cluster", "Local"))
    c.boolean(spec.get("publishNotReadyAddresses"), "spec.publishNotReadyAddresses")
    kind = spec.get("type") or "ClusterIP"
    cluster_ip = c.string(spec.get("clusterIP"), "spec.clusterIP")
    if cluster_ip not in (None, "", "None"):
        try:
            ipaddress.ip_address(cluster_ip)
        except ValueError:
            c.errors.append(FieldError.invalid("spec.clusterIP", cluster_ip,
                                               "must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)"))
    if cluster_ip == "None" and kind != "ClusterIP":
        c.errors.append(FieldError.invalid("spec.clusterIP", cluster_ip,
                                           "may not be set to 'None' for NodePort services"
                                           if kind == "NodePort" else f"may not be set to 'None' for {kind} services"))
    selector = c.string_map(spec.get("selector"), "spec.selector")
    for key, value in (selector or {}).items():
        c.errors += [FieldError.invalid(f"spec.selector", key, why) for why in label_key_errors(key)]
        if isinstance(value, str):
            c.errors += [FieldError.invalid(f"spec.selector", value, why) for why in label_value_errors(value)]
    ports = c.list_at(spec.get("ports"), "spec.ports")
    if not ports and kind != "ExternalName" and cluster_ip != "None":
        c.errors.append(FieldError.required("spec.ports"))
    names: set[str] = set()
    seen: set[tuple[Any, Any]] = set()
    for i, port in enumerate(ports or []):
        p = f"spec.ports[{i}]"
        port = c.object_at(port, p)
        if port is None:
            continue
        pname = c.string(port.get("name"), f"{p}.name", required=len(ports or []) > 1)
        if pname:
            c.errors += [FieldError.invalid(f"{p}.name", pname, why) for why in dns1123_label_errors(pname)]
            if pname in names:
                c.errors.append(FieldError.duplicate(f"{p}.name", pname))
            names.add(pname)
        number = c.integer(port.get("port"), f"{p}.port", minimum=1, maximum=65535, required=True)
        c.one_of(port.get("protocol"), f"{p}.protocol", _SERVICE_PROTOCOLS)
        if (number, port.get("protocol")) in seen:
            c.errors.append(FieldError.duplicate(f"{p}", f"{number}/{port.get('protocol')}"))
        seen.add((number, port.get("protocol")))
        target = port.get("targetPort")
        if isinstance(target, bool) or not isinstance(target, (int, str, type(None))):
            c.errors.append(FieldError.wrong_type(f"{p}.targetPort", target, "an integer or a string"))
        elif isinstance(target, int) and not 1 <= target <= 65535:
            c.errors.append(FieldError.invalid(f"{p}.targetPort", target, "must be between 1 and 65535, inclusive"))
        elif isinstance(target, str) and target and (len(target) > 15 or not _IANA_SVC_NAME.fullmatch(target)
                                                     or "--" in target or not any(ch.isalpha() for ch in target)):
            c.errors.append(FieldError.invalid(f"{p}.targetPort", target, "must be a valid port name (IANA_SVC_NAME)"))
        node_port = c.integer(port.get("nodePort"), f"{p}.nodePort", minimum=0, maximum=65535)
        if node_port and kind not in ("NodePort", "LoadBalancer"):
            c.errors.append(FieldError.forbidden(f"{p}.nodePort", "may not be used when `type` is 'ClusterIP'"))
        c.string(port.get("appProtocol"), f"{p}.appProtocol")
    if kind == "ExternalName":
        c.string(spec.get("externalName"), "spec.externalName", required=True)
    return c.errors


def _validate_service_update(new: JSONObject, old: JSONObject) -> list[FieldError]:
    new_spec, old_spec = new.get("spec"), old.get("spec")
    if not isinstance(new_spec, dict) or not isinstance(old_spec, dict):
        return []
    if (old_spec.get("type") or "ClusterIP") != "ExternalName" and (new_spec.get("type") or "ClusterIP") != \
            "ExternalName" and new_spec.get("clusterIP") != old_spec.get("clusterIP"):
        return [FieldError.invalid("spec.clusterIP", new_spec.get("clusterIP"), "field is immutable")]
    return []


def _keep_service_allocations(proposed: JSONObject, stored: JSONObject) -> JSONObject:
    """kube's patchAllocatedValues: an update that leaves out clusterIP(s) keeps what was allocated."""
    new_spec, old_spec = proposed.get("spec"), stored.get("spec")
    if isinstance(new_spec, dict) and isinstance(old_spec, dict):
        for f in ("clusterIP", "clusterIPs"):
            if new_spec.get(f) in (None, "", []) and old_spec.get(f) is not None:
                new_spec[f] = old_spec[f]
    return proposed


def _service_ports_cell(svc: JSONObject) -> str:
    parts = []
    for port in (svc.get("spec") or {}).get("ports") or []:
        if isinstance(port, dict):
            node = f":{port['nodePort']}" if port.get("nodePort") else ""
            parts.append(f"{port.get('port')}{node}/{port.get('protocol') or 'TCP'}")
    return ",".join(parts) or "<none>"


def _service_selector_cell(svc: JSONObject) -> str:
    selector = (svc.get("spec") or {}).get("selector") or {}
    return ",".join(f"{k}={v}" for k, v in sorted(selector.items())) if isinstance(selector, dict) and selector \
        else "<none>"


def _service_external_ip_cell(svc: JSONObject) -> str:
    spec = svc.get("spec") or {}
    if spec.get("type") == "ExternalName":
        return str(spec.get("externalName") or "<none>")
    ips = spec.get("externalIPs") or []
    return ",".join(str(ip) for ip in ips) if ips else "<none>"


SERVICES = ResourceType(
    group="", version="v1", kind="Service", plural="services", singular="service", namespaced=True,
    short_names=("svc",), categories=("all",), name_format="label", return_deleted_object=True,
    defaults=_service_defaults, validate=with_client_schema("V1Service", _validate_service),
    unknown_fields=client_unknown_fields("V1Service"), validate_update=_validate_service_update,
    prepare_update=_keep_service_allocations,
    field_selectors={"spec.clusterIP": path_getter("spec.clusterIP"), "spec.type": path_getter("spec.type")},
    columns=(
        TableColumn("Type", jsonpath_cell("spec", "type"), description="The type of the service"),
        TableColumn("Cluster-IP", jsonpath_cell("spec", "clusterIP", default="<none>"),
                    description="The cluster IP of the service"),
        TableColumn("External-IP", _service_external_ip_cell, description="The external IP of the service"),
        TableColumn("Port(s)", _service_ports_cell, description="The ports of the service"),
        TableColumn("Age", jsonpath_cell("metadata", "creationTimestamp", default=None), type="date"),
        TableColumn("Selector", _service_selector_cell, priority=1,
                    description="Route service traffic to pods with label keys and values matching this selector."),
    ),
    strategic_merge={**_OBJECT_META_SMP, "spec.ports": SMPListStrategy("port"),
                     "status.loadBalancer.ingress": SMPListStrategy(None)},
    openapi_schema={"properties": {
        "spec": {"type": "object", "description": "Spec defines the behavior of a service.", "properties": {
            "type": {"type": "string", "enum": list(_SERVICE_TYPES),
                     "description": "type determines how the Service is exposed. Defaults to ClusterIP."},
            "clusterIP": {"type": "string", "description": "clusterIP is the IP address of the service; \"None\" "
                                                           "makes a headless service."},
            "selector": {"type": "object", "additionalProperties": {"type": "string"},
                         "description": "Route service traffic to pods with label keys and values matching this "
                                        "selector."},
            "ports": {"type": "array", "description": "The list of ports that are exposed by this service.",
                      "items": {"type": "object", "required": ["port"], "properties": {
                          "name": {"type": "string"}, "port": {"type": "integer", "format": "int32"},
                          "protocol": {"type": "string", "enum": list(_SERVICE_PROTOCOLS)},
                          "targetPort": {"x-kubernetes-int-or-string": True}}}},
            "publishNotReadyAddresses": {"type": "boolean", "description": "publishNotReadyAddresses indicates "
                                         "that any agent which deals with endpoints for this Service should "
                                         "disregard any indications of ready/not-ready."},
            "sessionAffinity": {"type": "string", "enum": ["ClientIP", "None"]},
        }},
        "status": {"type": "object", "description": "Most recently observed status of the service.",
                   "properties": {"loadBalancer": {"type": "object"}}},
    }},
    openapi_name="io.k8s.api.core.v1.Service",
    description="Service is a named abstraction of software service (for example, mysql) consisting of local port "
                "(for example 3306) that the proxy listens on, and the selector that determines which pods will "
                "answer requests sent through the proxy.",
)


# ---------------------------------------------------------------- ConfigMap (core/v1)
#
# pkg/apis/core/validation ValidateConfigMap: keys of data and binaryData are config map keys
# (IsConfigMapKey: [-._a-zA-Z0-9]+, at most 253 characters, not "." or "..", not starting with ".."), no key in
# both, at most 1 MiB in all (MaxSecretSize); binaryData values are base64; an `immutable: true` ConfigMap keeps
# its data, binaryData and immutable flag.

_CONFIG_MAP_KEY = re.compile(r"[-._a-zA-Z0-9]+")
#: corev1.MaxSecretSize, the cap of a ConfigMap's data + binaryData
MAX_CONFIG_MAP_BYTES = 1024 * 1024


def _config_map_key_errors(key: str) -> list[str]:
    out: list[str] = []
    if len(key) > 253:
        out.append("must be no more than 253 characters")
    if not _CONFIG_MAP_KEY.fullmatch(key):
        out.append("a valid config key must consist of alphanumeric characters, '-', '_' or '.' (e.g. 'key.name',  "
                   "or 'KEY_NAME',  or 'key-name', regex used for validation is '[-._a-zA-Z0-9]+')")
    if key in (".", ".."):
        out.append(f"must not be '{key}'")
    elif key.startswith(".."):
        out.append("must not start with '..'")
    return out


def _validate_config_map(cm: JSONObject) -> list[FieldError]:
    c = _Checker()
    data = c.string_map(cm.get("data"), "data") or {}
    binary = c.object_at(cm.get("binaryData"), "binaryData") or {}
    c.boolean(cm.get("immutable"), "immutable")
    size = 0
    for field, entries in (("data", data), ("binaryData", binary)):
        for key, value in entries.items():
            c.errors += [FieldError.invalid(f"{field}[{key}]", key, why) for why in _config_map_key_errors(key)]
            if field == "binaryData":
                if not isinstance(value, str):
                    c.errors.append(FieldError.wrong_type(f"binaryData[{key}]", value, "a base64 string"))
                    continue
                try:
                    size += len(base64.b64decode(value, validate=True))
                except (ValueError, binascii.Error):
                    c.errors.append(FieldError.invalid(f"binaryData[{key}]", "<binary>", "must be base64-encoded"))
            elif isinstance(value, str):
                size += len(value.encode())
            if field == "binaryData" and key in data:
                c.errors.append(FieldError.invalid("binaryData", key, "duplicate of key present in data"))
    if size > MAX_CONFIG_MAP_BYTES:
        c.errors.append(FieldError("", "FieldValueTooLong", f"must have at most {MAX_CONFIG_MAP_BYTES} bytes", "",
                                   True))
    return c.errors


def _validate_config_map_update(new: JSONObject, old: JSONObject) -> list[FieldError]:
    if old.get("immutable") is not True:
        return []
    errs: list[FieldError] = []
    if new.get("immutable") is not True:
        errs.append(FieldError.forbidden("immutable", "field is immutable when `immutable` is set"))
    if (new.get("data") or {}) != (old.get("data") or {}) or (new.get("binaryData") or {}) != \
            (old.get("binaryData") or {}):
        errs.append(FieldError.forbidden("data", "field is immutable when `immutable` is set"))
    return errs


CONFIG_MAPS = ResourceType(
    group="", version="v1", kind="ConfigMap", plural="configmaps", singular="configmap", namespaced=True,
    short_names=("cm",), status_subresource=False, validate=with_client_schema("V1ConfigMap", _validate_config_map),
    unknown_fields=client_unknown_fields("V1ConfigMap"), validate_update=_validate_config_map_update,
    columns=(
        TableColumn("Data", lambda cm: len(cm.get("data") or {}) + len(cm.get("binaryData") or {}), type="integer",
                    description="Number of data entries"),
        TableColumn("Age", jsonpath_cell("metadata", "creationTimestamp", default=None), type="date"),
    ),
    strategic_merge=dict(_OBJECT_META_SMP),
    openapi_schema={"properties": {
        "data": {"type": "object", "additionalProperties": {"type": "string"},
                 "description": "Data contains the configuration data. Each key must consist of alphanumeric "
                                "characters, '-', '_' or '.'."},
        "binaryData": {"type": "object", "additionalProperties": {"type": "string", "format": "byte"},
                       "description": "BinaryData contains the binary data."},
        "immutable": {"type": "boolean", "description": "Immutable, if set to true, ensures that data stored in the "
                                                        "ConfigMap cannot be updated (only object metadata can be "
                                                        "modified)."},
    }},
    openapi_name="io.k8s.api.core.v1.ConfigMap",
    description="ConfigMap holds configuration data for pods to consume.",
)


# ---------------------------------------------------------------- Event

#: kube's core v1 Event, the same kind the hub serves (federator/apiserver/events.py: validation, field
#: selectors, Table columns, OpenAPI), also checked against the official client's model like every
#: simulated kind.
EVENTS = dataclasses.replace(
    core_event_type(), validate=with_client_schema("CoreV1Event", validate_event),
    unknown_fields=client_unknown_fields("CoreV1Event"), strategic_merge=dict(_OBJECT_META_SMP),
)


# ---------------------------------------------------------------- Lease (coordination.k8s.io/v1)

LEASE_GROUP = "coordination.k8s.io"
#: metav1.RFC3339Micro, the only layout a MicroTime accepts: exactly six fraction digits, then Z or ±hh:mm
MICRO_TIME_LAYOUT = "2006-01-02T15:04:05.000000Z07:00"
#: kube's only Kubernetes-defined coordinated leader election strategy (a domain-prefixed one is free-form)
_LEASE_STRATEGIES = ("OldestEmulationVersion",)
_LEASE_SPEC_FIELDS = ("acquireTime", "holderIdentity", "leaseDurationSeconds", "leaseTransitions",
                      "preferredHolder", "renewTime", "strategy")


def _lease_defaults(lease: JSONObject) -> None:
    """What a decode and re-encode by kube-apiserver does: null fields are unset, and a
    MicroTime given with an offset is served in UTC."""
    spec = lease.get("spec")
    if spec is None:
        lease["spec"] = {}
        return
    if not isinstance(spec, dict):
        return  # validation reports it
    for f in _LEASE_SPEC_FIELDS:
        if f in spec and spec[f] is None:
            del spec[f]
    for f in ("acquireTime", "renewTime"):
        value = spec.get(f)
        if isinstance(value, str) and not value.endswith("Z"):
            parsed = parse_micro_time(value)
            if parsed is not None:
                spec[f] = format_micro_time(parsed)


def _validate_lease(lease: JSONObject) -> list[FieldError]:
    """K/pkg/apis/coordination/validation ValidateLeaseSpec, plus the type checks its decoder makes."""
    c = _Checker()
    spec = c.object_at(lease.get("spec"), "spec")
    if spec is None:
        return c.errors
    c.string(spec.get("holderIdentity"), "spec.holderIdentity")
    duration = c.integer(spec.get("leaseDurationSeconds"), "spec.leaseDurationSeconds", maximum=2**31 - 1)
    if duration is not None and duration <= 0:
        c.errors.append(FieldError.invalid("spec.leaseDurationSeconds", duration, "must be greater than 0"))
    c.integer(spec.get("leaseTransitions"), "spec.leaseTransitions", minimum=0, maximum=2**31 - 1)
    for f in ("acquireTime", "renewTime"):
        value = c.string(spec.get(f), f"spec.{f}")
        if value is not None and parse_micro_time(value) is None:
            c.errors.append(FieldError.invalid(
                f"spec.{f}", value, f'must be a MicroTime in the layout "{MICRO_TIME_LAYOUT}" '
                                    "(RFC 3339 with exactly six fraction digits)"))
    strategy = c.string(spec.get("strategy"), "spec.strategy")
    if strategy is not None:
        if "/" not in strategy:
            if strategy not in _LEASE_STRATEGIES:
                c.errors.append(FieldError.not_supported("spec.strategy", strategy, _LEASE_STRATEGIES))
        else:
            c.errors += [FieldError.invalid("spec.strategy", strategy, why) for why in label_key_errors(strategy)]
    holder = c.string(spec.get("preferredHolder"), "spec.preferredHolder")
    if holder and not strategy:
        c.errors.append(FieldError.forbidden("spec.preferredHolder", "may only be specified if `strategy` is defined"))
    return c.errors


_MICRO_TIME_SCHEMA = {"type": "string", "format": "date-time",
                      "description": "MicroTime: RFC 3339 with microseconds (2006-01-02T15:04:05.000000Z07:00)."}

LEASES = ResourceType(
    group=LEASE_GROUP, version="v1", kind="Lease", plural="leases", singular="lease", namespaced=True,
    status_subresource=False,
    defaults=_lease_defaults, validate=_validate_lease, unknown_fields=client_unknown_fields("V1Lease"),
    # kube's lease printer: NAME, HOLDER, AGE (K/pkg/printers/internalversion/printers.go)
    columns=(TableColumn("Holder", jsonpath_cell("spec", "holderIdentity"),
                         description="holderIdentity contains the identity of the holder of a current lease."),),
    strategic_merge=dict(_OBJECT_META_SMP),
    openapi_schema={"properties": {
        "spec": {"type": "object", "description": "spec contains the specification of the Lease.", "properties": {
            "holderIdentity": {"type": "string",
                               "description": "holderIdentity contains the identity of the holder of a current lease."},
            "leaseDurationSeconds": {"type": "integer", "format": "int32",
                                     "description": "leaseDurationSeconds is a duration that candidates for a lease "
                                                    "need to wait to force acquire it. This is measured against the "
                                                    "time of last observed renewTime."},
            "acquireTime": {**_MICRO_TIME_SCHEMA, "description": "acquireTime is a time when the current lease was acquired."},
            "renewTime": {**_MICRO_TIME_SCHEMA, "description": "renewTime is a time when the current holder of a lease "
                                                               "has last updated the lease."},
            "leaseTransitions": {"type": "integer", "format": "int32",
                                 "description": "leaseTransitions is the number of transitions of a lease between holders."},
            "strategy": {"type": "string", "description": "Strategy indicates the strategy for picking the leader for "
                                                          "coordinated leader election."},
            "preferredHolder": {"type": "string", "description": "PreferredHolder signals to a lease holder that the "
                                                                 "lease has a more optimal holder and should be given up."},
        }},
    }},
    openapi_name="io.k8s.api.coordination.v1.Lease",
    description="Lease defines a lease concept.",
)


# ---------------------------------------------------------------- PodGroups


def _podgroup_validator(*, phases: tuple[str, ...], spec_ints: tuple[str, ...], spec_strs: tuple[str, ...],
                        min_resources: bool, min_task_member: bool) -> Callable[[JSONObject], list[FieldError]]:
    def validate(pg: JSONObject) -> list[FieldError]:
        c = _Checker()
        spec = c.object_at(pg.get("spec"), "spec")
        if spec is not None:
            c.integer(spec.get("minMember"), "spec.minMember", minimum=0, maximum=2**31 - 1)
            for f in spec_ints:
                c.integer(spec.get(f), f"spec.{f}", minimum=0, maximum=2**31 - 1)
            for f in spec_strs:
                c.string(spec.get(f), f"spec.{f}")
            if min_resources:
                c.quantities(spec.get("minResources"), "spec.minResources")
            elif "minResources" in spec:
                c.errors.append(FieldError.forbidden("spec.minResources", "not a field of this PodGroup version"))
            if min_task_member:
                mtm = c.object_at(spec.get("minTaskMember"), "spec.minTaskMember")
                for k, v in (mtm or {}).items():
                    c.integer(v, f"spec.minTaskMember.{k}", minimum=0, maximum=2**31 - 1)
        status = c.object_at(pg.get("status"), "status")
        if status is not None:
            c.one_of(status.get("phase"), "status.phase", phases)
            for f in ("running", "succeeded", "failed"):
                c.integer(status.get(f), f"status.{f}", minimum=0)
            if "conditions" in status:
                c.conditions(status.get("conditions"), "status.conditions")
        return c.errors

    return validate


def _queue_default(pg: JSONObject) -> None:
    spec = pg.get("spec")
    if isinstance(spec, dict):
        if not spec.get("queue"):
            spec["queue"] = "default"
        _quantity_strings(spec.get("minResources"))


def _min_resources_strings(pg: JSONObject) -> None:
    spec = pg.get("spec")
    if isinstance(spec, dict):
        _quantity_strings(spec.get("minResources"))


def _pg_schema(spec_props: dict[str, Any], *, phases: tuple[str, ...], description: str) -> dict[str, Any]:
    return {"properties": {
        "spec": {"type": "object", "description": "Specification of the desired behavior of the pod group.",
                 "properties": spec_props},
        "status": {"type": "object", "description": "Status represents the current information about a pod group.",
                   "properties": {
                       "phase": {"type": "string", "enum": list(phases), "description": "Current phase of PodGroup."},
                       "running": {"type": "integer", "format": "int32", "description": "The number of actively running pods."},
                       "succeeded": {"type": "integer", "format": "int32", "description": "The number of pods which reached phase Succeeded."},
                       "failed": {"type": "integer", "format": "int32", "description": "The number of pods which reached phase Failed."},
                   }},
    }, "description": description}


_MIN_MEMBER = {"type": "integer", "format": "int32", "minimum": 0,
               "description": "MinMember defines the minimal number of members/tasks to run the pod group; "
                              "if there's not enough resources to start all tasks, the scheduler will not start anyone."}
_VOLCANO_PHASES = ("Pending", "Inqueue", "Running", "Unknown", "Completed")
_COSCHED_PHASES = ("Pending", "Running", "Scheduling", "Unknown", "Finished", "Failed")
_KUBE_BATCH_PHASES = ("Pending", "Running", "Unknown")


def _podgroup(group: str, version: str, *, short_names: tuple[str, ...], status_subresource: bool,
              phases: tuple[str, ...], validate: Callable[[JSONObject], list[FieldError]],
              defaults: Callable[[JSONObject], None] | None, columns: tuple[TableColumn, ...],
              schema: dict[str, Any], openapi_name: str) -> ResourceType:
    return ResourceType(
        group=group, version=version, kind="PodGroup", plural="podgroups", singular="podgroup", namespaced=True,
        short_names=short_names, status_subresource=status_subresource,
        field_selectors={"status.phase": path_getter("status.phase")},
        defaults=defaults, validate=validate, columns=columns, strategic_merge=None,
        openapi_schema=schema, openapi_name=openapi_name,
        description=schema.get("description", ""),
    )


VOLCANO_PODGROUPS = _podgroup(
    VOLCANO_GROUP, "v1beta1", short_names=("pg", "podgroup-v1beta1"), status_subresource=False,
    phases=_VOLCANO_PHASES,
    validate=_podgroup_validator(phases=_VOLCANO_PHASES, spec_ints=(), spec_strs=("queue", "priorityClassName"),
                                 min_resources=True, min_task_member=True),
    defaults=_queue_default,
    columns=(
        TableColumn("Status", jsonpath_cell("status", "phase", default=None), description="Current phase of PodGroup."),
        TableColumn("minMember", jsonpath_cell("spec", "minMember", default=None), type="integer",
                    description="MinMember defines the minimal number of members/tasks to run the pod group."),
        TableColumn("RUNNINGS", jsonpath_cell("status", "running", default=None), type="integer",
                    description="The number of actively running pods."),
        TableColumn("Age", jsonpath_cell("metadata", "creationTimestamp", default=None), type="date"),
        TableColumn("QUEUE", jsonpath_cell("spec", "queue", default=None), priority=1,
                    description="Queue defines the queue to allocate resource for PodGroup."),
    ),
    schema=_pg_schema({
        "minMember": _MIN_MEMBER,
        "minTaskMember": {"type": "object", "additionalProperties": {"type": "integer", "format": "int32"},
                          "description": "MinTaskMember defines the minimal number of pods to run each task in the pod group."},
        "queue": {"type": "string", "default": "default", "description": "Queue defines the queue to allocate resource for PodGroup."},
        "priorityClassName": {"type": "string", "description": "If specified, indicates the PodGroup's priority."},
        "minResources": {"type": "object", "additionalProperties": {"type": "string"},
                         "description": "MinResources defines the minimal resource of members/tasks to run the pod group."},
    }, phases=_VOLCANO_PHASES, description="PodGroup is a collection of Pod; used for batch workload (Volcano)."),
    openapi_name="io.volcano.scheduling.v1beta1.PodGroup",
)

COSCHEDULING_PODGROUPS = _podgroup(
    COSCHEDULING_GROUP, "v1alpha1", short_names=("pg", "pgs"), status_subresource=True, phases=_COSCHED_PHASES,
    validate=_podgroup_validator(phases=_COSCHED_PHASES, spec_ints=("scheduleTimeoutSeconds",), spec_strs=(),
                                 min_resources=True, min_task_member=False),
    defaults=_min_resources_strings,
    columns=(
        TableColumn("Phase", jsonpath_cell("status", "phase", default=None), description="Current phase of PodGroup."),
        TableColumn("MinMember", jsonpath_cell("spec", "minMember", default=None), type="integer",
                    description="MinMember defines the minimal number of members/tasks to run the pod group."),
        TableColumn("Running", jsonpath_cell("status", "running", default=None), type="integer",
                    description="The number of actively running pods."),
        TableColumn("Age", jsonpath_cell("metadata", "creationTimestamp", default=None), type="date"),
    ),
    schema=_pg_schema({
        "minMember": _MIN_MEMBER,
        "minResources": {"type": "object", "additionalProperties": {"type": "string"},
                         "description": "MinResources defines the minimal resource of members/tasks to run the pod group."},
        "scheduleTimeoutSeconds": {"type": "integer", "format": "int32",
                                   "description": "ScheduleTimeoutSeconds defines the maximal time of members/tasks to wait before run the pod group."},
    }, phases=_COSCHED_PHASES, description="PodGroup is a collection of Pod; used for batch workload (scheduler-plugins coscheduling)."),
    openapi_name="io.x-k8s.scheduling.v1alpha1.PodGroup",
)

KUBE_BATCH_PODGROUPS = _podgroup(
    KUBE_BATCH_GROUP, "v1alpha1", short_names=("podgroup-v1alpha1",), status_subresource=False,
    phases=_KUBE_BATCH_PHASES,
    validate=_podgroup_validator(phases=_KUBE_BATCH_PHASES, spec_ints=(), spec_strs=("queue", "priorityClassName"),
                                 min_resources=False, min_task_member=False),
    defaults=None,
    columns=(
        TableColumn("Phase", jsonpath_cell("status", "phase", default=None), description="Current phase of PodGroup."),
        TableColumn("MinMember", jsonpath_cell("spec", "minMember", default=None), type="integer",
                    description="MinMember defines the minimal number of members/tasks to run the pod group."),
        TableColumn("Age", jsonpath_cell("metadata", "creationTimestamp", default=None), type="date"),
        TableColumn("Queue", jsonpath_cell("spec", "queue", default=None), priority=1,
                    description="Queue defines the queue to allocate resource for PodGroup."),
    ),
    schema=_pg_schema({
        "minMember": _MIN_MEMBER,
        "queue": {"type": "string", "description": "Queue defines the queue to allocate resource for PodGroup."},
        "priorityClassName": {"type": "string", "description": "If specified, indicates the PodGroup's priority."},
    }, phases=_KUBE_BATCH_PHASES, description="PodGroup is a collection of Pod; used for batch workload (kube-batch)."),
    openapi_name="io.k8s.incubator.scheduling.v1alpha1.PodGroup",
)

# ---------------------------------------------------------------- Kubernetes' own PodGroup (scheduling.k8s.io/v1alpha2)
#
# A built-in kind of Kubernetes v1.36 (GenericWorkload feature gate; k8s.io/api/scheduling/v1alpha2
# types.go): spec.schedulingPolicy is a union of basic / gang{minCount >= 1}, immutable; no phase, only
# conditions (metav1.Condition: PodGroupScheduled, DisruptionTarget). Pods join by
# spec.schedulingGroup.podGroupName. The simulator serves no Workload kind, so a
# spec.podGroupTemplateRef (which kube-apiserver checks against an existing Workload) is refused.

_NATIVE_CONDITION_TYPES = ("PodGroupScheduled", "DisruptionTarget")


def _validate_native_podgroup(pg: JSONObject) -> list[FieldError]:
    c = _Checker()
    spec = c.object_at(pg.get("spec"), "spec", required=True)
    if spec is not None:
        policy = c.object_at(spec.get("schedulingPolicy"), "spec.schedulingPolicy", required=True)
        if policy is not None:
            chosen = [k for k in ("basic", "gang") if policy.get(k) is not None]
            if len(chosen) != 1:
                c.errors.append(FieldError.invalid("spec.schedulingPolicy", sorted(chosen),
                                                   "must specify exactly one of: `basic`, `gang`"))
            c.object_at(policy.get("basic"), "spec.schedulingPolicy.basic")
            gang = c.object_at(policy.get("gang"), "spec.schedulingPolicy.gang")
            if gang is not None:
                c.integer(gang.get("minCount"), "spec.schedulingPolicy.gang.minCount", minimum=1,
                          maximum=2**31 - 1, required=True)
        if spec.get("podGroupTemplateRef") is not None:
            c.errors.append(FieldError.forbidden(
                "spec.podGroupTemplateRef", "no Workload exists to refer to (this cluster serves no Workloads; "
                                            "create a standalone PodGroup)"))
        constraints = c.object_at(spec.get("schedulingConstraints"), "spec.schedulingConstraints")
        if constraints is not None:
            topology = c.list_at(constraints.get("topologyConstraints"), "spec.schedulingConstraints.topologyConstraints")
            for i, t in enumerate(topology or []):
                t = c.object_at(t, f"spec.schedulingConstraints.topologyConstraints[{i}]")
                if t is not None:
                    c.string(t.get("topologyKey"), f"spec.schedulingConstraints.topologyConstraints[{i}].topologyKey",
                             required=True)
        c.list_at(spec.get("resourceClaims"), "spec.resourceClaims")
    status = c.object_at(pg.get("status"), "status")
    if status is not None:
        c.conditions(status.get("conditions"), "status.conditions")
        for i, cond in enumerate(status.get("conditions") or []):
            if isinstance(cond, dict):
                c.integer(cond.get("observedGeneration"), f"status.conditions[{i}].observedGeneration", minimum=0)
                c.string(cond.get("lastTransitionTime"), f"status.conditions[{i}].lastTransitionTime")
        c.list_at(status.get("resourceClaimStatuses"), "status.resourceClaimStatuses")
    return c.errors


def _validate_native_podgroup_update(new: JSONObject, old: JSONObject) -> list[FieldError]:
    new_spec, old_spec = new.get("spec") or {}, old.get("spec") or {}
    errs = []
    for f in ("schedulingPolicy", "podGroupTemplateRef", "schedulingConstraints", "resourceClaims"):
        if isinstance(new_spec, dict) and isinstance(old_spec, dict) and new_spec.get(f) != old_spec.get(f):
            errs.append(FieldError.invalid(f"spec.{f}", new_spec.get(f), "field is immutable"))
    return errs


def _native_policy_cell(pg: JSONObject) -> str:
    policy = (pg.get("spec") or {}).get("schedulingPolicy") or {}
    return "Gang" if isinstance(policy, dict) and policy.get("gang") is not None else (
        "Basic" if isinstance(policy, dict) and policy.get("basic") is not None else "")


def _native_status_cell(pg: JSONObject) -> str:
    for cond in (pg.get("status") or {}).get("conditions") or []:
        if isinstance(cond, dict) and cond.get("type") == "PodGroupScheduled":
            return str(cond.get("reason") or cond.get("status") or "")
    return ""


NATIVE_PODGROUPS = ResourceType(
    group="scheduling.k8s.io", version="v1alpha2", kind="PodGroup", plural="podgroups", singular="podgroup",
    namespaced=True, status_subresource=True,
    validate=_validate_native_podgroup, validate_update=_validate_native_podgroup_update,
    columns=(
        TableColumn("Policy", _native_policy_cell, description="The scheduling policy: Gang or Basic."),
        TableColumn("Status", _native_status_cell,
                    description="The reason of the PodGroupScheduled condition (Scheduled, Unschedulable, ...)."),
        TableColumn("MinCount", jsonpath_cell("spec", "schedulingPolicy", "gang", "minCount", default=None),
                    type="integer", priority=1,
                    description="The minimum number of pods scheduled at the same time for the group to be admitted."),
    ),
    strategic_merge={
        "metadata.finalizers": SMPListStrategy(None),
        "metadata.ownerReferences": SMPListStrategy("uid"),
        "status.conditions": SMPListStrategy("type"),
    },
    openapi_schema={"properties": {
        "spec": {"type": "object", "description": "Spec defines the desired state of the PodGroup.",
                 "required": ["schedulingPolicy"], "properties": {
                     "schedulingPolicy": {
                         "type": "object",
                         "description": "SchedulingPolicy defines the scheduling policy for this instance of the "
                                        "PodGroup. Exactly one policy must be set. This field is immutable.",
                         "properties": {
                             "basic": {"type": "object", "description": "Basic: standard Kubernetes scheduling."},
                             "gang": {"type": "object", "description": "Gang: all-or-nothing scheduling.",
                                      "required": ["minCount"], "properties": {
                                          "minCount": {"type": "integer", "format": "int32", "minimum": 1,
                                                       "description": "MinCount is the minimum number of pods that "
                                                       "must be schedulable or scheduled at the same time for the "
                                                       "scheduler to admit the entire group."}}}}},
                     "podGroupTemplateRef": {"type": "object", "description": "PodGroupTemplateRef references an "
                                             "optional PodGroup template within other object (e.g. Workload)."},
                     "schedulingConstraints": {"type": "object", "description": "SchedulingConstraints defines "
                                               "optional scheduling constraints (e.g. topology) for this PodGroup."},
                 }},
        "status": {"type": "object", "description": "Status represents the current observed state of the PodGroup.",
                   "properties": {"conditions": {
                       "type": "array", "items": {"type": "object"},
                       "description": "Conditions represent the latest observations of the PodGroup's state: "
                                      "PodGroupScheduled, DisruptionTarget."}}},
    }, "description": "PodGroup represents a runtime instance of pods grouped together (Kubernetes' own gang "
                      "scheduling; GenericWorkload feature gate)."},
    openapi_name="io.k8s.api.scheduling.v1alpha2.PodGroup",
    description="PodGroup represents a runtime instance of pods grouped together.",
)

# ---------------------------------------------------------------- KAI Scheduler's PodGroup (scheduling.run.ai/v2alpha2)
#
# NVIDIA KAI Scheduler v0.13 (pkg/apis/scheduling/v2alpha2/podgroup_types.go and its CRD
# deployments/kai-scheduler/crds/scheduling.run.ai_podgroups.yaml): shortName pg, /status, no printer
# columns; minMember >= 1; status has no phase KAI writes, but schedulingConditions (UnschedulableOnNodePool)
# and resourcesStatus. Pods join by the annotation pod-group-name.

_KAI_PREEMPTIBILITY = ("preemptible", "non-preemptible")


def _validate_kai_podgroup(pg: JSONObject) -> list[FieldError]:
    c = _Checker()
    spec = c.object_at(pg.get("spec"), "spec")
    if spec is not None:
        c.integer(spec.get("minMember"), "spec.minMember", minimum=1, maximum=2**31 - 1)
        for f in ("parallelism", "completions", "backoffLimit", "schedulingBackoff"):
            c.integer(spec.get(f), f"spec.{f}", minimum=-(2**31), maximum=2**31 - 1)
        for f in ("queue", "priorityClassName"):
            c.string(spec.get(f), f"spec.{f}")
        c.boolean(spec.get("markUnschedulable"), "spec.markUnschedulable")
        if spec.get("preemptibility") not in (None, ""):
            c.one_of(spec.get("preemptibility"), "spec.preemptibility", _KAI_PREEMPTIBILITY)
        c.object_at(spec.get("topologyConstraint"), "spec.topologyConstraint")
        for i, sub in enumerate(c.list_at(spec.get("subGroups"), "spec.subGroups") or []):
            sub = c.object_at(sub, f"spec.subGroups[{i}]")
            if sub is not None:
                c.string(sub.get("name"), f"spec.subGroups[{i}].name", required=True)
                c.integer(sub.get("minMember"), f"spec.subGroups[{i}].minMember", minimum=1, maximum=2**31 - 1)
    status = c.object_at(pg.get("status"), "status")
    if status is not None:
        c.string(status.get("phase"), "status.phase")
        for f in ("running", "succeeded", "failed", "pending"):
            c.integer(status.get(f), f"status.{f}", minimum=0)
        for name in ("conditions", "schedulingConditions"):
            for i, cond in enumerate(c.list_at(status.get(name), f"status.{name}") or []):
                cond = c.object_at(cond, f"status.{name}[{i}]")
                if cond is not None:
                    for f in ("type", "status", "reason", "message", "transitionID", "nodePool"):
                        c.string(cond.get(f), f"status.{name}[{i}].{f}")
        c.object_at(status.get("resourcesStatus"), "status.resourcesStatus")
    return c.errors


KAI_PODGROUPS = ResourceType(
    group="scheduling.run.ai", version="v2alpha2", kind="PodGroup", plural="podgroups", singular="podgroup",
    namespaced=True, short_names=("pg",), status_subresource=True,
    validate=_validate_kai_podgroup, defaults=None, columns=(), strategic_merge=None,
    openapi_schema={"properties": {
        "spec": {"type": "object", "description": "PodGroupSpec defines the desired state of PodGroup",
                 "properties": {
                     "minMember": {"type": "integer", "format": "int32", "minimum": 1,
                                   "description": "MinMember defines the minimal number of members to run the "
                                                  "PodGroup; if there are not enough resources to start all "
                                                  "required members, the scheduler will not start anyone."},
                     "queue": {"type": "string", "description": "Queue defines the queue to allocate resource for "
                                                                "PodGroup; if queue does not exist, the PodGroup "
                                                                "will not be scheduled."},
                     "priorityClassName": {"type": "string", "description": "If specified, indicates the "
                                                                            "PodGroup's priority."},
                     "preemptibility": {"type": "string", "enum": list(_KAI_PREEMPTIBILITY),
                                        "description": "Preemptibility determines if this PodGroup can be preempted."},
                 }},
        "status": {"type": "object", "description": "PodGroupStatus defines the observed state of PodGroup",
                   "properties": {
                       "schedulingConditions": {"type": "array", "items": {"type": "object"},
                                                "description": "The scheduling conditions of PodGroup."},
                       "resourcesStatus": {"type": "object", "description": "Status of resources related to pods "
                                                                            "connected to this pod group."},
                   }},
    }, "description": "PodGroup is the Schema for the podgroups API (NVIDIA KAI Scheduler)."},
    openapi_name="ai.run.scheduling.v2alpha2.PodGroup",
    description="PodGroup is the Schema for the podgroups API (NVIDIA KAI Scheduler).",
)

PODGROUP_KINDS: Mapping[str, ResourceType] = {
    "volcano": VOLCANO_PODGROUPS,
    "coscheduling": COSCHEDULING_PODGROUPS,
    "kube-batch": KUBE_BATCH_PODGROUPS,
    "native": NATIVE_PODGROUPS,
    "kai": KAI_PODGROUPS,
}


def sim_registry(gang_schedulers: Iterable[str] | None = None) -> Registry:
    """The kinds a simulated member cluster serves. `gang_schedulers` limits
    the PodGroup groups to those schedulers' (volcano, coscheduling,
    kube-batch, native, kai); None serves them all. The job operators' kinds
    are added by `federator.sim.operators.with_operator_kinds`."""
    # PriorityClass before the PodGroups: scheduling.k8s.io's preferred version is v1, not native's v1alpha2
    registry = Registry([NAMESPACES, NODES, PODS, SERVICES, CONFIG_MAPS, EVENTS, LEASES, PRIORITY_CLASSES])
    wanted = list(PODGROUP_KINDS) if gang_schedulers is None else list(dict.fromkeys(gang_schedulers))
    for name in wanted:
        rt = PODGROUP_KINDS.get(name)
        if rt is None:
            raise ValueError(f"unknown gang scheduler {name!r}; known: {sorted(PODGROUP_KINDS)}")
        registry.add(rt)
    return registry


# ---------------------------------------------------------------- pods/binding (kube-api-notes §11)


def _decode_binding(body: bytes, content_type: str) -> JSONObject:
    obj = decode_body(body, content_type)
    if not isinstance(obj, dict):
        raise errors.bad_request("the request body must be a Binding object")
    if obj.get("kind") not in (None, "", "Binding"):
        raise errors.bad_request(f"the kind in the data ({obj.get('kind')}) does not match the expected kind (Binding)")
    if obj.get("apiVersion") not in (None, "", "v1"):
        raise errors.bad_request(
            f"the API version in the data ({obj.get('apiVersion')}) does not match the expected API version (v1)")
    return obj


#: plugin/pkg/admission/podtopologylabels defaultConfig
_POD_TOPOLOGY_LABELS = frozenset({"topology.kubernetes.io/zone", "topology.kubernetes.io/region"})

_BINDING_RT = ResourceType(group="", version="v1", kind="Binding", plural="bindings", singular="binding",
                           namespaced=True, verbs=("create",), status_subresource=False)


async def bind_pod(storage: Any, *, namespace: str, pod_name: str, binding: JSONObject,
                   dry_run: bool = False) -> None:
    """Apply a Binding to a pod in one write, with kube's checks (409 when
    the pod is already bound or being deleted)."""
    meta = binding.get("metadata") if isinstance(binding.get("metadata"), dict) else {}
    assert isinstance(meta, dict)
    target = binding.get("target")
    errs: list[FieldError] = []
    if not isinstance(target, dict):
        errs.append(FieldError.required("target"))
        target = {}
    node = target.get("name")
    if not isinstance(node, str) or not node:
        errs.append(FieldError.required("target.name"))
    if target.get("kind") not in (None, "", "Node"):
        errs.append(FieldError.invalid("target.kind", target.get("kind"), "must be empty or 'Node'"))
    annotations = meta.get("annotations")
    if annotations is not None and (not isinstance(annotations, dict)
                                    or not all(isinstance(v, str) for v in annotations.values())):
        errs.append(FieldError.wrong_type("metadata.annotations", annotations, "a map of string to string"))
    if errs:
        raise errors.invalid(_BINDING_RT, pod_name, errs)
    if meta.get("name") not in (None, "", pod_name):
        raise errors.bad_request(
            f"the name of the object ({meta.get('name')}) does not match the name on the URL ({pod_name})")
    expected_uid = meta.get("uid") or None
    now = _now()

    def conflict(why: str) -> ApiError:
        return errors.conflict(PODS, pod_name, why, resource="pods/binding")

    def bind(pod: JSONObject) -> JSONObject:
        pmeta = pod["metadata"]
        if expected_uid and pmeta.get("uid") != expected_uid:
            raise conflict(f"Precondition failed: UID in precondition: {expected_uid}, "
                           f"UID in object meta: {pmeta.get('uid')}")
        if pmeta.get("deletionTimestamp"):
            raise conflict(f"pod {pod_name} is being deleted, cannot be assigned to a host")
        bound = (pod.get("spec") or {}).get("nodeName")
        if bound:
            raise conflict(f'pod {pod_name} is already assigned to node "{bound}"')
        pod.setdefault("spec", {})["nodeName"] = node
        if annotations:
            merged = dict(pmeta.get("annotations") or {})
            merged.update(annotations)
            pmeta["annotations"] = merged
        if topology:
            pmeta["labels"] = {**(pmeta.get("labels") or {}), **topology}
        status = pod.setdefault("status", {})
        conditions = [c for c in status.get("conditions") or [] if c.get("type") != "PodScheduled"]
        conditions.append({"type": "PodScheduled", "status": "True", "lastProbeTime": None,
                           "lastTransitionTime": now})
        status["conditions"] = conditions
        return pod

    # kube-apiserver's PodTopologyLabels admission (beta, on by default since v1.35): the node's zone and
    # region labels are copied onto the pod it is bound to
    topology: dict[str, str] = {}
    if isinstance(node, str) and node:
        try:
            node_obj = await storage.get(NODES, namespace=None, name=node)
        except ApiError:
            node_obj = {}
        node_labels = Body(node_obj).labels
        topology = {k: v for k, v in node_labels.items() if k in _POD_TOPOLOGY_LABELS and isinstance(v, str)}

    if dry_run:
        bind(await storage.get(PODS, namespace=namespace, name=pod_name))
        return
    await storage.guaranteed_update(PODS, namespace=namespace, name=pod_name, mutate=bind, subresource="binding")


def _binding_created() -> web.Response:
    return json_response(errors.success_status(code=201), status=201)


async def _pod_binding_handler(req: SubresourceRequest) -> web.StreamResponse:
    binding = _decode_binding(req.body, req.request.headers.get("Content-Type", ""))
    assert req.namespace is not None
    await bind_pod(req.storage, namespace=req.namespace, pod_name=req.name, binding=binding, dry_run=req.dry_run)
    return _binding_created()


async def _bindings_handler(req: SubresourceRequest) -> web.StreamResponse:
    binding = _decode_binding(req.body, req.request.headers.get("Content-Type", ""))
    name = Body(binding).name
    if not name:
        raise errors.invalid(_BINDING_RT, "", [FieldError.required("metadata.name")])
    assert req.namespace is not None
    await bind_pod(req.storage, namespace=req.namespace, pod_name=name, binding=binding, dry_run=req.dry_run)
    return _binding_created()


def sim_subresources() -> tuple[list[Subresource], list[VerbOnlyResource]]:
    """pods/binding and bindings, for build_api_app."""
    return (
        [Subresource(group="", version="v1", plural="pods", name="binding", kind="Binding", verbs=("create",),
                     handler=_pod_binding_handler)],
        [VerbOnlyResource(group="", version="v1", plural="bindings", singular="binding", kind="Binding",
                          namespaced=True, verbs=("create",), handler=_bindings_handler)],
    )
