"""End to end: a full `federator up` run (development mode, a simulated member) in which credentials are
planted everywhere they can be, and whose every output line is then searched for them.

Planted: the hub's token file (admin, researcher and a viewer; development mode keeps a token file it
can parse), and three `federator cluster add --kubeconfig` registrations of a separately served
simulated member: a kubeconfig with the member's token and a client certificate and key (refused: the
hub takes one kind of credential; its error must not repeat them), one with the token alone (added;
one job runs to Succeeded there), one with another client key alone (added; the member does not know
it, so the hub's error paths log against it all along). Hostile requests: malformed HTTP (garbage request line, a header line
without a colon carrying the admin token, an oversized header carrying the viewer token, a bad
Content-Length), and the member's token sent to the hub as a bearer token.

Searched: the hub's stdout and stderr, the CLI's output, the admin's answers of /metrics, the
MemberClusters (list and one) and Events, the audit log (every body, RequestResponse), the simulated member's process output, the
fence agents' logs and the hub's sqlite store files (the hub runs with --encryption-provider-config); for each secret, the secret itself and its base64 forms (at every alignment, plain
and URL-safe), and no PEM private key at all. Also: every stderr line is JSON, each malformed request is
one `malformed HTTP request` line, and the hub's probes and /metrics answer by role on the real process.
"""

from __future__ import annotations

import base64
import json
import os
import signal
import socket
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import yaml

from federator.dev.certs import generate_ca

from .e2e_support import ROOT, FederatorUp, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.kubectl]

ADDED, GHOST = "obs-added", "obs-ghost"
#: the development hub's own simulated cluster and the separately served one that `cluster add` registers
PROFILE = """\
apiVersion: sim.federator.dev/v1alpha1
kind: ClusterProfile
name: {name}
location: {{type: cloud, provider: aws, region: eu-west-1}}
network: {{fabric: ethernet, bandwidthGbps: 50}}
schedulers: [{{type: default}}]
kubelet: {{startDelaySeconds: 0.1, terminationSeconds: 0.1, defaultRunSeconds: 2}}
nodePools:
  - {{name: gpu, count: 2, cpu: "32", memory: 128Gi, gpus: 4, gpuProduct: NVIDIA-L4}}
"""
ENCRYPTION_CONFIG = """\
apiVersion: apiserver.config.k8s.io/v1
kind: EncryptionConfiguration
resources:
  - resources: [memberclusters.federator.dev]
    providers: [{{secretbox: {{keys: [{{name: e2e, secret: {key}}}]}}}}]
"""
JOB = {
    "apiVersion": "federator.dev/v1alpha1", "kind": "TrainingJob",
    "metadata": {"name": "secret-scan", "namespace": "default"},
    "spec": {"roles": [{"name": "worker", "replicas": 2, "template": {
        "image": "trainer:1.4", "resources": {"cpu": "2", "memory": "8Gi", "nvidia.com/gpu": 1}}}],
             "placement": {"network": "any", "clusterSelector": {"matchLabels": {"obs": "added"}}}},
}


def base64_forms(secret: str) -> set[str]:
    """Substrings every base64 text containing `secret` (at any of the 3 alignments) contains."""
    forms = set()
    for pad in range(3):
        encoded = base64.b64encode(b"\0" * pad + secret.encode()).decode()
        middle = encoded[4 if pad else 0: len(encoded) - 4]
        forms |= {middle, middle.replace("+", "-").replace("/", "_")}
    return {f for f in forms if len(f) >= 16}


def _pem_body(pem: bytes) -> str:
    """The longest base64 line of a PEM block: random, so a fine marker of the key."""
    return max((line for line in pem.decode().splitlines() if not line.startswith("-----")), key=len)


def _start_member(directory: Path) -> tuple[subprocess.Popen[str], Path]:
    profile = directory / f"{ADDED}.yaml"
    profile.write_text(PROFILE.format(name=ADDED))
    state = directory / "member-state"
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONPATH": str(ROOT)}
    process = subprocess.Popen([sys.executable, "-m", "federator.cli", "sim", "--profile", str(profile),
                                "--state-dir", str(state)], cwd=directory, env=env, text=True,
                               stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    kubeconfig = state / f"{ADDED}.kubeconfig"
    wait_for("the member's kubeconfig", lambda: kubeconfig.exists() and (state / "clusters.json").exists()
             or process.poll() is not None, timeout=60)
    assert process.poll() is None, "federator sim exited"
    return process, kubeconfig


def _planted_kubeconfig(source: Path, target: Path, *, keep_token: bool, client: tuple[bytes, bytes] | None) -> None:
    """A copy of `source` (the member's kubeconfig) with or without its token, and with a client
    certificate and key (PEM) added when `client` is given."""
    config = yaml.safe_load(source.read_text())
    user = config["users"][0]["user"]
    if not keep_token:
        del user["token"]
    if client is not None:
        user["client-certificate-data"] = base64.b64encode(client[0]).decode()
        user["client-key-data"] = base64.b64encode(client[1]).decode()
    target.write_text(yaml.safe_dump(config))
    target.chmod(0o600)


def _cli(admin: Path, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "KUBECONFIG": str(admin), "PYTHONPATH": str(ROOT)}
    env.pop("FEDERATOR_DEBUG", None)
    return subprocess.run([sys.executable, "-m", "federator.cli", *args], cwd=ROOT, env=env, input=stdin,
                          capture_output=True, text=True, timeout=120)


def _tls() -> ssl.SSLContext:
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    return context


def _get(url: str, token: str | None, *, body: list[str] | None = None) -> int:
    """The status of GET `url`; with `body`, its text is appended there (searched for secrets)."""
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"} if token else {})
    try:
        with urllib.request.urlopen(request, context=_tls(), timeout=20) as response:
            if body is not None:
                body.append(response.read().decode("utf-8", "replace"))
            return int(response.status)
    except urllib.error.HTTPError as e:
        return int(e.code)


def _raw(host: str, port: int, payload: bytes) -> bytes:
    with socket.create_connection((host, port), timeout=20) as plain:
        with _tls().wrap_socket(plain, server_hostname=host) as conn:
            conn.sendall(payload)
            answer = b""
            try:
                while chunk := conn.recv(65536):
                    answer += chunk
            except (ssl.SSLError, ConnectionResetError):
                pass
            return answer


def test_a_full_up_run_logs_no_planted_secret(tmp_path: Path) -> None:
    work = tmp_path / "work"
    state = work / ".federator"
    state.mkdir(parents=True)
    hub_tokens = {who: f"planted-{who}-{os.urandom(20).hex()}" for who in ("admin", "researcher", "viewer")}
    (state / "tokens.csv").write_text(
        f'{hub_tokens["admin"]},admin,uid-admin,"federator:admin"\n'
        f'{hub_tokens["researcher"]},researcher,uid-researcher,"federator:researcher,ns:default"\n'
        f'{hub_tokens["viewer"]},viewer,uid-viewer,"federator:viewer"\n')
    (state / "tokens.csv").chmod(0o600)
    dev_profile = tmp_path / "obs-dev.yaml"
    dev_profile.write_text(PROFILE.format(name="obs-dev"))

    member, member_kubeconfig = _start_member(tmp_path)
    encryption = tmp_path / "encryption-config.yaml"  # the hub store keeps the registrations' credentials encrypted
    encryption.write_text(ENCRYPTION_CONFIG.format(key=base64.b64encode(os.urandom(32)).decode()))
    # the audit log at RequestResponse (every body) for everything: searched like every other output
    policy = tmp_path / "audit-policy.yaml"
    policy.write_text("apiVersion: audit.k8s.io/v1\nkind: Policy\nrules: [{level: RequestResponse}]\n")
    audit_log = tmp_path / "audit" / "audit.log"
    up = FederatorUp(work, "--sim-profile", str(dev_profile), "--sim-run-seconds", "2",
                     "--encryption-provider-config", str(encryption),
                     "--audit-log-path", str(audit_log), "--audit-policy-file", str(policy))
    cli_output: list[str] = []
    responses: list[str] = []
    try:
        ready = up.start()
        url = str(ready["url"])
        host, port = url.removeprefix("https://").rsplit(":", 1)
        assert (state / "tokens.csv").read_text().count("planted-") == 3, "development mode replaced the token file"

        # planted kubeconfigs: the member's token and a client key (the hub refuses both at once: its
        # error must not repeat them), the member's token alone (works), a client key alone (the member
        # does not know it: the hub keeps failing against it)
        cert_a, key_a = generate_ca(common_name="planted-client-a")
        cert_b, key_b = generate_ca(common_name="planted-client-b")
        member_token = str(yaml.safe_load(member_kubeconfig.read_text())["users"][0]["user"]["token"])
        both, added, ghost = (tmp_path / f"{n}.kubeconfig" for n in ("both", "added", "ghost"))
        _planted_kubeconfig(member_kubeconfig, both, keep_token=True, client=(cert_a, key_a))
        _planted_kubeconfig(member_kubeconfig, added, keep_token=True, client=None)
        _planted_kubeconfig(member_kubeconfig, ghost, keep_token=False, client=(cert_b, key_b))
        for name, kubeconfig, ok in (("obs-both", both, False), (ADDED, added, True), (GHOST, ghost, True)):
            done = _cli(up.admin, "cluster", "add", name, "--kubeconfig", str(kubeconfig), "--location", "cloud",
                        "--network", "ethernet", "--bandwidth-gbps", "50", "--scheduler", "default",
                        "--label", f"obs={name.removeprefix('obs-')}")
            cli_output += [done.stdout, done.stderr]
            assert (done.returncode == 0) == ok, done.stderr
            if not ok:
                assert "may not be set together with a client certificate" in done.stderr, done.stderr

        def ready_condition() -> bool:
            obj = up.json("get", "mc", ADDED)
            return any(c["type"] == "Ready" and c["status"] == "True" for c in obj["status"].get("conditions", []))

        wait_for(f"{ADDED} Ready", ready_condition, timeout=60)
        done = _cli(up.admin, "submit", "-f", "-", stdin=json.dumps(JOB))
        cli_output += [done.stdout, done.stderr]
        assert done.returncode == 0, done.stderr
        job = wait_for("the job Succeeded", lambda: (lambda j: j if j.get("status", {}).get("phase") == "Succeeded"
                                                      else None)(up.json("get", "tj", "secret-scan", "-n", "default")),
                       timeout=90)
        assert job["status"]["placement"]["cluster"] == ADDED
        done = _cli(up.admin, "describe", "job", "secret-scan", "-n", "default")
        cli_output += [done.stdout, done.stderr]
        done = _cli(up.admin, "cluster", "list")
        cli_output += [done.stdout, done.stderr]

        # the probes and /metrics on the real process, by role
        for probe in ("/healthz", "/livez", "/readyz"):
            assert _get(url + probe, None) == 200, probe
        assert [_get(url + "/metrics", t) for t in (None, "wrong-token-0123456789abcdef", hub_tokens["researcher"],
                                                    hub_tokens["viewer"], hub_tokens["admin"])] == \
            [401, 401, 403, 200, 200]
        assert _get(url + "/apis/federator.dev/v1alpha1/trainingjobs", member_token) == 401
        # what the API and /metrics answer an admin: searched below with every other output
        for path in ("/metrics", "/apis/federator.dev/v1alpha1/memberclusters",
                     f"/apis/federator.dev/v1alpha1/memberclusters/{ADDED}", "/api/v1/events?limit=500"):
            assert _get(url + path, hub_tokens["admin"], body=responses) == 200, path

        # malformed HTTP, two of them carrying hub tokens
        malformed = [
            b"GARBAGE\r\n\r\n",
            f"GET /version HTTP/1.1\r\nHost: x\r\nAuthorization Bearer {hub_tokens['admin']}\r\n\r\n".encode(),
            f"GET /version HTTP/1.1\r\nHost: x\r\nX-Token: {hub_tokens['viewer']}{'a' * 9000}\r\n\r\n".encode(),
            b"GET /version HTTP/1.1\r\nHost: x\r\nContent-Length: abc\r\n\r\n",
        ]
        # each answered with a JSON kube Status: 431 for the oversized header, 400 for the rest
        answered = [400, 400, 431, 400]
        for payload, code in zip(malformed, answered, strict=True):
            answer = _raw(host, int(port), payload)
            assert answer.startswith(f"HTTP/1.0 {code} ".encode()), answer[:200]
            assert b'"kind":"Status"' in answer and f'"code":{code}'.encode() in answer, answer[:400]
        wait_for("one log line per malformed request",
                 lambda: len([r for r in up.logs if r.get("event") == "malformed HTTP request"]) >= len(malformed))
        # the ghost cluster's failures have been logged by now (it never answered with its wrong token)
        wait_for("the ghost cluster's failure logged",
                 lambda: any(r.get("cluster") == GHOST and r.get("level") == "warning" for r in up.logs),
                 timeout=30)
    finally:
        code = up.stop()
        member.send_signal(signal.SIGINT)
        try:
            member_out, _ = member.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            member.kill()
            member_out, _ = member.communicate(timeout=10)
    assert code == 0, up.stderr_lines[-20:]

    secrets = {**{f"hub token ({who})": token for who, token in hub_tokens.items()},
               "member token": member_token,
               "client key a": _pem_body(key_a), "client key b": _pem_body(key_b),
               "client-key-data a": base64.b64encode(key_a).decode()[:64],
               "client-key-data b": base64.b64encode(key_b).decode()[:64]}
    for kubeconfig in (state / "sim").glob("*.kubeconfig"):  # the development member's and agents' tokens
        for user in yaml.safe_load(kubeconfig.read_text())["users"]:
            if user["user"].get("token"):
                secrets[f"token of {kubeconfig.name}"] = user["user"]["token"]
    # the secrets are where they were planted (the search strings are real)
    assert all(s in (state / "tokens.csv").read_text() for s in hub_tokens.values())
    assert secrets["client-key-data a"] in both.read_text() and member_token in both.read_text()
    assert secrets["client-key-data b"] in ghost.read_text()

    outputs = {"hub stdout": "\n".join(up.stdout), "hub stderr": "\n".join(up.stderr_lines),
               "CLI output": "\n".join(cli_output), "member process": member_out,
               "API and /metrics answers": "\n".join(responses)}
    for agent_log in (state / "sim").glob("*-agent.log"):
        outputs[agent_log.name] = agent_log.read_text()
    outputs["audit log"] = audit_log.read_text()
    audit_events = [json.loads(line) for line in outputs["audit log"].splitlines()]
    registered = [e for e in audit_events if e["verb"] == "create" and e["stage"] == "ResponseComplete"
                  and e.get("objectRef", {}).get("resource") == "memberclusters"
                  and e["objectRef"].get("name") == ADDED]
    assert len(registered) == 1 and "<redacted>" in json.dumps(registered[0]["requestObject"]), registered
    assert any(e.get("annotations", {}).get("federator.dev/cluster") == ADDED
               and e["annotations"]["federator.dev/reason"] == "place" for e in audit_events), \
        "the hub's dispatch to its member is not in the audit log"
    assert "hub ready" in outputs["hub stderr"] and "secret-scan" in outputs["hub stderr"]
    for where, text in outputs.items():
        assert "PRIVATE KEY" not in text, f"a private key in {where}"
        for what, secret in secrets.items():
            for form in {secret} | base64_forms(secret):
                assert form not in text, f"{what} ({'as is' if form == secret else 'base64'}) leaked into {where}"

    # the hub store at rest (--encryption-provider-config): the sqlite file, its WAL and shared memory
    stored = {path.name: path.read_bytes().decode("latin-1") for path in state.glob("hub.db*")}
    assert "hub.db" in stored and "k8s:enc:secretbox:v1:e2e:" in stored["hub.db"] + stored.get("hub.db-wal", "")
    for where, text in stored.items():
        assert "PRIVATE KEY" not in text, f"a private key in {where}"
        for what, secret in secrets.items():
            for form in {secret} | base64_forms(secret):
                assert form not in text, f"{what} ({'as is' if form == secret else 'base64'}) is in {where}"

    plain = [line for line in up.stderr_lines if line.strip() and not line.startswith("{")]
    assert not plain, f"plain-text lines on the hub's stderr: {plain[:10]}"
    bad = [r for r in up.logs if r.get("event") == "malformed HTTP request"]
    assert sorted(r["status"] for r in bad) == sorted(answered), bad
