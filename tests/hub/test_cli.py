"""The `federator` CLI as a real process against a real hub: tables and -o json|yaml, watch,
describe with a placement explanation, delete, cluster registration from a member kubeconfig,
and every error path as one line on stderr with a non-zero exit code."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from federator import __version__
from federator.dev.certs import generate_ca, write_kubeconfig

from .hubtest_support import EXAMPLE_FILE, ROOT, RunningHub, clusters_url, job, jobs_url
from .test_credentials import MEMBER_TOKEN, assert_no_secret


def _one_error_line(err: str) -> str:
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    assert "Traceback" not in err
    return lines[0]


async def _set_status(hub: RunningHub, namespace: str, name: str, status: dict[str, Any]) -> None:
    code, current = await hub.request("GET", jobs_url(namespace, name))
    assert code == 200
    current["status"] = status
    code, answer = await hub.request("PUT", jobs_url(namespace, name, "status"), body=current)
    assert code == 200, answer


async def test_get_jobs_in_every_format(hub: RunningHub) -> None:
    for namespace, name in (("default", "a"), ("default", "b"), ("team-b", "c")):
        assert (await hub.request("POST", jobs_url(namespace), body=job(namespace, name)))[0] == 201
    await _set_status(hub, "default", "a", {"phase": "Running", "placement": {"cluster": "onprem-a100", "epoch": 2}})

    code, out, err = await hub.cli("researcher", "get", "jobs")
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0].split() == ["NAME", "PHASE", "CLUSTER", "AGE"]
    assert lines[1].split()[:3] == ["a", "Running", "onprem-a100"]
    assert lines[2].split()[:3] == ["b", "<none>", "<none>"]
    assert lines[0].index("PHASE") == lines[1].index("Running")  # aligned

    code, out, err = await hub.cli("viewer", "get", "jobs", "-A", "-o", "wide")
    assert code == 0, err
    assert out.splitlines()[0].split() == ["NAMESPACE", "NAME", "PHASE", "CLUSTER", "AGE", "EPOCH", "PRIORITY",
                                           "QUEUE", "MODE"]
    assert [line.split()[:2] for line in out.splitlines()[1:]] == [["default", "a"], ["default", "b"],
                                                                  ["team-b", "c"]]

    code, out, err = await hub.cli("viewer", "get", "jobs", "-n", "team-b", "-o", "json")
    assert code == 0, err
    listed = json.loads(out)
    assert listed["kind"] == "List" and [i["metadata"]["name"] for i in listed["items"]] == ["c"]

    code, out, err = await hub.cli("researcher", "get", "jobs", "a", "-o", "yaml")
    assert code == 0, err
    assert yaml.safe_load(out)["status"]["phase"] == "Running"

    code, out, err = await hub.cli("researcher", "get", "jobs", "-o", "name")
    assert code == 0 and out.split() == ["trainingjob.federator.dev/a", "trainingjob.federator.dev/b"], err

    code, out, err = await hub.cli("researcher", "get", "jobs", "-n", "empty")
    assert code == 1 and "forbidden" in err  # researcher owns only default
    code, out, err = await hub.cli("viewer", "get", "jobs", "-n", "empty")
    assert code == 0 and out == "" and err.strip() == "No resources found in empty namespace."


async def test_get_jobs_watch_prints_changes(hub: RunningHub) -> None:
    assert (await hub.request("POST", jobs_url("default"), body=job("default", "w")))[0] == 201
    env = {**os.environ, "KUBECONFIG": str(hub.kubeconfigs["viewer"]), "PYTHONUNBUFFERED": "1"}
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "federator.cli", "get", "jobs", "-w", cwd=str(ROOT), env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    assert process.stdout is not None
    try:
        async def line() -> list[str]:
            assert process.stdout is not None
            return (await asyncio.wait_for(process.stdout.readline(), 30)).decode().split()

        assert await line() == ["NAME", "PHASE", "CLUSTER", "AGE"]
        assert (await line())[:2] == ["w", "<none>"]
        await _set_status(hub, "default", "w", {"phase": "Placed", "placement": {"cluster": "cloud-h100"}})
        assert (await line())[:3] == ["w", "Placed", "cloud-h100"]
        assert (await hub.request("POST", jobs_url("default"), body=job("default", "w2")))[0] == 201
        assert (await line())[:2] == ["w2", "<none>"]
    finally:
        process.kill()
        await process.wait()


async def test_describe_job_explains_placement(hub: RunningHub) -> None:
    assert (await hub.request("POST", jobs_url("vision"), body=job("vision", "resnet-ps")))[0] == 201
    await _set_status(hub, "vision", "resnet-ps", {
        "phase": "Running",
        "placement": {"cluster": "onprem-a100", "epoch": 1, "decisionResourceVersion": "42", "scores": [
            {"cluster": "onprem-a100", "total": 212.5, "gpuModel": "A100", "nodes": 3, "parts": [
                {"plugin": "data-locality", "raw": 1.0, "weight": 2.0, "weighted": 200.0},
                {"plugin": "cost", "raw": 2.75, "weight": 0.25, "weighted": 12.5}]},
            {"cluster": "onprem-b", "total": 90.25, "gpuModel": "H100", "nodes": 2},
            {"cluster": "onprem-c", "total": 80.0, "outranked": True},
        ], "whyNot": [
            {"cluster": "cloud-h100", "filter": "Network", "reason": "NoRDMA",
             "message": "the job needs rdma; the cluster has ethernet"},
            {"cluster": "cloud-small", "filter": "GangFit", "reason": "InsufficientGPU",
             "message": "needs 32 GPUs; at most 8 free"},
        ]},
        "history": [{"time": "2026-01-01T00:00:00Z", "event": "Placed", "cluster": "onprem-a100", "epoch": 1,
                     "message": "dataset imagenet-22k is cached here"}],
        "podCounts": {"ps": {"running": 2}, "worker": {"running": 7, "pending": 1}},
        "conditions": [{"type": "Admitted", "status": "True", "reason": "GangScheduled",
                        "lastTransitionTime": "2026-01-01T00:00:05Z", "message": "volcano admitted the gang"}],
    })
    code, out, err = await hub.cli("admin", "describe", "job", "resnet-ps", "-n", "vision")
    assert code == 0, err
    assert "Placed in onprem-a100 (epoch 1)." in out
    scores = out[out.index("  Score:"):].splitlines()
    assert scores[0] == "  Score:      212.5 (A100, 3 nodes), the sum of each score plugin's weighted part:"
    assert [line.split() for line in scores[1:4]] == [["PLUGIN", "RAW", "WEIGHT", "WEIGHTED"],
                                                      ["data-locality", "1", "2", "200.0"],
                                                      ["cost", "2.75", "0.25", "12.5"]]
    assert scores[4].startswith("  Runners-up")
    assert [line.split() for line in scores[6:8]] == [["onprem-b", "90.2", "H100", "2"],
                                                      ["onprem-c", "at", "most", "80.0", "-", "-"]]
    why_not = out[out.index("Why not the other clusters:"):]
    assert why_not.splitlines()[1].split() == ["CLUSTER", "FILTER", "REASON", "MESSAGE"]
    assert why_not.splitlines()[2].split()[:3] == ["cloud-h100", "Network", "NoRDMA"]
    assert why_not.splitlines()[3].split()[:3] == ["cloud-small", "GangFit", "InsufficientGPU"]
    assert "dataset imagenet-22k is cached here" in out
    pods = out[out.index("Pods:"):].splitlines()
    assert pods[2].split() == ["ps", "0", "2", "0", "0"] and pods[3].split() == ["worker", "1", "7", "0", "0"]
    assert "GangScheduled" in out and "Gang size:  10 pods" in out and "Clusters:   tier=research" in out


async def test_submit_several_documents_and_delete(hub: RunningHub, tmp_path: Path) -> None:
    docs = [job("default", "one"), job("default", "two"), {"apiVersion": "v1", "kind": "List",
                                                         "items": [job("default", "three")]}]
    manifest = tmp_path / "jobs.yaml"
    manifest.write_text(yaml.safe_dump_all(docs))
    code, out, err = await hub.cli("researcher", "submit", "-f", str(manifest))
    assert code == 0, err
    assert out.splitlines() == [f"trainingjob.federator.dev/{n} created" for n in ("one", "two", "three")]
    code, out, err = await hub.cli("researcher", "submit", "-f", "-", stdin=json.dumps(job("default", "four")))
    assert code == 0 and out.strip() == "trainingjob.federator.dev/four created", err
    # One failing document is reported on its own line; the others still go in.
    code, out, err = await hub.cli("researcher", "submit", "-f", str(manifest), "-f", "-",
                                   stdin=json.dumps(job("default", "five")))
    assert code == 1
    assert err.count("Error from server (AlreadyExists)") == 3 and "Traceback" not in err
    assert out.strip() == "trainingjob.federator.dev/five created"
    code, out, err = await hub.cli("researcher", "delete", "job", "one", "two")
    assert code == 0, err
    assert out.splitlines() == ['trainingjob.federator.dev "one" deleted', 'trainingjob.federator.dev "two" deleted']
    listing = (await hub.request("GET", jobs_url("default")))[1]
    assert sorted(i["metadata"]["name"] for i in listing["items"]) == ["five", "four", "three"]


async def test_cluster_add_list_remove_with_a_member_kubeconfig(hub: RunningHub, tmp_path: Path) -> None:
    member = write_kubeconfig(tmp_path / "member.kubeconfig", server="https://10.20.30.40:6443",
                              ca_pem=generate_ca()[0], token=MEMBER_TOKEN, user="member-admin",
                              cluster_name="gpu-east")
    code, out, err = await hub.cli(
        "admin", "cluster", "add", "gpu-east", "--kubeconfig", str(member), "--location", "cloud",
        "--provider", "aws", "--region", "us-east-1", "--network", "ethernet", "--bandwidth-gbps", "200",
        "--scheduler", "coscheduling", "--label", "tier=research", "--gpu-model", "H100",
        "--dataset", "imagenet-22k=1500000000000", "--cost-per-gpu-hour", "2.5")
    assert code == 0, err
    assert out.strip() == "membercluster.federator.dev/gpu-east registered"
    rt = hub.context.kind("MemberCluster")
    stored = await hub.context.storage.get(rt, namespace=None, name="gpu-east")
    connection = stored["spec"]["connection"]
    assert connection["server"] == "https://10.20.30.40:6443" and connection["credentials"] == {"token": MEMBER_TOKEN}
    assert connection["certificateAuthorityData"]
    assert stored["spec"]["datasets"] == [{"name": "imagenet-22k", "sizeBytes": 1500000000000}]

    registration = tmp_path / "onprem.yaml"
    from .test_credentials import token_cluster

    registration.write_text(yaml.safe_dump(token_cluster("onprem-a100")))
    code, out, err = await hub.cli("admin", "cluster", "add", "-f", str(registration))
    assert code == 0 and "membercluster.federator.dev/onprem-a100 registered" in out, err

    code, out, err = await hub.cli("viewer", "cluster", "list")
    assert code == 0, err
    assert out.splitlines()[0].split() == ["NAME", "READY", "LOST", "FABRIC", "GPUS", "AGE"]
    assert [line.split()[:4] for line in out.splitlines()[1:]] == [["gpu-east", "<none>", "<none>", "ethernet"],
                                                                  ["onprem-a100", "<none>", "<none>", "rdma"]]
    code, shown, err = await hub.cli("researcher", "get", "clusters", "-o", "yaml")
    assert code == 0, err
    assert_no_secret(shown + out + err, "CLI output")
    assert "connection" not in shown  # researchers see no connection at all
    code, shown, err = await hub.cli("admin", "get", "clusters", "-o", "yaml")
    assert code == 0, err
    assert_no_secret(shown + err, "CLI output")
    assert "<redacted>" in shown

    code, out, err = await hub.cli("researcher", "cluster", "add", "-f", str(registration))
    assert code == 1 and _one_error_line(err).startswith("Error from server (Forbidden):")
    code, out, err = await hub.cli("admin", "cluster", "remove", "gpu-east")
    assert code == 0 and out.strip() == 'membercluster.federator.dev "gpu-east" removed', err
    assert (await hub.request("GET", clusters_url("gpu-east")))[0] == 404


@pytest.mark.parametrize(("args", "who", "stdin", "code", "starts"), [
    (("get", "jobs", "nope"), "researcher", None, 1,
     'Error from server (NotFound): trainingjobs.federator.dev "nope" not found'),
    (("delete", "job", "nope"), "researcher", None, 1, "Error from server (NotFound):"),
    (("describe", "job", "nope"), "researcher", None, 1, "Error from server (NotFound):"),
    (("submit", "-f", "/nonexistent.yaml"), "researcher", None, 2, "error: /nonexistent.yaml: no such file"),
    (("submit", "-f", "-"), "researcher", "kind: [unclosed\n", 2, "error: <stdin>: not valid YAML or JSON at line"),
    (("submit", "-f", "-"), "researcher", "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\n", 2,
     "error: <stdin>: object 1 is a v1/Pod, not a federator.dev/v1alpha1 TrainingJob"),
    (("submit", "-f", "-"), "researcher", "", 2, "error: <stdin>: no objects in it"),
    (("submit", "-f", str(EXAMPLE_FILE)), "researcher", None, 1, "Error from server (Forbidden):"),
    (("submit", "-f", "-"), "researcher", json.dumps(job("default", "x", priority="high")), 1,
     'Error from server (Invalid): TrainingJob.federator.dev "x" is invalid: spec.priority'),
    (("get", "jobs"), "wrong", None, 1, "error: You must be logged in to the server (Unauthorized)"),
    (("get", "jobs"), "untrusting", None, 1, "error: cannot verify the certificate of the hub"),
    (("cluster", "add", "c1", "--kubeconfig", "/nonexistent"), "admin", None, 2,
     "error: cluster add c1: missing --location, --network, --bandwidth-gbps, --scheduler"),
    (("kubeconfig", "--state-dir", "/nonexistent"), "admin", None, 1, "error: no admin kubeconfig at"),
])
async def test_cli_errors_are_one_line(hub: RunningHub, args: tuple[str, ...], who: str, stdin: str | None,
                                       code: int, starts: str) -> None:
    exit_code, out, err = await hub.cli(who, *args, stdin=stdin)
    assert exit_code == code, (out, err)
    assert _one_error_line(err).startswith(starts), err


async def test_cli_errors_without_a_hub(tmp_path: Path, hub: RunningHub) -> None:
    # A kubeconfig naming a port nobody listens on.
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        closed_port = probe.getsockname()[1]
    dead = write_kubeconfig(tmp_path / "dead.kubeconfig", server=f"https://127.0.0.1:{closed_port}",
                            ca_pem=generate_ca()[0], token="t0k3n-unused-aaaaaaaaaaaa", user="u")
    code, out, err = await hub.cli(None, "get", "jobs", env={"KUBECONFIG": str(dead)})
    assert code == 1
    assert _one_error_line(err).startswith(f"error: cannot reach the hub at https://127.0.0.1:{closed_port}")
    code, out, err = await hub.cli(None, "submit", "-f", str(EXAMPLE_FILE), env={"KUBECONFIG": str(dead)})
    assert code == 1 and _one_error_line(err).startswith("error: cannot reach the hub")
    code, out, err = await hub.cli(None, "get", "jobs", env={"KUBECONFIG": str(tmp_path / "missing")})
    assert code == 1 and _one_error_line(err).startswith(f"error: no kubeconfig at {tmp_path / 'missing'}")
    (tmp_path / "garbage").write_text("{{{{ not yaml")
    code, out, err = await hub.cli(None, "get", "jobs", "--kubeconfig", str(tmp_path / "garbage"))
    assert code == 1 and _one_error_line(err).startswith("error: cannot use kubeconfig")


async def test_version_and_kubeconfig(hub: RunningHub, tmp_path: Path) -> None:
    code, out, err = await hub.cli("viewer", "version")
    assert code == 0, err
    assert out.splitlines() == [f"Client Version: federator {__version__}",
                                f"Server Version: federator {__version__} (Kubernetes API v1.30.2) at {hub.url}"]
    code, out, err = await hub.cli(None, "version", "--client")
    assert code == 0 and out.strip() == f"Client Version: federator {__version__}"
    state = tmp_path / "state"
    state.mkdir()
    (state / "researcher.kubeconfig").write_text(hub.kubeconfigs["researcher"].read_text())
    code, out, err = await hub.cli(None, "kubeconfig", "--role", "researcher", "--state-dir", str(state))
    assert code == 0 and out.strip() == str((state / "researcher.kubeconfig").resolve())
    code, out, err = await hub.cli(None, "kubeconfig", "--role", "researcher", "--state-dir", str(state), "--export")
    assert code == 0 and out.strip() == f"export KUBECONFIG={(state / 'researcher.kubeconfig').resolve()}"
