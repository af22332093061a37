"""The kubelet's process runtime (federator/sim/processes.py, profile `processRuntime`) in a real SimCluster:
pods created directly on the member run their commands as local processes.

- env (plain, $(VAR) expansion, fieldRef, configMapKeyRef), working directory, a loopback podIP per pod,
  cluster DNS names through the pod's hosts file (a pod resolves its peer's FQDN and the short forms to
  the peer's podIP; the headless Service's name to both), a hostPath volume the two pods share, /dev/shm
  a tmpfs, mountPaths that do not exist on the machine (nothing is created on it);
- stdout/stderr in the pod log (real kubectl, `--timestamps`, `--tail`), exit codes -> the containers'
  terminated states and the pod phase; restartPolicy OnFailure restarts in place (restartCount, previous log);
- delete: SIGTERM to the process group, the pod removed once the processes are gone (a child included);
- bad input: a command that is not found (StartError, Failed, no hang), no command, a missing ConfigMap
  (CreateContainerConfigError, Pending; starts once the ConfigMap exists), an unsupported volume;
- the cluster stopping kills every process (none leaks), and the profile's field is validated.
"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from federator.apiserver.errors import ApiError
from federator.sim import kinds
from federator.sim.processes import expand
from federator.sim.profile import ClusterProfile, ProfileError, parse_profile
from federator.sim.server import SimCluster

KUBECTL = shutil.which("kubectl") or "/usr/bin/kubectl"
NS = "team"
#: a top-level path that does not exist on the machine: mounted on, never created there
SHARED = f"/federator-test-{uuid.uuid4().hex[:12]}/shared"
JSON = dict[str, Any]


def profile(root: Path | None = None, **runtime: Any) -> ClusterProfile:
    spec: JSON = dict(runtime)
    if root is not None:
        spec["root"] = str(root)
    return parse_profile({
        "apiVersion": "sim.federator.dev/v1alpha1", "kind": "ClusterProfile", "name": "proc",
        "location": {"type": "cloud", "provider": "gcp", "region": "r1"},
        "network": {"fabric": "ethernet", "bandwidthGbps": 100},
        "schedulers": [{"type": "default"}],
        "kubelet": {"startDelaySeconds": 0.05, "terminationSeconds": 0.05, "crashLoopBackoffSeconds": 0.2},
        "nodePools": [{"name": "cpu", "count": 2, "cpu": "32", "memory": "64Gi"}],
        "processRuntime": spec,
    })


async def wait_for(what: str, check: Callable[[], Awaitable[Any]], timeout: float = 60.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        result = await check()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        await asyncio.sleep(0.05)


def pod(name: str, script: str, *, restart_policy: str = "Never", grace: int = 30, **spec: Any) -> JSON:
    container: JSON = {"name": "main", "image": "busybox", "command": ["/bin/sh", "-c", script]}
    container.update(spec.pop("container", {}))
    labels = spec.pop("labels", {})
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": NS, "labels": labels},
            "spec": {"restartPolicy": restart_policy, "terminationGracePeriodSeconds": grace,
                     "containers": [container], **spec}}


async def start(prof: ClusterProfile) -> SimCluster:
    cluster = SimCluster(prof)
    await cluster.start()
    await cluster.storage.create(kinds.NAMESPACES, {"apiVersion": "v1", "kind": "Namespace",
                                                    "metadata": {"name": NS}}, namespace=None)
    return cluster


async def get(cluster: SimCluster, name: str) -> JSON:
    return await cluster.storage.get(kinds.PODS, namespace=NS, name=name)


def phase_of(cluster: SimCluster, name: str, *phases: str) -> Callable[[], Awaitable[JSON | None]]:
    async def check() -> JSON | None:
        p = await get(cluster, name)
        return p if (p.get("status") or {}).get("phase") in phases else None
    return check


def gone(cluster: SimCluster, name: str) -> Callable[[], Awaitable[bool]]:
    async def check() -> bool:
        try:
            await get(cluster, name)
        except ApiError as e:
            return e.code == 404
        return False
    return check


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie is dead too (it waits for its parent to reap it)
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1][0] != "Z"
    except (OSError, IndexError):
        return False


async def kubectl(kubeconfig: Path, *args: str) -> tuple[int, str, str]:
    process = await asyncio.create_subprocess_exec(
        KUBECTL, "--kubeconfig", str(kubeconfig), "--request-timeout", "30s", *args,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(process.communicate(), 60)
    assert process.returncode is not None
    return process.returncode, out.decode(), err.decode()


def terminated(p: JSON) -> JSON:
    (cs,) = p["status"]["containerStatuses"]
    return dict(cs["state"]["terminated"])


# a pod of the gang: says who it is, waits until its peer resolves, writes to the shared volume, reads the peer's
PEER = r"""
echo "me=$POD_NAME ns=$POD_NS ip=$POD_IP greeting=$GREETING cwd=$(pwd) host=$(hostname)"
until getent hosts {peer}.grp.team.svc.cluster.local >/dev/null; do sleep 0.05; done
echo "fqdn $(getent hosts {peer}.grp.team.svc.cluster.local)"
echo "svc $(getent hosts {peer}.grp.team.svc)"
echo "short $(getent hosts {peer}.grp)"
echo "service $(getent ahostsv4 grp.team.svc.cluster.local | awk '{{print $1}}' | sort -u | tr '\n' ' ')"
echo "shm $(awk '$2 == "/dev/shm" {{print $3}}' /proc/mounts)"
echo "hello from {me}" > {shared}/{me}
until [ -f {shared}/{peer} ]; do sleep 0.05; done
cat {shared}/{peer}
echo "to stderr" >&2
exit {code}
"""


def peer_pod(me: str, peer: str, code: int) -> JSON:
    return pod(me, PEER.format(me=me, peer=peer, code=code, shared=SHARED), labels={"app": "grp"}, hostname=me, subdomain="grp",
               volumes=[{"name": "shared", "hostPath": {"path": "/gang/grp"}}],
               container={"workingDir": "/tmp", "volumeMounts": [{"name": "shared", "mountPath": SHARED}],
                          "env": [
                              {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                              {"name": "POD_NS", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
                              {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
                              {"name": "WHO", "value": "world"},
                              {"name": "GREETING", "value": "hello-$(WHO)-$$(WHO)"}]})


async def test_two_pods_find_each_other_share_a_volume_and_end_with_their_exit_codes(tmp_path: Path) -> None:
    cluster = await start(profile(tmp_path / "rt"))
    try:
        await cluster.storage.create(kinds.SERVICES, {
            "apiVersion": "v1", "kind": "Service", "metadata": {"name": "grp", "namespace": NS},
            "spec": {"clusterIP": "None", "selector": {"app": "grp"}, "publishNotReadyAddresses": True,
                     "ports": [{"name": "x", "port": 29500}]}}, namespace=NS)
        await cluster.storage.create(kinds.PODS, peer_pod("a", "b", 3), namespace=NS)
        await cluster.storage.create(kinds.PODS, peer_pod("b", "a", 0), namespace=NS)
        a = await wait_for("a Failed", phase_of(cluster, "a", "Failed"))
        b = await wait_for("b Succeeded", phase_of(cluster, "b", "Succeeded"))
        ip_a, ip_b = a["status"]["podIP"], b["status"]["podIP"]
        assert ip_a.startswith("127.") and ip_b.startswith("127.") and ip_a != ip_b
        assert ip_a not in ("127.0.0.1",) and a["status"]["podIPs"] == [{"ip": ip_a}]
        assert (terminated(a)["exitCode"], terminated(a)["reason"]) == (3, "Error")
        assert (terminated(b)["exitCode"], terminated(b)["reason"]) == (0, "Completed")

        kubeconfig = cluster.write_kubeconfig(tmp_path / "kubeconfig", namespace=NS)
        code, out, err = await kubectl(kubeconfig, "logs", "a")
        assert code == 0, err
        lines = out.splitlines()
        assert lines[0] == f"me=a ns={NS} ip={ip_a} greeting=hello-world-$(WHO) cwd=/tmp host=a"
        assert re.fullmatch(rf"fqdn {re.escape(ip_b)}\s+b\.grp\.team\.svc\.cluster\.local.*", lines[1]), lines[1]
        assert lines[2].startswith(f"svc {ip_b} ") and lines[3].startswith(f"short {ip_b} ")
        # the headless Service's name answers with its pods (b surely runs: a waited for its file)
        assert ip_b in lines[4].split()
        assert lines[5] == "shm tmpfs"
        assert "hello from b" in lines and "to stderr" in lines
        code, stdout_only, _ = await kubectl(kubeconfig, "get", "--raw",
                                             f"/api/v1/namespaces/{NS}/pods/a/log?stream=Stdout&tailLines=1")
        assert (code, stdout_only) == (0, "hello from b\n")
        code, stamped, _ = await kubectl(kubeconfig, "logs", "b", "--timestamps", "--tail", "1")
        assert code == 0 and re.fullmatch(r"\d{4}-\d\d-\d\dT[0-9:.]+Z to stderr\n", stamped), stamped
        # the volume is the runtime's hostPath directory, shared; nothing was made on the machine
        shared = tmp_path / "rt" / "proc" / "hostpath" / "gang" / "grp"
        assert sorted(p.name for p in shared.iterdir()) == ["a", "b"]
        assert not Path(SHARED).parent.exists()
    finally:
        await cluster.stop()


async def test_delete_kills_the_process_group_and_stopping_the_cluster_kills_the_rest(tmp_path: Path) -> None:
    cluster = await start(profile(tmp_path / "rt"))
    pids_dir = tmp_path / "rt" / "proc" / "hostpath" / "pids"
    # `$$$$`: kube's expansion makes `$$` of it, the shell's own pid
    script = ('trap "echo got TERM; exit 143" TERM; sleep 1000 & echo $! > /mnt/pids/$POD_NAME.child; '
              'echo $$$$ > /mnt/pids/$POD_NAME.shell; wait')
    env = [{"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}]
    volume = {"volumes": [{"name": "p", "hostPath": {"path": "/pids"}}],
              "container": {"env": env, "volumeMounts": [{"name": "p", "mountPath": "/mnt/pids"}]}}

    async def pids(name: str) -> tuple[int, int] | None:
        try:
            return int((pids_dir / f"{name}.shell").read_text()), int((pids_dir / f"{name}.child").read_text())
        except (OSError, ValueError):
            return None

    stopped = False
    try:
        for name in ("doomed", "survivor"):
            await cluster.storage.create(kinds.PODS, pod(name, script, grace=5, **volume), namespace=NS)
        doomed = await wait_for("doomed's pids", lambda: pids("doomed"))
        survivor = await wait_for("survivor's pids", lambda: pids("survivor"))
        assert all(alive(p) for p in (*doomed, *survivor))
        await cluster.storage.delete(kinds.PODS, namespace=NS, name="doomed")
        await wait_for("doomed removed", gone(cluster, "doomed"))
        assert not any(alive(p) for p in doomed)   # the shell and its child: the whole process group
        assert all(alive(p) for p in survivor)
        # a process that ignores SIGTERM gets SIGKILL once the grace period is over
        stubborn = script.replace('trap "echo got TERM; exit 143" TERM', 'trap "" TERM')
        await cluster.storage.create(kinds.PODS, pod("stubborn", stubborn, grace=1, **volume), namespace=NS)
        held = await wait_for("stubborn's pids", lambda: pids("stubborn"))
        await cluster.storage.delete(kinds.PODS, namespace=NS, name="stubborn")
        await wait_for("stubborn removed", gone(cluster, "stubborn"))
        assert not any(alive(p) for p in held)
        assert cluster.runtime is not None and cluster.runtime.pids()
        await cluster.stop()
        stopped = True
        assert not [(p, Path(f"/proc/{p}/stat").read_text()) for p in survivor if alive(p)]  # none outlives it
    finally:
        if not stopped:
            await cluster.stop()


async def test_bad_input_is_a_clear_container_error_not_a_hang(tmp_path: Path) -> None:
    cluster = await start(profile())
    try:
        await cluster.storage.create(kinds.PODS, pod("nocmd", "", container={"command": ["no-such-program-x"]}),
                                     namespace=NS)
        bare = pod("bare", "")
        del bare["spec"]["containers"][0]["command"]
        await cluster.storage.create(kinds.PODS, bare, namespace=NS)
        failed = await wait_for("nocmd Failed", phase_of(cluster, "nocmd", "Failed"))
        term = terminated(failed)
        assert (term["exitCode"], term["reason"]) == (128, "StartError")
        assert term["message"] == 'exec: "no-such-program-x": executable file not found in $PATH'
        term = terminated(await wait_for("bare Failed", phase_of(cluster, "bare", "Failed")))
        assert term["reason"] == "StartError" and "has no command" in term["message"]

        # a ConfigMap that does not exist yet: Pending, CreateContainerConfigError; it starts once it exists
        env = [{"name": "MODE", "valueFrom": {"configMapKeyRef": {"name": "settings", "key": "mode"}}}]
        await cluster.storage.create(kinds.PODS, pod("cfg", 'echo "mode=$MODE"', container={"env": env}),
                                     namespace=NS)

        async def config_error() -> str | None:
            st = (await get(cluster, "cfg")).get("status") or {}
            for cs in st.get("containerStatuses") or ():
                waiting = (cs.get("state") or {}).get("waiting") or {}
                if waiting.get("reason") == "CreateContainerConfigError":
                    assert st["phase"] == "Pending"
                    return str(waiting["message"])
            return None

        assert await wait_for("CreateContainerConfigError", config_error) == 'configmap "settings" not found'
        await cluster.storage.create(kinds.CONFIG_MAPS, {"apiVersion": "v1", "kind": "ConfigMap",
                                                         "metadata": {"name": "settings", "namespace": NS},
                                                         "data": {"mode": "fast"}}, namespace=NS)
        await wait_for("cfg Succeeded", phase_of(cluster, "cfg", "Succeeded"))

        # an unsupported volume, and a Secret this cluster does not serve: the same error, named
        await cluster.storage.create(kinds.PODS, pod("nfs", "true", volumes=[
            {"name": "v", "nfs": {"server": "x", "path": "/"}}]), namespace=NS)
        secret_env = [{"name": "T", "valueFrom": {"secretKeyRef": {"name": "tok", "key": "t"}}}]
        await cluster.storage.create(kinds.PODS, pod("sec", "true", container={"env": secret_env}), namespace=NS)
        # hostile paths: nothing outside the runtime's directories is read or written
        await cluster.storage.create(kinds.PODS, pod("up", "true", volumes=[{"name": "v", "emptyDir": {}}],
                                                     container={"volumeMounts": [
                                                         {"name": "v", "mountPath": "/mnt/x", "subPath": "../../.."}]}),
                                     namespace=NS)
        await cluster.storage.create(kinds.PODS, pod("host", "true", volumes=[
            {"name": "v", "hostPath": {"path": "/../../etc"}}]), namespace=NS)
        await cluster.storage.create(kinds.CONFIG_MAPS, {"apiVersion": "v1", "kind": "ConfigMap",
                                                         "metadata": {"name": "evil", "namespace": NS},
                                                         "data": {"k": "x"}}, namespace=NS)
        await cluster.storage.create(kinds.PODS, pod("items", "true", volumes=[
            {"name": "v", "configMap": {"name": "evil", "items": [{"key": "k", "path": "../../../escaped"}]}}]),
            namespace=NS)
        for name, message in (("nfs", "volume v: nfs is not supported by the process runtime"),
                              ("sec", 'secret "tok" not found'),
                              ("up", "subPath '../../..' must be relative, without .."),
                              ("host", "hostPath path '/../../etc' must be absolute, without .."),
                              ("items", "item path '../../../escaped' leaves the volume")):
            async def waiting_message(name: str = name) -> str | None:
                for cs in ((await get(cluster, name)).get("status") or {}).get("containerStatuses") or ():
                    found = ((cs.get("state") or {}).get("waiting") or {}).get("message")
                    if found:
                        return str(found)
                return None
            assert message in await wait_for(f"{name}'s config error", waiting_message)
    finally:
        await cluster.stop()


async def test_on_failure_restarts_in_place_and_keeps_the_previous_log(tmp_path: Path) -> None:
    cluster = await start(profile())
    assert cluster.runtime is not None
    try:
        state = SHARED.replace("shared", "state")
        script = (f'if [ -f {state}/tried ]; then echo second run; exit 0; fi; '
                  f'touch {state}/tried; echo first run; exit 7')
        await cluster.storage.create(kinds.PODS, pod("flaky", script, restart_policy="OnFailure", volumes=[
            {"name": "s", "persistentVolumeClaim": {"claimName": "state"}}],
            container={"volumeMounts": [{"name": "s", "mountPath": state}]}), namespace=NS)
        done = await wait_for("flaky Succeeded", phase_of(cluster, "flaky", "Succeeded"))
        (cs,) = done["status"]["containerStatuses"]
        assert cs["restartCount"] == 1 and cs["state"]["terminated"]["exitCode"] == 0
        assert cs["lastState"]["terminated"]["exitCode"] == 7
        kubeconfig = cluster.write_kubeconfig(tmp_path / "kubeconfig", namespace=NS)
        assert (await kubectl(kubeconfig, "logs", "flaky"))[1] == "second run\n"
        assert (await kubectl(kubeconfig, "logs", "flaky", "--previous"))[1] == "first run\n"
        # follow: lines as they come, to the container's end
        marker = SHARED.replace("shared", "go")
        await cluster.storage.create(kinds.PODS, pod("talker", f"echo one; until [ -f {marker}/go ]; do sleep 0.05; "
                                                               "done; echo two", volumes=[
            {"name": "g", "persistentVolumeClaim": {"claimName": "go"}}],
            container={"volumeMounts": [{"name": "g", "mountPath": marker}]}), namespace=NS)
        await wait_for("talker Running", phase_of(cluster, "talker", "Running"))
        follower = await asyncio.create_subprocess_exec(
            KUBECTL, "--kubeconfig", str(kubeconfig), "logs", "-f", "talker", stdout=asyncio.subprocess.PIPE)
        assert follower.stdout is not None
        assert await asyncio.wait_for(follower.stdout.readline(), 60) == b"one\n"
        (cluster.runtime.root / "pvc" / NS / "go" / "go").write_text("")
        assert await asyncio.wait_for(follower.stdout.read(), 60) == b"two\n"  # and then it ends
        assert await asyncio.wait_for(follower.wait(), 60) == 0
        assert not Path(state).parent.exists() and not Path(marker).parent.exists()
        assert not Path("/mnt/pids").exists()
    finally:
        await cluster.stop()


async def test_init_containers_run_first_and_a_sidecar_beside_the_container() -> None:
    cluster = await start(profile())
    try:
        shared = {"name": "w", "mountPath": "/mnt/work"}
        spec = pod("staged", "cat /mnt/work/ready; test -f /mnt/work/sidecar-up", volumes=[
            {"name": "w", "emptyDir": {}}], container={"volumeMounts": [shared]})
        spec["spec"]["initContainers"] = [
            {"name": "prepare", "image": "busybox", "command": ["/bin/sh", "-c", "echo prepared > /mnt/work/ready"],
             "volumeMounts": [shared]},
            {"name": "helper", "image": "busybox", "restartPolicy": "Always", "volumeMounts": [shared],
             "command": ["/bin/sh", "-c", "touch /mnt/work/sidecar-up; exec sleep 1000"]},
        ]
        # the sidecar may be slower than the container: the container waits for it
        spec["spec"]["containers"][0]["command"][2] = ("until [ -f /mnt/work/sidecar-up ]; do sleep 0.05; done; "
                                                       "cat /mnt/work/ready")
        await cluster.storage.create(kinds.PODS, spec, namespace=NS)
        done = await wait_for("staged Succeeded", phase_of(cluster, "staged", "Succeeded", "Failed"))
        assert done["status"]["phase"] == "Succeeded"
        assert terminated(done)["exitCode"] == 0
        log = cluster.runtime.log_path(namespace=NS, name="staged", uid=done["metadata"]["uid"], container="main",
                                       restart=0) if cluster.runtime is not None else None
        assert log is not None and log.read_text().endswith(" stdout F prepared\n")
        assert cluster.runtime is not None and not cluster.runtime.pids()  # the sidecar stopped with the pod

        failing = pod("blocked", "echo never")
        failing["spec"]["initContainers"] = [{"name": "check", "image": "busybox", "command": ["/bin/sh", "-c", "exit 4"]}]
        await cluster.storage.create(kinds.PODS, failing, namespace=NS)
        blocked = await wait_for("blocked Failed", phase_of(cluster, "blocked", "Failed"))
        # the init container's failure ends the pod; the container never ran (the simulator reports the
        # pod's end on its containers: docs/simulator-fidelity.md)
        assert terminated(blocked)["exitCode"] == 4
        main_log = cluster.runtime.log_path(namespace=NS, name="blocked", uid=blocked["metadata"]["uid"],
                                            container="main", restart=0)
        assert not main_log.exists()
    finally:
        await cluster.stop()


def test_expansion_and_the_profile_field() -> None:
    env = {"A": "1", "B": "x"}
    assert expand("$(A)-$(B)-$(C)-$$(A)-$", env) == "1-x-$(C)-$(A)-$"
    assert profile().process_runtime is not None
    base = profile().model_dump(by_alias=True, exclude_none=True)
    for bad, message in (({"root": "relative/dir"}, "must be an absolute path"),
                         ({"root": "/a/../b"}, "must be an absolute path"),
                         ({"stopGraceSeconds": -1}, "greater than or equal to 0"),
                         ({"unknownKnob": 1}, "Extra inputs are not permitted")):
        with pytest.raises(ProfileError, match=re.escape(message)):
            parse_profile({**base, "processRuntime": bad})
