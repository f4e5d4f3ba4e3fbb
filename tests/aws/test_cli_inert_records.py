"""Issue 34, findings 8 and 10, from the CLI under moto: what a master (or its role, which writes storage)
leaves behind is inert.

Finding 8: one stored or listed run record with a byte that is no UTF-8, `eta_seconds: Infinity` or
`started_at: 1e300` is left out with one line naming it; every other run is still listed, by `storage
ls`, by `runs` on the master and after the cluster is gone, by `runs --compare` and by `logs`.

Finding 10: a `removed.json` in storage is a claim: one that names another cluster, or this one while
the provider still lists its nodes, is ignored (with one line); one the provider confirms stands.
"""
from __future__ import annotations

import json
import time

import boto3
import pytest
from aws_helpers import write_config
from recording_shell import listed_record

from xeoncluster.cluster.removals import REMOVED, Removal
from xeoncluster.cluster.state import StateDir
from xeoncluster.remote.shell import CommandResult
from xeoncluster.runs.host import LocalHost
from xeoncluster.runs.record import RunRecord, RunState

BUCKET = "xc-inert-runs"


def record_json(run: str, submitted_at: float, **fields: object) -> bytes:
    record = RunRecord(run=run, cluster="t1", task="squad", state=RunState.SUCCEEDED, submitted_at=submitted_at,
                       started_at=submitted_at + 1, ended_at=submitted_at + 61, step=10, total_steps=10)
    data = json.loads(record.model_dump_json())
    for key, value in fields.items():
        target = data["live"] if key == "eta_seconds" else data
        target[key] = value
    return json.dumps(data).encode()


def bad_records(now: float) -> dict[str, bytes]:
    """run -> its run.json: r1 sound; r2 with a stray byte inside a string (the text is decoded with a
    replacement character, and the record is sound); r3-r5 what no sound record holds."""
    return {
        "r1": record_json("r1", now - 50),
        "r2": record_json("r2", now - 40, error="disk \N{REPLACEMENT CHARACTER} full").replace(
            "\N{REPLACEMENT CHARACTER}".encode(), b"\xff"),
        "r3": record_json("r3", now - 30).replace(b'"task"', b'"ta\xffsk"', 1)[:60] + b"\xfe\xff" +
        record_json("r3", now - 30)[60:],
        "r4": record_json("r4", now - 20).replace(b'"eta_seconds": null', b'"eta_seconds": Infinity'),
        "r5": record_json("r5", now - 10).replace(f'"started_at": {now - 9}'.encode(), b'"started_at": 1e300'),
    }


WHY = {"r3": "not a run record: the text: Invalid JSON", "r4": "not a run record: live.eta_seconds",
       "r5": "not a run record: started_at"}


def stored(records: dict[str, bytes], metrics: bytes | None = None) -> None:
    s3 = boto3.client("s3", region_name="us-east-1")
    s3.create_bucket(Bucket=BUCKET)
    write_config(f"storage: s3://{BUCKET}\n")
    for run, body in records.items():
        s3.put_object(Bucket=BUCKET, Key=f"t1/runs/{run}/run.json", Body=body)
        s3.put_object(Bucket=BUCKET, Key=f"t1/runs/{run}/train.log", Body=b"step 1 \xff\xfe\n")
    if metrics is not None:
        s3.put_object(Bucket=BUCKET, Key="t1/runs/r1/results/metrics.json", Body=metrics)


def left_out(err_lines: list[str]) -> dict[str, str]:
    """run -> the one line that left it out."""
    lines = [line for line in err_lines if line.endswith("; left out")]
    named = {run: line for run in WHY for line in lines if f"/runs/{run}/run.json" in line}
    assert len(named) == len(lines), lines
    return named


def assert_named(err_lines: list[str]) -> None:
    named = left_out(err_lines)
    assert sorted(named) == sorted(WHY), err_lines
    for run, why in WHY.items():
        assert "refused (" + why in named[run], named[run]


def test_storage_ls_leaves_out_each_bad_record_with_one_line_and_lists_the_rest(xc):
    stored(bad_records(time.time()))

    listed = xc("storage", "ls", "--name", "t1", "--json")
    table = xc("storage", "ls", "--name", "t1")

    assert listed.code == 0, listed.err
    runs = {r["run"]: r for r in json.loads(listed.out)}
    assert sorted(runs) == ["r1", "r2"]
    assert runs["r2"]["error"] == "disk \N{REPLACEMENT CHARACTER} full"
    assert_named(listed.err_lines)
    assert table.code == 0 and "r1" in table.out and "r2" in table.out, table.err
    assert_named(table.err_lines)


def test_runs_compare_and_logs_after_down_leave_out_the_bad_records(xc, xc_home):
    """Never up on this machine: `runs`, `runs --compare` and `logs` read storage."""
    stored(bad_records(time.time()), metrics=b'{"f1": Infinity, "eval_loss": 0.5, "note": "\xff"}')

    runs = xc("runs", "--name", "t1", "--json")
    compared = xc("runs", "--compare", "--name", "t1", "--json")
    newest = xc("logs", "--name", "t1")
    named = xc("logs", "r1", "--name", "t1")

    assert runs.code == 0, runs.err
    assert sorted(r["run"] for r in json.loads(runs.out)) == ["r1", "r2"]
    assert_named(runs.err_lines)
    assert compared.code == 0, compared.err
    scores = {r["run"]: r for r in json.loads(compared.out)}
    assert sorted(scores) == ["r1", "r2"] and scores["r1"]["final"] == {"eval_loss": 0.5}
    assert_named(compared.err_lines)
    for logs in (newest, named):
        assert logs.code == 0, logs.err
        assert "step 1 \N{REPLACEMENT CHARACTER}\N{REPLACEMENT CHARACTER}" in logs.out
        assert_named(logs.err_lines)
    assert "run r2" in newest.out and "run r1" in named.out


def test_logs_shows_only_finite_numbers_of_a_stored_metrics_file(xc, xc_home):
    """metrics.json was written on the cluster: a score that is text, a bool or beyond any real one is
    not shown, and does not crash the summary that formats it."""
    stored({"r1": record_json("r1", time.time() - 50)}, metrics=json.dumps({
        "f1": "x", "exact_match": 1e300, "accuracy": True, "train_samples_per_second": "fast",
        "eval_before": {"f1": "y"}}).encode())

    logs = xc("logs", "r1", "--name", "t1")

    assert logs.code == 0 and "Traceback" not in logs.err, logs.err
    assert "no evaluation set, no scores" in logs.out and "throughput" not in logs.out, logs.out


def test_runs_on_the_master_leaves_out_each_bad_record_with_one_line(xc, shell, monkeypatch):
    """The master's listing: its shell's bytes arrive decoded with replacement (Fabric does that)."""
    assert xc("up", "--name", "t1", "--nodes", "1").code == 0
    listing = "".join(listed_record(run, body.decode(errors="replace"))
                      for run, body in bad_records(time.time()).items())
    real = shell.answer

    def answer(call):
        if "*/run.json" in call.command:
            return CommandResult(call.node, 0, listing, "")
        return real(call)

    monkeypatch.setattr(shell, "answer", answer)

    runs = xc("runs", "--name", "t1", "--json")
    table = xc("runs", "--name", "t1")

    assert runs.code == 0, runs.err
    assert sorted(r["run"] for r in json.loads(runs.out)) == ["r1", "r2"]
    assert_named(runs.err_lines)
    assert table.code == 0 and "r1" in table.out and "r2" in table.out, table.err


def test_the_agents_host_here_decodes_its_output_with_replacement(tmp_path):
    result = LocalHost(str(tmp_path), "python3").run("printf 'a\\377b'")
    assert result.ok and result.stdout == "a\N{REPLACEMENT CHARACTER}b"


# -- finding 10 ----------------------------------------------------------------------------------
def store_removal_of(cluster: str) -> None:
    """removed.json beside t1's runs, as the master's role can write it."""
    storage = StateDir("t1").load().storage
    assert storage is not None
    removal = Removal(cluster=cluster, provider="aws", at=time.time() + 5, by="idle", detail="after 1 idle minute")
    boto3.client("s3", region_name="us-east-1").put_object(
        Bucket=storage.container, Key=storage.key("t1", REMOVED), Body=removal.model_dump_json().encode())


@pytest.mark.parametrize("named, warning", [
    ("other", "names cluster 'other': refused (it is kept under 't1'); ignored"),
    ("t1", "but aws still lists 2 live node(s) of it; the record is ignored")])
def test_a_forged_removal_record_does_not_make_up_rebuild_a_live_cluster(xc, ec2, named, warning):
    assert xc("up", "--name", "t1", "--nodes", "2").code == 0
    before = [(n.name, n.id) for n in StateDir("t1").load().node_list()]
    store_removal_of(named)

    again = xc("up", "--name", "t1", "--nodes", "2")

    assert again.code == 0, again.err
    assert "starting it again" not in again.out + again.err
    assert "cluster 't1' is already up; nothing to do" in again.out + again.err
    assert len([line for line in again.err_lines if warning in line]) == 1, again.err
    assert [(n.name, n.id) for n in StateDir("t1").load().node_list()] == before


def test_a_removal_the_provider_confirms_still_stands(xc, ec2):
    assert xc("up", "--name", "t1", "--nodes", "2").code == 0
    ids = [n.id for n in StateDir("t1").load().node_list()]
    store_removal_of("t1")
    ec2.terminate_instances(InstanceIds=ids)  # what the watch agent does after writing the record

    status = xc("status", "--name", "t1")

    assert status.code == 1 and "cluster 't1' (aws) removed itself after 1 idle minute at" in status.err, status.err
    assert "ignored" not in status.err
