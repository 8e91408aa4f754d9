"""The Remote shape (DESIGN.md): how a command, a file or a signal reaches a node.

`run(argv)` -> RemoteResult(exit, out, err); `put(path, data)`; `get(path)`; daemons
started with a pid file and signalled by it. Arguments are argv lists; a remote that has
to go through a shell (docker exec sh -c, SSH) joins them with shlex.quote, never raw.
Implementations: LocalRemote (this machine; nodes that are processes) and DockerRemote
(`docker exec`) here, NetnsRemote in clusters/netns.py, and SshRemote (paramiko) in
clusters/ssh_remote.py.
"""

from __future__ import annotations

import os
import posixpath
import shlex
import signal
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from kafkaesque_harness.clusters.waiting import WaitTimeout, wait_until


@dataclass
class RemoteResult:
    exit: int
    out: str
    err: str

    @property
    def ok(self) -> bool:
        return self.exit == 0


class RemoteError(RuntimeError):
    """A command that had to succeed on a node did not; the message names node, command and output."""


class Remote(Protocol):
    name: str

    def run(self, argv: list[str], timeout: float = 30.0, check: bool = False) -> RemoteResult: ...

    def put(self, path: str, data: bytes) -> None: ...

    def get(self, path: str) -> bytes: ...

    def start_daemon(self, argv: list[str], pidfile: str, logfile: str, env: dict[str, str] | None = None) -> int: ...

    def signal_daemon(self, pidfile: str, sig: int) -> bool: ...

    def daemon_alive(self, pidfile: str) -> bool: ...


def shell_join(argv: list[str]) -> str:
    return " ".join(shlex.quote(a) for a in argv)


class LocalRemote:
    """Commands on this machine (the local backend's nodes are processes here)."""

    def __init__(self, name: str = "local", env: dict[str, str] | None = None):
        self.name = name
        self.env = env or {}
        self._children: dict[int, subprocess.Popen] = {}  # kept so exits are reaped (no zombies after kill -9)

    def run(self, argv: list[str], timeout: float = 30.0, check: bool = False) -> RemoteResult:
        try:
            p = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env={**os.environ, **self.env})
            r = RemoteResult(p.returncode, p.stdout, p.stderr)
        except subprocess.TimeoutExpired:
            r = RemoteResult(124, "", f"timed out after {timeout}s")
        except FileNotFoundError as e:
            r = RemoteResult(127, "", str(e))
        if check and not r.ok:
            raise RemoteError(f"{self.name}: `{shell_join(argv)}` exited {r.exit}: {r.err.strip()[-300:]}")
        return r

    def put(self, path: str, data: bytes) -> None:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        tmp = f"{path}.tmp{os.getpid()}"
        with open(tmp, "wb") as f:
            f.write(data)
        os.replace(tmp, path)

    def get(self, path: str) -> bytes:
        with open(path, "rb") as f:
            return f.read()

    def start_daemon(self, argv: list[str], pidfile: str, logfile: str, env: dict[str, str] | None = None) -> int:
        Path(logfile).parent.mkdir(parents=True, exist_ok=True)
        with open(logfile, "ab") as log:
            p = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                 env={**os.environ, **self.env, **(env or {})}, start_new_session=True)
        self.put(pidfile, f"{p.pid}\n".encode())
        self._children[p.pid] = p
        return p.pid

    def _pid(self, pidfile: str) -> int | None:
        try:
            return int(Path(pidfile).read_text().strip())
        except (OSError, ValueError):
            return None

    def signal_daemon(self, pidfile: str, sig: int) -> bool:
        pid = self._pid(pidfile)
        if pid is None:
            return False
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            return False
        if sig == signal.SIGKILL:
            self._reap(pid)
        return True

    def _reap(self, pid: int, timeout: float = 10.0) -> None:
        child = self._children.pop(pid, None)
        if child is not None:
            try:
                child.wait(timeout)
            except subprocess.TimeoutExpired:
                pass

    def wait_daemon(self, pidfile: str, timeout: float) -> bool:
        """Wait for the daemon to exit; True if it did."""
        pid = self._pid(pidfile)
        if pid is None:
            return True
        child = self._children.get(pid)
        if child is not None:
            try:
                child.wait(timeout)
                self._children.pop(pid, None)
                return True
            except subprocess.TimeoutExpired:
                return False
        return not self.daemon_alive(pidfile)

    def daemon_alive(self, pidfile: str) -> bool:
        pid = self._pid(pidfile)
        if pid is None:
            return False
        child = self._children.get(pid)
        if child is not None:
            return child.poll() is None
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        return _state(pid) != "Z"


def _state(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return "?"


class ShellDaemons:
    """Daemons with pid files through a POSIX shell on the node: what DockerRemote and SshRemote share.

    Needs only `run`. The daemon is started with nohup and no inherited pipes, so it outlives the
    exec or SSH channel that started it; the node's init adopts and reaps it.
    """

    def start_daemon(self, argv: list[str], pidfile: str, logfile: str, env: dict[str, str] | None = None) -> int:
        envs = " ".join(shlex.quote(f"{k}={v}") for k, v in (env or {}).items())
        script = (f"mkdir -p {shlex.quote(posixpath.dirname(pidfile))} {shlex.quote(posixpath.dirname(logfile))}; "
                  f"nohup env {envs} {shell_join(argv)} >> {shlex.quote(logfile)} 2>&1 < /dev/null & "
                  f"echo $! > {shlex.quote(pidfile)}; cat {shlex.quote(pidfile)}")
        r = self.run(["sh", "-c", script], check=True)
        return int(r.out.strip() or -1)

    def signal_daemon(self, pidfile: str, sig: int) -> bool:
        q = shlex.quote(pidfile)
        return self.run(["sh", "-c", f"test -s {q} && kill -{int(sig)} $(cat {q})"], timeout=10).ok

    def daemon_alive(self, pidfile: str) -> bool:
        q = shlex.quote(pidfile)
        return self.run(["sh", "-c", f"test -s {q} && p=$(cat {q}) && kill -0 $p 2>/dev/null && "
                                     f"! grep -q '^State:.*Z' /proc/$p/status"], timeout=10).ok

    def wait_daemon(self, pidfile: str, timeout: float) -> bool:
        """Wait for the daemon to exit; True if it did."""
        try:
            return wait_until(lambda: not self.daemon_alive(pidfile), timeout, 0.1, f"the exit of {pidfile}'s daemon")
        except WaitTimeout:
            return False


class DockerRemote(ShellDaemons):
    """Commands in a container through the Docker Engine API (`docker exec`), files by tar archives.

    Daemons run under the container's init (docker run --init), which reaps them, so a
    process killed with SIGKILL does not linger as a zombie.
    """

    def __init__(self, container, name: str | None = None):
        self.container = container
        self.name = name or container.name

    def run(self, argv: list[str], timeout: float = 30.0, check: bool = False) -> RemoteResult:
        # exec_run has no timeout of its own: `timeout` inside the container bounds the command.
        full = ["timeout", "-s", "KILL", str(int(max(timeout, 1)))] + argv
        try:
            code, (out, err) = self.container.exec_run(full, demux=True)
        except Exception as e:  # noqa: BLE001 - docker.errors.APIError and connection errors
            r = RemoteResult(125, "", f"docker exec failed: {e}")
        else:
            r = RemoteResult(code if code is not None else 125, (out or b"").decode(errors="replace"),
                             (err or b"").decode(errors="replace"))
        if check and not r.ok:
            raise RemoteError(f"{self.name}: `{shell_join(argv)}` exited {r.exit}: {r.err.strip()[-300:]}")
        return r

    def put(self, path: str, data: bytes) -> None:
        import io
        import tarfile

        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w") as tar:
            info = tarfile.TarInfo(os.path.basename(path))
            info.size = len(data)
            info.mode = 0o644
            tar.addfile(info, io.BytesIO(data))
        self.run(["mkdir", "-p", os.path.dirname(path) or "/"], check=True)
        self.container.put_archive(os.path.dirname(path) or "/", buf.getvalue())

    def get(self, path: str) -> bytes:
        # `cat` through exec, not the archive API: the engine's archive reads the container's
        # root file system and cannot see inside a FUSE mount (the lossy data dir).
        code, out = self.container.exec_run(["cat", path])
        if code != 0:
            raise RemoteError(f"{self.name}: cannot read {path}: {out.decode(errors='replace').strip()}")
        return out
