"""`xeoncluster train`: parse what the user asked for into a task's or a script's request; the command module
runs it."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from xeoncluster.cli import render, render_runs
from xeoncluster.cli.group import CONTEXT, PassThroughCommand, cli, cluster_options, command_context
from xeoncluster.cli.job_options import JobOptions, TrainOptions
from xeoncluster.cli.render_training import echo_line
from xeoncluster.cluster.command_context import CommandContext
from xeoncluster.commands.train import train as train_cmd
from xeoncluster.commands.train import train_storage
from xeoncluster.core.errors import ConfigError
from xeoncluster.core.stacks import get_stack
from xeoncluster.job import sweep
from xeoncluster.job.train_plan import DEFAULT_MODEL, TASKS, check_request, dry_run_plan, parse_env
from xeoncluster.job.train_request import DEFAULT_STALL_MINUTES, SCRIPT_TASK, AnyRequest, ScriptRequest, TaskRequest
from xeoncluster.providers.abilities import machine_topology, placement
from xeoncluster.providers.registry import spec_for, storage_forms

# What the built-in tasks alone take: a script brings its own model, data and arguments.
TASK_ONLY = (("--demo", "demo"), ("--dataset", "dataset"), ("--train-file", "train_file"),
             ("--eval-file", "eval_file"), ("--model", "model"))
SCRIPT_ONLY = (("--workdir", "workdir"), ("--data", "data"), ("--exclude", "excludes"),
               ("--include-secret", "include_secrets"))


@cli.command(cls=PassThroughCommand, context_settings=CONTEXT)
@cluster_options
@click.argument("task", required=False, metavar="squad|glue|SCRIPT.py")
@click.option("-m", "--module", help="run this module of the workdir (python -m MODULE) instead of a script")
@click.option("--workdir", type=click.Path(file_okay=False, path_type=Path),
              help="script: the folder that goes to every node and that it runs in (default: the script's own; "
                   "with -m, the current folder)")
@click.option("--data", "data_files", multiple=True, type=click.Path(dir_okay=False, path_type=Path),
              metavar="FILE", help="script: a data file for every node, in $XC_DATA_DIR (or {data} in ARGS); "
                                   "repeatable")
@click.option("--exclude", "excludes", multiple=True, metavar="GLOB",
              help="script: leave this workdir path out (a name or a relative path; globs allowed); repeatable")
@click.option("--include-secret", "include_secrets", multiple=True, metavar="PATH",
              help="script: send this workdir path although it looks like a secret (.env*, *.pem, *.key, id_rsa*, "
                   ".aws/, .netrc, .ssh/, credentials*), which are refused otherwise; repeatable")
@click.option("--task", "glue_task", default="mrpc", show_default=True, help="GLUE task name (glue only)")
@click.option("--demo", is_flag=True, help="offline demo: a tiny BERT and synthetic data built on the nodes")
@click.option("--dataset", help="Hugging Face dataset name (default: squad / glue)")
@click.option("--train-file", type=click.Path(dir_okay=False, path_type=Path),
              help="local training file (SQuAD JSON flat or nested; GLUE TSV/CSV/JSON); copied to every node")
@click.option("--eval-file", type=click.Path(dir_okay=False, path_type=Path), help="local evaluation file")
@click.option("--model", help=f"hub id or a directory on the nodes (default {DEFAULT_MODEL})")
@click.option("--run", help="run name (default TASK-TIMESTAMP); results go to results/NAME/RUN under "
              "$XEONCLUSTER_HOME (default ~/.xeoncluster)")
@click.option("--resume", is_flag=True, help="continue the run (default: the latest) from its last checkpoint")
@click.option("--resume-from", metavar="CLUSTER/RUN",
              help="continue run RUN of another cluster, CLUSTER, from its newest checkpoint in storage (copied "
                   "under this cluster's name first); implies --resume and --run RUN")
@click.option("--ppn", type=int, help="ranks per node (default: one per socket)")
@click.option("--threads", type=int, help="OpenMP threads per rank (default: physical cores per rank)")
@click.option("--env", "env_pairs", multiple=True, metavar="K=V", help="extra environment for every rank; repeatable")
@click.option("--fetch-model", type=click.Path(file_okay=False, path_type=Path), help="copy the trained model here")
@click.option("--offline", is_flag=True, help="set HF_HUB_OFFLINE=1 on the nodes")
@click.option("--tune/--no-tune", default=True, show_default=True,
              help="--no-tune drops the computed threads/pinning/tcmalloc (for comparison)")
@click.option("--max-restarts", type=int, default=2, show_default=True,
              help="restart after the job's own failure (a stall: the step stopped advancing with every node "
                   "there) this many times; 0 fails at once. Lost nodes count apart (--max-interruptions)")
@click.option("--max-interruptions", type=int, metavar="N",
              help="replace a lost node (spot notice, reclaim, a node gone without a word) and resume from the "
                   "newest checkpoint this many times; 0 fails at the first loss  [default: no bound]")
@click.option("--min-nodes", type=click.IntRange(min=1), default=1, show_default=True,
              help="when a lost node cannot be replaced (no capacity), the run trains on with the nodes it has, "
                   "keeping its global batch, and grows back when capacity returns; below this many nodes it "
                   "waits instead, checkpointed and stored, asking for capacity")
@click.option("--train-while-replacing/--wait-for-replacement", default=True, show_default=True,
              help="a worker lost with no replacement ready (no notice, or a notice shorter than a boot): the "
                   "run trains on with the other nodes (down to --min-nodes, keeping its global batch) while "
                   "the replacement boots, and grows back once it is ready. --wait-for-replacement keeps every "
                   "node waiting for it instead, idle, and resumes on as many nodes as before")
@click.option("--max-cost", type=float, metavar="USD",
              help="stop the run once its nodes have cost this much (their $/hour times its hours), checkpointed "
                   "and stored as at the cluster's deadline; `train --run RUN --resume` continues it without a "
                   "ceiling unless given a new one. Needs a provider with prices  [default: no ceiling]")
@click.option("--stall-minutes", type=click.FloatRange(min=0, min_open=True), default=DEFAULT_STALL_MINUTES,
              show_default=True,
              help="a run whose step has not advanced for this long, and for 10x its median step time, is a hang "
                   "(often a rank stuck in an all-reduce): the ranks' stacks are saved in the run's folder and the "
                   "run restarts from its newest checkpoint, as a restart")
@click.option("--storage", metavar="URL",
              help=f"where the run keeps what must outlive the nodes: {storage_forms()}; default: the "
                   "config's storage (auto)")
@click.option("--detach", is_flag=True,
              help="return as soon as the run has started or is queued (it goes on on the cluster); follow it "
                   "later with `xeoncluster logs RUN -f`")
@click.option("--sweep", "sweeps", multiple=True, metavar="KEY=V1,V2,...",
              help="queue one run per value (repeat for more keys: one run per combination), named RUN-1..N; "
                   "each gets its values as `--KEY VALUE` after `--`, or in place of {KEY} in those arguments "
                   "(e.g. --sweep lr=1e-4,3e-4 -- --max_steps 60)")
@click.option("--dry-run", is_flag=True, help="print the exact mpirun command and environment (with --sweep: the "
              "runs it would queue); run nothing")
@click.option("--nodes", type=int, help="with --dry-run and no cluster: plan for this many nodes")
@click.option("--instance-type", help="with --dry-run and no cluster: plan for this instance type")
@click.pass_context
def train(ctx: click.Context, **given: Any) -> None:
    """Fine-tune across every node with mpirun + PyTorch DDP: a built-in TASK (squad or glue), your
    own SCRIPT.py (or -m MODULE), run unchanged as one job: plain torch.distributed, accelerate or
    the HF Trainer (see docs/scripts.md).

    Ranks per node, threads, pinning and LD_PRELOAD come from each node's topology. The run is
    handed to the cluster's run agent (on the master; for local nodes, on this machine), which
    owns it to the end: closing this terminal does not stop it, and a lost node is replaced and
    the run resumed from its newest checkpoint. On a busy cluster the run is queued: it starts
    when the runs before it have ended (`xeoncluster runs` shows the queue). This command then
    follows its log; Ctrl-C detaches (the run goes on). At the end the results are fetched into
    $XEONCLUSTER_HOME/results/NAME/RUN. Arguments after `--` go to the HF TrainingArguments
    (e.g. -- --learning_rate 5e-5), or to your script ({output} and {data} in them become the run's
    output folder and the --data folder on the nodes). --sweep queues one run per value.
    """
    options, cluster = TrainOptions.of(ctx, given)
    _train(ctx, options, cluster)


def _train(ctx: click.Context, options: TrainOptions, cluster: dict[str, Any]) -> None:
    source, run, resume = None, options.run, options.resume
    if options.resume_from is not None:
        source, run = train_storage.resume_source(options.resume_from, run)
        resume = True
    request = job_request(options, {"run": run, "resume": resume, "fetch_model": options.fetch_model,
                                    "storage": options.storage, "resume_from": source,
                                    "stall_minutes": options.stall_minutes,
                                    "max_interruptions": options.max_interruptions,
                                    "min_nodes": options.min_nodes,
                                    "train_while_replacing": options.train_while_replacing,
                                    "max_cost": options.max_cost},
                          {"data": options.data_files})
    axes = sweep.parse_axes(options.sweeps)
    context = command_context(ctx, cluster)
    if options.dry_run and (options.instance_type is not None or options.nodes is not None):
        _plan_without_cluster(context, request, options.instance_type, options.nodes)
        return
    result = train_cmd.run(context, request, train_cmd.SubmitMode(options.dry_run, options.detach, axes), echo_line,
                           echo_line.steps())
    if isinstance(result, train_cmd.Planned):
        render_runs.planned(result)
        return
    for item in result:
        if isinstance(item, train_cmd.Submitted):
            render_runs.submitted(item)
        else:
            render_runs.training_result(item, context.config.name)


def _plan_without_cluster(context: CommandContext, request: AnyRequest, instance_type: str | None,
                          nodes: int | None) -> None:
    config = context.config
    stack = get_stack(config.stack)
    check_request(request, stack)
    kind = instance_type or placement(context.provider, config).instance_type
    topology = machine_topology(context.provider, kind)
    render.launch_plan(dry_run_plan(request, stack, topology, kind, config.nodes if nodes is None else nodes,
                                    config.ssh.user or spec_for(config.provider).default_user))


def request_of(task: str, script: Path | None, module: str | None, common: dict[str, Any],
               task_options: dict[str, Any], script_options: dict[str, Any]) -> AnyRequest:
    """`task` (from task_of) names a built-in task or SCRIPT_TASK: that kind's request, with its own options
    and those of every run (`common`); one kind's option given to the other is an error."""
    if task != SCRIPT_TASK:
        foreign = [flag for flag, field in SCRIPT_ONLY if script_options.get(field)]
        if foreign:
            raise ConfigError(f"{', '.join(foreign)} belong(s) to scripts; the built-in task {task} "
                              "takes its data from --dataset or --train-file/--eval-file",
                              hint=f"drop {', '.join(foreign)}, or train your own SCRIPT.py")
        return TaskRequest(task=task, **task_options, **common)
    given = [flag for flag, field in TASK_ONLY if task_options.get(field)]
    if given:
        raise ConfigError(f"{', '.join(given)} belong(s) to the built-in tasks; a script brings its own model and data",
                          hint="pass data files with --data FILE and the script's own options after `--`")
    return ScriptRequest(script=script, module=module, **script_options, **common)


def job_request(options: JobOptions, common: dict[str, Any], script_options: dict[str, Any]) -> AnyRequest:
    """The request of a job's options, with what only one command takes (`common` to every run, and to
    scripts)."""
    return request_of(
        task_of(options.task, options.module), script_of(options.task), options.module,
        {"run": options.run, "ppn": options.ppn, "threads": options.threads, "env": parse_env(options.env_pairs),
         "trainer_args": options.trainer_args, "offline": options.offline, "tuned": options.tune,
         "max_restarts": options.max_restarts, **common},
        {"glue_task": options.glue_task, "dataset": options.dataset, "train_file": options.train_file,
         "eval_file": options.eval_file, "model": options.model, "demo": options.demo},
        {"workdir": options.workdir, "excludes": options.excludes, "include_secrets": options.include_secrets,
         **script_options})


def task_of(task: str | None, module: str | None) -> str:
    if module is not None or (task is not None and script_of(task) is not None):
        if module is not None and task is not None:
            raise click.UsageError(f"give a script or -m {module}, not both ({task!r} too)")
        return SCRIPT_TASK
    if task is None:
        raise click.UsageError("missing TASK: squad, glue, a script PATH.py, or -m MODULE")
    return task


def script_of(task: str | None) -> Path | None:
    """A TASK that names a Python file (existing or not: a missing one is an error of its own)."""
    if task is None or task in TASKS:
        return None
    return Path(task) if task.endswith(".py") or "/" in task else None

