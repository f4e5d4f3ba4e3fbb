"""Host keys from an instance's console output, where cloud-init prints them some time after boot."""
from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from xeoncluster.providers.aws.clients import error_code, error_text

HOST_KEYS_BLOCK = re.compile(r"-----BEGIN SSH HOST KEY KEYS-----(.*?)-----END SSH HOST KEY KEYS-----", re.S)
# Answers to Latest=True from instance types that only keep the boot-time output (non-Nitro).
LATEST_UNSUPPORTED = frozenset({"UnsupportedOperation", "InvalidParameterValue", "InvalidParameterCombination"})


@dataclass
class ConsoleWait:
    """Polling budget shared by the nodes of one launch: they boot together, so the first node's
    wait is also the others' and a console without the block costs one budget, not one per node."""

    delay: float
    budget: float
    waited: float = 0.0
    latest: bool = True

    @classmethod
    def from_config(cls, wait: dict[str, int]) -> ConsoleWait:
        return cls(delay=float(wait["Delay"]), budget=float(wait["Delay"] * wait["MaxAttempts"]))


@dataclass(frozen=True)
class ConsoleKeys:
    keys: list[str]
    error: str | None = None  # why the console output could not be read


def poll_host_keys(ec2: Any, instance_id: str, wait: ConsoleWait, sleep: Callable[[float], None]) -> ConsoleKeys:
    """Read the console until it shows the host-key block or the shared budget is spent."""
    while True:
        try:
            keys = parse_host_keys(console_output(ec2, instance_id, wait))
        except (ClientError, BotoCoreError) as exc:
            return ConsoleKeys([], error_text(exc))
        if keys or wait.waited >= wait.budget:
            return ConsoleKeys(keys)
        sleep(wait.delay)
        wait.waited += wait.delay


def console_output(ec2: Any, instance_id: str, wait: ConsoleWait) -> str:
    # Without Latest=True EC2 returns a snapshot taken shortly after boot, before cloud-init
    # prints the keys.
    if wait.latest:
        try:
            return str(ec2.get_console_output(InstanceId=instance_id, Latest=True).get("Output") or "")
        except ClientError as exc:
            if error_code(exc) not in LATEST_UNSUPPORTED:
                raise
            wait.latest = False
    return str(ec2.get_console_output(InstanceId=instance_id).get("Output") or "")


def parse_host_keys(console: str) -> list[str]:
    match = HOST_KEYS_BLOCK.search(console or "")
    if not match:
        return []
    keys = []
    for line in match.group(1).splitlines():
        parts = line.strip().split()
        if len(parts) >= 2 and (parts[0].startswith(("ssh-", "ecdsa-", "sk-"))):
            keys.append(" ".join(parts[:2]))
    return keys


def found_text(found: ConsoleKeys, name: str, waited: float) -> str:
    """What reading `name`'s console came to, for the provider's events."""
    if found.keys:
        return f"host key of {name} from the console output"
    if found.error:
        return f"host key of {name}: console output unreadable ({found.error}); trusting on first use"
    return f"host key of {name} not in the console output after {waited:g}s; trusting on first use"
