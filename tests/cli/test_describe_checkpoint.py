"""`federator describe job` shows spec.checkpoint and the latest reported checkpoint (issue 29)."""

from __future__ import annotations

from typing import Any

from federator.cli.jobs import describe_job


def _job(**extra: Any) -> dict[str, Any]:
    return {"apiVersion": "federator.dev/v1alpha1", "kind": "TrainingJob",
            "metadata": {"name": "j", "namespace": "ns", "uid": "u", "creationTimestamp": "2026-01-01T00:00:00Z"},
            "spec": {"roles": [{"name": "worker", "replicas": 1, "template": {"image": "t:1"}}],
                     **extra.get("spec", {})},
            "status": extra.get("status", {})}


def _line(text: str) -> str:
    (line,) = [line for line in text.splitlines() if line.startswith("Checkpoints:")]
    return line


def test_describe_shows_the_checkpoint_spec_and_the_latest_report() -> None:
    assert _line(describe_job(_job())) == "Checkpoints:  <none>"
    job = _job(spec={"checkpoint": {"volume": {"claimName": "ck"}, "mountPath": "/ckpt", "saveGraceSeconds": 60}},
               status={"checkpoint": {"step": 140, "location": "/ckpt/step-140", "cluster": "a", "epoch": 2,
                                      "time": "2026-01-01T00:10:00Z"}})
    assert _line(describe_job(job)) == ("Checkpoints:  claim ck at /ckpt; save grace 60s; latest step 140 at "
                                        "/ckpt/step-140 (cluster a, epoch 2, 2026-01-01T00:10:00Z)")
    assert _line(describe_job(_job(spec={"checkpoint": {"uri": "s3://b/r"}}))) == \
        "Checkpoints:  s3://b/r; save grace 30s"
