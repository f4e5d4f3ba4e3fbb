"""`xeoncluster export`: parse the options into an ExportRequest, print the manifest xeoncluster/kube builds."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from xeoncluster.cli.group import CONTEXT, PassThroughCommand, cli
from xeoncluster.cli.job_options import ExportOptions
from xeoncluster.cli.train_command import job_request
from xeoncluster.core.stacks import get_stack
from xeoncluster.job.train_plan import DEFAULT_MODEL
from xeoncluster.kube import export as kube_export
from xeoncluster.kube.job_spec import DEFAULT_PVC, ExportRequest
from xeoncluster.kube.machine import configured
from xeoncluster.kube.pod_paths import MOUNT
from xeoncluster.providers.config import ClusterConfig, default_config_path, load_config


@cli.command(cls=PassThroughCommand, context_settings=CONTEXT)
@click.argument("kind", metavar="trainjob|pytorchjob")
@click.argument("task", required=False, metavar="squad|glue|SCRIPT.py")
@click.option("-m", "--module", help="run this module of the workdir (python -m MODULE) instead of a script")
@click.option("--workdir", type=click.Path(file_okay=False, path_type=Path),
              help="the folder the script runs in, baked into the job's image (default: the script's folder)")
@click.option("--exclude", "excludes", multiple=True, metavar="GLOB",
              help="leave workdir paths matching GLOB out of the image; repeatable")
@click.option("--include-secret", "include_secrets", multiple=True, metavar="PATH",
              help="put this workdir path into the image although it looks like a secret (.env*, *.pem, *.key, "
                   "id_rsa*, .aws/, .netrc, .ssh/, credentials*), which are refused otherwise; repeatable")
@click.option("--nodes", type=int, help="nodes, one training pod each (numNodes / Worker replicas); "
                                        "default: the config's nodes")
@click.option("--instance-type", help="EC2 instance type of the nodes, from the instance catalog: sizes the ranks, "
                                      "threads and resources and selects the nodes; default: the config's first")
@click.option("--image", help="container image with the stack and xeoncluster/node/ (see --dockerfile); default "
                              "xeoncluster-training:STACK, or for a script xeoncluster-NAME:WORKDIR_DIGEST")
@click.option("--dockerfile", type=click.Path(dir_okay=False, path_type=Path),
              help="also write a Dockerfile for the image here: the stack's pins, tcmalloc, xeoncluster/node/; for a "
                   "script, the workdir on top of the stack's image")
@click.option("--pvc", default=DEFAULT_PVC, show_default=True,
              help=f"PersistentVolumeClaim mounted at {MOUNT} in every pod (ReadWriteMany with several nodes): "
                   "data, outputs, checkpoints and the HF caches")
@click.option("--market", help="spot or on-demand: the capacity type the pods select (Karpenter's "
                               "karpenter.sh/capacity-type label); spot also tolerates a spot taint. "
                               "Default: the config's market (spot)")
@click.option("--stack", "stack_name", help="software stack (stock, intel; ami/stacks.yaml); default: the config's")
@click.option("--config", "config_path", type=click.Path(dir_okay=False, path_type=Path),
              help="cluster.yaml for the defaults above (default: ./cluster.yaml if present, else built-in)")
@click.option("--task", "glue_task", default="mrpc", show_default=True, help="GLUE task name (glue only)")
@click.option("--demo", is_flag=True, help="offline demo: a tiny BERT and synthetic data, built on the PVC")
@click.option("--dataset", help="Hugging Face dataset name (default: squad / glue)")
@click.option("--train-file", help=f"training file's absolute path inside the pod (e.g. on the PVC: {MOUNT}/...)")
@click.option("--eval-file", help="evaluation file's absolute path inside the pod")
@click.option("--model", help=f"hub id or a directory inside the pod (default {DEFAULT_MODEL})")
@click.option("--run", help="run name: names the job and its folder on the PVC (default TASK-TIMESTAMP; "
                            "lowercase letters, digits, '-')")
@click.option("--ppn", type=int, help="ranks per node (default: one per socket)")
@click.option("--threads", type=int, help="OpenMP threads per rank (default: physical cores per rank of the pod)")
@click.option("--env", "env_pairs", multiple=True, metavar="K=V",
              help="extra env for every rank, written into the manifest as plain text (use a Secret for "
                   "tokens); repeatable")
@click.option("--offline", is_flag=True, help="set HF_HUB_OFFLINE=1 in the pods")
@click.option("--tune/--no-tune", default=True, show_default=True,
              help="--no-tune drops the computed threads/binding/tcmalloc (for comparison)")
@click.option("--max-restarts", type=int, default=2, show_default=True,
              help="restart the job's pods and resume from the newest checkpoint this many times after a lost "
                   "node or a failure; 0 fails at once. Kubeflow counts lost nodes and failures alike, so there "
                   "is no --max-interruptions here (`train` has it)")
@click.pass_context
def export(ctx: click.Context, **given: Any) -> None:
    """Print a Kubernetes manifest (YAML) that runs TASK (squad or glue), or your SCRIPT.py (or -m
    MODULE), as `xeoncluster train` would.

    \b
    trainjob    Kubeflow Trainer v2: a TrainingRuntime (restart settings) and a TrainJob
    pytorchjob  Kubeflow Training Operator: a PyTorchJob (legacy API)

    Ranks per node, OpenMP threads, thread binding and LD_PRELOAD (tcmalloc) come from the planner
    `train` uses, over the CPUs one pod gets of an --instance-type node; requests equal limits and a
    core and some memory stay with kubelet. Every pod runs torchrun over `python -m xeoncluster.node`, with
    /dev/shm in memory and the --pvc volume for data, outputs and caches; after a lost (spot) node
    the pods restart and resume from the newest checkpoint. A script runs from its own image (the
    workdir on top of the stack's; --dockerfile writes it) under the wrapper `train` uses. Nothing
    here talks to a cluster: apply the output with `kubectl apply -f`. Arguments after `--` go to
    `python -m xeoncluster.node` and the HF TrainingArguments (e.g. -- --epochs 2 --learning_rate 5e-5), or
    to your script ({output} becomes the pod's output folder, {data} the PVC's mount).
    """
    options, _ = ExportOptions.of(ctx, given)
    globals_ = (ctx.find_root().obj or {}).get("globals", {})
    _export(options, load_config(options.config_path or globals_.get("config_path") or default_config_path()))


def _export(options: ExportOptions, config: ClusterConfig) -> None:
    stack = get_stack(options.stack_name or config.stack)
    default_type, default_market = configured(config)
    request = ExportRequest(
        kind=options.kind, train=job_request(options, {}, {}),
        nodes=config.nodes if options.nodes is None else options.nodes,
        instance_type=options.instance_type or default_type, image=options.image, pvc=options.pvc,
        market=options.market or default_market)
    result = kube_export.export(request, stack)
    if options.dockerfile is not None:
        kube_export.write_dockerfile(options.dockerfile, result, stack)
        context = result.spec.workdir.root if result.spec.workdir else "<a xeoncluster checkout>"
        click.echo(f"wrote {options.dockerfile}: docker build -f {options.dockerfile} -t {result.spec.image} "
                   f"{context}", err=True)
    click.echo(kube_export.to_yaml(result), nl=False)
