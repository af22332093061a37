"""The `federator` command under hostile use (issue 16, item 9): every command that prints exits quietly
(status 0, nothing on stderr) when its reader goes away (`federator ... | head`), and hostile arguments and
files get one clear line, never Python's words (a traceback, `NoneType`, `surrogates not allowed`, an
exception's class name). Real processes of the CLI against a real hub."""

from __future__ import annotations

import asyncio
import os
import re
import sys
from pathlib import Path

import pytest

from ..hub.hubtest_support import ROOT, jobs_url, start_hub
from ..hub.hubtest_support import job as example_job

pytestmark = pytest.mark.slow

#: what must never reach a user of the CLI
PYTHON_WORDS = re.compile(r"Traceback|NoneType|surrogates not allowed|codec can't|Exception ignored|"
                          r"[A-Z][a-zA-Z]+(Error|Exception)\b|not JSON serializable|object of type|"
                          r"maximum recursion|\{'\w+': ")


async def _run(args: list[str | bytes], *, kubeconfig: Path | None, cwd: Path, closed_stdout: bool = False,
               stdin: bytes | None = None) -> tuple[int, bytes, bytes]:
    """The CLI as a process; with `closed_stdout` its stdout is a pipe whose reader is already gone."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONPATH": str(ROOT)}
    env.pop("FEDERATOR_DEBUG", None)
    env["KUBECONFIG"] = str(kubeconfig) if kubeconfig else str(cwd / "no-such-kubeconfig")
    stdout: int = asyncio.subprocess.PIPE
    write_end = None
    if closed_stdout:
        read_end, write_end = os.pipe()
        os.close(read_end)
        stdout = write_end
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "federator.cli", *args, cwd=str(cwd), env=env, stdout=stdout,
        stderr=asyncio.subprocess.PIPE, stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL)
    if write_end is not None:
        os.close(write_end)
    out, err = await asyncio.wait_for(process.communicate(stdin), 60)
    assert process.returncode is not None
    return process.returncode, out or b"", err


async def _all(calls: list[tuple[list[str | bytes], dict[str, object]]]) -> list[tuple[int, bytes, bytes]]:
    limit = asyncio.Semaphore(4)

    async def one(args: list[str | bytes], kw: dict[str, object]) -> tuple[int, bytes, bytes]:
        async with limit:
            return await _run(args, **kw)  # type: ignore[arg-type]

    return list(await asyncio.gather(*(one(a, k) for a, k in calls)))


def _clean(what: object, err: bytes) -> None:
    text = err.decode("utf-8", "backslashreplace")
    assert not PYTHON_WORDS.search(text), f"{what}: {text}"


#: Runs each command (argv as JSON lines on stdin) with fd 1 a pipe whose reader is gone, as `federator ... |
#: head` leaves it once head exits, each in turn in this one process (the CLI's imports are paid once); prints
#: [exit code, stderr] per command as JSON.
_CLOSED_PIPE_DRIVER = """
import io, json, os, sys, tempfile
from federator.cli import main
read_end, write_end = os.pipe()
os.close(read_end)
report = os.fdopen(os.dup(1), "w")
results = []
for line in sys.stdin:
    os.dup2(write_end, 1)
    sys.stdout = io.TextIOWrapper(io.FileIO(1, "w", closefd=False), write_through=False)
    with tempfile.TemporaryFile() as err:
        os.dup2(err.fileno(), 2)
        sys.stderr = io.TextIOWrapper(io.FileIO(2, "w", closefd=False), write_through=True)
        try:
            code = main(json.loads(line))
        except SystemExit as e:
            code = e.code
        try:
            sys.stdout.flush()
        except BrokenPipeError:
            code = "flush failed"
        err.seek(0)
        results.append([code, err.read().decode("utf-8", "backslashreplace")])
print(json.dumps(results), file=report)
"""


async def test_every_printing_command_exits_quietly_into_a_closed_pipe(tmp_path: Path) -> None:
    import json

    async with start_hub(tmp_path / "hub") as hub:
        status, _ = await hub.request("POST", jobs_url("vision"), body=example_job("vision", "resnet-ps"))
        assert status == 201
        state = tmp_path / "state"
        state.mkdir()
        (state / "admin.kubeconfig").write_text(hub.kubeconfigs["admin"].read_text())
        commands = [
            ["get", "jobs", "-A"], ["get", "jobs", "-A", "-o", "yaml", "-w"], ["get", "jobs", "-A", "-o", "wide"],
            ["describe", "job", "resnet-ps", "-n", "vision"], ["get", "clusters", "-o", "json"],
            ["cluster", "list"], ["drill", "list"], ["version"], ["kubeconfig", "--state-dir", str(state)],
            ["--help"], ["up", "--help"],
        ]
        env = {**os.environ, "PYTHONPATH": str(ROOT), "KUBECONFIG": str(hub.kubeconfigs["admin"])}
        env.pop("FEDERATOR_DEBUG", None)
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-c", _CLOSED_PIPE_DRIVER, cwd=str(tmp_path), env=env, stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        out, err = await asyncio.wait_for(
            process.communicate("".join(json.dumps(c) + "\n" for c in commands).encode()), 90)
        assert process.returncode == 0, err.decode()
        results = json.loads(out)
        for command, (code, said) in zip(commands, results, strict=True):
            assert code == 0, (command, said)
            _clean(command, said.encode())
            assert "Broken pipe" not in said and "BrokenPipe" not in said, (command, said)


def _main(capsys: pytest.CaptureFixture[bytes], monkeypatch: pytest.MonkeyPatch, cwd: Path,
          *args: str) -> tuple[int, str]:
    """The CLI in this process (what fails before any request needs no process of its own): exit code, stderr.
    Arguments that are not UTF-8 come as the OS hands them to Python (lone surrogates, os.fsdecode)."""
    from federator.cli import main

    monkeypatch.chdir(cwd)
    monkeypatch.setenv("KUBECONFIG", str(cwd / "no-such-kubeconfig"))
    monkeypatch.delenv("FEDERATOR_DEBUG", raising=False)
    try:
        code = main(list(args))
    except SystemExit as e:  # argparse's usage errors
        code = int(e.code or 0)
    captured = capsys.readouterr()
    # bytes that are not UTF-8 come back as they went out (the CLI writes them through: surrogateescape)
    return code, captured.err.decode("utf-8", "surrogateescape")


BAD = os.fsdecode(b"\xff\xfe")


@pytest.mark.parametrize("args", [
    ["get", "jobs", BAD], ["get", "jobs", "-n", "team" + BAD], ["get", "jobs", "-l", "a=" + BAD],
    ["describe", "job", BAD], ["delete", "job", "x", BAD], ["logs", BAD], ["cluster", "cordon", BAD],
    ["cluster", "drain", BAD], ["drill", "show", BAD], ["submit", "-f", "-", "-n", BAD],
])
def test_arguments_that_are_not_utf8_get_one_line(args: list[str], capsysbinary: pytest.CaptureFixture[bytes],
                                                   monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    code, err = _main(capsysbinary, monkeypatch, tmp_path, *args)
    lines = err.splitlines()
    assert code == 2 and len(lines) == 1, lines
    assert lines[0].startswith("error: argument ") and lines[0].endswith("is not UTF-8 text"), lines
    assert "\\xff\\xfe" in lines[0]  # the bytes as they came, readable
    _clean(args, err.encode("utf-8", "surrogateescape"))


@pytest.mark.parametrize("value", ["nan", "inf", "1e309", "-1", "0", "soon", "9" * 400])
def test_a_request_timeout_that_is_not_a_number_of_seconds_gets_one_line(
        value: str, capsysbinary: pytest.CaptureFixture[bytes], monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    code, err = _main(capsysbinary, monkeypatch, tmp_path, "get", "jobs", "--request-timeout", value)
    assert code == 2 and err.splitlines()[-1].startswith("federator get: error: argument --request-timeout: "), err
    _clean(value, err.encode())


def test_a_file_name_that_is_not_utf8_is_still_a_file_name(capsysbinary: pytest.CaptureFixture[bytes],
                                                          monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    name = os.fsencode(tmp_path) + b"/job-\xff.yaml"
    with open(name, "w", encoding="utf-8") as f:
        f.write("true\n")
    code, err = _main(capsysbinary, monkeypatch, tmp_path, "submit", "-f", os.fsdecode(name))
    # read (not refused as a name): what is wrong is its content, said with the name as it came
    assert code == 2 and err.encode("utf-8", "surrogateescape") == \
        b"error: " + name + b": document 1 is a boolean, not an object\n", err
    code, err = _main(capsysbinary, monkeypatch, tmp_path, "submit", "-f", os.fsdecode(name + b"-missing"))
    assert code == 2 and err.encode("utf-8", "surrogateescape").endswith(b"job-\xff.yaml-missing: no such file\n")


HOSTILE_FILES = {
    "deep-list.yaml": "[" * 800 + "]" * 800,  # deeper than the parser gets within Python's recursion limit
    "deep-map.yaml": "a: " + "{b: " * 800 + "1" + "}" * 800,
    "date.yaml": "kind: TrainingJob\napiVersion: federator.dev/v1alpha1\nmetadata: {name: x}\nwhen: 2024-01-01\n",
    "surrogate.yaml": 'kind: TrainingJob\nmetadata: {name: "\\ud800"}\n',
    "no-kind.yaml": "a: &a [1, 2]\nb: *a\n",
    "scalar.yaml": "true\n",
    "null.yaml": "null\n",
    "tabs.yaml": "a:\n\t- b\n",
    "binary.yaml": "\udcff\udcfe\x00\x01garbage",
}


@pytest.mark.parametrize("name", sorted(HOSTILE_FILES))
def test_hostile_files_get_one_clear_line(name: str, capsysbinary: pytest.CaptureFixture[bytes],
                                          monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    (tmp_path / name).write_bytes(HOSTILE_FILES[name].encode("utf-8", "surrogateescape"))
    for command in (["submit", "-f", name], ["cluster", "add", "-f", name]):
        code, err = _main(capsysbinary, monkeypatch, tmp_path, *command)
        lines = err.splitlines()
        assert code == 2 and len(lines) == 1 and lines[0].startswith("error: "), (command, lines)
        _clean(command, err.encode("utf-8", "surrogateescape"))


_HEAD = "apiVersion: v1\nkind: Config\ncurrent-context: c\ncontexts: [{name: c, context: {cluster: k, user: u}}]\n"
_USER = "users: [{name: u, user: {token: abc}}]\n"
HOSTILE_KUBECONFIGS = {
    "list": "[1, 2]\n",
    "nulls": "apiVersion: v1\nkind: Config\ncurrent-context: c\ncontexts: [{name: c, context: null}]\n",
    "bad-ca": _HEAD + "clusters: [{name: k, cluster: {server: 'https://127.0.0.1:1', "
                      "certificate-authority-data: '!!!notbase64'}}]\n" + _USER,
    "bad-port": _HEAD + "clusters: [{name: k, cluster: {server: 'https://127.0.0.1:99999'}}]\n" + _USER,
    "no-server": _HEAD + "clusters: [{name: k, cluster: {server: 'not a url'}}]\n" + _USER,
    "deep": "a: " + "[" * 800 + "]" * 800 + "\n",
    "binary": "\udcff\udcfe\x00garbage",
    "null-answer": _HEAD + "clusters: [{name: k, cluster: {server: 'http://127.0.0.1:PORT'}}]\n" + _USER,
}


@pytest.mark.parametrize("name", sorted(HOSTILE_KUBECONFIGS))
def test_hostile_kubeconfigs_and_answers_get_one_clear_line(name: str, capsysbinary: pytest.CaptureFixture[bytes],
                                                            monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    text = HOSTILE_KUBECONFIGS[name]
    server = None
    if "PORT" in text:
        server = _NullServer()  # a "hub" that answers JSON null to everything
        text = text.replace("PORT", str(server.port))
    (tmp_path / name).write_bytes(text.encode("utf-8", "surrogateescape"))
    try:
        code, err = _main(capsysbinary, monkeypatch, tmp_path, "get", "jobs", "--kubeconfig", name)
    finally:
        if server is not None:
            server.close()
    lines = err.splitlines()
    assert code in (1, 2) and len(lines) == 1 and lines[0].startswith("error: "), lines
    _clean(name, err.encode("utf-8", "surrogateescape"))


class _NullServer:
    """An HTTP server on loopback (its own thread) that answers every request with the JSON `null`."""

    def __init__(self) -> None:
        import http.server
        import threading

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", "4")
                self.end_headers()
                self.wfile.write(b"null")

            def log_message(self, *args: object) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


async def test_hostile_registrations_get_one_clear_line(tmp_path: Path) -> None:
    # `up` sets up logging: it runs as its own process, as a user starts it
    (tmp_path / "registrations").mkdir()
    (tmp_path / "registrations" / "a.yaml").write_text("a: " + "[" * 800 + "]" * 800 + "\n")
    (tmp_path / "registrations" / "b.yaml").write_bytes(b"\xff\xfe\x00")
    calls: list[tuple[list[str | bytes], dict[str, object]]] = [
        (["up", "--no-sim", "--clusters", str(tmp_path / "registrations"), "--listen", "127.0.0.1:0",
          "--state-dir", str(tmp_path / "state")], {"kubeconfig": None, "cwd": tmp_path}),
    ]
    results = await _all(calls)
    for (args, _), (code, out, err) in zip(calls, results, strict=True):
        lines = [line for line in err.decode("utf-8", "backslashreplace").splitlines() if not line.startswith("{")]
        assert code == 2 and len(lines) == 1 and lines[0].startswith("error: "), (args, lines)
        _clean(args, "\n".join(lines).encode())
