"""Proof that `up` on the stand-in catches what moto could not: each patch in unfixes/ takes one fix of
the AWS first-use review back out of HEAD (defects 1, 2, 4, 5, 7 and 13), and the stand-in test that
covers the defect must then fail. Run as root, one patch at a time (about 2 minutes each):

    python -m tests.standin.unfixed [PATCH-NAME ...]

Each run unpacks `git archive HEAD` into a temporary directory, applies the patch there and runs the
stand-in CLI tests in that copy; the checkout itself is not touched. The same tests run on HEAD
unpatched first. Exit 1 if one fails on HEAD or a patch goes uncaught.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
UNFIXES = Path(__file__).resolve().parent / "unfixes"
TESTS = "tests/standin/test_cli_on_standin.py"
# The test that must fail without each fix (pytest -k).
CATCHING_TEST = {
    "1-apt-races-first-boot": "cold_up",
    "2-image-waiter-notfound": "cold_up",
    "4-workers-ignore-the-masters-zone": "one_zone",
    "5-stale-host-key-after-re-up": "cold_up",
    "7-console-host-keys-read-once": "cold_up or warm_up",
    "13-image-carries-instance-identity": "cold_up or warm_up",
}


@dataclass
class Outcome:
    patch: str
    test: str
    caught: bool
    seconds: float
    failure: str


def unpacked_head(into: Path) -> None:
    archive = subprocess.run(["git", "-C", str(REPO), "archive", "HEAD"], check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)


def first_failure(output: str) -> str:
    """The first failed test and its first `E` line (what was asserted), or pytest's last line."""
    test = re.search(r"^(FAILED|ERROR) (\S+)", output, re.M)
    why = re.search(r"^E +(.+)$", output, re.M)
    if not test:
        return (output.strip().splitlines() or [""])[-1]
    return f"{test.group(2).split('::')[-1]}: {why.group(1) if why else '?'}"[:400]


def run_tests(patch: str | None, test: str) -> Outcome:
    """The stand-in test `test` on HEAD, with `patch` applied when given."""
    with tempfile.TemporaryDirectory(prefix="xc-unfixed-") as tmp:
        tree = Path(tmp)
        unpacked_head(tree)
        if patch is not None:
            subprocess.run(["git", "apply", str(UNFIXES / f"{patch}.patch")], cwd=tree, check=True)
        started = time.monotonic()
        proc = subprocess.run([sys.executable, "-m", "pytest", "-x", "-q", "-rfE", "-p", "no:cacheprovider",
                               TESTS, "-k", test], cwd=tree, capture_output=True, text=True,
                              env={**os.environ, "PYTHONPATH": str(tree)})
        seconds = round(time.monotonic() - started, 1)
    output = proc.stdout + proc.stderr
    if proc.returncode not in (0, 1) or (re.search(r"\bskipped\b", output) and proc.returncode == 0):
        raise SystemExit(f"{patch or 'HEAD'}: the stand-in tests did not run (exit {proc.returncode}):\n"
                         f"{output[-2000:]}")
    return Outcome(patch or "HEAD (no patch)", test, proc.returncode == 1, seconds,
                   first_failure(output) if proc.returncode == 1 else "passed")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("patches", nargs="*", default=list(CATCHING_TEST), help=", ".join(CATCHING_TEST))
    args = parser.parse_args()
    unknown = sorted(set(args.patches) - set(CATCHING_TEST))
    if unknown:
        parser.error(f"unknown patch(es) {', '.join(unknown)}; known: {', '.join(CATCHING_TEST)}")
    # First the tests as they are: a test that fails on HEAD would prove nothing below.
    baseline = [run_tests(None, test) for test in dict.fromkeys(CATCHING_TEST[p] for p in args.patches)]
    outcomes = [run_tests(patch, CATCHING_TEST[patch]) for patch in args.patches]
    print(json.dumps([asdict(o) for o in baseline + outcomes], indent=2))
    for o in baseline:
        print(f"{o.patch:38} {'FAILS' if o.caught else 'passes':7} {o.seconds:6.0f}s  {o.test}: {o.failure}")
    for o in outcomes:
        print(f"{o.patch:38} {'caught' if o.caught else 'MISSED':7} {o.seconds:6.0f}s  {o.failure}")
    return 0 if all(o.caught for o in outcomes) and not any(o.caught for o in baseline) else 1


if __name__ == "__main__":
    sys.exit(main())
