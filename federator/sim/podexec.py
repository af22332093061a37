"""The first code a process-runtime container runs (federator/sim/processes.py starts it as a script).

It runs inside the container's own namespaces (`unshare --mount --uts --map-root-user`, so nothing here
touches the machine's mounts or hostname) and, from one JSON spec file, in this order:

1. sets the hostname (the pod's `spec.hostname`, else its name);
2. mounts what the pod mounts, in the order given: `bind` (a directory or file of the runtime's root)
   and `tmpfs` (a private tmpfs: /dev/shm); /etc/hosts is a bind of the pod's hosts file. A mountPath
   that does not exist is made without writing to the machine's filesystems: its nearest existing
   ancestor is shadowed by a private tmpfs that holds a bind of each of its entries (so nothing is
   hidden) and the missing directories; when that ancestor is `/`, the tmpfs becomes the container's
   new root (a bind of every top-level entry of `/`, then chroot), so /data or /workspace work too;
3. changes to the working directory and executes the command with the container's environment.

Whatever fails before the command runs (a mount, the working directory, a command that is not found)
is written as one line to the status descriptor the runtime passed (`--status-fd`), which is closed
on a successful exec: an empty status means the container started. It imports nothing of federator
(it runs before any of it could be found) and only the standard library.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import json
import os
import socket
import sys
from typing import Any

MS_RDONLY = 1
MS_REMOUNT = 32
MS_BIND = 4096
MS_REC = 16384


class SetupError(Exception):
    """A step before the command runs failed; the message is the container's error."""


def _libc() -> Any:
    return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)


def _mount(source: str, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    libc = _libc()
    rc = libc.mount(source.encode(), target.encode(), fstype.encode() if fstype else None, flags,
                    data.encode() if data else None)
    if rc != 0:
        err = ctypes.get_errno()
        raise SetupError(f"mount {source} on {target}: {os.strerror(err)}")


class _View:
    """The container's view of the filesystem while it is set up: paths the runtime made on its own
    tmpfs (writable without touching the machine), and the new root when `/` itself had to be shadowed."""

    def __init__(self, scratch: str) -> None:
        self.scratch = scratch
        self.root = ""  # "" while the container sees the machine's root
        self.ours: list[str] = []
        self.count = 0

    def path(self, target: str) -> str:
        return self.root + target if self.root else target

    def _stage(self) -> str:
        self.count += 1
        stage = os.path.join(self.scratch, str(self.count))
        os.makedirs(stage, exist_ok=True)
        _mount("tmpfs", stage, "tmpfs", 0, "mode=755")
        return stage

    def _mirror(self, source: str, stage: str) -> None:
        """Every entry of directory `source` bound (or linked) into `stage`, as it is."""
        for entry in os.scandir(source):
            placed = os.path.join(stage, entry.name)
            if entry.is_symlink():
                os.symlink(os.readlink(entry.path), placed)
            elif entry.is_dir():
                os.mkdir(placed)
                _mount(entry.path, placed, None, MS_BIND | MS_REC)
            else:
                with open(placed, "a"):
                    pass
                _mount(entry.path, placed, None, MS_BIND | MS_REC)

    def shadow(self, directory: str) -> None:
        """Make `directory` writable to us alone: a tmpfs holding binds of everything it had, in its place."""
        stage = self._stage()
        self._mirror(directory, stage)
        if directory == "/":
            self.root = stage
            self.ours.append(stage)
        else:
            _mount(stage, directory, None, MS_BIND | MS_REC)
            self.ours.append(directory)

    def _is_ours(self, path: str) -> bool:
        return any(path == d or path.startswith(d.rstrip("/") + "/") for d in self.ours)

    def make(self, target: str, *, is_file: bool) -> str:
        """`target` (a container path) exists, made without writing to the machine's filesystems; its
        path in the current view."""
        if os.path.lexists(self.path(target)):
            return self.path(target)
        ancestor = os.path.dirname(target.rstrip("/")) or "/"
        while not os.path.lexists(self.path(ancestor)):
            ancestor = os.path.dirname(ancestor) or "/"
        if not self._is_ours(self.path(ancestor)):
            if not os.path.isdir(self.path(ancestor)):
                raise SetupError(f"mountPath {target}: {ancestor} is not a directory")
            self.shadow(self.path(ancestor))
        where = self.path(target)  # after a shadow of `/`, inside the new root
        if not self._is_ours(where):
            raise SetupError(f"mountPath {target}: would be made on the machine's filesystem")  # pragma: no cover
        os.makedirs(os.path.dirname(where.rstrip("/")), exist_ok=True)
        if is_file:
            with open(where, "a"):
                pass
        else:
            os.makedirs(where, exist_ok=True)
        return where


def _setup(spec: dict[str, Any]) -> None:
    hostname = spec.get("hostname")
    if hostname:
        try:
            socket.sethostname(hostname)
        except OSError as e:
            raise SetupError(f"sethostname {hostname}: {e.strerror}") from None
    view = _View(spec["scratch"])
    for m in spec.get("mounts") or ():
        target, kind = m["target"], m["kind"]
        if kind == "tmpfs":
            where = view.make(target, is_file=False)
            _mount("tmpfs", where, "tmpfs", 0, m.get("options") or "mode=1777")
            continue
        source = m["source"]
        where = view.make(target, is_file=not os.path.isdir(source))
        _mount(source, where, None, MS_BIND | MS_REC)
        if m.get("readOnly"):
            _mount(source, where, None, MS_BIND | MS_REMOUNT | MS_RDONLY)
    if view.root:
        try:
            os.chroot(view.root)
        except OSError as e:
            raise SetupError(f"chroot into the container's root: {e.strerror}") from None
    workdir = spec.get("workingDir") or "/"
    try:
        os.chdir(workdir)
    except OSError as e:
        raise SetupError(f"working directory {workdir}: {e.strerror}") from None


def main(argv: list[str]) -> int:
    if len(argv) != 4 or argv[1] != "--status-fd":
        sys.stderr.write("usage: podexec.py --status-fd FD SPEC.json\n")
        return 2
    status_fd = int(argv[2])
    os.set_inheritable(status_fd, False)  # closed by a successful exec
    try:
        with open(argv[3], encoding="utf-8") as f:
            spec = json.load(f)
        _setup(spec)
        command = [str(a) for a in spec["argv"]]
        env = {str(k): str(v) for k, v in spec["env"].items()}
        try:
            os.execvpe(command[0], command, env)
        except FileNotFoundError:
            raise SetupError(f'exec: "{command[0]}": executable file not found in $PATH') from None
        except PermissionError:
            raise SetupError(f'exec: "{command[0]}": permission denied') from None
        except OSError as e:
            raise SetupError(f'exec: "{command[0]}": {e.strerror}') from None
    except SetupError as e:
        os.write(status_fd, str(e).encode()[:4000])
        return 128
    except Exception as e:  # noqa: BLE001 - whatever broke, the runtime must hear it, not hang
        os.write(status_fd, f"container setup failed: {type(e).__name__}: {e}".encode()[:4000])
        return 128
    return 0  # pragma: no cover - execvpe does not return


if __name__ == "__main__":
    sys.exit(main(sys.argv))
