"""Fixtures of the job kind tests: `twin_errors` validates a translation's twin as the hub would store it."""

from __future__ import annotations

import copy
import os
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn

import pytest

from federator.apis.common import FieldError
from federator.apis.jobkinds.base import Translation
from federator.apis.trainingjob import validate_trainingjob

UPSTREAM = Path(__file__).resolve().parent / "upstream"


@pytest.fixture
def twin_errors() -> Callable[[Translation], list[FieldError]]:
    """The TrainingJob validator's verdict on the twin of a translation (named `twin` in namespace `ns`)."""

    def check(translation: Translation) -> list[FieldError]:
        assert translation.spec is not None, translation.errors
        twin = {"apiVersion": "federator.dev/v1alpha1", "kind": "TrainingJob",
                "metadata": {"name": "twin", "namespace": "ns", "annotations": dict(translation.annotations)},
                "spec": copy.deepcopy(translation.spec)}
        return validate_trainingjob(twin)

    return check


@pytest.fixture(scope="session")
def go_module() -> Callable[[str], Path]:
    """The directory of module@version in the Go module cache, downloaded from the Go module proxy when the cache
    does not have it (a fresh machine). Without a Go toolchain or the proxy it skips, except in CI (CI=true),
    where a module the tests read must be there: it fails naming the module and go's error."""

    def find(module_at_version: str) -> Path:
        try:
            cache = subprocess.run(["go", "env", "GOMODCACHE"], capture_output=True, text=True, check=True,
                                   timeout=60).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            _unavailable("no Go toolchain")
        path = Path(cache) / module_at_version
        if not path.is_dir():
            try:
                done = subprocess.run(["go", "mod", "download", "-json", module_at_version], capture_output=True,
                                      text=True, timeout=300, env={**os.environ, "GOFLAGS": "-mod=mod"})
            except subprocess.TimeoutExpired:
                _unavailable(f"go mod download {module_at_version} took more than 300 s")
            if done.returncode != 0 or not path.is_dir():
                why = (done.stdout + done.stderr).strip().splitlines()
                _unavailable(f"{module_at_version} is not in the Go module cache and go mod download failed: "
                             f"{why[-1] if why else done.returncode}")
        return path

    return find


def _unavailable(why: str) -> NoReturn:
    if os.environ.get("CI") == "true":
        pytest.fail(why)
    pytest.skip(why)


def set_at(obj: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    """obj with the field at dotted `path` (digits index lists; missing objects are made) set to value, or removed
    when value is `...`."""
    node: Any = obj
    keys: list[Any] = [int(k) if k.isdigit() else k for k in path.split(".")]
    for key in keys[:-1]:
        node = node[key] if isinstance(key, int) else node.setdefault(key, {})
    if value is ...:
        del node[keys[-1]]
    else:
        node[keys[-1]] = value
    return obj


@pytest.fixture
def edited() -> Callable[[dict[str, Any], str, Any], dict[str, Any]]:
    return set_at


def refused_at(result: Translation, where: str, words: str) -> None:
    """The translation failed with an error at `where` saying `words`, and every message is short."""
    assert result.spec is None
    assert any(p == where and words in m for p, m in result.errors), result.errors
    assert all(len(m) < 400 for _, m in result.errors)


@pytest.fixture
def assert_refused() -> Callable[[Translation, str, str], None]:
    return refused_at


def unknown_fields(schema: Any, obj: dict[str, Any]) -> list[str]:
    """What the hub's strict field validation finds unknown in `obj` under `schema`."""
    from federator.apiserver.fieldvalidation import loc_text, schema_unknown_fields

    return [loc_text(loc) for loc in schema_unknown_fields(schema)(obj)]


@pytest.fixture
def schema_unknown() -> Callable[[Any, dict[str, Any]], list[str]]:
    return unknown_fields
