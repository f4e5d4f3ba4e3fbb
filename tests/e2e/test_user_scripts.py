"""Users' own scripts on a real 2-node local cluster, world size 2, as a new user runs them: the three
kinds in examples/ (plain torch DDP, HF Trainer, accelerate) run unchanged and their output comes back;
a Trainer script survives a node that gives notice with 0 steps lost, and trains on alone when a lost node
cannot be replaced; bad input is one line, exit 2; a --data
file named like shell code stays a name, --env values leave the cluster with their run, and a workdir's
secret-looking files stay on this machine unless named, what a script prints reaches the terminal
inert, and a line it prints in the form of the ranks' events changes nothing."""
from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.conftest import LocalEnv
from tests.e2e.test_recovery import lose_node, wait_for_end
from xeoncluster.job.workdir import scan
from xeoncluster.providers.local.provider import NO_CAPACITY

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@pytest.fixture(scope="module")
def cluster(local_env: LocalEnv, warm_image: str) -> Iterator[str]:
    local_env.ok("up", "--name", "e2escript", "--nodes", "2")
    yield "e2escript"
    local_env.ok("down", "--name", "e2escript", "--force")


def results(env: LocalEnv, cluster: str, run: str) -> Path:
    return env.home / "results" / cluster / run


def test_a_plain_ddp_script_runs_as_one_job_and_its_output_comes_back(local_env: LocalEnv, cluster: str) -> None:
    done = local_env.ok("train", str(EXAMPLES / "ddp_plain.py"), "--name", cluster, "--run", "plain", "--",
                        "--steps", "60")
    assert "[0] step 40/60 loss" in done.out
    result = json.loads((results(local_env, cluster, "plain") / "result.json").read_text())
    assert result["world_size"] == 2 and result["steps"] == 60
    metrics = json.loads((results(local_env, cluster, "plain") / "metrics.json").read_text())
    assert metrics["task"] == "script:ddp_plain.py" and metrics["world_size"] == 2 and metrics["ranks_per_node"] == 1
    assert (results(local_env, cluster, "plain") / "plain-checkpoint.pt").exists()
    runs = {r["run"]: r for r in json.loads(local_env.ok("runs", "--name", cluster, "--json").out)}
    assert runs["plain"]["task"] == "script:ddp_plain.py" and runs["plain"]["state"] == "succeeded"


def test_an_hf_trainer_script_runs_unchanged_and_its_output_comes_back(local_env: LocalEnv, cluster: str) -> None:
    local_env.ok("train", str(EXAMPLES / "hf_trainer.py"), "--name", cluster, "--run", "trainer", "--",
                 "--output_dir", "{output}", "--max_steps", "30", "--save_steps", "10", "--logging_steps", "10")
    folder = results(local_env, cluster, "trainer")
    metrics = json.loads((folder / "metrics.json").read_text())
    assert metrics["world_size"] == 2 and metrics["global_steps"] == 30
    assert "eval_loss" in json.loads((folder / "eval_results.json").read_text())
    assert (folder / "model" / "config.json").exists()
    assert not list(folder.glob("checkpoint-*"))  # checkpoints stay with the run (and in storage)
    stored = local_env.home / "storage" / cluster / "runs" / "trainer"
    assert (stored / "results" / "eval_results.json").exists()
    assert sorted(p.name for p in (stored / "checkpoints").iterdir()) == ["checkpoint-10", "checkpoint-20",
                                                                        "checkpoint-30"]


def test_an_accelerate_script_sees_the_whole_job(local_env: LocalEnv, cluster: str) -> None:
    local_env.ok("train", str(EXAMPLES / "accelerate_loop.py"), "--name", cluster, "--run", "accel", "--",
                 "--steps", "40")
    result = json.loads((results(local_env, cluster, "accel") / "result.json").read_text())
    assert result["num_processes"] == 2 == result["world_size"]
    assert result["distributed_type"] == "DistributedType.MULTI_CPU"


def wait_for_a_step(events: Path) -> None:
    deadline = time.monotonic() + 300
    while '"kind": "step"' not in (events.read_text() if events.exists() else ""):
        assert time.monotonic() < deadline, "the run never started training"
        time.sleep(0.5)


def test_a_trainer_script_survives_a_noticed_node_with_no_step_lost(local_env: LocalEnv, cluster: str) -> None:
    local_env.ok("train", str(EXAMPLES / "hf_trainer.py"), "--name", cluster, "--run", "noticed", "--detach", "--",
                 "--output_dir", "{output}", "--max_steps", "400", "--save_steps", "40", "--logging_steps", "20")
    log = local_env.home / "clusters" / cluster / "runs" / "noticed" / "train.log"
    wait_for_a_step(log.parent / "events.jsonl")
    notice = json.dumps({"reason": "test notice", "deadline": time.time() + 120})
    local_env.ok("exec", "--name", cluster, "--node", "node1", "--", f"echo '{notice}' > ~/xeoncluster/notice")
    record = wait_for_end(local_env, cluster, "noticed")
    assert record["state"] == "succeeded" and record["restarts"] == 1, record
    local_env.ok("logs", "noticed", "--name", cluster)
    metrics = json.loads((results(local_env, cluster, "noticed") / "metrics.json").read_text())
    [restart] = metrics["restarts"]
    assert restart["lost_steps"] == 0 and restart["from_step"] == metrics["resumed_from_step"] > 0, metrics
    assert metrics["global_steps"] == 400 and metrics["world_size"] == 2
    assert "training: resuming from" in log.read_text()


def test_a_trainer_script_trains_on_alone_when_its_lost_node_cannot_be_replaced(local_env: LocalEnv,
                                                                                cluster: str) -> None:
    """Issue 37 for scripts: the worker vanishes while no node can be launched. The script is launched again on
    the node left, with WORLD_SIZE 1 and XC_BATCH_WORLD 2 (docs/scripts.md, Fewer nodes), resumes from its
    checkpoint and succeeds. `up` brings the cluster back to its 2 nodes afterwards."""
    no_capacity = local_env.root / "clusters" / cluster / NO_CAPACITY
    local_env.ok("train", str(EXAMPLES / "hf_trainer.py"), "--name", cluster, "--run", "shrunk", "--detach", "--",
                 "--output_dir", "{output}", "--max_steps", "1000", "--save_steps", "20", "--logging_steps", "20")
    log = local_env.home / "clusters" / cluster / "runs" / "shrunk" / "train.log"
    events = log.parent / "events.jsonl"
    deadline = time.monotonic() + 300
    while '"kind": "checkpoint"' not in (events.read_text() if events.exists() else ""):
        assert time.monotonic() < deadline, "the run never stored a checkpoint"
        time.sleep(0.5)
    [worker] = [n["name"] for n in local_env.state(cluster)["nodes"] if n["role"] != "master"]
    no_capacity.touch()
    try:
        lose_node(cluster, worker)  # not always node1: the noticed node's replacement came in beside it
        record = wait_for_end(local_env, cluster, "shrunk")
    finally:
        no_capacity.unlink(missing_ok=True)
    text = log.read_text()
    assert record["state"] == "succeeded", (record, text[-3000:])
    relaunch = text.split("training on with 1 node")[-1]
    assert relaunch != text and "XC_BATCH_WORLD 2" in relaunch and "-n 1 " in relaunch, text[-3000:]
    assert "training: resuming from" in relaunch, relaunch[-3000:]
    local_env.ok("logs", "shrunk", "--name", cluster)  # a detached run's results come back with its log
    metrics = json.loads((results(local_env, cluster, "shrunk") / "metrics.json").read_text())
    [restart] = metrics["restarts"]
    assert restart["nodes_after"] == 1 and metrics["global_steps"] == 1000, metrics
    local_env.ok("up", "--name", cluster)
    names = [n["name"] for n in local_env.state(cluster)["nodes"]]
    assert len(names) == 2 and names[0] == "node0", names


def test_a_module_with_its_requirements_installed_once(local_env: LocalEnv, cluster: str, tmp_path: Path) -> None:
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "job.py").write_text(
        "import json, os, tomli_w\n"
        "path = os.path.join(os.environ['XC_OUTPUT_DIR'], f\"rank{os.environ['RANK']}.toml\")\n"
        "open(path, 'w').write(tomli_w.dumps({'world': int(os.environ['WORLD_SIZE']),\n"
        "    'data': open(os.path.join(os.environ['XC_DATA_DIR'], 'words.txt')).read().strip()}))\n")
    (tmp_path / "requirements.txt").write_text("tomli-w==1.2.0\n")
    (tmp_path / "words.txt").write_text("hello nodes\n")
    first = local_env.ok("train", "-m", "pkg.job", "--workdir", str(tmp_path), "--data", str(tmp_path / "words.txt"),
                         "--name", cluster, "--run", "mod")
    # on both nodes (node1 may have been replaced by the notice test: its replacement has a new name)
    assert re.search(r"install requirements.txt on node0, node\d+\n", first.out + first.err), first.err
    assert (results(local_env, cluster, "mod") / "rank0.toml").read_text().count("hello nodes") == 1
    again = local_env.ok("train", "-m", "pkg.job", "--workdir", str(tmp_path), "--data", str(tmp_path / "words.txt"),
                         "--name", cluster, "--run", "mod2")
    assert "install requirements.txt" not in again.out + again.err and "sent to none" in again.out + again.err


def test_a_failing_script_is_reported_like_a_failed_rank(local_env: LocalEnv, cluster: str, tmp_path: Path) -> None:
    (tmp_path / "boom.py").write_text("import os\n"
                                      "if os.environ['RANK'] == '1':\n"
                                      "    raise RuntimeError('bad shard 7')\n")
    failed = local_env.cli("train", str(tmp_path / "boom.py"), "--name", cluster, "--run", "boom")
    assert failed.code == 1, failed.err
    line = failed.err.strip().splitlines()[-1]
    assert line.startswith("error: ") and "rank 1" in line and "RuntimeError: bad shard 7" in line, failed.err
    assert "train.log" in failed.err or "logs boom" in failed.err, failed.err
    runs = {r["run"]: r for r in json.loads(local_env.ok("runs", "--name", cluster, "--json").out)}
    assert runs["boom"]["state"] == "failed" and runs["boom"]["restarts"] == 0


@pytest.mark.parametrize(("setup", "says"), [
    (lambda d: None, "script {d}/missing.py does not exist"),
    (lambda d: (d / ".git").mkdir(), "holds version control or caches, which are not sent to the nodes: .git/"),
    (lambda d: (d / "weights.bin").write_bytes(b"0" * (11 * 2**20)), "holds files over 10 MiB: weights.bin (11 MiB)"),
    (lambda d: (d / "requirements.txt").write_text("no-such-package-xc-test==0.0.1\n"),
     "requirements.txt: Could not find a version that satisfies the requirement no-such-package-xc-test==0.0.1"),
])
def test_bad_script_input_is_one_line_and_starts_nothing(local_env: LocalEnv, cluster: str, tmp_path: Path,
                                                         setup, says: str) -> None:  # type: ignore[no-untyped-def]
    (tmp_path / "job.py").write_text("print('never runs')\n")
    setup(tmp_path)
    script = tmp_path / ("missing.py" if "missing" in says else "job.py")
    before = json.loads(local_env.ok("runs", "--name", cluster, "--json").out)
    failed = local_env.cli("train", str(script), "--name", cluster)
    assert failed.code == 2, failed.err
    assert failed.err.strip().splitlines()[-1].startswith("error: ") and says.format(d=tmp_path) in failed.err
    assert json.loads(local_env.ok("runs", "--name", cluster, "--json").out) == before


def test_a_module_that_is_not_there_is_one_line(local_env: LocalEnv, cluster: str, tmp_path: Path) -> None:
    failed = local_env.cli("train", "-m", "not_a_module_here", "--workdir", str(tmp_path), "--name", cluster)
    assert failed.code == 2 and "-m not_a_module_here: no such module in the workdir" in failed.err


def rank0(env: LocalEnv, cluster: str, run: str) -> object:
    return json.loads((results(env, cluster, run) / "rank0.json").read_text())


def node_listing(env: LocalEnv, cluster: str, command: str) -> list[str]:
    out = env.ok("exec", "--name", cluster, "--", command).out
    return [line.split(" | ", 1)[-1] for line in out.splitlines()]  # without each line's `node |` label


def test_a_data_file_whose_name_is_shell_code_stays_a_name(local_env: LocalEnv, cluster: str, tmp_path: Path) -> None:
    (tmp_path / "data").mkdir()
    (tmp_path / "job").mkdir()
    odd = tmp_path / "data" / "a$(touch xc-pwned)b.csv"
    odd.write_text("1,2\n")
    (tmp_path / "job" / "read.py").write_text(
        "import json, os\n"
        "folder = os.environ['XC_DATA_DIR']\n"
        "names = sorted(os.listdir(folder))\n"
        "seen = {'names': names, 'text': open(os.path.join(folder, names[0])).read()}\n"
        "json.dump(seen, open(os.path.join(os.environ['XC_OUTPUT_DIR'], f\"rank{os.environ['RANK']}.json\"), 'w'))\n")
    local_env.ok("train", str(tmp_path / "job" / "read.py"), "--data", str(odd), "--name", cluster, "--run", "oddname")
    assert rank0(local_env, cluster, "oddname") == {"names": [odd.name], "text": "1,2\n"}
    assert not [line for line in node_listing(local_env, cluster, "ls -A ~ ~/xeoncluster") if "xc-pwned" in line]


SECRET = "xc-secret-7f3e1b"


@pytest.mark.parametrize(("run", "code"), [("envok", 0), ("envfail", 3)])
def test_env_values_leave_the_cluster_with_their_run(local_env: LocalEnv, cluster: str, tmp_path: Path, run: str,
                                                     code: int) -> None:
    """After a run that succeeded or failed, no --env value is left: not in the agent's run folder (its env
    file), nor on the nodes, nor in storage, results or any log."""
    (tmp_path / "env.py").write_text(
        "import json, os, sys\n"
        "seen = {'length': len(os.environ['SECRET_X'])}\n"
        "json.dump(seen, open(os.path.join(os.environ['XC_OUTPUT_DIR'], f\"rank{os.environ['RANK']}.json\"), 'w'))\n"
        "sys.exit(int(os.environ['EXIT_WITH']))\n")
    done = local_env.cli("train", str(tmp_path / "env.py"), "--name", cluster, "--run", run,
                         "--env", f"SECRET_X={SECRET}", "--env", f"EXIT_WITH={code}")
    assert (done.code == 0) == (code == 0), done.err
    folder = local_env.home / "clusters" / cluster / "runs" / run
    assert folder.is_dir() and not (folder / "env").exists()
    if code == 0:
        assert rank0(local_env, cluster, run) == {"length": len(SECRET)}
    kept = [str(p) for p in local_env.home.rglob("*") if p.is_file() and SECRET.encode() in p.read_bytes()]
    assert kept == []  # the agent's run folder, storage, results, the CLI's logs
    look = f"ls -A ~/xeoncluster/runs/{run}; grep -rl {SECRET} ~/xeoncluster; true"
    on_nodes = node_listing(local_env, cluster, look)
    assert "env" not in on_nodes and not [line for line in on_nodes if "/" in line], on_nodes


def test_a_workdirs_secrets_stay_home_unless_named(local_env: LocalEnv, cluster: str, tmp_path: Path) -> None:
    (tmp_path / "files.py").write_text(
        "import json, os\n"
        "seen = sorted(os.listdir(os.environ['XC_WORKDIR']))\n"
        "json.dump(seen, open(os.path.join(os.environ['XC_OUTPUT_DIR'], f\"rank{os.environ['RANK']}.json\"), 'w'))\n")
    (tmp_path / ".env").write_text("TOKEN=xc-dotenv-value\n")
    script = str(tmp_path / "files.py")
    before = json.loads(local_env.ok("runs", "--name", cluster, "--json").out)
    refused = local_env.cli("train", script, "--name", cluster)
    line = refused.err.strip().splitlines()[-1]
    assert refused.code == 2 and line.startswith("error: ") and ".env" in line and "--include-secret" in line, \
        refused.err
    assert json.loads(local_env.ok("runs", "--name", cluster, "--json").out) == before
    local_env.ok("train", script, "--name", cluster, "--run", "noenvfile", "--exclude", ".env")
    assert ".env" not in rank0(local_env, cluster, "noenvfile")  # type: ignore[operator]
    sent = scan(tmp_path, excludes=(".env",)).digest
    assert ".env" not in node_listing(local_env, cluster, f"ls -A ~/xeoncluster/work/{sent}/")
    local_env.ok("train", script, "--name", cluster, "--run", "envfile", "--include-secret", ".env")
    assert ".env" in rank0(local_env, cluster, "envfile")  # type: ignore[operator]


def test_a_workdir_with_packages_named_like_ours_runs_its_own(local_env: LocalEnv, cluster: str,
                                                               tmp_path: Path) -> None:
    """The ranks' path holds `xeoncluster` alone: a user's `training`, `provisioner`, `standin`, `agent`,
    `node` or `utils` package is the one their script imports (before 0.2, `training` was ours)."""
    names = ("training", "provisioner", "standin", "agent", "node", "utils")
    for name in names:
        (tmp_path / name).mkdir()
        (tmp_path / name / "__init__.py").write_text("")
        (tmp_path / name / "helpers.py").write_text(f"VALUE = 'users-own-{name}'\n")
    imports = "\n".join(f"from {name}.helpers import VALUE as {name}_value" for name in names)
    (tmp_path / "main.py").write_text(f"import os\n{imports}\n"
                                      f"print('rank', os.environ['RANK'], {', '.join(f'{n}_value' for n in names)})\n")
    done = local_env.ok("train", str(tmp_path / "main.py"), "--name", cluster, "--run", "own-packages")
    own = " ".join(f"users-own-{name}" for name in names)
    assert f"rank 0 {own}" in done.out and f"rank 1 {own}" in done.out


HOSTILE = ("import os\n"
           "print('osc52 \\x1b]52;c;aGk=\\x07 title \\x1b]0;owned\\x1b\\\\ dcs \\x1bP$q m\\x1b\\\\', flush=True)\n"
           "print('move \\x1b[5;5H clear \\x1b[2J csi8 \\x9b2J', flush=True)\n"
           "print('markup [/b] [link=http://x]click[/link] colour \\x1b[31mRED-XC\\x1b[0m', flush=True)\n"
           "if os.environ['RANK'] == '0':\n"
           "    raise RuntimeError('[/b] \\x1b]0;err-title\\x07 end')\n")


def harmless(output: str) -> bool:
    """No escape sequence but SGR, and no C1 control."""
    return "\x1b" not in re.sub(r"\x1b\[[0-9;]*m", "", output) and not re.search(r"[\x80-\x9f]", output)


def test_what_a_script_prints_reaches_the_terminal_inert(local_env: LocalEnv, cluster: str, tmp_path: Path) -> None:
    """A rank's OSC (clipboard, title), DCS, cursor moves and clear-screen show as text markers in attached
    `train`, `logs` and `runs`; its SGR colour stays, and rich markup in its lines and in the run's task
    (the script's name) is literal text."""
    script = tmp_path / "[red]odd.py"
    script.write_text(HOSTILE)
    train = local_env.cli("train", str(script), "--name", cluster, "--run", "hostile")
    assert train.code == 1, train.err
    logs = local_env.cli("logs", "hostile", "--name", cluster)
    runs = local_env.ok("runs", "--name", cluster)
    for what, output in (("train", train.out + train.err), ("logs", logs.out), ("runs", runs.out)):
        assert harmless(output), f"{what}: {output!r}"
    for output in (train.out, logs.out):
        assert "\x1b[31mRED-XC\x1b[0m" in output and "markup [/b] [link=http://x]click[/link]" in output
        assert "␛]52;c;aGk=␇" in output and "␛]0;owned␛\\" in output and "␛P$q m␛\\" in output
        assert "move ␛[5;5H clear ␛[2J csi8 \\x9b2J" in output
    assert "[/b] ␛]0;err-title␇ end" in train.err and "[/b] ␛]0;err-title␇ end" in logs.out
    assert "script:[red]odd.py" in runs.out


def test_a_script_that_prints_a_notice_in_the_ranks_form_changes_nothing(local_env: LocalEnv, cluster: str,
                                                                        tmp_path: Path) -> None:
    """A user's script, or a line of its data, printed exactly what a rank once printed for a spot notice
    naming a worker, and the agent replaced the worker and restarted the run (or, naming the master, handed
    it over). The ranks' events are signed
    with the launch's key now: what a script prints is a log line."""
    master, worker = local_env.state(cluster)["nodes"][:2]
    notices = {rank: json.dumps({"kind": "notice", "node": node["private_ip"], "rank": rank, "time": time.time(),
                                 "reason": "spot interruption", "deadline": time.time() + 120, "version": 2},
                                sort_keys=True) for rank, node in enumerate((master, worker))}
    (tmp_path / "mimic.py").write_text(
        "import os, time\n"
        f"notice = {notices!r}[int(os.environ['RANK'])]\n"
        "print('@xc-event ' + notice, flush=True)\n"
        "print('@xc-event ' + 'ab' * 32 + ' ' + notice, flush=True)\n"
        "time.sleep(8)\n")
    done = local_env.ok("train", str(tmp_path / "mimic.py"), "--name", cluster, "--run", "mimic")
    assert "ready to replace" not in done.out + done.err
    runs = {r["run"]: r for r in json.loads(local_env.ok("runs", "--name", cluster, "--json").out)}
    assert runs["mimic"]["state"] == "succeeded" and runs["mimic"]["restarts"] == 0, runs["mimic"]
    assert [n["id"] for n in local_env.state(cluster)["nodes"][:2]] == [master["id"], worker["id"]]
    log = local_env.ok("logs", "mimic", "--name", cluster).out
    assert log.count("@xc-event") >= 4  # kept as the log lines they are
    assert "notice" not in (local_env.home / "storage" / cluster / "runs" / "mimic" / "events.jsonl").read_text()
