"""Rendering results for people: tables and summaries on stdout. Formatting only; nothing runs here."""
from __future__ import annotations

import json
import shlex
import sys
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.table import Table

from xeoncluster.cli.render_live import live_lines
from xeoncluster.cluster.image import ImageAction, describe_pending
from xeoncluster.runs.display import inert, shown

if TYPE_CHECKING:
    from xeoncluster.commands.exec import ExecResult
    from xeoncluster.commands.plan import Plan
    from xeoncluster.commands.status import StatusResult
    from xeoncluster.commands.up.up_again import UpResult
    from xeoncluster.job.train_plan import LaunchPlan
    from xeoncluster.providers.base import Image, Node, Removed

PLAN_IMAGE_IN_BACKGROUND = ("none cached; every node starts from the base and runs the playbooks, and node0 is "
                            "baked in the background for later ups")
PLAN_IMAGE = {
    ImageAction.REUSE: "reuse {id}; no playbook runs",
    ImageAction.GIVEN: "given {id}; nothing is baked",
    ImageAction.NONE: "every node starts from the base and runs the playbooks",
    ImageAction.BAKE: "none cached; node0 runs the playbooks, is baked, workers start from that image",
}


def _console() -> Console:
    # Piped output keeps whole rows: scripts grep it, and a narrow default would truncate addresses.
    width = None if sys.stdout.isatty() else 200
    return Console(file=sys.stdout, highlight=False, width=width)


def as_json(data: Any) -> None:
    sys.stdout.write(json.dumps(data, indent=2, default=str) + "\n")


def up_result(result: UpResult) -> None:
    console = _console()
    if result.repaired is not None:
        done = [f"replaced {', '.join(result.repaired.replaced)}"] * bool(result.repaired.replaced) + [
            f"added {', '.join(result.repaired.added)}"] * bool(result.repaired.added)
        console.print(f"cluster '{result.cluster}' is up: {len(result.nodes)} node(s); {'; '.join(done)} "
                      f"in {result.seconds:.1f}s")
    elif not result.already_up:
        image = result.image.describe() if result.image else "no image"
        console.print(f"cluster '{result.cluster}' is up: {len(result.nodes)} node(s) in {result.seconds:.1f}s; "
                      f"{image}")
    for node in result.nodes:
        console.print(shown(f"  {node.name:7} {node.role:7} {node.ssh_host:16} {node.market}"))
    if result.autostop:
        console.print(f"autostop: {result.autostop}")
    name = result.cluster
    console.print(f"next: xeoncluster exec --name {name} -- hostname   |   "
                  f"xeoncluster train squad --name {name}   |   xeoncluster down --name {name}")


def removed(result: Removed, what: str) -> None:
    console = _console()
    if result.empty:
        console.print(f"nothing to remove for '{what}'")
        return
    for kind, ids in result.items.items():
        if ids:
            console.print(f"removed {kind}: {', '.join(ids)}")


def status_table(result: StatusResult) -> None:
    table = Table(title=f"cluster '{result.cluster}' ({result.provider})", title_justify="left")
    cloud = any(row.node.instance_type for row in result.nodes)
    columns = ["node", "role", "state", "ssh", "address", "private ip"] + (
        ["market", "zone", "type", "$/h"] if cloud else [])
    for column in columns:
        table.add_column(column)
    for row in result.nodes:
        node = row.node
        role = f"{node.role} (replaced)" if row.replaced else node.role
        cells = [node.name, role, node.state, "up" if row.answers else f"DOWN ({row.detail})",
                 node.ssh_host, node.private_ip]
        if cloud:
            price = f"{node.price_per_hour:.3f}" if node.price_per_hour is not None else "-"
            cells += [node.market, node.zone or "-", node.instance_type or "-", price]
        table.add_row(*map(shown, cells))
    console = _console()
    console.print(table)
    if result.run is not None:
        r = result.run
        step = f"{r.step}/{r.total_steps}" if r.total_steps else str(r.step)
        console.print(shown(f"run {r.run}: {r.state.value}, step {step}, {len(r.restarts)} restart(s), "
                            f"${r.cost_usd:.4f} so far"))
        for line in live_lines(r):
            console.print(shown(line))
    if result.autostop:
        console.print(shown(f"autostop: {result.autostop}"))
    for note in result.notes:
        console.print(shown(f"note: {note}"))


def images_table(images: list[Image]) -> None:
    table = Table(title="images", title_justify="left")
    for column in ("id", "name", "key", "created", "baked by", "size"):
        table.add_column(column)
    for image in images:
        size = f"{image.size_bytes / 2**20:.0f} MiB" if image.size_bytes else "-"
        table.add_row(*map(shown, (image.id, image.name, image.key[:12], image.created or "-", image.cluster or "-",
                                   size)))
    _console().print(table)


def node_line_printer(nodes: list[Node]) -> Callable[[str, str], None]:
    """A sink that prints each node's lines as `node | line`, whole lines only, from any thread."""
    lock = threading.Lock()
    width = max((len(n.name) for n in nodes), default=0)

    def sink(node: str, line: str) -> None:
        with lock:
            sys.stdout.write(f"{node:>{width}} | {inert(line)}\n")
            sys.stdout.flush()

    return sink


def exec_failures(result: ExecResult) -> None:
    if result.failed:
        sys.stderr.write("exit codes: " + ", ".join(f"{n}={c}" for n, c in sorted(result.failed.items())) + "\n")


def plan(result: Plan) -> None:
    console = _console()
    console.print(f"plan for cluster '{result.cluster}'" + (f" in {result.region}" if result.region else ""))
    for res in result.resources:
        console.print(f"  {res.action:6} {res.kind:15} {res.name}  {res.detail}".rstrip())
    table = Table(title="instances", title_justify="left")
    for column in ("role", "count", "type", "market", "image", "$/h each"):
        table.add_column(column)
    for item in result.instances:
        price = f"{item.usd_per_hour:.4f}" if item.usd_per_hour is not None else "?"
        table.add_row(item.role, str(item.count), item.instance_type, item.market, item.image, price)
    console.print(table)
    image = result.image
    base = image.base_id or (f"unknown ({image.base_note})" if image.base_note else "-")
    if image.pending is not None:
        what = describe_pending(image.pending, time.time())
    elif image.in_background:
        what = PLAN_IMAGE_IN_BACKGROUND
    else:
        what = PLAN_IMAGE[image.action].format(id=image.image.id if image.image else "-")
    console.print(f"image: {what} (key {(image.key or 'unknown')[:12]}, base: {base})")
    console.print(f"stack: {result.stack.name} ({result.stack.backend}): {' '.join(result.stack.packages)}")
    total = result.usd_per_hour
    console.print(f"estimated cost: {f'${total:.4f}/hour' if total is not None else 'unknown'}")
    for note in result.notes:
        console.print(f"note: {note}")


def launch_plan(plan: LaunchPlan) -> None:
    console = _console()
    console.print(f"# {plan.ranks.world_size} ranks: {len(plan.nodes)} node(s) x {plan.ranks.ranks_per_node} "
                  f"rank(s), {plan.ranks.threads_per_rank} thread(s) each; {plan.topology.describe()}")
    for note in plan.notes:
        console.print(f"# {note}")
    # Plain writes: the command must stay one copy-pasteable line, never wrapped by rich.
    for key, value in plan.ranks.env:
        sys.stdout.write(f"export {key}={shlex.quote(value)}\n")
    for key in plan.user_env:
        sys.stdout.write(f"# --env {key}=<redacted>: sent to the nodes in a 0600 file, never on the command line\n")
    sys.stdout.write(plan.command() + "\n")
