"""batch/v1 Job as a gang: kube's documented Indexed Jobs translate (or are refused with the field named), the
twin validates as a TrainingJob, the pod contract is kube's Job controller's, bad and hostile input gives errors
at the Job's paths and never an exception."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import jsonschema
import pytest
import yaml

from federator.apis.common import FieldError, ValidationSettings
from federator.apis.failurepolicy import FailureAction, match_pod_failure
from federator.apis.jobkinds.base import Translation, source_errors
from federator.apis.jobkinds.batchjob import CONTRACT_ANNOTATION, JOB

SETTINGS = ValidationSettings()
Edit = Callable[[dict[str, Any], str, Any], dict[str, Any]]
Refused = Callable[[Translation, str, str], None]

# https://kubernetes.io/docs/tasks/job/job-with-pod-to-pod-communication/ (kubernetes/website
# content/en/examples/... "Job with Pod-to-Pod Communication"): an Indexed Job whose pods all run at once.
POD_TO_POD = """
apiVersion: batch/v1
kind: Job
metadata:
  name: example-job
spec:
  completions: 3
  parallelism: 3
  completionMode: Indexed
  template:
    spec:
      subdomain: headless-svc # has to match Service name
      restartPolicy: Never
      containers:
      - name: example-workload
        image: bash:latest
        command:
        - bash
        - -c
        - |
          for i in 0 1 2
          do
            gotStatus="-1"
            wantStatus="0"
            while [ $gotStatus -ne $wantStatus ]
            do
              ping -c 1 example-job-${i}.headless-svc > /dev/null 2>&1
              gotStatus=$?
              if [ $gotStatus -ne $wantStatus ]; then
                echo "Failed to ping pod example-job-${i}.headless-svc, retrying in 1 second..."
                sleep 1
              fi
            done
            echo "Successfully pinged pod: example-job-${i}.headless-svc"
          done
"""

# https://kubernetes.io/examples/application/job/indexed-job.yaml ("Indexed Job for Parallel Processing with
# Static Work Assignment"): 5 completions, 3 at a time: a work queue, not a gang.
INDEXED_WORK_QUEUE = """
apiVersion: batch/v1
kind: Job
metadata:
  name: 'indexed-job'
spec:
  completions: 5
  parallelism: 3
  completionMode: Indexed
  template:
    spec:
      restartPolicy: Never
      initContainers:
      - name: 'input'
        image: 'docker.io/library/bash'
        command:
        - "bash"
        - "-c"
        - |
          items=(foo bar baz qux xyz)
          echo ${items[$JOB_COMPLETION_INDEX]} > /input/data.txt
        volumeMounts:
        - mountPath: /input
          name: input
      containers:
      - name: 'worker'
        image: 'docker.io/library/busybox'
        command:
        - "rev"
        - "/input/data.txt"
        volumeMounts:
        - mountPath: /input
          name: input
      volumes:
      - name: input
        emptyDir: {}
"""

# https://kubernetes.io/examples/controllers/job.yaml (the pi Job of "Jobs"): NonIndexed, one pod.
PI = """
apiVersion: batch/v1
kind: Job
metadata:
  name: pi
spec:
  template:
    spec:
      containers:
      - name: pi
        image: perl:5.34.0
        command: ["perl",  "-Mbignum=bpi", "-wle", "print bpi(2000)"]
      restartPolicy: Never
  backoffLimit: 4
"""


def load(text: str) -> dict[str, Any]:
    data = yaml.safe_load(text)
    assert isinstance(data, dict)
    return data


def translate(obj: Any, settings: ValidationSettings = SETTINGS) -> Translation:
    return JOB.translate(obj, settings)


def test_the_upstream_examples_are_valid_under_the_schema(schema_unknown: Callable[..., list[str]]) -> None:
    for text in (POD_TO_POD, INDEXED_WORK_QUEUE, PI):
        jsonschema.Draft7Validator(JOB.schema).validate(load(text))
        assert schema_unknown(JOB.schema, load(text)) == []
    assert JOB.upstream.startswith("k8s.io/kubernetes@v1.36.3 ")
    assert JOB.api_version == "batch/v1" and JOB.plural == "jobs"


def test_an_indexed_gang_translates_unchanged(twin_errors: Callable[[Translation], list[FieldError]]) -> None:
    job = load(POD_TO_POD)
    before = copy.deepcopy(job)
    result = translate(job)
    assert job == before
    assert result.errors == []
    assert result.spec is not None
    assert result.spec["roles"] == [{
        "name": "worker", "replicas": 3, "restartPolicy": "Never",
        "template": {"spec": {k: v for k, v in job["spec"]["template"]["spec"].items() if k != "restartPolicy"}}}]
    assert result.spec["backoffLimit"] == 6 and result.spec["suspend"] is False
    assert result.role_paths == {"worker": "spec.template"}
    assert twin_errors(result) == []


def test_the_pi_job_is_a_gang_of_one(twin_errors: Callable[[Translation], list[FieldError]]) -> None:
    result = translate(load(PI))
    assert result.spec is not None
    assert [(r["replicas"], r["restartPolicy"]) for r in result.spec["roles"]] == [(1, "Never")]
    assert result.spec["backoffLimit"] == 4
    assert twin_errors(result) == []
    contract = JOB.pod_contract
    assert contract is not None
    pod = contract("pi", "ns", "worker", 0, result.annotations)
    # a NonIndexed Job's pods have no completion index
    assert pod.labels == {"batch.kubernetes.io/job-name": "pi", "job-name": "pi"}
    assert pod.annotations == {} and pod.env == ()


def test_a_work_queue_is_refused_at_completions() -> None:
    result = translate(load(INDEXED_WORK_QUEUE))
    assert result.spec is None
    assert [p for p, _ in result.errors] == ["spec.completions"]
    assert "must equal parallelism (3)" in result.errors[0][1]


def test_the_pod_contract_is_kube_job_controllers() -> None:
    job = load(POD_TO_POD)
    job["metadata"]["uid"] = "4a3e2f0c-1111-2222-3333-444455556666"
    result = translate(job)
    assert result.annotations[CONTRACT_ANNOTATION]
    assert JOB.pod_contract is not None
    pod = JOB.pod_contract("example-job", "ns", "worker", 2, result.annotations)
    assert pod.labels == {
        "batch.kubernetes.io/job-name": "example-job", "job-name": "example-job",
        "batch.kubernetes.io/controller-uid": "4a3e2f0c-1111-2222-3333-444455556666",
        "controller-uid": "4a3e2f0c-1111-2222-3333-444455556666",
        "batch.kubernetes.io/job-completion-index": "2"}
    assert pod.annotations == {"batch.kubernetes.io/job-completion-index": "2"}
    # pkg/controller/job/indexed_job_utils.go addCompletionIndexEnvVariable
    assert pod.env == ({"name": "JOB_COMPLETION_INDEX", "valueFrom": {"fieldRef": {
        "fieldPath": "metadata.labels['batch.kubernetes.io/job-completion-index']"}}},)
    # without a uid (not yet stored) the uid labels are left out rather than invented
    bare = JOB.pod_contract("example-job", "ns", "worker", 0, translate(load(POD_TO_POD)).annotations)
    assert "controller-uid" not in bare.labels
    # a twin without (or with a broken) contract annotation still gets the names
    assert JOB.pod_contract("j", "ns", "worker", 0, {CONTRACT_ANNOTATION: "{nope"}).labels["job-name"] == "j"


def test_hints_and_priority_class() -> None:
    job = load(POD_TO_POD)
    job["metadata"]["labels"] = {"kueue.x-k8s.io/queue-name": "team-a"}
    job["metadata"]["annotations"] = {"federator.dev/gpu-models": "H100", "federator.dev/on-cluster-loss": "fail"}
    job["spec"]["template"]["spec"]["priorityClassName"] = "high"
    job["spec"]["suspend"] = True
    result = translate(job)
    assert result.spec is not None
    assert result.spec["queue"] == "team-a" and result.spec["priorityClassName"] == "high"
    assert result.spec["placement"] == {"gpuModels": ["H100"]}
    assert result.spec["failover"] == {"onClusterLoss": "fail"}
    assert result.spec["suspend"] is True
    job["metadata"]["labels"]["kueue.x-k8s.io/priority-class"] = "low"
    result = translate(job)
    assert result.spec is None
    assert [p for p, _ in result.errors] == ["spec.template.spec.priorityClassName"]


@pytest.mark.parametrize(("path", "value", "where", "words"), [
    ("spec.parallelism", 0, "spec.parallelism", "suspend"),
    ("spec.parallelism", 1025, "spec.parallelism", "less than or equal to 1024"),
    ("spec.parallelism", "3", "spec.parallelism", "must be of type integer"),
    ("spec.parallelism", True, "spec.parallelism", "must be of type integer"),
    ("spec.parallelism", -1, "spec.parallelism", "greater than or equal to 0"),
    ("spec.parallelism", 2**70, "spec.parallelism", "less than or equal to 2147483647"),
    ("spec.backoffLimit", 2**31, "spec.backoffLimit", "less than or equal to 2147483647"),
    ("spec.completions", ..., "spec.completions", "Required value"),
    ("spec.completionMode", ..., "spec.completionMode", "must be Indexed"),
    ("spec.completionMode", "Sometimes", "spec.completionMode", "Unsupported value"),
    ("spec.podFailurePolicy", [], "spec.podFailurePolicy", "must be of type object"),
    ("spec.successPolicy", {"rules": []}, "spec.successPolicy", "Forbidden"),
    ("spec.backoffLimitPerIndex", 1, "spec.backoffLimitPerIndex", "Forbidden"),
    ("spec.maxFailedIndexes", 1, "spec.maxFailedIndexes", "Forbidden"),
    ("spec.managedBy", "kueue.x-k8s.io/multikueue", "spec.managedBy", "Unsupported value"),
    ("spec.managedBy", "x" * 100_000, "spec.managedBy", "Unsupported value"),
    ("spec.suspend", "yes", "spec.suspend", "boolean"),
    ("spec.template.spec.restartPolicy", "Always", "spec.template.spec.restartPolicy", "Unsupported value"),
    ("spec.template.spec.restartPolicy", ..., "spec.template.spec.restartPolicy", "Required value"),
    ("spec.template.spec", [], "spec.template.spec", "must be of type object"),
    ("spec.template", None, "spec.template", "Required value"),
    ("spec", "all of it", "spec", "must be of type object"),
])
def test_bad_input_names_the_field(path: str, value: Any, where: str, words: str, edited: Edit,
                                   assert_refused: Refused) -> None:
    assert_refused(translate(edited(load(POD_TO_POD), path, value)), where, words)


def test_the_managing_controller_may_be_kubes_own(edited: Edit) -> None:
    assert translate(edited(load(POD_TO_POD), "spec.managedBy", "kubernetes.io/job-controller")).errors == []


def test_errors_in_the_pod_template_come_back_at_the_jobs_path(
        twin_errors: Callable[[Translation], list[FieldError]], edited: Edit) -> None:
    # the hub owns the scheduler: the twin refuses it, at the twin's role path that role_paths maps back
    result = translate(edited(load(POD_TO_POD), "spec.template.spec.schedulerName", "volcano"))
    errors = twin_errors(result)
    assert any(p == "spec.roles[0].template.spec.schedulerName" for p, _ in errors), errors
    assert result.role_paths["worker"] == "spec.template"


def test_unknown_fields_are_the_schemas_to_find(schema_unknown: Callable[..., list[str]], edited: Edit) -> None:
    job = edited(load(POD_TO_POD), "spec.parallelizm", 3)
    job["spec"]["template"]["spec"]["containers"][0]["imagePullPolicyy"] = "Always"
    assert sorted(schema_unknown(JOB.schema, job)) == [
        "spec.parallelizm", "spec.template.spec.containers[0].imagePullPolicyy"]
    assert translate(job).errors == []  # the translator ignores them: the API refuses them first


@pytest.mark.parametrize("obj", [None, 1, "job", [], {}, {"spec": None}, {"spec": {}}, {"spec": {"template": 3}},
                                 {"metadata": [], "spec": {"parallelism": None, "template": {"spec": {}}}},
                                 {"spec": {"completionMode": {"a": 1}, "template": {"spec": {"restartPolicy": []}}}}])
def test_any_shape_gives_errors_not_exceptions(obj: Any) -> None:
    result = translate(obj)
    assert result.spec is None and result.errors


# https://kubernetes.io/docs/tasks/job/pod-failure-policy/ (kubernetes/website content/en/examples/controllers/
# job-pod-failure-policy-example.yaml), made a gang of 3 at once: a bug (exit code 42) fails the Job, a
# disruption is ignored.
POD_FAILURE_POLICY = """
apiVersion: batch/v1
kind: Job
metadata:
  name: job-pod-failure-policy-example
spec:
  completions: 3
  parallelism: 3
  completionMode: Indexed
  template:
    spec:
      restartPolicy: Never
      containers:
      - name: main
        image: docker.io/library/bash:5
        command: ["bash"]
        args:
        - -c
        - echo "Hello world!" && sleep 5 && exit 42
  backoffLimit: 6
  podFailurePolicy:
    rules:
    - action: FailJob
      onExitCodes:
        containerName: main
        operator: In
        values: [42]
    - action: Ignore
      onPodConditions:
      - type: DisruptionTarget
"""


def _exited(code: int) -> dict[str, Any]:
    return {"phase": "Failed", "containerStatuses": [{"name": "main", "state": {"terminated": {
        "exitCode": code, "reason": "Error"}}}]}


def test_pod_failure_policy_becomes_the_twins_failure_policy(
        twin_errors: Callable[[Translation], list[FieldError]], schema_unknown: Callable[..., list[str]]) -> None:
    job = load(POD_FAILURE_POLICY)
    jsonschema.Draft7Validator(JOB.schema).validate(job)
    assert schema_unknown(JOB.schema, job) == []
    result = translate(job)
    assert result.errors == [] and result.spec is not None
    assert result.spec["failurePolicy"] == job["spec"]["podFailurePolicy"]
    assert result.spec["roles"][0]["restartPolicy"] == "Never" and result.spec["backoffLimit"] == 6
    assert twin_errors(result) == []
    # the same rules decide on the twin as kube's Job controller would on the Job
    policy = result.spec["failurePolicy"]
    bug = match_pod_failure(policy, _exited(42))
    assert (bug.action, bug.rule) == (FailureAction.FAIL_JOB, 0)
    disrupted = match_pod_failure(policy, {"phase": "Failed", "conditions": [
        {"type": "DisruptionTarget", "status": "True"}]})
    assert (disrupted.action, disrupted.rule) == (FailureAction.IGNORE, 1)
    other = match_pod_failure(policy, _exited(1))
    assert (other.action, other.rule) == (FailureAction.COUNT, None)
    count = load(POD_FAILURE_POLICY)
    count["spec"]["podFailurePolicy"]["rules"][0]["action"] = "Count"
    assert translate(count).errors == []
    # without one the twin has none (the hub's defaults apply to it as to every job)
    assert "failurePolicy" not in (translate(load(POD_TO_POD)).spec or {})


@pytest.mark.parametrize(("path", "value", "where", "words"), [
    ("spec.podFailurePolicy.rules.0.action", "FailIndex", "spec.podFailurePolicy.rules[0].action",
     "requires spec.backoffLimitPerIndex"),
    ("spec.podFailurePolicy.rules.1.action", "Requeue", "spec.podFailurePolicy.rules[1].action",
     'supported values: "Count", "FailIndex", "FailJob", "Ignore"'),
    ("spec.podFailurePolicy.rules.0.action", "x" * 10_000, "spec.podFailurePolicy.rules[0].action",
     "Unsupported value"),
    ("spec.podFailurePolicy.rules.0.action", {"a": 1}, "spec.podFailurePolicy.rules[0].action",
     "Unsupported value: object"),
    ("spec.template.spec.restartPolicy", "OnFailure", "spec.template.spec.restartPolicy",
     'only "Never" is supported when podFailurePolicy is specified'),
    ("spec.podFailurePolicy", "all of them", "spec.podFailurePolicy", "must be of type object"),
])
def test_a_bad_pod_failure_policy_names_the_jobs_field(path: str, value: Any, where: str, words: str,
                                                      edited: Edit, assert_refused: Refused) -> None:
    assert_refused(translate(edited(load(POD_FAILURE_POLICY), path, value)), where, words)


@pytest.mark.parametrize(("change", "where"), [
    (lambda p: p["rules"][0]["onExitCodes"].update({"values": [42, 256]}),
     "spec.podFailurePolicy.rules[0].onExitCodes.values[1]"),
    (lambda p: p["rules"][0]["onExitCodes"].update({"values": [42, 7]}),
     "spec.podFailurePolicy.rules[0].onExitCodes.values"),
    (lambda p: p["rules"][0]["onExitCodes"].update({"containerName": "sidecar"}),
     "spec.podFailurePolicy.rules[0].onExitCodes.containerName"),
    (lambda p: p["rules"][1].update({"onExitCodes": {"operator": "In", "values": [1]}}),
     "spec.podFailurePolicy.rules[1]"),
    (lambda p: p.update({"rules": [{"action": "Ignore", "onExitCodes": {"operator": "In", "values": [1]}}] * 1000}),
     "spec.podFailurePolicy.rules"),
    (lambda p: p["rules"][0]["onExitCodes"].update({"operator": "Within"}),
     "spec.podFailurePolicy.rules[0].onExitCodes.operator"),
])
def test_the_twins_validator_refuses_a_bad_rule_at_the_jobs_path(
        change: Callable[[dict[str, Any]], None], where: str,
        twin_errors: Callable[[Translation], list[FieldError]]) -> None:
    job = load(POD_FAILURE_POLICY)
    change(job["spec"]["podFailurePolicy"])
    result = translate(job)
    assert result.errors == [], result.errors
    errors = source_errors(twin_errors(result), result)
    assert where in [p for p, _ in errors], errors
    assert all(p.startswith("spec.podFailurePolicy") for p, _ in errors), errors
