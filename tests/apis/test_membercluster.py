"""MemberCluster validation and redaction: bad registrations name the field; credentials never come back."""

from __future__ import annotations

import base64
import copy
import json
from typing import Any

import pytest

from federator.apis.common import REDACTED
from federator.apis.membercluster import (
    LAST_APPLIED_ANNOTATION,
    OPERATOR_KINDS,
    ClusterScheduler,
    MemberCluster,
    contains_credentials,
    effective_operator_mode,
    effective_scheduler_name,
    membercluster_validator,
    redact,
    restore_redacted,
    validate_membercluster,
)

TOKEN = "tok-9f8e7d6c5b4a39281706f5e4d3c2b1a0"
PEM_CERT = base64.b64encode(b"-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n").decode()
PEM_KEY = base64.b64encode(b"-----BEGIN EC PRIVATE KEY-----\nKEYMATERIAL42\n-----END EC PRIVATE KEY-----\n").decode()


def registration() -> dict[str, Any]:
    return {
        "apiVersion": "federator.dev/v1alpha1",
        "kind": "MemberCluster",
        "metadata": {"name": "onprem-a", "labels": {"site": "ams"}},
        "spec": {
            "connection": {"server": "https://10.0.0.1:6443", "certificateAuthorityData": PEM_CERT,
                           "credentials": {"token": TOKEN}},
            "location": {"type": "onPrem", "provider": "dc1", "region": "eu-west"},
            "network": {"type": "rdma", "rdmaKind": "infiniband", "bandwidthGbps": 200},
            "scheduler": {"name": "volcano"},
            "labels": {"tier": "research"},
            "gpuModels": ["A100"],
            "costPerGpuHour": 1.25,
            "datasets": [{"name": "imagenet-22k", "sizeBytes": 1_500_000_000_000}],
            "cordoned": False,
        },
    }


def test_good_registrations_validate() -> None:
    assert validate_membercluster(registration()) == []
    by_path = registration()
    by_path["spec"]["connection"] = {"kubeconfigPath": "/etc/federator/clusters/onprem-a.kubeconfig",
                                     "context": "admin@onprem-a"}
    assert validate_membercluster(by_path) == []
    by_cert = registration()
    by_cert["spec"]["connection"]["credentials"] = {"clientCertificateData": PEM_CERT, "clientKeyData": PEM_KEY}
    assert validate_membercluster(by_cert) == []
    cloud = registration()
    cloud["spec"]["location"] = {"type": "cloud", "provider": "gcp", "region": "us-central1"}
    cloud["spec"]["network"] = {"type": "ethernet", "bandwidthGbps": 100}
    cloud["spec"]["scheduler"] = {"name": "coscheduling", "schedulerName": "scheduler-plugins-scheduler"}
    assert validate_membercluster(cloud) == []


def test_status_validates() -> None:
    cluster = registration()
    cluster["status"] = {
        "conditions": [
            {"type": t, "status": "True", "reason": "Ok", "lastTransitionTime": "2024-05-01T12:00:00Z"}
            for t in ("Reachable", "Synced", "Ready")
        ],
        "firstLossOfContact": "2024-05-01T11:00:00Z",
        "lastSyncTime": "2024-05-01T12:00:00Z",
        "capacity": {"nodes": 10, "readyNodes": 9, "totalGPUs": 80, "freeGPUs": 16,
                     "gpusByModel": {"A100": {"total": 80, "free": 16}},
                     "nodesByFabric": {"rdma": 8, "ethernet": 2}},
        "datasetsSeen": ["imagenet-22k"],
        "observedResourceVersions": {"nodes": "1200", "pods": "1301", "podgroups.scheduling.volcano.sh": "1302"},
        "syncLagSeconds": 0.05,
    }
    assert validate_membercluster(cluster) == []
    cluster["status"]["capacity"]["nodesByFabric"] = {"carrier-pigeon": 1}
    assert [p for p, _ in validate_membercluster(cluster)] == ["status.capacity.nodesByFabric[carrier-pigeon]"]


BAD_REGISTRATIONS: list[tuple[str, dict[str, Any], str, str]] = [
    ("unknown-scheduler", {"scheduler": {"name": "slurm"}}, "spec.scheduler.name",
     'Unsupported value: "slurm": supported values: "volcano", "coscheduling", "kube-batch", "native", "kai", "default"'),
    ("bad-url-scheme", {"connection": {"server": "ftp://10.0.0.1", "credentials": {"token": TOKEN}}},
     "spec.connection.server", "https://"),
    ("bad-url-garbage", {"connection": {"server": "not a url", "credentials": {"token": TOKEN}}},
     "spec.connection.server", "Invalid value"),
    ("bad-url-no-host", {"connection": {"server": "https://:6443", "credentials": {"token": TOKEN}}},
     "spec.connection.server", "must name a host"),
    ("bad-url-port", {"connection": {"server": "https://h:99999", "credentials": {"token": TOKEN}}},
     "spec.connection.server", "not a valid URL"),
    ("missing-kubeconfig", {"connection": {}}, "spec.connection",
     "Required value: either kubeconfigPath, or server with credentials"),
    ("missing-connection", {"connection": None}, "spec.connection", "must be of type object"),
    ("relative-kubeconfig", {"connection": {"kubeconfigPath": "clusters/a.kubeconfig"}},
     "spec.connection.kubeconfigPath", "absolute path"),
    ("kubeconfig-and-server", {"connection": {"kubeconfigPath": "/k", "server": "https://h"}},
     "spec.connection.server", "Forbidden"),
    ("server-without-credentials", {"connection": {"server": "https://h"}}, "spec.connection.credentials",
     "Required value"),
    ("empty-credentials", {"connection": {"server": "https://h", "credentials": {}}},
     "spec.connection.credentials", "Required value: token"),
    ("cert-without-key", {"connection": {"server": "https://h", "credentials": {"clientCertificateData": PEM_CERT}}},
     "spec.connection.credentials.clientKeyData", "Required value"),
    ("ca-not-pem", {"connection": {"server": "https://h", "certificateAuthorityData": "aGVsbG8=",
                                   "credentials": {"token": TOKEN}}},
     "spec.connection.certificateAuthorityData", "PEM CA certificate"),
    ("placeholder-token", {"connection": {"server": "https://h", "credentials": {"token": REDACTED}}},
     "spec.connection.credentials.token", "placeholder"),
    ("negative-bandwidth", {"network": {"type": "ethernet", "bandwidthGbps": -10}}, "spec.network.bandwidthGbps",
     "must be greater than 0"),
    ("zero-bandwidth", {"network": {"type": "ethernet", "bandwidthGbps": 0}}, "spec.network.bandwidthGbps",
     "must be greater than 0"),
    ("absurd-bandwidth", {"network": {"type": "ethernet", "bandwidthGbps": 1e12}}, "spec.network.bandwidthGbps",
     "less than or equal to"),
    ("nan-bandwidth", {"network": {"type": "ethernet", "bandwidthGbps": float("nan")}},
     "spec.network.bandwidthGbps", "Invalid value"),
    ("rdma-without-kind", {"network": {"type": "rdma", "bandwidthGbps": 100}}, "spec.network.rdmaKind",
     "Required value"),
    ("ethernet-with-rdma-kind", {"network": {"type": "ethernet", "rdmaKind": "roce", "bandwidthGbps": 100}},
     "spec.network.rdmaKind", "Forbidden"),
    ("bad-fabric", {"network": {"type": "token-ring", "bandwidthGbps": 100}}, "spec.network.type",
     "Unsupported value"),
    ("bad-location", {"location": {"type": "moon"}}, "spec.location.type", "Unsupported value"),
    ("negative-cost", {"costPerGpuHour": -1}, "spec.costPerGpuHour", "greater than or equal to 0"),
    ("negative-cost-model", {"cost": {"perModel": {"H100": -2.0}}}, "spec.cost.perModel[H100]",
     "greater than or equal to 0"),
    ("huge-cost", {"cost": {"perGpuHour": 1e12}}, "spec.cost.perGpuHour", "less than or equal"),
    ("huge-cost-model", {"cost": {"perModel": {"H100": 1e12}}}, "spec.cost.perModel", "less than or equal"),
    ("cost-as-text", {"cost": {"perGpuHour": "$2.50"}}, "spec.cost.perGpuHour", "number"),
    ("bad-interruption-rate", {"cost": {"spot": True, "interruptionRatePerHour": 3}},
     "spec.cost.interruptionRatePerHour", "less than or equal to 1"),
    ("spot-string", {"cost": {"spot": "yes"}}, "spec.cost.spot", "boolean"),
    ("too-many-model-prices", {"cost": {"perModel": {f"m{i}": 1.0 for i in range(65)}}}, "spec.cost.perModel",
     "at most 64"),
    ("duplicate-dataset", {"datasets": [{"name": "a", "sizeBytes": 1}, {"name": "a", "sizeBytes": 2}]},
     "spec.datasets[1].name", "Duplicate value"),
    ("negative-dataset-size", {"datasets": [{"name": "a", "sizeBytes": -1}]}, "spec.datasets[0].sizeBytes",
     "greater than or equal to 0"),
    ("unknown-spec-field", {"gpus": 8}, "spec.gpus", "field not declared in schema"),
    ("cordoned-string", {"cordoned": "true"}, "spec.cordoned", "must be of type boolean"),
]


@pytest.mark.parametrize(("spec_edits", "path", "fragment"), [c[1:] for c in BAD_REGISTRATIONS],
                         ids=[c[0] for c in BAD_REGISTRATIONS])
def test_bad_registration_names_the_field(spec_edits: dict[str, Any], path: str, fragment: str) -> None:
    cluster = registration()
    cluster["spec"].update(spec_edits)
    errors = validate_membercluster(cluster)
    messages = [m for p, m in errors if p == path]
    assert messages, f"no error for {path}; got {errors}"
    assert any(fragment in m for m in messages), errors
    assert membercluster_validator()(cluster) == errors


def test_cluster_scoped_and_named_like_a_label() -> None:
    cluster = registration()
    cluster["metadata"]["namespace"] = "default"
    cluster["metadata"]["name"] = "OnPrem.A"
    errors = dict(validate_membercluster(cluster))
    assert errors["metadata.namespace"] == "Forbidden: not allowed on this type"
    assert "RFC 1123 label" in errors["metadata.name"]


@pytest.mark.parametrize("secret_value", [
    12345, ["list", "of", "secret"], "has spaces secret-zz", "x" * 70_000, {"nested": "secret-zz"},
])
def test_errors_never_echo_a_credential(secret_value: Any) -> None:
    cluster = registration()
    cluster["spec"]["connection"]["credentials"] = {"token": secret_value, "clientKeyData": "secret-zz-key"}
    errors = validate_membercluster(cluster)
    assert any(p == "spec.connection.credentials.token" for p, _ in errors)
    text = json.dumps(errors)
    assert "secret" not in text and "12345" not in text and "xxxxxxxx" not in text


def test_url_with_password_is_rejected_without_echo() -> None:
    cluster = registration()
    cluster["spec"]["connection"]["server"] = "https://admin:hunter2@10.0.0.1:6443"
    errors = validate_membercluster(cluster)
    assert [p for p, _ in errors] == ["spec.connection.server"]
    assert "hunter2" not in json.dumps(errors)


def test_redact_hides_every_copy_of_the_credentials() -> None:
    cluster = registration()
    cluster["spec"]["connection"]["credentials"] = {"clientCertificateData": PEM_CERT, "clientKeyData": PEM_KEY}
    cluster["metadata"]["annotations"] = {LAST_APPLIED_ANNOTATION: json.dumps(cluster)}
    original = copy.deepcopy(cluster)
    shown = redact(cluster)
    assert cluster == original, "redact must not change its input"
    assert shown["spec"]["connection"]["credentials"] == {"clientCertificateData": REDACTED,
                                                          "clientKeyData": REDACTED}
    text = json.dumps(shown)
    assert PEM_KEY not in text and PEM_CERT[:40] not in json.dumps(shown["spec"]["connection"]["credentials"])
    applied = json.loads(shown["metadata"]["annotations"][LAST_APPLIED_ANNOTATION])
    assert applied["spec"]["connection"]["credentials"]["clientKeyData"] == REDACTED
    assert shown["spec"]["connection"]["server"] == "https://10.0.0.1:6443"  # the rest stays
    assert validate_membercluster(shown) != []  # a redacted object is not a valid registration

    cluster["metadata"]["annotations"] = {LAST_APPLIED_ANNOTATION: "{not json " + TOKEN}
    assert redact(cluster)["metadata"]["annotations"][LAST_APPLIED_ANNOTATION] == REDACTED
    weird = registration()
    weird["spec"]["connection"]["credentials"] = TOKEN
    assert TOKEN not in json.dumps(redact(weird))


def test_restore_redacted_keeps_stored_credentials_on_update() -> None:
    stored = registration()
    update = redact(stored)
    update["spec"]["cordoned"] = True
    restored = restore_redacted(update, stored)
    assert restored["spec"]["connection"]["credentials"]["token"] == TOKEN
    assert restored["spec"]["cordoned"] is True
    assert validate_membercluster(restored) == []
    # A new credential replaces the old one; a placeholder with nothing behind it stays (and is invalid).
    update["spec"]["connection"]["credentials"] = {"token": "tok-new-0000000000000000"}
    assert restore_redacted(update, stored)["spec"]["connection"]["credentials"]["token"] == "tok-new-0000000000000000"
    fresh = redact(registration())
    assert validate_membercluster(restore_redacted(fresh, {})) != []


def test_contains_credentials_and_scheduler_names() -> None:
    assert contains_credentials(registration())
    by_path = registration()
    by_path["spec"]["connection"] = {"kubeconfigPath": "/k"}
    assert not contains_credentials(by_path)
    cluster = MemberCluster.model_validate(registration())
    assert effective_scheduler_name(cluster.spec.scheduler) == "volcano"
    for kind, expected in (("default", "default-scheduler"), ("coscheduling", "scheduler-plugins-scheduler")):
        scheduler = ClusterScheduler.model_validate({"name": kind})
        assert effective_scheduler_name(scheduler) == expected
    custom = ClusterScheduler.model_validate({"name": "volcano", "schedulerName": "vc-2"})
    assert effective_scheduler_name(custom) == "vc-2"


# ---------------------------------------------------------------- spec.operators / status.operators (issue 28)


def test_operators_map_takes_served_kinds_and_the_two_modes() -> None:
    good = registration()
    good["spec"]["operators"] = {"PyTorchJob.kubeflow.org": "operator", "Job.batch": "render"}
    assert validate_membercluster(good) == []
    good["status"] = {"operators": {key: "render" for key in OPERATOR_KINDS}}
    assert validate_membercluster(good) == []


@pytest.mark.parametrize(("operators", "path", "fragment"), [
    ({"Foo.bar": "operator"}, "spec.operators[Foo.bar]", 'Unsupported value: "Foo.bar"'),
    ({"pytorchjob.kubeflow.org": "operator"}, "spec.operators[pytorchjob.kubeflow.org]", "PyTorchJob.kubeflow.org"),
    ({"JobSet.jobset.x-k8s.io": "Operator"}, "spec.operators[JobSet.jobset.x-k8s.io]", '"operator", "render"'),
    ({"Job.batch": None}, "spec.operators[Job.batch]", "Unsupported value"),
    ({"Job.batch": 1}, "spec.operators[Job.batch]", ""),
    (["Job.batch"], "spec.operators", "must be of type object"),
    ("operator", "spec.operators", "must be of type object"),
    ({"<script>" * 40: "render"}, "spec.operators", ""),
])
def test_bad_operators_name_the_field(operators: Any, path: str, fragment: str) -> None:
    obj = registration()
    obj["spec"]["operators"] = operators
    errors = validate_membercluster(obj)
    assert errors, operators
    assert any(p.startswith(path) and fragment in m for p, m in errors), errors
    assert all(len(m) < 2048 for _, m in errors)


def test_too_many_operators_is_refused() -> None:
    obj = registration()
    obj["spec"]["operators"] = {f"K{i}.example.com": "render" for i in range(1000)}
    errors = validate_membercluster(obj)
    assert any(p == "spec.operators" for p, _ in errors), errors[:3]


@pytest.mark.parametrize(("spec", "discovered", "want"), [
    (None, None, "render"),
    (None, {"Job.batch": "operator"}, "operator"),
    ({"Job.batch": "render"}, {"Job.batch": "operator"}, "render"),
    ({"Job.batch": "operator"}, None, "operator"),
    ({"Job.batch": "operator"}, {"Job.batch": "render"}, "operator"),
    ({"TFJob.kubeflow.org": "operator"}, {"TFJob.kubeflow.org": "operator"}, "render"),  # another kind
    ({"Job.batch": "bogus"}, {"Job.batch": "operator"}, "operator"),  # malformed override: as if absent
    ("garbage", ["garbage"], "render"),
])
def test_effective_operator_mode(spec: Any, discovered: Any, want: str) -> None:
    assert effective_operator_mode(spec, discovered, "Job.batch") == want


def _with_connection(connection: dict[str, Any]) -> dict[str, Any]:
    cluster = registration()
    cluster["spec"]["connection"] = connection
    return cluster


def test_an_access_provider_connection_validates_and_excludes_the_other_ways() -> None:
    provider = {"name": "token-provider", "config": {"audience": "fleet"}}
    assert validate_membercluster(_with_connection(
        {"server": "https://10.0.0.1:6443", "certificateAuthorityData": PEM_CERT, "accessProvider": provider})) == []
    cases = [
        ({"server": "https://10.0.0.1:6443", "credentials": {"token": TOKEN}, "accessProvider": provider},
         "spec.connection.accessProvider", "Forbidden"),
        ({"kubeconfigPath": "/etc/k.kubeconfig", "accessProvider": provider}, "spec.connection.accessProvider",
         "Forbidden"),
        ({"server": "https://10.0.0.1:6443", "accessProvider": {"name": ""}}, "spec.connection.accessProvider.name",
         "at least 1"),
        ({"server": "https://10.0.0.1:6443", "accessProvider": {"name": "p", "config": {"x": "y" * 70_000}}},
         "spec.connection.accessProvider.config", "at most"),
        ({"server": "https://10.0.0.1:6443", "accessProvider": {"name": "p", "command": "/bin/sh"}},
         "spec.connection.accessProvider.command", "not declared"),
        ({"server": "https://10.0.0.1:6443"}, "spec.connection.credentials", "or an accessProvider"),
    ]
    for connection, path, fragment in cases:
        errors = validate_membercluster(_with_connection(connection))
        assert any(p == path and fragment in m for p, m in errors), (connection, errors)
