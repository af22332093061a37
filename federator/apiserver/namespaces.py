"""core/v1 Namespace, as kube-apiserver serves it, for every API server of ours (simulator and hub).

`NAMESPACES` is the kind: cluster-scoped, short name ns, the name a DNS-1123
label, spec.finalizers ["kubernetes"] by default, status.phase Active or
Terminating (set by the server: a DELETE of a namespace with spec.finalizers
only marks it Terminating; its namespace controller empties it, clears
spec.finalizers through the `finalize` subresource and deletes it), the label
kubernetes.io/metadata.name = its name on every namespace (kube's strategy
sets it on create and update), columns NAME STATUS AGE.

A registry that serves this kind gets kube's NamespaceLifecycle admission in
`ObjectStorage` (a create in a missing namespace is 404, in a Terminating one
403), or NamespaceAutoProvision instead (the missing namespace is created
first) when the storage is told so. `SYSTEM_NAMESPACES` exist in every kube
cluster; `ensure_namespaces` creates them (idempotently) at start.

Conditions the namespace controller writes (kube's NamespaceConditionType):
`NamespaceDeletionDiscoveryFailure`, `NamespaceDeletionGroupVersionParsingFailure`,
`NamespaceDeletionContentFailure`, `NamespaceContentRemaining`,
`NamespaceFinalizersRemaining`.

This module describes a kind; it must never import the simulator or the hub.
"""

from __future__ import annotations

from typing import Any, Final

from federator.apis.views import Body
from federator.apiserver.clientschema import client_unknown_fields, with_client_schema
from federator.apiserver.errors import ApiError, FieldError
from federator.apiserver.registry import JSONObject, ResourceType, SMPListStrategy, TableColumn, jsonpath_cell

__all__ = [
    "CONDITION_CONTENT_FAILURE",
    "CONDITION_CONTENT_REMAINING",
    "CONDITION_FINALIZERS_REMAINING",
    "KUBERNETES_FINALIZER",
    "NAMESPACES",
    "NAME_LABEL",
    "SYSTEM_NAMESPACES",
    "ensure_namespaces",
    "namespace_grace_period",
]

#: kube's finalizer in spec.finalizers: the namespace controller removes it once the namespace is empty.
KUBERNETES_FINALIZER: Final = "kubernetes"
#: The label kube puts on every namespace (what a namespaceSelector can always match).
NAME_LABEL: Final = "kubernetes.io/metadata.name"
#: The namespaces every kube cluster has from its start.
SYSTEM_NAMESPACES: Final = ("default", "kube-system", "kube-public")
PHASES: Final = ("Active", "Terminating")

CONDITION_CONTENT_FAILURE: Final = "NamespaceDeletionContentFailure"
CONDITION_CONTENT_REMAINING: Final = "NamespaceContentRemaining"
CONDITION_FINALIZERS_REMAINING: Final = "NamespaceFinalizersRemaining"


def _namespace_defaults(ns: JSONObject) -> None:
    if ns.get("spec") is None:
        ns["spec"] = {}
    if ns.get("status") is None:
        ns["status"] = {}
    spec, status = ns["spec"], ns["status"]
    if not isinstance(spec, dict) or not isinstance(status, dict):
        return  # validation names it
    spec.setdefault("finalizers", [KUBERNETES_FINALIZER])
    terminating = Body(ns).deleting
    status["phase"] = "Terminating" if terminating else status.get("phase") or "Active"
    meta = ns.get("metadata")
    name = meta.get("name") if isinstance(meta, dict) else None
    if isinstance(meta, dict) and isinstance(name, str) and name:
        labels = meta.get("labels")
        if labels is None:
            labels = meta["labels"] = {}
        if isinstance(labels, dict):
            labels[NAME_LABEL] = name


def _validate_namespace(ns: JSONObject) -> list[FieldError]:
    errs: list[FieldError] = []
    spec = ns.get("spec")
    if spec is not None and not isinstance(spec, dict):
        errs.append(FieldError.wrong_type("spec", spec, "an object"))
    elif isinstance(spec, dict):
        fins = spec.get("finalizers")
        if fins is not None and not isinstance(fins, list):
            errs.append(FieldError.wrong_type("spec.finalizers", fins, "a list"))
        for i, f in enumerate(fins if isinstance(fins, list) else []):
            if not isinstance(f, str) or not f:
                errs.append(FieldError.required(f"spec.finalizers[{i}]") if f in (None, "")
                            else FieldError.wrong_type(f"spec.finalizers[{i}]", f, "a string"))
    status = ns.get("status")
    if status is not None and not isinstance(status, dict):
        errs.append(FieldError.wrong_type("status", status, "an object"))
    elif isinstance(status, dict):
        phase = status.get("phase")
        if phase is not None and phase not in PHASES:
            errs.append(FieldError.not_supported("status.phase", phase, PHASES))
    return errs


def namespace_grace_period(ns: JSONObject, requested: int | None) -> int:
    """A namespace with spec.finalizers (the "kubernetes" one by default)
    only turns Terminating; the namespace controller empties it,
    finalizes it (subresource "finalize") and then deletes it."""
    spec = ns.get("spec")
    return 1 if isinstance(spec, dict) and spec.get("finalizers") else 0


def _namespace_finalize(proposed: JSONObject, stored: JSONObject) -> JSONObject:
    """namespaces/finalize: only spec.finalizers changes."""
    spec = stored.setdefault("spec", {})
    proposed_spec = proposed.get("spec")
    fins = proposed_spec.get("finalizers") if isinstance(proposed_spec, dict) else None
    spec["finalizers"] = fins if isinstance(fins, list) else []
    return stored


def _validate_namespace_update(new: JSONObject, old: JSONObject) -> list[FieldError]:
    new_spec, old_spec = new.get("spec"), old.get("spec")
    new_f = new_spec.get("finalizers") if isinstance(new_spec, dict) else None
    old_f = old_spec.get("finalizers") if isinstance(old_spec, dict) else None
    if new_f != old_f:
        return [FieldError.forbidden("spec.finalizers", "may only be changed through the finalize subresource")]
    return []


NAMESPACES: Final = ResourceType(
    group="", version="v1", kind="Namespace", plural="namespaces", singular="namespace", namespaced=False,
    short_names=("ns",), verbs=("create", "delete", "get", "list", "patch", "update", "watch"),
    name_format="label", defaults=_namespace_defaults,
    validate=with_client_schema("V1Namespace", _validate_namespace),
    unknown_fields=client_unknown_fields("V1Namespace"),
    validate_update=_validate_namespace_update, graceful_delete=namespace_grace_period,
    subresource_strategies={"finalize": _namespace_finalize},
    columns=(TableColumn("Status", jsonpath_cell("status", "phase"),
                         description="The status of the namespace"),),
    strategic_merge={
        "metadata.finalizers": SMPListStrategy(None),
        "metadata.ownerReferences": SMPListStrategy("uid"),
        "status.conditions": SMPListStrategy("type"),
    },
    openapi_schema={"properties": {
        "spec": {"type": "object", "description": "Spec defines the behavior of the Namespace.",
                 "properties": {"finalizers": {"type": "array", "items": {"type": "string"},
                                               "description": "Finalizers is an opaque list of values that must be empty to permanently remove object from storage."}}},
        "status": {"type": "object", "description": "Status describes the current status of a Namespace.",
                   "properties": {"phase": {"type": "string", "description": "Phase is the current lifecycle phase of the namespace."}}},
    }},
    description="Namespace provides a scope for Names. Use of multiple namespaces is optional.",
    # kube keeps managedFields on Namespaces and takes server-side apply of them (Argo CD, kubectl --server-side)
    managed_fields=True,
    openapi_name="io.k8s.api.core.v1.Namespace",
)


def namespace_object(name: str) -> JSONObject:
    """A new Namespace named `name`, as a client would send it."""
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}


async def ensure_namespaces(storage: Any, names: tuple[str, ...] | list[str]) -> None:
    """Create each namespace in `names` unless it exists (a 409 is fine): kube's system namespaces at
    start. `storage` is an ObjectStorage serving NAMESPACES (typed Any: this module imports no storage)."""
    for name in dict.fromkeys(names):
        try:
            await storage.create(NAMESPACES, namespace_object(name), namespace=None)
        except ApiError as e:
            if e.code != 409:
                raise
