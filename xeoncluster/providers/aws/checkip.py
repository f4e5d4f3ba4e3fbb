"""ssh.cidr=auto: the caller's public IPv4 address, as checkip.amazonaws.com sees it.

Asked directly over IPv4: through an HTTPS proxy the answer would be the proxy's address, and over
IPv6 it would be an address the IPv4-only nodes' security group rule never matches.
"""
from __future__ import annotations

import http.client
import socket
import ssl
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

CHECKIP_HOST = "checkip.amazonaws.com"
TIMEOUT = 5.0
MAX_ANSWER = 256

# (IPv4 address, TLS server name, timeout) -> a connected TLS socket
Connect = Callable[[str, str, float | None], Any]


def resolve_ipv4(host: str) -> list[str]:
    infos = socket.getaddrinfo(host, 443, family=socket.AF_INET, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


def tls_connect(address: str, server_name: str, timeout: float | None) -> Any:
    sock = socket.create_connection((address, 443), timeout=timeout)
    try:
        return ssl.create_default_context().wrap_socket(sock, server_hostname=server_name)
    except BaseException:
        sock.close()
        raise


class _PinnedHTTPSConnection(http.client.HTTPSConnection):
    """An HTTPS connection to one given address; Host, SNI and the certificate check use the name.
    http.client never reads proxy settings from the environment (urllib does)."""

    def __init__(self, host: str, address: str, connect: Connect, timeout: float) -> None:
        super().__init__(host, 443, timeout=timeout)
        self._address = address
        self._connect = connect

    def connect(self) -> None:
        self.sock = self._connect(self._address, self.host, self.timeout)


@dataclass(frozen=True)
class CheckIp:
    resolve: Callable[[str], list[str]] = resolve_ipv4
    connect: Connect = tls_connect
    host: str = CHECKIP_HOST
    timeout: float = TIMEOUT

    def __call__(self) -> str:
        """The address checkip answers; raises OSError or ValueError when no address of it does."""
        addresses = self.resolve(self.host)
        if not addresses:
            raise OSError(f"{self.host} has no IPv4 address")
        failures = []
        for address in addresses:
            try:
                return self._ask(address)
            except (OSError, http.client.HTTPException, ValueError) as exc:
                failures.append(f"{address}: {exc or type(exc).__name__}")
        raise OSError(f"{self.host} did not answer ({'; '.join(failures)})")

    def _ask(self, address: str) -> str:
        conn = _PinnedHTTPSConnection(self.host, address, self.connect, self.timeout)
        try:
            conn.request("GET", "/", headers={"User-Agent": "xeoncluster", "Connection": "close"})
            reply = conn.getresponse()
            body = reply.read(MAX_ANSWER).decode("ascii", "replace").strip()
        finally:
            conn.close()
        if reply.status != 200:
            raise ValueError(f"HTTP {reply.status}")
        return body


def checkip_caller_ip() -> str:
    """The default ssh.cidr=auto resolver. Never used by tests: they inject `caller_ip` or a CheckIp
    with a fake resolver and connection."""
    return CheckIp()()
