"""spec.checkpoint and the restore point in what the hub sends a member (issue 29): rendered pods and, in operator
mode, every pod template of the member copy get FEDERATOR_RESTORE_FROM (a later copy only), the checkpoint
directory or URI, and the claim mounted; the user's env of the same name wins."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from federator.apis.jobkinds.base import twin_trainingjob
from federator.delegation import adapter_for
from federator.delegation.adapter import POD_GVK
from federator.delegation.membercopy import member_copy, template_at

from .test_membercopy import KINDS, SETTINGS, example

CHECKPOINT = {"step": 140, "location": "/ckpt/step-140", "cluster": "a", "epoch": 2, "time": "2026-01-01T00:00:00Z"}


def _job(checkpoint_spec: dict[str, Any] | None, *, status_checkpoint: dict[str, Any] | None = None,
         user_env: list[dict[str, str]] | None = None) -> dict[str, Any]:
    template: dict[str, Any] = {"image": "trainer:1", "resources": {"cpu": "1"}}
    if user_env:
        template["env"] = user_env
    job: dict[str, Any] = {"apiVersion": "federator.dev/v1alpha1", "kind": "TrainingJob",
                           "metadata": {"name": "j", "namespace": "ns", "uid": "uid-1"},
                           "spec": {"roles": [{"name": "worker", "replicas": 2, "template": template}]}}
    if checkpoint_spec is not None:
        job["spec"]["checkpoint"] = checkpoint_spec
    if status_checkpoint is not None:
        job["status"] = {"checkpoint": status_checkpoint}
    return job


def _pods(job: dict[str, Any], epoch: int) -> list[dict[str, Any]]:
    objects = adapter_for("volcano").render(job, cluster_scheduler_name="volcano", epoch=epoch, hub_id="hub",
                                            namespace="ns")
    pods = [o.body for o in objects if o.gvk == POD_GVK]
    assert len(pods) == 2
    return pods


def _env(container: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e.get("value", "") for e in container.get("env") or ()}


def test_a_later_copy_restores_from_the_last_checkpoint_and_mounts_the_claim() -> None:
    job = _job({"volume": {"claimName": "ckpt"}, "mountPath": "/ckpt"}, status_checkpoint=CHECKPOINT)
    for pod in _pods(job, epoch=3):
        (container,) = pod["spec"]["containers"]
        env = _env(container)
        assert env["FEDERATOR_RESTORE_FROM"] == "/ckpt/step-140" and env["FEDERATOR_CHECKPOINT_DIR"] == "/ckpt"
        assert "FEDERATOR_CHECKPOINT_URI" not in env and env["FEDERATOR_EPOCH"] == "3"
        assert {"name": "federator-checkpoint", "mountPath": "/ckpt"} in container["volumeMounts"]
        volume = {"name": "federator-checkpoint", "persistentVolumeClaim": {"claimName": "ckpt"}}
        assert volume in pod["spec"]["volumes"]


@pytest.mark.parametrize("epoch", [0, 2])
def test_the_copy_that_reported_it_or_an_earlier_one_restores_from_nothing(epoch: int) -> None:
    for pod in _pods(_job({"uri": "s3://b/r"}, status_checkpoint=CHECKPOINT), epoch=epoch):
        env = _env(pod["spec"]["containers"][0])
        assert "FEDERATOR_RESTORE_FROM" not in env and env["FEDERATOR_CHECKPOINT_URI"] == "s3://b/r"
        assert "volumes" not in pod["spec"] or not any(v["name"] == "federator-checkpoint"
                                                       for v in pod["spec"]["volumes"])


def test_without_spec_checkpoint_a_reported_checkpoint_is_still_passed_on() -> None:
    for pod in _pods(_job(None, status_checkpoint=CHECKPOINT), epoch=3):
        env = _env(pod["spec"]["containers"][0])
        assert env["FEDERATOR_RESTORE_FROM"] == "/ckpt/step-140" and "FEDERATOR_CHECKPOINT_DIR" not in env
    for pod in _pods(_job(None), epoch=3):
        assert not any(n.startswith("FEDERATOR_CHECKPOINT") or n == "FEDERATOR_RESTORE_FROM"
                       for n in _env(pod["spec"]["containers"][0]))


def test_the_users_env_of_the_same_name_wins() -> None:
    job = _job({"uri": "s3://b/r"}, status_checkpoint=CHECKPOINT,
               user_env=[{"name": "FEDERATOR_RESTORE_FROM", "value": "/mine"}])
    for pod in _pods(job, epoch=3):
        names = [e["name"] for e in pod["spec"]["containers"][0]["env"]]
        assert names.count("FEDERATOR_RESTORE_FROM") == 1
        assert _env(pod["spec"]["containers"][0])["FEDERATOR_RESTORE_FROM"] == "/mine"


def test_operator_mode_member_copy_templates_carry_the_restore_point() -> None:
    kind = KINDS["PyTorchJob"]
    source = example("PyTorchJob")
    translation = kind.translate(source, SETTINGS)
    assert translation.spec is not None, translation.errors
    twin = twin_trainingjob(kind, source, translation)
    twin["metadata"]["uid"] = "twin-uid-1"
    twin["status"] = {"checkpoint": copy.deepcopy(CHECKPOINT)}
    adapter = adapter_for("volcano")
    gang = adapter.render_operator_gang(twin, cluster_scheduler_name="volcano", epoch=3, hub_id="hub-a",
                                        namespace=source["metadata"]["namespace"])
    body = member_copy(kind, source, gang, role_paths=translation.role_paths)
    for path in translation.role_paths.values():
        template = template_at(body, path)
        assert template is not None
        for container in template["spec"]["containers"]:
            assert _env(container)["FEDERATOR_RESTORE_FROM"] == "/ckpt/step-140"
    first = adapter.render_operator_gang(twin, cluster_scheduler_name="volcano", epoch=2, hub_id="hub-a",
                                         namespace=source["metadata"]["namespace"])
    body = member_copy(kind, source, first, role_paths=translation.role_paths)
    for path in translation.role_paths.values():
        template = template_at(body, path)
        assert template is not None
        assert all("FEDERATOR_RESTORE_FROM" not in _env(c) for c in template["spec"]["containers"])
