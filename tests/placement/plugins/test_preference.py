"""Score "preference": on-prem before cloud unless the profile says otherwise."""

from __future__ import annotations

from placement_builders import cluster, gang, nodes, score_columns

from federator.placement import Profile


def test_on_prem_by_default() -> None:
    snaps = [cluster("dc", nodes("n", 1)), cluster("cloud", nodes("n", 1, rdma=0), location="cloud", fabric="ethernet")]
    cols = score_columns("preference", gang("g"), snaps)
    assert cols == {"dc": (1.0, 100.0), "cloud": (0.0, 0.0)}


def test_profile_can_prefer_cloud_or_nothing() -> None:
    snaps = [cluster("dc", nodes("n", 1)), cluster("cloud", nodes("n", 1, rdma=0), location="cloud", fabric="ethernet")]
    cols = score_columns("preference", gang("g"), snaps, profile=Profile(prefer_location="cloud"))  # type: ignore[arg-type]
    assert cols == {"dc": (0.0, 0.0), "cloud": (1.0, 100.0)}
    cols = score_columns("preference", gang("g"), snaps, profile=Profile(prefer_location=None))
    assert cols == {"dc": (0.0, 0.0), "cloud": (0.0, 0.0)}
