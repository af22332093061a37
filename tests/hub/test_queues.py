"""Queues and PriorityClasses on a real hub: admins write them, researchers and viewers read them, a
Queue's status is the hub's own (405 over HTTP), bad specs get a 422 naming the field and store
nothing; a new TrainingJob's priorityClassName resolves into spec.priority and it gets its namespace's
default Queue (kube's admission plugins, 403 when refused); kubectl and the federator CLI show both."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
import yaml

from ..apis.test_queue import EXAMPLES, example_queues
from .hubtest_support import GROUP_PATH, RunningHub, job, jobs_url

QUEUES = f"{GROUP_PATH}/queues"
CLASSES = "/apis/scheduling.k8s.io/v1/priorityclasses"


def pclass(name: str, value: int, **fields: Any) -> dict[str, Any]:
    return {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": name},
            "value": value, **fields}


def team_queue(name: str, namespaces: dict[str, Any], *, default: bool = True, **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "federator.dev/v1alpha1", "kind": "Queue", "metadata": {"name": name},
            "spec": {"namespaces": namespaces, "quota": {"gpus": {"A100": 8}}, "default": default, **spec}}


async def _create(hub: RunningHub, path: str, body: dict[str, Any]) -> dict[str, Any]:
    status, answer = await hub.request("POST", path, body=body)
    assert status == 201, answer
    assert isinstance(answer, dict)
    return answer


async def _names(hub: RunningHub, path: str) -> list[str]:
    status, listed = await hub.request("GET", path)
    assert status == 200, listed
    return [i["metadata"]["name"] for i in listed["items"]]


async def test_admins_write_queues_and_classes_everyone_reads_them_and_status_is_the_hubs(hub: RunningHub) -> None:
    created = await _create(hub, QUEUES, example_queues()[0])
    assert created["spec"] == example_queues()[0]["spec"] and "status" not in created
    pc = await _create(hub, CLASSES, pclass("high", 1000))
    assert pc["preemptionPolicy"] == "PreemptLowerPriority"  # kube's default
    for who in ("researcher", "other", "viewer"):
        for path in (f"{QUEUES}/vision", f"{QUEUES}/vision/status", f"{CLASSES}/high", QUEUES, CLASSES):
            status, got = await hub.request("GET", path, who=who)
            assert status == 200, (who, path, got)
    other_queue = team_queue("mine", {"names": ["default"]})
    writes = [("POST", QUEUES, other_queue), ("PUT", f"{QUEUES}/vision", created),
              ("PATCH", f"{QUEUES}/vision", {"spec": {"weight": 100}}), ("DELETE", f"{QUEUES}/vision", None),
              ("PUT", f"{QUEUES}/vision/status", {**created, "status": {"pendingJobs": 0}}),
              ("POST", CLASSES, pclass("mine", 999_999_999)), ("PATCH", f"{CLASSES}/high", {"description": "x"}),
              ("DELETE", f"{CLASSES}/high", None)]
    for who in ("researcher", "viewer"):
        for method, path, body in writes:
            headers = {"Content-Type": "application/merge-patch+json"} if method == "PATCH" else None
            status, answer = await hub.request(method, path, who=who, body=body, headers=headers)
            assert status == 403 and answer["reason"] == "Forbidden", (who, method, path, answer)
    # Nobody writes a Queue's status over HTTP, not even an admin: the hub's controllers do, in-process.
    status, answer = await hub.request("PUT", f"{QUEUES}/vision/status",
                                       body={**created, "status": {"admittedJobs": 99}})
    assert status == 405 and answer["reason"] == "MethodNotAllowed", answer
    status, answer = await hub.request("PATCH", f"{QUEUES}/vision/status", body={"status": {"admittedJobs": 99}},
                                       headers={"Content-Type": "application/merge-patch+json"})
    assert status == 405, answer
    # ... and status sent with the main resource is dropped, as for every kind with /status.
    hostile = copy.deepcopy(created)
    hostile["status"] = {"admittedJobs": 99}
    hostile["spec"]["weight"] = 3
    status, answer = await hub.request("PUT", f"{QUEUES}/vision", body=hostile)
    assert status == 200 and "status" not in answer and answer["spec"]["weight"] == 3, answer
    # The in-process writer (a controller) can.
    rt = hub.context.registry.get("federator.dev", "v1alpha1", "queues")
    assert rt is not None

    def with_status(obj: dict[str, Any]) -> dict[str, Any]:
        obj["status"] = {"used": {"gpus": {"A100": 70}}, "borrowed": {"gpus": {"A100": 6}}, "pendingJobs": 2,
                         "admittedJobs": 5}
        return obj

    await hub.context.storage.guaranteed_update(rt, namespace=None, name="vision", mutate=with_status,
                                                subresource="status", trusted_status=True)
    status, got = await hub.request("GET", f"{QUEUES}/vision/status", who="researcher")
    assert status == 200 and got["status"]["admittedJobs"] == 5
    status, discovery = await hub.request("GET", GROUP_PATH, who="viewer")
    assert {"name": "queues/status", "singularName": "", "namespaced": False, "kind": "Queue",
            "verbs": ["get"]} in discovery["resources"]


@pytest.mark.parametrize(("edit", "field"), [
    (lambda q: q["spec"]["quota"]["gpus"].update(A100=-1), "spec.quota.gpus[A100]"),
    (lambda q: q["spec"]["preemption"].update(withinQueue="Always"), "spec.preemption.withinQueue"),
    (lambda q: q["spec"].pop("cohort"), "spec.borrowingLimit"),
    (lambda q: q["spec"]["namespaces"].update(selector={"matchExpressions": [{"key": "x", "operator": "In"}]}),
     "spec.namespaces.selector.matchExpressions[0].values"),
    (lambda q: q["spec"].update(weight=0), "spec.weight"),
    (lambda q: q["spec"]["quota"].update(gpus={f"m{i}": 1 for i in range(65)}), "spec.quota.gpus"),
    (lambda q: q["spec"]["quota"].update(cpu="1e400"), "spec.quota.cpu"),
    (lambda q: q["metadata"].update(name="Vision"), "metadata.name"),
    (lambda q: q["spec"].update(tiers=[{"name": "on-prem", "clusterSelector": {"matchExpressions": [
        {"key": "site", "operator": "In", "values": ["a"]}, {"key": "site", "operator": "NotIn", "values": ["a"]}]}}]),
     "spec.tiers[0].clusterSelector"),
    (lambda q: q["spec"].update(tiers=[{"name": "x", "clusterSelector": {}, "spillAfterSeconds": -1}]),
     "spec.tiers[0].spillAfterSeconds"),
    (lambda q: q["spec"].update(tiers=[{"name": f"t{i}", "clusterSelector": {}} for i in range(1000)]), "spec.tiers"),
    (lambda q: q["spec"].update(budget={"amount": "-1500.00", "currency": "USD"}), "spec.budget.amount"),
    (lambda q: q["spec"].update(budget={"amount": -5, "currency": "USD"}), "spec.budget.amount"),
    (lambda q: q["spec"].update(budget={"amount": "1500", "currency": "usd"}), "spec.budget.currency"),
    (lambda q: q["spec"].update(budget={"amount": "1500", "currency": "US$"}), "spec.budget.currency"),
    (lambda q: q["spec"].update(budget={"amount": "1500", "currency": "EURO"}), "spec.budget.currency"),
    (lambda q: q["spec"].update(budget={"amount": "1500", "currency": "USD", "gpuHours": 10}), "spec.budget"),
    (lambda q: q["spec"].update(budget={"amount": 10**30, "currency": "USD"}), "spec.budget.amount"),
    (lambda q: q["spec"].update(budget={"amount": "9" * 100_000, "currency": "USD"}), "spec.budget.amount"),
    (lambda q: q["spec"].update(budget={"gpuHours": -1}), "spec.budget.gpuHours"),
    (lambda q: q["spec"].update(budget={"gpuHours": "2000"}), "spec.budget.gpuHours"),
    (lambda q: q["spec"].update(budget={"gpuHours": 1e300}), "spec.budget.gpuHours"),
])
async def test_bad_queues_get_422_naming_the_field_and_store_nothing(hub: RunningHub, edit: Any, field: str) -> None:
    bad = example_queues()[0]
    edit(bad)
    status, answer = await hub.request("POST", QUEUES, body=bad)
    assert status == 422 and answer["reason"] == "Invalid", answer
    assert field in [c["field"] for c in answer["details"]["causes"]], answer
    assert await _names(hub, QUEUES) == []


async def test_hostile_queue_and_class_bodies_change_nothing(hub: RunningHub) -> None:
    nested: Any = {"a": 1}
    for _ in range(200):
        nested = {"a": nested}
    bodies: list[tuple[str, Any, int]] = [
        (QUEUES, [example_queues()[0]], 400),
        (QUEUES, {**example_queues()[0], "kind": "TrainingJob"}, 400),
        (QUEUES, {k: v for k, v in example_queues()[0].items() if k != "kind"}, 400),
        (QUEUES, {**example_queues()[0], "spec": nested}, 0),
        (CLASSES, {**pclass("x", 10), "value": nested}, 0),
        (CLASSES, pclass("y", 2_000_000_000), 422),
        (CLASSES, pclass("system-mine", 10), 422),
        (CLASSES, {**pclass("z", 10), "preemptionPolicy": "x" * 100_000}, 422),
    ]
    for path, body, expected in bodies:
        status, answer = await hub.request("POST", path, body=body)
        assert status >= 400 and (expected == 0 or status == expected), (path, status, answer)
        assert answer["kind"] == "Status" and len(answer["message"]) < 2000
    status, answer = await hub.request("POST", QUEUES, data=b"x" * (4 * 1024 * 1024))
    assert status == 413, answer
    assert await _names(hub, QUEUES) == [] and await _names(hub, CLASSES) == []


async def test_only_one_global_default_class(hub: RunningHub) -> None:
    await _create(hub, CLASSES, pclass("normal", 100, globalDefault=True))
    status, answer = await hub.request("POST", CLASSES, body=pclass("other", 50, globalDefault=True))
    assert status == 403 and "PriorityClass normal is already marked as default" in answer["message"], answer
    other = await _create(hub, CLASSES, pclass("other", 50, globalDefault=False))
    assert "globalDefault" not in other  # omitempty, as kube stores it
    # no value is 0, as kube-apiserver decodes it (the hub and the simulator default alike)
    zero = await _create(hub, CLASSES, {k: v for k, v in pclass("zero", 1).items() if k != "value"})
    assert (zero["value"], zero["preemptionPolicy"]) == (0, "PreemptLowerPriority"), zero
    status, answer = await hub.request("PATCH", f"{CLASSES}/other", body={"globalDefault": True},
                                       headers={"Content-Type": "application/merge-patch+json"})
    assert status == 403 and "Only one default can exist" in answer["message"], answer
    status, answer = await hub.request("PATCH", f"{CLASSES}/other", body={"value": 51},
                                       headers={"Content-Type": "application/merge-patch+json"})
    assert status == 422 and answer["details"]["causes"][0]["field"] == "value", answer
    # the default itself may be edited
    status, answer = await hub.request("PATCH", f"{CLASSES}/normal", body={"description": "the usual"},
                                       headers={"Content-Type": "application/merge-patch+json"})
    assert status == 200 and answer["globalDefault"] is True, answer


async def test_priority_classes_resolve_into_the_job_priority(hub: RunningHub) -> None:
    await _create(hub, CLASSES, pclass("high", 1000))
    plain = job("default", "plain")
    del plain["spec"]["priority"]
    assert "priority" not in (await _create(hub, jobs_url("default"), plain))["spec"]  # no class, no default
    high = job("default", "high", priorityClassName="high")
    del high["spec"]["priority"]
    created = await _create(hub, jobs_url("default"), high)
    assert (created["spec"]["priority"], created["spec"]["priorityClassName"]) == (1000, "high")
    same = await _create(hub, jobs_url("default"), job("default", "same", priorityClassName="high", priority=1000))
    assert same["spec"]["priority"] == 1000
    for name, spec, field, words in (
            ("unknown", {"priorityClassName": "urgent"}, "spec.priorityClassName",
             "no PriorityClass with name urgent was found"),
            ("clash", {"priorityClassName": "high", "priority": 5}, "spec.priority",
             "the integer value of priority (5) must not be provided"),
            ("long", {"priorityClassName": "x" * 250}, "spec.priorityClassName", "no PriorityClass with name")):
        status, answer = await hub.request("POST", jobs_url("default"), body=job("default", name, **spec),
                                           who="researcher")
        assert status == 403 and answer["reason"] == "Forbidden", answer
        assert words in answer["message"] and field in answer["message"], answer
        assert answer["details"]["causes"] == [{"reason": "FieldValueForbidden", "field": field,
                                                "message": answer["message"].split(f"{field}: ", 1)[1]}]
    for name, spec, field in (("badname", {"priorityClassName": "Not A Name"}, "spec.priorityClassName"),
                              ("badtype", {"priorityClassName": 7}, "spec.priorityClassName"),
                              ("badprio", {"priorityClassName": "high", "priority": "high"}, "spec.priority")):
        status, answer = await hub.request("POST", jobs_url("default"), body=job("default", name, **spec))
        assert status == 422 and field in [c["field"] for c in answer["details"]["causes"]], answer
    assert sorted(await _names(hub, jobs_url("default"))) == ["high", "plain", "same"]
    # A globalDefault class applies to jobs that set neither, and is written into the job.
    await _create(hub, CLASSES, pclass("normal", 100, globalDefault=True))
    plain2 = job("default", "plain2")
    del plain2["spec"]["priority"]
    created = await _create(hub, jobs_url("default"), plain2)
    assert (created["spec"]["priority"], created["spec"]["priorityClassName"]) == (100, "normal")
    explicit = await _create(hub, jobs_url("default"), job("default", "explicit", priority=7))
    assert explicit["spec"]["priority"] == 7 and "priorityClassName" not in explicit["spec"]
    # dry run resolves the same way and stores nothing
    status, dry = await hub.request("POST", jobs_url("default") + "?dryRun=All", body=plain2 | {
        "metadata": {"name": "dry", "namespace": "default"}})
    assert status == 201 and dry["spec"]["priority"] == 100
    assert "dry" not in await _names(hub, jobs_url("default"))


async def test_updates_keep_what_admission_wrote_and_the_class_is_immutable(hub: RunningHub) -> None:
    await _create(hub, CLASSES, pclass("high", 1000))
    await _create(hub, QUEUES, team_queue("team-default", {"names": ["default"]}))
    await _create(hub, QUEUES, team_queue("spare", {"selector": {}}, default=False))
    manifest = job("default", "j", priorityClassName="high")
    del manifest["spec"]["priority"]
    created = await _create(hub, jobs_url("default"), manifest)
    assert (created["spec"]["priority"], created["spec"]["queue"]) == (1000, "team-default")
    # a PUT of the original manifest (no priority, no queue) keeps both
    replaced = copy.deepcopy(manifest)
    replaced["metadata"]["resourceVersion"] = created["metadata"]["resourceVersion"]
    status, answer = await hub.request("PUT", jobs_url("default", "j"), body=replaced, who="researcher")
    assert status == 200, answer
    assert (answer["spec"]["priority"], answer["spec"]["priorityClassName"], answer["spec"]["queue"]) == \
        (1000, "high", "team-default")
    merge = {"Content-Type": "application/merge-patch+json"}
    status, answer = await hub.request("PATCH", jobs_url("default", "j"), body={"spec": {"queue": None}},
                                       headers=merge, who="researcher")
    assert status == 200 and answer["spec"]["queue"] == "team-default", answer  # a queue is never removed
    status, answer = await hub.request("PATCH", jobs_url("default", "j"), body={"spec": {"queue": "spare"}},
                                       headers=merge, who="researcher")
    assert status == 200 and answer["spec"]["queue"] == "spare", answer  # ... but may change
    for patch, field in (({"spec": {"priorityClassName": "other"}}, "spec.priorityClassName"),
                         ({"spec": {"priority": 5}}, "spec.priority")):
        status, answer = await hub.request("PATCH", jobs_url("default", "j"), body=patch, headers=merge)
        assert status == 422 and answer["details"]["causes"][0]["field"] == field, answer
    # a job without a class keeps a mutable priority, as before classes
    free = await _create(hub, jobs_url("default"), job("default", "free", priority=5))
    assert free["spec"]["queue"] == "team-default"
    status, answer = await hub.request("PATCH", jobs_url("default", "free"), body={"spec": {"priority": 50}},
                                       headers=merge)
    assert status == 200 and answer["spec"]["priority"] == 50, answer


async def test_jobs_get_their_namespace_default_queue(hub: RunningHub) -> None:
    for obj in example_queues():  # vision (names: [vision]), nlp (selector over metadata.name: nlp, speech)
        await _create(hub, QUEUES, obj)
    await _create(hub, QUEUES, team_queue("closed", {"names": ["nobody"]}, default=False))
    await _create(hub, QUEUES, team_queue("everyone", {"selector": {}}, default=False))
    cases = [("vision", {}, "vision"), ("nlp", {}, "nlp"), ("speech", {}, "nlp"), ("default", {}, None),
             ("vision", {"queue": "everyone"}, "everyone"), ("default", {"queue": "later"}, "later"),
             ("vision", {"queue": ""}, "vision")]
    for index, (namespace, spec, expected) in enumerate(cases):
        created = await _create(hub, jobs_url(namespace), job(namespace, f"j{index}", **spec))
        assert created["spec"].get("queue") == expected, (namespace, spec, created["spec"])
    status, answer = await hub.request("POST", jobs_url("default"), body=job("default", "sneaky", queue="vision"),
                                       who="researcher")
    assert status == 403 and answer["details"]["causes"][0]["field"] == "spec.queue", answer
    assert "Queue vision does not take jobs from namespace default" in answer["message"]
    status, answer = await hub.request("POST", jobs_url("default"), body=job("default", "bad", queue="Not_A_Queue"))
    assert status == 422 and answer["details"]["causes"][0]["field"] == "spec.queue", answer
    # Two default queues for one namespace: the newer one wins (kube's rule for default StorageClasses).
    await _create(hub, QUEUES, team_queue("vision-2", {"names": ["vision"]}))
    created = await _create(hub, jobs_url("vision"), job("vision", "after"))
    assert created["spec"]["queue"] in ("vision", "vision-2")  # created in the same second: the name decides
    stored = {q["metadata"]["name"]: q["metadata"]["creationTimestamp"]
              for q in (await hub.request("GET", QUEUES))[1]["items"]}
    expected = "vision-2" if stored["vision-2"] > stored["vision"] else "vision"
    assert created["spec"]["queue"] == expected


@pytest.mark.kubectl
async def test_kubectl_creates_and_shows_queues_and_priority_classes(hub: RunningHub) -> None:
    code, out, err = await hub.kubectl("admin", "create", "priorityclass", "high", "--value=1000",
                                       "--description=deadline runs")
    assert code == 0 and out.strip() == "priorityclass.scheduling.k8s.io/high created", (out, err)
    code, out, err = await hub.kubectl("researcher", "create", "priorityclass", "mine", "--value=5")
    assert code != 0 and "forbidden" in err and 'cannot create resource "priorityclasses"' in err, err
    code, out, err = await hub.kubectl("admin", "apply", "-f", str(EXAMPLES))
    assert code == 0, err
    assert sorted(out.splitlines()) == [
        "priorityclass.scheduling.k8s.io/research-default created",
        "priorityclass.scheduling.k8s.io/research-high created",
        "queue.federator.dev/nlp created", "queue.federator.dev/vision created"], out
    code, out, err = await hub.kubectl("admin", "apply", "-f", str(EXAMPLES))
    assert code == 0 and all(line.endswith("unchanged") for line in out.splitlines()), (out, err)
    code, out, err = await hub.kubectl("researcher", "get", "pc")
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0].split() == ["NAME", "VALUE", "GLOBAL-DEFAULT", "AGE", "PREEMPTIONPOLICY"]
    assert [line.split()[:3] for line in lines[1:]] == [["high", "1000", "false"],
                                                         ["research-default", "100", "true"],
                                                         ["research-high", "1000", "false"]]
    code, out, err = await hub.kubectl("researcher", "get", "queues")
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0].split() == ["NAME", "QUOTA", "USED", "BORROWED", "PENDING", "ADMITTED", "BUDGET", "SPENT", "AGE"]
    assert lines[2].split()[:2] == ["vision", "A100=64,H100=16,cpu=2048,memory=16Ti"], out
    code, out, err = await hub.kubectl("admin", "apply", "-f", str(EXAMPLES.parent / "queue-budget.yaml"))
    assert code == 0, err
    code, out, err = await hub.kubectl("researcher", "get", "queue", "ads-budget", "research-hours")
    assert code == 0, err
    rows = out.splitlines()
    assert "1500.00 USD" in rows[1] and "2000 GPU-hours" in rows[2], out
    code, out, err = await hub.kubectl("admin", "explain", "queue.spec.budget")
    assert code == 0 and "calendar month (UTC)" in out, (out, err)
    code, out, err = await hub.kubectl("viewer", "get", "q", "-o", "wide")
    assert code == 0, err
    assert out.splitlines()[0].split()[-3:] == ["COHORT", "WEIGHT", "DEFAULT"]
    code, out, err = await hub.kubectl("researcher", "delete", "queue", "vision")
    assert code != 0 and "Forbidden" in err, err
    code, out, err = await hub.kubectl("admin", "explain", "queue.spec.borrowingLimit")
    assert code == 0 and "Requires cohort" in out, (out, err)
    # a job submitted with kubectl gets the class's value and the namespace's default queue
    manifest = job("vision", "deadline", priorityClassName="research-high")
    del manifest["spec"]["priority"]
    code, out, err = await hub.kubectl("researcher", "create", "-f", "-", "-n", "vision", stdin=json.dumps(manifest))
    assert code != 0 and "Forbidden" in err, err  # bob is a researcher of "default", not "vision"
    code, out, err = await hub.kubectl("admin", "create", "-f", "-", stdin=json.dumps(manifest))
    assert code == 0, err
    code, out, err = await hub.kubectl("admin", "get", "tj", "deadline", "-n", "vision", "-o", "yaml")
    stored = yaml.safe_load(out)["spec"]
    assert (stored["priority"], stored["queue"]) == (1000, "vision"), out
    manifest["metadata"]["name"] = "nope"
    manifest["spec"]["priorityClassName"] = "urgent"
    code, out, err = await hub.kubectl("admin", "create", "-f", "-", stdin=json.dumps(manifest))
    assert code != 0 and "no PriorityClass with name urgent was found" in err, err


async def test_federator_get_queues(hub: RunningHub) -> None:
    for obj in example_queues():
        await _create(hub, QUEUES, obj)
    code, out, err = await hub.cli("researcher", "get", "queues")
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0].split() == ["NAME", "QUOTA", "USED", "BORROWED", "PENDING", "ADMITTED", "BUDGET", "SPENT", "AGE"]
    assert [line.split()[:2] for line in lines[1:]] == [["nlp", "H100=48"],
                                                         ["vision", "A100=64,H100=16,cpu=2048,memory=16Ti"]]
    # a budgeted queue shows its budget, and the spend the hub writes into its status
    budgeted = team_queue("ads", {"names": ["ads"]}, default=False, budget={"amount": "1500.00", "currency": "USD"})
    await _create(hub, QUEUES, budgeted)
    rt = hub.context.registry.get("federator.dev", "v1alpha1", "queues")
    assert rt is not None

    def with_spend(obj: dict[str, Any]) -> dict[str, Any]:
        obj["status"] = {"spend": {"period": "2026-11", "currency": "USD", "spent": "1512.403219",
                                   "gpuHours": 380.54, "projected": "2100.000000", "projectedGpuHours": 500.0,
                                   "remaining": "-12.403219", "lastAccruedAt": "2026-11-29T11:00:00Z"}}
        return obj

    await hub.context.storage.guaranteed_update(rt, namespace=None, name="ads", mutate=with_spend,
                                                subresource="status", trusted_status=True)
    code, out, err = await hub.cli("researcher", "get", "queues")
    assert code == 0, err
    [row] = [line for line in out.splitlines() if line.startswith("ads ")]
    assert "1500.00 USD" in row and "1512.40 USD, 380.5 GPU-hours" in row, out
    code, out, err = await hub.cli("viewer", "get", "q", "vision", "-o", "json")
    assert code == 0 and json.loads(out)["spec"]["cohort"] == "research", err
    code, out, err = await hub.cli("viewer", "get", "queues", "../../api/v1")
    lines = [line for line in err.splitlines() if line.strip()]
    assert code != 0 and len(lines) == 1 and "(NotFound)" in err and "Traceback" not in err and out == "", err
    code, out, err = await hub.cli("wrong", "get", "queues")
    assert code != 0 and "Unauthorized" in err and out == "", err


def _stored(name: str, namespaces: Any, *, default: bool = True, created: str = "2024-05-01T12:00:00Z") -> Any:
    return {"metadata": {"name": name, "creationTimestamp": created},
            "spec": {"namespaces": namespaces, "default": default}}


@pytest.mark.parametrize(("namespaces", "selected"), [
    ({"names": ["vision"]}, {"vision"}),
    ({"names": []}, set()),
    ({"selector": {}}, {"vision", "nlp", "default"}),
    ({"selector": {"matchLabels": {"kubernetes.io/metadata.name": "nlp"}}}, {"nlp"}),
    ({"selector": {"matchExpressions": [{"key": "kubernetes.io/metadata.name", "operator": "NotIn",
                                         "values": ["default"]}]}}, {"vision", "nlp"}),
    ({"selector": {"matchExpressions": [{"key": "team", "operator": "Exists"}]}}, set()),
    ({"selector": {"matchExpressions": [{"key": "team", "operator": "DoesNotExist"}]}}, {"vision", "nlp", "default"}),
    ({"names": ["default"], "selector": {"matchLabels": {"kubernetes.io/metadata.name": "nlp"}}}, {"default", "nlp"}),
    # malformed stored objects select nothing, and never raise
    ({"selector": {"matchExpressions": [{"key": "x", "operator": "Near"}]}}, set()),
    ({"selector": "everything"}, set()),
    ("vision", set()),
    (None, set()),
])
def test_selects_namespace(namespaces: Any, selected: set[str]) -> None:
    from federator.hub.kinds import selects_namespace

    assert {ns for ns in ("vision", "nlp", "default") if selects_namespace(_stored("q", namespaces), ns)} == selected


def test_queue_for_namespace_picks_the_newest_default_that_selects_it() -> None:
    from federator.hub.kinds import queue_for_namespace

    queues = [_stored("b-old", {"names": ["vision"]}, created="2024-05-01T12:00:00Z"),
              _stored("a-new", {"selector": {}}, created="2024-05-02T12:00:00Z"),
              _stored("z-new", {"names": ["vision"]}, created="2024-05-02T12:00:00Z"),
              _stored("newest-not-default", {"names": ["vision"]}, default=False, created="2024-06-01T00:00:00Z"),
              _stored("other-ns", {"names": ["nlp"]}, created="2024-07-01T00:00:00Z"),
              {"metadata": {"name": "broken"}, "spec": "?"}, {"spec": {"default": True}}]
    assert queue_for_namespace(queues, "vision") == "a-new"  # newest, then the name that sorts first
    assert queue_for_namespace(queues, "nlp") == "other-ns"
    assert queue_for_namespace(queues[:1], "vision") == "b-old"
    assert queue_for_namespace(queues[:1], "default") is None
    assert queue_for_namespace([], "vision") is None
