"""The stand-in's bridge (where the VPC resolver, router and IMDS answer) keeps one link-layer address while
containers come and go: left to the kernel it took the lowest port's and changed with them, and a container's
cached entry then sent its DNS queries to another container, unanswered (two 5 s resolver timeouts)."""
from __future__ import annotations

import pytest

from xeoncluster.standin import network
from xeoncluster.standin.network import Network


def test_the_bridge_is_created_with_a_fixed_locally_administered_address(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[str, ...]] = []
    monkeypatch.setattr(network, "_ip", lambda *args, check=True: calls.append(args))
    net = Network("xcstandin", "xcbr0")
    net.create()
    [made] = [c for c in calls if "bridge" in c]
    assert made == ("-n", "xcstandin", "link", "add", "xcbr0", "address", net.bridge_mac, "type", "bridge")
    first = int(net.bridge_mac.split(":")[0], 16)
    assert first & 0x02 and not first & 0x01  # locally administered, unicast
    assert net.bridge_mac == Network("xcstandin", "xcbr0").bridge_mac != Network("other", "xcbr1").bridge_mac
