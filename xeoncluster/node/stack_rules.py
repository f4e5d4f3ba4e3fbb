"""The rules a software stack must satisfy, on version strings alone.

Both sides apply them: the provisioner to the pins in xeoncluster/ami/stacks.yaml before anything is created,
the nodes to what is installed before training starts. Nothing here imports torch, so the
provisioner can use it on a machine without the training stack.
"""

from __future__ import annotations

import re

# transformers accepted ddp_backend="ccl" for the last time in 5.0.0.
LAST_TRANSFORMERS_WITH_CCL = (5, 0, 0)
BACKENDS = ("gloo", "ccl")


def release(version: str) -> tuple[int, ...]:
    """Leading numeric release: '5.0.0rc1' -> (5, 0, 0), '2.7.0+cpu' -> (2, 7, 0)."""
    match = re.match(r"\d+(?:\.\d+)*", version.strip())
    return tuple(int(p) for p in match.group(0).split(".")) if match else ()


def minor(version: str) -> str:
    return ".".join(str(p) for p in release(version)[:2])


def built_for_torch(extension: str, torch: str | None) -> bool:
    """IPEX and the oneCCL bindings are each built against one torch major.minor."""
    return torch is not None and release(extension)[:2] == release(torch)[:2]


def accepts_ccl(transformers: str) -> bool:
    return release(transformers) <= LAST_TRANSFORMERS_WITH_CCL


def ccl_allowed(stack_backend: str) -> bool:
    """Only a stack built with the oneCCL bindings (the intel stack) can use the ccl backend."""
    return stack_backend == "ccl"
