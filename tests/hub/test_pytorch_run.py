"""A real distributed training run through the hub (issue 27): PyTorch DDP, gloo on CPU, two workers.

A real hub with its controllers and a simulated member whose kubelet runs pods as local processes
(profile processRuntime, federator/sim/processes.py). The job is submitted with real kubectl (`kubectl
apply` on the hub) with `framework: pytorch`: the hub places it, renders the gang's headless Service, the
pods' hostname/subdomain and torchrun's variables (MASTER_ADDR = worker 0's DNS name, MASTER_PORT,
WORLD_SIZE, RANK); the member runs examples/pytorch-ddp/train.py with Debian's python3-torch
(/usr/bin/python3; `make test` installs it): the two processes rendezvous through those names, train with
DDP's all-reduce, rank 0 writes a checkpoint every step, and the job ends Succeeded with the training log
readable through `federator logs`.

The second run kills worker 1's process mid-training: the role's restartPolicy OnFailure brings the gang's
failed pods back and training resumes from the checkpoint (the resume line is asserted, with a step the
first attempt reached).

The checkpoint goes through a volume, as on a real cluster: the job's full pod template mounts a
persistentVolumeClaim named the same for both workers at /checkpoints (and /dev/shm as a memory-backed
emptyDir), and train.py writes there (CHECKPOINT_DIR=/checkpoints). The process runtime maps the claim to one
directory of the member, `<root>/<cluster>/pvc/<namespace>/<claim>`, shared by every pod that names it
(docs/simulator-fidelity.md), so the test finds the checkpoint there and the restarted gang reads it back.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
from pathlib import Path
from typing import Any

import pytest

from federator.sim.profile import ProcessRuntimeSpec

from ..controllers.jobtest_support import API, phase, wait_until
from ..controllers.lifecycle_support import CLUSTER_LABEL, Env, RunningFederation, lifecycle_env

CLUSTER = "onprem-rdma-a100"
NS = "default"
PYTHON = "/usr/bin/python3"
TRAIN = Path(__file__).resolve().parents[2] / "examples" / "pytorch-ddp" / "train.py"
CHECKPOINT_MOUNT = "/checkpoints"
STEP = re.compile(r"\[rank (\d)\] step (\d+)/(\d+) loss [0-9.]+ all-reduced loss [0-9.]+$")

pytestmark = pytest.mark.xdist_group("pytorch-run")


def torch_present() -> None:
    probe = subprocess.run([PYTHON, "-c", "import torch.distributed"], capture_output=True, text=True)
    assert probe.returncode == 0, (
        f"{PYTHON} cannot import torch ({probe.stderr.strip()[-200:]}): `make test` installs Debian's "
        "python3-torch; apt-get install -y --no-install-recommends python3-torch")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def ddp_job(name: str, *, steps: int, step_seconds: float = 0.0, restart_policy: str = "Never") -> dict[str, Any]:
    env = [{"name": "TRAIN_STEPS", "value": str(steps)}, {"name": "CHECKPOINT_DIR", "value": CHECKPOINT_MOUNT},
           {"name": "STEP_SECONDS", "value": str(step_seconds)}]
    container = {"name": "pytorch", "image": "pytorch/pytorch:2.3.0-cpu", "command": [PYTHON, str(TRAIN)],
                 "env": env, "resources": {"requests": {"cpu": "1", "memory": "2Gi"}, "limits": {"memory": "2Gi"}},
                 "volumeMounts": [{"name": "checkpoints", "mountPath": CHECKPOINT_MOUNT},
                                  {"name": "shm", "mountPath": "/dev/shm"}]}
    volumes = [{"name": "checkpoints", "persistentVolumeClaim": {"claimName": claim(name)}},
               {"name": "shm", "emptyDir": {"medium": "Memory", "sizeLimit": "256Mi"}}]
    return {
        "apiVersion": API, "kind": "TrainingJob", "metadata": {"name": name, "namespace": NS},
        "spec": {
            "framework": "pytorch",
            # a port of its own: the pods share this machine's network namespace (docs/simulator-fidelity.md)
            "frameworkSettings": {"port": free_port()},
            "backoffLimit": 10,
            "roles": [{"name": "worker", "replicas": 2, "restartPolicy": restart_policy, "template": {
                "spec": {"containers": [container], "volumes": volumes}}}],
            "placement": {"clusterSelector": {"matchLabels": {CLUSTER_LABEL: CLUSTER}}},
        },
    }


def claim(job: str) -> str:
    """The checkpoint claim of a job: one name for every worker, so they share the volume."""
    return f"{job}-checkpoints"


def claim_directory(tmp_path: Path, job: str) -> Path:
    """Where the process runtime keeps a claim's files (federator/sim/processes.py `_volume_sources`)."""
    return runtime_root(tmp_path) / CLUSTER / "pvc" / NS / claim(job)


async def apply(env: Env, job: dict[str, Any]) -> None:
    code, out, err = await env.hub.kubectl("admin", "apply", "-f", "-", stdin=json.dumps(job))
    assert code == 0, err
    assert f"trainingjob.federator.dev/{job['metadata']['name']} created" in out


async def federator_logs(env: Env, name: str, *args: str) -> str:
    code, out, err = await env.hub.cli("admin", "logs", name, "-n", NS, *args, timeout=120)
    assert code == 0, err
    return out


def runtime_root(tmp_path: Path) -> Path:
    return tmp_path / "processes"


def runtime_federation(tmp_path: Path) -> RunningFederation:
    return RunningFederation(tmp_path / "members", run_seconds=None,
                             process_runtime=ProcessRuntimeSpec(root=str(runtime_root(tmp_path))))


async def test_pytorch_ddp_trains_through_the_hub_and_resumes_after_a_worker_is_killed(tmp_path: Path) -> None:
    torch_present()
    async with lifecycle_env(tmp_path, [CLUSTER], federation=runtime_federation(tmp_path)) as env:
        # ---- one run, start to end
        await apply(env, ddp_job("ddp", steps=5))
        job = await env.api.wait_job(NS, "ddp", lambda j: phase(j) in ("Succeeded", "Failed"), timeout=300,
                                     what="the training to end")
        logs = await federator_logs(env, "ddp")
        assert phase(job) == "Succeeded", logs
        lines = logs.splitlines()
        # both ranks met at worker 0's DNS name through the gang's Service, and trained every step together
        rendezvous = [line for line in lines if "rendezvous with" in line]
        assert len(rendezvous) == 2, logs
        assert all(re.search(r"rendezvous with (ddp-[a-z0-9]+)-worker-0\.\1\.default\.svc:\d+ as rank [01] of 2 \(127\.",
                             line) for line in rendezvous), rendezvous
        steps = sorted((int(m.group(1)), int(m.group(2))) for line in lines if (m := STEP.search(line)))
        assert steps == [(rank, step) for rank in (0, 1) for step in range(1, 6)], logs
        assert sum("training done at step 5" in line for line in lines) == 2
        assert f"[worker-0] [rank 0] checkpoint step 5 saved to {CHECKPOINT_MOUNT}/latest.pt" in logs
        # written through the claim's volume: the member's one directory for it
        assert (claim_directory(tmp_path, "ddp") / "latest.pt").is_file()
        one = await federator_logs(env, "ddp", "--role", "worker", "--index", "1")
        assert one.startswith("[rank 1] rendezvous with ") and "no checkpoint in" in one

        # ---- a second run: worker 1's process is killed mid-training; OnFailure restarts, training resumes
        await apply(env, ddp_job("ddp-resume", steps=20, step_seconds=0.5, restart_policy="OnFailure"))

        async def reached(step: int) -> str | None:
            code, text = await env.hub.request(
                "GET", f"/apis/federator.dev/v1alpha1/namespaces/{NS}/trainingjobs/ddp-resume/log"
                       "?role=worker&index=0")
            return text if code == 200 and f"checkpoint step {step} saved" in text else None

        # (18 steps of 0.5 s still to go: time enough to find the process, however loaded the machine)
        await wait_until(lambda: reached(2), timeout=300, what="rank 0's checkpoint of step 2")
        running = await env.api.get(NS, "ddp-resume")
        uid = running["metadata"]["uid"]
        sim = env.fed.sims[CLUSTER]
        assert sim.runtime is not None
        (victim,) = [p for p in await env.live_pods(CLUSTER, uid) if p["metadata"]["name"].endswith("-worker-1")]
        pids = sim.runtime.pids(victim["metadata"]["uid"])
        assert len(pids) == 1, f"worker 1 runs no process ({pids}): the training ended before it was killed"
        pid = pids[0]
        os.killpg(pid, signal.SIGKILL)

        job = await env.api.wait_job(NS, "ddp-resume", lambda j: phase(j) in ("Succeeded", "Failed"),
                                     timeout=300, what="the resumed training to end")
        logs = await federator_logs(env, "ddp-resume")
        assert phase(job) == "Succeeded", logs
        resumed = [int(m.group(1)) for m in re.finditer(r"resumed from checkpoint /checkpoints/latest\.pt at step (\d+)",
                                                         logs)]
        assert resumed and min(resumed) >= 2, logs  # both ranks of the new attempt start from the checkpoint
        assert sum("training done at step 20" in line for line in logs.splitlines()) == 2, logs
        assert (claim_directory(tmp_path, "ddp-resume") / "latest.pt").is_file()
        restarted = await env.live_pods(CLUSTER, uid)
        assert victim["metadata"]["uid"] not in {p["metadata"]["uid"] for p in restarted}
        assert not sim.runtime.pids()  # every process of the job has ended
    assert shutil.which(PYTHON)
