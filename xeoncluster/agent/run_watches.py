"""What the run agent watches while a launch runs, and what it does about it: the ranks' events (pace,
checkpoints, notices and the replacement they start), the nodes' use and a stalled step, a node gone,
and a cancel."""
from __future__ import annotations

import contextlib
import functools
import time

from xeoncluster.agent.cost_ceiling import reached
from xeoncluster.agent.current_run import CurrentRun
from xeoncluster.agent.handover import Handover
from xeoncluster.agent.prestart import DEADLINE_MARGIN_SECONDS, HELD_WITHIN_SECONDS, start_ahead
from xeoncluster.agent.proactive import Replacement
from xeoncluster.agent.short_notice import TrainOnWithout, too_short
from xeoncluster.agent.stall import stop_stalled
from xeoncluster.cluster.state import ClusterRecord
from xeoncluster.core.errors import XeonClusterError
from xeoncluster.job.train_request import ScriptRequest
from xeoncluster.node.diagnostics.startup_clock import HELD, read_parts
from xeoncluster.node.diagnostics.startup_clock import describe as describe_startup
from xeoncluster.node.events.events import PARAMETERS, NoticeEvent, RunEvent
from xeoncluster.operations.train_prepare import Preparer
from xeoncluster.providers.abilities import AgentOnMaster, inter_zone_usd_per_gb
from xeoncluster.providers.base import Node
from xeoncluster.providers.registry import spec_for
from xeoncluster.runs.record import Live, NodeUse, RankStartup, RunState
from xeoncluster.runs.zone_traffic import ZoneSpread

CANCEL_POLL_SECONDS = 1.0
LOST_GRACE_SECONDS = 1.0  # SIGINT to KILL of a job that lost a node
# How long the ranks get to checkpoint and stop after a cancel before mpiexec is interrupted.
CANCEL_GRACE_SECONDS = 120.0


class RunWatches:
    def __init__(self, run: CurrentRun) -> None:
        self.run = run
        self.slowest_due = False  # a relaunch started: its first step says which rank was slowest to start

    # -- the ranks' events --------------------------------------------------------------------
    def on_event(self, event: RunEvent) -> None:
        run = self.run
        run.storage.on_event(event)
        if event.kind == "checkpoint":
            run.keeper.stored(run.storage.durable_step)
        if event.kind == "eval":
            run.pace.evals = {k: v for k, v in event.metrics.items() if v is not None}
            if isinstance(run.request, ScriptRequest):  # the built-in tasks print their own eval lines
                scores = "  ".join(f"{k} {v:.4g}" for k, v in run.pace.evals.items())
                run.note(f"eval at step {event.step}: {scores}")
        if event.kind == "ready":
            run.keeper.rank_ready(RankStartup(rank=event.rank, node=event.node, parts=read_parts(event.metrics)))
        if event.kind == "started" and run.record.restarts and (took := describe_startup(event.metrics)):
            since = "" if HELD in read_parts(event.metrics) else " after its process started"
            run.note(f"relaunched: rank 0 was ready to train {took}{since}")
            self.slowest_due = True
        if event.kind == "step" and self.slowest_due:  # every rank has started by the first step: each said so
            self.slowest_due = False
            if slowest := self._slowest():
                run.note(slowest)
        if event.kind == "started":
            self._zones(event.metrics.get(PARAMETERS))
        if event.kind in ("started", "step") and event.step is not None:
            if event.kind == "step":
                run.pace.step(event.time, event.step, event.loss)
            total = event.total or run.record.total_steps
            run.keeper.progress(event.step, total, self._live(event.step, total))
        elif event.kind == "notice":
            self._on_notice(event)

    def _slowest(self) -> str:
        """The rank that took longest to start, when it is not rank 0 (whose process group waited for it)."""
        slowest = max(self.run.record.startup, key=lambda r: r.seconds, default=None)
        if slowest is None or slowest.rank == 0 or not slowest.parts:
            return ""
        part, seconds = max(((p, s) for p, s in slowest.parts.items() if p != HELD), key=lambda item: item[1])
        return (f"relaunched: the slowest rank to start was rank {slowest.rank} on {slowest.node}, "
                f"{slowest.seconds:.1f}s, most of it {part.replace('_', ' ')} ({seconds:.1f}s)")

    def _on_notice(self, event: NoticeEvent) -> None:
        run = self.run
        run.noticed[event.node] = event
        run.keeper.noticed(event.node)
        run.note(f"rank {event.rank} on {event.node}: {event.reason}")
        node = next((n for n in run.plan.nodes if n.private_ip == event.node), None)
        if node is None or not run.interruptions_left() or event.node in run.replacements:
            return
        cluster = run.ctx.state.load()
        if cluster is None or not cluster.ready:
            return
        if node.is_master:
            self._hand_over(cluster)
            return
        if self._train_on_without(node, event):
            return
        replacement = Replacement(run.ctx, cluster, node, self.warm, self._replacement_ready,
                                  functools.partial(self._no_replacement, node))
        run.replacements[event.node] = replacement.start()

    def _train_on_without(self, node: Node, event: NoticeEvent) -> bool:
        """A notice shorter than a replacement takes (agent/short_notice.py), on a run that may train on without
        the node: the job on the nodes left starts ahead, and the ranks train on to the notice's deadline."""
        run = self.run
        left = [n for n in run.plan.nodes if n.name != node.name]
        need = spec_for(run.ctx.config.provider).replace_seconds
        if not (run.request.train_while_replacing and len(left) >= run.request.min_nodes
                and too_short(event.deadline, time.time(), need)):
            return False
        run.note(f"{node.name}'s notice leaves less time than a replacement takes to be ready (about {need:.0f}s): "
                 f"the run trains on to its deadline, then on {len(left)} node(s) while the replacement boots")
        start = functools.partial(self._start_ahead, left, [], self._left(node))
        run.replacements[event.node] = TrainOnWithout(node, start).start()
        return True

    def _hand_over(self, cluster: ClusterRecord) -> None:
        """Where the agent lives on the master and the run is stored, a successor takes over (agent/handover.py);
        else the ranks stop at the notice's deadline, checkpointed, and the agent ends with the master."""
        run = self.run
        if run.handover is None and cluster.storage is not None and isinstance(run.ctx.provider, AgentOnMaster):
            run.handover = Handover(run.ctx, cluster, self.warm, self._replacement_ready).start()

    def _zones(self, parameters: float | None) -> None:
        """Nodes in more than one zone (a replacement that crossed, where the config lets it): the run's log
        says what the gradients' traffic costs, and its record keeps the estimate at the run's pace."""
        run = self.run
        if not parameters:
            return
        run.pace.spread = ZoneSpread(int(parameters), tuple(n.zone for n in run.plan.nodes),
                                     inter_zone_usd_per_gb(run.ctx.provider))
        traffic = run.pace.spread.estimate()
        if traffic is not None:
            run.note(f"{traffic.describe()}; {run.pace.spread.parameters:,} parameters, gradients in fp32")

    def warm(self, node: Node) -> None:
        run = self.run
        # Once the job has stopped (a notice shorter than a boot), the resumed rank builds its data itself.
        data_too = run.record.state is RunState.RUNNING
        with contextlib.closing(run.ctx.shell()) as shell:
            Preparer(run.ctx, run.request, run.stack(), [node]).warm(shell, node, run.plan.home, run.plan.run,
                                                                    data_too, run.plan)

    def _replacement_ready(self, node: Node) -> None:
        """The job that follows the swap starts first and waits, held; then the ranks are asked to stop."""
        run = self.run
        if run.attempt is None:
            return
        old = next((r.old for r in run.replacements.values() if r.new is node), None)
        if old is not None and run.ahead is None:
            self._start_ahead([n for n in run.plan.nodes if n.name != old.name] + [node], [node], self._left(old))
        run.note(f"{node.name} is ready to replace the noticed node; asking the ranks to stop at the next step")
        run.attempt.ask_to_stop(run.control)

    def _no_replacement(self, old: Node, why: str) -> None:
        """The ranks stop now, checkpointed: the recovery tries once more, else trains on without the node (the
        job on the nodes left started ahead first, as for a swap), and no step is lost to the reclaim."""
        run = self.run
        if run.attempt is None:
            return
        left = [n for n in run.plan.nodes if n.name != old.name]
        if run.ahead is None and len(left) >= run.request.min_nodes:
            self._start_ahead(left, [], self._left(old))
        run.note(f"no replacement for the noticed node ({why}); asking the ranks to stop at the next step")
        run.attempt.ask_to_stop(run.control)

    def grown(self, nodes: list[Node]) -> None:
        """A shrunk run's nodes are back: the job on all of them starts ahead, then the ranks are asked to stop."""
        run = self.run
        if run.attempt is None:
            return
        cluster = run.ctx.state.load()
        if cluster is not None and run.ahead is None:
            self._start_ahead(cluster.node_list(), nodes, None)
        run.note(f"{', '.join(n.name for n in nodes)} ready to grow the run back; asking the ranks to stop at the "
                 "next step")
        run.attempt.ask_to_stop(run.control)

    def _left(self, old: Node) -> float | None:
        """Seconds until the noticed node's announced end, less the margin the old job stops within."""
        notice = self.run.noticed.get(old.private_ip)
        return notice.deadline - time.time() - DEADLINE_MARGIN_SECONDS if notice and notice.deadline else None

    def _start_ahead(self, nodes: list[Node], added: list[Node], left: float | None) -> None:
        """agent/prestart.py, within the notice's time left. Whatever goes wrong there leaves the usual relaunch."""
        run = self.run
        within = HELD_WITHIN_SECONDS if left is None else min(HELD_WITHIN_SECONDS, left)
        try:
            with contextlib.closing(run.ctx.shell()) as shell:
                run.ahead = start_ahead(run, shell, nodes, added, self.on_event, within)
        except Exception as exc:  # noqa: BLE001 - the change must not fail for a start ahead of it: it starts after
            run.note(f"could not start the next job ahead of the change ({type(exc).__name__}: {exc})")

    def _live(self, step: int, total: int | None) -> Live:
        record = self.run.record
        return self.run.pace.live(step, total, record.cost_usd, record.usd_per_hour)

    # -- the nodes ----------------------------------------------------------------------------
    def on_usage(self, usage: dict[str, NodeUse]) -> None:
        record = self.run.record
        live = self._live(record.step, record.total_steps)
        self.run.keeper.used(usage, live)
        self._hourly_traffic(live)

    def _hourly_traffic(self, live: Live) -> None:
        """The launch's note on crossing zones came before its first steps: once its pace is known, the log
        says the traffic per hour and its cost too, once a launch."""
        traffic, pace = live.zone_traffic, self.run.pace
        if traffic is None or traffic.usd_per_hour is None or pace.hourly_traffic_said:
            return
        pace.hourly_traffic_said = True
        self.run.note(f"at the run's pace, {traffic.describe()}")

    def check_stall(self) -> None:
        run = self.run
        quiet = run.pace.stalled(time.time(), run.request.stall_minutes * 60)
        attempt = run.attempt
        if quiet is None or run.stalled or attempt is None or run.cancelled.is_set():
            return
        run.stalled = f"no step for {quiet:.0f}s after step {run.record.step} (the median step took " \
                      f"{run.pace.step_seconds() or 0:.2f}s)"
        run.note(f"the run stalled: {run.stalled}; saving every rank's stacks, then restarting from the newest "
                 "checkpoint")
        stop_stalled(run.ctx.shell(), attempt, run.files, run.note)

    def on_gone(self, gone: list[str]) -> None:
        run = self.run
        run.note(f"{', '.join(gone)} is gone (unlisted by the provider, silent over SSH); stopping the job")
        if run.attempt is not None:
            # The ranks left wait in an all-reduce with the lost one, deaf to SIGINT, and nothing of theirs is
            # worth waiting for: the run resumes from its last checkpoint.
            run.attempt.interrupt(run.control, master_gone=run.plan.nodes[0].name in gone, grace=LOST_GRACE_SECONDS)

    # -- a cancel -----------------------------------------------------------------------------
    def watch_cancel(self) -> None:
        """A cancel, or the run's --max-cost ceiling reached: both stop it the same way, checkpointed."""
        run = self.run
        while not run.record.state.finished:
            if not run.cancelled.is_set() and (why := self.stop_reason()):
                run.cancelled.set()
                self._cancel(why)
            time.sleep(CANCEL_POLL_SECONDS)

    def stop_reason(self) -> str:
        run = self.run
        if run.files.cancel.exists():
            return "cancel requested"
        run.stopped = reached(run.keeper.cost_now(time.time()), run.request.max_cost)
        return run.stopped

    def _cancel(self, why: str) -> None:
        run = self.run
        attempt = run.attempt
        if attempt is None:  # still queued, or preparing: it ends before it launches
            run.note(f"{why} before the run started")
            return
        run.note(f"{why}: the ranks save a checkpoint and stop")
        with contextlib.suppress(XeonClusterError):  # the job may have ended already
            attempt.ask_to_stop(run.control)
        deadline = time.monotonic() + CANCEL_GRACE_SECONDS
        while not run.record.state.finished and time.monotonic() < deadline and run.attempt is attempt:
            time.sleep(CANCEL_POLL_SECONDS)
        if not run.record.state.finished and run.attempt is attempt:
            attempt.interrupt(run.control)
