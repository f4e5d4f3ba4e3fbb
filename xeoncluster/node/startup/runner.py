"""Run one training job end to end: checks, data, features, train, evaluate, save, report."""

from __future__ import annotations

import contextlib
import os
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from xeoncluster.node.checkpoints.interruption import NoticeWatcher, StepMarker, StopOnNotice, WatchSettings
from xeoncluster.node.checkpoints.resume_point import agreed_checkpoint, checkpoint_step
from xeoncluster.node.diagnostics.startup_clock import HELD, StartupClock
from xeoncluster.node.diagnostics.thread_dumps import dump_stacks_on_signal
from xeoncluster.node.events.event_reporter import EventReporter
from xeoncluster.node.events.events import EXIT_STOPPED, FinishedEvent, HeldEvent, StoppedEvent, emit
from xeoncluster.node.events.loss_curve import curve_from_history, write_loss_png
from xeoncluster.node.events.reporting import (
    RunFacts,
    eval_loss_history,
    loss_history,
    seconds_per_epoch,
    write_metrics,
)
from xeoncluster.node.rank_env import XC_HOLD_FILE, XC_HOLD_SECONDS
from xeoncluster.node.startup import distributed
from xeoncluster.node.startup.errors import TrainingError
from xeoncluster.node.startup.hold import HOLD_SECONDS, wait_for_release
from xeoncluster.node.startup.precision import cpu_flags_text, has_native_bf16, resolve_precision
from xeoncluster.node.startup.run_config import RunConfig
from xeoncluster.node.startup.stack_check import StackError, StackPlan, installed_versions, plan_stack
from xeoncluster.node.tasks.demo_assets import ensure_demo_assets
from xeoncluster.node.tasks.features_cache import cache_path, load_or_build, tokenizer_fingerprint
from xeoncluster.node.tasks.predictions import write_files
from xeoncluster.node.tasks.sources import check_local_files, load_from_hub, resolve_model
from xeoncluster.node.tasks.task import Evaluation, Task, make_task


def _say(info: distributed.DistInfo, message: str, *, every_rank: bool = False) -> None:
    if info.is_main or every_rank:
        # Under MPI every line is already labelled with its rank (labels.py).
        print(message, flush=True)


def _quiet_libraries() -> None:
    if not sys.stdout.isatty():
        import datasets
        from transformers.utils import logging as hf_logging

        datasets.disable_progress_bars()
        hf_logging.disable_progress_bar()


def _plan(config: RunConfig, info: distributed.DistInfo) -> tuple[StackPlan, str]:
    cpuinfo = cpu_flags_text()
    precision = resolve_precision(config.tunables.precision, cpuinfo)
    try:
        plan = plan_stack(
            config.stack,
            config.backend,
            precision,
            has_native_bf16(cpuinfo),
            info.world_size,
            installed_versions(probe_intel=config.stack == "intel"),
        )
    except StackError as exc:
        raise TrainingError(str(exc)) from exc
    for warning in plan.warnings:
        if info.is_main:
            print(f"training: warning: {warning}", file=sys.stderr)
    return plan, precision


def _check_distributed(info: distributed.DistInfo) -> None:
    if distributed.missing_master_addr(info, os.environ):
        raise TrainingError(
            f"{info.world_size} ranks but MASTER_ADDR is not set; "
            "the launcher must export the master's address"
        )
    if info.is_distributed:
        # Exported only for real multi-rank runs: RANK/WORLD_SIZE alone make accelerate start DDP.
        distributed.export_env(info)


def run(config: RunConfig, clock: StartupClock | None = None) -> int:
    clock = clock or StartupClock()
    info = distributed.from_env(os.environ)
    _check_distributed(info)
    _quiet_libraries()
    clock.mark("libraries")
    plan, precision = _plan(config, info)
    if config.demo_dir is not None:
        ensure_demo_assets(config.demo_dir)
    check_local_files(config.source)
    resolve_model(config.model)
    task = make_task(config)
    raw = task.load_raw()
    clock.mark("data")
    if config.warm_data:
        return _warm_data(config, info, task, raw)
    if plan.use_ipex and plan.backend == "ccl":
        from xeoncluster.node.startup.intel import register_ccl_backend

        register_ccl_backend()
    try:
        return _train(config, info, plan, precision, task, raw, clock)
    finally:
        distributed.destroy_process_group()


def _features(
    config: RunConfig, first: Any, task: Task, raw: Any, tokenizer: Any, info: distributed.DistInfo
) -> Any:
    """`first`: the other local ranks wait while it builds the cache (main_process_first)."""
    path = cache_path(
        config.cache_dir, config.source.fingerprint(), tokenizer_fingerprint(tokenizer), task.cache_parts()
    )
    return load_or_build(
        path, lambda: task.build_features(raw, tokenizer), first, lambda message: _say(info, message, every_rank=True)
    )


def _tokenizer(config: RunConfig) -> Any:
    from transformers import AutoTokenizer

    return load_from_hub("model", config.model, lambda: AutoTokenizer.from_pretrained(config.model))


def _warm_data(config: RunConfig, info: distributed.DistInfo, task: Task, raw: Any) -> int:
    """A replacement's data work, done while the run still trains: otherwise the resumed ranks wait at
    the tokenize barrier while it tokenizes the whole dataset. Loading the raw data cached it already."""
    tokenizer = _tokenizer(config)
    task.load_model(config.model)  # its files, fetched and read once
    features = _features(config, contextlib.nullcontext(), task, raw, tokenizer, info)
    _say(info, f"warm: {len(features['train'])} training features ready on this node")
    return 0


def _train(
    config: RunConfig,
    info: distributed.DistInfo,
    plan: StackPlan,
    precision: str,
    task: Task,
    raw: Any,
    clock: StartupClock,
) -> int:
    trainer, features = _trainer(config, info, plan, precision, task, raw, clock)
    before = task.evaluate(trainer, raw, features) if config.tunables.eval_before else None
    if before is not None:
        _say(info, f"eval before training: {_format(before)}")
        clock.mark("eval_before")
    _hold(info, clock)
    checkpoint, resumed_step = _resume_point(config, info)
    stop = _watch_for_notices(trainer, config, info, clock)
    started = time.monotonic()
    try:
        result = trainer.train(resume_from_checkpoint=str(checkpoint) if checkpoint else None)
    finally:
        stop.watcher.stop()
    if stop.stopped_at is not None:
        return _stopped(info, stop)
    _say(info, f"trained {trainer.state.global_step} steps in {time.monotonic() - started:.1f}s")
    after = task.evaluate(trainer, raw, features)
    if after is not None:
        _say(info, f"eval: {_format(after)}")
    trainer.save_model(str(config.output_dir / "model"))
    if trainer.is_world_process_zero():
        payload = _metrics_payload(_run_facts(config, info, plan, precision, task), task, trainer, result, before,
                                   after, resumed_step, features)
        _write_results(config, info, payload, after)
        emit(FinishedEvent(node=distributed.own_address(), step=trainer.state.global_step,
                      total=trainer.state.max_steps, metrics=_scores_and_loss(after) or {}))
    return 0


def _trainer(config: RunConfig, info: distributed.DistInfo, plan: StackPlan, precision: str, task: Task, raw: Any,
             clock: StartupClock) -> tuple[Any, Any]:
    """The process group, the model, the features and the Trainer: (trainer, features)."""
    import torch
    from transformers import set_seed

    from xeoncluster.node.startup.trainer_setup import make_trainer, training_arguments

    clock.mark("torch")
    args = training_arguments(config, plan, precision, has_eval="validation" in raw)
    clock.mark("process_group")
    set_seed(config.seed)
    tokenizer = _tokenizer(config)
    model = task.load_model(config.model)
    clock.mark("model")
    features = _features(config, args.main_process_first(local=True, desc="tokenize"), task, raw, tokenizer, info)
    clock.mark("features")
    datasets = (features["train"], task.eval_dataset(features))
    trainer = make_trainer(args, model, tokenizer, datasets, plan, precision)
    clock.mark("trainer")
    _say(
        info,
        f"{task.name}: {len(raw['train'])} examples -> {len(features['train'])} features; "
        f"world {info.world_size} ({info.local_world_size}/node), {torch.get_num_threads()} threads/rank, "
        f"{precision}, stack {plan.stack}",
    )
    return trainer, features


def _write_results(
    config: RunConfig, info: distributed.DistInfo, payload: dict[str, Any], after: Evaluation | None
) -> None:
    """metrics.json, the prediction files and loss.png, side by side in the output dir (rank 0 only)."""
    write_metrics(config.output_dir / "metrics.json", payload)
    written = [config.output_dir / "metrics.json"]
    written += write_files(config.output_dir, after.files if after else {})
    before = payload["eval_before"] or {}
    curve = curve_from_history(payload["log_history"], payload["eval_loss_history"], before.get("eval_loss"),
                               payload["eval_loss"], payload["global_steps"])
    if write_loss_png(config.output_dir / "loss.png", curve):
        written.append(config.output_dir / "loss.png")
    _say(info, f"wrote {', '.join(p.name for p in written)} in {config.output_dir}")


def _run_facts(config: RunConfig, info: distributed.DistInfo, plan: StackPlan, precision: str, task: Task) -> RunFacts:
    import torch
    import transformers

    return RunFacts(
        task=task.name if config.task == "squad" else f"glue/{config.glue_task}",
        model=config.model,
        precision=precision,
        stack=plan.stack,
        ddp_backend=plan.backend,
        world_size=info.world_size,
        ranks_per_node=info.local_world_size,
        threads_per_rank=torch.get_num_threads(),
        torch_version=torch.__version__,
        transformers_version=transformers.__version__,
    )


def _hold(info: distributed.DistInfo, clock: StartupClock) -> None:
    """Started ahead of a swap (XC_HOLD_FILE): every rank is ready, rank 0 says so, and each waits for its
    release on its node (node/startup/hold.py)."""
    release = os.environ.get(XC_HOLD_FILE)
    if not release:
        return
    if info.is_distributed:
        import torch.distributed as dist

        dist.barrier()
    if info.is_main:
        emit(HeldEvent(node=distributed.own_address()))
    seconds = os.environ.get(XC_HOLD_SECONDS)
    waited = wait_for_release(Path(release), float(seconds) if seconds else HOLD_SECONDS)
    _say(info, f"released after {waited:.1f}s held, ready to resume")
    clock.mark(HELD)


def _resume_point(config: RunConfig, info: distributed.DistInfo) -> tuple[Any, int | None]:
    checkpoint = agreed_checkpoint(config.output_dir) if config.resume else None
    if config.resume:
        _say(info, f"resuming from {checkpoint}" if checkpoint else "no checkpoint to resume; starting fresh")
    if checkpoint:
        from xeoncluster.node.checkpoints.node_checkpoint import rng_state_for_world

        rng_state_for_world(Path(checkpoint), info.rank, info.world_size)  # saved by another world, maybe
    return checkpoint, checkpoint_step(checkpoint) if checkpoint else None


def _watch_for_notices(trainer: Any, config: RunConfig, info: distributed.DistInfo,
                       clock: StartupClock) -> StopOnNotice:
    """What the agent reads and asks of the ranks: notices and stops, events, and stacks on SIGUSR1."""
    dump_stacks_on_signal(config.output_dir, info.rank)
    node = distributed.own_address()
    watcher = NoticeWatcher(WatchSettings.from_env(os.environ), info.rank, node).start()
    stop = StopOnNotice(watcher)
    trainer.add_callback(stop)
    # After StopOnNotice: the step on which the ranks stop is reported as such.
    trainer.add_callback(EventReporter(node, clock))
    if info.is_main:
        trainer.add_callback(StepMarker(config.output_dir / "progress.json"))
    return stop


def _stopped(info: distributed.DistInfo, stop: StopOnNotice) -> int:
    _say(info, f"training: stopped at step {stop.stopped_at} ({stop.reason}); checkpoint-{stop.stopped_at} saved")
    if info.is_main:
        emit(StoppedEvent(node=distributed.own_address(), step=stop.stopped_at, reason=stop.reason or ""))
    return EXIT_STOPPED


def _format(evaluation: Evaluation) -> str:
    loss = f"  eval_loss {evaluation.loss:.4f}" if evaluation.loss is not None else ""
    return "  ".join(f"{k} {v:.2f}" for k, v in evaluation.scores.items()) + loss


def _scores_and_loss(evaluation: Evaluation | None) -> dict[str, float | None] | None:
    return None if evaluation is None else {**evaluation.scores, "eval_loss": evaluation.loss}


def _metrics_payload(
    facts: RunFacts,
    task: Task,
    trainer: Any,
    result: Any,
    before: Evaluation | None,
    after: Evaluation | None,
    resumed_step: int | None,
    features: Any,
) -> dict[str, Any]:
    state = trainer.state
    runtime = float(result.metrics.get("train_runtime", 0.0))
    scores = after.scores if after else dict.fromkeys(task.metric_names)
    return {
        "task": facts.task,
        **scores,
        "eval_loss": after.loss if after else None,
        "eval_before": _scores_and_loss(before),
        "train_loss": result.training_loss,
        "train_samples_per_second": result.metrics.get("train_samples_per_second"),
        "train_runtime": runtime,
        "seconds_per_epoch": seconds_per_epoch(
            runtime, state.epoch or 0.0, state.global_step, resumed_step or 0
        ),
        "epochs": state.epoch,
        "global_steps": state.global_step,
        "resumed_from_step": resumed_step,
        "train_features": len(features["train"]),
        "eval_features": len(features["validation"]) if "validation" in features else 0,
        **{k: v for k, v in asdict(facts).items() if k != "task"},
        "log_history": loss_history(state.log_history),
        "eval_loss_history": eval_loss_history(state.log_history),
    }
