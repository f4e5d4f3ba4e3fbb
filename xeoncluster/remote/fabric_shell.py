"""SSH to nodes through Fabric (remote/shell.py's NodeShell), with pinned host keys and parallel fan-out."""
from __future__ import annotations

import contextlib
import io
import logging
import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import paramiko
from fabric import Connection, ThreadingGroup
from fabric.exceptions import GroupException

from xeoncluster.core.errors import RemoteError
from xeoncluster.providers.base import Node
from xeoncluster.remote.shell import CommandResult, RemoteFile, SshIdentity, port_open

# Between login attempts on a node that is not ready yet.
LOGIN_RETRY_SECONDS = 1.0
# paramiko logs a dropped transport ("Socket exception: Connection reset by peer") from its own
# thread; with no handler, Python's last-resort handler prints it on the user's terminal although
# the failure reaches us as an exception where it matters (a node restarting during a bake is expected).
logging.getLogger("paramiko").addHandler(logging.NullHandler())
# A node that vanishes mid-command (a reclaimed instance, a master that powered off after a handover)
# sends no reset: without these, a read waits for the kernel's retransmissions to give up (about 15
# minutes). An SSH keepalive every KEEPALIVE_SECONDS makes unacknowledged data, and the connection ends
# once data stays unacknowledged for DEAD_PEER_SECONDS.
KEEPALIVE_SECONDS = 10
DEAD_PEER_SECONDS = 45


class LineSink(io.TextIOBase):
    """A stream Fabric writes into; hands complete lines, labelled by node, to a callback."""

    def __init__(self, node: str, sink: Callable[[str, str], None]) -> None:
        self.node = node
        self.sink = sink
        self.buffer = ""
        self.lock = threading.Lock()

    def write(self, text: str) -> int:
        with self.lock:
            self.buffer += text
            *lines, self.buffer = self.buffer.split("\n")
        for line in lines:
            self.sink(self.node, line)
        return len(text)

    def flush(self) -> None:
        """Nothing: invoke flushes after every read, and a line that arrives in two reads stays one."""

    def finish(self) -> None:
        """The stream ended: a last line without a newline is a line too."""
        with self.lock:
            rest, self.buffer = self.buffer, ""
        if rest:
            self.sink(self.node, rest)


class FabricShell:
    """Keeps one SSH connection per node for its lifetime; every command and file rides on it."""

    def __init__(self, identity: SshIdentity) -> None:
        self.identity = identity
        self._conns: dict[tuple[str, str], Connection] = {}
        self._lock = threading.Lock()
        # One SFTP session per connection, and paramiko's is not thread-safe: two threads' requests on it
        # (the run's storage fetching a checkpoint while the loop rewrites the master's files) read each
        # other's replies and both wait for ever.
        self._sftp_locks: dict[tuple[str, str], threading.Lock] = {}

    def close(self) -> None:
        with self._lock:
            conns, self._conns = list(self._conns.values()), {}
        for conn in conns:
            conn.close()

    def __enter__(self) -> FabricShell:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def connection(self, node: Node) -> Connection:
        key = (node.name, node.ssh_host)
        with self._lock:
            conn = self._conns.get(key)
            if conn is None:
                conn = self._conns[key] = self._new_connection(node)
        return conn

    def _sftp(self, node: Node) -> threading.Lock:
        with self._lock:
            return self._sftp_locks.setdefault((node.name, node.ssh_host), threading.Lock())

    def _drop(self, node: Node) -> None:
        with self._lock:
            conn = self._conns.pop((node.name, node.ssh_host), None)
        if conn is not None:
            conn.close()

    def _new_connection(self, node: Node) -> Connection:
        conn = _WatchedConnection(
            host=node.ssh_host,
            user=self.identity.user,
            port=self.identity.port,
            connect_timeout=15,
            connect_kwargs={"key_filename": str(self.identity.key), "look_for_keys": False, "allow_agent": False},
        )
        # Fabric installs AutoAddPolicy; pin to the cluster's known_hosts and refuse anything else.
        conn.client.load_host_keys(str(self.identity.known_hosts))
        conn.client.set_missing_host_key_policy(paramiko.RejectPolicy())
        return conn

    def wait_ready(self, nodes: list[Node], timeout: float) -> None:
        deadline = time.monotonic() + timeout
        pending = list(nodes)
        while pending:
            pending = [node for node in pending if not port_open(node.ssh_host, self.identity.port)]
            if pending and time.monotonic() > deadline:
                names = ", ".join(n.name for n in pending)
                raise RemoteError(f"SSH did not answer on {names} within {int(timeout)}s",
                                  hint="raise ssh.timeout, or check the security group / ssh.cidr")
            if pending:
                time.sleep(0.2)

    def wait_login(self, nodes: list[Node], timeout: float, progress: Callable[[str], None]) -> None:
        """Wait until a login runs a command on every node (host keys must be pinned by now).

        An open port 22 is not a node ready for SSH: sshd answers before cloud-init has written
        the login user's key, and restarts once it has written the host keys. Authentication
        failures and dropped transports are retried until `timeout`; a host key that does not
        match the pinned one is not."""
        from concurrent.futures import ThreadPoolExecutor

        deadline = time.monotonic() + timeout
        with ThreadPoolExecutor(max_workers=max(1, min(32, len(nodes)))) as pool:
            for future in [pool.submit(self._wait_login, node, deadline, progress) for node in nodes]:
                future.result()

    def _wait_login(self, node: Node, deadline: float, progress: Callable[[str], None]) -> None:
        said = ""
        while True:
            try:
                self._run_one(node, "true")
                return
            except RemoteError as exc:
                if "host key" in exc.message or time.monotonic() > deadline:
                    raise RemoteError(f"{node.name} ({node.ssh_host}) did not accept a login: {exc.message}",
                                      hint="raise ssh.timeout; a new node may still be running cloud-init "
                                           "(its console output shows how far it got)") from None
                reason = exc.message.split(": ", 1)[-1]
                if reason != said:
                    progress(f"{node.name}: waiting for a login ({reason})")
                    said = reason
            time.sleep(LOGIN_RETRY_SECONDS)

    def scan_host_key(self, node: Node) -> str:
        """Trust on first use: read the key the node presents, to be pinned from now on."""
        sock = socket.create_connection((node.ssh_host, self.identity.port), timeout=15)
        transport = paramiko.Transport(sock)
        try:
            transport.start_client(timeout=15)
            key = transport.get_remote_server_key()
            return f"{key.get_name()} {key.get_base64()}"
        finally:
            transport.close()

    def run(self, nodes: list[Node], command: str) -> dict[str, CommandResult]:
        return self._group_do(nodes, command, hide=True)

    def stream(self, nodes: list[Node], command: str, sink: Callable[[str, str], None]) -> dict[str, CommandResult]:
        from concurrent.futures import ThreadPoolExecutor

        def one(node: Node) -> CommandResult:
            out, err = LineSink(node.name, sink), LineSink(node.name, sink)
            try:
                return self._run_one(node, command, out_stream=out, err_stream=err)
            finally:
                out.finish()
                err.finish()

        with ThreadPoolExecutor(max_workers=max(1, min(64, len(nodes)))) as pool:
            futures = {node.name: pool.submit(one, node) for node in nodes}
        # .result() re-raises a node's RemoteError here, in the caller's thread.
        return {name: future.result() for name, future in futures.items()}

    def _run_one(self, node: Node, command: str, **kwargs: object) -> CommandResult:
        conn = self.connection(node)
        try:
            result = conn.run(command, warn=True, hide=True, in_stream=False, **kwargs)
            return CommandResult(node.name, result.exited, result.stdout, result.stderr)
        except Exception as exc:  # noqa: BLE001 - any transport failure is reported per node
            self._drop(node)
            raise _remote_error(node, exc) from None

    def _group_do(self, nodes: list[Node], command: str, hide: bool) -> dict[str, CommandResult]:
        conns = {node.ssh_host: node for node in nodes}
        group = ThreadingGroup.from_connections([self.connection(node) for node in nodes])
        try:
            outcome = group.run(command, warn=True, hide=hide, in_stream=False)
        except GroupException as exc:
            outcome = exc.result
        results = {}
        for conn, value in outcome.items():
            node = conns[conn.host]
            if isinstance(value, Exception):
                self._drop(node)
                raise _remote_error(node, value)
            results[node.name] = CommandResult(node.name, value.exited, value.stdout, value.stderr)
        return results

    def put_files(self, node: Node, files: list[RemoteFile]) -> None:
        """All files over one SFTP session: a handshake per file would dominate small clusters."""
        with self._writing(node) as conn:
            sftp = conn.sftp()
            for item in files:
                with sftp.open(item.path, "w") as handle:
                    handle.chmod(item.mode)
                    handle.write(item.text.encode())

    def put(self, node: Node, local: Path, remote_path: str) -> None:
        with self._writing(node) as conn:
            conn.put(str(local), remote_path)

    @contextlib.contextmanager
    def _writing(self, node: Node) -> Iterator[Connection]:
        """The node's connection, its SFTP session to itself; any failure is reported per node."""
        conn = self.connection(node)
        try:
            with self._sftp(node):
                yield conn
        except Exception as exc:  # noqa: BLE001 - any SFTP or transport failure is reported per node
            self._drop(node)
            raise _remote_error(node, exc) from None

    def get(self, node: Node, remote_path: str, local: Path) -> None:
        conn = self.connection(node)
        try:
            local.parent.mkdir(parents=True, exist_ok=True)
            with self._sftp(node):
                conn.get(remote_path, str(local))
        except FileNotFoundError:
            raise RemoteError(f"{node.name}: {remote_path} does not exist") from None
        except Exception as exc:  # noqa: BLE001 - any SFTP or transport failure is reported per node
            self._drop(node)
            raise _remote_error(node, exc) from None


class _WatchedConnection(Connection):
    """A connection that notices a peer gone without a word (KEEPALIVE_SECONDS, DEAD_PEER_SECONDS)."""

    def open(self) -> object:
        opened = super().open()
        transport = self.client.get_transport()
        if transport is not None:
            transport.set_keepalive(KEEPALIVE_SECONDS)
            if isinstance(transport.sock, socket.socket) and hasattr(socket, "TCP_USER_TIMEOUT"):
                transport.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT, DEAD_PEER_SECONDS * 1000)
        return opened


def _remote_error(node: Node, exc: BaseException) -> RemoteError:
    if isinstance(exc, paramiko.BadHostKeyException):
        return RemoteError(f"{node.name} ({node.ssh_host}) presented a host key that does not match the pinned one",
                           hint="the node was replaced or someone is intercepting; recreate the cluster if expected")
    if isinstance(exc, paramiko.SSHException) and "not found in known_hosts" in str(exc):
        return RemoteError(f"{node.name} ({node.ssh_host}) has no pinned host key; refusing to connect",
                           hint="run `xeoncluster up` again to pin it")
    if isinstance(exc, (OSError, socket.timeout, paramiko.SSHException, EOFError)):
        return RemoteError(f"{node.name} ({node.ssh_host}) is unreachable over SSH: {exc or type(exc).__name__}",
                           hint="`xeoncluster status` shows which nodes answer")
    return RemoteError(f"{node.name}: {type(exc).__name__}: {exc}")

