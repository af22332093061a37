"""The upstream job kinds' schemas (federator/apis/jobkinds/*.json) are what scripts/gen_job_kind_schemas.py
extracts from the pinned CRDs in the Go module cache."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "gen_job_kind_schemas.py"


def test_each_committed_schema_cites_its_source() -> None:
    files = sorted((ROOT / "federator" / "apis" / "jobkinds").glob("*.json"))
    assert {f.name for f in files} >= {"pytorchjobs.json", "tfjobs.json", "paddlejobs.json", "mpijobs.json"}
    for path in files:
        data = json.loads(path.read_text())
        assert "@v" in data["source"] and ".yaml" in data["source"], path
        assert data["generator"] == "scripts/gen_job_kind_schemas.py"
        assert data["schema"]["type"] == "object" and "spec" in data["schema"]["properties"]
        assert path.name == f"{data['plural']}.json"


@pytest.mark.skipif(shutil.which("go") is None, reason="needs go (the CRDs are read from the Go module cache)")
def test_the_committed_schemas_are_what_the_generator_makes() -> None:
    result = subprocess.run([sys.executable, str(SCRIPT), "--check"], capture_output=True, text=True, timeout=900)
    if result.returncode == 2 and "module unavailable" in result.stderr:
        pytest.skip(result.stderr.strip())
    assert result.returncode == 0, result.stderr


def test_an_unknown_kind_is_refused() -> None:
    result = subprocess.run([sys.executable, str(SCRIPT), "--check", "NoSuchJob"], capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == 2 and "unknown kind(s) NoSuchJob" in result.stderr
