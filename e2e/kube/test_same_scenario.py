"""One scenario file, two members, one hub's view (issue 25 item 4, "the same scenario file runs against both
and the test compares what the hub saw").

`scenarios/native-gang.yaml` (its comments say what each job does) is played twice, each time by
`federator up` as a process driven through its public endpoint: once with a SIMULATED member
(`--members sim`, federator/sim) and once with a REAL one (`--members kube`: kube-apiserver, kube-scheduler's
own gang scheduling, kwok nodes; federator/dev/kube.py), both from the scenario's profile. What the hub saw
of each job is then compared:

- its history: each entry's event, reason, cluster, epoch and message, in order;
- its conditions (type, status, reason, message) and pod counts per role when each `wait` of the scenario
  was met, and at the end (the last status before the job was gone, for deleted jobs);
- its final phase.

Both sides are normalised the same way (`normalise`): timestamps, uids and resourceVersions dropped. A
difference fails the test with a unified diff of the two views. Where the two differ on purpose (a
documented row of docs/simulator-fidelity.md), the normalisation says so beside the rule that hides it.
"""

from __future__ import annotations

import difflib
import json
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from federator.dev.kube import KubeBinaries

from ..e2e_support import FederatorUp, kubectl, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.kubectl, pytest.mark.xdist_group("kube-scenario"),
              pytest.mark.timeout(900, func_only=True)]

SCENARIO = Path(__file__).parent / "scenarios" / "native-gang.yaml"
NAMESPACE = "default"
#: how long one `wait` step may take (a real member on a loaded two-core machine)
WAIT_SECONDS = 120.0

_UID = re.compile(r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b")
_TIME = re.compile(r"\b\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)?")


#: the member objects of a job are named <job>-<5 random characters>-... (a fresh suffix per run)
_SUFFIX = re.compile(r"\b([a-z0-9-]+?)-[a-z0-9]{5}-(e\d+\b|[a-z0-9]+-\d+\b)")
#: the pod a native gang's FitError names: which pod of the gang kube-scheduler tries (and rejects) first is
#: the order of its scheduling queue, not the simulator's (docs/simulator-fidelity.md, "Native gang that does
#: not fit: which pod is rejected")
_REJECTED = re.compile(r"pod group is unschedulable \(pod ([a-z0-9<>-]+)-\d+:")

#: how the hub words Admitted depends on its own batching, not on the member: a status sync that sees the pods
#: bound writes the adapter's "<scheduler> scheduled the gang: N of N pods bound, 0 running"; one that sees them
#: bound and Running at once jumps phases and writes "cluster C scheduled the gang (epoch E)"
#: (controllers/status_sync.py, `_passed_phases`). Either may happen on either member.
_ADMITTED = re.compile(r"(\S+|cluster \S+) scheduled the gang(: \d+ of \d+ pods bound, \d+ running| \(epoch \d+\))")


def normalise(text: str) -> str:
    """What may differ between two runs of the same scenario: uids, timestamps, random name suffixes, and the
    documented deliberate differences above."""
    text = _SUFFIX.sub(r"\1-<suffix>-\2", _TIME.sub("<time>", _UID.sub("<uid>", text)))
    text = _ADMITTED.sub("<member> scheduled the gang <how the hub saw it>", text)
    return _REJECTED.sub(r"pod group is unschedulable (pod \1-<n>:", text)


def manifest(name: str, spec: dict[str, Any]) -> dict[str, Any]:
    roles = []
    for role in spec["roles"]:
        resources: dict[str, Any] = {"cpu": "2", "memory": "8Gi"}
        if role["gpus"]:
            resources["nvidia.com/gpu"] = role["gpus"]
        roles.append({"name": role["name"], "replicas": role["replicas"],
                      "template": {"image": "trainer:1.4", "resources": resources}})
    return {"apiVersion": "federator.dev/v1alpha1", "kind": "TrainingJob",
            "metadata": {"name": name, "namespace": NAMESPACE},
            "spec": {"roles": roles, "placement": {"network": "ethernet", "gpuModels": ["A100"]}}}


def view_of(job: dict[str, Any]) -> dict[str, Any]:
    """The part of a TrainingJob's status that the comparison reads, normalised."""
    status = job.get("status") or {}
    conditions = sorted(
        (c["type"], c.get("status"), c.get("reason"), normalise(str(c.get("message") or "")))
        for c in status.get("conditions") or ())
    return {
        "phase": status.get("phase"),
        "conditions": [list(c) for c in conditions],
        "podCounts": status.get("podCounts") or {},
        "cluster": (status.get("placement") or {}).get("cluster"),
    }


def history_of(job: dict[str, Any]) -> list[str]:
    return [normalise(" | ".join(str(h.get(k) or "") for k in ("event", "reason", "cluster", "epoch", "message")))
            for h in (job.get("status") or {}).get("history") or ()]


class ScenarioRun:
    """Plays the scenario against one `federator up` and records what its hub showed."""

    def __init__(self, up: FederatorUp, scenario: dict[str, Any], *, member_kubeconfig: Path) -> None:
        self.up = up
        self.scenario = scenario
        self.member_kubeconfig = member_kubeconfig
        #: the newest TrainingJob seen of each job (kept after it is gone)
        self.last: dict[str, dict[str, Any]] = {}
        #: what each wait saw, in order: "step N job" -> view
        self.at_waits: dict[str, dict[str, Any]] = {}
        #: jobs deleted at the hub: no longer recorded
        self.deleted: set[str] = set()

    def poll(self) -> dict[str, dict[str, Any]]:
        items = self.up.json("get", "tj", "-n", NAMESPACE)["items"]
        present = {j["metadata"]["name"]: j for j in items}
        self.last.update({name: job for name, job in present.items() if name not in self.deleted})
        return present

    def reached(self, job: dict[str, Any] | None, goal: str) -> bool:
        if goal == "gone":
            return job is None
        if job is None:
            return False
        status = job.get("status") or {}
        if "=" not in goal:
            return bool(status.get("phase") == goal)
        kind, _, want = goal.partition("=")
        want_status, _, want_reason = want.partition("/")
        return any(c["type"] == kind and c.get("status") == want_status and (not want_reason or c.get("reason") ==
                   want_reason) for c in status.get("conditions") or ())

    def play(self) -> dict[str, Any]:
        jobs = self.scenario["jobs"]
        for number, step in enumerate(self.scenario["steps"]):
            ((kind, arg),) = step.items()
            if kind == "submit":
                for name in arg:
                    path = self.up.workdir / f"{name}.yaml"
                    path.write_text(yaml.safe_dump(manifest(name, jobs[name])))
                    self.up.kubectl("apply", "-f", str(path))
            elif kind == "annotatePods":
                pairs = [f"{k}={v}" for k, v in arg["annotations"].items()]
                kubectl("annotate", "pods", "-n", NAMESPACE, "-l", f"federator.dev/job-name={arg['job']}", *pairs,
                        kubeconfig=self.member_kubeconfig, cache=self.up.workdir / "member-kc")
            elif kind == "delete":
                # what the hub showed of a deleted job is what it showed before the delete: how long the delete
                # itself takes (member pods' termination, the PodGroup's finalizer) is the member's timing
                self.poll()
                self.deleted.add(arg)
                self.up.kubectl("delete", "tj", arg, "-n", NAMESPACE, "--wait=false")
            elif kind == "wait":
                goals: dict[str, str] = dict(arg)

                def met(goals: dict[str, str] = goals) -> dict[str, Any] | None:
                    present = self.poll()
                    done = all(self.reached(present.get(n), g) for n, g in goals.items())
                    return {"jobs": present} if done else None

                present = wait_for(f"step {number}: {goals}", met, timeout=WAIT_SECONDS, interval=0.3)["jobs"]
                for name, goal in goals.items():
                    if goal != "gone" and name not in self.deleted:
                        self.at_waits[f"step {number}: {name} {goal}"] = view_of(present[name])
            else:
                raise AssertionError(f"{SCENARIO}: unknown step {kind!r}")
        return {name: {"history": history_of(self.last[name]), "waits": {
            k: v for k, v in self.at_waits.items() if k.split(" ")[2] == name},
            "last": view_of(self.last[name])} for name in jobs}


def play(work: Path, scenario: dict[str, Any], members: str) -> dict[str, Any]:
    work.mkdir(parents=True, exist_ok=True)
    profile = work / "profile.yaml"
    profile.write_text(yaml.safe_dump(scenario["profile"]))
    name = scenario["profile"]["name"]
    up = FederatorUp(work, "--members", members, "--sim-profile", str(profile),
                     "--sim-run-seconds", str(scenario["runSeconds"]))
    member_kubeconfig = (up.state / "kube" / f"{name}-admin.kubeconfig" if members == "kube"
                         else up.state / "sim" / f"{name}.kubeconfig")
    try:
        up.start(timeout=300)
        wait_for("the member Ready", lambda: any(
            c["type"] == "Ready" and c["status"] == "True"
            for c in (up.json("get", "mc", name).get("status") or {}).get("conditions") or ()), timeout=120)
        return ScenarioRun(up, scenario, member_kubeconfig=member_kubeconfig).play()
    finally:
        code = up.stop()
        (work / "hub-log.jsonl").write_text("\n".join(json.dumps(r) for r in up.logs) + "\n")
        assert code == 0, up.other_stderr[-20:]


@pytest.fixture(scope="module")
def scenario() -> Iterator[dict[str, Any]]:
    yield yaml.safe_load(SCENARIO.read_text())


def test_the_hub_sees_the_same_on_a_simulated_and_a_real_member(
        scenario: dict[str, Any], kube_binaries: KubeBinaries, tmp_path: Path) -> None:
    started = time.monotonic()
    simulated = play(tmp_path / "sim", scenario, "sim")
    real = play(tmp_path / "kube", scenario, "kube")
    (tmp_path / "views.json").write_text(json.dumps({"sim": simulated, "kube": real}, indent=1))
    assert set(simulated) == set(real) == set(scenario["jobs"])
    # the scenario means what its comments say (on both; equal views alone could be equally wrong)
    assert simulated["ok"]["last"]["phase"] == "Succeeded"
    assert simulated["fails"]["last"]["phase"] == "Failed"
    assert any("exit code 3" in c[3] for c in simulated["fails"]["last"]["conditions"]), simulated["fails"]
    assert simulated["waits"]["last"]["podCounts"]["worker"]["running"] == 0
    sim_text = json.dumps(simulated, indent=1, sort_keys=True).splitlines()
    real_text = json.dumps(real, indent=1, sort_keys=True).splitlines()
    diff = "\n".join(difflib.unified_diff(sim_text, real_text, "simulated member", "real member", lineterm=""))
    assert not diff, f"the hub saw different things ({time.monotonic() - started:.0f}s):\n{diff}"
