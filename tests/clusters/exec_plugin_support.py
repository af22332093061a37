"""A real exec credential plugin for tests: a small Python script written to a test's directory.

`write_plugin(directory)` writes `plugin.py`; run as `sys.executable plugin.py` (an `ExecConfig` with
`exec_config(...)`) it appends one line to `runs.log` per run, saves the KUBERNETES_EXEC_INFO it got to
`exec-info.json`, and acts as `mode.txt` says:

    token <token> [<seconds to expiry>]   print an ExecCredential with that token (and expirationTimestamp)
    tokens <first> <then>                 the first run prints <first>, every later one <then>
    hang                                  sleep for an hour
    fail                                  print "boom: no credential today" on stderr, exit 3
    garbage                               print text that is not JSON (holding <token> of `secret.txt`)
    wrong-version                         print an ExecCredential of client.authentication.k8s.io/v1beta1
    empty                                 print an ExecCredential with an empty status
    chunked <token>                       print the ExecCredential a few bytes at a time, and 400 KiB of stderr
    huge                                  print 2 MiB
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from federator.apis.clusterprofile import ExecConfig

SCRIPT = r'''
import datetime, json, os, sys, time
here = os.path.dirname(os.path.abspath(__file__))
with open(os.path.join(here, "runs.log"), "a") as fh:
    fh.write("run\n")
with open(os.path.join(here, "exec-info.json"), "w") as fh:
    fh.write(os.environ.get("KUBERNETES_EXEC_INFO", ""))
mode = open(os.path.join(here, "mode.txt")).read().split()
runs = len(open(os.path.join(here, "runs.log")).read().splitlines())

def credential(status, version="client.authentication.k8s.io/v1"):
    print(json.dumps({"apiVersion": version, "kind": "ExecCredential", "status": status}))

if mode[0] == "token":
    status = {"token": mode[1]}
    if len(mode) > 2:
        when = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(seconds=float(mode[2]))
        status["expirationTimestamp"] = when.strftime("%Y-%m-%dT%H:%M:%SZ")
    credential(status)
elif mode[0] == "tokens":
    credential({"token": mode[1] if runs == 1 else mode[2]})
elif mode[0] == "hang":
    time.sleep(3600)
elif mode[0] == "fail":
    print("boom: no credential today", file=sys.stderr)
    sys.exit(3)
elif mode[0] == "garbage":
    print("token=" + open(os.path.join(here, "secret.txt")).read() + " <html>")
elif mode[0] == "wrong-version":
    credential({"token": mode[1]}, "client.authentication.k8s.io/v1beta1")
elif mode[0] == "empty":
    credential({})
elif mode[0] == "chunked":
    text = json.dumps({"apiVersion": "client.authentication.k8s.io/v1", "kind": "ExecCredential",
                       "status": {"token": mode[1]}})
    for i in range(0, len(text), 7):
        sys.stdout.write(text[i:i + 7])
        sys.stdout.flush()
        time.sleep(0.01)
    print("chatty plugin line\n" * 20000, file=sys.stderr)
    print("last words", file=sys.stderr)
elif mode[0] == "huge":
    sys.stdout.write("x" * (2 * 1024 * 1024))
'''


def write_plugin(directory: Path, mode: str) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "plugin.py").write_text(SCRIPT)
    set_mode(directory, mode)
    return directory / "plugin.py"


def set_mode(directory: Path, mode: str) -> None:
    (directory / "mode.txt").write_text(mode)


def runs(directory: Path) -> int:
    log = directory / "runs.log"
    return len(log.read_text().splitlines()) if log.exists() else 0


def exec_info(directory: Path) -> dict[str, Any]:
    return json.loads((directory / "exec-info.json").read_text())  # type: ignore[no-any-return]


def exec_config(directory: Path, *, provide_cluster_info: bool = True) -> ExecConfig:
    return ExecConfig.model_validate({"apiVersion": "client.authentication.k8s.io/v1", "command": sys.executable,
                                      "args": [str(directory / "plugin.py")],
                                      "env": [{"name": "PLUGIN_MODE", "value": "test"}],
                                      "provideClusterInfo": provide_cluster_info})


def provider_file(directory: Path, name: str = "token-provider") -> bytes:
    return json.dumps({"providers": [{"name": name, "execConfig": exec_config(directory).model_dump(
        by_alias=True, exclude_none=True)}]}).encode()
