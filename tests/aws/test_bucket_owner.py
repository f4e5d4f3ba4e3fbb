"""Run storage locked to its owner (issue 24, findings 4 and 11): every S3 request names the caller's
account as the bucket's owner, a bucket of another account stops `up` with one line and nothing made,
our own auto bucket gets back what it lacks of the lock-down, and `train --resume` takes another
cluster's checkpoint only when the user names that cluster's run (`--resume-from CLUSTER/RUN`).

moto ignores ExpectedBucketOwner: s3_owner.OwnerCheck answers a wrong owner with 403 as S3 does, and
records every S3 request as sent."""
from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from aws_helpers import REGION, cluster_config, live_state, write_config
from boto3.s3.transfer import TransferConfig
from recording_shell import Call, ShellLog
from s3_owner import OwnerCheck, assertion_client, bucket_of_another_account

from xeoncluster.agent import run_storage
from xeoncluster.agent.checkpoint_source import OnMaster
from xeoncluster.agent.run_storage import StorageSync
from xeoncluster.providers.aws import bucket as aws_bucket
from xeoncluster.providers.aws import storage as aws_storage
from xeoncluster.providers.aws.provider import AwsProvider
from xeoncluster.remote.shell import CommandResult
from xeoncluster.runs.record import RunRecord, RunState
from xeoncluster.runs.stored_checkpoints import download_checkpoint, durable_steps
from xeoncluster.runs.submission import Submission
from xeoncluster.storage.base import StorageLocation

ACCOUNT = "123456789012"
OTHER = "210987654321"
BUCKET = f"xeoncluster-{ACCOUNT}-{REGION}"
PROBE = ("home=/home/ubuntu\nsockets=1\ncores_per_socket=2\nthreads_per_core=1\nnuma_nodes=1\nusable_cpus=2\n"
         "flags=fpu avx2\niface=ens5\n")
RECORD = re.compile(r"^cat .*/clusters/([^/]+)/runs/([^/]+)/run\.json 2>/dev/null$")


@pytest.fixture
def owner_check(aws: Any, monkeypatch: pytest.MonkeyPatch) -> OwnerCheck:
    check = OwnerCheck()
    check.install(monkeypatch)
    return check


@pytest.fixture
def master_answers(monkeypatch: pytest.MonkeyPatch) -> None:
    """The master as `train` meets it: a CPU, no run of that name yet, and an agent that takes the run."""
    real = ShellLog.answer

    def answer(log: ShellLog, call: Call) -> CommandResult:
        if "echo home=$HOME" in call.command:
            return CommandResult(call.node, 0, PROBE, "")
        if "echo no-run" in call.command:
            return CommandResult(call.node, 0, "no-run\n", "")
        if found := RECORD.match(call.command):
            record = RunRecord(run=found[2], cluster=found[1], task="squad", state=RunState.RUNNING)
            return CommandResult(call.node, 0, record.model_dump_json(), "")
        return real(log, call)

    monkeypatch.setattr(ShellLog, "answer", answer)


def store_run(provider: AwsProvider, location: StorageLocation, cluster: str, run: str, tmp_path: Path,
              steps: tuple[int, ...], size: int = 4096) -> None:
    """What the agent of `cluster` stores of `run`: its checkpoints, the newest one kept."""
    run_dir = tmp_path / cluster / run
    sync = StorageSync(provider.open_storage(location), cluster, run, OnMaster(run_dir), keep=1, logs=[],
                       report=print)
    for step in steps:
        folder = run_dir / f"checkpoint-{step}"
        folder.mkdir(parents=True)
        (folder / "model.safetensors").write_bytes(bytes([step % 256]) * size)
        sync.checkpoint(step)
    assert sync.close(60) and sync.failures == 0


def submitted(shell: ShellLog, run: str) -> Submission:
    files = [f for f in shell.files["node0"] if f.path.endswith(f"/runs/{run}/request.json")]
    return Submission.from_json(files[-1].text)


def test_every_s3_request_names_the_account_as_the_bucket_owner(
        xc: Any, owner_check: OwnerCheck, make_provider: Callable[..., AwsProvider], aws: Any,
        shell: ShellLog, master_answers: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Files above 5 MiB go in parts (as checkpoints above 64 MiB do): CreateMultipartUpload, UploadPart, ...
    monkeypatch.setattr(aws_storage, "TRANSFER", TransferConfig(multipart_threshold=5 * 2**20,
                                                                multipart_chunksize=5 * 2**20))
    # One failed upload: s3transfer aborts it by itself (outside the transfer's ExtraArgs), then it is retried.
    aws.fail("CompleteMultipartUpload")
    monkeypatch.setattr(run_storage, "RETRY_DELAYS", (0,))
    assert xc("up", "--name", "c1", "--nodes", "1").code == 0
    laptop = make_provider()
    location = laptop.storage_location(cluster_config(name="c0"), "auto", Path("/unused"), create=False)
    store_run(laptop, location, "c0", "r1", tmp_path, (40, 80), size=6 * 2**20)
    resumed = xc("train", "squad", "--demo", "--name", "c1", "--resume-from", "c0/r1", "--detach")
    assert resumed.code == 0, resumed.err
    # The agent on the master opens the storage the submission names: the owner travels with it.
    storage = submitted(shell, "r1").storage
    assert storage is not None and storage.owner == ACCOUNT
    aws.clear()
    agent = make_provider()
    back = download_checkpoint(agent.open_storage(storage), storage.run_key("c1", "r1"), 80, tmp_path / "back")
    assert (back / "model.safetensors").stat().st_size == 6 * 2**20
    assert "GetCallerIdentity" not in [op for _, op, _ in aws.calls]
    assert xc("storage", "ls", "--name", "c1").code == 0
    assert xc("down", "--name", "c1").code == 0

    sent = owner_check.requests
    operations = {r.operation for r in sent}
    assert {"GetBucketLocation", "PutBucketOwnershipControls", "PutBucketPolicy", "PutPublicAccessBlock", "PutObject",
            "CreateMultipartUpload", "UploadPart", "CompleteMultipartUpload", "AbortMultipartUpload",
            "ListObjectsV2", "DeleteObjects",
            "HeadObject", "GetObject", "CopyObject"} <= operations
    # CreateBucket takes no owner: the bucket is the caller's if it is made at all.
    unchecked = [r for r in sent if r.operation != "CreateBucket" and r.owner != ACCOUNT]
    assert unchecked == []
    assert {r.source_owner for r in sent if r.operation == "CopyObject"} == {ACCOUNT}


def test_up_refuses_an_auto_bucket_of_another_account_and_makes_nothing(
        xc: Any, owner_check: OwnerCheck, ec2: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    bucket_of_another_account(monkeypatch, BUCKET, REGION, OTHER)
    run = xc("up", "--name", "t1", "--nodes", "1")
    assert run.code == 2, run.err
    assert f"bucket {BUCKET} exists but belongs to another account, not yours ({ACCOUNT})" in run.error
    assert "storage.url" in run.error and [line for line in run.err_lines if "error" in line] == [run.error]
    assert live_state(ec2, "t1") == {k: [] for k in live_state(ec2, "t1")}
    assert ec2.describe_key_pairs()["KeyPairs"] == []
    assert assertion_client(REGION).list_objects_v2(Bucket=BUCKET).get("KeyCount") == 0


def test_up_refuses_a_named_bucket_of_another_account(xc: Any, owner_check: OwnerCheck,
                                                       ec2: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    bucket_of_another_account(monkeypatch, "team-runs", REGION, OTHER)
    write_config("storage: s3://team-runs/ml\n")
    run = xc("up", "--name", "t1", "--nodes", "1")
    assert run.code == 2, run.err
    assert f"bucket team-runs is not your account's ({ACCOUNT})" in run.error
    assert live_state(ec2, "t1") == {k: [] for k in live_state(ec2, "t1")}
    assert assertion_client(REGION).list_buckets()["Buckets"] == []  # none of ours: no auto bucket either


def test_up_names_what_our_auto_bucket_lacks_and_storage_init_puts_it_back(xc: Any,
                                                                           owner_check: OwnerCheck) -> None:
    """A user may not change the shared bucket's policy or ownership: `up` names what it lacks and who
    fixes it, and changes nothing; the administrator's `storage init` puts it back."""
    s3 = assertion_client(REGION)
    s3.create_bucket(Bucket=BUCKET)  # as an earlier version made it: blocked and encrypted, nothing more
    s3.put_public_access_block(Bucket=BUCKET, PublicAccessBlockConfiguration=aws_bucket.PUBLIC_ACCESS_BLOCK)
    s3.put_bucket_encryption(Bucket=BUCKET, ServerSideEncryptionConfiguration=aws_bucket.ENCRYPTION)
    s3.put_bucket_policy(Bucket=BUCKET, Policy=json.dumps({"Version": "2012-10-17", "Statement": [
        {"Sid": "Mine", "Effect": "Deny", "Principal": "*", "Action": "s3:DeleteBucket",
         "Resource": f"arn:aws:s3:::{BUCKET}"}]}))
    run = xc("up", "--name", "t1", "--nodes", "1")
    assert run.code == 0, run.err
    assert (f"storage: warning: bucket {BUCKET} lacks ownership controls (ACLs disabled), TLS-only bucket policy; "
            "an administrator puts it back: xeoncluster storage init --provider aws --region us-east-1"
            in run.out + run.err)
    assert not {"PutBucketPolicy", "PutBucketOwnershipControls"} & {r.operation for r in owner_check.requests}
    init = xc("storage", "init", "--provider", "aws")
    assert init.code == 0 and f"run storage ready: s3://{BUCKET}" in init.out, init.err
    assert (f"storage: bucket {BUCKET} lacked ownership controls (ACLs disabled), TLS-only bucket policy; fixed"
            in init.out + init.err)
    assert s3.get_bucket_ownership_controls(Bucket=BUCKET)["OwnershipControls"]["Rules"] == [
        {"ObjectOwnership": "BucketOwnerEnforced"}]
    statements = json.loads(s3.get_bucket_policy(Bucket=BUCKET)["Policy"])["Statement"]
    assert [s["Sid"] for s in statements] == ["Mine", aws_bucket.TLS_ONLY_SID]  # the bucket's own statement stays
    owner_check.requests.clear()
    again = xc("up", "--name", "t2", "--nodes", "1")
    assert again.code == 0 and "lacked" not in again.out + again.err
    assert not {"PutBucketPolicy", "PutBucketOwnershipControls"} & {r.operation for r in owner_check.requests}


def test_a_named_bucket_without_a_tls_only_policy_is_one_warning(xc: Any,
                                                                  owner_check: OwnerCheck) -> None:
    s3 = assertion_client(REGION)
    s3.create_bucket(Bucket="team-runs")
    write_config("storage: s3://team-runs/ml\n")
    run = xc("up", "--name", "t1", "--nodes", "1")
    assert run.code == 0, run.err
    warning = "storage: warning: bucket team-runs does not deny requests without TLS"
    assert sum(warning in line for line in (run.out + run.err).splitlines()) == 1
    s3.put_bucket_policy(Bucket="team-runs", Policy=json.dumps(
        {"Version": "2012-10-17", "Statement": [aws_bucket.tls_only_statement("team-runs")]}))
    assert warning not in (again := xc("up", "--name", "t2", "--nodes", "1")).out + again.err
    with pytest.raises(s3.exceptions.ClientError):  # and it stays the user's: no settings of ours
        s3.get_bucket_ownership_controls(Bucket="team-runs")


def test_resume_takes_another_clusters_checkpoint_only_when_named(
        xc: Any, make_provider: Callable[..., AwsProvider], master_answers: None,
        tmp_path: Path) -> None:
    assert xc("up", "--name", "c2", "--nodes", "1").code == 0
    laptop = make_provider()
    location = laptop.storage_location(cluster_config(name="c1"), "auto", Path("/unused"), create=False)
    store_run(laptop, location, "c1", "r1", tmp_path, (40,))
    storage = laptop.open_storage(location)

    same_name = xc("train", "squad", "--demo", "--name", "c2", "--run", "r1", "--resume", "--detach")
    assert same_name.code == 2, same_name.err
    assert "no run 'r1'" in same_name.error and "--resume-from c1/r1" in same_name.error
    assert durable_steps(storage, location.run_key("c2", "r1")) == []  # nothing of c1's was taken

    mismatched = xc("train", "squad", "--demo", "--name", "c2", "--resume-from", "c1/r1", "--run", "r2")
    assert mismatched.code == 2 and "--run r2 and --resume-from c1/r1" in mismatched.error
    for bad in ("c1", "../r1", "c1/../../x", "C1/r1"):
        refused = xc("train", "squad", "--demo", "--name", "c2", "--resume-from", bad)
        assert refused.code == 2 and "--r" in refused.error, (bad, refused.err)

    named = xc("train", "squad", "--demo", "--name", "c2", "--resume-from", "c1/r1", "--detach")
    assert named.code == 0, named.err
    assert f"checkpoint-40 of run r1 of cluster c1 found under {location.run_key('c1', 'r1')}" in named.out + named.err
    assert durable_steps(storage, location.run_key("c2", "r1")) == [40]
    assert durable_steps(storage, location.run_key("c1", "r1")) == [40]  # c1's own copy stays
