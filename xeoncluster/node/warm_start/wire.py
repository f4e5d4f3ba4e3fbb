"""Messages between a rank and its server: one JSON object per SOCK_SEQPACKET message, the rank's
standard streams passed with its request (SCM_RIGHTS), and both ends checked to be the same user."""
from __future__ import annotations

import json
import os
import socket
import struct
from dataclasses import asdict, dataclass

MAX_MESSAGE = 1 << 20
STREAMS = 3


@dataclass(frozen=True)
class Request:
    argv: list[str]
    env: dict[str, str]
    cwd: str
    path: list[str]
    fingerprint: str
    started: float | None = None  # when the rank's own process began: its startup clock counts from there
    retire: bool = False  # from a newer server for the same CPU set: end once the ranks forked here have


RETIRE = Request(argv=[], env={}, cwd="/", path=[], fingerprint="", retire=True)


@dataclass(frozen=True)
class Reply:
    pid: int | None = None       # the forked rank
    status: int | None = None    # its wait status, once it ended


def same_user(sock: socket.socket) -> bool:
    """The other end runs as this user: neither side hands its environment or streams to anyone else."""
    creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    _pid, uid, _gid = struct.unpack("3i", creds)
    return uid == os.getuid()


def send_request(sock: socket.socket, request: Request, streams: list[int]) -> None:
    data = json.dumps(asdict(request)).encode()
    if streams:
        socket.send_fds(sock, [data], streams)
    else:
        sock.send(data)


def receive_request(sock: socket.socket) -> tuple[Request, list[int]]:
    data, fds, _flags, _addr = socket.recv_fds(sock, MAX_MESSAGE, STREAMS)
    try:
        request = Request(**json.loads(data))
    except (ValueError, TypeError) as exc:
        for fd in fds:
            os.close(fd)
        raise ValueError(f"not a rank's request: {exc}") from exc
    if len(fds) != (0 if request.retire else STREAMS):
        for fd in fds:
            os.close(fd)
        raise ValueError(f"a request carries {STREAMS} streams, not {len(fds)}")
    return request, fds


def send_reply(sock: socket.socket, reply: Reply) -> None:
    sock.send(json.dumps(asdict(reply)).encode())


def receive_reply(sock: socket.socket) -> Reply | None:
    """None when the server is gone."""
    data = sock.recv(MAX_MESSAGE)
    return Reply(**json.loads(data)) if data else None
