"""A Dockerfile for the job's image: the stack's pins (xeoncluster/ami/stacks.yaml), tcmalloc, the training package."""
from __future__ import annotations

import shlex

from xeoncluster.core.errors import ConfigError
from xeoncluster.core.stacks import Stack
from xeoncluster.kube.pod_paths import PACKAGE_ROOT
from xeoncluster.topology import CpuTopology

BASE_IMAGE = "debian:bookworm-slim"
BASE_PYTHON = (3, 11)  # Debian 12's python3, the one the node images' venvs are built with too
VENV = "/opt/venv"


def dockerfile_text(stack: Stack, topology: CpuTopology, image: str) -> str:
    """`topology.tcmalloc` is the path LD_PRELOAD names in the manifest; Debian's libgoogle-perftools4 puts
    libtcmalloc.so.4 exactly there."""
    if stack.python_min > BASE_PYTHON:
        raise ConfigError(f"stack {stack.name}: needs python {stack.python}, but the image is built on "
                          f"{BASE_IMAGE} (python {'.'.join(map(str, BASE_PYTHON))})")
    indexes = "".join(f" \\\n        --extra-index-url {shlex.quote(url)}" for url in stack.index_urls)
    pins = "".join(f" \\\n        {shlex.quote(package)}" for package in stack.packages)
    return f"""\
# The training image for `xeoncluster export`, stack {stack.name} ({stack.description}).
# Build it from a xeoncluster checkout (the context must hold xeoncluster/node/), then push it where the
# cluster pulls from:
#   docker build -f THIS_FILE -t {image} . && docker push {image}
FROM {BASE_IMAGE}

# tcmalloc for LD_PRELOAD ({topology.tcmalloc}), and the python the stack's venv uses.
RUN apt-get update \\
    && apt-get install -y --no-install-recommends python3 python3-venv libgoogle-perftools4 ca-certificates \\
    && rm -rf /var/lib/apt/lists/*

RUN python3 -m venv {VENV}
ENV PATH={VENV}/bin:$PATH

# The same pins as the node images (xeoncluster/ami/stacks.yaml, stack {stack.name}).
RUN pip install --no-cache-dir{indexes}{pins}

COPY xeoncluster/__init__.py {PACKAGE_ROOT}/xeoncluster/
COPY xeoncluster/node/ {PACKAGE_ROOT}/xeoncluster/node/
ENV PYTHONPATH={PACKAGE_ROOT}
WORKDIR {PACKAGE_ROOT}
"""
