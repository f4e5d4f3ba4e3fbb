"""A recording stand-in for the SSH seam (`xeoncluster.remote.shell.NodeShell`) for AWS lifecycle tests.

moto hands out addresses that must never be dialled, so every CLI test under moto replaces
FabricShell with this. It records every command and file per node, answers as a fresh Ubuntu node
would (success; the OS-package probe reports the packages missing, so the install step runs),
pins a fake host key per node, and can raise at a chosen point to inject SSH failures or Ctrl-C.
"""
from __future__ import annotations

import base64
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from xeoncluster.core.errors import RemoteError
from xeoncluster.providers.base import Node
from xeoncluster.remote.shell import CommandResult, RemoteFile, SshIdentity

PROBE = re.compile(r"\|\| echo MISSING ([^\s;]+)")
MESH_MARK = "ssh -o BatchMode=yes"


@dataclass(frozen=True)
class Call:
    method: str  # wait_ready | scan_host_key | run | stream | put_files | put | get
    node: str
    command: str = ""


Trigger = Callable[[Call], bool]


# The agents' code, state and start on the master (runs/client.py, runs/host.py).
AGENT_MARKS = ("xeoncluster/agent", "xeoncluster/app", "xeoncluster.agent")


@dataclass
class ShellLog:
    """Shared by every RecordingShell a test creates (`up`, `status`, ... each make their own)."""

    calls: list[Call] = field(default_factory=list)
    files: dict[str, list[RemoteFile]] = field(default_factory=dict)
    identities: list[SshIdentity] = field(default_factory=list)
    closed: int = 0
    faults: list[tuple[Trigger, BaseException]] = field(default_factory=list)
    exit_codes: list[tuple[Trigger, int, str]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    # -- set-up -------------------------------------------------------------------------------
    def factory(self, identity: SshIdentity) -> RecordingShell:
        self.identities.append(identity)
        return RecordingShell(self, identity)

    def raise_when(self, trigger: Trigger, error: BaseException) -> None:
        """Raise `error` (once) from the first call matching `trigger`."""
        self.faults.append((trigger, error))

    def exit_with(self, trigger: Trigger, code: int, stderr: str = "") -> None:
        """Commands matching `trigger` exit with `code` (every time)."""
        self.exit_codes.append((trigger, code, stderr))

    # -- what happened ------------------------------------------------------------------------
    def commands(self, node: str) -> list[str]:
        return [c.command for c in self.calls if c.node == node and c.method in ("run", "stream")]

    def playbook_commands(self, node: str) -> list[str]:
        """What configured the node: not the mesh check, nor the agents' code, state and start."""
        return [c for c in self.commands(node) if MESH_MARK not in c and c not in ("true", "echo $HOME")
                and not any(mark in c for mark in AGENT_MARKS)]

    def file_text(self, node: str, suffix: str) -> str:
        """The last file put on `node` whose path ends with `suffix`, as the node would `cat` it."""
        put = [f for f in self.files.get(node, []) if f.path.endswith(suffix)]
        return put[-1].text if put else ""

    def nodes_with(self, method: str) -> list[str]:
        return sorted({c.node for c in self.calls if c.method == method}, key=lambda n: int(n[4:]))

    # -- used by RecordingShell -----------------------------------------------------------------
    def record(self, call: Call) -> None:
        with self.lock:
            self.calls.append(call)
            for index, (trigger, error) in enumerate(self.faults):
                if trigger(call):
                    del self.faults[index]
                    raise error

    def answer(self, call: Call) -> CommandResult:
        for trigger, code, stderr in self.exit_codes:
            if trigger(call):
                return CommandResult(call.node, code, "", stderr)
        if call.command.startswith("echo $HOME; cat ") and "version.json" in call.command:
            return CommandResult(call.node, 0, "\n" + self.file_text(call.node, "agent/version.json"), "")
        missing = PROBE.findall(call.command)
        return CommandResult(call.node, 0, "".join(f"MISSING {m}\n" for m in missing), "")


def listed_record(run: str, text: str, cluster: str = "t1") -> str:
    """One run record as the master answers the CLI's listing of them: its path, its text, a separator."""
    return f"/home/ubuntu/xeoncluster/agent/clusters/{cluster}/runs/{run}/run.json\n{text}\x1e"


def fake_host_key(node: Node) -> str:
    body = base64.b64encode(b"\x00\x00\x00\x0bssh-ed25519" + node.id.encode().ljust(32, b"\x00")).decode()
    return f"ssh-ed25519 {body}"


class RecordingShell:
    """Answers like fresh nodes, and checks host keys as strictly as FabricShell: each node presents
    a key derived from its instance id (a replaced instance has a new key), and every command or file
    transfer is refused unless the cluster's known_hosts pins exactly that key."""

    def __init__(self, log: ShellLog, identity: SshIdentity) -> None:
        self.log = log
        self.identity = identity

    def _check_pinned(self, node: Node) -> None:
        known = self.identity.known_hosts
        lines = known.read_text().splitlines() if known.exists() else []
        pinned = next((line.split(" ", 1)[1] for line in lines if line.split(",")[0] == node.name), None)
        if pinned is None:
            raise RemoteError(f"{node.name} ({node.ssh_host}) has no pinned host key; refusing to connect")
        if pinned != fake_host_key(node):
            raise RemoteError(f"{node.name} ({node.ssh_host}) presented a host key that does not match the "
                              "pinned one", hint="the node was replaced or someone is intercepting")

    def wait_ready(self, nodes: list[Node], timeout: float) -> None:
        for node in nodes:
            self.log.record(Call("wait_ready", node.name))

    def wait_login(self, nodes: list[Node], timeout: float, progress: Callable[[str], None]) -> None:
        for node in nodes:
            self.log.record(Call("wait_login", node.name))

    def scan_host_key(self, node: Node) -> str:
        self.log.record(Call("scan_host_key", node.name))
        return fake_host_key(node)

    def run(self, nodes: list[Node], command: str) -> dict[str, CommandResult]:
        results = {}
        for node in nodes:
            self._check_pinned(node)
            call = Call("run", node.name, command)
            self.log.record(call)
            results[node.name] = self.log.answer(call)
        return results

    def stream(self, nodes: list[Node], command: str, sink: Callable[[str, str], None]) -> dict[str, CommandResult]:
        results = {}
        for node in nodes:
            self._check_pinned(node)
            call = Call("stream", node.name, command)
            self.log.record(call)
            results[node.name] = result = self.log.answer(call)
            for line in result.stdout.splitlines():
                sink(node.name, line)
        return results

    def put_files(self, node: Node, files: list[RemoteFile]) -> None:
        self._check_pinned(node)
        for item in files:
            self.log.record(Call("put_files", node.name, item.path))
        with self.log.lock:
            self.log.files.setdefault(node.name, []).extend(files)

    def put(self, node: Node, local: Path, remote_path: str) -> None:
        self._check_pinned(node)
        self.log.record(Call("put", node.name, remote_path))

    def get(self, node: Node, remote_path: str, local: Path) -> None:
        self._check_pinned(node)
        self.log.record(Call("get", node.name, remote_path))
        local.parent.mkdir(parents=True, exist_ok=True)
        local.write_text("")

    def close(self) -> None:
        self.log.closed += 1
