"""python -m xeoncluster.standin start|stop|run|config|status|interrupt|rebalance|faults|user (and `daemon`)."""
from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from xeoncluster.standin import lifecycle
from xeoncluster.standin.faults import Faults, parse_assignment
from xeoncluster.standin.iam_users import BOUNDARY_NAME, UserKeys, admin_iam, make_user, read_document
from xeoncluster.standin.paths import Paths


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="aws-standin", description="EC2 stand-in: moto + booted nspawn containers")
    sub = p.add_subparsers(dest="command", required=True)
    start = sub.add_parser("start", help="start everything (safe to run twice)")
    start.add_argument("--scale", type=float, help="latency scale factor (boot 20 s and AMI 120 s are divided by it)")
    start.add_argument("--faults", help="fault knobs as JSON, e.g. '{\"dpkg_lock_seconds\": 30}'")
    sub.add_parser("stop", help="remove everything (idempotent)")
    run = sub.add_parser("run", help="run CMD in the stand-in's namespace with the AWS endpoint set")
    run.add_argument("cmd", nargs=argparse.REMAINDER)
    sub.add_parser("config", help="print the path of a cluster.yaml for the stand-in")
    sub.add_parser("status", help="show the daemon, instances and fault knobs as JSON")
    interrupt = sub.add_parser("interrupt", help="spot interruption: notice now, terminated after SECONDS")
    interrupt.add_argument("instance_id")
    interrupt.add_argument("seconds", nargs="?", type=float)
    rebalance = sub.add_parser("rebalance", help="rebalance recommendation: an elevated risk of interruption")
    rebalance.add_argument("instance_id")
    faults = sub.add_parser("faults", help="show or set fault knobs: KEY=VALUE ... (VALUE as JSON)")
    faults.add_argument("assignments", nargs="*")
    user = sub.add_parser("user", help="make IAM user NAME holding exactly the policy in POLICY_JSON (and the "
                                       "boundary policy from BOUNDARY_JSON); print its keys as env lines")
    user.add_argument("name")
    user.add_argument("policy", metavar="POLICY_JSON")
    user.add_argument("boundary", metavar="BOUNDARY_JSON", nargs="?")
    user.add_argument("--boundary-name", default=BOUNDARY_NAME, help=f"default: {BOUNDARY_NAME}")
    sub.add_parser("daemon", help=argparse.SUPPRESS)
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    paths = Paths.from_env()
    if args.command == "daemon":
        from xeoncluster.standin.daemon import main as daemon_main
        daemon_main(paths)
    elif args.command == "start":
        lifecycle.start(paths, _initial_faults(args))
    elif args.command == "stop":
        lifecycle.stop(paths)
    elif args.command == "run":
        cmd = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
        if not cmd:
            raise SystemExit("usage: aws-standin run -- CMD ...")
        lifecycle.run(paths, cmd)
    elif args.command == "config":
        print(lifecycle.config_path(paths))
    elif args.command == "status":
        _print(lifecycle.status(paths))
    elif args.command == "interrupt":
        _print(lifecycle.interrupt(paths, args.instance_id, args.seconds))
    elif args.command == "rebalance":
        _print(lifecycle.rebalance(paths, args.instance_id))
    elif args.command == "faults":
        _print(lifecycle.set_faults(paths, dict(parse_assignment(a) for a in args.assignments)).__dict__)
    elif args.command == "user":
        sys.stdout.write(_user(paths, args).env_lines())
    return 0


def _user(paths: Paths, args: argparse.Namespace) -> UserKeys:
    """As the admin, through moto's endpoint in the stand-in's namespace (moto runs in the daemon)."""
    policy = read_document(args.policy)
    boundary = read_document(args.boundary) if args.boundary else None
    state = lifecycle.read_state(paths)
    if state is None:
        raise SystemExit("the stand-in is not running: scripts/aws-standin.sh start")
    return lifecycle.in_namespace(paths, lambda: make_user(admin_iam(state["moto_url"]), args.name, policy,
                                                          boundary, args.boundary_name))


def _initial_faults(args: argparse.Namespace) -> Faults:
    data: dict[str, Any] = json.loads(args.faults) if args.faults else {}
    if args.scale is not None:
        data["scale"] = args.scale
    return Faults.from_dict(data)


def _print(value: Any) -> None:
    json.dump(value, sys.stdout, indent=2, default=str)
    print()


if __name__ == "__main__":
    sys.exit(main())
