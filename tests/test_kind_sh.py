"""e2e/kind.sh where no Docker runs: its edges, and the parts that need only a Kubernetes API.

- `bash e2e/kind.sh --help` prints the usage (with the pinned versions) and exits 0;
- it stops with one line, before touching anything, when docker, kind or kubectl is not on PATH, and on
  an unknown command or a stray argument (quoted, cut short, never run);
- its node-advertising step (fake nvidia.com/gpu and rdma/hca in node status, the GPU, RDMA and dataset
  labels) runs with the real kubectl against simulated clusters (`federator sim`, which speaks the
  Kubernetes API), and the hub's snapshot builder reads those nodes as the GPUs, fabric and datasets the
  script's registrations declare; the registrations pass the hub's MemberCluster validation.

Creating kind clusters, installing Volcano and deploy/member, and the e2e run itself need Docker:
e2e/test_kind.py, README "End to end on kind".
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from federator.apis.membercluster import validate_membercluster
from federator.clusters.snapshot_builder import gpu_model_name, node_state

ROOT = Path(__file__).resolve().parents[1]
KIND_SH = ROOT / "e2e" / "kind.sh"
BASH = shutil.which("bash") or "/bin/bash"
FEDERATOR = str(Path(sys.executable).parent / "federator")


def _path_without(*tools: str, tmp_path: Path) -> str:
    """PATH as it is, except that `tools` cannot be found there: a directory holding one of them is
    replaced by a directory of links to everything else in it."""
    parts = []
    for index, entry in enumerate(os.environ.get("PATH", "").split(os.pathsep)):
        directory = Path(entry)
        if not entry or not directory.is_dir():
            continue
        if not any((directory / tool).exists() for tool in tools):
            parts.append(entry)
            continue
        shadow = tmp_path / f"path{index}"
        shadow.mkdir()
        for item in directory.iterdir():
            if item.name not in tools:
                (shadow / item.name).symlink_to(item)
        parts.append(str(shadow))
    return os.pathsep.join(parts)


def _kind_sh(*args: str, path: str | None = None, state: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    if path is not None:
        env["PATH"] = path
    if state is not None:
        env["FEDERATOR_KIND_STATE"] = str(state)
    return subprocess.run([BASH, str(KIND_SH), *args], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=60)


def test_help_exits_0_and_names_the_commands_and_pinned_versions() -> None:
    for flag in ("--help", "-h", "help"):
        result = _kind_sh(flag)
        assert result.returncode == 0, result.stderr
        assert result.stderr == ""
        for word in ("up ", "hub ", "test ", "down ", "FEDERATOR_E2E_KIND=1", "fed-a", "fed-b", "fed-c",
                     "kindest/node:v1.32.2@sha256:", "Volcano v1.12.4",
                     "volcano-sh/volcano/v1.12.4/installer/volcano-development.yaml",
                     "deploy/member/schedulers/volcano"):
            assert word in result.stdout, (word, result.stdout)


@pytest.mark.parametrize("tool", ["docker", "kind", "kubectl"])
def test_a_missing_tool_stops_it_with_one_line_before_anything_is_touched(tool: str, tmp_path: Path) -> None:
    state = tmp_path / "state"
    result = _kind_sh("up", path=_path_without(tool, tmp_path=tmp_path), state=state)
    assert result.returncode == 1, (result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: not on PATH: ") and tool in lines[0].split("(")[0], lines
    assert result.stdout == ""
    assert not state.exists()


def test_every_missing_tool_is_named_in_the_one_line(tmp_path: Path) -> None:
    result = _kind_sh("down", path=_path_without("docker", "kind", tmp_path=tmp_path), state=tmp_path / "s")
    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    named = lines[0].split("(")[0]
    assert "docker" in named and "kind" in named and "kubectl" not in named, lines


@pytest.mark.parametrize("args", [
    [], ["frobnicate"], ["up", "--force"], ["down", "now"], ["--verbose"], ["-x" * 5000], ["up\nrm -rf /"],
    ["$(touch {marker})"], ["`touch {marker}`"],
])
def test_bad_commands_get_one_line_and_exit_2_running_nothing(args: list[str], tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    result = _kind_sh(*(a.format(marker=marker) for a in args), state=tmp_path / "state")
    assert result.returncode == 2, (args, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), (args, result.stderr)
    assert lines[0].endswith("(see e2e/kind.sh --help)") and len(lines[0]) < 200, lines
    assert result.stdout == ""
    assert not marker.exists() and not (tmp_path / "state").exists()


@pytest.mark.parametrize("state", ["/tmp/a b", "/tmp/../etc", "/", "/tmp/x/", "/tmp/./x", "/tmp/a\nb",
                                   "/tmp/a:b", "/tmp/#x", "/tmp/" + "x" * 5000])
def test_a_state_dir_that_cannot_go_into_a_registration_is_refused_with_one_line(state: str) -> None:
    env = {**os.environ, "FEDERATOR_KIND_STATE": state}
    for command in ("up", "down", "test", "hub"):
        result = subprocess.run([BASH, str(KIND_SH), command], cwd=ROOT, env=env, capture_output=True, text=True,
                                timeout=60)
        assert result.returncode == 2, (command, state, result.stderr)
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: FEDERATOR_KIND_STATE must be"), lines
        assert len(lines[0]) < 300


def test_the_image_it_builds_is_the_one_deploy_member_runs(tmp_path: Path) -> None:
    found = _source_and_run(tmp_path, "member_image")
    assert found.returncode == 0, found.stderr
    rendered = subprocess.run(["kubectl", "kustomize", str(ROOT / "deploy" / "member" / "schedulers" / "volcano")],
                              capture_output=True, text=True, timeout=60, check=True).stdout
    agents = [d for d in yaml.safe_load_all(rendered)
              if d and d["kind"] == "Deployment" and d["metadata"]["name"] == "federator-agent"]
    assert len(agents) == 1
    images = {c["image"] for c in agents[0]["spec"]["template"]["spec"]["containers"]}
    assert found.stdout.splitlines() == [images.pop()] and not images


# ---------------------------------------------------------------- against simulated clusters


def _profile(name: str) -> dict[str, Any]:
    """A kind cluster's shape: one control-plane node (labelled as kind labels it) and two bare workers."""
    return {
        "apiVersion": "sim.federator.dev/v1alpha1", "kind": "ClusterProfile", "name": name,
        "location": {"type": "on-prem", "region": "laptop"},
        "network": {"fabric": "ethernet", "bandwidthGbps": 10},
        "schedulers": [{"type": "default"}],
        "kubernetesVersion": "v1.32.2",
        "nodePools": [
            {"name": "control-plane", "count": 1, "cpu": "4", "memory": "8Gi",
             "labels": {"node-role.kubernetes.io/control-plane": ""}},
            {"name": "worker", "count": 2, "cpu": "8", "memory": "16Gi"},
        ],
    }


@pytest.fixture(scope="module")
def kind_like(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """Simulated clusters fed-a (RDMA in kind.sh) and fed-c (Ethernet) as kind.sh's STATE/admin kubeconfigs."""
    work = tmp_path_factory.mktemp("kind-sh")
    profiles = []
    for name in ("fed-a", "fed-c"):
        path = work / f"{name}.yaml"
        path.write_text(yaml.safe_dump(_profile(name)))
        profiles += ["--profile", str(path)]
    log = (work / "sim.log").open("w")
    sim = subprocess.Popen([FEDERATOR, "sim", *profiles, "--state-dir", str(work / "sim")], cwd=work,
                           stdout=subprocess.PIPE, stderr=log, text=True)
    serving = threading.Event()

    def read() -> None:
        assert sim.stdout is not None
        for line in sim.stdout:
            if line.startswith("federator sim: serving"):
                serving.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        assert serving.wait(60), (work / "sim.log").read_text()[-2000:]
        state = work / "state"
        (state / "admin").mkdir(parents=True)
        for name in ("fed-a", "fed-c"):
            shutil.copy(work / "sim" / f"{name}.kubeconfig", state / "admin" / f"{name}.kubeconfig")
        yield state
    finally:
        sim.terminate()
        sim.wait(30)
        reader.join(10)
        if sim.stdout is not None:
            sim.stdout.close()
        log.close()


def _source_and_run(state: Path, script: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "FEDERATOR_KIND_STATE": str(state)}
    return subprocess.run([BASH, "-c", f'source "{KIND_SH}"\n{script}'], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=120)


def _nodes(state: Path, cluster: str) -> dict[str, dict[str, Any]]:
    listed = subprocess.run(["kubectl", "--kubeconfig", str(state / "admin" / f"{cluster}.kubeconfig"),
                             "--cache-dir", str(state / "kubectl-cache"), "get", "nodes", "-o", "json"],
                            capture_output=True, text=True, timeout=60, check=True)
    return {n["metadata"]["name"]: n for n in json.loads(listed.stdout)["items"]}


def test_advertise_devices_gives_the_workers_what_the_registration_declares(kind_like: Path) -> None:
    state = kind_like
    # twice: a second `kind.sh up` finds the nodes already patched and changes nothing
    for _ in range(2):
        done = _source_and_run(state, "advertise_devices fed-a\nadvertise_devices fed-c")
        assert done.returncode == 0, done.stderr
    assert "fed-a: 2 workers advertise 8 x A100-SXM4-40GB and rdma/hca 1000" in done.stdout
    assert "fed-c: 2 workers advertise 8 x H100-80GB-HBM3\n" in done.stdout

    (state / "clusters").mkdir(exist_ok=True)
    written = _source_and_run(state, "for c in fed-a fed-b fed-c; do write_registration $c; done")
    assert written.returncode == 0, written.stderr
    registrations = {name: yaml.safe_load((state / "clusters" / f"{name}.yaml").read_text())
                     for name in ("fed-a", "fed-b", "fed-c")}
    for name, registration in registrations.items():
        assert validate_membercluster(registration) == [], name
        assert registration["metadata"]["name"] == name
        assert registration["spec"]["connection"]["kubeconfigPath"] == str(state / "hub-identity" / f"{name}.kubeconfig")
        assert registration["spec"]["scheduler"] == {"name": "volcano"}
        assert registration["spec"]["labels"]["federator.test/cluster"] == name
    a, b, c = (registrations[n]["spec"] for n in ("fed-a", "fed-b", "fed-c"))
    assert a["network"] == {"type": "rdma", "rdmaKind": "infiniband", "bandwidthGbps": 200.0}
    assert b["network"] == {"type": "rdma", "rdmaKind": "roce", "bandwidthGbps": 100.0}
    assert c["network"] == {"type": "ethernet", "bandwidthGbps": 100.0} and c["location"]["type"] == "cloud"
    assert a["datasets"] == [{"name": "imagenet-22k", "sizeBytes": 1503238553600}] and "datasets" not in c

    for cluster, registration, rdma in (("fed-a", a, 1000), ("fed-c", c, 0)):
        nodes = _nodes(state, cluster)
        control = [n for n in nodes.values() if "node-role.kubernetes.io/control-plane" in n["metadata"]["labels"]]
        workers = [n for n in nodes.values() if n not in control]
        assert len(control) == 1 and len(workers) == 2
        assert "nvidia.com/gpu" not in control[0]["status"]["allocatable"]
        assert node_state(control[0])[0].allocatable.gpu == 0
        for node in workers:
            for field in ("capacity", "allocatable"):
                assert node["status"][field]["nvidia.com/gpu"] == "8"
                assert node["status"][field].get("rdma/hca") == (str(rdma) if rdma else None)
            labels = node["metadata"]["labels"]
            assert labels["nvidia.com/gpu.count"] == "8" and labels["nvidia.com/gpu.present"] == "true"
            assert (labels.get("feature.node.kubernetes.io/rdma.capable") == "true") == bool(rdma)
            # what the hub reads from that node is what the registration says the cluster has
            seen, well_formed = node_state(node)
            assert well_formed and seen.ready
            assert seen.allocatable.gpu == 8 and seen.allocatable.rdma == rdma
            assert [seen.gpu_model] == registration["gpuModels"]
            assert seen.gpu_model == gpu_model_name(labels["nvidia.com/gpu.product"])
            assert seen.datasets == {d["name"] for d in registration.get("datasets") or ()}


def test_advertise_devices_fails_with_one_line_when_the_cluster_does_not_answer(tmp_path: Path) -> None:
    state = tmp_path / "state"
    (state / "admin").mkdir(parents=True)
    (state / "admin" / "fed-a.kubeconfig").write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "x",
        "clusters": [{"name": "x", "cluster": {"server": "https://127.0.0.1:1"}}],
        "users": [{"name": "x", "user": {"token": "t"}}],
        "contexts": [{"name": "x", "context": {"cluster": "x", "user": "x"}}],
    }))
    done = _source_and_run(state, "advertise_devices fed-a")
    assert done.returncode != 0
    assert "127.0.0.1:1" in done.stderr and "advertise" not in done.stdout
