"""`python -m xeoncluster.node.warm_start ADDRESS`: import a rank's libraries once, then fork a ready
process for each rank that asks, until none has asked for IDLE_SECONDS (fewer once a newer server took over
its CPU set).

The server never runs a torch operation: OpenMP's thread pool, once started, does not survive a fork.
A forked rank dies with the server (PR_SET_PDEATHSIG) and with the rank process that asked for it (its
socket closing); the server reports how it ended.
"""
from __future__ import annotations

import contextlib
import ctypes
import importlib
import os
import selectors
import signal
import socket
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from xeoncluster.node.warm_start import wire
from xeoncluster.node.warm_start.key import MODULE, fingerprint
from xeoncluster.node.warm_start.socket_folder import held, sockets, unusable

IDLE_SECONDS = 900.0
# A server whose CPU set a newer one (another environment's) took: it still answers its own ranks, which may
# be mid-run on the same node (a test suite's workers, two users), and ends once they leave it idle this long.
RETIRED_IDLE_SECONDS = 20.0
# What a built-in task's rank imports before its first step, in the order it does.
PRELOAD = ("torch", "torch.distributed", "transformers", "datasets", "xeoncluster.node.__main__",
           "xeoncluster.node.startup.runner",
           "xeoncluster.node.startup.trainer_setup", "xeoncluster.node.tasks.squad_task",
           "xeoncluster.node.tasks.glue_task", "xeoncluster.node.events.trackers")
LAZY = ("AutoModelForQuestionAnswering", "AutoModelForSequenceClassification", "AutoTokenizer", "Trainer",
        "TrainingArguments", "TrainerCallback")
PR_SET_PDEATHSIG = 1
PR_SET_NAME = 15


def preload() -> None:
    for name in PRELOAD:
        try:
            importlib.import_module(name)
        except ImportError:
            continue  # the rank imports it again and says what is missing
    transformers = sys.modules.get("transformers")
    for name in LAZY if transformers else ():
        getattr(transformers, name, None)


@dataclass
class Child:
    pid: int
    conn: socket.socket
    pidfd: int


@dataclass
class Server:
    listener: socket.socket
    fingerprint: str
    children: dict[int, Child] = field(default_factory=dict)  # by pidfd
    selector: selectors.BaseSelector = field(default_factory=selectors.DefaultSelector)
    retired: bool = False  # a newer server for the same CPU set exists
    quiet_since: float = field(default_factory=time.monotonic)

    def run(self) -> int:
        self.selector.register(self.listener, selectors.EVENT_READ, self._accept)
        while self.children or time.monotonic() - self.quiet_since < self._idle_limit():
            for key, _events in self.selector.select(timeout=5):
                key.data(key.fileobj)
        return 0

    def _accept(self, listener: socket.socket) -> None:
        conn, _ = listener.accept()
        if not _same_user(conn):
            return conn.close()  # before all else: another user's connection keeps no server alive
        self.quiet_since = time.monotonic()
        try:
            conn.settimeout(10)
            request, streams = wire.receive_request(conn)
        except (OSError, ValueError):
            return conn.close()
        try:
            self._answer(conn, request, streams)
        finally:
            for fd in streams:
                os.close(fd)

    def _answer(self, conn: socket.socket, request: wire.Request, streams: list[int]) -> None:
        if request.retire:
            self.retired = True
            return conn.close()
        if request.fingerprint != self.fingerprint:
            wire.send_reply(conn, wire.Reply())  # a name shared by another environment's server: start cold
            return conn.close()
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            self._become_rank(conn, request, streams)
        child = Child(pid, conn, os.pidfd_open(pid))
        self.children[child.pidfd] = child
        self.selector.register(child.pidfd, selectors.EVENT_READ, self._reap)
        self.selector.register(conn, selectors.EVENT_READ, self._asker_gone)
        wire.send_reply(conn, wire.Reply(pid=pid))

    def _idle_limit(self) -> float:
        return RETIRED_IDLE_SECONDS if self.retired else IDLE_SECONDS

    def _asker_gone(self, conn: socket.socket) -> None:
        """The rank process that asked is gone (killed, as mpiexec ends a job): so is its forked rank."""
        try:
            if conn.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT):
                return
        except BlockingIOError:
            return
        except OSError:
            pass
        self._forget(conn)
        for child in self.children.values():
            if child.conn is conn:
                os.kill(child.pid, signal.SIGKILL)

    def _reap(self, pidfd: int) -> None:
        child = self.children.pop(pidfd)
        _, status = os.waitpid(child.pid, 0)
        self._forget(pidfd)
        os.close(pidfd)
        self._forget(child.conn)
        with contextlib.suppress(OSError):  # the asker is gone
            wire.send_reply(child.conn, wire.Reply(status=status))
        child.conn.close()
        self.quiet_since = time.monotonic()

    def _forget(self, fileobj: socket.socket | int) -> None:
        with contextlib.suppress(KeyError, ValueError):
            self.selector.unregister(fileobj)

    def _become_rank(self, conn: socket.socket, request: wire.Request, streams: list[int]) -> None:
        try:
            self._leave_server(conn)
            _take_streams(streams)
            _take_place(request)
        except BaseException:  # noqa: BLE001 - nothing of the server may run on in its child
            os._exit(70)
        from xeoncluster.node.warm_start.rank import run_forked

        run_forked(request)

    def _leave_server(self, conn: socket.socket) -> None:
        libc = ctypes.CDLL(None, use_errno=True)
        server = os.getppid()
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != server:
            os._exit(70)  # the server died between the fork and the line above
        for child in self.children.values():
            child.conn.close()
            os.close(child.pidfd)
        self.selector.close()
        self.listener.close()
        conn.close()


def _same_user(conn: socket.socket) -> bool:
    try:
        return wire.same_user(conn)
    except OSError:
        return False


def _take_streams(streams: list[int]) -> None:
    for target, fd in enumerate(streams):
        os.dup2(fd, target)
        os.close(fd)


def _take_place(request: wire.Request) -> None:
    os.chdir(request.cwd)
    os.environ.clear()
    os.environ.update(request.env)
    sys.argv = list(request.argv)
    sys.path[:] = request.path
    rank = request.env.get("PMI_RANK", "")
    ctypes.CDLL(None).prctl(PR_SET_NAME, f"xc-rank-{rank}".encode()[:15], 0, 0, 0)


@dataclass(frozen=True)
class Running:
    pid: int
    environ: list[bytes]


def running() -> list[Running]:
    """This network namespace's warm servers that this user may read, with the environment each started with."""
    own_net = os.readlink("/proc/self/ns/net")
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if MODULE.encode() not in (entry / "cmdline").read_bytes().split(b"\0"):
                continue
            if os.readlink(entry / "ns" / "net") == own_net:
                found.append(Running(int(entry.name), (entry / "environ").read_bytes().split(b"\0")))
        except OSError:
            continue
    return found


def retire_others(mine: Path) -> None:
    """One server per CPU set in the long run: the older ones (other environments') end once idle. A socket
    that refuses is a dead server's (no one binds while the folder is held): its file goes."""
    for other in sockets(mine.parent, mine.name[: mine.name.rindex("-") + 1]):
        if other == mine:
            continue
        with socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET) as sock:
            try:
                sock.settimeout(5)
                sock.connect(str(other))
                if wire.same_user(sock):
                    wire.send_request(sock, wire.RETIRE, [])
            except ConnectionRefusedError:
                other.unlink(missing_ok=True)
            except OSError:
                continue


def listen_at(address: Path) -> socket.socket | None:
    """A listening socket at `address`, in place of a dead server's file there; None when a live server has
    it (its ranks use that one). Only for a folder that unusable() passed: no one else can put a file in it."""
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    try:
        try:
            listener.bind(str(address))
        except OSError:
            if _answers(address):
                listener.close()
                return None
            address.unlink(missing_ok=True)
            listener.bind(str(address))
        listener.listen(64)
    except OSError:
        listener.close()
        return None
    return listener


def _answers(address: Path) -> bool:
    with socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET) as sock:
        try:
            sock.connect(str(address))
        except (ConnectionRefusedError, FileNotFoundError):
            return False
        except OSError:
            return True  # not known to be dead: leave it be
    return True


def serve(address: str) -> int:
    path = Path(address)
    if unusable(path.parent) is not None:
        return 0  # the rank that started it says why, and starts cold
    with held(path.parent):
        listener = listen_at(path)
        if listener is None:
            return 0
        retire_others(path)
    mine = fingerprint(os.environ)  # before the imports, as the ranks that ask compute theirs
    preload()
    return Server(listener, mine).run()
