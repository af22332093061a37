"""`federator sim` as a real process: serves clusters, writes kubeconfigs
and an index, stops cleanly on SIGINT; bad input is one line and exit 2."""

from __future__ import annotations

import json
import queue
import signal
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import yaml
from kubernetes import client, config
from simapi_support import TEST_PROFILE

# the installed console script, as a user runs it
FEDERATOR = [str(Path(sys.executable).parent / "federator")]


def write_profiles(tmp_path: Path, *names: str) -> list[Path]:
    paths = []
    for name in names:
        path = tmp_path / f"{name}.yaml"
        path.write_text(yaml.safe_dump(dict(TEST_PROFILE, name=name)))
        paths.append(path)
    return paths


def run(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*FEDERATOR, *args], cwd=cwd, capture_output=True, text=True, timeout=60)


def test_serves_clusters_until_sigint(tmp_path: Path) -> None:
    a, b = write_profiles(tmp_path, "alpha", "beta")
    state = tmp_path / "state"
    proc = subprocess.Popen([*FEDERATOR, "sim", "--profile", str(a), "--profile", str(b), "--state-dir", str(state)],
                            cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lines: queue.Queue[str] = queue.Queue()
    assert proc.stdout is not None
    stdout = proc.stdout
    reader = threading.Thread(target=lambda: [lines.put(line) for line in stdout], daemon=True)
    reader.start()
    try:
        first = lines.get(timeout=30)
        assert first.startswith("federator sim: serving 2 simulated cluster(s)")
        index = json.loads((state / "clusters.json").read_text())["clusters"]
        assert [c["name"] for c in index] == ["alpha", "beta"]
        for c in index:
            kubeconfig = Path(c["kubeconfig"])
            if not kubeconfig.is_absolute():
                kubeconfig = tmp_path / kubeconfig
            assert kubeconfig.stat().st_mode & 0o077 == 0  # it holds a token
            cfg = client.Configuration()
            config.load_kube_config(config_file=str(kubeconfig), client_configuration=cfg)
            with client.ApiClient(cfg) as api:
                assert len(client.CoreV1Api(api).list_node().items) == 4
            # its registration, for `federator up --clusters STATE/registrations`
            registration = yaml.safe_load(Path(c["registration"]).read_text())
            assert registration["kind"] == "MemberCluster" and registration["metadata"]["name"] == c["name"]
            assert Path(registration["spec"]["connection"]["kubeconfigPath"]) == kubeconfig.resolve()
        out = []
        while not out or not out[-1].startswith("Index of all clusters"):
            out.append(lines.get(timeout=5))
        assert any(line.strip().startswith("kubectl --kubeconfig") and "get nodes" in line for line in out)
        proc.send_signal(signal.SIGINT)
        assert proc.wait(30) == 0
        reader.join(30)  # it has queued every line once it reads end of file
        rest = []
        while not lines.empty():
            rest.append(lines.get())
        assert any("all clusters stopped" in line for line in rest)
        assert proc.stderr is not None
        assert "Traceback" not in proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
        for stream in (proc.stdout, proc.stderr):
            if stream:
                stream.close()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((), "needs at least one --profile"),
        (("--profile", "does-not-exist.yaml"), "does-not-exist.yaml: no such file or directory"),
        (("--profile", "{a}", "--profile", "{a}"), "is also defined in"),
        (("--profile", "{a}", "--port-base", "70000"), "must lie within 1..65535"),
    ],
)
def test_bad_arguments_are_one_line(tmp_path: Path, args: tuple[str, ...], message: str) -> None:
    (a,) = write_profiles(tmp_path, "alpha")
    proc = run("sim", *(x.format(a=a) for x in args), cwd=tmp_path)
    assert proc.returncode == 2
    assert proc.stderr.startswith("error: ") and message in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


def test_port_in_use(tmp_path: Path) -> None:
    (a,) = write_profiles(tmp_path, "alpha")
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        proc = run("sim", "--profile", str(a), "--port-base", str(port), "--state-dir", str(tmp_path / "s"),
                   cwd=tmp_path)
    assert proc.returncode == 2
    assert f"cluster alpha: cannot listen on 127.0.0.1:{port}" in proc.stderr
    assert "Traceback" not in proc.stderr
