"""The rank process MPI started, when a warm server can stand in for its start: it asks the node's
server for a forked rank, relays the signals it gets to it, and ends as that rank ended. Whatever
goes wrong before the rank is forked leaves the start to the cold path (None)."""
from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path

from xeoncluster.node.diagnostics.startup_clock import process_started
from xeoncluster.node.rank_env import XC_WARM_START
from xeoncluster.node.warm_start import wire
from xeoncluster.node.warm_start.key import MODULE, address, fingerprint, import_env
from xeoncluster.node.warm_start.socket_folder import home, unusable

CONNECT_SECONDS = 10.0
READY_SECONDS = 300.0  # a server just started imports first; a loaded machine has taken half a minute
RELAYED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2,
           signal.SIGALRM, signal.SIGCONT)


def wanted(environ: Mapping[str, str]) -> bool:
    """Ranks MPI starts (PMI_RANK), unless switched off; torchrun's and a shell's start cold."""
    return "PMI_RANK" in environ and environ.get(XC_WARM_START, "1") != "0"


def connect(address: Path, wait: float) -> socket.socket | None:
    deadline = time.monotonic() + wait
    while True:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            sock.connect(str(address))
            return sock
        except OSError:
            sock.close()
            if time.monotonic() >= deadline:
                return None
            time.sleep(0.05)


def start_server(address: Path, environ: Mapping[str, str]) -> None:
    subprocess.Popen([sys.executable, "-m", MODULE, str(address)], env=import_env(environ),
                     cwd="/", stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                     start_new_session=True)


def forked_rank(address: Path, request: wire.Request) -> tuple[socket.socket, int] | None:
    """The server's socket and the forked rank's pid; None to start cold."""
    why = unusable(address.parent)
    if why is not None:
        say(why)
        return None
    sock = connect(address, 0)
    if sock is None:
        start_server(address, request.env)
        sock = connect(address, CONNECT_SECONDS)
    if sock is None:
        say(f"the node's warm rank server did not start within {CONNECT_SECONDS:g}s")
        return None
    if not wire.same_user(sock):
        say("another user holds the warm rank server's address")
        return None
    reply = ask(sock, request)
    if reply is not None and reply.pid is not None:
        return sock, reply.pid
    sock.close()
    say("the node's warm rank server gave no rank" if reply else "the node's warm rank server did not answer")
    return None


def say(why: str) -> None:
    print(f"training: {why}: starting cold", file=sys.stderr, flush=True)


def ask(sock: socket.socket, request: wire.Request) -> wire.Reply | None:
    try:
        sock.settimeout(READY_SECONDS)
        wire.send_request(sock, request, [0, 1, 2])
        return wire.receive_reply(sock)
    except (OSError, ValueError, TypeError):
        return None


def outcome(sock: socket.socket, pid: int) -> int:
    """Relay signals to the forked rank until the server says how it ended; its exit code, or its death by
    a signal, becomes this process's own."""
    def relay(received: int, _frame: object) -> None:
        with contextlib.suppress(ProcessLookupError):  # it has just ended: the server is about to say how
            os.kill(pid, received)

    for number in RELAYED:
        signal.signal(number, relay)
    sock.settimeout(None)
    try:
        reply = wire.receive_reply(sock)
    except (OSError, ValueError, TypeError):
        reply = None
    for number in RELAYED:
        signal.signal(number, signal.SIG_DFL)
    if reply is None or reply.status is None:
        print("training: the node's warm rank server ended before the rank did", file=sys.stderr, flush=True)
        return 1
    if os.WIFSIGNALED(reply.status):
        os.kill(os.getpid(), os.WTERMSIG(reply.status))
    return os.waitstatus_to_exitcode(reply.status)


def run_warm(argv: list[str], environ: Mapping[str, str]) -> int | None:
    """The rank's exit code, run by a forked process; None when it must start cold here."""
    if not wanted(environ):
        return None
    env = dict(environ)
    request = wire.Request(argv=list(argv), env=env, cwd=os.getcwd(), path=list(sys.path),
                           fingerprint=fingerprint(env), started=process_started())
    found = forked_rank(address(request.fingerprint, home(env)), request)
    if found is None:
        return None
    sock, pid = found
    return outcome(sock, pid)
