"""The host-side commands: start (build what is missing, make the namespace, start the daemon
in it), stop (remove everything, also after a crash), run, config, status, interrupt, faults."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

from xeoncluster.standin import cgroups, control
from xeoncluster.standin.clusterconfig import write_config
from xeoncluster.standin.containers import mounts_under, remove_tree, stop_process, unmount
from xeoncluster.standin.daemon import MIRROR_PORT, Plan, plan_file
from xeoncluster.standin.faults import Faults, FaultsFile
from xeoncluster.standin.moto_hooks import base_ami_id
from xeoncluster.standin.network import Network, enter_netns, return_to
from xeoncluster.standin.osimage import Recipe, ensure_base
from xeoncluster.standin.paths import Paths
from xeoncluster.standin.repos import build_docroot, ensure_apt_repo, ensure_simple_index, ensure_wheelhouse

# The folder that holds this package: the daemon must run this same code, installed or not.
PACKAGE_PARENT = Path(__file__).resolve().parents[2]
READY_TIMEOUT = 90.0


def network(paths: Paths) -> Network:
    return Network(paths.netns, paths.bridge)


def read_state(paths: Paths) -> dict[str, Any] | None:
    try:
        state = json.loads(paths.state_file.read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return None
    return state if _alive(state["pid"]) else None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


# -- start ------------------------------------------------------------------------------------------
def start(paths: Paths, faults: Faults, log: Callable[[str], None] = print) -> dict[str, Any]:
    state = read_state(paths)
    if state is not None:
        log(f"the stand-in is already running (daemon pid {state['pid']}, moto at {state['moto_url']})")
        return state
    stop(paths, log=lambda m: None)  # leftovers of a crashed run
    timings = _prepare_host(paths, log)
    net = network(paths)
    net.create()
    if net.has_default_route():
        raise RuntimeError(f"namespace {net.netns} has a default route; refusing to start")
    FaultsFile(paths.faults_file).write(faults)
    state = _start_daemon(paths, net)
    write_config(paths.config_file, state["gateway"], state["mirror_url"])
    log(f"stand-in running: moto {state['moto_url']} (namespace {net.netns}), mirror {state['mirror_url']}, "
        f"base image {state['base_ami']}; {', '.join(f'{k} {v:.1f} s' for k, v in timings.items())}")
    return state


def _prepare_host(paths: Paths, log: Callable[[str], None]) -> dict[str, float]:
    """Builds needing the host's network (Debian, PyPI) happen here, before the namespace exists."""
    timings: dict[str, float] = {}
    t0 = time.monotonic()
    base = ensure_base(paths.cache, Recipe(), log)
    timings["base image" + (" build" if base.built else " (cached)")] = time.monotonic() - t0
    t0 = time.monotonic()
    apt_repo = ensure_apt_repo(paths.cache, base.path, log=log)
    house = ensure_wheelhouse(paths.cache, log=log)
    simple = ensure_simple_index(paths.cache, house)
    timings["package mirror"] = time.monotonic() - t0
    for sub in (paths.run, paths.instances, paths.layers):
        sub.mkdir(parents=True, exist_ok=True)
    docroot = paths.run / "www"
    build_docroot(docroot, apt_repo, house, simple)
    net = network(paths)
    plan = Plan(str(base.path), base_ami_id(base.path.name.removeprefix("base-")), str(docroot),
                net.netns, net.bridge, net.gateway)
    plan_file(paths).write_text(json.dumps(asdict(plan), indent=2))
    return timings


def _start_daemon(paths: Paths, net: Network) -> dict[str, Any]:
    paths.state_file.unlink(missing_ok=True)
    env = {**os.environ, "PYTHONPATH": str(PACKAGE_PARENT), **paths.env()}
    with open(paths.daemon_log, "ab") as out:
        process = subprocess.Popen([*net.nsenter_prefix(), sys.executable, "-P", "-m", "xeoncluster.standin", "daemon"],
                                   cwd="/", env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=out,
                                   start_new_session=True)
    deadline = time.monotonic() + READY_TIMEOUT
    while time.monotonic() < deadline:
        state = read_state(paths)
        if state is not None:
            return state
        if process.poll() is not None:
            raise RuntimeError(f"the stand-in daemon exited ({process.returncode}); see {paths.daemon_log}")
        time.sleep(0.2)
    raise RuntimeError(f"the stand-in daemon did not get ready in {READY_TIMEOUT:.0f} s; see {paths.daemon_log}")


# -- stop -------------------------------------------------------------------------------------------
def stop(paths: Paths, log: Callable[[str], None] = print) -> None:
    """Idempotent: asks the daemon to clean up, then removes whatever is still there."""
    state = read_state(paths)
    if state is not None:
        _stop_daemon(paths, state)
    for pid_file in paths.instances.glob("*/nspawn.pid"):
        stop_process(int(pid_file.read_text() or 0), 20.0, None)
    instances = _instance_names(paths)
    for name in instances:
        cgroups.kill(name)
        cgroups.remove(name)
    for point in sorted(mounts_under(paths.lib), reverse=True):
        unmount(Path(point))
    remove_tree(paths.lib)
    network(paths).destroy()
    shutil.rmtree(paths.run, ignore_errors=True)
    left = _leftovers(paths) + [f"cgroup {group}" for group in cgroups.leftovers(instances)]
    log("stand-in stopped; nothing left" if not left else f"left over: {left}")


def _instance_names(paths: Paths) -> list[str]:
    return [d.name for d in paths.instances.iterdir() if d.is_dir()] if paths.instances.is_dir() else []


def _stop_daemon(paths: Paths, state: dict[str, Any]) -> None:
    try:
        in_namespace(paths, lambda: control.call(state["control_port"], "shutdown", timeout=10))
    except Exception:  # noqa: BLE001 - fall back to a signal
        os.kill(state["pid"], 15)
    deadline = time.monotonic() + 60
    while _alive(state["pid"]) and time.monotonic() < deadline:
        time.sleep(0.2)
    if _alive(state["pid"]):
        os.kill(state["pid"], 9)


def _leftovers(paths: Paths) -> list[str]:
    found = [f"mount {m}" for m in mounts_under(paths.lib)]
    found += [f"namespace {paths.netns}"] if network(paths).exists() else []
    found += [f"dir {p}" for p in (paths.lib, paths.run) if p.exists()]
    return found


# -- the other commands -----------------------------------------------------------------------------
def aws_env(state: dict[str, Any]) -> dict[str, str]:
    return {"AWS_ENDPOINT_URL": state["moto_url"], "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing", "AWS_REGION": "us-east-1", "AWS_DEFAULT_REGION": "us-east-1",
            "AWS_EC2_METADATA_DISABLED": "true"}


def run(paths: Paths, command: list[str]) -> None:
    state = _require(paths)
    env = {k: v for k, v in os.environ.items() if k not in ("AWS_PROFILE", "AWS_DEFAULT_PROFILE")}
    env.update(aws_env(state))
    argv = [*network(paths).nsenter_prefix(), *command]
    os.execvpe(argv[0], argv, env)


def config_path(paths: Paths) -> Path:
    if not paths.config_file.exists():
        net = network(paths)
        write_config(paths.config_file, net.gateway, f"http://{net.gateway}:{MIRROR_PORT}/")
    return paths.config_file


def status(paths: Paths) -> dict[str, Any]:
    state = read_state(paths)
    if state is None:
        return {"running": False}
    return {"running": True, **state, **in_namespace(paths, lambda: control.call(state["control_port"], "status"))}


def rebalance(paths: Paths, instance_id: str) -> Any:
    state = _require(paths)
    return in_namespace(paths, lambda: control.call(state["control_port"], "rebalance", {"instance_id": instance_id}))


def interrupt(paths: Paths, instance_id: str, seconds: float | None) -> Any:
    state = _require(paths)
    return in_namespace(paths, lambda: control.call(state["control_port"], "interrupt",
                                             {"instance_id": instance_id, "seconds": seconds}))


def set_faults(paths: Paths, changes: dict[str, Any]) -> Faults:
    file = FaultsFile(paths.faults_file)
    faults = file.read().updated(changes)
    file.write(faults)
    return faults


def in_namespace(paths: Paths, action: Callable[[], Any]) -> Any:
    previous = enter_netns(network(paths).netns_path)
    try:
        return action()
    finally:
        return_to(previous)


def _require(paths: Paths) -> dict[str, Any]:
    state = read_state(paths)
    if state is None:
        raise SystemExit("the stand-in is not running: scripts/aws-standin.sh start")
    return state
