"""ssh.cidr=auto: the caller's public IPv4 address, asked of checkip directly (no proxy, no IPv6).

Nothing here dials out: the resolver and the TLS connection are fakes (the socket guard in
conftest.py fails anything real).
"""
from __future__ import annotations

import io
import socket

import pytest
from aws_helpers import REGION, cluster_config

from xeoncluster.core.errors import ConfigError
from xeoncluster.providers.aws import checkip as aws_checkip
from xeoncluster.providers.aws.checkip import CheckIp
from xeoncluster.providers.aws.provider import AwsProvider


class FakeTls:
    """A connected TLS socket as http.client uses it: records what was sent, replays a reply."""

    def __init__(self, reply: bytes) -> None:
        self.sent = b""
        self.reply = reply

    def sendall(self, data: bytes) -> None:
        self.sent += data

    def makefile(self, mode: str) -> io.BytesIO:
        return io.BytesIO(self.reply)

    def close(self) -> None:
        pass


class FakeNet:
    def __init__(self, body: str = "198.51.100.23\n", status: str = "200 OK", dead: tuple[str, ...] = ()) -> None:
        self.reply = (f"HTTP/1.1 {status}\r\nContent-Length: {len(body)}\r\n\r\n{body}").encode()
        self.dead = dead
        self.resolved: list[str] = []
        self.connects: list[tuple[str, str, float]] = []
        self.sockets: list[FakeTls] = []

    def resolve(self, host: str) -> list[str]:
        self.resolved.append(host)
        return ["192.0.2.10", "192.0.2.11"]

    def connect(self, address: str, server_name: str, timeout: float) -> FakeTls:
        self.connects.append((address, server_name, timeout))
        if address in self.dead:
            raise ConnectionRefusedError("refused")
        self.sockets.append(FakeTls(self.reply))
        return self.sockets[-1]


def test_asks_checkip_over_ipv4_and_ignores_https_proxy(monkeypatch):
    for name in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "HTTP_PROXY"):
        monkeypatch.setenv(name, "http://10.99.0.1:3128")
    net = FakeNet()
    assert CheckIp(resolve=net.resolve, connect=net.connect)() == "198.51.100.23"
    assert net.resolved == ["checkip.amazonaws.com"]
    assert net.connects == [("192.0.2.10", "checkip.amazonaws.com", 5.0)]
    request = net.sockets[0].sent.decode()
    assert request.startswith("GET / HTTP/1.1\r\n") and "Host: checkip.amazonaws.com\r\n" in request


def test_the_next_address_is_tried_when_one_fails():
    net = FakeNet(dead=("192.0.2.10",))
    assert CheckIp(resolve=net.resolve, connect=net.connect)() == "198.51.100.23"
    assert [c[0] for c in net.connects] == ["192.0.2.10", "192.0.2.11"]


def test_an_error_status_is_not_an_address():
    net = FakeNet(body="busy", status="503 Service Unavailable")
    with pytest.raises(OSError, match="HTTP 503"):
        CheckIp(resolve=net.resolve, connect=net.connect)()


def test_the_resolver_asks_for_ipv4_only(monkeypatch):
    asked = []

    def getaddrinfo(host, port, family=0, type=0, proto=0, flags=0):  # noqa: A002 - socket.getaddrinfo's own keywords
        asked.append((host, port, family))
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("192.0.2.10", port))] * 2

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    assert aws_checkip.resolve_ipv4("checkip.amazonaws.com") == ["192.0.2.10"]
    assert asked == [("checkip.amazonaws.com", 443, socket.AF_INET)]


def test_the_default_caller_ip_goes_through_checkip_without_a_proxy(aws, monkeypatch):
    monkeypatch.setenv("HTTPS_PROXY", "http://10.99.0.1:3128")
    net = FakeNet()
    monkeypatch.setattr(aws_checkip, "CheckIp", lambda: CheckIp(resolve=net.resolve, connect=net.connect))
    provider = AwsProvider(REGION)  # no caller_ip: the real default, over the fake network
    assert provider.ssh_cidr(cluster_config()) == "198.51.100.23/32"
    assert [c[0] for c in net.connects] == ["192.0.2.10"]


def test_an_ipv6_answer_is_refused_with_a_hint(make_provider):
    provider = make_provider(caller_ip=lambda: "2001:db8::7")
    with pytest.raises(ConfigError, match="IPv6 address 2001:db8::7") as caught:
        provider.ssh_cidr(cluster_config())
    assert "ssh.cidr" in caught.value.hint


def test_the_detected_address_is_shown(make_provider, events):
    provider = make_provider(caller_ip=lambda: "198.51.100.4")
    provider.ssh_cidr(cluster_config())
    provider.ssh_cidr(cluster_config())
    assert [e for e in events if e.startswith("ssh.cidr")] == ["ssh.cidr auto: your public address is 198.51.100.4/32"]
    assert provider.ssh_cidr(cluster_config(ssh={"cidr": "198.51.100.0/24"})) == "198.51.100.0/24"
    assert len([e for e in events if e.startswith("ssh.cidr")]) == 1
