"""The SSH Remote (DESIGN.md "shapes"): commands, files and daemons on a node reached over SSH (paramiko).

Same verbs and semantics as LocalRemote and DockerRemote in clusters/remote.py: `run(argv)`
joins the argv with shlex.quote and runs it through the login user's shell on the node
(so `$(...)`, quotes and spaces arrive literally); `put`/`get` use SFTP; a daemon is
started with `nohup ... &` and its pid written to a pid file, and signalled and probed by
that pid file, exactly as in a container.

Host keys are verified against a known_hosts file (~/.ssh/known_hosts unless told):
an unknown host is refused by default; `host_key_policy="accept-new"` trusts a host seen
for the first time and appends its key to that file, so from then on it is pinned and a
changed key is refused, as OpenSSH's StrictHostKeyChecking=accept-new does.

With `sudo=True` every command runs as `sudo -n <argv>` (never prompting: a password
prompt would hang a test), and files go through the login user's /tmp and `sudo -n mv`/
`cat`, because SFTP itself runs with the login user's rights.
"""

from __future__ import annotations

import os
import posixpath
import select
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from kafkaesque_harness.clusters.remote import RemoteError, RemoteResult, ShellDaemons, shell_join
from kafkaesque_harness.history.extras import need

paramiko = need("paramiko", "ssh", "a cluster reached over SSH (--cluster ssh:FILE, or transport ssh)")

HOST_KEY_POLICIES = ("strict", "accept-new")
DEFAULT_KNOWN_HOSTS = "~/.ssh/known_hosts"


@dataclass
class SshTarget:
    """How to reach one node: address, login, key and whether commands need sudo."""

    host: str
    port: int = 22
    user: str = "root"
    key: str = ""                       # private key file; empty: paramiko's defaults and the agent
    sudo: bool = False
    known_hosts: str = DEFAULT_KNOWN_HOSTS
    host_key_policy: str = "strict"     # strict | accept-new
    connect_timeout: float = 10.0


class _AcceptNewPolicy(paramiko.MissingHostKeyPolicy):
    """Trust a host seen for the first time and append its key to the known_hosts file (pinning it).
    paramiko still refuses a host whose key differs from a known one (BadHostKeyException)."""

    def __init__(self, known_hosts: Path, lock: threading.Lock):
        self.known_hosts = known_hosts
        self.lock = lock

    def missing_host_key(self, client, hostname, key) -> None:
        line = f"{hostname} {key.get_name()} {key.get_base64()}\n"
        with self.lock:
            self.known_hosts.parent.mkdir(parents=True, exist_ok=True)
            with open(self.known_hosts, "a") as f:
                f.write(line)
        client.get_host_keys().add(hostname, key.get_name(), key)


_known_hosts_lock = threading.Lock()  # nodes connect in parallel and may append to the same file


class SshRemote(ShellDaemons):
    """One node over SSH. The connection is opened on first use and reopened if it dropped."""

    def __init__(self, target: SshTarget, name: str | None = None):
        if target.host_key_policy not in HOST_KEY_POLICIES:
            raise ValueError(f"host_key_policy {target.host_key_policy!r}; valid: {', '.join(HOST_KEY_POLICIES)}")
        self.target = target
        self.name = name or target.host
        self._client: paramiko.SSHClient | None = None
        self._lock = threading.Lock()

    # --- the connection -------------------------------------------------------------------------------
    def where(self) -> str:
        t = self.target
        return f"{t.user}@{t.host}:{t.port}"

    def connect(self) -> paramiko.SSHClient:
        """The open connection, or a RemoteError in one sentence naming the cause and the fix."""
        with self._lock:
            if self._client is not None:
                transport = self._client.get_transport()
                if transport is not None and transport.is_active():
                    return self._client
                self._client.close()
                self._client = None
            self._client = self._open()
            return self._client

    def _open(self) -> paramiko.SSHClient:
        t = self.target
        known = Path(os.path.expanduser(t.known_hosts))
        client = paramiko.SSHClient()
        if known.exists():
            client.load_host_keys(str(known))
        client.set_missing_host_key_policy(_AcceptNewPolicy(known, _known_hosts_lock) if t.host_key_policy == "accept-new"
                                           else paramiko.RejectPolicy())
        key = os.path.expanduser(t.key) if t.key else None
        try:
            client.connect(t.host, port=t.port, username=t.user, key_filename=key, timeout=t.connect_timeout,
                           banner_timeout=t.connect_timeout, auth_timeout=t.connect_timeout,
                           allow_agent=key is None, look_for_keys=key is None)
        except paramiko.BadHostKeyException:
            client.close()
            raise RemoteError(f"{self.name}: the host key of {t.host}:{t.port} does not match the one in {known}; "
                              "if the node was reinstalled, remove its old line from that file "
                              f"(ssh-keygen -R '[{t.host}]:{t.port}' -f {known}), else do not trust it.") from None
        except paramiko.SSHException as e:
            client.close()
            if "not found in known_hosts" in str(e):
                raise RemoteError(f"{self.name}: {t.host}:{t.port} is not in {known}, so its host key cannot be "
                                  "verified; add it (ssh-keyscan, or connect once with ssh) or set "
                                  "host_key_policy = \"accept-new\".") from None
            if isinstance(e, paramiko.AuthenticationException):
                raise RemoteError(f"{self.name}: {t.user}@{t.host}:{t.port} refused the key "
                                  f"{key or '(default keys)'}; install its public key in that user's "
                                  "~/.ssh/authorized_keys or name the right key.") from None
            raise RemoteError(f"{self.name}: SSH to {self.where()} failed ({e}); check that sshd runs there.") from None
        except FileNotFoundError:
            client.close()
            raise RemoteError(f"{self.name}: the key file {key} does not exist; fix the node's key path.") from None
        except (TimeoutError, OSError) as e:
            client.close()
            why = getattr(e, "strerror", None) or e  # paramiko's NoValidConnectionsError prints "[Errno None] ..."
            raise RemoteError(f"{self.name}: cannot reach {t.host}:{t.port} ({why}); check the address, the port "
                              "and that sshd runs there.") from None
        return client

    def close(self) -> None:
        with self._lock:
            if self._client is not None:
                self._client.close()
                self._client = None

    # --- commands -------------------------------------------------------------------------------------
    def _command(self, argv: list[str]) -> str:
        return shell_join((["sudo", "-n"] if self.target.sudo else []) + argv)

    def run(self, argv: list[str], timeout: float = 30.0, check: bool = False) -> RemoteResult:
        try:
            r = self._exec(self._command(argv), timeout)
        except RemoteError as e:
            r = RemoteResult(255, "", str(e))  # like ssh(1): 255 when the connection itself failed
        except (paramiko.SSHException, OSError) as e:
            r = RemoteResult(255, "", f"{self.name}: SSH channel failed: {e}")
        if check and not r.ok:
            raise RemoteError(f"{self.name}: `{shell_join(argv)}` exited {r.exit}: {r.err.strip()[-300:]}")
        return r

    def _exec(self, command: str, timeout: float) -> RemoteResult:
        transport = self.connect().get_transport()
        chan = transport.open_session(timeout=self.target.connect_timeout)
        try:
            chan.exec_command(command)
            out, err = bytearray(), bytearray()
            deadline = time.monotonic() + timeout
            while True:
                while chan.recv_ready():
                    out += chan.recv(65536)
                while chan.recv_stderr_ready():
                    err += chan.recv_stderr(65536)
                # The transport delivers data before the exit status, so once the status is
                # here and both buffers are empty, everything has been read.
                if chan.exit_status_ready() and not chan.recv_ready() and not chan.recv_stderr_ready():
                    code = chan.recv_exit_status()
                    if code == -1:  # paramiko's word for "closed without an exit status"
                        return RemoteResult(255, out.decode(errors="replace"),
                                            f"{self.name}: the SSH connection to {self.where()} dropped before "
                                            "the command finished")
                    break
                left = deadline - time.monotonic()
                if left <= 0:
                    return RemoteResult(124, out.decode(errors="replace"), f"timed out after {timeout}s")
                select.select([chan], [], [], min(left, 1.0))
            return RemoteResult(code, out.decode(errors="replace"), err.decode(errors="replace"))
        finally:
            chan.close()

    # --- files ----------------------------------------------------------------------------------------
    def put(self, path: str, data: bytes) -> None:
        parent = posixpath.dirname(path) or "/"
        self.run(["mkdir", "-p", parent], check=True)
        # Written beside, then renamed: a reader never sees half a file (the clock control file).
        tmp = (f"/tmp/.kafkaesque-put-{os.getpid()}-{threading.get_ident()}" if self.target.sudo
               else f"{path}.tmp{os.getpid()}")
        try:
            with self.connect().open_sftp() as sftp:
                with sftp.open(tmp, "wb") as f:
                    f.write(data)
        except (OSError, paramiko.SSHException) as e:
            raise RemoteError(f"{self.name}: cannot write {path} over SFTP ({e}).") from None
        self.run(["mv", "-f", tmp, path], check=True)

    def get(self, path: str) -> bytes:
        if self.target.sudo:
            r = self._exec_bytes(self._command(["cat", path]))
            return r
        try:
            with self.connect().open_sftp() as sftp:
                with sftp.open(path, "rb") as f:
                    return f.read()
        except (OSError, paramiko.SSHException) as e:
            raise RemoteError(f"{self.name}: cannot read {path} over SFTP ({e}).") from None

    def _exec_bytes(self, command: str) -> bytes:
        """A command's stdout as bytes (binary files through `sudo -n cat`)."""
        _, stdout, stderr = self.connect().exec_command(command, timeout=60)
        data = stdout.read()
        if stdout.channel.recv_exit_status() != 0:
            raise RemoteError(f"{self.name}: `{command}` failed: {stderr.read().decode(errors='replace').strip()}")
        return data
