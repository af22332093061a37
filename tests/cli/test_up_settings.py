"""`federator up --help` names the hub setting behind each flag that sets one (controllers/settings.py says which
flag sets what), and a wrong flag is one line naming it, before anything starts."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from federator.cli import build_parser
from federator.controllers.settings import knobs

ROOT = Path(__file__).resolve().parents[2]


def _up_help() -> None:
    parser = build_parser()
    with pytest.raises(SystemExit):
        parser.parse_args(["up", "--help"])


def test_up_help_names_the_setting_of_every_flag(capsys: pytest.CaptureFixture[str]) -> None:
    _up_help()
    raw = capsys.readouterr().out
    text = " ".join(raw.split())
    # each option's block: from its line to the next option or group heading
    blocks = {m.group(1): " ".join(m.group(0).split())
              for m in re.finditer(r"^  (--[\w-]+).*?(?=^  -|^\S|\Z)", raw, re.M | re.S)}
    flagged = {k.key: k.flag for k in knobs() if k.flag}
    assert flagged, "no hub setting has a federator up flag"
    for key, flag in flagged.items():
        assert flag in blocks, f"federator up --help has no {flag}"
        assert blocks[flag].endswith(f"[setting {key}]"), (flag, blocks[flag])
    named = set(re.findall(r"\[setting ([a-z_]+)\]", text))
    assert named == set(flagged), "a [setting NAME] in federator up --help that no flag sets, or a typo"
    assert "'Hub settings'" in text


def test_up_rejects_a_bad_flag_naming_it_before_it_starts(tmp_path: Path) -> None:
    # a process of its own: `federator up` configures the process's logging
    done = subprocess.run(
        [sys.executable, "-m", "federator.cli", "up", "--no-sim", "--state-dir", str(tmp_path / "state"),
         "--mass-loss-threshold", "2"],
        cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert done.stderr.strip() == "error: --mass-loss-threshold '2': must be between 0 and 1"
    assert not (tmp_path / "state").exists()


@pytest.mark.parametrize(("policy", "says"), [
    ("rules: [\n", "not YAML: "),
    ("apiVersion: audit.k8s.io/v1\nkind: Policy\nrules: [{level: Verbose}]\n",
     'rules[0].level: Unsupported value: "Verbose"'),
])
def test_up_with_a_bad_audit_policy_is_one_line_and_starts_nothing(tmp_path: Path, policy: str, says: str) -> None:
    path = tmp_path / "policy.yaml"
    path.write_text(policy)
    # without --no-sim: the policy is checked before any simulated cluster starts
    done = subprocess.run(
        [sys.executable, "-m", "federator.cli", "up", "--state-dir", str(tmp_path / "state"),
         "--audit-log-path", str(tmp_path / "audit.log"), "--audit-policy-file", str(path)],
        cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert done.stderr.startswith(f"error: --audit-policy-file {path}: {says}"), done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and done.stdout == ""
    assert not (tmp_path / "state").exists() and not (tmp_path / "audit.log").exists()
