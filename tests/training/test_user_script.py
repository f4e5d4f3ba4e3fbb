"""The wrapper a user's script runs under (python -m xeoncluster.node.user_script), one rank in a subprocess:
the environment the script sees, how its ending is reported, and that the rank ends once reported."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.training.training_helpers import REPO, events_in, offline_env


def wrap(tmp_path: Path, script: str, *args: str, resume: bool = False,
         timeout: float = 60) -> subprocess.CompletedProcess[str]:
    workdir = tmp_path / "work"
    workdir.mkdir(exist_ok=True)
    (workdir / "job.py").write_text(script)
    own = ["--output-dir", str(tmp_path / "out"), "--workdir", str(workdir), "--script", "job.py"]
    return subprocess.run([sys.executable, "-m", "xeoncluster.node.user_script", *own,
                           *(["--resume"] if resume else []),
                           "--", *args], cwd=REPO, env=offline_env(XC_STOP_GRACE="5"), capture_output=True,
                          text=True, timeout=timeout)


def events(result: subprocess.CompletedProcess[str]) -> list[dict[str, object]]:
    return [json.loads(e.to_json()) for e in events_in(result.stdout)]


def test_the_script_sees_its_args_workdir_and_job_environment(tmp_path: Path) -> None:
    script = ("import json, os, sys\n"
              "keys = ('RANK', 'WORLD_SIZE', 'LOCAL_RANK', 'LOCAL_WORLD_SIZE', 'MASTER_ADDR', 'XC_OUTPUT_DIR',\n"
              "        'XC_STOP_FILE', 'ACCELERATE_USE_CPU')\n"
              "seen = {k: os.environ.get(k) for k in keys} | {'argv': sys.argv[1:], 'cwd': os.getcwd(),\n"
              "       'name': __name__}\n"
              "open(os.path.join(os.environ['XC_OUTPUT_DIR'], 'seen.json'), 'w').write(json.dumps(seen))\n")
    result = wrap(tmp_path, script, "--lr", "0.1")
    assert result.returncode == 0, result.stderr
    seen = json.loads((tmp_path / "out" / "seen.json").read_text())
    assert seen == {"RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1",
                    "MASTER_ADDR": "127.0.0.1", "XC_OUTPUT_DIR": str(tmp_path / "out"),
                    "XC_STOP_FILE": str(tmp_path / "out" / "stop-request"), "ACCELERATE_USE_CPU": "1",
                    "argv": ["--lr", "0.1"], "cwd": str(tmp_path / "work"), "name": "__main__"}
    assert [e["kind"] for e in events(result)] == ["started", "finished"]
    metrics = json.loads((tmp_path / "out" / "metrics.json").read_text())
    assert metrics["task"] == "script:job.py" and metrics["world_size"] == 1


def test_a_rank_ends_once_reported_even_with_a_thread_left_running(tmp_path: Path) -> None:
    """A thread the script leaves behind (or torch's process-group destructor at finalization) must not
    keep the rank, and so the job, alive; the script's exit handlers still run."""
    script = ("import atexit, os, threading, time\n"
              "threading.Thread(target=time.sleep, args=(3600,)).start()\n"
              "atexit.register(lambda: open(os.path.join(os.environ['XC_OUTPUT_DIR'], 'atexit'), 'w').close())\n")
    result = wrap(tmp_path, script, timeout=30)
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "out" / "atexit").exists()


def test_metrics_the_script_wrote_win_over_ours(tmp_path: Path) -> None:
    script = ("import json, os\n"
              "open(os.path.join(os.environ['XC_OUTPUT_DIR'], 'metrics.json'), 'w').write(\n"
              "    json.dumps({'accuracy': 0.9, 'world_size': 'mine'}))\n")
    assert wrap(tmp_path, script).returncode == 0
    metrics = json.loads((tmp_path / "out" / "metrics.json").read_text())
    assert metrics["accuracy"] == 0.9 and metrics["world_size"] == "mine" and metrics["written_by"] == "xeoncluster"


def test_an_exit_status_or_exception_is_the_rank_s_failure(tmp_path: Path) -> None:
    exited = wrap(tmp_path, "import sys\nsys.exit(3)\n")
    assert exited.returncode == 3
    assert events(exited)[-1]["kind"] == "failed" and "status 3" in str(events(exited)[-1]["reason"])
    raised = wrap(tmp_path, "raise ValueError('bad batch size')\n")
    assert raised.returncode == 1
    failed = events(raised)[-1]
    assert failed["kind"] == "failed" and failed["reason"] == "ValueError: bad batch size"
    assert any("bad batch size" in line for line in failed["lines"])  # type: ignore[attr-defined]
    assert wrap(tmp_path, "import sys\nsys.exit('no data')\n").returncode == 1


def test_a_resumed_run_is_told_its_newest_complete_checkpoint(tmp_path: Path) -> None:
    out = tmp_path / "out"
    for step, complete in ((10, True), (20, True), (30, False)):
        folder = out / f"checkpoint-{step}"
        folder.mkdir(parents=True)
        (folder / "trainer_state.json").write_text(json.dumps({"global_step": step}))
        if complete:
            (folder / "model.safetensors").write_bytes(b"")
    script = ("import os\n"
              "open(os.path.join(os.environ['XC_OUTPUT_DIR'], 'from'), 'w').write(\n"
              "    os.environ.get('XC_RESUME', '') + ' ' + os.environ.get('XC_RESUME_FROM', ''))\n")
    result = wrap(tmp_path, script, resume=True)
    assert result.returncode == 0, result.stderr
    assert (out / "from").read_text() == f"1 {out / 'checkpoint-20'}"
    assert events(result)[0] == {**events(result)[0], "kind": "started", "step": 20}
