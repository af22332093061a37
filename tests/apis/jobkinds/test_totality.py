"""Every translator and pod contract is total: any JSON value, however shaped, gives a Translation (a spec, or
errors with paths) and a PodContract, never an exception; and a Translation with no spec always says why (a kind
that reads another object, TrainJob: `translate` alone never gives a spec; on its runtime it does, or says why,
whatever the TrainJob and whatever the runtime)."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from federator.apis.common import ValidationSettings
from federator.apis.jobkinds.base import JobKind, Translation
from federator.apis.jobkinds.batchjob import CONTRACT_ANNOTATION, JOB
from federator.apis.jobkinds.jobset import JOBSET
from federator.apis.jobkinds.runtimes import BUILTIN_TORCH_DISTRIBUTED
from federator.apis.jobkinds.trainjob import TRAINJOB

KINDS = [JOB, JOBSET, TRAINJOB]
KEYS = st.sampled_from(["spec", "metadata", "template", "replicatedJobs", "parallelism", "completions", "name",
                        "completionMode", "replicas", "restartPolicy", "trainer", "runtimeRef", "numNodes", "env",
                        "labels", "annotations", "podSpecOverrides", "targetJobs", "containers", "kueue.x-k8s.io/"
                        "queue-name", "federator.dev/gpu-models", "Indexed", "torch-distributed", "x"])
SCALARS = st.none() | st.booleans() | st.integers(min_value=-(2**64), max_value=2**64) | st.text(max_size=20) | \
    st.sampled_from(["Indexed", "NonIndexed", "OnFailure", "Never", "torch-distributed", "worker", "All"])
JSON = st.recursive(SCALARS, lambda children: st.lists(children, max_size=4)
                    | st.dictionaries(KEYS, children, max_size=5), max_leaves=30)


def full(kind: JobKind, obj: Any, referenced: Any = BUILTIN_TORCH_DISTRIBUTED) -> Translation:
    """The translation admission makes (on `referenced` for a kind that reads another object)."""
    alone = kind.translate(obj, ValidationSettings())
    if kind.translate_referenced is None:
        return alone
    assert alone.spec is None
    on = kind.translate_referenced(obj, ValidationSettings(), referenced)
    assert set(alone.errors) <= set(on.errors)
    return on


@pytest.mark.parametrize("kind", KINDS, ids=lambda k: k.kind)
@settings(max_examples=150, deadline=None)
@given(obj=JSON)
def test_translate_is_total(kind: JobKind, obj: Any) -> None:
    result = full(kind, obj)
    assert (result.spec is None) == bool(result.errors)
    assert all(isinstance(path, str) and isinstance(message, str) for path, message in result.errors)


@pytest.mark.parametrize("kind", KINDS, ids=lambda k: k.kind)
@settings(max_examples=100, deadline=None)
@given(annotation=st.text(max_size=40) | JSON.map(json.dumps),
       index=st.integers(min_value=0, max_value=10_000))
def test_pod_contract_is_total(kind: JobKind, annotation: str, index: int) -> None:
    assert kind.pod_contract is not None
    pod = kind.pod_contract("job", "ns", "worker", index, {CONTRACT_ANNOTATION: annotation})
    assert all(isinstance(k, str) and isinstance(v, str) for k, v in pod.labels.items())
    assert all(isinstance(k, str) and isinstance(v, str) for k, v in pod.annotations.items())


UPSTREAM = Path(__file__).resolve().parent / "upstream"
TRAINJOB_EXAMPLE = {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob", "metadata": {"name": "t"},
                    "spec": {"runtimeRef": {"name": "torch-distributed"},
                             "trainer": {"image": "i", "numNodes": 2, "env": [{"name": "A", "value": "1"}]},
                             "podSpecOverrides": [{"targetJobs": [{"name": "node"}], "containers": [
                                 {"name": "node", "env": [{"name": "B", "value": "2"}]}]}]}}
EXAMPLES = [(JOBSET, yaml.safe_load((UPSTREAM / "jobset-with-network.yaml").read_text())),
            (TRAINJOB, TRAINJOB_EXAMPLE),
            (JOB, {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j"},
                   "spec": {"completions": 2, "parallelism": 2, "completionMode": "Indexed", "template": {"spec": {
                       "restartPolicy": "Never", "containers": [{"name": "c", "image": "i"}]}}}})]


def paths(node: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    found = [prefix] if prefix else []
    if isinstance(node, dict):
        for key, child in node.items():
            found += paths(child, (*prefix, key))
    elif isinstance(node, list):
        for index, child in enumerate(node):
            found += paths(child, (*prefix, index))
    return found


@pytest.mark.parametrize(("kind", "example"), EXAMPLES, ids=lambda v: getattr(v, "kind", ""))
@settings(max_examples=150, deadline=None)
@given(data=st.data())
def test_an_example_with_any_field_replaced_is_total(kind: JobKind, example: dict[str, Any],
                                                     data: st.DataObject) -> None:
    assert full(kind, example).errors == []
    obj = copy.deepcopy(example)
    where = data.draw(st.sampled_from(paths(obj)))
    node: Any = obj
    for key in where[:-1]:
        node = node[key]
    node[where[-1]] = data.draw(JSON)
    result = full(kind, obj)
    assert (result.spec is None) == bool(result.errors)


@settings(max_examples=200, deadline=None)
@given(data=st.data())
def test_a_runtime_with_any_field_replaced_is_total(data: st.DataObject) -> None:
    runtime = copy.deepcopy(dict(BUILTIN_TORCH_DISTRIBUTED))
    where = data.draw(st.sampled_from(paths(runtime)))
    node: Any = runtime
    for key in where[:-1]:
        node = node[key]
    node[where[-1]] = data.draw(JSON)
    result = full(TRAINJOB, TRAINJOB_EXAMPLE, runtime)
    assert (result.spec is None) == bool(result.errors)
    assert all(isinstance(path, str) and isinstance(message, str) for path, message in result.errors)


@settings(max_examples=150, deadline=None)
@given(runtime=JSON)
def test_any_runtime_is_total(runtime: Any) -> None:
    result = full(TRAINJOB, TRAINJOB_EXAMPLE, runtime)
    assert result.spec is None and result.errors
