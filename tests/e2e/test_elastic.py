"""Issue 37 on real local nodes: a run that loses a node it cannot replace (the local provider's capacity
fault) trains on with the node it has, with the same global batch, and grows back once capacity returns.
Its loss curve stays within the noise of an uninterrupted run's at the same steps: the distance another
seed puts between two uninterrupted runs. And a node that vanishes
without a word ends a command there within a minute."""
from __future__ import annotations

import json
import os
import re
import statistics
import subprocess
import sys
import time

from tests.e2e.conftest import LocalEnv, leftovers
from tests.e2e.test_recovery import lose_node, wait_for_end
from xeoncluster.providers.local.provider import NO_CAPACITY

STEPS = 400
SAVE_STEPS = 40
# Without the demo's evaluation before training: on two ranks it sends the run down another curve than
# the same run without it (noted in issue 37's note), which a comparison across worlds would take for the
# shrink's doing.
TRAIN = ("--max-steps", str(STEPS), "--save-steps", str(SAVE_STEPS), "--no-eval-before")
STEP_LINE = re.compile(r"^(?:\[0\] )?step (\d+)/\d+\s+loss ([0-9.]+)", re.MULTILINE)  # one rank: no label


def losses(text: str) -> dict[int, float]:
    """Rank 0's logged loss by step. A launch's first logged loss after a resume averages fewer steps than
    the uninterrupted run's at that step: each relaunch's first one is left out."""
    found: dict[int, float] = {}
    for number, launch in enumerate(text.split("mpiexec")[1:]):
        points = [(int(step), float(loss)) for step, loss in STEP_LINE.findall(launch)]
        found |= dict(points[1:] if number else points)
    return found


def wait_for(what: str, check, timeout: float = 600) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"never: {what}"
        time.sleep(0.5)


def test_a_run_without_capacity_for_a_lost_node_trains_on_and_grows_back(local_env: LocalEnv,
                                                                         warm_image: str) -> None:
    name = "e2eshrink"
    local_env.ok("up", "--name", name, "--nodes", "2")
    runs = local_env.home / "clusters" / name / "runs"
    no_capacity = local_env.root / "clusters" / name / NO_CAPACITY
    try:
        refused = local_env.cli("train", "squad", "--name", name, "--demo", "--min-nodes", "3")
        assert refused.code == 2 and f"--min-nodes 3 is more than cluster {name}'s 2 node(s)" in refused.err
        assert not runs.exists() or not list(runs.iterdir())
        for run, seed in (("whole", "42"), ("reseeded", "43")):  # the second: what randomness alone moves
            local_env.ok("train", "squad", "--name", name, "--demo", "--run", run, "--", *TRAIN, "--seed", seed,
                         timeout=900)
        local_env.ok("train", "squad", "--name", name, "--demo", "--run", "elastic", "--detach", "--", *TRAIN)
        log = runs / "elastic" / "train.log"
        wait_for("the first checkpoint", lambda: max(losses(log.read_text() if log.exists() else ""), default=0)
                 > SAVE_STEPS)
        no_capacity.touch()
        lose_node(name, "node1")
        wait_for("the run trained on alone", lambda: "training on with 1 node" in log.read_text()
                 and STEP_LINE.search(log.read_text().split("training on with 1 node")[-1]) is not None)
        assert "(1/2 nodes)" in local_env.ok("runs", "--name", name).out
        no_capacity.unlink()
        record = wait_for_end(local_env, name, "elastic")
        assert record["state"] == "succeeded", record
        text = log.read_text()
        stored = json.loads((runs / "elastic" / "run.json").read_text())
        [restart] = stored["restarts"]
        assert restart["nodes_after"] == 1 and restart["kind"] == "interruption", restart
        [growth] = stored["growths"]
        assert growth["nodes"] == "node1" and growth["to_nodes"] == 2, growth
        assert "global batch 32 kept on 1 ranks (set for 2): 16 per rank x 2 accumulation steps" in text, text[-4000:]
        assert "grew back: node1 joined" in text
        # The growth's job started ahead on both nodes and waited, held, while the one rank trained on (issue 38).
        assert "agent: released the job started ahead on node0, node1" in text, text[-4000:]
        assert [n["name"] for n in local_env.state(name)["nodes"]] == ["node0", "node1"]
        whole, reseeded = (losses((runs / run / "train.log").read_text()) for run in ("whole", "reseeded"))
        elastic = losses(text)
        shared = sorted(set(whole) & set(elastic) & set(reseeded))
        assert len(shared) >= 10, (whole, elastic)
        noise = statistics.mean(abs(reseeded[s] - whole[s]) for s in shared)
        apart = [abs(elastic[s] - whole[s]) for s in shared]
        # A shrink that costs the curve nothing moves it as far as another seed does, no less: with one seed to
        # measure by, half the time it would be a little farther. Twice that seed's distance is the band; the
        # curve with the evaluation before training (see TRAIN) was five times out.
        assert statistics.mean(apart) <= 2 * noise, (noise, list(zip(shared, apart, strict=True)))
    finally:
        no_capacity.unlink(missing_ok=True)
        local_env.cli("down", "--name", name, "--force")
    assert leftovers(local_env, name)["namespaces"] == []


def test_a_command_on_a_node_that_vanishes_without_a_word_fails_within_a_minute(local_env: LocalEnv,
                                                                                   warm_image: str) -> None:
    """A reclaimed machine sends no reset: its link goes first, then everything on it. The CLI's command
    there fails once its keepalives go unanswered, not after the kernel's 15 minutes of retransmissions."""
    name = "e2evanish"
    local_env.ok("up", "--name", name, "--nodes", "2")
    try:
        held = subprocess.Popen(local_env_argv(local_env, "exec", "--name", name, "--node", "node1", "--", "sleep 900"),
                                env={**os.environ, "XEONCLUSTER_HOME": str(local_env.home)}, cwd=local_env.base,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        time.sleep(5)
        assert held.poll() is None
        ns = f"xc-{name}-node1"
        links = subprocess.run(["ip", "-n", ns, "-o", "link", "show"], capture_output=True, text=True).stdout
        for link in {line.split(": ")[1].split("@")[0] for line in links.splitlines()} - {"lo"}:
            subprocess.run(["ip", "-n", ns, "link", "set", link, "down"], check=True)
        cut = time.monotonic()
        lose_node(name, "node1")
        _, err = held.communicate(timeout=300)
        assert held.returncode != 0 and time.monotonic() - cut < 120, err
    finally:
        local_env.cli("down", "--name", name, "--force")


def local_env_argv(env: LocalEnv, *args: str) -> list[str]:
    return [sys.executable, "-m", "xeoncluster.cli", "--config", str(env.config), *args]
