"""The real-member harness itself (federator/dev/kube.py): one member from the native-gang profile, driven
with kubectl as admin. Its nodes are the simulator's (same names, labels, allocatable, taints); a pod goes
Running through kwok and then succeeds or fails on the simulator's annotations; the processes are gone
after stop()."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from federator.dev.kube import COMPONENTS, KubeBinaries, KubeMember
from federator.sim.profile import initial_nodes, load_profile_file

from ..e2e_support import ROOT, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.kubectl, pytest.mark.xdist_group("kube-harness"),
              pytest.mark.timeout(180, func_only=True)]

PROFILE = ROOT / "clusterconfigs" / "sim" / "cloud-native-gang.yaml"


@pytest.fixture(scope="module")
def member(kube_binaries: KubeBinaries, tmp_path_factory: pytest.TempPathFactory) -> Iterator[KubeMember]:
    with KubeMember(load_profile_file(PROFILE), directory=tmp_path_factory.mktemp("kube-harness"),
                    binaries=kube_binaries) as running:
        yield running


def _get(member: KubeMember, *args: str) -> dict[str, object]:
    loaded = json.loads(member.kubectl("get", *args, "-o", "json").stdout)
    assert isinstance(loaded, dict)
    return loaded


def _phase(member: KubeMember, name: str) -> str:
    return str(_get(member, "pod", name).get("status", {}).get("phase"))  # type: ignore[union-attr]


def test_member_serves_the_profiles_nodes(member: KubeMember) -> None:
    expected = {n["metadata"]["name"]: n for n in initial_nodes(member.profile)}
    nodes = {n["metadata"]["name"]: n for n in _get(member, "nodes")["items"]}  # type: ignore[union-attr]
    assert set(nodes) == set(expected)
    for name, node in nodes.items():
        assert node["metadata"]["labels"] == expected[name]["metadata"]["labels"]
        assert node["status"]["allocatable"] == expected[name]["status"]["allocatable"]
        ready = {c["type"]: c["status"] for c in node["status"]["conditions"]}
        assert ready["Ready"] == "True"
    assert nodes["a100-0000"]["status"]["allocatable"]["nvidia.com/gpu"] == "8"
    version = json.loads(member.kubectl("version", "-o", "json").stdout)["serverVersion"]["gitVersion"]
    assert version.startswith("v1.36.")


def test_a_pod_runs_then_succeeds_on_cue(member: KubeMember) -> None:
    member.kubectl("run", "ok", "--image=trainer:1", "--restart=Never",
                   "--annotations=sim.federator.dev/duration-seconds=3")
    wait_for("pod ok Running", lambda: _phase(member, "ok") == "Running", timeout=60)
    wait_for("pod ok Succeeded", lambda: _phase(member, "ok") == "Succeeded", timeout=60)
    status = _get(member, "pod", "ok")["status"]
    terminated = status["containerStatuses"][0]["state"]["terminated"]  # type: ignore[index]
    assert terminated["exitCode"] == 0 and terminated["reason"] == "Completed"


def test_a_pod_fails_with_its_exit_code(member: KubeMember) -> None:
    member.kubectl("run", "bad", "--image=trainer:1", "--restart=Never",
                   "--annotations=sim.federator.dev/fail-after-seconds=1",
                   "--annotations=sim.federator.dev/exit-code=3")
    wait_for("pod bad Failed", lambda: _phase(member, "bad") == "Failed", timeout=60)
    terminated = _get(member, "pod", "bad")["status"]["containerStatuses"][0]["state"]["terminated"]  # type: ignore[index]
    assert terminated["exitCode"] == 3 and terminated["reason"] == "Error"


def test_a_gpu_pod_lands_on_a_gpu_node_and_a_deleted_pod_goes(member: KubeMember) -> None:
    overrides = json.dumps({"spec": {"containers": [{"name": "gpu", "image": "trainer:1", "resources": {
        "limits": {"nvidia.com/gpu": "8"}, "requests": {"nvidia.com/gpu": "8"}}}]}})
    member.kubectl("run", "gpu", "--image=trainer:1", "--restart=Never", f"--overrides={overrides}")
    wait_for("pod gpu Running", lambda: _phase(member, "gpu") == "Running", timeout=60)
    node = _get(member, "pod", "gpu")["spec"]["nodeName"]  # type: ignore[index]
    assert str(node).startswith("a100-")
    member.kubectl("delete", "pod", "gpu", "--wait=true", "--timeout=60s")
    assert member.kubectl("get", "pod", "gpu", check=False).returncode != 0


def test_stop_leaves_no_process(kube_binaries: KubeBinaries, tmp_path: Path) -> None:
    member = KubeMember(load_profile_file(PROFILE), directory=tmp_path, binaries=kube_binaries)
    member.start()
    pids = member.processes
    assert set(pids) == set(COMPONENTS)
    member.stop()
    for component, pid in pids.items():
        assert not _alive(pid), component


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie not reaped yet is gone as a process
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False
