"""The stack's python is a minimum checked against what the node really runs (Ubuntu 24.04 has 3.12,
Debian 12 has 3.11): the venv playbook's check, run by real bash with this machine's /usr/bin/python3."""
from __future__ import annotations

import subprocess

import pytest

from xeoncluster.cluster.playbook import PlaybookRunner, load_playbook
from xeoncluster.core.errors import RemoteError
from xeoncluster.core.paths import project_file
from xeoncluster.core.stacks import get_stack
from xeoncluster.providers.base import Node
from xeoncluster.remote.shell import CommandResult

NODE = Node(name="node0", id="n0", private_ip="10.0.0.2", ssh_host="", role="master", market="local")


class LocalBash:
    def run(self, nodes: list[Node], command: str) -> dict[str, CommandResult]:
        proc = subprocess.run(["bash", "-c", command], capture_output=True, text=True, timeout=60)
        return {nodes[0].name: CommandResult(nodes[0].name, proc.returncode, proc.stdout, proc.stderr)}


def check_python(minimum: str) -> None:
    book = load_playbook(project_file("playbooks", "20-venv.yaml"))
    [check] = [step for step in book.steps if step.name.startswith("check the system python")]
    variables = {"python": f">={minimum}", "python_min": minimum.replace(".", ", "), "stack": "stock", "venv": "~/x"}
    runner = PlaybookRunner(LocalBash(), variables, apply_os_steps=True, log=lambda text: None)
    runner.run_step(book.name, check, [NODE])


def test_the_shipped_stacks_accept_this_machines_python() -> None:
    for name in ("stock", "intel"):
        stack = get_stack(name)
        check_python(".".join(str(v) for v in stack.python_min))


def test_an_older_system_python_is_refused_by_name() -> None:
    with pytest.raises(RemoteError, match=r"the stock stack needs python >=3\.99, but /usr/bin/python3 is older"):
        check_python("3.99")
