"""An idle local cluster removes itself: `up --idle-minutes 1`, an SSH login that holds it, a 10-step
run; within 4 minutes of the run's end the namespaces are gone, `status`, `runs` and `down` say why,
and the run's results are kept."""
from __future__ import annotations

import json
import subprocess
import time

from tests.e2e.conftest import LocalEnv, leftovers


def watch_status(env: LocalEnv, name: str) -> str:
    return str(json.loads(env.ok("status", "--name", name, "--json").out)["autostop"])


def wait_for(condition, what: str, timeout: float) -> float:  # type: ignore[no-untyped-def]
    started = time.monotonic()
    while not condition():
        assert time.monotonic() - started < timeout, f"{what} within {timeout:.0f}s"
        time.sleep(1)
    return time.monotonic() - started


def watchers(env: LocalEnv, name: str) -> list[str]:
    found = subprocess.run(["pgrep", "-af", f"xeoncluster.agent watch {name}"], capture_output=True, text=True)
    return found.stdout.splitlines()


def test_an_idle_cluster_removes_itself_and_says_why(local_env: LocalEnv, warm_image: str) -> None:
    name = "e2eidle"
    up = local_env.ok("up", "--name", name, "--nodes", "2", "--idle-minutes", "1")
    assert "autostop: the cluster removes itself after 1 idle minute" in up.out
    try:
        ssh_config = local_env.home / "clusters" / name / "ssh_config"
        login = subprocess.Popen(["ssh", "-F", str(ssh_config), "-tt", "node1", "sleep 600"],
                                 stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            wait_for(lambda: "SSH session on node1" in watch_status(local_env, name), "the login was seen", 60)
        finally:
            login.kill()
        local_env.ok("train", "squad", "--name", name, "--demo", "--run", "idle", "--", "--max-steps", "10")
        ended = time.monotonic()
        assert len(watchers(local_env, name)) == 1
        # The namespaces go before the watch agent has written why and left: a `down` in between
        # (the finally below) would find the cluster still there, and be its remover.
        wait_for(lambda: not leftovers(local_env, name)["namespaces"] and not watchers(local_env, name),
                 "the cluster removed itself", 240)
        assert time.monotonic() - ended < 240
    finally:
        local_env.cli("down", "--name", name, "--force")
    assert leftovers(local_env, name)["namespaces"] == [] and watchers(local_env, name) == []
    status = local_env.cli("status", "--name", name)
    assert status.code == 1 and "cluster 'e2eidle' (local) removed itself after 1 idle minute at" in status.err
    runs = local_env.ok("runs", "--name", name)
    assert "idle" in runs.out and "removed itself after 1 idle minute" in runs.out + runs.err
    assert (local_env.home / "results" / name / "idle" / "metrics.json").exists()
    assert (local_env.home / "storage" / name / "runs" / "idle" / "results" / "metrics.json").exists()
    again = local_env.ok("down", "--name", name)
    assert "nothing to remove: cluster 'e2eidle' (local) removed itself after 1 idle minute" in again.out
