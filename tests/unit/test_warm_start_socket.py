"""Where a node's warm rank server (xeoncluster/node/warm_start) listens, and whom it hears: a socket file in a
folder of the user's home that only the user may enter, checked before each use; another user can neither
take the server's address first nor keep it alive. The server here is a stand-in (no torch): these tests
are about the socket, tests/training/test_warm_start.py about the forked ranks."""
from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import socket
import stat
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from xeoncluster.node.warm_start import key, relay, server, wire

NOBODY = 65534
root_only = pytest.mark.skipif(os.getuid() != 0, reason="acts as another user (nobody), which needs root")


@pytest.fixture
def home() -> Iterator[Path]:
    """A home short enough that the servers' folder stays in it (pytest's tmp_path is too long for that)."""
    made = Path(tempfile.mkdtemp(prefix="xc-", dir="/tmp"))
    os.chmod(made, 0o755)  # as a home is: others may pass, so the folder's own mode is what keeps them out
    yield made
    shutil.rmtree(made, ignore_errors=True)


def rank_env(home: Path) -> dict[str, str]:
    return {"PATH": os.environ.get("PATH", "/usr/bin"), "HOME": str(home), "PMI_RANK": "0"}


def old_address(environ: dict[str, str]) -> str:
    """The abstract socket name a rank looked for before: anyone in the network namespace could bind it."""
    cpus = hashlib.sha256(",".join(map(str, sorted(os.sched_getaffinity(0)))).encode()).hexdigest()[:12]
    return f"xeoncluster-warm-{os.getuid()}-{cpus}-{key.fingerprint(environ)[:16]}"


def as_nobody(action: str, name: str) -> int:
    """A child process of user nobody that binds (and listens on) or connects to the abstract socket `name`:
    its pid, once it has. A binder holds the name until the test ends it; a connecter exits 0 once the
    server closes the connection without a word."""
    ready, told = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        code = 1
        try:
            os.setgid(NOBODY)
            os.setuid(NOBODY)
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
            if action == "bind":
                sock.bind("\0" + name)
                sock.listen(8)
            else:
                sock.connect("\0" + name)
            os.write(told, b"x")
            if action == "bind":
                time.sleep(60)
            sock.settimeout(10)
            code = 0 if sock.recv(64) == b"" else 3
        finally:
            os._exit(code)
    os.close(told)
    assert os.read(ready, 1) == b"x"
    os.close(ready)
    return pid


def end(pid: int) -> int:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, 9)
    return os.waitpid(pid, 0)[1]


def stand_in_server(asked: list[str]) -> Callable[[object, object], None]:
    """What relay.start_server would start, minus the imports and the fork: it binds the address it is given
    and answers one rank: a pid, then that rank's exit (status 0)."""
    def start(address: object, _environ: object) -> None:
        asked.append(str(address))
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        listener.bind(str(address))
        listener.listen(1)
        threading.Thread(target=answer, args=(listener,), daemon=True).start()

    def answer(listener: socket.socket) -> None:
        conn, _ = listener.accept()
        _request, streams = wire.receive_request(conn)
        for fd in streams:
            os.close(fd)
        wire.send_reply(conn, wire.Reply(pid=os.getpid()))
        wire.send_reply(conn, wire.Reply(status=0))
        conn.close()
        listener.close()

    return start


@root_only
def test_a_stranger_on_the_old_predictable_name_no_longer_makes_the_rank_start_cold(
        home: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]) -> None:
    env = rank_env(home)
    stranger = as_nobody("bind", old_address(env))
    asked: list[str] = []
    monkeypatch.setattr(relay, "start_server", stand_in_server(asked))
    monkeypatch.setattr(relay, "CONNECT_SECONDS", 2.0)
    try:
        assert relay.run_warm(["-m"], env) == 0, capfd.readouterr().err
    finally:
        end(stranger)
    assert "starting cold" not in capfd.readouterr().err
    [address] = asked
    folder = Path(address).parent
    assert folder == home / "xeoncluster" / "warm"
    info = folder.lstat()
    assert stat.S_ISDIR(info.st_mode) and info.st_uid == os.getuid() and stat.S_IMODE(info.st_mode) == 0o700


@root_only
@pytest.mark.parametrize("opened", ["owned by nobody", "open to its group"])
def test_a_folder_someone_else_could_enter_starts_the_rank_cold_with_one_line_why(
        home: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str], opened: str) -> None:
    folder = home / "xeoncluster" / "warm"
    folder.mkdir(parents=True, mode=0o700)
    if opened == "owned by nobody":
        os.chown(folder, NOBODY, NOBODY)
    else:
        os.chmod(folder, 0o750)
    asked: list[str] = []
    monkeypatch.setattr(relay, "start_server", lambda address, _env: asked.append(str(address)))
    monkeypatch.setattr(relay, "CONNECT_SECONDS", 0.2)
    assert relay.run_warm(["-m"], rank_env(home)) is None
    assert asked == []
    [line] = capfd.readouterr().err.splitlines()
    assert str(folder) in line and line.endswith(": starting cold"), line


def test_a_server_will_not_listen_in_a_folder_others_may_enter(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = home / "xeoncluster" / "warm"
    folder.mkdir(parents=True, mode=0o700)
    os.chmod(folder, 0o733)
    imported: list[bool] = []
    monkeypatch.setattr(server, "preload", lambda: imported.append(True))
    monkeypatch.setattr(server.Server, "run", lambda _self: 0)
    assert server.serve(str(folder / "name")) == 0
    assert imported == [] and not (folder / "name").exists()


def test_a_dead_server_s_socket_file_is_replaced_and_a_live_one_kept(home: Path) -> None:
    folder = home / "xeoncluster" / "warm"
    folder.mkdir(parents=True, mode=0o700)
    dead = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    dead.bind(str(folder / "name"))
    dead.close()  # its file stays behind: a connect is refused
    listener = server.listen_at(folder / "name")
    assert listener is not None
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET) as rank:
            rank.connect(str(folder / "name"))
        assert server.listen_at(folder / "name") is None  # a server listens there: its ranks use that one
    finally:
        listener.close()


def test_a_home_too_long_for_a_socket_address_moves_the_folder_under_tmp() -> None:
    address = key.address("f" * 64, Path("/home/" + "h" * 90))
    assert len(os.fsencode(address)) < 108
    assert address.parent.name.startswith(f"xeoncluster-warm-{os.getuid()}-")
    assert address.parent.parent == Path("/tmp")


@root_only
def test_a_stranger_s_connection_is_closed_unread_and_leaves_the_idle_clock_alone() -> None:
    name = f"xc-test-{os.getpid()}-{time.monotonic_ns()}"
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    listener.bind("\0" + name)  # abstract, so that nobody can reach it: a real server's folder would keep it out
    listener.listen(8)
    listener.settimeout(10)
    quiet_since = time.monotonic() - 600
    warm = server.Server(listener, "fingerprint", quiet_since=quiet_since)
    stranger = as_nobody("connect", name)
    try:
        warm._accept(listener)
        status = os.waitpid(stranger, 0)[1]
    finally:
        with contextlib.suppress(ChildProcessError):
            end(stranger)
        warm.selector.close()
        listener.close()
    assert warm.quiet_since == quiet_since
    assert os.waitstatus_to_exitcode(status) == 0  # it saw its connection closed, with nothing sent
    assert warm.children == {}
