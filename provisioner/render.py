"""Rendering results for people: tables and summaries on stdout."""
from __future__ import annotations

import shlex
import sys
import threading

from rich.console import Console
from rich.table import Table

from .config import ClusterConfig
from .providers.base import Image, Removed


def _console() -> Console:
    # Piped output keeps whole rows: scripts grep it, and a narrow default would truncate addresses.
    width = None if sys.stdout.isatty() else 200
    return Console(file=sys.stdout, highlight=False, width=width)


def up_result(session, result) -> None:  # type: ignore[no-untyped-def]
    console = _console()
    cfg = session.config
    if not result.already_up:
        image = result.image.describe() if result.image else "no image"
        console.print(f"cluster '{cfg.name}' is up: {len(result.nodes)} node(s) in {result.seconds:.1f}s; {image}")
    for node in result.nodes:
        console.print(f"  {node.name:7} {node.role:7} {node.ssh_host:16} {node.market}")
    console.print(f"next: xeoncluster exec --name {cfg.name} -- hostname   |   "
                  f"xeoncluster train squad --name {cfg.name}   |   xeoncluster down --name {cfg.name}")


def removed(result: Removed, what: str) -> None:
    console = _console()
    if result.empty:
        console.print(f"nothing to remove for '{what}'")
        return
    for kind, ids in result.items.items():
        if ids:
            console.print(f"removed {kind}: {', '.join(ids)}")


def status_table(cfg: ClusterConfig, rows) -> None:  # type: ignore[no-untyped-def]
    table = Table(title=f"cluster '{cfg.name}' ({cfg.provider})", title_justify="left")
    cloud = cfg.provider != "local"
    columns = ["node", "role", "state", "ssh", "address", "private ip"] + (
        ["market", "zone", "type", "$/h"] if cloud else [])
    for column in columns:
        table.add_column(column)
    for row in rows:
        node = row.node
        cells = [node.name, node.role, node.state, "up" if row.answers else f"DOWN ({row.detail})",
                 node.ssh_host, node.private_ip]
        if cloud:
            price = f"{node.price_per_hour:.3f}" if node.price_per_hour is not None else "-"
            cells += [node.market, node.zone or "-", node.instance_type or "-", price]
        table.add_row(*cells)
    _console().print(table)


def images_table(images: list[Image]) -> None:
    table = Table(title="images", title_justify="left")
    for column in ("id", "name", "key", "created", "baked by", "size"):
        table.add_column(column)
    for image in images:
        size = f"{image.size_bytes / 2**20:.0f} MiB" if image.size_bytes else "-"
        table.add_row(image.id, image.name, image.key[:12], image.created or "-", image.cluster or "-", size)
    _console().print(table)


def exec_stream(session, only: list[str], command: str) -> int:  # type: ignore[no-untyped-def]
    """Print each node's lines as `node | line`; return the worst exit code."""
    from .fanout import run_on_nodes, target_nodes

    targets = target_nodes(session, only)
    lock = threading.Lock()
    width = max(len(n.name) for n in targets)

    def sink(node: str, line: str) -> None:
        with lock:
            sys.stdout.write(f"{node:>{width}} | {line}\n")
            sys.stdout.flush()

    results = run_on_nodes(session, targets, command, sink)
    failed = {name: r.exit_code for name, r in results.items() if not r.ok}
    if failed:
        sys.stderr.write("exit codes: " + ", ".join(f"{n}={c}" for n, c in sorted(failed.items())) + "\n")
    return max(failed.values(), default=0)


def plan(result) -> None:  # type: ignore[no-untyped-def]
    """Render an AWS Plan or a LocalPlan."""
    console = _console()
    data = result.to_dict()
    console.print(f"plan for cluster '{data['cluster']}'" + (f" in {data['region']}" if "region" in data else ""))
    if "resources" in data:
        for res in data["resources"]:
            console.print(f"  {res['action']:6} {res['kind']:15} {res['name']}  {res['detail']}".rstrip())
        table = Table(title="instances", title_justify="left")
        for column in ("role", "count", "type", "market", "image", "$/h each"):
            table.add_column(column)
        for item in data["instances"]:
            price = f"{item['usd_per_hour']:.4f}" if item["usd_per_hour"] is not None else "?"
            table.add_row(item["role"], str(item["count"]), item["instance_type"], item["market"], item["image"], price)
        console.print(table)
        image = data["image"]
        base = image["base_id"] or (f"unknown ({image['base_note']})" if image.get("base_note") else "-")
        key = (image["key"] or "unknown")[:12]
        what = {"cached": f"reuse {image['id']}; no playbook runs", "explicit": f"given {image['id']}; nothing is baked",
                "base": "every node starts from the base and runs the playbooks",
                "base+bake": "none cached; node0 runs the playbooks, is baked, workers start from that image"}
        console.print(f"image: {what.get(image['source'], image['source'])} (key {key}, base: {base})")
        if data.get("stack"):
            stack = data["stack"]
            console.print(f"stack: {stack['name']} ({stack['backend']}): {' '.join(stack['packages'])}")
    else:
        console.print(f"  create {data['nodes']} namespace node(s) with sshd on this machine")
        console.print(f"  image: {data['image']['action']} {data['image']['id'] or ''} (key {data['image']['key'][:12]})")
    total = data.get("usd_per_hour")
    console.print(f"estimated cost: {'$%.4f/hour' % total if total is not None else 'unknown'}")
    for note in data.get("notes", []):
        console.print(f"note: {note}")


def launch_plan(plan) -> None:  # type: ignore[no-untyped-def]
    console = _console()
    console.print(f"# {plan.ranks.world_size} ranks: {len(plan.nodes)} node(s) x {plan.ranks.ranks_per_node} "
                  f"rank(s), {plan.ranks.threads_per_rank} thread(s) each; {plan.topology.describe()}")
    for note in plan.notes:
        console.print(f"# {note}")
    # Plain writes: the command must stay one copy-pasteable line, never wrapped by rich.
    for key, value in plan.ranks.env:
        sys.stdout.write(f"export {key}={shlex.quote(value)}\n")
    sys.stdout.write(plan.command() + "\n")


def echo_line(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def training_result(outcome) -> None:  # type: ignore[no-untyped-def]
    console = _console()
    metrics = outcome.metrics or {}
    keys = [k for k in ("exact_match", "f1", "accuracy") if metrics.get(k) is not None]
    scores = ", ".join(f"{k}={metrics[k]:.2f}" for k in keys)
    before = metrics.get("eval_before") or {}
    if before:
        scores += "  (untrained: " + ", ".join(f"{k}={before[k]:.2f}" for k in keys
                                               if before.get(k) is not None) + ")"
    console.print(f"done in {outcome.seconds:.0f}s: {scores or 'no evaluation set, no scores'}")
    speed = metrics.get("train_samples_per_second")
    if speed is not None:
        console.print(f"throughput: {speed:.1f} samples/s on {metrics.get('world_size')} rank(s), "
                      f"{metrics.get('threads_per_rank')} thread(s) each, {metrics.get('precision')}")
    console.print(f"metrics: {outcome.metrics_path}")
    if outcome.model_dir:
        console.print(f"model: {outcome.model_dir}")
