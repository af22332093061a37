"""Real kubectl (/usr/bin/kubectl) against a real SimCluster with its
kubeconfig: get, get -A, get -w, apply/delete -f (pods and PodGroups),
describe, explain, errors. Each run uses a fresh HOME and --cache-dir."""

from __future__ import annotations

import os
import queue
import shutil
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from simapi_support import ThreadedSim

KUBECTL = shutil.which("kubectl") or "/usr/bin/kubectl"
pytestmark = [
    pytest.mark.kubectl,
    pytest.mark.skipif(not os.path.exists(KUBECTL), reason=f"kubectl not found at {KUBECTL}; install kubectl to run"),
]


class Kubectl:
    def __init__(self, kubeconfig: Path, home: Path) -> None:
        self.kubeconfig = kubeconfig
        self.home = home
        self.env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home), "KUBECONFIG": str(kubeconfig)}

    def argv(self, *args: str) -> list[str]:
        return [KUBECTL, "--cache-dir", str(self.home / "cache"), "--request-timeout=20s", *args]

    def __call__(self, *args: str, check: bool = True, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(self.argv(*args), env=self.env, capture_output=True, text=True, input=stdin, timeout=60)
        if check and proc.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} failed ({proc.returncode}):\n{proc.stderr}")
        return proc


@pytest.fixture(scope="module")
def kubectl(sim_cluster: ThreadedSim, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Kubectl]:
    yield Kubectl(sim_cluster.kubeconfig, tmp_path_factory.mktemp("kubectl-home"))


class LineReader:
    """Lines of a subprocess's stdout, each awaited with a deadline."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self._lines: queue.Queue[str] = queue.Queue()
        assert proc.stdout is not None
        stdout = proc.stdout

        def pump() -> None:
            for line in stdout:
                self._lines.put(line)

        threading.Thread(target=pump, daemon=True).start()

    def next(self, timeout: float = 10.0) -> list[str]:
        try:
            return self._lines.get(timeout=timeout).split()
        except queue.Empty:
            raise AssertionError(f"no line from kubectl within {timeout}s") from None


def write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def test_get_nodes(kubectl: Kubectl) -> None:
    out = kubectl("get", "nodes").stdout.splitlines()
    assert out[0].split() == ["NAME", "STATUS", "ROLES", "AGE", "VERSION"]
    rows = [line.split() for line in out[1:]]
    assert len(rows) == 4
    assert all(r[1] == "Ready" and r[2] == "<none>" and r[4] == "v1.30.2" for r in rows)
    wide = kubectl("get", "nodes", "-o", "wide").stdout.splitlines()[0].split()
    assert "INTERNAL-IP" in wide and "CONTAINER-RUNTIME" in wide
    names = kubectl("get", "nodes", "-o", "name").stdout.split()
    assert len(names) == 4 and all(n.startswith("node/") for n in names)
    labels = kubectl("get", "nodes", "-l", "nvidia.com/gpu.product=NVIDIA-A100-SXM4-80GB", "-o",
                     "jsonpath={.items[*].status.allocatable.nvidia\\.com/gpu}").stdout.split()
    assert labels == ["8", "8"]


def test_apply_get_all_namespaces_and_delete_pods(sim_cluster: ThreadedSim, kubectl: Kubectl, tmp_path: Path) -> None:
    ns = sim_cluster.new_namespace("kc")
    manifest = write(tmp_path / "pod.yaml", f"""\
apiVersion: v1
kind: Pod
metadata:
  name: trainer-0
  namespace: {ns}
  labels: {{app: trainer}}
spec:
  containers:
  - name: main
    image: trainer:1.4
    resources: {{requests: {{cpu: "1", memory: 1Gi}}}}
""")
    assert kubectl("apply", "-f", str(manifest)).stdout.strip() == "pod/trainer-0 created"
    assert kubectl("apply", "-f", str(manifest)).stdout.strip() == "pod/trainer-0 unchanged"
    write(manifest, manifest.read_text().replace("app: trainer", "app: trainer, rev: two"))
    assert kubectl("apply", "-f", str(manifest)).stdout.strip() == "pod/trainer-0 configured"
    assert kubectl("get", "pod", "trainer-0", "-n", ns, "-o", "jsonpath={.metadata.labels.rev}").stdout == "two"
    rows = [line.split() for line in kubectl("get", "pods", "-A").stdout.splitlines()]
    assert rows[0][:3] == ["NAMESPACE", "NAME", "READY"]
    assert [ns, "trainer-0"] in [r[:2] for r in rows[1:]]
    # the gang scheduler binds it and the kubelet starts it
    deadline = time.monotonic() + 15
    while kubectl("get", "pod", "trainer-0", "-n", ns, "-o", "jsonpath={.status.phase}").stdout != "Running":
        assert time.monotonic() < deadline, "pod never became Running"
        time.sleep(0.2)
    # delete waits for the DELETED event (graceful: the kubelet finishes it)
    assert kubectl("delete", "-f", str(manifest)).stdout.strip() == 'pod "trainer-0" deleted'
    assert kubectl("get", "pods", "-n", ns, "-o", "name").stdout.strip() == ""


def test_apply_and_delete_podgroups(sim_cluster: ThreadedSim, kubectl: Kubectl, tmp_path: Path) -> None:
    ns = sim_cluster.new_namespace("kc")
    manifest = write(tmp_path / "pg.yaml", f"""\
apiVersion: scheduling.volcano.sh/v1beta1
kind: PodGroup
metadata: {{name: gang, namespace: {ns}}}
spec: {{minMember: 4, queue: research}}
---
apiVersion: scheduling.x-k8s.io/v1alpha1
kind: PodGroup
metadata: {{name: gang, namespace: {ns}}}
spec: {{minMember: 2, scheduleTimeoutSeconds: 60}}
""")
    out = kubectl("apply", "-f", str(manifest)).stdout.splitlines()
    assert out == ["podgroup.scheduling.volcano.sh/gang created", "podgroup.scheduling.x-k8s.io/gang created"]
    out = kubectl("apply", "-f", str(manifest)).stdout.splitlines()
    assert out == ["podgroup.scheduling.volcano.sh/gang unchanged", "podgroup.scheduling.x-k8s.io/gang unchanged"]
    write(manifest, manifest.read_text().replace("minMember: 4", "minMember: 6"))
    out = kubectl("apply", "-f", str(manifest)).stdout.splitlines()
    assert out == ["podgroup.scheduling.volcano.sh/gang configured", "podgroup.scheduling.x-k8s.io/gang unchanged"]
    table = kubectl("get", "podgroups.scheduling.volcano.sh", "-n", ns, "-o", "wide").stdout.splitlines()
    assert table[0].split() == ["NAME", "STATUS", "MINMEMBER", "RUNNINGS", "AGE", "QUEUE"]
    assert table[1].split()[0] == "gang" and "6" in table[1].split() and table[1].split()[-1] == "research"
    out = kubectl("delete", "-f", str(manifest)).stdout.splitlines()
    assert out == ['podgroup.scheduling.volcano.sh "gang" deleted', 'podgroup.scheduling.x-k8s.io "gang" deleted']


def test_get_watch_shows_a_change(sim_cluster: ThreadedSim, kubectl: Kubectl) -> None:
    ns = sim_cluster.new_namespace("kc")
    kubectl("run", "watched", "-n", ns, "--image=trainer:1.4", "--restart=Never",
            "--overrides", '{"spec":{"schedulerName":"nobody"}}')
    proc = subprocess.Popen(kubectl.argv("get", "pods", "-n", ns, "-w"), env=kubectl.env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        lines = LineReader(proc)
        assert lines.next() == ["NAME", "READY", "STATUS", "RESTARTS", "AGE"]
        assert lines.next()[:3] == ["watched", "0/1", "Pending"]
        kubectl("label", "pod", "watched", "-n", ns, "changed=yes")
        assert lines.next()[:3] == ["watched", "0/1", "Pending"]
        # an unbound pod is deleted at once: the watch shows it leave
        kubectl("delete", "pod", "watched", "-n", ns, "--wait=false")
        assert lines.next()[0] == "watched"
    finally:
        proc.kill()
        proc.wait(10)
        if proc.stdout:
            proc.stdout.close()
        if proc.stderr:
            proc.stderr.close()


def test_describe_node_and_pod(sim_cluster: ThreadedSim, kubectl: Kubectl) -> None:
    node = kubectl("get", "nodes", "-l", "federator.dev/node-pool=gpu", "-o", "jsonpath={.items[0].metadata.name}").stdout
    out = kubectl("describe", "node", node).stdout
    assert f"Name:               {node}" in out
    assert "nvidia.com/gpu:" in out and "rdma/hca:" in out
    assert "Ready            True" in out
    assert "Non-terminated Pods:" in out
    ns = sim_cluster.new_namespace("kc")
    kubectl("run", "described", "-n", ns, "--image=trainer:1.4", "--restart=Never")
    out = kubectl("describe", "pod", "described", "-n", ns).stdout
    assert "Name:             described" in out and f"Namespace:        {ns}" in out


def test_explain(kubectl: Kubectl) -> None:
    out = kubectl("explain", "podgroups.spec.minMember", "--api-version=scheduling.volcano.sh/v1beta1").stdout
    assert "KIND:       PodGroup" in out and "minMember" in out and "<integer>" in out
    out = kubectl("explain", "pods.spec").stdout
    assert "containers" in out


def test_errors_are_one_clear_line(sim_cluster: ThreadedSim, kubectl: Kubectl, tmp_path: Path) -> None:
    ns = sim_cluster.new_namespace("kc")
    bad = write(tmp_path / "bad.yaml", f"""\
apiVersion: scheduling.volcano.sh/v1beta1
kind: PodGroup
metadata: {{name: bad, namespace: {ns}}}
spec: {{minMember: -3}}
""")
    proc = kubectl("apply", "-f", str(bad), check=False)
    assert proc.returncode != 0
    # kubectl renders Invalid from details.kind and causes, as for a real apiserver
    assert proc.stderr.strip() == ('The PodGroup "bad" is invalid: spec.minMember: Invalid value: -3: '
                                   "must be greater than or equal to 0")
    proc = kubectl("get", "pod", "nope", "-n", ns, check=False)
    assert proc.returncode != 0 and 'Error from server (NotFound): pods "nope" not found' in proc.stderr
    proc = kubectl("get", "pods", "-n", ns, "-l", "bad key=x", check=False)
    assert proc.returncode != 0
    typo = write(tmp_path / "typo.yaml", f"""\
apiVersion: v1
kind: Pod
metadata: {{name: typo, namespace: {ns}}}
spec:
  containers: [{{name: main, image: trainer:1.4}}]
  nodeSelectr: {{disk: ssd}}
""")
    proc = kubectl("apply", "-f", str(typo), check=False)  # kubectl asks for fieldValidation=Strict
    assert proc.returncode != 0
    assert 'strict decoding error: unknown field "spec.nodeSelectr"' in proc.stderr
    assert kubectl("get", "pods", "-n", ns, "-o", "name").stdout.strip() == ""
    unknown = write(tmp_path / "unknown.yaml", "apiVersion: example.com/v1\nkind: Nope\nmetadata: {name: x}\n")
    proc = kubectl("apply", "-f", str(unknown), check=False)
    assert proc.returncode != 0 and "ensure CRDs are installed first" in proc.stderr
    assert kubectl("get", "podgroups.scheduling.volcano.sh", "-n", ns, "-o", "name").stdout.strip() == ""


def test_no_token_is_refused(sim_cluster: ThreadedSim, tmp_path: Path) -> None:
    text = sim_cluster.kubeconfig.read_text().replace(sim_cluster.c.token, "wrong-token")
    kc = Kubectl(write(tmp_path / "wrong.kubeconfig", text), tmp_path)
    proc = kc("get", "pods", check=False)
    assert proc.returncode != 0
    assert "error: You must be logged in to the server" in proc.stderr


def test_delete_namespace_waits_until_it_is_empty_and_gone(sim_cluster: ThreadedSim, kubectl: Kubectl) -> None:
    ns = sim_cluster.new_namespace("kc")
    kubectl("run", "resident", "-n", ns, "--image=trainer:1.4", "--restart=Never")
    assert kubectl("delete", "namespace", ns).stdout.strip() == f'namespace "{ns}" deleted'
    proc = kubectl("get", "namespace", ns, check=False)
    assert proc.returncode != 0 and f'namespaces "{ns}" not found' in proc.stderr


def test_get_events_has_kubes_columns(sim_cluster: ThreadedSim, kubectl: Kubectl) -> None:
    from federator.sim import kinds

    ns = sim_cluster.new_namespace("kc")

    async def record() -> None:
        await sim_cluster.c.storage.create(kinds.EVENTS, {
            "metadata": {"name": "pod-x.1"}, "involvedObject": {"kind": "Pod", "name": "pod-x", "namespace": ns},
            "reason": "FailedScheduling", "message": "0/4 nodes are available", "type": "Warning",
            "source": {"component": "volcano"}}, namespace=ns)

    sim_cluster.run(record)
    lines = kubectl("get", "events", "-n", ns).stdout.splitlines()
    assert lines[0].split() == ["LAST", "SEEN", "TYPE", "REASON", "OBJECT", "MESSAGE"]
    assert lines[1].split()[1:5] == ["Warning", "FailedScheduling", "pod/pod-x", "0/4"]
    wide = kubectl("get", "events", "-n", ns, "-o", "wide").stdout.splitlines()[0]
    assert "SOURCE" in wide and "NAME" in wide
