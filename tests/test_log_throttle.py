"""FailureLineThrottle: a retry loop that cannot succeed logs a burst, then a counted summary per
window, never a line per attempt; lines without an error are never dropped."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from typing import Any

import pytest
import structlog

from federator.obs import FailureLineThrottle


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _run(throttle: FailureLineThrottle, event: dict[str, Any]) -> dict[str, Any] | None:
    try:
        return dict(throttle(None, str(event.get("level", "warning")), dict(event)))
    except structlog.DropEvent:
        return None


def test_a_failing_loop_prints_a_burst_then_one_counted_line_per_window() -> None:
    clock = Clock()
    throttle = FailureLineThrottle(burst=3, window_seconds=10.0, clock=clock)
    failure = {"event": "could not write job status; will retry", "component": "controllers", "level": "warning",
               "error": "leadership token 7 is no longer current"}
    printed = [line for line in (_run(throttle, failure) for _ in range(2_000)) if line is not None]
    assert len(printed) == 3
    assert "throttled" in printed[-1] and "suppressed_similar" not in printed[0]
    clock.now += 10.0
    later = _run(throttle, failure)
    assert later is not None and later["suppressed_similar"] == 1_997
    # each (component, event) has its own budget
    other = dict(failure, event="etcd unavailable; retrying")
    assert _run(throttle, other) is not None


def test_lines_without_an_error_and_info_lines_are_never_dropped() -> None:
    throttle = FailureLineThrottle(burst=1, window_seconds=60.0, clock=Clock())
    audit = {"event": "gang failed over from a lost cluster", "component": "failover", "level": "warning"}
    info = {"event": "retrying", "component": "x", "level": "info", "error": "boom"}
    assert all(_run(throttle, audit) is not None for _ in range(100))
    assert all(_run(throttle, info) is not None for _ in range(100))


@pytest.mark.parametrize("flag", ["on", "off"])
def test_configure_logging_installs_it_in_a_real_process(flag: str) -> None:
    """The CLI's logging (configure_logging) throttles by default; throttle=False does not."""
    script = (
        "from federator.obs import configure_logging, get_logger\n"
        f"configure_logging(json=True, throttle={flag == 'on'})\n"
        "log = get_logger('loop')\n"
        "for i in range(500):\n"
        "    log.warning('store write failed; retrying', error='unavailable', attempt=i)\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True)
    lines = [json.loads(line) for line in io.StringIO(done.stderr) if line.strip()]
    assert len(lines) == (5 if flag == "on" else 500)
