"""What a failed or interrupted `up` undoes, and the one line that says so."""
from __future__ import annotations

import shutil

from xeoncluster.cluster.command_context import CommandContext
from xeoncluster.cluster.state import ClusterStatus, StateDir
from xeoncluster.core.errors import XeonClusterError


class StepFailed(XeonClusterError):
    pass


def rollback(ctx: CommandContext, step: str, exc: BaseException, keep: bool) -> XeonClusterError:
    reporter = ctx.reporter
    interrupted = isinstance(exc, KeyboardInterrupt)
    reason = "interrupted (Ctrl-C)" if interrupted else _describe(exc)
    reporter.log(f"step '{step}' failed: {reason}")
    if keep:
        kept = _keep(ctx, step, reason)
        kept.exit_code = 130 if interrupted else kept.exit_code
        return kept
    reporter.info(f"up failed at '{step}'; removing what it created")
    try:
        removed = ctx.provider.terminate(ctx.config)
    except (Exception, KeyboardInterrupt) as cleanup:  # noqa: BLE001 - any cleanup error is reported with the step's
        # State stays, so the cluster is still known; `down` finds the rest by tag either way.
        detail = _describe(cleanup)
        reporter.log(f"rollback failed: {detail}")
        return StepFailed(f"up failed at step '{step}': {reason}; removing what it created also failed "
                          f"({detail}), so resources may remain",
                          hint=f"run `xeoncluster down --name {ctx.config.name}` to retry the cleanup",
                          log=reporter.log_path)
    reporter.log(f"rolled back: {removed.items}")
    discard_state(ctx.state)
    error = StepFailed(f"up failed at step '{step}': {reason}; everything it created was removed",
                       log=reporter.log_path, hint=getattr(exc, "hint", None))
    if interrupted:
        error.exit_code = 130
    return error


def _describe(exc: BaseException) -> str:
    return exc.message if isinstance(exc, XeonClusterError) else f"{type(exc).__name__}: {exc}"


def _keep(ctx: CommandContext, step: str, reason: str) -> StepFailed:
    record = ctx.state.load()
    if record is not None:
        record.status = ClusterStatus.FAILED
        ctx.state.save(record)
    return StepFailed(f"up failed at step '{step}': {reason}; resources were kept",
                      hint=f"inspect them, then run `xeoncluster down --name {ctx.config.name}`",
                      log=ctx.reporter.log_path)


def discard_state(state: StateDir) -> None:
    """Drop everything but the lock (the logs live outside the cluster's folder)."""
    for path in state.path.iterdir():
        if path.name == "lock":
            continue
        if path.is_dir():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)
