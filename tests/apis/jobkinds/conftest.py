"""Fixtures of the job kind tests: `twin_errors` validates a translation's twin as the hub would store it."""

from __future__ import annotations

import copy
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

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
    """The directory of module@version in the Go module cache (skips when the cache does not have it)."""

    def find(module_at_version: str) -> Path:
        try:
            cache = subprocess.run(["go", "env", "GOMODCACHE"], capture_output=True, text=True, check=True,
                                   timeout=60).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            pytest.skip("no Go toolchain")
        path = Path(cache) / module_at_version
        if not path.is_dir():
            pytest.skip(f"{module_at_version} is not in the Go module cache")
        return path

    return find


def unknown_fields(schema: Any, obj: dict[str, Any]) -> list[str]:
    """What the hub's strict field validation finds unknown in `obj` under `schema`."""
    from federator.apiserver.fieldvalidation import loc_text, schema_unknown_fields

    return [loc_text(loc) for loc in schema_unknown_fields(schema)(obj)]


@pytest.fixture
def schema_unknown() -> Callable[[Any, dict[str, Any]], list[str]]:
    return unknown_fields
