"""The entry point `xeoncluster export` calls: the job's values, its manifest(s) as YAML, its Dockerfile."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from xeoncluster.core.errors import ConfigError
from xeoncluster.core.stacks import Stack
from xeoncluster.kube import pytorchjob, trainjob
from xeoncluster.kube.dockerfile import dockerfile_text
from xeoncluster.kube.job_spec import ExportRequest, JobSpec, build_job_spec
from xeoncluster.kube.script_job import script_dockerfile_text, stack_image

APPLY_NEEDS = {"trainjob": "the Kubeflow Trainer v2 CRDs (TrainJob, TrainingRuntime) and JobSet",
               "pytorchjob": "the Kubeflow Training Operator (PyTorchJob)"}


@dataclass(frozen=True)
class Export:
    kind: str
    spec: JobSpec
    documents: tuple[dict[str, Any], ...]


def export(request: ExportRequest, stack: Stack) -> Export:
    spec = build_job_spec(request, stack)
    documents = trainjob.manifests(spec) if request.kind == "trainjob" else [pytorchjob.manifest(spec)]
    return Export(request.kind, spec, tuple(documents))


def header(result: Export) -> list[str]:
    """Comment lines above the YAML: the numbers and where they come from (kubectl ignores them)."""
    spec = result.spec
    threads = f"{spec.threads_per_rank} thread(s) each" if spec.threads_per_rank else "library default threads"
    return [
        f"xeoncluster export {result.kind}: {spec.nodes} x {spec.machine.instance_type} ({spec.placement.market}), "
        f"stack {spec.stack}",
        f"{spec.world_size} rank(s): {spec.nodes} pod(s) x {spec.ranks_per_node} rank(s), {threads} "
        "(the planner `xeoncluster train` uses)",
        *spec.notes,
        f"PVC {spec.pvc} at {spec.paths.mount}: run folder {spec.paths.run_dir} (one node-K folder per pod), "
        f"HF caches in {spec.paths.hf_home}",
        f"kubectl apply -f FILE needs {APPLY_NEEDS[result.kind]}",
    ]


def to_yaml(result: Export) -> str:
    comments = "".join(f"# {line}\n" for line in header(result))
    return comments + yaml.safe_dump_all(list(result.documents), sort_keys=False, width=1000,
                                         explicit_start=True)


def write_dockerfile(path: Path, result: Export, stack: Stack) -> None:
    spec = result.spec
    if spec.workdir is not None:
        text = script_dockerfile_text(stack_image(stack), spec.image, spec.workdir)
    else:
        text = dockerfile_text(stack, spec.machine.topology, spec.image)
    if not path.parent.is_dir():
        raise ConfigError(f"--dockerfile {path}: folder {path.parent} does not exist")
    path.write_text(text)
