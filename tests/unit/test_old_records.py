"""Records as an agent before 0.2 wrote them (no version; the storage container called a bucket; ranks
launched as `-m training`; one request form for tasks and scripts) are read by this CLI as they were meant."""
from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

from xeoncluster.cluster.state import ClusterRecord
from xeoncluster.core.stacks import get_stack
from xeoncluster.job.train_plan import build_plan
from xeoncluster.job.train_request import ScriptRequest, TaskRequest
from xeoncluster.node.events.events import EVENTS_VERSION, StepEvent, event_from_json
from xeoncluster.providers.base import Node
from xeoncluster.runs.record import RunRecord, RunState
from xeoncluster.runs.submission import Submission
from xeoncluster.topology import CpuTopology
from xeoncluster.wire.contract import UNVERSIONED, VERSION, AgentVersion

RUN_JSON_0_1 = {"run": "squad-1", "cluster": "t1", "task": "squad", "state": "succeeded", "step": 300,
                "total_steps": 300, "restarts": [{"node": "node1", "reason": "spot reclaim", "from_step": 100,
                                                  "seconds": 41.0, "lost_steps": 12, "replacement": "node1"}],
                "submitted_at": 1.0, "started_at": 2.0, "ended_at": 302.0, "exit_code": 0, "error": "",
                "agent_pid": 4242, "cost_usd": 0.0123, "usd_per_hour": 0.34, "nodes": ["node0", "node1"],
                "notices": [], "log": "node0:/home/ubuntu/xeoncluster/agent/clusters/t1/runs/squad-1/train.log",
                "storage": "s3://xeoncluster-123456789012-us-east-1/t1/runs/squad-1", "durable_step": 300,
                "storage_error": ""}
# request.json as CLIs before 0.2 wrote it: one form for both kinds, a script's with task "script".
SCRIPT_REQUEST_0_1 = {"task": "script", "glue_task": "mrpc", "dataset": None, "train_file": None, "eval_file": None,
                      "model": None, "demo": False, "run": "train-20250101-120000", "resume": False,
                      "resume_from": None, "ppn": None, "threads": None, "env": [["HF_TOKEN", ""]],
                      "trainer_args": ["--steps", "10"], "fetch_model": None, "offline": False, "tuned": True,
                      "max_restarts": 2, "storage": None, "script": "/home/ubuntu/xeoncluster/work/0a1b/train.py",
                      "module": None, "workdir": "/home/ubuntu/xeoncluster/work/0a1b",
                      "data": ["/home/ubuntu/xeoncluster/data/9f8e/train.csv"], "excludes": [".git"],
                      "include_secrets": []}
TASK_REQUEST_0_1 = SCRIPT_REQUEST_0_1 | {"task": "glue", "glue_task": "rte", "run": "glue-1", "script": None,
                                         "workdir": None, "excludes": [], "trainer_args": [], "ppn": 2}
TASK_FIELDS = {"task", "glue_task", "dataset", "train_file", "eval_file", "model", "demo"}
SCRIPT_FIELDS = {"script", "module", "workdir", "data", "excludes", "include_secrets"}
STORAGE_0_1 = {"url": "s3://xeoncluster-123456789012-us-east-1", "bucket": "xeoncluster-123456789012-us-east-1",
               "prefix": "", "folder": "", "owner": "123456789012"}


def test_an_unversioned_run_record_is_read_as_version_1() -> None:
    record = RunRecord.model_validate_json(json.dumps(RUN_JSON_0_1))
    assert record.version == UNVERSIONED and record.state is RunState.SUCCEEDED
    assert record.lost_steps == 12 and record.summary()["restarts"] == 1
    assert RunRecord(run="r", cluster="c", task="squad").version == VERSION
    assert json.loads(record.model_dump_json())["version"] == VERSION  # what this code writes is this version


def test_a_state_file_with_a_bucket_keeps_its_storage() -> None:
    state = ClusterRecord.model_validate_json(json.dumps({"name": "t1", "provider": "aws", "storage": STORAGE_0_1}))
    assert state.version == UNVERSIONED and state.storage is not None
    assert state.storage.container == "xeoncluster-123456789012-us-east-1"
    assert state.storage.where("t1", "r1") == "s3://xeoncluster-123456789012-us-east-1/t1/runs/r1"


def test_a_request_without_a_version_is_submitted_as_it_was(tmp_path: Path) -> None:
    request = TaskRequest(task="squad", demo=True, trainer_args=("--max-steps", "5"))
    nodes = [Node("node0", "n0", "10.0.0.2", "10.0.0.2", "master", "local")]
    plan = build_plan(request, get_stack("stock"), nodes, CpuTopology(1, 2, 1, 1, 2), "/root", "r1", {})
    written = json.loads(Submission(request, plan).to_json())
    assert written["version"] == VERSION
    old = {k: v for k, v in written.items() if k != "version"} | {"storage": STORAGE_0_1}
    submission = Submission.from_json(json.dumps(old))
    assert submission.request == request and submission.storage is not None
    assert submission.storage.container == STORAGE_0_1["bucket"] and submission.storage.owner == "123456789012"


def old_submission(request: Mapping[str, object]) -> str:
    """A submission with `request` as its request.json, as an agent before 0.2 was handed it."""
    nodes = [Node("node0", "n0", "10.0.0.2", "10.0.0.2", "master", "local")]
    plan = build_plan(TaskRequest(task="squad", demo=True), get_stack("stock"), nodes, CpuTopology(1, 2, 1, 1, 2),
                      "/root", "r1", {})
    written = json.loads(Submission(TaskRequest(task="squad"), plan).to_json())
    return json.dumps({k: v for k, v in written.items() if k != "version"} | {"request": request})


def test_an_old_script_request_is_a_script_s_and_an_old_task_request_a_task_s() -> None:
    script = Submission.from_json(old_submission(SCRIPT_REQUEST_0_1), '{"HF_TOKEN": "hf_x"}').request
    assert script == ScriptRequest(script=Path("/home/ubuntu/xeoncluster/work/0a1b/train.py"),
                                   workdir=Path("/home/ubuntu/xeoncluster/work/0a1b"),
                                   data=(Path("/home/ubuntu/xeoncluster/data/9f8e/train.csv"),), excludes=(".git",),
                                   run="train-20250101-120000", env=(("HF_TOKEN", "hf_x"),),
                                   trainer_args=("--steps", "10"))
    assert script.label == "script:train.py"
    task = Submission.from_json(old_submission(TASK_REQUEST_0_1)).request
    assert task == TaskRequest(task="glue", glue_task="rte", run="glue-1", ppn=2, env=(("HF_TOKEN", ""),))


def test_a_request_json_holds_its_kind_and_only_its_kind_s_fields() -> None:
    nodes = [Node("node0", "n0", "10.0.0.2", "10.0.0.2", "master", "local")]
    task = TaskRequest(task="squad", demo=True)
    plan = build_plan(task, get_stack("stock"), nodes, CpuTopology(1, 2, 1, 1, 2), "/root", "r1", {})
    script = ScriptRequest(module="pkg.train", data=(Path("/d/train.csv"),))
    for request, own, other in ((task, TASK_FIELDS, SCRIPT_FIELDS), (script, SCRIPT_FIELDS, TASK_FIELDS)):
        text = Submission(request, plan).to_json()
        written = json.loads(text)["request"]
        assert written["kind"] == request.kind and own <= written.keys() and not other & written.keys()
        assert Submission.from_json(text).request == request


def test_events_of_old_ranks_are_understood() -> None:
    event = event_from_json('{"kind": "step", "rank": 0, "step": 5, "time": 1.5, "total": 10}')
    assert event.version == 1 and event.step == 5
    assert json.loads(StepEvent(step=1).to_json())["version"] == EVENTS_VERSION == VERSION


def test_a_version_file_from_the_master_is_read_strictly() -> None:
    assert AgentVersion.parse("").version == UNVERSIONED
    assert AgentVersion.parse('{"version": 2, "app": "0123abcd"}').version == 2
    for forged in ('{"version": "2"}', '{"version": 2, "app": "../../x"}', "not json", '{"version": -5}'):
        assert AgentVersion.parse(forged).version == UNVERSIONED
