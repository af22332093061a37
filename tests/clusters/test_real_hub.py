"""Member sync inside the real hub application (build_hub_app: HTTPS, token auth, SQLite store,
leadership) with member_sync as its controller: registration through the authenticated API and
kubectl, Ready with capacity, credentials redacted on the way out, and a restart of the whole hub
app that resumes every member watch without a LIST."""

from __future__ import annotations

import base64
from pathlib import Path

import yaml
from clustertest_support import Sims, profile, registration, wait_until

from federator.controllers.membercluster import member_sync

from ..hub.hubtest_support import start_hub


async def _condition(hub: object, name: str, ctype: str) -> str | None:
    status, body = await hub.request("GET", f"/apis/federator.dev/v1alpha1/memberclusters/{name}")  # type: ignore[attr-defined]
    assert status == 200, body
    for cond in (body.get("status") or {}).get("conditions") or []:
        if cond["type"] == ctype:
            return str(cond["status"])
    return None


async def test_member_sync_in_the_real_hub_app(sims: Sims, tmp_path: Path) -> None:
    a = await sims.start(profile("real-a", gpu_nodes=2, cpu_nodes=1))
    await sims.start(profile("real-b", scheduler="coscheduling", gpu_nodes=1, cpu_nodes=0, datasets=False))
    ca = base64.b64encode(a.ca_pem).decode()
    with_token = registration("real-a", None, connection={"server": a.url, "certificateAuthorityData": ca,
                                                          "credentials": {"token": a.token}})
    by_path = registration("real-b", sims.kubeconfigs["real-b"], scheduler="coscheduling")
    async with start_hub(tmp_path / "hub", controllers=[member_sync]) as hub:
        status, body = await hub.request("POST", "/apis/federator.dev/v1alpha1/memberclusters", body=with_token)
        assert status == 201, body
        assert a.token not in str(body)
        status, body = await hub.request("POST", "/apis/federator.dev/v1alpha1/memberclusters", body=by_path,
                                         who="researcher")
        assert status == 403  # only admins register clusters
        manifest = tmp_path / "real-b.yaml"
        manifest.write_text(yaml.safe_dump(by_path))
        code, out, err = await hub.kubectl("admin", "apply", "-f", str(manifest))
        assert code == 0, err
        for name in ("real-a", "real-b"):
            await wait_until(lambda name=name: _is(hub, name, "Ready", "True"), timeout=20, what=f"{name} Ready")
        status, body = await hub.request("GET", "/apis/federator.dev/v1alpha1/memberclusters/real-a")
        assert body["status"]["capacity"]["totalGPUs"] == 16
        assert body["spec"]["connection"]["credentials"]["token"] == "<redacted>"
        snapshots = hub.context.parts.members.snapshots
        assert set(snapshots) == {"real-a", "real-b"} and snapshots["real-a"].info.healthy
    lists = {name: dict(sims.clusters[name].stats()["requests"]["list"]) for name in ("real-a", "real-b")}

    # The same hub directory again: checkpoints load, watches resume, no LIST.
    async with start_hub(tmp_path / "hub", controllers=[member_sync]) as hub:
        for name in ("real-a", "real-b"):
            await wait_until(lambda name=name: _is(hub, name, "Ready", "True"), timeout=20, what=f"{name} Ready")
        for name in ("real-a", "real-b"):
            assert dict(sims.clusters[name].stats()["requests"]["list"]) == lists[name], name


async def _is(hub: object, name: str, ctype: str, status: str) -> bool:
    return await _condition(hub, name, ctype) == status
