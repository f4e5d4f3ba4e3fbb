"""`down` and `status` without (readable) state find local leftovers by name, never AWS by default."""
from __future__ import annotations

import subprocess
from pathlib import Path

from tests.conftest import CliResult, run_cli
from tests.e2e.conftest import LocalEnv, leftovers
from xeoncluster.cluster.state import StateDir
from xeoncluster.providers.local.net import bridge_name

SUBNET = "10.215.2.0/24"
# Old code went to AWS here; make sure nothing can leave this machine if it does.
NO_AWS = {"AWS_EC2_METADATA_DISABLED": "true", "AWS_ENDPOINT_URL": "http://127.0.0.1:9",
          "AWS_ACCESS_KEY_ID": "", "AWS_SECRET_ACCESS_KEY": "", "AWS_PROFILE": ""}


def bare(env: LocalEnv, tmp_path: Path, *args: str) -> CliResult:
    """The CLI with no --config and no cluster.yaml: nothing says `local` or where local.root is."""
    return run_cli(list(args), env.home, cwd=tmp_path, env_extra=NO_AWS)


def own_subnet_up(env: LocalEnv, name: str) -> None:
    config = env.base / "lost-state.yaml"
    config.write_text(f"provider: local\nlocal:\n  subnet: {SUBNET}\n  root: {env.root}\n")
    result = run_cli(["--config", str(config), "up", "--name", name, "--nodes", "2"], env.home, cwd=env.base)
    assert result.code == 0, result.err


def bridge_exists() -> bool:
    return subprocess.run(["ip", "link", "show", bridge_name(SUBNET)], capture_output=True).returncode == 0


def test_down_without_state_removes_local_leftovers_root_and_bridge(local_env: LocalEnv, warm_image: str,
                                                                    tmp_path: Path) -> None:
    name = "e2elost"
    own_subnet_up(local_env, name)
    try:
        StateDir(name, home=local_env.home).remove()
        down = bare(local_env, tmp_path, "down", "--name", name)
        assert down.code == 0, down.err
        assert f"xc-{name}-node0" in down.out and f"xc-{name}-node1" in down.out
        assert leftovers(local_env, name) == {"namespaces": [], "processes": [], "mounts": [], "files": []}
        assert not bridge_exists()
        again = bare(local_env, tmp_path, "down", "--name", name)
        assert again.code == 0, again.err
        assert "nothing to remove" in again.out and "pass --provider aws to search AWS by tag" in again.out
        status = bare(local_env, tmp_path, "status", "--name", name)
        assert status.code == 1
        assert status.err.startswith(f"error: cluster '{name}' (local) was removed by `down` at "), status.err
        assert status.err.strip().endswith(f"`xeoncluster up --name {name}` starts it again"), status.err
    finally:
        local_env.cli("down", "--name", name)


def test_corrupt_state_status_and_down_find_the_local_nodes(local_env: LocalEnv, warm_image: str,
                                                            tmp_path: Path) -> None:
    name = "e2ecorrupt"
    own_subnet_up(local_env, name)
    try:
        (local_env.home / "clusters" / name / "state.json").write_text("{not json")
        status = bare(local_env, tmp_path, "status", "--name", name, "--json")
        assert status.code == 0 and '"provider": "local"' in status.out, status.err
        down = bare(local_env, tmp_path, "down", "--name", name)
        assert down.code == 0, down.err
        assert leftovers(local_env, name) == {"namespaces": [], "processes": [], "mounts": [], "files": []}
        assert not bridge_exists()
    finally:
        local_env.cli("down", "--name", name)


def test_down_after_a_rolled_back_up_or_of_a_cluster_never_made(local_env: LocalEnv, tmp_path: Path) -> None:
    rolled_back = StateDir("e2erolled", home=local_env.home)
    rolled_back.create()
    rolled_back.logs.mkdir(parents=True)
    (rolled_back.logs / "up-20260101-000000-1.log").write_text("up failed at step 'launch master'\n")
    for name in ("e2erolled", "e2enever"):
        down = bare(local_env, tmp_path, "down", "--name", name)
        assert down.code == 0, down.err
        assert f"nothing to remove for '{name}'" in down.out
        assert not (local_env.home / "clusters" / name).exists()
