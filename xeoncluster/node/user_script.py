"""`python -m xeoncluster.node.user_script --output-dir DIR --workdir DIR (--script PATH | --module NAME) [--resume]
-- ARGS`: one rank of a user's script, as `xeoncluster train SCRIPT.py` launches it under mpiexec.

Before the script runs: the torch.distributed environment from MPI's (RANK, WORLD_SIZE, LOCAL_RANK,
LOCAL_WORLD_SIZE; MASTER_ADDR and MASTER_PORT come from the launch), accelerate told it runs on CPU,
the HF Trainer hooked (trainer_hook.py), SIGTERM turned into the stop file (stop_signal.py), and on a
resumed run XC_RESUME=1 and XC_RESUME_FROM (the newest complete checkpoint in the output folder).
Then the script runs as `python SCRIPT ARGS` would run it, from the workdir. At its end rank 0 reports
it as the built-in tasks do: finished (with metrics.json), stopped (exit 75), or failed.
"""
from __future__ import annotations

import argparse
import faulthandler
import json
import os
import runpy
import sys
import time
import traceback
from pathlib import Path
from typing import Any

from xeoncluster.node.__main__ import FAILURE_LINES, load_env_file, report_failure
from xeoncluster.node.checkpoints.interruption import WatchSettings
from xeoncluster.node.checkpoints.resume_point import checkpoint_step, last_complete_checkpoint
from xeoncluster.node.diagnostics.thread_dumps import dump_stacks_on_signal
from xeoncluster.node.events.events import EXIT_STOPPED, FinishedEvent, StartedEvent, emit
from xeoncluster.node.events.trackers import restore_mlflow_run
from xeoncluster.node.rank_env import STOP_FILE, XC_OUTPUT_DIR, XC_RESUME, XC_RESUME_FROM, XC_STOP_FILE
from xeoncluster.node.scripts.stop_signal import StopSignal, grace_from_env
from xeoncluster.node.scripts.trainer_hook import Stopped, TrainerHook, report_stopped
from xeoncluster.node.startup import distributed
from xeoncluster.node.startup.process_exit import leave


def parse(argv: list[str] | None) -> tuple[argparse.Namespace, list[str]]:
    argv = list(sys.argv[1:] if argv is None else argv)
    own, rest = (argv[:argv.index("--")], argv[argv.index("--") + 1:]) if "--" in argv else (argv, [])
    parser = argparse.ArgumentParser(prog="python -m xeoncluster.node.user_script")
    parser.add_argument("--output-dir", type=Path, required=True)
    parser.add_argument("--workdir", type=Path, required=True)
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument("--script")
    which.add_argument("--module")
    parser.add_argument("--resume", action="store_true")
    args = parser.parse_args(own)
    args.output_dir, args.workdir = args.output_dir.resolve(), args.workdir.resolve()
    return args, rest


def prepare_env(info: distributed.DistInfo, output_dir: Path, resume: bool) -> None:
    distributed.export_env(info)
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", distributed.DEFAULT_MASTER_PORT)
    os.environ.setdefault("ACCELERATE_USE_CPU", "1")
    os.environ.setdefault(XC_OUTPUT_DIR, str(output_dir))
    os.environ.setdefault(XC_STOP_FILE, str(output_dir / STOP_FILE))
    newest = last_complete_checkpoint(output_dir) if resume else None
    if resume:
        os.environ[XC_RESUME] = "1"
    if newest is not None:
        os.environ[XC_RESUME_FROM] = str(newest)


def run_script(args: argparse.Namespace, rest: list[str]) -> int:
    """The script as its own process would run it; its exit status, or an exception it raised."""
    os.chdir(args.workdir)
    if args.module:
        sys.argv = [args.module, *rest]
        sys.path.insert(0, str(args.workdir))
        runpy.run_module(args.module, run_name="__main__", alter_sys=True)
    else:
        script = args.workdir / args.script
        sys.argv = [str(script), *rest]
        sys.path.insert(0, str(script.parent))
        runpy.run_path(str(script), run_name="__main__")
    return 0


def exit_status(exc: SystemExit) -> int:
    if exc.code is None or isinstance(exc.code, int):
        return exc.code or 0
    print(exc.code, file=sys.stderr)
    return 1


def main(argv: list[str] | None = None) -> int:
    load_env_file(os.environ)
    args, rest = parse(argv)
    info = distributed.from_env(os.environ)
    if info.world_size > 1:
        from xeoncluster.node.events.labels import label_streams

        label_streams(info.rank)
    prepare_env(info, args.output_dir, args.resume)
    args.output_dir.mkdir(parents=True, exist_ok=True)
    dump_stacks_on_signal(args.output_dir, info.rank)
    if args.resume:
        restore_mlflow_run(args.output_dir)
    stop_file = Path(os.environ[XC_STOP_FILE])
    stop_file.unlink(missing_ok=True)  # a stop asked of an earlier attempt on this node is not this one's
    hook = TrainerHook(info, args.output_dir, args.resume, WatchSettings.from_env(os.environ))
    hook.install()
    stop = StopSignal(stop_file, grace_from_env(os.environ), lambda: bool(hook.stops),
                      lambda: report_stopped(info, None, "did not stop within its grace period")).install()
    if info.is_main:
        emit(StartedEvent(node=distributed.own_address(), step=_resumed_step(args.output_dir, args.resume)))
    return Ending(info, args, hook, stop).run(rest)


def _resumed_step(output_dir: Path, resume: bool) -> int:
    newest = last_complete_checkpoint(output_dir) if resume else None
    return checkpoint_step(newest) if newest else 0


class Ending:
    """How the script ended decides what the rank reports and exits with."""

    def __init__(self, info: distributed.DistInfo, args: argparse.Namespace, hook: TrainerHook,
                 stop: StopSignal) -> None:
        self.info, self.args, self.hook, self.stop = info, args, hook, stop
        self.started = time.time()

    def run(self, rest: list[str]) -> int:
        try:
            code = run_script(self.args, rest)
        except Stopped as stopped:
            return self.stopped(stopped.step, stopped.reason)
        except SystemExit as exc:
            code = exit_status(exc)
        except KeyboardInterrupt:
            code = 130
        except Exception as exc:  # noqa: BLE001 - any error of the script is its rank's failure, with its last lines
            lines = tuple(traceback.format_exc().splitlines()[-FAILURE_LINES:])
            report_failure(f"{type(exc).__name__}: {exc}", lines)
            traceback.print_exc()
            code = 1
        finally:
            self.hook.stop_watchers()
            sys.stdout.flush()
        return self.ended(code)

    def ended(self, code: int) -> int:
        if self.stop.requested:
            return self.stopped(None, "stop requested")
        _destroy_process_group()
        if code == 0:
            self.finished()
        elif code != 1:  # 1 with an exception was reported above, with its last lines
            report_failure(f"the script exited with status {code}", ())
        return code

    def stopped(self, step: int | None, reason: str) -> int:
        if step is None and self.hook.trainer is not None:
            step = self.hook.trainer.state.global_step
        report_stopped(self.info, step, reason)
        _destroy_process_group()
        return EXIT_STOPPED

    def finished(self) -> None:
        if not self.info.is_main:
            return
        metrics = script_metrics(self.info, self.args, self.hook, time.time() - self.started)
        emit(FinishedEvent(node=distributed.own_address(), step=metrics.get("global_steps"),
                      total=metrics.get("global_steps")))


WRITTEN_BY = "written_by"


def script_metrics(info: distributed.DistInfo, args: argparse.Namespace, hook: TrainerHook,
                   seconds: float) -> dict[str, Any]:
    """metrics.json in the output folder: what xeoncluster knows of the run, under what the script
    wrote there itself (its keys win)."""
    ours: dict[str, Any] = {"task": f"module:{args.module}" if args.module else f"script:{Path(args.script).name}",
                            "world_size": info.world_size, "ranks_per_node": info.local_world_size,
                            "seconds": round(seconds, 3), "resumed_from_step": hook.resumed_step}
    if "torch" in sys.modules:
        ours["threads_per_rank"] = sys.modules["torch"].get_num_threads()
    if hook.trainer is not None:
        state = hook.trainer.state
        ours |= {"global_steps": state.global_step, "epochs": state.epoch,
                 "train_loss": next((e["train_loss"] for e in reversed(state.log_history) if "train_loss" in e), None)}
    path = args.output_dir / "metrics.json"
    theirs = _read_json(path)
    if theirs.get(WRITTEN_BY) == "xeoncluster":
        theirs = {}  # an earlier attempt's, not the script's
    merged = ours | theirs | {WRITTEN_BY: "xeoncluster"}
    path.write_text(json.dumps(merged, indent=2) + "\n")
    return merged


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _destroy_process_group() -> None:
    if "torch.distributed" in sys.modules:
        distributed.destroy_process_group()


if __name__ == "__main__":
    faulthandler.enable()  # as the built-in tasks' ranks (node/__main__.py)
    leave(main())
