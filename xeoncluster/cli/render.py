"""Rendering results for people: tables and summaries on stdout. Formatting only; nothing runs here."""
from __future__ import annotations

import atexit
import json
import re
import shlex
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TextIO

from rich.console import Console
from rich.progress import BarColumn, Progress, TaskID, TextColumn
from rich.table import Table

from xeoncluster.cli.render_live import live_lines
from xeoncluster.image import ImageAction, describe_pending

if TYPE_CHECKING:
    from xeoncluster.commands.exec import ExecResult
    from xeoncluster.commands.plan import Plan
    from xeoncluster.commands.status import StatusResult
    from xeoncluster.commands.up_again import UpResult
    from xeoncluster.providers.base import Image, Node, Removed
    from xeoncluster.train_plan import LaunchPlan

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
        console.print(f"  {node.name:7} {node.role:7} {node.ssh_host:16} {node.market}")
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
        table.add_row(*cells)
    console = _console()
    console.print(table)
    if result.run is not None:
        r = result.run
        step = f"{r.step}/{r.total_steps}" if r.total_steps else str(r.step)
        console.print(f"run {r.run}: {r.state.value}, step {step}, {len(r.restarts)} restart(s), "
                      f"${r.cost_usd:.4f} so far")
        for line in live_lines(r):
            console.print(line)
    if result.autostop:
        console.print(f"autostop: {result.autostop}")
    for note in result.notes:
        console.print(f"note: {note}")


def images_table(images: list[Image]) -> None:
    table = Table(title="images", title_justify="left")
    for column in ("id", "name", "key", "created", "baked by", "size"):
        table.add_column(column)
    for image in images:
        size = f"{image.size_bytes / 2**20:.0f} MiB" if image.size_bytes else "-"
        table.add_row(image.id, image.name, image.key[:12], image.created or "-", image.cluster or "-", size)
    _console().print(table)


def node_line_printer(nodes: list[Node]) -> Callable[[str, str], None]:
    """A sink that prints each node's lines as `node | line`, whole lines only, from any thread."""
    lock = threading.Lock()
    width = max((len(n.name) for n in nodes), default=0)

    def sink(node: str, line: str) -> None:
        with lock:
            sys.stdout.write(f"{node:>{width}} | {line}\n")
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


# Rank 0's progress line (xeoncluster/node/progress.py); a single-rank run has no `[0] ` label.
STEP_LINE = re.compile(r"^(?:\[0\] )?step (\d+)/(\d+)\s")
_FIELD = re.compile(r"\b(loss|epoch|eta) (\S+)|(\S+) samples/s")


@dataclass(frozen=True)
class StepLine:
    step: int
    total: int
    loss: str = "?"
    epoch: str = "?"
    speed: str = "?"
    eta: str = "?"


def parse_step_line(line: str) -> StepLine | None:
    match = STEP_LINE.match(line)
    if match is None:
        return None
    fields: dict[str, str] = {}
    for found in _FIELD.finditer(line[match.end():]):
        name, value, speed = found.groups()
        fields.update({name: value} if name else {"speed": speed})
    return StepLine(int(match.group(1)), int(match.group(2)), **fields)


def _training_progress(stream: TextIO) -> Progress:
    return Progress(
        TextColumn("train"), BarColumn(), TextColumn("step {task.completed:.0f}/{task.total:.0f}"),
        TextColumn("epoch {task.fields[epoch]}"), TextColumn("loss {task.fields[loss]}"),
        TextColumn("{task.fields[speed]} samples/s"), TextColumn("eta {task.fields[eta]}"),
        console=Console(file=stream, highlight=False), auto_refresh=True)


class TrainingLines:
    """The sink for a training run's lines. On a terminal, rank 0's `step N/M` lines drive one live
    progress bar and every other line prints above it; otherwise every line is printed as it comes."""

    def __init__(self, stream: TextIO | None = None, live: bool | None = None) -> None:
        self._stream = stream
        self._live = live
        self._lock = threading.Lock()
        self._progress: Progress | None = None
        self._task: TaskID | None = None

    @property
    def stream(self) -> TextIO:
        return self._stream or sys.stdout

    def __call__(self, line: str) -> None:
        with self._lock:
            live = self.stream.isatty() if self._live is None else self._live
            step = parse_step_line(line) if live else None
            if step is not None:
                self._show(step)
            elif self._progress is not None:
                self._progress.console.print(line, markup=False, highlight=False, emoji=False, soft_wrap=True)
            else:
                self.stream.write(line + "\n")
                self.stream.flush()

    def _show(self, step: StepLine) -> None:
        if self._progress is None:
            self._progress = _training_progress(self.stream)
            self._task = self._progress.add_task("train", total=step.total, epoch="", loss="", speed="", eta="")
            self._progress.start()
            atexit.register(self.close)
        assert self._task is not None
        self._progress.update(self._task, completed=step.step, total=step.total, epoch=step.epoch,
                              loss=step.loss, speed=step.speed, eta=step.eta)

    def close(self) -> None:
        """Stop the bar (it stays on screen as drawn last); later lines print plainly."""
        with self._lock:
            if self._progress is not None:
                self._progress.stop()
                self._progress = None
                self._task = None


echo_line = TrainingLines()
