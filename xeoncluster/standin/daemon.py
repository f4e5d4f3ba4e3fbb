"""The stand-in's long-running process, started inside its network namespace by `start`:
moto on loopback, the fleet of containers, IMDS, the package mirror and the control endpoint."""
from __future__ import annotations

import json
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from xeoncluster.standin import control
from xeoncluster.standin.containers import remove_tree
from xeoncluster.standin.dns import serve_dns
from xeoncluster.standin.faults import FaultsFile
from xeoncluster.standin.images import ImageStore
from xeoncluster.standin.imds import serve_imds
from xeoncluster.standin.network import Network
from xeoncluster.standin.paths import Paths
from xeoncluster.standin.repos import serve_directory

MOTO_PORT = 5000
CONTROL_PORT = 5001
MIRROR_PORT = 8080


@dataclass(frozen=True)
class Plan:
    """What `start` prepared on the host for the daemon (written as JSON to the run dir)."""
    base_tree: str
    base_ami: str
    docroot: str
    netns: str
    bridge: str
    gateway: str

    @property
    def network(self) -> Network:
        return Network(self.netns, self.bridge, self.gateway)


@dataclass(frozen=True)
class Ready:
    """state.json: how the other commands find the running daemon."""
    pid: int
    moto_url: str
    control_port: int
    mirror_url: str
    gateway: str
    netns: str
    bridge: str
    base_ami: str


def plan_file(paths: Paths) -> Path:
    return paths.run / "plan.json"


def main(paths: Paths) -> None:
    plan = Plan(**json.loads(plan_file(paths).read_text()))
    log = _logger()
    logging.getLogger("werkzeug").setLevel(logging.WARNING)  # one line per API call otherwise
    from xeoncluster.standin.moto_hooks import use_only_base_ami
    use_only_base_ami(paths.run, plan.base_ami)  # before moto is imported
    from xeoncluster.standin.fleet import Fleet
    from xeoncluster.standin.moto_hooks import Hooks, MotoState, seed_default_vpc_internet_route, seed_ubuntu_parameter
    from xeoncluster.standin.moto_iam import RoleSessions

    faults = FaultsFile(paths.faults_file)
    images = ImageStore(paths.layers)
    for name in ("base", plan.base_ami):
        images.register(name, (Path(plan.base_tree),))
    fleet = Fleet(plan.network, paths.instances, images, faults.read, MotoState(), log,
                  f"http://{plan.gateway}:{MIRROR_PORT}/")
    hooks = Hooks(fleet, faults.read)
    hooks.install()
    seed_ubuntu_parameter(plan.base_ami)
    seed_default_vpc_internet_route()
    moto, gate = serve_moto(MOTO_PORT, hooks.placement)
    threading.Thread(target=fleet.watch, daemon=True).start()
    resolver = serve_dns(plan.network.dns, plan.network.vpc_cidr)
    sessions = RoleSessions()
    servers = [moto, serve_imds(plan.network.imds, fleet.by_address,
                                lambda node: sessions.for_instance(node.launch.instance_id, "us-east-1")),
               serve_directory(plan.gateway, MIRROR_PORT, Path(plan.docroot))]
    stopping = threading.Event()
    servers.append(control.serve_control(CONTROL_PORT, _routes(fleet, faults, stopping, gate)))
    signal.signal(signal.SIGTERM, lambda *_: stopping.set())
    _write_ready(paths, plan)
    log(f"ready: moto on 127.0.0.1:{MOTO_PORT}, mirror on {plan.gateway}:{MIRROR_PORT}")
    stopping.wait()
    started = time.monotonic()
    log("shutting down: stopping containers")
    fleet.shutdown()
    log(f"containers removed in {time.monotonic() - started:.1f} s")
    for server in servers:
        server.shutdown()
    resolver.close()
    remove_tree(paths.lib)
    log(f"stopped in {time.monotonic() - started:.1f} s")


def serve_moto(port: int, placement: Any = None) -> tuple[Any, Any]:
    """moto's server on every address of the namespace: the CLI reaches it on loopback, instances on
    the bridge's address (their AWS_ENDPOINT_URL). Calls with an instance role's credentials or an
    IAM user's key pass the IAM gate, which evaluates their policies and boundary as AWS would."""
    from moto.server import DomainDispatcherApplication, create_backend_app
    from werkzeug.serving import make_server

    from xeoncluster.standin.iam_gate import IamGate
    from xeoncluster.standin.moto_iam import caller
    from xeoncluster.standin.moto_lookup import MotoLookup
    from xeoncluster.standin.one_at_a_time import OneAtATime

    gate = IamGate(DomainDispatcherApplication(create_backend_app), caller,
                   lambda region: MotoLookup(region, placement))
    server = make_server("0.0.0.0", port, OneAtATime(gate), threaded=True)
    threading.Thread(target=server.serve_forever, name="moto", daemon=True).start()
    return server, gate


def _routes(fleet: Any, faults: FaultsFile, stopping: threading.Event, gate: Any) -> dict[str, control.Handler]:
    def interrupt(body: dict[str, Any]) -> Any:
        seconds = body.get("seconds")
        return fleet.interrupt(body["instance_id"], None if seconds is None else float(seconds))

    def shutdown(body: dict[str, Any]) -> Any:
        stopping.set()
        return {"stopping": True}

    return {"status": lambda body: {"instances": fleet.summary(), "faults": asdict(faults.read()),
                                    "role_calls": {"allowed": dict(gate.allowed), "denied": dict(gate.denied)}},
            "interrupt": interrupt, "shutdown": shutdown,
            "rebalance": lambda body: fleet.recommend_rebalance(body["instance_id"])}


def _write_ready(paths: Paths, plan: Plan) -> None:
    ready = Ready(os.getpid(), f"http://127.0.0.1:{MOTO_PORT}", CONTROL_PORT,
                  f"http://{plan.gateway}:{MIRROR_PORT}/", plan.gateway, plan.netns, plan.bridge, plan.base_ami)
    tmp = paths.state_file.with_suffix(".tmp")
    tmp.write_text(json.dumps(asdict(ready), indent=2))
    os.replace(tmp, paths.state_file)


def _logger() -> Callable[[str], None]:
    def log(message: str) -> None:
        print(f"{time.strftime('%H:%M:%S')} {message}", file=sys.stderr, flush=True)
    return log
