"""A role's full pod template (core/v1 PodTemplateSpec), checked at the hub as the members' kube-apiserver would.

A TrainingJob role's `template` comes in two forms (apis/trainingjob.py): the short form (image,
command, args, env, resources, nodeSelector, tolerations at the top) and the full form, a core/v1
PodTemplateSpec (`metadata` with labels and annotations, `spec` a PodSpec). The form is told by the
keys: `spec` or `metadata` makes it the full form, and then no short-form key may appear.

What this module checks in the full form, as (field path, message) pairs:

- the shape, against the OpenAPI schema of the Kubernetes release the members run
  (`podtemplatespec.json`, extracted from k8s.io/kubernetes' api__v1_openapi.json by
  scripts/gen_pod_template_schema.py): unknown fields, wrong types, missing required fields,
  int32/int64 ranges, quantities and int-or-strings;
- the rules of kube's pod validation that a pod template most often breaks
  (K/pkg/apis/core/validation/validation.go `ValidatePodSpec`, `validateContainers`,
  `validateInitContainers`,
  `ValidateResourceRequirements`, `validateVolumes`, `validateEnv`,
  `validateContainerPorts`): container names are DNS labels, unique across containers and init
  containers, every container has an image, only a sidecar init container (`restartPolicy: Always`)
  has probes or lifecycle hooks, volume names are unique DNS labels with exactly one source, mounts name a
  volume, env sources are exactly one, ports are in range, resource names are standard or
  domain-qualified, quantities parse, requests are at most limits and equal them for extended
  resources, and extended resources are whole numbers;
- caps (`ValidationSettings.max_containers_per_pod`, `max_template_bytes`) and the per-pod cpu, memory
  and GPU caps on the pod's effective request (`pod_request_amounts`, kube-scheduler's sum);
- the fields the hub owns (`HUB_OWNED_SPEC_FIELDS`, `is_hub_owned_key`): a template may not set them.

Rendering rule for extended resources (documented in README "Writing a job"): kube requires limits ==
requests for them; a template that requests one without a limit gets the limit set to the request by the
hub (as the short form's limits = requests), so only a limit that *differs* is refused.

Bottom layer: stdlib only. It reads its own package data file once (the schema) and does no other I/O;
messages never echo more than a short prefix of a value.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from fractions import Fraction
from importlib import resources
from typing import Any, Final, TypeVar

from federator.apis.common import (
    FieldError,
    ValidationSettings,
    dns1123_label_errors,
    dns1123_subdomain_errors,
    json_type,
    label_key_errors,
    label_value_errors,
)
from federator.apis.quantity import QuantityError, parse_quantity

__all__ = [
    "GPU_PRODUCT_LABEL",
    "aggregate_requests",
    "HUB_OWNED_KEYS",
    "HUB_OWNED_SPEC_FIELDS",
    "SHORT_FORM_KEYS",
    "is_full_form",
    "is_hub_owned_key",
    "is_sidecar",
    "kube_release",
    "pod_request_amounts",
    "pod_template_errors",
    "template_form_errors",
    "toleration_errors",
]

#: the short form's keys (apis/trainingjob.py PodTemplate); the full form has `metadata` and `spec`
SHORT_FORM_KEYS: Final = ("image", "command", "args", "env", "resources", "nodeSelector", "tolerations")
FULL_FORM_KEYS: Final = ("metadata", "spec")

#: PodSpec fields the hub sets on every pod it renders, with what to use instead
HUB_OWNED_SPEC_FIELDS: Final[Mapping[str, str]] = {
    "schedulerName": "the hub sets the member cluster's gang scheduler",
    "priorityClassName": "set spec.priorityClassName of the job",
    "priority": "set spec.priority or spec.priorityClassName of the job",
    "preemptionPolicy": "the hub's member PriorityClass sets it (Never: the hub preempts whole gangs)",
    "nodeName": "the member's scheduler binds the pods where placement put the gang",
    "schedulingGroup": "the hub ties the pods to their PodGroup",
    "restartPolicy": "set the role's restartPolicy (the hub restarts a failed pod per its own policy)",
}
#: the only pod restartPolicy a template may state (the one the hub renders)
RENDERED_POD_RESTART_POLICY: Final = "Never"
#: label and annotation keys the hub (or a member gang scheduler it drives) owns, besides `federator.dev/*`:
#: the pod-group membership keys of the delegation adapters (a test keeps this list and theirs in step)
HUB_OWNED_KEYS: Final = frozenset({
    "app.kubernetes.io/managed-by",
    "scheduling.k8s.io/group-name",       # Volcano, kube-batch
    "scheduling.x-k8s.io/pod-group",      # scheduler-plugins coscheduling
    "pod-group-name",                     # KAI
    "kai.scheduler/queue",                # KAI
})
HUB_KEY_PREFIX: Final = "federator.dev/"
#: the node label of the GPU model pin (dispatch pins GPU pods to placement's model with it)
GPU_PRODUCT_LABEL: Final = "nvidia.com/gpu.product"

V = TypeVar("V")

_SCHEMA_FILE = "podtemplatespec.json"
_POD_SPEC = "io.k8s.api.core.v1.PodSpec"
_QUANTITY = "io.k8s.apimachinery.pkg.api.resource.Quantity"
_INT_OR_STRING = "io.k8s.apimachinery.pkg.util.intstr.IntOrString"
_MAX_DEPTH = 64
_MAX_SHOWN = 64
_INT_RANGES: Final = {"int32": (-(2**31), 2**31 - 1), "int64": (-(2**63), 2**63 - 1)}
#: kube's standard container resource names (K/pkg/apis/core/helper IsStandardContainerResourceName)
_STANDARD_RESOURCES: Final = frozenset({"cpu", "memory", "ephemeral-storage"})
_PORT_NAME = re.compile(r"[a-z0-9]([a-z0-9-]*[a-z0-9])?")
_ENV_SOURCES: Final = ("fieldRef", "resourceFieldRef", "configMapKeyRef", "secretKeyRef", "fileKeyRef")
_FIELD_REF_PATHS: Final = frozenset({
    "metadata.name", "metadata.namespace", "metadata.uid", "metadata.labels", "metadata.annotations",
    "spec.nodeName", "spec.serviceAccountName", "status.hostIP", "status.hostIPs", "status.podIP",
    "status.podIPs"})
_FIELD_REF_SUBSCRIPT = re.compile(r"metadata\.(labels|annotations)\['[^']+'\]")
#: a container's own restartPolicy (kube 1.36: Always makes an init container a sidecar; the others with
#: ContainerRestartRules, which a real v1.36 member accepts on init containers too)
_CONTAINER_RESTART_POLICIES: Final = ("Always", "Never", "OnFailure")
#: only a sidecar (restartPolicy Always) may have these (validateInitContainers)
_SIDECAR_ONLY: Final = ("lifecycle", "livenessProbe", "readinessProbe", "startupProbe")


@functools.cache
def _document() -> Mapping[str, Any]:
    text = resources.files("federator.apis").joinpath(_SCHEMA_FILE).read_text(encoding="utf-8")
    loaded: Mapping[str, Any] = json.loads(text)
    return loaded


def kube_release() -> str:
    """Where the schema came from (the kube release and file), as written into the data file."""
    return str(_document()["source"])


def _show(value: object) -> str:
    if isinstance(value, Mapping | list):
        return json_type(value)
    text = json.dumps(value, ensure_ascii=True)
    return text if len(text) <= _MAX_SHOWN else text[:_MAX_SHOWN] + "..."


def is_full_form(template: object) -> bool:
    """A full pod template (`spec` or `metadata` present), as opposed to the short form."""
    return isinstance(template, Mapping) and any(key in template for key in FULL_FORM_KEYS)


def is_sidecar(container: object) -> bool:
    """An init container that keeps running beside the main containers (restartPolicy Always)."""
    return isinstance(container, Mapping) and container.get("restartPolicy") == "Always"


def template_form_errors(template: object, *, path: str) -> list[FieldError]:
    """A template mixing the short form with the full form: one error per short-form key."""
    if not is_full_form(template):
        return []
    assert isinstance(template, Mapping)
    return [(f"{path}.{key}", f"Forbidden: may not be set in a full pod template (with {path}.spec); "
                              f"put it in {path}.spec.containers[*] or {path}.spec")
            for key in SHORT_FORM_KEYS if key in template]


# ---------------------------------------------------------------- the schema walk


def _schema_errors(value: Any, node: Mapping[str, Any], path: str, depth: int = 0) -> Iterator[FieldError]:
    schemas = _document()["schemas"]
    if depth > _MAX_DEPTH:
        yield path, "Invalid value: nested too deeply"
        return
    ref = node.get("$ref")
    if ref is not None:
        if ref == _QUANTITY:
            yield from _quantity_shape(value, path)
            return
        if ref == _INT_OR_STRING:
            if isinstance(value, bool) or not isinstance(value, int | str):
                yield path, f"Invalid value: {_show(value)}: must be an integer or a string"
            return
        node = schemas[ref]
    kind = node.get("type")
    if value is None:
        return  # JSON null is an unset optional field to kube's decoder
    if kind == "object":
        if not isinstance(value, Mapping):
            yield path, f"Invalid value: {_show(value)}: must be of type object"
            return
        properties = node.get("properties")
        extra = node.get("additionalProperties")
        for key in node.get("required") or ():
            if key not in value or value[key] is None:
                yield f"{path}.{key}", "Required value"
        for key, child in value.items():
            if not isinstance(key, str):
                continue
            if properties is not None and key in properties:
                yield from _schema_errors(child, properties[key], f"{path}.{key}", depth + 1)
            elif isinstance(extra, Mapping):
                yield from _schema_errors(child, extra, f"{path}[{key}]", depth + 1)
            elif properties is not None:
                yield f"{path}.{key}", "Forbidden: unknown field (not in core/v1 " + \
                    f"{_schema_name(ref) if ref else 'PodSpec'} of Kubernetes {_release_tag()})"
        return
    if kind == "array":
        if not isinstance(value, list):
            yield path, f"Invalid value: {_show(value)}: must be of type array"
            return
        items = node.get("items")
        if isinstance(items, Mapping):
            for index, child in enumerate(value):
                if child is None:
                    yield f"{path}[{index}]", "Invalid value: null: a list item may not be null"
                else:
                    yield from _schema_errors(child, items, f"{path}[{index}]", depth + 1)
        return
    if kind == "string":
        if not isinstance(value, str):
            yield path, f"Invalid value: {_show(value)}: must be of type string"
        return
    if kind == "boolean":
        if not isinstance(value, bool):
            yield path, f"Invalid value: {_show(value)}: must be of type boolean"
        return
    if kind == "integer":
        if isinstance(value, bool) or not isinstance(value, int):
            yield path, f"Invalid value: {_show(value)}: must be of type integer"
            return
        low, high = _INT_RANGES.get(str(node.get("format")), _INT_RANGES["int64"])
        if not low <= value <= high:
            yield path, f"Invalid value: {_show(value)}: out of range for {node.get('format', 'int64')}"
        return
    if kind == "number":
        if isinstance(value, bool) or not isinstance(value, int | float):
            yield path, f"Invalid value: {_show(value)}: must be of type number"


def _schema_name(ref: str) -> str:
    return ref.rsplit(".", 1)[-1]


def _release_tag() -> str:
    match = re.search(r"@(v[0-9.]+)", kube_release())
    return match.group(1) if match else "?"


def _quantity_shape(value: Any, path: str) -> Iterator[FieldError]:
    if isinstance(value, bool) or not isinstance(value, int | str):
        yield path, f"Invalid value: {_show(value)}: must be a quantity string or an integer"
        return
    try:
        amount = parse_quantity(value)
    except QuantityError as exc:
        yield path, f"Invalid value: {_show(value)}: {exc}"
        return
    if amount < 0:
        yield path, f"Invalid value: {_show(value)}: must be greater than or equal to 0"


# ---------------------------------------------------------------- kube's pod rules


def _entries(obj: Mapping[str, Any], field: str) -> list[tuple[int, Mapping[str, Any]]]:
    """(index, item) of the objects in the list `obj[field]` (anything else there: none)."""
    items = obj.get(field)
    return [(i, c) for i, c in enumerate(items) if isinstance(c, Mapping)] if isinstance(items, list) else []


def _is_native(resource: str) -> bool:
    """kube's IsNativeResource: no domain, or a kubernetes.io domain."""
    return "/" not in resource or resource.split("/", 1)[0].endswith("kubernetes.io")


def _overcommit_allowed(resource: str) -> bool:
    """kube's IsOvercommitAllowed: native and not hugepages (extended resources and hugepages are not)."""
    return _is_native(resource) and not resource.startswith("hugepages-")


def _resource_name_errors(resource: str, path: str) -> list[FieldError]:
    problems = label_key_errors(resource)
    if problems:
        return [(path, f"Invalid value: {_show(resource)}: {problems[0]}")]
    if "/" not in resource and resource not in _STANDARD_RESOURCES and not resource.startswith("hugepages-"):
        return [(path, f"Invalid value: {_show(resource)}: must be a standard resource for containers "
                       "(cpu, memory, ephemeral-storage, hugepages-<size>) or a domain-qualified extended resource")]
    if "/" in resource and _is_native(resource):
        return [(path, f"Invalid value: {_show(resource)}: must be a standard resource for containers")]
    return []


def _amount(value: object) -> Fraction | None:
    if isinstance(value, bool) or not isinstance(value, int | str):
        return None
    try:
        return parse_quantity(value)
    except QuantityError:
        return None


def _resources_errors(resources: object, path: str) -> list[FieldError]:
    if not isinstance(resources, Mapping):
        return []
    errors: list[FieldError] = []
    raw_requests, raw_limits = resources.get("requests"), resources.get("limits")
    requests: Mapping[str, Any] = raw_requests if isinstance(raw_requests, Mapping) else {}
    limits: Mapping[str, Any] = raw_limits if isinstance(raw_limits, Mapping) else {}
    for where, amounts in (("limits", limits), ("requests", requests)):
        for name, value in amounts.items():
            at = f"{path}.{where}[{name}]"
            errors += _resource_name_errors(str(name), at)
            amount = _amount(value)
            if amount is not None and not _is_native(str(name)) and amount.denominator != 1:
                errors.append((at, f"Invalid value: {_show(value)}: must be an integer"))
    for name, value in requests.items():
        request, limit = _amount(value), _amount(limits.get(name))
        if request is None or limit is None:
            continue  # missing limit of an extended resource: the hub sets it to the request
        if request != limit and not _overcommit_allowed(str(name)):
            errors.append((f"{path}.requests", f"Invalid value: {_show(value)}: must be equal to {name} limit of "
                                               f"{_show(limits.get(name))}"))
        elif request > limit:
            errors.append((f"{path}.requests", f"Invalid value: {_show(value)}: must be less than or equal to "
                                               f"{name} limit of {_show(limits.get(name))}"))
    return errors


def _env_errors(container: Mapping[str, Any], path: str) -> list[FieldError]:
    errors: list[FieldError] = []
    for index, var in _entries(container, "env"):
        at = f"{path}.env[{index}]"
        name = var.get("name")
        if isinstance(name, str) and (not name or "=" in name or not name.isascii() or not name.isprintable()):
            errors.append((f"{at}.name", f"Invalid value: {_show(name)}: a valid environment variable name must "
                                         "consist only of printable ASCII characters other than '='"))
        source = var.get("valueFrom")
        if isinstance(source, Mapping):
            chosen = [key for key in _ENV_SOURCES if source.get(key) is not None]
            if len(chosen) != 1:
                errors.append((f"{at}.valueFrom", "Invalid value: must specify exactly one of: `fieldRef`, "
                                                  "`resourceFieldRef`, `configMapKeyRef`, `secretKeyRef` or "
                                                  "`fileKeyRef`"))
            if var.get("value"):
                errors.append((f"{at}.valueFrom", "Invalid value: may not be specified when `value` is not empty"))
            for key in ("configMapKeyRef", "secretKeyRef"):
                ref = source.get(key)
                if isinstance(ref, Mapping) and isinstance(ref.get("key"), str) and not ref["key"]:
                    errors.append((f"{at}.valueFrom.{key}.key", "Required value"))
            field_ref = source.get("fieldRef")
            if isinstance(field_ref, Mapping) and isinstance(field_ref.get("fieldPath"), str):
                wanted = field_ref["fieldPath"]
                if wanted not in _FIELD_REF_PATHS and not _FIELD_REF_SUBSCRIPT.fullmatch(wanted):
                    errors.append((f"{at}.valueFrom.fieldRef.fieldPath",
                                   f"Unsupported value: {_show(wanted)}: supported values: "
                                   + ", ".join(f'"{p}"' for p in sorted(_FIELD_REF_PATHS))))
    return errors


def _ports_errors(container: Mapping[str, Any], path: str) -> list[FieldError]:
    errors: list[FieldError] = []
    for index, port in _entries(container, "ports"):
        at = f"{path}.ports[{index}]"
        number = port.get("containerPort")
        if type(number) is int and not 1 <= number <= 65535:
            errors.append((f"{at}.containerPort", f"Invalid value: {number}: must be between 1 and 65535, inclusive"))
        protocol = port.get("protocol")
        if isinstance(protocol, str) and protocol not in ("TCP", "UDP", "SCTP"):
            errors.append((f"{at}.protocol", f'Unsupported value: {_show(protocol)}: supported values: "SCTP", '
                                             '"TCP", "UDP"'))
        name = port.get("name")
        if isinstance(name, str) and name and (len(name) > 15 or not _PORT_NAME.fullmatch(name)
                                               or "--" in name or not any(c.isalpha() for c in name)):
            errors.append((f"{at}.name", f"Invalid value: {_show(name)}: must be an IANA_SVC_NAME (at most 15 "
                                         "characters, lowercase alphanumerics and '-', with a letter)"))
    return errors


def _container_errors(container: Mapping[str, Any], path: str, *, names: set[str], volumes: set[str],
                      init: bool) -> list[FieldError]:
    errors: list[FieldError] = []
    name = container.get("name")
    if isinstance(name, str):
        problems = dns1123_label_errors(name)
        errors += [(f"{path}.name", f"Invalid value: {_show(name)}: {p}") for p in problems]
        if name in names:
            errors.append((f"{path}.name", f"Duplicate value: {_show(name)}"))
        names.add(name)
    image = container.get("image")
    if image is None or (isinstance(image, str) and not image.strip()):
        errors.append((f"{path}.image", "Required value"))
    policy = container.get("imagePullPolicy")
    if isinstance(policy, str) and policy not in ("Always", "IfNotPresent", "Never"):
        errors.append((f"{path}.imagePullPolicy", f'Unsupported value: {_show(policy)}: supported values: '
                                                  '"Always", "IfNotPresent", "Never"'))
    restart = container.get("restartPolicy")
    if isinstance(restart, str) and restart not in _CONTAINER_RESTART_POLICIES:
        errors.append((f"{path}.restartPolicy", f"Unsupported value: {_show(restart)}: supported values: "
                                                + ", ".join(f'"{p}"' for p in _CONTAINER_RESTART_POLICIES)))
    if init and not is_sidecar(container):
        errors += [(f"{path}.{key}", "Forbidden: may not be set for init containers without restartPolicy=Always")
                   for key in _SIDECAR_ONLY if container.get(key) is not None]
    errors += _resources_errors(container.get("resources"), f"{path}.resources")
    errors += _env_errors(container, path)
    errors += _ports_errors(container, path)
    seen_paths: set[str] = set()
    for index, mount in _entries(container, "volumeMounts"):
        at = f"{path}.volumeMounts[{index}]"
        if isinstance(mount.get("name"), str) and mount["name"] not in volumes:
            errors.append((f"{at}.name", f"Not found: {_show(mount['name'])}"))
        mount_path = mount.get("mountPath")
        if isinstance(mount_path, str):
            if not mount_path:
                errors.append((f"{at}.mountPath", "Required value"))
            elif mount_path in seen_paths:
                errors.append((f"{at}.mountPath", "Invalid value: must be unique"))
            seen_paths.add(mount_path)
    return errors


def _volume_errors(spec: Mapping[str, Any], path: str) -> tuple[list[FieldError], set[str]]:
    errors: list[FieldError] = []
    names: set[str] = set()
    for index, volume in _entries(spec, "volumes"):
        at = f"{path}.volumes[{index}]"
        name = volume.get("name")
        if isinstance(name, str):
            errors += [(f"{at}.name", f"Invalid value: {_show(name)}: {p}") for p in dns1123_label_errors(name)]
            if name in names:
                errors.append((f"{at}.name", f"Duplicate value: {_show(name)}"))
            names.add(name)
        sources = [key for key, value in volume.items() if key != "name" and value is not None]
        if not sources:
            errors.append((at, "Required value: must specify a volume type"))
        elif len(sources) > 1:
            errors.append((f"{at}.{sources[1]}", "Forbidden: may not specify more than 1 volume type"))
    return errors, names


def _count_errors(spec: Mapping[str, Any], path: str, settings: ValidationSettings) -> list[FieldError]:
    """Too many containers or init containers (`ValidationSettings.max_containers_per_pod`)."""
    errors: list[FieldError] = []
    for field in ("containers", "initContainers"):
        items = spec.get(field)
        if isinstance(items, list) and len(items) > settings.max_containers_per_pod:
            errors.append((f"{path}.{field}", f"Too many: {len(items)}: must have at most "
                                              f"{settings.max_containers_per_pod} items"))
    return errors


def _spec_rule_errors(spec: Mapping[str, Any], path: str, settings: ValidationSettings) -> list[FieldError]:
    errors, volumes = _volume_errors(spec, path)
    containers = _entries(spec, "containers")
    inits = _entries(spec, "initContainers")
    raw = spec.get("containers")
    if raw is None or (isinstance(raw, list) and not raw):
        errors.append((f"{path}.containers", "Required value"))
    if _count_errors(spec, path, settings):
        return errors  # checking each of thousands of containers helps no one (the caller reports the count)
    if spec.get("ephemeralContainers") is not None:
        errors.append((f"{path}.ephemeralContainers", "Forbidden: cannot be set on create"))
    if spec.get("overhead") is not None:  # the RuntimeClass admission sets it from spec.runtimeClassName
        errors.append((f"{path}.overhead", "Forbidden: pod overhead is set from spec.runtimeClassName, not by hand"))
    names: set[str] = set()
    for index, container in inits:
        errors += _container_errors(container, f"{path}.initContainers[{index}]", names=names, volumes=volumes,
                                    init=True)
    for index, container in containers:
        errors += _container_errors(container, f"{path}.containers[{index}]", names=names, volumes=volumes,
                                    init=False)
    account = spec.get("serviceAccountName")
    if isinstance(account, str) and account:
        errors += [(f"{path}.serviceAccountName", f"Invalid value: {_show(account)}: {p}")
                   for p in dns1123_subdomain_errors(account)]
    selector = spec.get("nodeSelector")
    for key, value in selector.items() if isinstance(selector, Mapping) else ():
        errors += [(f"{path}.nodeSelector", f"Invalid value: {_show(key)}: {p}") for p in label_key_errors(str(key))]
        if isinstance(value, str):
            errors += [(f"{path}.nodeSelector", f"Invalid value: {_show(value)}: {p}")
                       for p in label_value_errors(value)]
    for index, toleration in _entries(spec, "tolerations"):
        errors += toleration_errors(toleration, path=f"{path}.tolerations[{index}]")
    dns = spec.get("dnsPolicy")
    if isinstance(dns, str) and dns not in ("ClusterFirstWithHostNet", "ClusterFirst", "Default", "None"):
        errors.append((f"{path}.dnsPolicy", f'Unsupported value: {_show(dns)}: supported values: "ClusterFirst", '
                                            '"ClusterFirstWithHostNet", "Default", "None"'))
    return errors


def toleration_errors(toleration: object, *, path: str) -> list[FieldError]:
    """kube's validateTolerations rules across a toleration's fields, on the fields kube names."""
    if not isinstance(toleration, Mapping):
        return []
    at = (lambda f: f"{path}.{f}") if path else (lambda f: f)
    errors: list[FieldError] = []
    if toleration.get("operator") == "Exists" and toleration.get("value"):
        errors.append((at("operator"), "Invalid value: value must be empty when `operator` is 'Exists'"))
    if not toleration.get("key") and toleration.get("operator") not in (None, "Exists"):
        errors.append((at("operator"), "Invalid value: must be 'Exists' when `key` is empty"))
    if toleration.get("tolerationSeconds") is not None and toleration.get("effect") != "NoExecute":
        errors.append((at("effect"), "Invalid value: must be 'NoExecute' when `tolerationSeconds` is set"))
    return errors


def _hub_owned_errors(template: Mapping[str, Any], path: str, *, job_priority_class: object) -> list[FieldError]:
    errors: list[FieldError] = []
    spec = template.get("spec")
    if isinstance(spec, Mapping):
        for field, instead in HUB_OWNED_SPEC_FIELDS.items():
            value = spec.get(field)
            if value is None:
                continue
            if field == "restartPolicy" and value == RENDERED_POD_RESTART_POLICY:
                continue
            if field == "priorityClassName" and value == job_priority_class:
                continue
            errors.append((f"{path}.spec.{field}", f"Forbidden: the hub sets this field ({instead})"))
        affinity = spec.get("affinity")
        node_affinity = affinity.get("nodeAffinity") if isinstance(affinity, Mapping) else None
        required = node_affinity.get("requiredDuringSchedulingIgnoredDuringExecution") \
            if isinstance(node_affinity, Mapping) else None
        terms = required.get("nodeSelectorTerms") if isinstance(required, Mapping) else None
        for t_index, term in enumerate(terms if isinstance(terms, list) else ()):
            expressions = term.get("matchExpressions") if isinstance(term, Mapping) else None
            for e_index, expression in enumerate(expressions if isinstance(expressions, list) else ()):
                if isinstance(expression, Mapping) and expression.get("key") == GPU_PRODUCT_LABEL:
                    errors.append((
                        f"{path}.spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"
                        f".nodeSelectorTerms[{t_index}].matchExpressions[{e_index}].key",
                        f"Forbidden: the hub pins GPU pods to the GPU model placement chose with {GPU_PRODUCT_LABEL} "
                        "(set spec.placement.gpuModels of the job)"))
    metadata = template.get("metadata")
    if isinstance(metadata, Mapping):
        for field in ("labels", "annotations"):
            values = metadata.get(field)
            for key in values if isinstance(values, Mapping) else ():
                if isinstance(key, str) and is_hub_owned_key(key):
                    errors.append((f"{path}.metadata.{field}[{key}]",
                                   "Forbidden: the hub sets this key (federator.dev/* and the gang schedulers' "
                                   "pod-group keys are the hub's)"))
    return errors


def is_hub_owned_key(key: str) -> bool:
    """A label or annotation key the hub sets on member objects (a template may not)."""
    return key.startswith(HUB_KEY_PREFIX) or key in HUB_OWNED_KEYS


# ---------------------------------------------------------------- requests


def _container_amounts(container: Mapping[str, Any]) -> dict[str, Fraction]:
    """A container's requests, a missing request defaulting to its limit (kube's defaulting)."""
    resources = container.get("resources")
    if not isinstance(resources, Mapping):
        return {}
    out: dict[str, Fraction] = {}
    for field in ("limits", "requests"):
        amounts = resources.get(field)
        for name, value in amounts.items() if isinstance(amounts, Mapping) else ():
            amount = _amount(value)
            if amount is not None and isinstance(name, str):
                out[name] = amount
    return out


def _add(into: dict[str, Fraction], amounts: Mapping[str, Fraction]) -> None:
    for name, amount in amounts.items():
        into[name] = into.get(name, Fraction(0)) + amount


def _take_max(into: dict[str, Fraction], amounts: Mapping[str, Fraction]) -> None:
    for name, amount in amounts.items():
        if amount > into.get(name, Fraction(0)):
            into[name] = amount


def aggregate_requests(spec: Mapping[str, Any], *, of: Callable[[Mapping[str, Any]], V], add: Callable[[V, V], V],
                       peak: Callable[[V, V], V], zero: V) -> V:
    """A pod's containers' requests combined as kube-scheduler combines them, for any vector type `V` (`of`
    one container, `add`, the per-resource `peak`, `zero`): the one place of the rule, which
    `pod_request_amounts` (exact, every resource) and the member snapshot's parser (clusters/snapshot_builder,
    cached per container) both use.

    k8s.io/component-helpers/resource/helpers.go `AggregateContainerRequests` (called by `PodRequests`, which
    kube-scheduler's noderesources Fit filter uses through `computePodResourceRequest` in
    K/pkg/scheduler/framework/plugins/noderesources/fit.go): the sum of the regular containers plus every
    sidecar (init container with restartPolicy Always); each init container in order needs itself plus the
    sidecars started before it; the larger of the two, per resource. Overhead and pod-level resources are
    the caller's (`pod_request_amounts`)."""
    total = zero
    for _, container in _entries(spec, "containers"):
        total = add(total, of(container))
    sidecars, init_peak = zero, zero
    for _, container in _entries(spec, "initContainers"):
        amounts = of(container)
        if is_sidecar(container):
            total = add(total, amounts)
            sidecars = add(sidecars, amounts)
            init_peak = peak(init_peak, sidecars)
        else:
            init_peak = peak(init_peak, add(sidecars, amounts))
    return peak(total, init_peak)


def _added(a: dict[str, Fraction], b: dict[str, Fraction]) -> dict[str, Fraction]:
    out = dict(a)
    _add(out, b)
    return out


def _peak(a: dict[str, Fraction], b: dict[str, Fraction]) -> dict[str, Fraction]:
    out = dict(a)
    _take_max(out, b)
    return out


def pod_request_amounts(spec: Mapping[str, Any]) -> dict[str, Fraction]:
    """A pod's effective request per resource, exactly, as kube-scheduler counts it (`PodRequests` in
    k8s.io/component-helpers/resource/helpers.go): the containers combined by `aggregate_requests`, then
    pod-level resources (spec.resources.requests, PodLevelResources) in place of that sum for the
    resources they name, then the pod overhead (spec.overhead) added. Tolerates any shape (bad values are
    skipped: validation reports them)."""
    empty: dict[str, Fraction] = {}
    total: dict[str, Fraction] = aggregate_requests(spec, of=_container_amounts, add=_added, peak=_peak,
                                                    zero=empty)
    pod_level = spec.get("resources")
    if isinstance(pod_level, Mapping):
        _take_pod_level(total, _container_amounts({"resources": pod_level}))
    overhead = spec.get("overhead")
    if isinstance(overhead, Mapping):
        _add(total, {name: amount for name, value in overhead.items()
                     if isinstance(name, str) and (amount := _amount(value)) is not None})
    return total


def _take_pod_level(total: dict[str, Fraction], pod_level: Mapping[str, Fraction]) -> None:
    # PodLevelResources supports cpu and memory (and hugepages); the others stay per container
    for name, amount in pod_level.items():
        if name in ("cpu", "memory") or name.startswith("hugepages-"):
            total[name] = amount


def _cap_errors(spec: Mapping[str, Any], path: str, settings: ValidationSettings) -> list[FieldError]:
    amounts = pod_request_amounts(spec)
    caps: Sequence[tuple[str, Fraction, str]] = (
        ("cpu", settings.cpu_cap, settings.max_cpu_per_pod),
        ("memory", settings.memory_cap, settings.max_memory_per_pod),
        ("nvidia.com/gpu", Fraction(settings.max_gpus_per_pod), str(settings.max_gpus_per_pod)),
        ("rdma/hca", Fraction(settings.max_rdma_per_pod), str(settings.max_rdma_per_pod)),
    )
    errors: list[FieldError] = []
    for name, cap, shown in caps:
        if amounts.get(name, Fraction(0)) > cap:
            errors.append((f"{path}.containers", f"Invalid value: the pod requests {float(amounts[name]):g} {name} "
                                                 f"(containers, sidecars and init containers counted as "
                                                 f"kube-scheduler does): must be at most {shown} per pod"))
    return errors


# ---------------------------------------------------------------- entry point


def pod_template_errors(template: object, *, path: str, settings: ValidationSettings,
                        job_priority_class: object = None) -> list[FieldError]:
    """Every problem with a full-form role template (see the module docstring); [] for the short form,
    which the TrainingJob model checks."""
    if not is_full_form(template):
        return []
    assert isinstance(template, Mapping)
    errors = template_form_errors(template, path=path)
    spec = template.get("spec")
    if isinstance(spec, Mapping):  # thousands of containers: one error, before anything looks at each
        count_errors = _count_errors(spec, f"{path}.spec", settings)
        if count_errors:
            return errors + count_errors
    try:
        size = len(json.dumps(template, separators=(",", ":"), default=str))
    except (TypeError, ValueError, RecursionError):
        return errors + [(path, "Invalid value: nested too deeply")]
    if size > settings.max_template_bytes:
        return errors + [(path, f"Too long: the template is {size} bytes of JSON: must have at most "
                                f"{settings.max_template_bytes}")]
    if spec is None:
        return errors + [(f"{path}.spec", "Required value: a full pod template needs spec.containers")]
    errors += list(_schema_errors(spec, {"$ref": _POD_SPEC}, f"{path}.spec"))
    if isinstance(spec, Mapping):
        errors += _spec_rule_errors(spec, f"{path}.spec", settings)
        errors += _cap_errors(spec, f"{path}.spec", settings)
    errors += _hub_owned_errors(template, path, job_priority_class=job_priority_class)
    return list(dict.fromkeys(errors))
