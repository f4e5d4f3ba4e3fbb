"""Host keys from the console output: cloud-init prints them a while after SSH opens."""
from __future__ import annotations

import pytest
from aws_helpers import PUBLIC_KEY, cluster_config

from xeoncluster.providers.base import LaunchRequest

KEYS_BLOCK = ("-----BEGIN SSH HOST KEY KEYS-----\n"
              "ecdsa-sha2-nistp256 AAAAE2VjZHNh root@ip-10-0-0-1\nssh-ed25519 AAAAC3Nza root@ip-10-0-0-1\n"
              "-----END SSH HOST KEY KEYS-----\n")


def console_shows_keys_after(monkeypatch, polls):
    """moto's console output never has the key block: its GetConsoleOutput answers the boot log
    only for the first `polls` calls per instance, then the log with the block (base64 on the wire,
    decoded by botocore as for real EC2)."""
    from moto.core.responses import ActionResult
    from moto.core.utils import utcnow
    from moto.ec2.responses.general import General
    from moto.ec2.utils import Base64EncodedString

    seen: dict[str, int] = {}

    def get_console_output(self):
        instance_id = self._get_param("InstanceId")
        seen[instance_id] = seen.get(instance_id, 0) + 1
        text = "[    0.000000] Linux version 6.8.0\nssh ready\n"
        if polls is not None and seen[instance_id] > polls:
            text += KEYS_BLOCK + "Cloud-init finished\n"
        return ActionResult({"InstanceId": instance_id, "Timestamp": utcnow(),
                             "Output": Base64EncodedString.from_raw_string(text)})

    monkeypatch.setattr(General, "get_console_output", get_console_output)
    return seen


@pytest.fixture
def launched(provider):
    cluster = cluster_config(nodes=2)
    provider.prepare(cluster, PUBLIC_KEY)
    return provider.launch(LaunchRequest(cluster, 2, None, "worker", 0))


def test_keys_that_appear_after_two_polls_are_read_with_latest(provider, aws, events, launched, monkeypatch):
    seen = console_shows_keys_after(monkeypatch, polls=2)
    slept = []
    provider.sleep = slept.append
    aws.clear()
    assert provider.host_keys(launched[0]) == ["ecdsa-sha2-nistp256 AAAAE2VjZHNh", "ssh-ed25519 AAAAC3Nza"]
    assert seen == {launched[0].id: 3}
    requests = [p for _, op, p in aws.calls if op == "GetConsoleOutput"]
    assert requests == [{"InstanceId": launched[0].id, "Latest": True}] * 3
    assert slept == [5.0, 5.0]
    assert events[-1] == "host key of node0 from the console output"


def test_no_key_block_gives_up_after_the_bounded_wait_and_says_so(provider, aws, events, launched, monkeypatch):
    seen = console_shows_keys_after(monkeypatch, polls=None)
    slept = []
    provider.sleep = slept.append
    provider.host_key_wait = {"Delay": 10, "MaxAttempts": 6}
    assert provider.host_keys(launched[0]) == []
    assert sum(slept) == 60 and seen[launched[0].id] == 7
    assert events[-1] == "host key of node0 not in the console output after 60s; trusting on first use"
    # The nodes of one launch boot together: the next one is not given another full minute.
    assert provider.host_keys(launched[1]) == []
    assert sum(slept) == 60 and seen[launched[1].id] == 1
    assert events[-1] == "host key of node1 not in the console output after 60s; trusting on first use"


def test_a_new_launch_gets_a_new_wait(provider, events, launched, monkeypatch):
    console_shows_keys_after(monkeypatch, polls=None)
    provider.host_key_wait = {"Delay": 10, "MaxAttempts": 2}
    provider.sleep = lambda seconds: None
    assert provider.host_keys(launched[0]) == []
    seen = console_shows_keys_after(monkeypatch, polls=1)
    [later] = provider.launch(LaunchRequest(cluster_config(nodes=3), 1, None, "worker", 2))
    assert provider.host_keys(later) and seen[later.id] == 2


def test_latest_refused_falls_back_to_the_boot_output(provider, aws, events, launched, monkeypatch):
    console_shows_keys_after(monkeypatch, polls=0)
    aws.fail("GetConsoleOutput", "UnsupportedOperation", when=lambda p: p.get("Latest") is True)
    aws.clear()
    assert provider.host_keys(launched[0]) == ["ecdsa-sha2-nistp256 AAAAE2VjZHNh", "ssh-ed25519 AAAAC3Nza"]
    assert [p.get("Latest") for _, op, p in aws.calls if op == "GetConsoleOutput"] == [True, None]


def test_unreadable_console_is_trust_on_first_use(provider, aws, events, launched):
    aws.fail("GetConsoleOutput", "UnauthorizedOperation", times=99)
    assert provider.host_keys(launched[0]) == []
    assert events[-1].startswith("host key of node0: console output unreadable (UnauthorizedOperation")
