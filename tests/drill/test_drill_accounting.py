"""The drill's accounting, on the samples and final jobs a drill would see (build_report is pure): every
affected gang lands in exactly one of moved, unplaceable, rode out, restarted in place and lost, and a gang
the drill cannot place in any of them is reported as a violation, in the notes and in the text, never
silently dropped."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

from federator.apis.drillreport import ACCOUNTED, OUTCOME_BUCKETS, accounted, validate_drillreport
from federator.cli.drillrun import DrillOptions, Observation, PodView, Sample, _unanswered, build_report, render_report

HOME, OTHER, NODE = "home", "other", "node-1"
START = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)


def _job(name: str, *, phase: str = "Running", cluster: str | None = HOME, epoch: int = 1,
         reason: str = "", wait: bool = False) -> dict[str, Any]:
    status: dict[str, Any] = {"phase": phase, "placement": {"cluster": cluster, "epoch": epoch} if cluster else {}}
    if reason:
        status["conditions"] = [{"type": "Failed", "status": "True", "reason": reason}]
    spec: dict[str, Any] = {"failover": {"onClusterLoss": "wait"}} if wait else {}
    return {"metadata": {"namespace": "ns", "name": name, "uid": f"uid-{name}"}, "spec": spec, "status": status}


def _pods(name: str, *uids: str, epoch: int = 1) -> list[PodView]:
    return [PodView(cluster=HOME, job_uid=f"uid-{name}", epoch=str(epoch), uid=u, node=NODE, phase="Running",
                    deleting=False) for u in uids]


def _report(final: dict[str, dict[str, Any]], *, later_pods: list[PodView], fault: str = "node-failure",
            lost_at: float | None = None) -> dict[str, Any]:
    names = list(final)
    obs = Observation(faulted=[HOME], fault=fault)
    baseline_pods = [p for n in names for p in _pods(n, f"{n}-0", f"{n}-1")]
    obs.set_baseline(Sample(at=-0.1, jobs={f"uid-{n}": _job(n, wait=n.startswith("wait")) for n in names},
                            clusters={}, pods={HOME: baseline_pods}), node=NODE if fault == "node-failure" else None)
    obs.add(Sample(at=1.0, jobs=None, clusters=None, pods={HOME: later_pods}))
    obs.lost_at = lost_at
    options = DrillOptions(clusters=(HOME,), fault=fault, duration=10.0, state_dir=Path("unused"))
    present = {f"uid-{n}": job for n, job in final.items() if job}
    return build_report(obs, options=options, final_jobs=present, plans={}, mode="simulated", started=START,
                        finished=START + dt.timedelta(seconds=30), notes=[])


def test_every_affected_gang_is_counted_once_and_the_counts_add_up() -> None:
    final = {
        "ride": _job("ride"),
        "restart": _job("restart"),
        "requeued": _job("requeued", epoch=2),
        "moved": _job("moved", cluster=OTHER, epoch=2),
        "gone": {},
        "policy": _job("policy", phase="Failed", cluster=None, reason="ClusterLost"),
        "broken": _job("broken", phase="Failed", reason="PodFailed"),
        "pending": _job("pending", phase="Pending", cluster=None, epoch=2),
        "done": _job("done", phase="Succeeded"),
        "doneaway": _job("doneaway", phase="Succeeded", cluster=None),
        "wait": _job("wait", wait=True),
        "odd": _job("odd", cluster=OTHER, epoch=1),
    }
    # "moved" and "odd" left; "restart" got new pods in place; everyone else kept theirs
    later = [p for n in final if n not in ("moved", "odd", "restart") for p in _pods(n, f"{n}-0", f"{n}-1")]
    later += _pods("restart", "restart-new-0", "restart-new-1")
    spec = _report(final, later_pods=later)
    outcomes = {g["name"]: g["outcome"] for g in spec["gangs"]}
    assert outcomes == {
        "ride": "rodeOut", "restart": "restartedInPlace", "requeued": "restartedInPlace", "moved": "moved",
        "gone": "lost", "policy": "failedByPolicy", "broken": "lost", "pending": "unplaceable", "done": "finished",
        "doneaway": "finished",
        "wait": "rodeOut", "odd": "unaccounted"}, outcomes
    # "odd" is in another cluster at its old epoch, which no failover does: the drill cannot say what
    # happened to it, and says so rather than dropping it
    assert spec["gangsAffected"] == 12
    assert {k: spec[k] for k in ACCOUNTED} == {"gangsMoved": 1, "gangsUnplaceable": 1, "gangsRodeOut": 4,
                                               "gangsRestartedInPlace": 2, "gangsLost": 3}
    assert accounted(spec) == 11
    assert spec["notes"][0].startswith("accounting violation: 1 affected gang(s)") and "ns/odd" in spec["notes"][0]
    text = render_report(spec)
    assert "(accounted for 11 of 12 affected: must be all)" in text
    assert "ns/odd" in text and "unaccounted" in text
    assert spec["jobsLost"] == 2  # the policy's own failure is a lost gang but not a lost job
    body = {"apiVersion": "federator.dev/v1alpha1", "kind": "DrillReport", "metadata": {"name": "d"}, "spec": spec}
    assert validate_drillreport(body) == []  # a report with a violation is still stored


def test_a_gang_seen_placed_elsewhere_is_moved_and_a_wait_through_a_loss_says_so() -> None:
    obs_final = {"moved": _job("moved", cluster=OTHER, epoch=2), "wait": _job("wait", wait=True)}
    names = list(obs_final)
    obs = Observation(faulted=[HOME], fault="partition")
    obs.set_baseline(Sample(at=-0.1, jobs={f"uid-{n}": _job(n, wait=n == "wait") for n in names}, clusters={},
                            pods={HOME: [p for n in names for p in _pods(n, f"{n}-0")]}))
    obs.add(Sample(at=3.0, jobs={f"uid-{n}": j for n, j in obs_final.items()}, clusters={}, pods={HOME: None}))
    obs.lost_at = 2.0
    options = DrillOptions(clusters=(HOME,), fault="partition", duration=10.0, state_dir=Path("unused"))
    spec = build_report(obs, options=options, final_jobs={f"uid-{n}": j for n, j in obs_final.items()}, plans={},
                        mode="simulated", started=START, finished=START + dt.timedelta(seconds=30), notes=[])
    gangs = {g["name"]: g for g in spec["gangs"]}
    assert gangs["moved"]["outcome"] == "moved" and gangs["wait"]["outcome"] == "rodeOut"
    assert "onClusterLoss: wait" in gangs["wait"]["message"]
    assert spec["gangsMoved"] == 1 and spec["gangsRodeOut"] == 1 and accounted(spec) == spec["gangsAffected"] == 2
    assert not any(n.startswith("accounting violation") for n in spec["notes"])
    assert "must be all" not in render_report(spec)


def test_every_outcome_but_unaccounted_is_in_exactly_one_counted_figure() -> None:
    assert set(OUTCOME_BUCKETS.values()) == set(ACCOUNTED)
    assert "unaccounted" not in OUTCOME_BUCKETS


def _checkpointed(job: dict[str, Any], *, step: int, epoch: int) -> dict[str, Any]:
    job["status"]["checkpoint"] = {"time": "2026-01-01T00:00:10Z", "step": step, "location": f"/ckpt/{step}",
                                   "cluster": HOME, "epoch": epoch}
    return job


def test_a_gang_placed_again_reports_the_checkpoint_step_its_new_copy_restores_from() -> None:
    names = ["moved", "own", "bare", "ride"]
    obs = Observation(faulted=[HOME], fault="partition")
    obs.set_baseline(Sample(at=-0.1, jobs={f"uid-{n}": _checkpointed(_job(n), step=300, epoch=1) for n in names},
                            clusters={}, pods={HOME: [p for n in names for p in _pods(n, f"{n}-0")]}))
    # a sample sees "own" at epoch 2 before its new copy reported: it restores from step 300 (epoch 1)
    seen = {"moved": _checkpointed(_job("moved", cluster=OTHER, epoch=2), step=300, epoch=1),
            "own": _checkpointed(_job("own", cluster=OTHER, epoch=2), step=300, epoch=1),
            "bare": _job("bare", cluster=OTHER, epoch=2), "ride": _checkpointed(_job("ride"), step=300, epoch=1)}
    obs.add(Sample(at=3.0, jobs={f"uid-{n}": j for n, j in seen.items()}, clusters={}, pods={HOME: None}))
    final = {**seen, "own": _checkpointed(_job("own", cluster=OTHER, epoch=2), step=50, epoch=2)}
    options = DrillOptions(clusters=(HOME,), fault="partition", duration=10.0, state_dir=Path("unused"))
    spec = build_report(obs, options=options, final_jobs={f"uid-{n}": j for n, j in final.items()}, plans={},
                        mode="simulated", started=START, finished=START + dt.timedelta(seconds=30), notes=[])
    steps = {g["name"]: g["restoredFromStep"] for g in spec["gangs"]}
    # the new copy's own report (step 50 at epoch 2) is not what it restored from; a gang that stayed at its
    # epoch restored nothing; one with no checkpoint has none
    assert steps == {"moved": 300, "own": 300, "bare": None, "ride": None}, steps
    text = render_report(spec)
    assert text.count("restored from step 300") == 2, text
    body = {"apiVersion": "federator.dev/v1alpha1", "kind": "DrillReport", "metadata": {"name": "d"}, "spec": spec}
    assert validate_drillreport(body) == []
    for bad in (-1, "300", 2**63, 1.5, True):
        hostile = {**body, "spec": {**spec, "gangs": [{**spec["gangs"][0], "restoredFromStep": bad}]}}
        errors = validate_drillreport(hostile)
        assert errors and all(path.startswith("spec.gangs[0].restoredFromStep") for path, _ in errors), (bad, errors)


def test_a_baseline_is_complete_only_when_the_hub_and_every_observed_faulted_cluster_answered() -> None:
    """The drill reads the baseline again until it is complete: a pod the fence agent kills is counted only if
    the drill saw it before (an unanswered baseline read on a loaded machine counted 0 kills)."""
    answered = Sample(at=-0.1, jobs={}, clusters={}, pods={HOME: [], OTHER: None})
    assert _unanswered(answered, [HOME]) == []  # OTHER is not faulted
    assert _unanswered(Sample(at=-0.1, jobs={}, clusters={}, pods={HOME: None}), [HOME]) == [HOME]
    assert _unanswered(Sample(at=-0.1, jobs=None, clusters=None, pods={HOME: None}), [HOME]) == ["the hub", HOME]
    # a faulted cluster this machine cannot observe (no kubeconfig) is not waited for
    assert _unanswered(Sample(at=-0.1, jobs={}, clusters={}, pods={}), [HOME]) == []
