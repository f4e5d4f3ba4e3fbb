"""Ready means a login runs a command: sshd answers on its port before cloud-init has written the
login user's key, and a login in that window fails (real sshd on loopback, real Fabric)."""
from __future__ import annotations

import os
import shutil
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from xeoncluster.core.errors import RemoteError
from xeoncluster.providers.base import Node
from xeoncluster.remote.fabric_shell import FabricShell
from xeoncluster.remote.shell import SshIdentity

SSHD = "/usr/sbin/sshd"


@dataclass
class Sshd:
    port: int
    authorized: Path
    identity: SshIdentity
    node: Node


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture
def sshd(tmp_path: Path) -> Iterator[Sshd]:
    if os.geteuid() != 0 or not os.access(SSHD, os.X_OK):
        pytest.skip("needs root and openssh-server (as in CI)")
    port = free_port()
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(tmp_path / "host")], check=True)
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(tmp_path / "user")], check=True)
    authorized = tmp_path / "authorized_keys"
    config = tmp_path / "sshd_config"
    config.write_text(f"ListenAddress 127.0.0.1\nPort {port}\nHostKey {tmp_path / 'host'}\nPidFile {tmp_path / 'pid'}\n"
                      f"AuthorizedKeysFile {authorized}\nStrictModes no\nUsePAM no\nPasswordAuthentication no\n"
                      "PermitRootLogin prohibit-password\nLogLevel QUIET\nSubsystem sftp internal-sftp\n")
    Path("/run/sshd").mkdir(exist_ok=True)
    daemon = subprocess.Popen([SSHD, "-D", "-f", str(config)])
    host_key = " ".join((tmp_path / "host.pub").read_text().split()[:2])
    (tmp_path / "known_hosts").write_text(f"[127.0.0.1]:{port} {host_key}\n")
    identity = SshIdentity("root", tmp_path / "user", tmp_path / "known_hosts", timeout=30, port=port)
    node = Node("node0", "n0", "127.0.0.1", "127.0.0.1", "master", "local")
    try:
        FabricShell(identity).wait_ready([node], 10)
        yield Sshd(port, authorized, identity, node)
    finally:
        daemon.terminate()
        daemon.wait()


def test_a_login_is_awaited_until_the_key_is_written(sshd: Sshd, tmp_path: Path) -> None:
    shell = FabricShell(sshd.identity)
    with pytest.raises(RemoteError, match="Authentication failed"):  # the port answers; a login does not yet
        shell.run([sshd.node], "true")
    writer = threading.Timer(2.0, lambda: shutil.copy(tmp_path / "user.pub", sshd.authorized))
    writer.start()
    said: list[str] = []
    started = time.monotonic()
    shell.wait_login([sshd.node], 30, said.append)
    assert 1.5 < time.monotonic() - started < 15
    assert said and said[0].startswith("node0: waiting for a login (") and "Authentication failed" in said[0]
    assert shell.run([sshd.node], "echo ready")["node0"].stdout.strip() == "ready"
    shell.close()


def test_a_node_that_never_accepts_a_login_fails_in_one_line_after_the_timeout(sshd: Sshd) -> None:
    shell = FabricShell(sshd.identity)
    started = time.monotonic()
    with pytest.raises(RemoteError) as failure:
        shell.wait_login([sshd.node], 2, lambda _line: None)
    assert 2 <= time.monotonic() - started < 10
    assert failure.value.message.startswith("node0 (127.0.0.1) did not accept a login: ")
    assert "raise ssh.timeout" in (failure.value.hint or "")


def test_paramiko_s_own_log_lines_stay_off_the_terminal() -> None:
    """In a plain interpreter, as the CLI runs (pytest installs log handlers of its own)."""
    import sys

    code = ("import logging, xeoncluster.remote.fabric_shell; "
            "logging.getLogger('paramiko.transport').error('Socket exception: Connection reset by peer (104)')")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "Socket exception" not in result.stderr


def test_two_threads_moving_files_over_one_shell_both_finish(sshd: Sshd, tmp_path: Path) -> None:
    """A run's storage fetches a checkpoint while its loop rewrites the master's files, over one shell:
    paramiko's SFTP session is not for two threads at once (they took each other's replies and hung)."""
    from xeoncluster.remote.shell import RemoteFile

    sshd.authorized.write_text((tmp_path / "user.pub").read_text())
    big = tmp_path / "checkpoint.bin"
    big.write_bytes(os.urandom(8 << 20))
    shell = FabricShell(sshd.identity)
    errors: list[BaseException] = []

    def fetch() -> None:
        try:
            for n in range(4):
                shell.get(sshd.node, str(big), tmp_path / f"fetched-{n}")
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    def write() -> None:
        try:
            for n in range(40):
                shell.put_files(sshd.node, [RemoteFile(str(tmp_path / f"hosts-{n}"), "node0\n" * 50, 0o644)])
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=fetch, daemon=True), threading.Thread(target=write, daemon=True)]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        assert not any(t.is_alive() for t in threads) and errors == []
        assert (tmp_path / "fetched-3").read_bytes() == big.read_bytes() and (tmp_path / "hosts-39").exists()
    finally:
        shell.close()
