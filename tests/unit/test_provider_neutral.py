"""Layers above the providers name no provider: adding one must not mean editing them."""
from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "xeoncluster"
NEUTRAL = [*sorted((PACKAGE / "commands").glob("*.py")),
           *sorted((PACKAGE / "cli").glob("*.py")),
           *(PACKAGE / name for name in (
               "config.py", "context.py", "train_plan.py", "image.py", "render.py", "state.py")),
           *(p for p in sorted((PACKAGE / "node").glob("*.py")) if p.name != "notices.py")]
PROVIDER_SPECIFIC = re.compile(r"""["'](aws|local)["']|ami-|vpc-|169\.254\.169\.254|\bimds\b|\bboto3?\b""", re.I)


def test_no_layer_above_the_providers_names_one() -> None:
    found = [f"{path.relative_to(REPO)}:{number}: {line.strip()}" for path in NEUTRAL
             for number, line in enumerate(path.read_text().splitlines(), 1) if PROVIDER_SPECIFIC.search(line)]
    assert found == []
