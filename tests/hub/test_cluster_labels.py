"""A job's clusterSelector matches the MemberCluster's own labels (metadata.labels), as people set them with
`kubectl label membercluster`; the deprecated spec.labels is still matched for one release and every write
that carries it is warned (real SimClusters, a real hub running every lifecycle controller, real kubectl)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from federator.apis.membercluster import (SPEC_LABELS_DEPRECATED, cluster_labels, membercluster_warnings,
                                         validate_membercluster)

from ..controllers.jobtest_support import API, phase, placement_of
from ..controllers.lifecycle_support import aimed_job, lifecycle_env

pytestmark = [pytest.mark.kubectl, pytest.mark.slow]

FIRST = "onprem-rdma-a100"
SECOND = "cloud-eth-h100"


def selected_job(name: str, selector: dict[str, str]) -> dict[str, Any]:
    job = aimed_job(name, FIRST)
    job["spec"]["placement"] = {"clusterSelector": {"matchLabels": selector}}
    return job


def why_not(job: dict[str, Any]) -> str:
    return " ".join(str(c.get("message") or "") for c in (job.get("status") or {}).get("conditions") or ())


async def test_kubectl_label_steers_the_next_placement(tmp_path: Path) -> None:
    async with lifecycle_env(tmp_path, [FIRST, SECOND], run_seconds=None) as env:
        # No cluster has the label: the job waits and says which label is missing where.
        await env.api.submit(selected_job("waits", {"team-pool": "vision"}))
        pending = await env.api.wait_job("team-a", "waits", lambda j: phase(j) == "Pending" and "team-pool" in why_not(j),
                                         timeout=60, what="Pending with the selector in its why-not")
        assert "team-pool=vision" in why_not(pending), why_not(pending)

        code, out, err = await env.hub.kubectl("admin", "label", "membercluster", SECOND, "team-pool=vision")
        assert code == 0, err
        placed = await env.api.wait_job("team-a", "waits", lambda j: phase(j) == "Running", timeout=60,
                                        what="Running once a cluster has the label")
        assert placement_of(placed)["cluster"] == SECOND

        # The label taken away: the next job with that selector fits nowhere again.
        code, out, err = await env.hub.kubectl("admin", "label", "membercluster", SECOND, "team-pool-")
        assert code == 0, err
        await env.api.submit(selected_job("after", {"team-pool": "vision"}))
        pending = await env.api.wait_job("team-a", "after", lambda j: phase(j) == "Pending" and "team-pool" in why_not(j),
                                         timeout=60, what="Pending again without the label")
        assert not placement_of(pending).get("cluster")

        # Only admins label clusters.
        code, out, err = await env.hub.kubectl("researcher", "label", "membercluster", FIRST, "team-pool=vision")
        assert code != 0 and "forbidden" in err.lower(), (out, err)


async def test_affinity_pins_requires_and_prefers_clusters_by_their_labels(tmp_path: Path) -> None:
    async with lifecycle_env(tmp_path, [FIRST, SECOND], run_seconds=None) as env:
        code, out, err = await env.hub.kubectl("admin", "label", "membercluster", SECOND, "budget=cheap")
        assert code == 0, err
        wants = {"pinned": {"clusterNames": [SECOND]},
                 "preferring": {"preferred": [{"weight": 50, "preference": {"matchLabels": {"budget": "cheap"}}}]},
                 "requiring": {"required": [{"matchLabels": {"budget": "dear"}}, {"matchLabels": {"budget": "cheap"}}]}}
        for name, affinity in wants.items():
            job = aimed_job(name, FIRST)
            job["spec"]["placement"] = {"affinity": affinity}
            await env.api.submit(job)
        for name in wants:
            placed = await env.api.wait_job("team-a", name, lambda j: phase(j) == "Running", timeout=60,
                                            what=f"{name} Running")
            # (without the affinity the on-prem cluster, FIRST, wins on location preference)
            assert placement_of(placed)["cluster"] == SECOND, name
        job = aimed_job("unpinnable", FIRST)
        job["spec"]["placement"] = {"affinity": {"clusterNames": ["no-such-cluster"]}}
        await env.api.submit(job)
        pending = await env.api.wait_job("team-a", "unpinnable",
                                         lambda j: phase(j) == "Pending" and "pinned to" in why_not(j),
                                         timeout=60, what="Pending: pinned to a cluster that does not exist")
        assert "the job is pinned to no-such-cluster" in why_not(pending)


async def test_spec_labels_still_match_and_every_write_is_warned(tmp_path: Path) -> None:
    async with lifecycle_env(tmp_path, [FIRST, SECOND], run_seconds=None) as env:
        body = json.loads(json.dumps(env.fed.registrations[FIRST]))
        body["spec"]["labels"] = {"legacy": "yes", "tier": "old"}
        body["metadata"]["labels"]["tier"] = "new"
        code, out, err = await env.hub.kubectl("admin", "apply", "-f", "-", stdin=json.dumps(body))
        assert code == 0, err
        assert f"Warning: {SPEC_LABELS_DEPRECATED}" in err, err
        # spec.labels still matched; metadata.labels wins on the same key
        await env.api.submit(selected_job("legacy", {"legacy": "yes", "tier": "new"}))
        placed = await env.api.wait_job("team-a", "legacy", lambda j: phase(j) == "Running", timeout=60,
                                        what="Running through the deprecated spec.labels")
        assert placement_of(placed)["cluster"] == FIRST
        await env.api.submit(selected_job("shadowed", {"tier": "old"}))
        await env.api.wait_job("team-a", "shadowed", lambda j: phase(j) == "Pending" and "tier" in why_not(j),
                               timeout=60, what="Pending: metadata.labels wins over spec.labels")
        # a write without spec.labels is not warned
        del body["spec"]["labels"]
        code, out, err = await env.hub.kubectl("admin", "apply", "-f", "-", stdin=json.dumps(body))
        assert code == 0 and "Warning" not in err, err


def test_cluster_labels_prefer_metadata_and_skip_malformed_entries() -> None:
    obj = {"metadata": {"labels": {"tier": "new", "zone": "a", "bad": 3}},
           "spec": {"labels": {"tier": "old", "legacy": "yes", 7: "x"}}}
    assert cluster_labels(obj) == {"tier": "new", "zone": "a", "legacy": "yes"}
    assert cluster_labels({"metadata": {"labels": "nope"}, "spec": None}) == {}
    assert cluster_labels({}) == {}
    assert membercluster_warnings({"spec": {"labels": {"a": "b"}}}) == [SPEC_LABELS_DEPRECATED]
    assert membercluster_warnings({"spec": {"labels": {}}}) == []
    assert membercluster_warnings({"spec": "hostile"}) == []
    assert membercluster_warnings({"metadata": {"labels": {"a": "b"}}}) == []


def test_registrations_written_by_the_cli_and_dev_carry_metadata_labels(tmp_path: Path) -> None:
    from federator.cli import build_parser
    from federator.cli.cluster import registration_from_flags
    from federator.dev.clusters import DEV_CLUSTER_LABEL, registration_for

    from ..controllers.jobtest_support import sim_profile

    kubeconfig = tmp_path / "member.kubeconfig"
    kubeconfig.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "m",
        "clusters": [{"name": "m", "cluster": {"server": "https://127.0.0.1:6443"}}],
        "contexts": [{"name": "m", "context": {"cluster": "m", "user": "m"}}],
        "users": [{"name": "m", "user": {"token": "t0ken"}}]}))
    args = build_parser().parse_args([
        "cluster", "add", "gpu-a", "--kubeconfig", str(kubeconfig), "--location", "onPrem", "--network", "ethernet",
        "--bandwidth-gbps", "100", "--scheduler", "volcano", "--label", "tier=research", "--label", "zone=b",
        "--model-cost", "H100=4.5", "--model-cost", "A100=2", "--spot", "--interruption-rate", "0.05"])
    body = registration_from_flags(args)
    assert body["metadata"]["labels"] == {"tier": "research", "zone": "b"} and "labels" not in body["spec"]
    assert body["spec"]["cost"] == {"perModel": {"H100": 4.5, "A100": 2.0}, "spot": True,
                                    "interruptionRatePerHour": 0.05}
    assert validate_membercluster(body) == []
    assert membercluster_warnings(body) == []

    profile = sim_profile("gpu-b").model_copy(update={"labels": {"tier": "research"}})
    body = registration_for(profile, kubeconfig=kubeconfig)
    assert body["metadata"]["labels"] == {"tier": "research", DEV_CLUSTER_LABEL: "true"}
    assert "labels" not in body["spec"] and membercluster_warnings(body) == []
