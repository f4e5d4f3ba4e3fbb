"""A rank's process runs its exit handlers, then ends without interpreter finalization, where a gloo
worker thread that asks for the GIL is ended inside C++ and the rank aborts (process_exit.py). It has
faulthandler on, so a crash in native code leaves every thread's Python stack in the run's log."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from .training_helpers import REPO, offline_env

# Loaded by every Python the test starts: marks the exit handlers (naming faulthandler's state then),
# and finalization (module globals are released there, so the object's __del__ runs).
SITECUSTOMIZE = """
import atexit, faulthandler, os
_markers = os.environ["XC_TEST_MARKERS"]

def _touch(name, join=os.path.join, close=os.close, open_=os.open, flags=os.O_CREAT | os.O_WRONLY):
    close(open_(join(_markers, name), flags))

atexit.register(lambda: _touch(f"exit-handlers-faulthandler-{faulthandler.is_enabled()}"))

class _Finalization:
    def __del__(self, touch=_touch):
        touch("finalization")

_finalization = _Finalization()
"""


def _markers_after(argv: list[str], tmp_path: Path) -> set[str]:
    site, markers = tmp_path / "site", tmp_path / "markers"
    site.mkdir()
    markers.mkdir()
    (site / "sitecustomize.py").write_text(SITECUSTOMIZE)
    env = offline_env(XC_TEST_MARKERS=str(markers))
    env["PYTHONPATH"] = f"{site}:{env['PYTHONPATH']}"
    done = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    return {p.name for p in markers.iterdir()}


def test_the_marker_sees_finalization_in_a_plain_python(tmp_path: Path) -> None:
    assert _markers_after([sys.executable, "-c", "pass"], tmp_path) == {"exit-handlers-faulthandler-False",
                                                                         "finalization"}


def test_a_rank_runs_its_exit_handlers_and_skips_finalization(tmp_path: Path, demo_dir: Path) -> None:
    argv = [sys.executable, "-m", "xeoncluster.node", "demo-assets", "--out", str(demo_dir)]
    assert _markers_after(argv, tmp_path) == {"exit-handlers-faulthandler-True"}


def test_a_users_script_rank_too(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text("print('trained')\n")
    argv = [sys.executable, "-m", "xeoncluster.node.user_script", "--output-dir", str(tmp_path / "out"),
            "--workdir", str(tmp_path), "--script", str(script)]
    assert _markers_after(argv, tmp_path) == {"exit-handlers-faulthandler-True"}
