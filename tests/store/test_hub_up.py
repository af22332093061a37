"""`federator up` as a real process: ready, Ctrl-C, clean exit; a second hub on
the same file is refused; a hub restarted after kill -9 takes over at once;
without --store the sqlite file is in the --state-dir."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _up(tmp_path: Path, db: Path | None) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    store = ["--store", f"sqlite://{db}"] if db is not None else []
    return subprocess.Popen(
        [sys.executable, "-m", "federator.cli", "up", *store,
         "--state-dir", str(tmp_path / "state"), "--listen", "127.0.0.1:0", "--no-sim"],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
    )


def _wait_ready(proc: subprocess.Popen[str], timeout: float = 60.0) -> dict[str, object]:
    assert proc.stderr is not None
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = proc.stderr.readline()
        if not line:
            raise AssertionError(f"hub exited early with {proc.wait()}")
        record = json.loads(line)  # stderr is not a TTY: one JSON object per line
        if record.get("event") == "hub ready":
            return dict(record)
    raise AssertionError("hub never logged 'hub ready'")


def test_federator_up_runs_until_ctrl_c_and_exits_cleanly(tmp_path: Path) -> None:
    db = tmp_path / "deep" / "dir" / "hub.db"
    hub = _up(tmp_path, db)
    try:
        ready = _wait_ready(hub)
        assert ready["leader_token"] and ready["store"] == f"sqlite://{db}"
        assert (tmp_path / "state").is_dir() and db.exists()

        second = _up(tmp_path, db)
        out, err = second.communicate(timeout=60)
        assert second.returncode != 0
        assert f"error: sqlite store {db} is in use by another process (pid {hub.pid})" in err
        assert "Traceback" not in err

        hub.send_signal(signal.SIGINT)
        _, err = hub.communicate(timeout=60)
        assert hub.returncode == 0, err
        events = [json.loads(line)["event"] for line in err.splitlines() if line.startswith("{")]
        assert events[-3:] == ["leadership released", "sqlite store closed", "hub stopped"]
    finally:
        hub.kill()


def test_hub_restarted_after_kill_9_leads_at_once_with_a_newer_token(tmp_path: Path) -> None:
    db = tmp_path / "hub.db"
    first = _up(tmp_path, db)
    try:
        token_1 = _wait_ready(first)["leader_token"]
    finally:
        first.send_signal(signal.SIGKILL)
        first.communicate(timeout=60)
    second = _up(tmp_path, db)
    try:
        token_2 = _wait_ready(second)["leader_token"]
        assert isinstance(token_1, int) and isinstance(token_2, int) and token_2 > token_1
        second.send_signal(signal.SIGTERM)
        second.communicate(timeout=60)
        assert second.returncode == 0
    finally:
        second.kill()


def test_without_store_the_sqlite_file_lives_in_the_state_dir(tmp_path: Path) -> None:
    hub = _up(tmp_path, None)
    try:
        ready = _wait_ready(hub)
        db = tmp_path / "state" / "hub.db"
        assert ready["store"] == f"sqlite://{db}" and db.exists()
        hub.send_signal(signal.SIGINT)
        hub.communicate(timeout=60)
        assert hub.returncode == 0
    finally:
        hub.kill()
