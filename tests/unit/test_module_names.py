"""One meaning per name: two modules share a base name only when they are the same concept, and the
reason is written here. A new pair fails until it is renamed or explained."""
from __future__ import annotations

from collections import defaultdict
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "xeoncluster"
# The stand-in stands apart (docs/standin.md): its modules are named after the AWS services they stand
# in for, and nothing outside it imports them, so its names are checked among themselves only.
APART = "standin"
# base name -> the modules that share it, and why that is one concept.
SHARED: dict[str, tuple[set[str], str]] = {
    "base.py": ({"providers/base.py", "storage/base.py"}, "a family's interface, one per family"),
    "provider.py": ({"providers/aws/provider.py", "providers/local/provider.py"}, "one provider's code each"),
    "spec.py": ({"providers/spec.py", "providers/aws/spec.py", "providers/local/spec.py"},
                "what a provider declares, and each provider's declaration"),
    "plugin.py": ({"providers/plugin.py", "providers/aws/plugin.py", "providers/local/plugin.py"},
                  "what builds a provider, and each provider's builders"),
    "errors.py": ({"core/errors.py", "node/startup/errors.py"},
                  "errors shown as one line: the laptop's, and the ranks' (which import nothing outside node/)"),
    "images.py": ({"commands/images.py", "providers/aws/images.py"}, "the `images` verb, and AWS's side of it"),
    "plan.py": ({"commands/plan.py", "providers/aws/plan.py"}, "the `plan` verb, and AWS's side of it"),
    "policy.py": ({"commands/policy.py", "providers/aws/policy.py"}, "the `policy` verb, and AWS's side of it"),
}


def shared_names(apart: bool) -> dict[str, set[str]]:
    found: dict[str, set[str]] = defaultdict(set)
    for path in PACKAGE.rglob("*.py"):
        rel = path.relative_to(PACKAGE)
        if path.name in ("__init__.py", "__main__.py") or (rel.parts[0] == APART) != apart:
            continue
        found[path.name].add(rel.as_posix())
    return {name: paths for name, paths in found.items() if len(paths) > 1}


def test_two_modules_share_a_name_only_for_one_concept() -> None:
    assert shared_names(apart=False) == {name: paths for name, (paths, _why) in SHARED.items()}


def test_the_standin_shares_no_name_within_itself() -> None:
    assert shared_names(apart=True) == {}
