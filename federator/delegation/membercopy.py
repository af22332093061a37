"""The member copy of an upstream job object (issue 28, operator mode): what dispatch creates in a member whose own
operator runs the kind (JobSet, the Kubeflow operators, kube's Job controller), instead of rendering pods.

`member_copy(kind, source, gang, role_paths=...)` is the copy of the hub's source object: same apiVersion, kind,
namespace, name (so the operator's pod names are the upstream ones) and spec; metadata.labels and annotations gain
the gang's (`OperatorGang`: job uid, epoch, hub, ...), and EVERY pod template of the copy (where the kind keeps them:
the translation's `role_paths`, one per twin role) gets the same labels plus LABEL_ROLE, and the scheduler
adapter's gang membership (schedulerName, the PodGroup label / annotation / spec field, the priority class), so
the operator's pods join the PodGroup dispatch creates first. The kind's managedBy field is removed (the member's
operator must run it) and its suspend field set: the copy is created suspended and `resume_patch` lets it go once
the PodGroup exists. `terminal_phase` reads the operator's verdict off the member object's conditions.

Elastic resizes in operator mode: `resize_patch(kind, source, replicas)` is the merge patch that sets the copy's
elastic role to the gang's size where the kind's operator resizes a running job in place
(`JobKind.in_place_resize`: PyTorchJob's Worker replicas, the field its scale subresource and its HPA change), held
within the object's own bounds (elasticPolicy minReplicas/maxReplicas, an absent one the source's count, as the
translation reads them). A kind whose operator cannot (JobSet v0.10.1's webhook holds spec.replicatedJobs
immutable; the other kinds have no elastic roles here) is a RenderError: such a gang keeps the size it was placed
at. `member_copy(..., replicas=...)` creates the copy at the size the gang was placed at.

Pure: no I/O; the source object is never changed. A source the copy cannot be made of (no template at a path
the translation named, a kind without pod templates) is a RenderError naming the path.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping
from typing import Any, Final

from federator.apis.jobkinds.base import JobKind
from federator.apis.views import Body
from federator.delegation.adapter import LABEL_ROLE, OperatorGang, RenderError, checkpoint_pod_spec

__all__ = ["LAST_APPLIED", "member_copy", "resize_patch", "resized_to", "resume_patch", "suspended", "template_at",
           "terminal_phase"]

JSON = dict[str, Any]

#: kubectl's copy of what it applied to the hub: not the member's business
LAST_APPLIED: Final = "kubectl.kubernetes.io/last-applied-configuration"

_SEGMENT = re.compile(r"^([A-Za-z0-9_]+)((?:\[[^\]]*\])*)$")


def template_at(obj: Any, path: str) -> JSON | None:
    """The JSON object at a translation's source path ("spec.pytorchReplicaSpecs[Worker].template",
    "spec.replicatedJobs[0].template.spec.template", "spec.template") in `obj`, or None when there is none.
    A bracket indexes a list by position (digits) or by its items' `name`, or a map by key."""
    node: Any = obj
    for part in path.split("."):
        match = _SEGMENT.match(part)
        if match is None or not isinstance(node, Mapping):
            return None
        node = node.get(match.group(1))
        for key in re.findall(r"\[([^\]]*)\]", match.group(2)):
            if isinstance(node, list):
                if key.isdigit() and int(key) < len(node):
                    node = node[int(key)]
                else:
                    node = next((item for item in node if isinstance(item, Mapping) and item.get("name") == key),
                                None)
            elif isinstance(node, Mapping):
                node = node.get(key)
            else:
                return None
    return node if isinstance(node, dict) else None


def _merge(into: JSON, fields: Mapping[str, Any]) -> None:
    """`fields` over `into`, nested objects merged (the adapter's PodGroup field may be nested in the spec)."""
    for key, value in fields.items():
        if isinstance(value, Mapping) and isinstance(into.get(key), dict):
            _merge(into[key], value)
        else:
            into[key] = copy.deepcopy(value)


def _set_path(obj: JSON, path: tuple[str, ...], value: Any) -> None:
    node = obj
    for key in path[:-1]:
        child = node.get(key)
        if not isinstance(child, dict):
            child = node[key] = {}
        node = child
    node[path[-1]] = value


def _drop_path(obj: JSON, path: tuple[str, ...]) -> None:
    node: Any = obj
    for key in path[:-1]:
        node = node.get(key) if isinstance(node, dict) else None
    if isinstance(node, dict):
        node.pop(path[-1], None)


def member_copy(kind: JobKind, source: Mapping[str, Any], gang: OperatorGang, *,
                role_paths: Mapping[str, str], replicas: Mapping[str, int] | None = None) -> JSON:
    """The member copy of `source` (a `kind` object as the hub stored it), see the module docstring.
    `role_paths` (twin role -> the source path of its pod template) is the translation's. `replicas` (the gang's
    placed size per twin role): where the kind's operator resizes in place, the copy starts at that size
    (`resize_patch`); elsewhere it is not read (the copy keeps the source's sizes)."""
    if not kind.operator_copyable:
        raise RenderError(f"{kind.kind} has no pod templates the hub's gang labels can go on; it is rendered")
    meta = Body(source)
    if not meta.name or not meta.namespace:
        raise RenderError("the source object needs metadata.name and metadata.namespace")
    spec = source.get("spec")
    if not isinstance(spec, Mapping):
        raise RenderError("the source object has no spec")
    if not role_paths:
        raise RenderError(f"{kind.kind} {meta.namespace}/{meta.name}: no pod template to put the gang's labels on")
    annotations = {k: v for k, v in meta.annotations.items() if k != LAST_APPLIED}
    body: JSON = {
        "apiVersion": kind.api_version, "kind": kind.kind,
        "metadata": {"name": meta.name, "namespace": meta.namespace,
                     "labels": {**meta.labels, **gang.labels},
                     "annotations": {**annotations, **gang.annotations}},
        "spec": copy.deepcopy(dict(spec)),
    }
    for role, path in sorted(role_paths.items()):
        template = template_at(body, path)
        if template is None:
            raise RenderError(f"{kind.kind} {meta.namespace}/{meta.name}: no pod template at {path}")
        template_meta = template.get("metadata")
        if not isinstance(template_meta, dict):
            template_meta = template["metadata"] = {}
        for field, values in (("labels", {**gang.labels, LABEL_ROLE: role, **gang.pod_labels}),
                              ("annotations", {**gang.annotations, **gang.pod_annotations})):
            current = template_meta.get(field)
            template_meta[field] = {**(current if isinstance(current, Mapping) else {}), **values}
        pod_spec = template.get("spec")
        if not isinstance(pod_spec, dict):
            pod_spec = template["spec"] = {}
        _merge(pod_spec, gang.pod_spec)
        checkpoint_pod_spec(pod_spec, checkpoint=gang.checkpoint, restore=gang.restore_from)
        if "priorityClassName" not in gang.pod_spec:
            pod_spec.pop("priorityClassName", None)  # the member has no such class: the hub said so
    _drop_path(body, kind.managed_by_path)
    _set_path(body, kind.suspend_path, True)
    if replicas is not None and kind.in_place_resize is not None:
        _merge(body, resize_patch(kind, source, replicas))
    return body


def _get_path(obj: Any, path: tuple[str, ...]) -> Any:
    node = obj
    for key in path:
        node = node.get(key) if isinstance(node, Mapping) else None
    return node


def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


#: the largest replica count a patch may carry (the CRDs' int32)
_INT32_MAX: Final = 2**31 - 1


def resize_patch(kind: JobKind, source: Mapping[str, Any], replicas: Mapping[str, int]) -> JSON:
    """The merge patch that resizes a `kind` object (the member copy, or the source it was made of) in place to
    `replicas` (twin role -> pods; only the kind's resizable role is read: the other roles of a gang the kind's
    operator runs have fixed sizes), e.g. {"spec": {"pytorchReplicaSpecs": {"Worker": {"replicas": 3}}}}.
    RenderError, naming the field, when the kind's operator cannot resize in place (`JobKind.in_place_resize`
    None), the object has no such replica spec, `replicas` lacks the role or is not a count, or the count is
    outside the object's bounds (minReplicas/maxReplicas; an absent one is the object's own count, as the hub's
    translation reads it: pass the hub's source object, whose count is the one the gang was translated from, not
    the member copy, whose count is what it was last resized to)."""
    resize = kind.in_place_resize
    if resize is None:
        raise RenderError(f"{kind.kind}'s operator cannot resize a running {kind.kind} in place; its gang keeps "
                          "the size it was placed at")
    if not isinstance(source, Mapping) or not isinstance(source.get("spec"), Mapping):
        raise RenderError(f"{kind.kind}: the object has no spec")
    field = ".".join(resize.replicas_path)
    holder = _get_path(source, resize.replicas_path[:-1])
    if not isinstance(holder, Mapping):
        raise RenderError(f"{kind.kind}: no replica spec at {'.'.join(resize.replicas_path[:-1])} to resize")
    current = holder.get(resize.replicas_path[-1], 1)
    current = 1 if current is None else current
    if not _count(current):
        raise RenderError(f"{kind.kind}: {field} is not an integer")
    if not isinstance(replicas, Mapping) or resize.role not in replicas:
        raise RenderError(f"{kind.kind}: the size of role {resize.role!r} is missing")
    wanted = replicas[resize.role]
    if not _count(wanted) or not 1 <= wanted <= _INT32_MAX:
        shown = repr(wanted)[:32]
        raise RenderError(f"{kind.kind}: {field}: {shown} is not a replica count of at least 1")
    low, high = _get_path(source, resize.min_path), _get_path(source, resize.max_path)
    for bound, path in ((low, resize.min_path), (high, resize.max_path)):
        if bound is not None and not _count(bound):
            raise RenderError(f"{kind.kind}: {'.'.join(path)} is not an integer")
    low = current if low is None else low
    high = current if high is None else high
    if not low <= wanted <= high:
        raise RenderError(f"{kind.kind}: {field}: {wanted} is outside {'.'.join(resize.min_path)} {low} .. "
                          f"{'.'.join(resize.max_path)} {high}")
    patch: JSON = {}
    _set_path(patch, resize.replicas_path, wanted)
    return patch


def resized_to(kind: JobKind, obj: Mapping[str, Any]) -> int | None:
    """The count at the kind's in-place resize field of `obj` (absent: 1, the operators' default); None when the
    kind cannot resize in place or the object holds no count there."""
    resize = kind.in_place_resize
    if resize is None:
        return None
    holder = _get_path(obj, resize.replicas_path[:-1])
    if not isinstance(holder, Mapping):
        return None
    value = holder.get(resize.replicas_path[-1], 1)
    value = 1 if value is None else value
    return value if _count(value) else None


def resume_patch(kind: JobKind) -> JSON:
    """The merge patch that lets the member's operator start the copy (its suspend field false)."""
    patch: JSON = {}
    _set_path(patch, kind.suspend_path, False)
    return patch


def suspended(kind: JobKind, obj: Mapping[str, Any]) -> bool:
    """Whether the member object's suspend field is true."""
    node: Any = obj
    for key in kind.suspend_path:
        node = node.get(key) if isinstance(node, Mapping) else None
    return node is True


def terminal_phase(kind: JobKind, obj: Mapping[str, Any]) -> tuple[str, Mapping[str, Any]] | None:
    """("Succeeded" | "Failed", the condition) when the operator's conditions on the member object say the job
    ended (`JobKind.terminal_conditions`, status True); else None. Failed wins over Succeeded."""
    found: dict[str, Mapping[str, Any]] = {}
    for condition in Body(obj).status.get("conditions") or ():
        if isinstance(condition, Mapping) and condition.get("status") == "True":
            phase = kind.terminal_conditions.get(str(condition.get("type")))
            if phase is not None:
                found.setdefault(phase, condition)
    for phase in ("Failed", "Succeeded"):
        if phase in found:
            return phase, found[phase]
    return None
