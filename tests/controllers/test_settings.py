"""The hub's settings (controllers/settings.py): typed dataclasses per concern, validated at start.

A typo or a mistyped value is an error naming the key (and the closest known key), never a silent default;
every concern's defaults are pinned; every flat key reaches its field; README's table is the generated one;
no `extra` dict of settings is left in federator/."""

from __future__ import annotations

import ast
import dataclasses
import re
from pathlib import Path
from typing import Any

import pytest

from federator.apis.common import ValidationSettings
from federator.apis.clusterprofile import parse_provider_config
from federator.controllers.settings import (
    ClusterProfileSettings,
    CompactionSettings,
    DispatchSettings,
    ElasticSettings,
    EventSettings,
    FailoverSettings,
    GcSettings,
    HubSettings,
    Knob,
    MemberLeaseSettings,
    MemberSyncSettings,
    PlacementSettings,
    QueueSettings,
    SettingsError,
    StatusSyncSettings,
    StuckSettings,
    WatchSettings,
    knobs,
    markdown_table,
)
from federator.placement.framework import Profile

ROOT = Path(__file__).resolve().parents[2]


# ------------------------------------------------------------------------------------------- defaults


DEFAULTS: list[tuple[type, dict[str, Any]]] = [
    (MemberSyncSettings, dict(
        probe_interval_seconds=2.0, unreachable_after_failures=3, watch_loss_grace_seconds=15.0,
        cluster_loss_grace_seconds=60.0, status_interval_seconds=5.0, checkpoint_interval_seconds=0.5,
        checkpoint_meta_refresh_seconds=30.0, watch_timeout_seconds=(300, 600), watch_idle_seconds=90.0,
        connect_timeout_seconds=5.0, request_timeout_seconds=30.0, probe_timeout_seconds=3.0, concurrent_lists=4,
        on_applied=None)),
    (ClusterProfileSettings, dict(providers=(), kubeconfig_dir=None, exec_timeout_seconds=10.0)),
    (MemberLeaseSettings, dict(enabled=True, duration_seconds=None, margin_seconds=5.0)),
    (WatchSettings, dict(backoff_initial_seconds=0.2, backoff_max_seconds=10.0)),
    (PlacementSettings, dict(profile=Profile(), tick_seconds=1.0, snapshot_poll_seconds=0.1, debounce_seconds=0.005,
                             unplaced_refresh_seconds=5.0, max_inflight=64, preemption=True)),
    (ElasticSettings, dict(tick_seconds=5.0, grow_cooldown_seconds=60.0)),
    (DispatchSettings, dict(backoff_initial_seconds=0.5, backoff_max_seconds=30.0, object_concurrency=16,
                            client_wait_seconds=30.0, fence_wait_seconds=30.0)),
    (StatusSyncSettings, dict(lifecycle_tick_seconds=1.0, resync_seconds=5.0, batch_seconds=0.5)),
    (FailoverSettings, dict(mass_loss_threshold=0.5, rate_per_second=20.0)),
    (GcSettings, dict(cleanup_grace_seconds=60.0, interval_seconds=30.0)),
    (StuckSettings, dict(timeout_seconds=120.0, exclusion_seconds=600.0)),
    (QueueSettings, dict(status_interval_seconds=0.5, currency="USD", spend_interval_seconds=30.0)),
    (EventSettings, dict(ttl_seconds=3600.0, gc_interval_seconds=None, writes_per_second=100.0)),
    (CompactionSettings, dict(interval_seconds=300.0)),
    (ValidationSettings, dict(max_replicas_per_role=1024, max_total_replicas=8192, max_roles=32,
                              max_cpu_per_pod="1024", max_memory_per_pod="64Ti", max_gpus_per_pod=64,
                              max_rdma_per_pod=64, max_bandwidth_gbps=100_000.0, max_cost_per_gpu_hour=1_000_000.0,
                              max_requeues=1000, max_errors=100, max_containers_per_pod=64,
                              max_template_bytes=131072, max_save_grace_seconds=3600)),
]


@pytest.mark.parametrize(("cls", "expected"), DEFAULTS, ids=[cls.__name__ for cls, _ in DEFAULTS])
def test_each_concern_has_its_documented_defaults(cls: type, expected: dict[str, Any]) -> None:
    built = cls()
    assert {f.name: getattr(built, f.name) for f in dataclasses.fields(cls) if f.init} == expected
    assert dataclasses.is_dataclass(cls) and cls.__dataclass_params__.frozen  # type: ignore[attr-defined]


def test_hub_settings_hold_one_of_each_concern_and_no_bag_of_names() -> None:
    settings = HubSettings()
    held = {type(getattr(settings, f.name)) for f in dataclasses.fields(HubSettings)}
    assert {cls for cls, _ in DEFAULTS} <= held
    assert "extra" not in {f.name for f in dataclasses.fields(HubSettings)}
    assert settings.hub_id == "federator" and settings.state_dir == Path(".federator")
    assert HubSettings.from_mapping({}) == settings
    with pytest.raises(dataclasses.FrozenInstanceError):
        settings.placement.tick_seconds = 2.0  # type: ignore[misc]


def test_event_gc_interval_defaults_to_a_tenth_of_the_ttl_at_most_a_minute() -> None:
    assert EventSettings().gc_interval == 60.0
    assert EventSettings(ttl_seconds=20.0).gc_interval == 2.0
    assert EventSettings(ttl_seconds=20.0, gc_interval_seconds=0.5).gc_interval == 0.5


# ------------------------------------------------------------------------------------------- the mapping


def _changed(knob: Knob) -> Any:
    """A valid value of `knob` other than its default."""
    default = knob.default
    if knob.unit == "callable":
        return lambda *args: None
    if knob.unit == "Profile":
        return Profile(name="other")
    if knob.unit == "bool":
        return not default
    if knob.unit == "s (min, max)":
        return (10, 20)
    if knob.unit == "quantity":
        return "2" if knob.key == "max_cpu_per_pod" else "1Ti"
    if knob.unit == "fraction":
        return 0.25
    if knob.key == "namespaces":
        return "autoprovision"
    if knob.key == "currency":
        return "EUR"
    if knob.unit == "providers":
        return parse_provider_config(b'{"providers": [{"name": "p", "execConfig": {"apiVersion": '
                                     b'"client.authentication.k8s.io/v1", "command": "/bin/true"}}]}')
    if knob.unit == "directory":
        return Path("/srv/kubeconfigs")
    if default is None:
        return 7.5
    if isinstance(default, int):
        return default + 1
    return default + 1.5


@pytest.mark.parametrize("value", ["", "Lifecycle", "auto", 1, None])
def test_the_namespace_mode_is_one_of_two(value: Any) -> None:
    with pytest.raises(SettingsError, match="namespaces"):
        HubSettings.from_mapping({"namespaces": value})
    assert HubSettings().namespaces.mode == "lifecycle" and not HubSettings().namespaces.autoprovision
    assert HubSettings.from_mapping({"namespaces": "autoprovision"}).namespaces.autoprovision


@pytest.mark.parametrize("value", ["usd", "EURO", "US$", "€", "", 840, None])
def test_the_currency_is_three_uppercase_letters(value: Any) -> None:
    with pytest.raises(SettingsError, match="currency"):
        HubSettings.from_mapping({"currency": value})
    assert HubSettings().queues.currency == "USD"


@pytest.mark.parametrize("knob", list(knobs()), ids=lambda k: k.key)
def test_every_key_reaches_its_field_and_nothing_else(knob: Knob) -> None:
    value = _changed(knob)
    settings = HubSettings.from_mapping({knob.key: value})
    assert getattr(getattr(settings, knob.concern), knob.field) == value
    # everything else keeps its default
    reset = dataclasses.replace(getattr(settings, knob.concern), **{knob.field: knob.default})
    assert dataclasses.replace(settings, **{knob.concern: reset}) == HubSettings()


def test_keys_are_unique_and_every_concern_field_is_listed() -> None:
    listed = list(knobs())
    assert len({k.key for k in listed}) == len(listed)
    for cls, expected in DEFAULTS:
        concern = next(f.name for f in dataclasses.fields(HubSettings) if f.type in (cls.__name__, cls))
        assert {k.field for k in listed if k.concern == concern} == set(expected), cls.__name__


def test_the_mapping_takes_state_dir_and_hub_id_and_whole_seconds() -> None:
    settings = HubSettings.from_mapping({"state_dir": "/tmp/hub-state", "hub_id": "hub-a",
                                         "placement_tick_seconds": 2, "member_watch_timeout_seconds": [30, 60]})
    assert settings.state_dir == Path("/tmp/hub-state") and settings.hub_id == "hub-a"
    assert settings.placement.tick_seconds == 2.0 and type(settings.placement.tick_seconds) is float
    assert settings.member_sync.watch_timeout_seconds == (30, 60)


@pytest.mark.parametrize(("key", "suggested"), [
    ("placement_tick_second", "placement_tick_seconds"),
    ("member_leas", "member_lease"),
    ("cluster_loss_grace", "cluster_loss_grace_seconds"),
    ("stuck_timeout_secs", "stuck_timeout_seconds"),
    ("max_gpu_per_pod", "max_gpus_per_pod"),
    ("failover_rates", "failover_rate"),
])
def test_an_unknown_key_is_named_with_the_closest_known_key(key: str, suggested: str) -> None:
    with pytest.raises(SettingsError) as caught:
        HubSettings.from_mapping({"placement_tick_seconds": 1.0, key: 1.0})
    assert str(caught.value) == f"unknown hub setting {key!r}; did you mean {suggested!r}?"


def test_an_unknown_key_like_nothing_known_points_at_the_table() -> None:
    with pytest.raises(SettingsError, match=r"^unknown hub setting 'zzz' \(README.md, 'Hub settings', lists them\)$"):
        HubSettings.from_mapping({"zzz": 1})
    # the old bag of names is gone too
    with pytest.raises(SettingsError, match="unknown hub setting 'extra'"):
        HubSettings.from_mapping({"extra": {}})


@pytest.mark.parametrize(("values", "message"), [
    ({"placement_tick_seconds": "1s"}, "placement_tick_seconds (PlacementSettings.tick_seconds): "
                                       "expected a number of seconds, got str '1s'"),
    ({"cluster_loss_grace_seconds": "60"}, "cluster_loss_grace_seconds (MemberSyncSettings."
                                           "cluster_loss_grace_seconds): expected a number of seconds, got str"),
    ({"stuck_timeout_seconds": True}, "stuck_timeout_seconds (StuckSettings.timeout_seconds): expected a number "
                                      "of seconds, got bool True"),
    ({"member_concurrent_lists": 2.5}, "member_concurrent_lists (MemberSyncSettings.concurrent_lists): "
                                       "expected a whole number, got float 2.5"),
    ({"placement_max_inflight": "64"}, "placement_max_inflight (PlacementSettings.max_inflight): expected a whole "
                                       "number, got str '64'"),
    ({"member_lease": "false"}, "member_lease (MemberLeaseSettings.enabled): expected true or false, got str"),
    ({"placement_preemption": 0}, "placement_preemption (PlacementSettings.preemption): expected true or false"),
    ({"member_on_applied": "print"}, "member_on_applied (MemberSyncSettings.on_applied): expected a callable or "
                                     "None, got str"),
    ({"placement_profile": {"name": "x"}}, "placement_profile (PlacementSettings.profile): expected a placement "
                                           "Profile, got dict"),
    ({"member_watch_timeout_seconds": 300}, "member_watch_timeout_seconds (MemberSyncSettings.watch_timeout_seconds)"
                                            ": expected a (min, max) pair of whole seconds, got int 300"),
    ({"event_ttl_seconds": float("nan")}, "event_ttl_seconds (EventSettings.ttl_seconds): expected a number of "
                                          "seconds, got float nan"),
    ({"max_memory_per_pod": 64}, "max_memory_per_pod (ValidationSettings.max_memory_per_pod): expected a "
                                 "non-empty string, got int 64"),
    ({"hub_id": ""}, "hub_id (HubSettings.hub_id): expected a non-empty string"),
    ({"state_dir": 3}, "state_dir (HubSettings.state_dir): expected a path, got int 3"),
])
def test_a_mistyped_value_names_the_key_and_field(values: dict[str, Any], message: str) -> None:
    with pytest.raises(SettingsError) as caught:
        HubSettings.from_mapping(values)
    assert str(caught.value).startswith(message), str(caught.value)


@pytest.mark.parametrize(("values", "message"), [
    ({"probe_interval_seconds": -1}, "probe_interval_seconds (MemberSyncSettings.probe_interval_seconds): "
                                     "must be above 0, got -1"),
    ({"placement_tick_seconds": 0}, "placement_tick_seconds (PlacementSettings.tick_seconds): must be above 0"),
    ({"cleanup_grace_seconds": -0.5}, "cleanup_grace_seconds (GcSettings.cleanup_grace_seconds): must be not "
                                      "negative, got -0.5"),
    ({"member_lease_duration_seconds": 0}, "member_lease_duration_seconds (MemberLeaseSettings.duration_seconds): "
                                           "must be above 0"),
    ({"lifecycle_tick_seconds": 0.001}, "lifecycle_tick_seconds (StatusSyncSettings.lifecycle_tick_seconds): "
                                        "must be >= 0.01"),
    ({"unreachable_after_failures": 0}, "unreachable_after_failures (MemberSyncSettings.unreachable_after_failures"
                                        "): must be >= 1, got 0"),
    ({"mass_loss_threshold": 1.5}, "mass_loss_threshold (FailoverSettings.mass_loss_threshold): must be at most 1"),
    ({"failover_rate": 0}, "failover_rate (FailoverSettings.rate_per_second): must be above 0"),
    ({"member_watch_timeout_seconds": (600, 300)}, "member_watch_timeout_seconds (MemberSyncSettings."
                                                   "watch_timeout_seconds): min 600 is above max 300"),
    ({"member_watch_timeout_seconds": (-1, 300)}, "member_watch_timeout_seconds (MemberSyncSettings."
                                                  "watch_timeout_seconds): must be not negative, got -1"),
    ({"dispatch_backoff_initial_seconds": 5, "dispatch_backoff_max_seconds": 1},
     "dispatch_backoff_max_seconds (1) is below dispatch_backoff_initial_seconds (5)"),
    ({"backoff_initial_seconds": 2, "backoff_max_seconds": 1}, "backoff_max_seconds (1) is below"),
    ({"max_gpus_per_pod": 0}, "max_gpus_per_pod (ValidationSettings.max_gpus_per_pod): must be >= 1, got 0"),
    ({"max_cpu_per_pod": "lots"}, "ValidationSettings: "),
])
def test_an_out_of_range_value_names_the_key_and_field(values: dict[str, Any], message: str) -> None:
    with pytest.raises(SettingsError) as caught:
        HubSettings.from_mapping(values)
    assert str(caught.value).startswith(message), str(caught.value)


def test_a_concern_built_directly_is_checked_the_same_way() -> None:
    with pytest.raises(SettingsError, match=r"placement_tick_seconds \(PlacementSettings.tick_seconds\): must be "
                                            r"above 0, got -1"):
        PlacementSettings(tick_seconds=-1)
    with pytest.raises(SettingsError, match=r"dispatch_fence_wait_seconds \(DispatchSettings.fence_wait_seconds\): "
                                            r"expected a number of seconds, got str '30s'"):
        DispatchSettings(fence_wait_seconds="30s")  # type: ignore[arg-type]
    with pytest.raises(SettingsError, match=r"HubSettings.placement: expected PlacementSettings, got dict"):
        HubSettings(placement={"tick_seconds": 1})  # type: ignore[arg-type]
    assert StuckSettings(timeout_seconds=30).timeout_seconds == 30.0


def test_test_hooks_are_typed_optional_fields() -> None:
    seen: list[str] = []

    def hook(cluster: str, resource: str, events: Any, received_at: float) -> None:
        seen.append(cluster)

    settings = HubSettings.from_mapping({"member_on_applied": hook})
    assert settings.member_sync.on_applied is hook
    assert MemberSyncSettings().on_applied is None


def test_federator_up_flags_build_valid_settings() -> None:
    import argparse

    from federator.hub.app import settings_knobs

    args = argparse.Namespace(cluster_loss_grace="2m", member_lease_duration="30s", lease_margin="3s",
                              mass_loss_threshold="0.3", failover_rate="50", compaction_interval="0")
    settings = HubSettings.from_mapping(settings_knobs(args))
    assert settings.member_sync.cluster_loss_grace_seconds == 120.0
    assert settings.lease == MemberLeaseSettings(duration_seconds=30.0, margin_seconds=3.0)
    assert settings.failover == FailoverSettings(mass_loss_threshold=0.3, rate_per_second=50.0)
    assert settings.compaction.interval_seconds == 0.0
    defaults = HubSettings.from_mapping(settings_knobs(argparse.Namespace()))
    assert defaults == HubSettings()
    assert HubSettings.from_mapping(settings_knobs(argparse.Namespace(currency="EUR"))).queues.currency == "EUR"
    for bad in ("usd", "EURO", "US$", "$" * 10_000):
        with pytest.raises(ValueError, match="--currency .*unknown currency format") as raised:
            settings_knobs(argparse.Namespace(currency=bad))
        assert len(str(raised.value)) < 200


# ------------------------------------------------------------------------------------------- docs and source


def test_readme_table_lists_every_setting() -> None:
    readme = (ROOT / "README.md").read_text()
    found = re.search(r"<!-- hub-settings:begin -->\n(.*?)\n<!-- hub-settings:end -->", readme, re.S)
    assert found, "README.md has no 'Hub settings' table between <!-- hub-settings:begin/end --> markers"
    table = found.group(1)
    missing = [k.key for k in knobs() if f"| `{k.key}`" not in table]
    assert not missing, f"README.md's Hub settings table lacks {missing}"
    assert table == markdown_table(), ("README.md's Hub settings table is stale; replace it with "
                                       "federator.controllers.settings.markdown_table():\n" + markdown_table())


def test_no_bag_of_settings_is_left_in_the_source() -> None:
    """No `extra.get(` and no `.extra` attribute in federator/ (the replay's PolicyResult.extra, figures of a
    simulated policy run, is not a setting and stays), nor a `HubSettings.extra` in its docs."""
    offenders: list[str] = []
    for path in sorted((ROOT / "federator").rglob("*.py")):
        text = path.read_text()
        rel = path.relative_to(ROOT)
        if re.search(r"\bextra\.get\(|HubSettings\.extra|settings\.extra\b", text):
            offenders.append(f"{rel}: extra.get / HubSettings.extra")
        if rel.parts[:2] == ("federator", "replay"):
            continue
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.Attribute) and node.attr == "extra":
                offenders.append(f"{rel}:{node.lineno}: .extra")
    assert not offenders, offenders
