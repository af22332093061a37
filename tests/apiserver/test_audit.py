"""The audit log's parts (federator/apiserver/audit.py): kube's Policy format (parsing, hostile files, first
matching rule), size rotation in lumberjack's naming, and a writer that never fails the caller. The events a
real hub writes for real requests are in tests/hub/test_audit_hub.py."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from federator.apiserver.audit import (
    DEFAULT_POLICY,
    MAX_POLICY_BYTES,
    AuditFile,
    AuditLog,
    AuditLogSettings,
    AuditPolicyError,
    iter_events,
    load_policy,
    parse_policy,
    settings_from_flags,
)
from federator.apiserver.auth import request_attributes
from federator.clusters.client import MemberWrite
from federator.obs import Metrics

EXAMPLE = Path(__file__).resolve().parents[2] / "docs" / "audit-policy.yaml"

POLICY = b"""
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
  - level: None
    users: [system:kube-proxy]
  - level: None
    nonResourceURLs: ["/healthz*", /version]
  - level: RequestResponse
    resources:
      - group: federator.dev
        resources: [memberclusters]
  - level: Request
    verbs: [create, update, patch]
    namespaces: [vision]
  - level: Metadata
    userGroups: ["federator:viewer"]
    resources:
      - group: federator.dev
        resources: ["trainingjobs/*"]
        resourceNames: [resnet]
  - level: Metadata
    omitStages: [ResponseStarted]
    omitManagedFields: true
"""


def _level(policy_text: bytes, method: str, path: str, *, user: str = "alice", groups: tuple[str, ...] = (),
           query: dict[str, str] | None = None) -> str:
    policy = parse_policy(policy_text)
    return policy.decide(user=user, groups=groups, attributes=request_attributes(method, path, query or {}))[0]


@pytest.mark.parametrize(("method", "path", "user", "groups", "level"), [
    ("GET", "/api/v1/pods", "system:kube-proxy", (), "None"),  # users
    ("GET", "/healthz/etcd", "alice", (), "None"),  # nonResourceURLs prefix
    ("GET", "/version", "alice", (), "None"),
    ("GET", "/versions", "alice", (), "Metadata"),  # exact, not a prefix
    ("GET", "/apis/federator.dev/v1alpha1/memberclusters", "alice", (), "RequestResponse"),
    ("GET", "/apis/federator.dev/v1alpha1/memberclusters/a/status", "alice", (), "Metadata"),  # subresource
    ("POST", "/apis/federator.dev/v1alpha1/namespaces/vision/trainingjobs", "alice", (), "Request"),
    ("GET", "/apis/federator.dev/v1alpha1/namespaces/vision/trainingjobs", "alice", (), "Metadata"),  # verb
    ("GET", "/apis/federator.dev/v1alpha1/namespaces/x/trainingjobs/resnet/log", "carol",
     ("federator:viewer",), "Metadata"),
])
def test_the_first_matching_rule_gives_the_level(method: str, path: str, user: str, groups: tuple[str, ...],
                                                  level: str) -> None:
    assert _level(POLICY, method, path, user=user, groups=groups) == level


def test_resource_rules_match_as_kube_does() -> None:
    policy = b"""apiVersion: audit.k8s.io/v1
kind: Policy
rules:
  - level: RequestResponse
    resources: [{group: "", resources: ["pods/log"]}]
  - level: Request
    resources: [{group: "", resources: ["*/status"]}]
  - level: Metadata
    resources: [{group: "", resources: ["pods/*"]}]
  - level: None
"""
    assert _level(policy, "GET", "/api/v1/namespaces/a/pods/p/log") == "RequestResponse"
    assert _level(policy, "PUT", "/api/v1/namespaces/a/pods/p/status") == "Request"
    assert _level(policy, "GET", "/api/v1/namespaces/a/pods/p/exec") == "Metadata"
    # kube's "pods/*" matches pods with any subresource, and the object itself too
    assert _level(policy, "GET", "/api/v1/namespaces/a/pods/p") == "Metadata"
    assert _level(policy, "GET", "/apis/federator.dev/v1alpha1/trainingjobs") == "None"  # other group


def test_no_rule_matching_is_none_and_stages_and_managed_fields_combine() -> None:
    policy = parse_policy(b"apiVersion: audit.k8s.io/v1\nkind: Policy\nomitStages: [RequestReceived]\n"
                          b"rules: [{level: Metadata, verbs: [get], omitStages: [ResponseStarted], "
                          b"omitManagedFields: true}]\n")
    level, omit, omit_mf = policy.decide(user="a", groups=(), attributes=request_attributes("GET", "/api/v1/pods/x", {}))
    assert (level, omit, omit_mf) == ("Metadata", frozenset({"RequestReceived", "ResponseStarted"}), True)
    assert policy.decide(user="a", groups=(), attributes=request_attributes("DELETE", "/api/v1/pods/x", {}))[0] \
        == "None"


def test_the_default_policy_logs_every_request_but_probes_and_lease_renewals() -> None:
    def level(method: str, path: str, user: str = "alice") -> str:
        return DEFAULT_POLICY.decide(user=user, groups=(), attributes=request_attributes(method, path, {}))[0]

    assert level("GET", "/apis/federator.dev/v1alpha1/trainingjobs") == "Metadata"
    assert level("GET", "/version") == "Metadata"
    assert level("GET", "/readyz") == "None" and level("GET", "/livez") == "None"
    lease = "/apis/coordination.k8s.io/v1/namespaces/federator-system/leases/hub"
    assert level("PATCH", lease, "system:federator:controller") == "None"
    assert level("PATCH", lease, "alice") == "Metadata"
    assert "RequestReceived" in DEFAULT_POLICY.omit_stages


@pytest.mark.parametrize(("text", "says"), [
    (b"rules: [\n", "not YAML"),
    (b"- just\n- a list\n", "not an audit.k8s.io/v1 Policy"),
    (b"apiVersion: audit.k8s.io/v1beta1\nkind: Policy\nrules: [{level: None}]\n", "apiVersion: Unsupported value"),
    (b"apiVersion: audit.k8s.io/v1\nkind: Pod\nrules: [{level: None}]\n", 'kind: Unsupported value: "Pod"'),
    (b"apiVersion: audit.k8s.io/v1\nkind: Policy\nrules: []\n", "rules: Required value"),
    (b"apiVersion: audit.k8s.io/v1\nkind: Policy\nrules: [{level: Verbose}]\n",
     'rules[0].level: Unsupported value: "Verbose"'),
    (b"apiVersion: audit.k8s.io/v1\nkind: Policy\nrules: [{verbs: [get]}]\n", "rules[0].level: Required value"),
    (b"apiVersion: audit.k8s.io/v1\nkind: Policy\nrules: [{level: None}, {level: Metadata, verb: [get]}]\n",
     'rules[1]: unknown field "verb"'),
    (b"apiVersion: audit.k8s.io/v1\nkind: Policy\nrules: [{level: None, omitStages: [Done]}]\n",
     'rules[0].omitStages[0]: Unsupported value: "Done"'),
    (b"apiVersion: audit.k8s.io/v1\nkind: Policy\nrules: [{level: None, users: admin}]\n",
     "rules[0].users: must be a list of strings"),
    (b"apiVersion: audit.k8s.io/v1\nkind: Policy\nrules: [{level: None, nonResourceURLs: [/x], namespaces: [a]}]\n",
     "cannot apply to both"),
    (b"apiVersion: audit.k8s.io/v1\nkind: Policy\nrules: [{level: None, nonResourceURLs: [healthz]}]\n",
     'must begin with "/"'),
    (b"apiVersion: audit.k8s.io/v1\nkind: Policy\nrules: [{level: None, resources: [{group: a, resourceNames: [x]}]}]\n",
     "resourceNames require resources"),
    (b"apiVersion: audit.k8s.io/v1\nkind: Policy\nx: &a [1]\nrules: *a\n", "aliases are not accepted"),
    (b"apiVersion: audit.k8s.io/v1\nkind: Policy\nrules:\n" + b"  - level: None\n" * (MAX_POLICY_BYTES // 16),
     f"larger than {MAX_POLICY_BYTES} bytes"),
])
def test_a_bad_policy_is_one_line_naming_the_field(tmp_path: Path, text: bytes, says: str) -> None:
    path = tmp_path / "policy.yaml"
    path.write_bytes(text)
    with pytest.raises(AuditPolicyError) as raised:
        load_policy(path)
    message = str(raised.value)
    assert says in message and str(path) in message and "\n" not in message, message


def test_flags_need_a_path_and_name_themselves(tmp_path: Path) -> None:
    assert settings_from_flags(path=None, policy_file=None, max_size_mb=0, max_backups=0, max_age_days=0) is None
    with pytest.raises(ValueError, match="--audit-policy-file needs --audit-log-path"):
        settings_from_flags(path=None, policy_file=str(EXAMPLE), max_size_mb=0, max_backups=0, max_age_days=0)
    with pytest.raises(ValueError, match="--audit-log-maxbackup -1: must be 0 or more"):
        settings_from_flags(path="x", policy_file=None, max_size_mb=0, max_backups=-1, max_age_days=0)
    with pytest.raises(ValueError, match="^--audit-policy-file .*missing.yaml: No such file"):
        settings_from_flags(path="x", policy_file=str(tmp_path / "missing.yaml"), max_size_mb=0, max_backups=0,
                            max_age_days=0)
    settings = settings_from_flags(path=str(tmp_path / "a.log"), policy_file=None, max_size_mb=5, max_backups=2,
                                   max_age_days=0)
    assert settings is not None and settings.policy is DEFAULT_POLICY and settings.max_size_mb == 5


def test_the_example_policy_parses() -> None:
    policy = load_policy(EXAMPLE)
    member_clusters = request_attributes("POST", "/apis/federator.dev/v1alpha1/memberclusters", {})
    assert policy.decide(user="alice", groups=("federator:admin",), attributes=member_clusters)[0] \
        == "RequestResponse"


def test_rotation_by_size_keeps_max_backups(tmp_path: Path) -> None:
    path = tmp_path / "audit" / "audit.log"
    audit_file = AuditFile(str(path), max_bytes=1000, max_backups=2)
    line = b"x" * 99 + b"\n"
    audit_file.write([line] * 25)  # one batch: rotated inside it, line by line
    for _ in range(30):  # 5500 bytes in all: 5 rotations of 10 lines each (a line that would pass 1000 starts a file)
        audit_file.write([line])
    audit_file.close()
    backups = sorted(p.name for p in path.parent.iterdir() if p.name != "audit.log")
    assert len(backups) == 2, backups
    for name in backups:  # lumberjack's name: audit-2006-01-02T15-04-05.000.log
        assert name.startswith("audit-") and name.endswith(".log") and len(name) == len("audit-2006-01-02T15-04-05.000.log")
        assert (path.parent / name).stat().st_size == 1000
    assert path.stat().st_size == 500
    assert oct(path.stat().st_mode & 0o777) == "0o600"


def _write(verb: str, name: str, *, code: int, why: str = "place", reason: str = "") -> MemberWrite:
    return MemberWrite(cluster="c", verb=verb, group="", version="v1", resource="pods", namespace="a", name=name,
                       subresource="", path=f"/api/v1/namespaces/a/pods/{name}", code=code, reason=reason,
                       started=1.0, why=why)


def test_a_failing_disk_drops_events_and_the_writer_goes_on(tmp_path: Path) -> None:
    path = tmp_path / "audit.log"
    metrics = Metrics()
    audit = AuditLog(AuditLogSettings(path=str(path)), metrics=metrics)
    try:
        audit.record_member_write(_write("create", "p", code=201))
        audit.flush()
        path.unlink()
        path.mkdir()  # the path is now a directory: reopening fails as a full or read-only disk does
        audit._file.close()  # noqa: SLF001 - force the reopen that fails
        audit.record_member_write(_write("delete", "p", code=200))
        audit.flush()
        assert metrics.audit_events.labels(result="error")._value.get() == 1  # noqa: SLF001
        os.rmdir(path)
        audit.record_member_write(_write("delete", "q", code=404, why="cleanup", reason="NotFound"))
        audit.flush()
    finally:
        audit.close()
    events = list(iter_events(path))
    assert [(e["verb"], e["objectRef"]["name"], e["responseStatus"]["code"]) for e in events] \
        == [("delete", "q", 404)]
    assert events[0]["annotations"] == {"federator.dev/cluster": "c", "federator.dev/reason": "cleanup"}
    assert events[0]["level"] == "Metadata" and events[0]["user"]["username"] == "system:federator:controller"


def test_a_line_cut_short_is_not_continued(tmp_path: Path) -> None:
    path = tmp_path / "audit.log"
    path.write_bytes(b'{"kind":"Event"}\n{"kind":"Ev')  # the disk filled up in the middle of a line
    audit_file = AuditFile(str(path))
    audit_file.write([b'{"kind":"Event","n":2}\n'])
    audit_file.close()
    assert path.read_bytes().splitlines()[-1] == b'{"kind":"Event","n":2}'
