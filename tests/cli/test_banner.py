"""The start-up banner of `federator up` (issue 16, item 9): its commands run as printed, from the directory
the hub was started in (`make run` starts it in the checkout, where `federator` is .venv/bin/federator
unless the venv is on PATH), against a real hub."""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path

import pytest

from federator.controllers.settings import HubSettings, NamespaceSettings
from federator.hub.app import _print_next_steps, example_job_path, federator_command

from ..hub.hubtest_support import ROOT, jobs_url, start_hub


def _commands(text: str, federator: str) -> list[str]:
    return [line.strip() for line in text.splitlines() if line.strip().startswith(federator + " ")]


async def _shell(line: str, *, cwd: Path, kubeconfig: Path, until: str | None = None) -> tuple[int | None, str]:
    """`line` through /bin/sh as a person pastes it; with `until`, stopped once its output shows that."""
    env = {**os.environ, "KUBECONFIG": str(kubeconfig), "PATH": "/usr/bin:/bin"}  # not the venv's bin: as typed
    env.pop("FEDERATOR_DEBUG", None)
    process = await asyncio.create_subprocess_exec("/bin/sh", "-c", line, cwd=str(cwd), env=env,
                                                   stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
                                                   start_new_session=True)
    assert process.stdout is not None
    if until is None:
        out, _ = await asyncio.wait_for(process.communicate(), 60)
        return process.returncode, out.decode()
    seen = ""
    try:
        async with asyncio.timeout(60):
            while until not in seen:
                chunk = await process.stdout.read(4096)
                if not chunk:
                    break
                seen += chunk.decode()
    finally:
        if process.returncode is None:
            os.killpg(process.pid, signal.SIGTERM)  # the shell and the federator it started
        await process.wait()
    return 0 if until in seen else process.returncode, seen


async def test_the_banner_commands_work_as_printed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    # as `federator up` runs: a job's namespace must exist (the banner says to create it)
    settings = HubSettings(state_dir=tmp_path / "hub" / "state", namespaces=NamespaceSettings(mode="lifecycle"))
    async with start_hub(tmp_path / "hub", settings=settings) as hub:
        monkeypatch.chdir(ROOT)  # where `make run` starts the hub
        _print_next_steps(hub.url, {"admin": hub.kubeconfigs["admin"], "researcher": hub.kubeconfigs["researcher"]})
        printed = capsys.readouterr().out
        federator = federator_command()
        assert federator in ("federator", ".venv/bin/federator") or Path(federator.split()[0]).is_absolute(), federator
        submit, watch = _commands(printed, federator)
        assert submit.startswith(f"{federator} submit -f examples/resnet-ps.yaml")
        (create_ns,) = [line.strip().split("#")[0] for line in printed.splitlines()
                        if line.strip().startswith("kubectl create namespace")]
        code, out = await _shell(create_ns, cwd=ROOT, kubeconfig=hub.kubeconfigs["admin"])
        assert code == 0 and "namespace/vision created" in out, out
        code, out = await _shell(submit, cwd=ROOT, kubeconfig=hub.kubeconfigs["admin"])
        assert code == 0 and "trainingjob.federator.dev/resnet-ps created" in out, out
        code, out = await _shell(watch, cwd=ROOT, kubeconfig=hub.kubeconfigs["admin"], until="resnet-ps")
        assert code == 0 and "vision" in out, out
        status, _ = await hub.request("GET", jobs_url("vision", "resnet-ps"))
        assert status == 200


def test_from_elsewhere_the_banner_names_absolute_paths(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    command = federator_command()
    assert Path(command.split()[0]).is_absolute() and Path(command.split()[0]).exists(), command
    example = example_job_path()
    assert example is not None and Path(example).is_absolute() and Path(example).is_file()
