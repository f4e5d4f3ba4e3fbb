"""Code outside a provider's own subpackage names no provider: adding one must not mean editing it.
Every package is held to this (the agent, runs, storage and kube included), except the providers'
own subpackages, the two lists of them (registry.py, plugins.py), the EC2 stand-in, and the one node
module that reads each provider's notices."""
from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "xeoncluster"
SPECIFIC = ("providers/aws", "providers/local", "providers/registry.py", "providers/plugins.py", "standin",
            "node/checkpoints/notices.py")
NEUTRAL = [p for p in sorted(PACKAGE.rglob("*.py")) if not str(p.relative_to(PACKAGE)).startswith(SPECIFIC)]
PROVIDER_SPECIFIC = re.compile(r"""["'](aws|local|ubuntu)["']|ami-|vpc-|s3://|\.bucket\b|AWS_|169\.254\.169\.254"""
                               r"""|\bimds\b|\bboto3?\b|\baws_[a-z]+\b"""
                               r"""|(?<!providers)(?<=\w)\.(aws|local)\b(?!/)""", re.I)


def test_no_layer_above_the_providers_names_one() -> None:
    found = [f"{path.relative_to(REPO)}:{number}: {line.strip()}" for path in NEUTRAL
             for number, line in enumerate(path.read_text().splitlines(), 1) if PROVIDER_SPECIFIC.search(line)]
    assert found == []
