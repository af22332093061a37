"""deploy/: every kustomization renders offline with the real kubectl, and what it renders is valid
Kubernetes 1.30, runs restricted, and runs command lines that the federator CLI and etcd accept.

Every directory under deploy/ with a kustomization.yaml is covered (the hub's base, its etcd, the
overlays, and the member side in deploy/member/), found anew each run. The checks themselves are in
deploy_support.py and are tried on bad objects in test_checks.py.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from federator import __version__

from .deploy_support import (
    CRDS,
    DEPLOY,
    KUBECTL,
    REPO,
    build_tags,
    dockerfile_entrypoint,
    dockerfile_user,
    etcd_help_flags,
    etcd_problems,
    federator_command_problems,
    find,
    hub_problems,
    is_our_image,
    kustomization_dirs,
    name_of,
    pod_security_problems,
    pod_spec,
    reference_problems,
    render,
    schema_problems,
)

pytestmark = [
    pytest.mark.kubectl,
    pytest.mark.skipif(not Path(KUBECTL).is_file(), reason=f"kubectl is not installed ({KUBECTL})"),
]

DIRS = kustomization_dirs()
IDS = [str(d.relative_to(REPO)) for d in DIRS]
DOCKERFILE = (REPO / "Dockerfile").read_text(encoding="utf-8")
ENTRYPOINT = dockerfile_entrypoint(DOCKERFILE)


def _by_name(objects: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    found = find(objects, kind, name)
    assert found is not None, f"no {kind} {name} in {[name_of(o) for o in objects]}"
    return found


def test_every_kustomization_of_deploy_is_found() -> None:
    expected = {DEPLOY / "base", DEPLOY / "etcd", DEPLOY / "overlays" / "prod", DEPLOY / "overlays" / "dev",
                DEPLOY / "overlays" / "external-etcd", DEPLOY / "overlays" / "cert-manager"}
    assert expected <= set(DIRS)
    if (DEPLOY / "member" / "kustomization.yaml").is_file():
        assert DEPLOY / "member" in DIRS
    files = [p for name in ("kustomization.yaml", "kustomization.yml", "Kustomization") for p in DEPLOY.rglob(name)]
    components = {p.parent for p in files if (yaml.safe_load(p.read_text()) or {}).get("kind") == "Component"}
    assert {p.parent for p in files} - components == set(DIRS)


@pytest.mark.parametrize("directory", DIRS, ids=IDS)
def test_renders_offline(directory: Path) -> None:
    # Offline: no kustomization under deploy/ may pull a remote base (a URL or a git repository).
    for path in directory.glob("kustomization.y*ml"):
        document = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
        for key in ("resources", "components", "bases", "crds"):
            for entry in document.get(key) or []:
                assert "://" not in str(entry) and not re.match(r"^[\w.-]+\.(com|org|io)/", str(entry)), \
                    f"{path}: {key} entry {entry} is remote"
    objects = render(directory)
    assert objects, f"kubectl kustomize {directory} rendered nothing"
    for obj in objects:
        assert obj.get("kind") and (obj.get("metadata") or {}).get("name"), obj


@pytest.mark.parametrize("directory", DIRS, ids=IDS)
def test_every_object_validates_against_kubernetes_1_30(directory: Path) -> None:
    problems = [p for obj in render(directory) for p in schema_problems(obj)]
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("directory", DIRS, ids=IDS)
def test_every_workload_runs_restricted(directory: Path) -> None:
    problems = [p for obj in render(directory) for p in pod_security_problems(obj)]
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("directory", DIRS, ids=IDS)
def test_references_between_objects_hold(directory: Path) -> None:
    problems = reference_problems(render(directory))
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("directory", DIRS, ids=IDS)
def test_every_federator_command_line_parses(directory: Path) -> None:
    objects = render(directory)
    complete = DEPLOY / "overlays" in directory.parents  # an overlay is a whole deployment; a base is not
    problems = [p for obj in objects
                for p in federator_command_problems(obj, objects, entrypoint=ENTRYPOINT, complete=complete)]
    assert not problems, "\n".join(problems)


@pytest.fixture(scope="module")
def etcd_flags() -> frozenset[str]:
    from federator.store.etcd_process import EtcdUnavailableBinary, etcd_binary

    try:
        binary = etcd_binary()
    except EtcdUnavailableBinary as e:
        pytest.skip(f"etcd's flags cannot be checked: {e}")
    flags = etcd_help_flags(binary)
    assert {"name", "data-dir", "initial-cluster", "listen-client-urls"} <= flags, "cannot read etcd --help"
    return flags


@pytest.mark.parametrize("directory", DIRS, ids=IDS)
def test_etcd_members_are_consistent(directory: Path, etcd_flags: frozenset[str]) -> None:
    objects = render(directory)
    statefulsets = [o for o in objects if o.get("kind") == "StatefulSet"
                    and any("etcd" in str(c.get("image", "")) for c in (pod_spec(o) or {}).get("containers") or [])]
    problems = [p for sts in statefulsets for p in etcd_problems(sts, objects, help_flags=etcd_flags)]
    assert not problems, "\n".join(problems)


def test_prod_runs_two_hub_replicas_on_a_three_member_etcd() -> None:
    objects = render(DEPLOY / "overlays" / "prod")
    hub = _by_name(objects, "Deployment", "federator-hub")
    assert hub["metadata"]["namespace"] == "federator-system"
    assert hub["spec"]["replicas"] >= 2
    assert not hub_problems(hub)
    etcd = _by_name(objects, "StatefulSet", "etcd")
    assert etcd["spec"]["replicas"] == 3
    assert etcd["spec"]["volumeClaimTemplates"][0]["spec"]["resources"]["requests"]["storage"]
    settings = next(o for o in objects if o["kind"] == "ConfigMap"
                    and o["metadata"]["name"].startswith("federator-hub-settings"))
    assert settings["data"]["FEDERATOR_STORE"] == "etcds://etcd:2379"
    for kind in ("Service", "PodDisruptionBudget", "NetworkPolicy", "ServiceAccount"):
        _by_name(objects, kind, "federator-hub")
    for kind in ("Service", "PodDisruptionBudget", "NetworkPolicy"):
        _by_name(objects, kind, "etcd")
    namespace = _by_name(objects, "Namespace", "federator-system")
    assert namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"


def test_the_hub_runs_non_root_on_a_read_only_root_filesystem() -> None:
    for overlay in ("prod", "dev", "external-etcd"):
        hub = _by_name(render(DEPLOY / "overlays" / overlay), "Deployment", "federator-hub")
        pod = hub["spec"]["template"]["spec"]
        container = next(c for c in pod["containers"] if is_our_image(c))
        ctx, pod_ctx = container["securityContext"], pod["securityContext"]
        assert ctx["readOnlyRootFilesystem"] is True
        assert ctx["runAsNonRoot"] is True and pod_ctx["runAsNonRoot"] is True
        assert ctx["runAsUser"] == pod_ctx["runAsUser"] == dockerfile_user(DOCKERFILE) > 0
        assert ctx["allowPrivilegeEscalation"] is False
        assert ctx["capabilities"]["drop"] == ["ALL"]
        assert ctx["seccompProfile"]["type"] == pod_ctx["seccompProfile"]["type"] == "RuntimeDefault"
        assert pod["automountServiceAccountToken"] is False
        writable = {m["mountPath"] for m in container["volumeMounts"] if not m.get("readOnly")}
        assert {"/var/lib/federator", "/tmp"} <= writable


def test_dev_runs_one_hub_and_one_etcd_member() -> None:
    objects = render(DEPLOY / "overlays" / "dev")
    assert _by_name(objects, "Deployment", "federator-hub")["spec"]["replicas"] == 1
    assert _by_name(objects, "StatefulSet", "etcd")["spec"]["replicas"] == 1
    settings = next(o for o in objects if o["metadata"]["name"].startswith("federator-hub-settings"))
    assert settings["data"]["FEDERATOR_STORE"] == "etcds://etcd:2379"
    assert settings["data"]["FEDERATOR_LOG_LEVEL"] == "debug"


def test_external_etcd_runs_no_etcd() -> None:
    objects = render(DEPLOY / "overlays" / "external-etcd")
    assert not [o for o in objects if (o.get("metadata") or {}).get("name") == "etcd"]
    settings = next(o for o in objects if o["metadata"]["name"].startswith("federator-hub-settings"))
    assert settings["data"]["FEDERATOR_STORE"].startswith("etcds://")
    assert settings["data"]["FEDERATOR_STORE"] != "etcds://etcd:2379"


def test_the_crds_are_installed_as_they_are() -> None:
    listed = (yaml.safe_load((CRDS / "kustomization.yaml").read_text(encoding="utf-8")) or {})["resources"]
    files = sorted(p.name for p in CRDS.glob("*.yaml") if p.name != "kustomization.yaml")
    assert sorted(listed) == files, "crds/kustomization.yaml must list every CRD in crds/"
    rendered = {o["metadata"]["name"]: o for o in render(DEPLOY / "base")
                if o["kind"] == "CustomResourceDefinition"}
    for name in files:
        crd = yaml.safe_load((CRDS / name).read_text(encoding="utf-8"))
        installed = rendered.get(crd["metadata"]["name"])
        assert installed is not None, f"crds/{name} is not installed by deploy/base"
        # kustomize adds only the part-of label that every object of deploy/ carries.
        labels = installed["metadata"].pop("labels")
        assert labels == {"app.kubernetes.io/part-of": "federator"}
        assert installed == crd, f"crds/{name} is changed on its way through kustomize"


def test_every_image_of_ours_is_the_one_the_readme_builds() -> None:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    tags = set(build_tags(readme))
    assert tags == {f"federator:{__version__}"}, f"README builds {tags}"
    assert set(build_tags(DOCKERFILE)) == tags, "the Dockerfile's comment builds another tag than the README"
    seen = 0
    for directory in DIRS:
        for obj in render(directory):
            for c in (pod_spec(obj) or {}).get("containers") or []:
                if is_our_image(c):
                    seen += 1
                    assert c["image"] in tags, f"{directory}: {name_of(obj)} runs {c['image']}, README builds {tags}"
    assert seen


def test_the_readme_names_every_secret_the_hub_mounts_with_its_keys() -> None:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    section = readme.split("## Deploying on Kubernetes", 1)[1].split("\n## ", 1)[0]
    hub = _by_name(render(DEPLOY / "overlays" / "prod"), "Deployment", "federator-hub")
    secrets = [v["secret"] for v in hub["spec"]["template"]["spec"]["volumes"] if "secret" in v]
    assert {s["secretName"] for s in secrets} == {"federator-tls", "federator-tokens", "federator-members",
                                                  "federator-encryption",
                                                  "etcd-client-tls"}
    for secret in secrets:
        row = next((line for line in section.splitlines() if line.startswith(f"| `{secret['secretName']}`")), None)
        assert row is not None, f"README's table does not list Secret {secret['secretName']}"
        for item in secret.get("items") or []:
            assert f"`{item['key']}`" in row, f"README does not name key {item['key']} of {secret['secretName']}"


def test_cert_manager_makes_every_etcd_tls_secret_that_etcd_and_the_hub_mount() -> None:
    objects = render(DEPLOY / "overlays" / "cert-manager")
    certificates = {c["spec"]["secretName"]: c for c in objects if c.get("kind") == "Certificate"}
    issuers = {o["metadata"]["name"]: o for o in objects if o.get("kind") == "Issuer"}
    etcd = _by_name(objects, "StatefulSet", "etcd")
    hub = _by_name(objects, "Deployment", "federator-hub")
    mounted = {v["secret"]["secretName"] for w in (etcd, hub) for v in w["spec"]["template"]["spec"]["volumes"]
               if "secret" in v and v["secret"]["secretName"].startswith("etcd-")}
    assert mounted == {"etcd-server-tls", "etcd-peer-tls", "etcd-client-tls"} <= set(certificates)
    for name in mounted:  # one CA signs all three: each side's ca.crt trusts the others
        assert certificates[name]["spec"]["issuerRef"] == {"name": "etcd-ca", "kind": "Issuer"}
    assert issuers["etcd-ca"]["spec"]["ca"]["secretName"] == certificates["etcd-ca"]["spec"]["secretName"]
    assert certificates["etcd-ca"]["spec"]["isCA"] is True
    assert "client auth" in certificates["etcd-client-tls"]["spec"]["usages"]
    assert {"server auth", "client auth"} <= set(certificates["etcd-peer-tls"]["spec"]["usages"])
    # the hub's store host and every member's stable name are in etcd's server certificate
    store = next(o for o in objects if o["metadata"]["name"].startswith("federator-hub-settings"))["data"][
        "FEDERATOR_STORE"]
    assert store == "etcds://etcd:2379"
    assert {"etcd", "*.etcd"} <= set(certificates["etcd-server-tls"]["spec"]["dnsNames"])
    args = etcd["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--client-cert-auth" in args and "--peer-client-cert-auth" in args
    hub_args = hub["spec"]["template"]["spec"]["containers"][0]["args"]
    assert {"--etcd-cafile=/etc/federator/etcd/ca.crt", "--etcd-certfile=/etc/federator/etcd/tls.crt",
            "--etcd-keyfile=/etc/federator/etcd/tls.key"} <= set(hub_args)
