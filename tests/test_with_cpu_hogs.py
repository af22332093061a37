"""scripts/with_cpu_hogs.py (behind `make test-loaded`): runs the command under hogs, passes its exit
code through, stops at the first failing run, refuses bad flags, and leaves no hog behind."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "with_cpu_hogs.py"


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=120)


def test_the_command_runs_each_time_and_its_exit_code_comes_back(tmp_path: Path) -> None:
    counter = tmp_path / "runs"
    appended = f"open({str(counter)!r}, 'a').write('x')"
    done = _run("--hogs", "1", "--runs", "3", "--", sys.executable, "-c", appended)
    assert done.returncode == 0, done.stderr
    assert counter.read_text() == "xxx"
    assert "run 3/3 exited 0" in done.stdout

    failing = _run("--hogs", "1", "--runs", "3", "--", sys.executable, "-c", f"{appended}; raise SystemExit(3)")
    assert failing.returncode == 3
    assert counter.read_text() == "xxxx"  # stopped after the first failing run


@pytest.mark.parametrize("args, message", [
    ((), "no command given"),
    (("--runs", "0", "--", "true"), "--runs 0"),
    (("--hogs", "-1", "--", "true"), "--hogs -1"),
    (("--hogs", "many", "--", "true"), "invalid int value"),
])
def test_bad_flags_are_refused_with_one_clear_line(args: tuple[str, ...], message: str) -> None:
    done = _run(*args)
    assert done.returncode == 2 and message in done.stderr and "Traceback" not in done.stderr
