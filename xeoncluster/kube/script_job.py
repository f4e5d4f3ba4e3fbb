"""`export ... SCRIPT.py` / `-m MODULE`: a user's script as the pods run it. The workdir goes into an
image of its own, built on the stack's image (`export ... squad --dockerfile` writes that one); every
rank runs the same wrapper `train` runs on EC2 nodes, so the Trainer hook, resume and metrics hold."""
from __future__ import annotations

import json
import re
from pathlib import Path

from xeoncluster.core.stacks import Stack
from xeoncluster.job.script_plan import filled_args
from xeoncluster.job.train_request import ScriptRequest
from xeoncluster.job.workdir import Workdir
from xeoncluster.kube.pod_paths import PACKAGE_ROOT, DataPaths

WORKDIR = f"{PACKAGE_ROOT}/work"  # where the script's image holds the workdir


def stack_image(stack: Stack) -> str:
    return f"xeoncluster-training:{stack.name}"


def default_image(request: ScriptRequest, workdir: Workdir) -> str:
    """One tag per workdir content: a changed script is a new image, never a stale one pulled from cache."""
    name = request.module or Path(str(request.script)).stem
    slug = re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")[:40] or "script"
    return f"xeoncluster-{slug}:{workdir.digest}"


def script_program(request: ScriptRequest, paths: DataPaths, workdir: Workdir) -> tuple[str, ...]:
    """`--resume` always: a restarted pod continues from the newest checkpoint in its folder."""
    args = ["python", "-m", "xeoncluster.node.user_script", "--output-dir", paths.output_dir, "--workdir", WORKDIR]
    if request.module:
        args += ["--module", request.module]
    else:
        args += ["--script", Path(str(request.script)).resolve().relative_to(workdir.root).as_posix()]
    return (*args, "--resume", "--", *filled_args(request.trainer_args, paths.output_dir, paths.mount))


def script_dockerfile_text(base_image: str, image: str, workdir: Workdir) -> str:
    """Only the files `train` would send (refusals and --exclude apply), named one by one: the build
    context is the workdir as it is, .git and all."""
    copies = "".join(f"COPY {json.dumps([rel, f'{WORKDIR}/{rel}'])}\n"
                     for rel in (p.relative_to(workdir.root).as_posix() for p in workdir.files))
    requirements = (f"RUN pip install --no-cache-dir -r {WORKDIR}/requirements.txt\n"
                    if workdir.requirements is not None else "")
    return f"""\
# The image of `xeoncluster export` for the script in {workdir.root}: the stack's image and the workdir.
# Build the stack's image first (`xeoncluster export trainjob squad --dockerfile Dockerfile.stack`,
# then `docker build -f Dockerfile.stack -t {base_image} .` in a xeoncluster checkout); then, from
# the workdir:
#   docker build -f THIS_FILE -t {image} {workdir.root} && docker push {image}
FROM {base_image}

{copies}{requirements}WORKDIR {WORKDIR}
"""
