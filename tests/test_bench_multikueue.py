"""bench/multikueue.py's pure parts (issue 32), without clusters, Kueue or Go: the JobSets each system gets,
Kueue's objects and configuration, the filter of upstream's install, percentiles, the audit count, the table
and the arguments (a bad one is one line and exit 2). The bench itself is never part of the test run."""

from __future__ import annotations

import importlib.util
import json
import sys
import types
from pathlib import Path

import pytest
import yaml

def _load_bench() -> types.ModuleType:
    """bench/multikueue.py, loaded by its path: bench/ is NOT put on sys.path, where its e2e.py would shadow the
    e2e package for every module collected after this one in the same process (tests/ui imports e2e)."""
    path = Path(__file__).resolve().parents[1] / "bench" / "multikueue.py"
    spec = importlib.util.spec_from_file_location("bench_multikueue", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up here
    spec.loader.exec_module(module)
    return module


mk = _load_bench()

JOBS = mk.jobs_for("t", 3)


def pod_spec(document: dict) -> dict:
    return document["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]


def test_multikueue_gets_the_queue_label_and_the_asks_as_node_selectors() -> None:
    a100, h100, anygpu = (mk.jobset(job, system="mk-allatonce") for job in JOBS)
    assert a100["metadata"]["labels"] == {"kueue.x-k8s.io/queue-name": "lq"}
    assert pod_spec(a100)["nodeSelector"] == {mk.PRODUCT_LABEL: "A100-SXM4-80GB", mk.RDMA_LABEL: "true"}
    assert pod_spec(h100)["nodeSelector"] == {mk.PRODUCT_LABEL: "H100-80GB-HBM3"}
    assert "nodeSelector" not in pod_spec(anygpu)
    assert "annotations" not in a100["metadata"]


def test_the_hub_gets_placement_hints_and_no_queue_label_or_node_selector() -> None:
    a100, h100, anygpu = (mk.jobset(job, system="federator") for job in JOBS)
    assert a100["metadata"]["annotations"]["federator.dev/gpu-models"] == "A100"
    assert a100["metadata"]["annotations"]["federator.dev/network"] == "rdma"
    assert h100["metadata"]["annotations"]["federator.dev/network"] == "any"
    assert "federator.dev/gpu-models" not in anygpu["metadata"]["annotations"]
    for document in (a100, h100, anygpu):
        assert "labels" not in document["metadata"] and "nodeSelector" not in pod_spec(document)


def test_an_unknown_system_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown system 'karmada'"):
        mk.jobset(JOBS[0], system="karmada")


def test_asks_fit_exactly_the_workers_that_offer_them() -> None:
    fits = {ask.name: {w.name for w in mk.WORKERS if ask.fits(w)} for ask in mk.ASKS}
    assert fits == {"a100-rdma": {"mkb-ib-a100", "mkb-roce-a100"}, "h100": {"mkb-eth-h100"},
                    "any-gpu": {w.name for w in mk.WORKERS}}
    assert [job.movable() for job in JOBS] == [True, False, True]


def test_worker_flavors_carry_what_the_worker_offers() -> None:
    flavor, cq, lq = mk.worker_queue_objects(mk.WORKERS[2], nodes=2)
    assert flavor["spec"]["nodeLabels"] == {mk.PRODUCT_LABEL: "H100-80GB-HBM3"}
    quota = {r["name"]: r["nominalQuota"] for r in cq["spec"]["resourceGroups"][0]["flavors"][0]["resources"]}
    assert quota == {"cpu": "128", "memory": "1024Gi", "nvidia.com/gpu": "16"}
    assert "admissionChecksStrategy" not in cq["spec"]
    assert lq["spec"] == {"clusterQueue": "cq"} and lq["metadata"]["namespace"] == "default"


def test_manager_objects_wire_multikueue() -> None:
    objects = mk.manager_queue_objects({"w1": "kubeconfig-1", "w2": "kubeconfig-2"}, nodes=1)
    by_kind: dict[str, list[dict]] = {}
    for obj in objects:
        by_kind.setdefault(obj["kind"], []).append(obj)
    assert [s["metadata"]["namespace"] for s in by_kind["Secret"]] == ["kueue-system", "kueue-system"]
    assert json.loads(json.dumps(by_kind["Secret"][0]["data"]))["kubeconfig"] == "a3ViZWNvbmZpZy0x"
    assert by_kind["MultiKueueConfig"][0]["spec"]["clusters"] == ["w1", "w2"]
    assert by_kind["AdmissionCheck"][0]["spec"]["controllerName"] == "kueue.x-k8s.io/multikueue"
    cq = by_kind["ClusterQueue"][0]
    assert cq["spec"]["admissionChecksStrategy"] == {"admissionChecks": [{"name": "multikueue"}]}
    assert cq["spec"]["resourceGroups"][0]["flavors"][0]["resources"][2] == {"name": "nvidia.com/gpu",
                                                                           "nominalQuota": "16"}


def test_configuration_turns_multikueue_on_only_for_the_manager(tmp_path: Path) -> None:
    ports = {"health_port": 1, "metrics_port": 2, "webhook_port": 3, "cert_dir": tmp_path}
    worker = mk.kueue_configuration(**ports, dispatcher=None, worker_lost_seconds=60)
    manager = mk.kueue_configuration(**ports, dispatcher=mk.DISPATCHERS["mk-incremental"], worker_lost_seconds=60)
    assert "multiKueue" not in worker
    assert manager["multiKueue"]["dispatcherName"] == "kueue.x-k8s.io/multikueue-dispatcher-incremental"
    assert manager["multiKueue"]["workerLostTimeout"] == "60s"
    assert manager["integrations"] == {"frameworks": ["jobset.x-k8s.io/jobset"]}
    assert manager["webhook"] == {"host": "127.0.0.1", "port": 3, "certDir": str(tmp_path)}


_RENDERED = """\
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: workloads.kueue.x-k8s.io}
spec:
  conversion: {strategy: Webhook, webhook: {clientConfig: {service: {name: kueue-webhook-service,
    namespace: kueue-system, path: /convert}}}}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: kueue-controller-manager, namespace: kueue-system}
---
apiVersion: apiregistration.k8s.io/v1
kind: APIService
metadata: {name: v1beta2.visibility.kueue.x-k8s.io}
---
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingWebhookConfiguration
metadata: {name: kueue-mutating-webhook-configuration}
webhooks:
- name: mworkload.kb.io
  clientConfig: {service: {name: kueue-webhook-service, namespace: kueue-system, path: /mutate-workload}}
  rules: [{apiGroups: [kueue.x-k8s.io], resources: [workloads]}]
- name: mjobset.kb.io
  clientConfig: {service: {name: kueue-webhook-service, namespace: kueue-system, path: /mutate-jobset}}
  rules: [{apiGroups: [jobset.x-k8s.io], resources: [jobsets]}]
- name: mpod.kb.io
  clientConfig: {service: {name: kueue-webhook-service, namespace: kueue-system, path: /mutate--v1-pod}}
  rules: [{apiGroups: [""], resources: [pods]}]
- name: mjob.kb.io
  clientConfig: {service: {name: kueue-webhook-service, namespace: kueue-system, path: /mutate-batch-v1-job}}
  rules: [{apiGroups: [batch], resources: [jobs]}]
"""


def test_install_keeps_crds_and_kueue_and_jobset_webhooks_called_by_url() -> None:
    docs = mk.kueue_install(_RENDERED, webhook_url="https://127.0.0.1:9", ca_bundle="Q0E=")
    assert [d["kind"] for d in docs] == ["CustomResourceDefinition", "MutatingWebhookConfiguration"]
    conversion = docs[0]["spec"]["conversion"]["webhook"]["clientConfig"]
    assert conversion == {"url": "https://127.0.0.1:9/convert", "caBundle": "Q0E="}
    hooks = docs[1]["webhooks"]
    assert [h["name"] for h in hooks] == ["mworkload.kb.io", "mjobset.kb.io"]
    assert hooks[1]["clientConfig"]["url"] == "https://127.0.0.1:9/mutate-jobset"


def test_install_refuses_a_rendering_that_is_not_kube_objects() -> None:
    from federator.dev.kube import KubeMemberError

    with pytest.raises(KubeMemberError, match="operator kueue"):
        mk.kueue_install("- just\n- a list\n", webhook_url="https://127.0.0.1:9", ca_bundle="")


@pytest.mark.parametrize(("values", "q", "expected"), [
    ([5.0], 99, 5.0), ([3.0, 1.0, 2.0], 50, 2.0), ([float(i) for i in range(1, 101)], 99, 99.0),
    ([float(i) for i in range(1, 11)], 99, 10.0), ([1.0, 2.0], 50, 1.0)])
def test_percentile_is_nearest_rank(values: list[float], q: float, expected: float) -> None:
    assert mk.percentile(values, q) == expected


def test_percentile_of_nothing_is_nan() -> None:
    assert mk.percentile([], 50) != mk.percentile([], 50)


def test_audit_writes_count_the_identity_s_writes_in_the_namespace_only() -> None:
    def line(**fields: object) -> str:
        event = {"stage": "ResponseComplete", "verb": "create", "user": {"username": "me"},
                 "objectRef": {"namespace": "default", "resource": "jobsets"}}
        event.update(fields)
        return json.dumps(event)

    lines = [line(), line(verb="patch"), line(verb="get"), line(verb="watch", stage="ResponseStarted"),
             line(user={"username": "other"}), line(objectRef={"namespace": "federator-system", "resource": "leases"}),
             line(objectRef={"namespace": "default", "resource": "events"}), '{"truncated', "", line(verb="delete")]
    assert mk.audit_writes(lines, user="me") == 3


def test_table_shows_medians_per_system_and_marks_what_was_not_measured() -> None:
    results = {"federator": [{"burst.runningP99Seconds": 1.0}, {"burst.runningP99Seconds": 3.0},
                             {"burst.runningP99Seconds": 2.5}],
               "mk-allatonce": [{"burst.runningP99Seconds": float("nan")}]}
    text = mk.table(results)
    assert "| figure | federator | mk-allatonce |" in text
    assert "| burst: to Running p99 (s) | 2.50 | n/a |" in text
    assert "steady" not in text


@pytest.mark.parametrize(("argv", "words"), [
    (["--runs", "0"], "--runs, --jobs and --nodes must be >= 1"),
    (["--grace", "0"], "--grace and --worker-lost-timeout > 0"),
    (["--worker-lost-timeout", "-1"], "--grace and --worker-lost-timeout > 0"),
    (["--phases", "burst,cutof"], "--phases: unknown 'cutof' (known: burst, steady, cutoff)"),
    (["--phases", " , "], "--phases: name at least one of burst, steady, cutoff"),
    (["--quick", "--phases", "steady"], "--quick leaves the steady phase out"),
    (["--jobs", "many"], "invalid int value: 'many'"),
])
def test_bad_arguments_are_one_line_and_exit_2(argv: list[str], words: str,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        mk.parse_args(argv)
    assert exited.value.code == 2
    assert words in capsys.readouterr().err


def test_quick_is_one_run_of_six_jobs_without_the_steady_phase() -> None:
    args = mk.parse_args(["--quick"])
    assert (args.runs, args.jobs, args.phases) == (1, 6, ("burst", "cutoff"))


def test_phases_run_in_their_own_order_and_multikueue_s_timeout_defaults_to_the_grace() -> None:
    args = mk.parse_args(["--phases", "cutoff,burst", "--grace", "45"])
    assert args.phases == ("burst", "cutoff")
    assert args.worker_lost_timeout == 45
    assert mk.parse_args([]).phases == mk.PHASES
    assert mk.parse_args(["--worker-lost-timeout", "900"]).worker_lost_timeout == 900


def test_an_unknown_system_is_one_line_before_anything_starts(capsys: pytest.CaptureFixture[str],
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(Path(mk.__file__).parent))  # main() imports bench/benchresult.py, as a script
    assert mk.main(["--systems", "federator,karmada"]) == 2
    err = capsys.readouterr().err
    assert err.strip() == "error: --systems: unknown 'karmada' (known: federator, mk-allatonce, mk-incremental)"


def test_rendered_yaml_round_trips() -> None:
    documents = [mk.jobset(job, system=s) for job in JOBS for s in mk.SYSTEMS]
    assert list(yaml.safe_load_all(yaml.safe_dump_all(documents))) == documents


def test_federator_bench_runs_it_only_when_named() -> None:
    from federator.cli import bench

    specs = {spec.name: spec for spec in bench.benches_in(Path(mk.__file__).parent)}
    assert not specs["multikueue"].by_default
    assert all(spec.by_default for name, spec in specs.items() if name != "multikueue")
