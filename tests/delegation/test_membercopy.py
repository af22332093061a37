"""delegation/membercopy.py (issue 28, operator mode): the member copy of each kind's upstream example carries the
gang's labels on the object and on EVERY pod template, the scheduler adapter's gang membership, no managedBy, and
is created suspended; nothing of the source object changes."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from federator.apis.common import ValidationSettings
from federator.apis.jobkinds.runtimes import BUILTIN_TORCH_DISTRIBUTED
from federator.apis.jobkinds import JOB_KINDS, JobKind
from federator.apis.jobkinds.base import twin_trainingjob
from federator.delegation import RenderError, adapter_for
from federator.delegation.adapter import (
    ANNOTATION_GANG,
    LABEL_EPOCH,
    LABEL_HUB,
    LABEL_JOB_UID,
    LABEL_ROLE,
    OperatorGang,
)
from federator.delegation.membercopy import (
    LAST_APPLIED,
    member_copy,
    resize_patch,
    resized_to,
    resume_patch,
    suspended,
    template_at,
    terminal_phase,
)

from ..apis.jobkinds.test_batchjob import POD_TO_POD
from ..apis.jobkinds.test_trainjob import small as small_trainjob
from ..apis.test_job_kinds_kubeflow import EXAMPLES, upstream_example

KINDS = {k.kind: k for k in JOB_KINDS}
UPSTREAM = Path(__file__).resolve().parents[1] / "apis" / "jobkinds" / "upstream"
SETTINGS = ValidationSettings()


def example(kind: str) -> dict[str, Any]:
    if kind in EXAMPLES:
        obj = upstream_example(*EXAMPLES[kind])
    elif kind == "JobSet":
        obj = yaml.safe_load((UPSTREAM / "jobset-paralleljobs.yaml").read_text())
    elif kind == "Job":
        obj = yaml.safe_load(POD_TO_POD)
    else:
        raise AssertionError(kind)
    obj["metadata"].setdefault("namespace", "default")
    obj["metadata"]["uid"] = f"src-{kind.lower()}"
    return obj


def gang_of(kind: JobKind, source: dict[str, Any], scheduler: str = "volcano") -> tuple[OperatorGang, Any]:
    translation = (kind.translate_referenced(source, SETTINGS, BUILTIN_TORCH_DISTRIBUTED)
                   if kind.translate_referenced is not None else kind.translate(source, SETTINGS))
    assert translation.spec is not None, translation.errors
    twin = twin_trainingjob(kind, source, translation)
    twin["metadata"]["uid"] = "twin-uid-1"
    adapter = adapter_for(scheduler)
    gang = adapter.render_operator_gang(twin, cluster_scheduler_name=adapter.default_scheduler_name, epoch=3,
                                        hub_id="hub-a", namespace=source["metadata"]["namespace"])
    return gang, translation


COPYABLE = ["PyTorchJob", "TFJob", "PaddleJob", "MPIJob", "JobSet", "Job"]


@pytest.mark.parametrize("kind_name", COPYABLE)
def test_the_member_copy_of_the_upstream_example(kind_name: str) -> None:
    kind = KINDS[kind_name]
    source = example(kind_name)
    source["metadata"].setdefault("annotations", {})[LAST_APPLIED] = "{}"
    before = copy.deepcopy(source)
    gang, translation = gang_of(kind, source)
    body = member_copy(kind, source, gang, role_paths=translation.role_paths)
    assert source == before  # pure
    assert (body["apiVersion"], body["kind"]) == (source["apiVersion"], source["kind"])
    assert body["metadata"]["name"] == source["metadata"]["name"]  # the operator's pod names are the upstream ones
    assert body["metadata"]["namespace"] == source["metadata"]["namespace"]
    assert "uid" not in body["metadata"] and LAST_APPLIED not in body["metadata"]["annotations"]
    labels = body["metadata"]["labels"]
    assert (labels[LABEL_HUB], labels[LABEL_JOB_UID], labels[LABEL_EPOCH]) == ("hub-a", "twin-uid-1", "3")
    assert body["metadata"]["annotations"][ANNOTATION_GANG]
    assert suspended(kind, body)
    group_name = gang.podgroup.name if gang.podgroup is not None else None
    assert group_name
    assert len(translation.role_paths) == len(translation.spec["roles"])
    for role, path in translation.role_paths.items():
        template = template_at(body, path)
        assert template is not None, path
        template_labels = template["metadata"]["labels"]
        assert template_labels[LABEL_HUB] == "hub-a" and template_labels[LABEL_EPOCH] == "3"
        assert template_labels[LABEL_ROLE] == role
        # Volcano: the PodGroup annotation and its schedulerName on every pod the operator makes
        assert template["metadata"]["annotations"]["scheduling.k8s.io/group-name"] == group_name
        assert template["spec"]["schedulerName"] == "volcano"
        original = template_at(source, path)
        assert original is not None
        assert template["spec"]["containers"] == original["spec"]["containers"]  # no hub env: the operator's
    # the rest of the spec is the source's
    stripped = copy.deepcopy(body["spec"])
    for path in translation.role_paths.values():
        template = template_at({"spec": stripped}, path)
        assert template is not None
        template.clear()
        template.update(copy.deepcopy(template_at(source, path) or {}))
    suspend_parent: Any = {"spec": stripped}
    for key in kind.suspend_path[:-1]:
        suspend_parent = suspend_parent[key]
    original_parent: Any = source
    for key in kind.suspend_path[:-1]:
        original_parent = original_parent.get(key, {})
    if kind.suspend_path[-1] in original_parent:
        suspend_parent[kind.suspend_path[-1]] = original_parent[kind.suspend_path[-1]]
    else:
        suspend_parent.pop(kind.suspend_path[-1])
        if kind.suspend_path == ("spec", "runPolicy", "suspend") and not suspend_parent and "runPolicy" not in \
                source["spec"]:
            stripped.pop("runPolicy")
    assert stripped == source["spec"]


@pytest.mark.parametrize("kind_name", COPYABLE)
def test_managed_by_is_removed_and_resume_clears_suspend(kind_name: str) -> None:
    kind = KINDS[kind_name]
    source = example(kind_name)
    gang, translation = gang_of(kind, source)
    node: Any = source  # what the hub itself accepts there (its own operator's name), set after the translation
    for key in kind.managed_by_path[:-1]:
        node = node.setdefault(key, {})
    node[kind.managed_by_path[-1]] = "kubeflow.org/training-operator"
    body = member_copy(kind, source, gang, role_paths=translation.role_paths)
    node = body
    for key in kind.managed_by_path[:-1]:
        node = node.get(key, {})
    assert kind.managed_by_path[-1] not in node
    patch = resume_patch(kind)
    node = patch
    for key in kind.suspend_path:
        node = node[key]
    assert node is False


def test_coscheduling_puts_its_podgroup_label_and_the_default_scheduler_no_group() -> None:
    kind = KINDS["JobSet"]
    source = example("JobSet")
    gang, translation = gang_of(kind, source, scheduler="coscheduling")
    body = member_copy(kind, source, gang, role_paths=translation.role_paths)
    assert gang.podgroup is not None
    for path in translation.role_paths.values():
        template = template_at(body, path)
        assert template is not None
        assert template["metadata"]["labels"]["scheduling.x-k8s.io/pod-group"] == gang.podgroup.name
    gang, translation = gang_of(kind, source, scheduler="default")
    assert gang.podgroup is None
    body = member_copy(kind, source, gang, role_paths=translation.role_paths)
    for path in translation.role_paths.values():
        template = template_at(body, path)
        assert template is not None and template["spec"]["schedulerName"] == "default-scheduler"


def test_a_trainjob_has_no_pod_template_and_is_refused() -> None:
    kind = KINDS["TrainJob"]
    source = small_trainjob()
    source["metadata"].update(namespace="default", uid="u")
    gang, translation = gang_of(kind, source)
    with pytest.raises(RenderError, match="no pod templates"):
        member_copy(kind, source, gang, role_paths=translation.role_paths)


@pytest.mark.parametrize("paths", [{"worker": "spec.nope[Worker].template"}, {"worker": "spec"},
                                   {"worker": "spec.replicatedJobs[99].template"}, {"worker": "]]]...[["}, {}])
def test_a_path_without_a_template_is_refused(paths: dict[str, str]) -> None:
    kind = KINDS["JobSet"]
    source = example("JobSet")
    gang, _ = gang_of(kind, source)
    if paths == {"worker": "spec"}:  # spec is an object: a "template" there is refused only if not an object
        body = member_copy(kind, source, gang, role_paths=paths)
        assert body["spec"]["metadata"]["labels"][LABEL_ROLE] == "worker"
        return
    with pytest.raises(RenderError):
        member_copy(kind, source, gang, role_paths=paths)


def test_template_at_indexes_lists_by_position_or_name_and_maps_by_key() -> None:
    obj = {"spec": {"a": [{"name": "x", "t": {"k": 1}}], "m": {"K": {"t": {"k": 2}}}}}
    assert template_at(obj, "spec.a[0].t") == {"k": 1}
    assert template_at(obj, "spec.a[x].t") == {"k": 1}
    assert template_at(obj, "spec.m[K].t") == {"k": 2}
    assert template_at(obj, "spec.a[y].t") is None
    assert template_at(obj, "spec.a[0].t.k") is None  # not an object
    assert template_at("garbage", "spec") is None


@pytest.mark.parametrize(("kind_name", "conditions", "want"), [
    ("JobSet", [{"type": "Completed", "status": "True"}], "Succeeded"),
    ("JobSet", [{"type": "Failed", "status": "True"}, {"type": "Completed", "status": "True"}], "Failed"),
    ("JobSet", [{"type": "Completed", "status": "False"}], None),
    ("Job", [{"type": "Complete", "status": "True"}], "Succeeded"),
    ("Job", [{"type": "SuccessCriteriaMet", "status": "True"}], None),
    ("PyTorchJob", [{"type": "Running", "status": "True"}], None),
    ("PyTorchJob", [{"type": "Succeeded", "status": "True"}], "Succeeded"),
    ("MPIJob", [{"type": "Failed", "status": "True"}], "Failed"),
    ("Job", "garbage", None),
    ("Job", ["garbage", None, 3], None),
])
def test_terminal_phase(kind_name: str, conditions: Any, want: str | None) -> None:
    found = terminal_phase(KINDS[kind_name], {"status": {"conditions": conditions}})
    assert (found[0] if found else None) == want


def test_only_a_gang_joined_by_a_pod_spec_field_cannot_be_left_to_an_operator() -> None:
    """Kubernetes' own gang scheduling joins a pod to its PodGroup by spec.schedulingGroup.podGroupName, which the
    operators' CRDs drop from a member copy's templates (e2e/kube/test_member_operators.py pins it): dispatch
    renders those gangs. Labels and annotations (Volcano, coscheduling, kube-batch, KAI) survive."""
    from federator.delegation.registry import ADAPTERS, adapter_for

    assert adapter_for("native").joins_by_pod_field
    assert {name for name in ADAPTERS if adapter_for(name).joins_by_pod_field} == {"native"}


# ------------------------------------------------------------------ resizes in place (elastic gangs, operator mode)


def elastic_pytorch(low: Any = 1, high: Any = 3, workers: Any = 2) -> dict[str, Any]:
    source = example("PyTorchJob")
    source["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] = workers
    source["spec"]["elasticPolicy"] = {"minReplicas": low, "maxReplicas": high}
    return source


@pytest.mark.parametrize("size", [1, 2, 3])
def test_a_pytorchjob_is_resized_by_its_worker_replicas_within_its_elastic_policy(size: int) -> None:
    source = elastic_pytorch()
    kept = copy.deepcopy(source)
    patch = resize_patch(KINDS["PyTorchJob"], source, {"master": 1, "worker": size})
    assert patch == {"spec": {"pytorchReplicaSpecs": {"Worker": {"replicas": size}}}}
    assert resized_to(KINDS["PyTorchJob"], patch) == size
    assert source == kept


def test_the_copy_starts_at_the_placed_size() -> None:
    kind = KINDS["PyTorchJob"]
    source = elastic_pytorch()
    gang, translation = gang_of(kind, source)
    body = member_copy(kind, source, gang, role_paths=translation.role_paths, replicas={"master": 1, "worker": 3})
    assert body["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] == 3
    assert resized_to(kind, body) == 3 and source["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] == 2
    # a kind that cannot resize in place keeps the source's sizes
    jobset = example("JobSet")
    gang, translation = gang_of(KINDS["JobSet"], jobset)
    body = member_copy(KINDS["JobSet"], jobset, gang, role_paths=translation.role_paths, replicas={"x": 9})
    assert body["spec"]["replicatedJobs"] == [
        {**rj, "template": body["spec"]["replicatedJobs"][i]["template"]}
        for i, rj in enumerate(jobset["spec"]["replicatedJobs"])]


@pytest.mark.parametrize("kind_name", ["JobSet", "TFJob", "PaddleJob", "MPIJob", "Job"])
def test_a_kind_whose_operator_cannot_resize_in_place_is_refused(kind_name: str) -> None:
    with pytest.raises(RenderError, match="cannot resize a running"):
        resize_patch(KINDS[kind_name], example(kind_name) if kind_name != "MPIJob" else {"spec": {}}, {"worker": 2})
    assert resized_to(KINDS[kind_name], {"spec": {}}) is None


@pytest.mark.parametrize(("source", "replicas", "words"), [
    (elastic_pytorch(), {"worker": 4}, "outside spec.elasticPolicy.minReplicas 1 .. spec.elasticPolicy.maxReplicas 3"),
    (elastic_pytorch(low=2), {"worker": 1}, "outside"),
    (elastic_pytorch(), {"worker": 0}, "not a replica count"),
    (elastic_pytorch(), {"worker": -1}, "not a replica count"),
    (elastic_pytorch(), {"worker": True}, "not a replica count"),
    (elastic_pytorch(), {"worker": "3"}, "not a replica count"),
    (elastic_pytorch(), {"worker": 2.0}, "not a replica count"),
    (elastic_pytorch(), {"worker": 10**30}, "not a replica count"),
    (elastic_pytorch(), {"master": 1}, "size of role 'worker' is missing"),
    (elastic_pytorch(), ["worker", 2], "size of role 'worker' is missing"),
    (elastic_pytorch(), None, "size of role 'worker' is missing"),
    (elastic_pytorch(low="1"), {"worker": 2}, "spec.elasticPolicy.minReplicas is not an integer"),
    (elastic_pytorch(high=[3]), {"worker": 2}, "spec.elasticPolicy.maxReplicas is not an integer"),
    (elastic_pytorch(workers="2"), {"worker": 2}, "spec.pytorchReplicaSpecs.Worker.replicas is not an integer"),
    ({"spec": {"pytorchReplicaSpecs": {"Master": {}}}}, {"worker": 1}, "no replica spec"),
    ({"spec": {"pytorchReplicaSpecs": {"Worker": "x" * 100_000}}}, {"worker": 1}, "no replica spec"),
    ({"spec": None}, {"worker": 1}, "no spec"),
    ("not an object", {"worker": 1}, "no spec"),
])
def test_a_resize_the_object_cannot_take_is_a_render_error(source: Any, replicas: Any, words: str) -> None:
    kept = copy.deepcopy(source)
    with pytest.raises(RenderError) as err:
        resize_patch(KINDS["PyTorchJob"], source, replicas)
    assert words in str(err.value) and len(str(err.value)) < 300
    assert source == kept


def test_a_pytorchjob_without_elastic_bounds_keeps_its_own_count() -> None:
    source = example("PyTorchJob")
    source["spec"].pop("elasticPolicy", None)
    count = source["spec"]["pytorchReplicaSpecs"]["Worker"].get("replicas", 1)
    assert resize_patch(KINDS["PyTorchJob"], source, {"worker": count})
    with pytest.raises(RenderError, match="outside"):
        resize_patch(KINDS["PyTorchJob"], source, {"worker": count + 1})
    source["spec"]["elasticPolicy"] = {"maxReplicas": count + 2}  # the minimum is the count, as translated
    assert resize_patch(KINDS["PyTorchJob"], source, {"worker": count + 2})
    with pytest.raises(RenderError, match="outside"):
        resize_patch(KINDS["PyTorchJob"], source, {"worker": count - 1} if count > 1 else {"worker": count + 3})
