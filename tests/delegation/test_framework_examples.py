"""The framework examples (examples/pytorch-ddp/pytorch-ddp.yaml, tensorflow-ps.yaml, paddle-ps.yaml) as the hub
renders them for a member: every pod keeps the template's volumes (the dataset claim read-only, /dev/shm in
memory, the checkpoint claim) and gets its framework's variables on the container the operator would set them on,
naming its peers by their DNS names under the gang's headless Service."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from federator.apis.trainingjob import validate_trainingjob
from federator.delegation import adapter_for
from federator.delegation.adapter import POD_GVK, SERVICE_GVK, MemberObject

JSON = dict[str, Any]
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def rendered(name: str) -> tuple[JSON, list[MemberObject]]:
    job: JSON = yaml.safe_load((EXAMPLES / name).read_text(encoding="utf-8"))
    assert validate_trainingjob(job) == []
    job["metadata"] |= {"uid": "5e0c3f52-8f0e-4b61-9d0c-2a7e4c1d9b11", "resourceVersion": "3", "generation": 1}
    job["status"] = {"phase": "Placed", "placement": {"cluster": "onprem", "epoch": 1}}
    objects = adapter_for("volcano").render(job, cluster_scheduler_name="volcano", epoch=1, hub_id="hub",
                                            namespace=job["metadata"]["namespace"])
    return job, objects


def pods(objects: list[MemberObject]) -> dict[tuple[str, int], JSON]:
    return {(o.labels["federator.dev/role"], int(o.labels["federator.dev/index"])): o.body
            for o in objects if o.gvk == POD_GVK}


def env(container: JSON) -> dict[str, str]:
    return {e["name"]: e.get("value", "") for e in container.get("env") or ()}


def dns(pod: JSON) -> str:
    return f"{pod['metadata']['name']}.{pod['spec']['subdomain']}.{pod['metadata']['namespace']}.svc"


def assert_volumes_kept(job: JSON, all_pods: dict[tuple[str, int], JSON]) -> None:
    templates = {r["name"]: r["template"]["spec"] for r in job["spec"]["roles"]}
    for (role, _), pod in all_pods.items():
        assert pod["spec"]["volumes"] == templates[role]["volumes"]
        for ours, theirs in zip(pod["spec"]["containers"], templates[role]["containers"], strict=True):
            assert ours["volumeMounts"] == theirs["volumeMounts"]


def test_pytorch_ddp_workers_get_torchruns_variables_and_keep_their_volumes() -> None:
    job, objects = rendered("pytorch-ddp/pytorch-ddp.yaml")
    all_pods = pods(objects)
    assert sorted(all_pods) == [("worker", i) for i in range(4)]
    assert_volumes_kept(job, all_pods)
    master = dns(all_pods[("worker", 0)])
    for (_, index), pod in all_pods.items():
        variables = env(pod["spec"]["containers"][0])
        assert (variables["MASTER_ADDR"], variables["MASTER_PORT"]) == (master, "23456")
        assert (variables["WORLD_SIZE"], variables["RANK"]) == ("4", str(index))
        assert variables["CHECKPOINT_DIR"] == "/checkpoints"  # the job's own, kept
    assert sum(o.gvk == SERVICE_GVK for o in objects) == 1


def test_tensorflow_ps_pods_get_tf_config_naming_every_role() -> None:
    job, objects = rendered("tensorflow-ps.yaml")
    all_pods = pods(objects)
    assert sorted(all_pods) == [("chief", 0), ("ps", 0), ("ps", 1), *[("worker", i) for i in range(4)]]
    assert_volumes_kept(job, all_pods)
    cluster = {role: [f"{dns(all_pods[(role, i)])}:2222" for i in range(count)]
               for role, count in (("ps", 2), ("chief", 1), ("worker", 4))}
    for (role, index), pod in all_pods.items():
        (container,) = pod["spec"]["containers"]
        assert container["name"] == "tensorflow"
        config = json.loads(env(container)["TF_CONFIG"])
        assert config["cluster"] == cluster and config["task"] == {"type": role, "index": index}


def test_paddle_ps_pservers_and_trainers_get_paddles_role_variables() -> None:
    job, objects = rendered("paddle-ps.yaml")
    all_pods = pods(objects)
    assert sorted(all_pods) == [("pserver", 0), ("pserver", 1), *[("trainer", i) for i in range(4)]]
    assert_volumes_kept(job, all_pods)
    servers = ",".join(f"{dns(all_pods[('pserver', i)])}:36543" for i in range(2))
    for (role, index), pod in all_pods.items():
        variables = env(pod["spec"]["containers"][0])
        assert variables["TRAINING_ROLE"] == ("PSERVER" if role == "pserver" else "TRAINER")
        assert variables["PADDLE_PSERVERS_IP_PORT_LIST"] == servers
        assert (variables["PADDLE_TRAINERS_NUM"], variables["PADDLE_TRAINER_ID"]) == ("4", str(index))
        assert (variables["POD_IP"], variables["PADDLE_PORT"]) == (dns(pod), "36543")
