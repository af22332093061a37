"""Simulator profiles: every shipped profile validates; bad files get an
error naming the file and the field; initial nodes carry what the
scheduler and the official client need."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes.client import ApiClient

from federator.sim.fit import node_info, resource_units
from federator.sim.profile import (
    DATASET_LABEL_PREFIX,
    MAX_PROFILE_BYTES,
    ClusterProfile,
    ProfileError,
    check_label_key,
    check_label_value,
    initial_nodes,
    load_profile_file,
    load_profile_paths,
    load_profiles,
    parse_profile,
)

ROOT = Path(__file__).resolve().parents[2]
SIM_PROFILES = ROOT / "clusterconfigs" / "sim"
PROFILE_FILES = sorted(SIM_PROFILES.glob("*.yaml"))


def test_shipped_profiles_exist() -> None:
    names = {p.stem for p in PROFILE_FILES}
    assert {"onprem-rdma-a100", "cloud-eth-h100", "cloud-small", "onprem-roce-v100"} <= names


@pytest.mark.parametrize("path", PROFILE_FILES, ids=[p.name for p in PROFILE_FILES])
def test_every_shipped_profile_validates(path: Path) -> None:
    profile = load_profile_file(path)
    assert profile.name == path.stem  # file name and cluster name agree, so kubeconfigs are findable
    nodes = initial_nodes(profile)
    assert len(nodes) == profile.node_count > 0


def test_directory_load_and_scheduler_kinds() -> None:
    profiles = {p.name: p for p in load_profiles(SIM_PROFILES)}
    assert profiles["onprem-rdma-a100"].network.fabric == "infiniband"
    assert {s.type for s in profiles["onprem-rdma-a100"].schedulers} >= {"volcano"}
    assert profiles["cloud-eth-h100"].network.fabric == "ethernet"
    assert [s.type for s in profiles["cloud-eth-h100"].gang_schedulers] == ["coscheduling"]
    assert [s.type for s in profiles["cloud-small"].schedulers] == ["default"]
    assert any(s.type == "kube-batch" for p in profiles.values() for s in p.schedulers)
    assert "imagenet-22k" in {d.name for d in profiles["onprem-rdma-a100"].datasets}
    assert profiles["cloud-small"].background_load is not None


def base() -> dict[str, Any]:
    return yaml.safe_load((SIM_PROFILES / "onprem-rdma-a100.yaml").read_text())


def test_initial_nodes_shape_and_client_models() -> None:
    profile = load_profile_file(SIM_PROFILES / "onprem-rdma-a100.yaml")
    nodes = initial_nodes(profile)
    a100 = next(n for n in nodes if n["metadata"]["labels"]["federator.dev/node-pool"] == "a100")
    labels = a100["metadata"]["labels"]
    assert labels["kubernetes.io/hostname"] == a100["metadata"]["name"]
    assert labels["nvidia.com/gpu.product"] == "A100-SXM4-40GB"
    assert labels["nvidia.com/gpu.count"] == "8"
    assert labels[DATASET_LABEL_PREFIX + "imagenet-22k"] == str(1400 * 2**30)
    assert a100["spec"]["taints"] == [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]
    cap, alloc = a100["status"]["capacity"], a100["status"]["allocatable"]
    assert all(isinstance(v, str) for v in (*cap.values(), *alloc.values()))
    assert cap["nvidia.com/gpu"] == "8" and cap["rdma/hca"] == "1000"
    assert resource_units("cpu", alloc["cpu"]) == 126_000
    assert resource_units("memory", alloc["memory"]) == 2**40 - 16 * 2**30
    ready = [c for c in a100["status"]["conditions"] if c["type"] == "Ready"]
    assert ready and ready[0]["status"] == "True"
    info = node_info(a100)
    assert info.ready and info.allocatable["nvidia.com/gpu"] == 8
    # the cpu pool has no GPU labels and no dataset cached only on a100
    cpu = next(n for n in nodes if n["metadata"]["labels"]["federator.dev/node-pool"] == "cpu")
    assert "nvidia.com/gpu.product" not in cpu["metadata"]["labels"]
    assert DATASET_LABEL_PREFIX + "imagenet-22k" not in cpu["metadata"]["labels"]
    assert DATASET_LABEL_PREFIX + "coco-2017" in cpu["metadata"]["labels"]
    # The official client can deserialize every node (it rejects missing required fields).
    client = ApiClient()
    node_list = {"apiVersion": "v1", "kind": "NodeList", "metadata": {"resourceVersion": "1"}, "items": nodes}
    decoded = client.deserialize(json.dumps(node_list), "V1NodeList", "application/json")
    assert len(decoded.items) == len(nodes)
    assert decoded.items[0].status.node_info.kubelet_version == "v1.29.4"
    assert len({n["metadata"]["name"] for n in nodes}) == len(nodes)


@pytest.mark.parametrize(
    ("mutate", "field", "message"),
    [
        (lambda d: d.update(name="Bad_Name"), "name", "DNS-1123"),
        (lambda d: d.update(colour="blue"), "colour", "Extra inputs are not permitted"),
        (lambda d: d["nodePools"][0].update(cpu="lots"), "nodePools.0.cpu", "quantities must match"),
        (lambda d: d["nodePools"][0].update(memory="-1Gi"), "nodePools.0.memory", "negative"),
        (lambda d: d["nodePools"][0].pop("gpuProduct"), "nodePools.0", "no gpuProduct"),
        (lambda d: d["nodePools"][0].update(count=-1), "nodePools.0.count", "greater than or equal to 0"),
        (lambda d: d["nodePools"][0].update(count="many"), "nodePools.0.count", "valid integer"),
        (lambda d: d["nodePools"][0].update(gpuProduct="A100 SXM4"), "nodePools.0.gpuProduct", "value"),
        (lambda d: d["nodePools"][0]["taints"][0].update(effect="Sometimes"), "nodePools.0.taints.0.effect", "Input"),
        (lambda d: d["nodePools"][1].update(name="a100"), "(top level)", "duplicate node pool"),
        (lambda d: d["network"].update(fabric="carrier-pigeon"), "network.fabric", "infiniband"),
        (lambda d: d["network"].update(bandwidthGbps=0), "network.bandwidthGbps", "greater than 0"),
        (lambda d: d.update(schedulers=[]), "schedulers", "at least 1"),
        (lambda d: d["schedulers"].append({"type": "volcano"}), "(top level)", "schedulerName"),
        (lambda d: d["schedulers"][0].update(type="yunikorn"), "schedulers.0.type", "volcano"),
        (lambda d: d["datasets"][0].update(pools=["tpu"]), "(top level)", "unknown pools"),
        (lambda d: d["datasets"][0].update(size="0"), "datasets.0.size", "> 0"),
        (lambda d: d["location"].update(type="cloud"), "location", "provider"),
        (lambda d: d.update(kind="MemberCluster"), "kind", "ClusterProfile"),
        (lambda d: d.pop("apiVersion"), "apiVersion", "Field required"),
        (lambda d: d["nodePools"][0]["labels"].update({"bad key!": "x"}), "nodePools.0.labels", "label key"),
        (lambda d: d["nodePools"][0].update(reserved={"cpu": "999"}), "nodePools.0", "reserved.cpu"),
        (lambda d: d.update(backgroundLoad={"arrivalsPerMinute": 1, "scheduler": "gang"}) or d.update(
            schedulers=[{"type": "default"}]), "(top level)", "no gang scheduler"),
        (lambda d: d.update(backgroundLoad={"arrivalsPerMinute": 1, "lifetimeSecondsMin": 10,
                                            "lifetimeSecondsMax": 5}), "backgroundLoad", "lifetimeSecondsMax"),
        (lambda d: d["nodePools"][0].update(count=20_001), "nodePools.0.count", "less than or equal"),
    ],
)
def test_bad_profiles_name_the_file_and_field(
    tmp_path: Path, mutate: Any, field: str, message: str
) -> None:
    data = base()
    mutate(data)
    f = tmp_path / "broken.yaml"
    f.write_text(yaml.safe_dump(data))
    with pytest.raises(ProfileError) as err:
        load_profile_file(f)
    text = str(err.value)
    assert text.startswith(f"{f}: ")
    assert f"{f}: {field}:" in text, text
    assert message in text, text


def test_no_name_keeps_a_trailing_newline() -> None:
    """The profile strips whitespace around every string (a YAML block scalar ends in a newline), so the
    names it checks never carry one; the label checks refuse one themselves."""
    data = base()
    data.update(name="cloud\n", labels={"tier\n": "gpu\n"})
    parsed = parse_profile(data)
    assert (parsed.name, dict(parsed.labels)) == ("cloud", {"tier": "gpu"})
    for bad_key in ("tier\n", "example.com/tier\n"):
        with pytest.raises(ValueError, match="name part must consist"):
            check_label_key(bad_key)
    with pytest.raises(ValueError, match="a valid label must be"):
        check_label_value("tier", "gpu\n")


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("name: [unclosed\n", r"invalid YAML \(line"),
        ("- just\n- a list\n", "must be a YAML mapping"),
        ("a: 1\n---\nb: 2\n", "exactly one YAML document"),
        ("", "exactly one YAML document"),
        ("!!python/object:os.system {}\n", "invalid YAML"),
    ],
)
def test_malformed_files(tmp_path: Path, content: str, message: str) -> None:
    f = tmp_path / "x.yaml"
    f.write_text(content)
    with pytest.raises(ProfileError, match=message):
        load_profile_file(f)


def test_oversized_binary_missing_and_duplicate(tmp_path: Path) -> None:
    big = tmp_path / "big.yaml"
    big.write_bytes(b"#" * (MAX_PROFILE_BYTES + 1))
    with pytest.raises(ProfileError, match="at most"):
        load_profile_file(big)
    binary = tmp_path / "bin.yaml"
    binary.write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(ProfileError, match="not UTF-8"):
        load_profile_file(binary)
    with pytest.raises(ProfileError, match="no such file"):
        load_profiles(tmp_path / "absent.yaml")
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ProfileError, match="no \\*.yaml"):
        load_profiles(empty)
    twins = tmp_path / "twins"
    twins.mkdir()
    text = (SIM_PROFILES / "cloud-small.yaml").read_text()
    (twins / "a.yaml").write_text(text)
    (twins / "b.yaml").write_text(text)
    with pytest.raises(ProfileError, match="also defined in"):
        load_profiles(twins)



def test_profiles_of_several_paths_keep_their_order_and_names_stay_unique(tmp_path: Path) -> None:
    one = SIM_PROFILES / "cloud-small.yaml"
    names = [p.name for p in load_profile_paths([one, SIM_PROFILES / "onprem-rdma-a100.yaml"])]
    assert names == [load_profile_file(one).name, load_profile_file(SIM_PROFILES / "onprem-rdma-a100.yaml").name]
    assert [p.name for p in load_profile_paths([str(SIM_PROFILES)])] == [p.name for p in load_profiles(SIM_PROFILES)]
    assert load_profile_paths([]) == []
    copy = tmp_path / "copy.yaml"
    copy.write_text(one.read_text())
    with pytest.raises(ProfileError, match=f"{copy}: cluster '.*' is also defined in {one}"):
        load_profile_paths([one, copy])
    with pytest.raises(ProfileError, match="is also defined in"):  # a directory holding a file already given
        load_profile_paths([one, SIM_PROFILES])
    with pytest.raises(ProfileError, match="no such file"):
        load_profile_paths([one, tmp_path / "absent.yaml"])

def test_defaults_and_scheduler_names() -> None:
    data = base()
    data["schedulers"] = [{"type": "coscheduling"}, {"type": "kube-batch", "schedulerName": "batch"},
                          {"type": "default"}]
    p = parse_profile(data)
    assert p.scheduler_names == {"scheduler-plugins-scheduler", "batch", "default-scheduler"}
    assert p.kubelet.start_delay_seconds == 2
    assert isinstance(p, ClusterProfile)
    with pytest.raises(ProfileError, match="<profile>"):
        parse_profile("text")
