"""Run storage on S3 (moto): `up` makes the account's bucket once and locks it down, a bucket the user
names is checked and used as it is, bad storage stops `up` before anything is made, the master's role
reaches only its own cluster's prefix, `down` keeps everything stored, and a run's checkpoints go
through StorageSync to S3 and back."""
from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import boto3
import pytest
from aws_helpers import REGION, live_state, write_config

from xeoncluster.agent.checkpoint_source import OnMaster
from xeoncluster.agent.run_storage import StorageSync
from xeoncluster.core.errors import ConfigError
from xeoncluster.providers.aws import storage as aws_storage
from xeoncluster.providers.aws.role import RoleScope, master_policy
from xeoncluster.runs.stored_checkpoints import download_checkpoint, durable_steps
from xeoncluster.standin.iam_policy import allowed
from xeoncluster.standin.iam_requests import s3_questions

ACCOUNT = "123456789012"
BUCKET = f"xeoncluster-{ACCOUNT}-{REGION}"
ROLE = f"xeoncluster-t1-{REGION}"


def s3():
    return boto3.client("s3", region_name=REGION)


def test_up_makes_the_account_bucket_locked_down_and_down_keeps_it(xc, ec2, aws):
    assert xc("up", "--name", "t1", "--nodes", "1").code == 0
    client = s3()
    block = client.get_public_access_block(Bucket=BUCKET)["PublicAccessBlockConfiguration"]
    assert block == {"BlockPublicAcls": True, "IgnorePublicAcls": True, "BlockPublicPolicy": True,
                     "RestrictPublicBuckets": True}
    rule = client.get_bucket_encryption(Bucket=BUCKET)["ServerSideEncryptionConfiguration"]["Rules"][0]
    assert rule["ApplyServerSideEncryptionByDefault"]["SSEAlgorithm"] == "AES256"
    lifecycle = client.get_bucket_lifecycle_configuration(Bucket=BUCKET)["Rules"]
    assert lifecycle[0]["AbortIncompleteMultipartUpload"] == {"DaysAfterInitiation": 7}
    assert {"Key": "xeoncluster:storage", "Value": "runs"} in client.get_bucket_tagging(Bucket=BUCKET)["TagSet"]
    ownership = client.get_bucket_ownership_controls(Bucket=BUCKET)["OwnershipControls"]["Rules"]
    assert ownership == [{"ObjectOwnership": "BucketOwnerEnforced"}]  # ACLs disabled
    statement = json.loads(client.get_bucket_policy(Bucket=BUCKET)["Policy"])["Statement"][0]
    assert statement["Effect"] == "Deny" and statement["Condition"] == {"Bool": {"aws:SecureTransport": "false"}}
    assert statement["Resource"] == [f"arn:aws:s3:::{BUCKET}", f"arn:aws:s3:::{BUCKET}/*"]
    client.put_object(Bucket=BUCKET, Key="t1/runs/r1/results/metrics.json", Body=b"{}")
    down = xc("down", "--name", "t1")
    assert down.code == 0 and f"s3://{BUCKET}" in down.out + down.err
    assert live_state(ec2, "t1") == {k: [] for k in live_state(ec2, "t1")}
    assert [o["Key"] for o in client.list_objects_v2(Bucket=BUCKET)["Contents"]] == ["t1/runs/r1/results/metrics.json"]


def test_a_second_up_reuses_the_bucket(xc, aws):
    assert xc("up", "--name", "t1", "--nodes", "1").code == 0
    assert xc("down", "--name", "t1").code == 0
    aws.clear()
    assert xc("up", "--name", "t1", "--nodes", "1").code == 0
    assert "CreateBucket" not in [op for _, op, _ in aws.calls]
    assert [b["Name"] for b in s3().list_buckets()["Buckets"]] == [BUCKET]


@pytest.mark.parametrize(("storage", "says"), [
    ("s3://nowhere-to-be-found/runs", "bucket nowhere-to-be-found does not exist"),
    ("s3://elsewhere-bucket/runs", "bucket elsewhere-bucket is in eu-west-1, the cluster in us-east-1"),
    ("s3://Bad_Bucket/runs", "is not an S3 location"),
    ("/srv/runs", "on AWS, runs are kept in S3"),
])
def test_bad_storage_stops_up_with_one_line_and_nothing_made(xc, ec2, aws, storage, says):
    boto3.client("s3", region_name="eu-west-1").create_bucket(
        Bucket="elsewhere-bucket", CreateBucketConfiguration={"LocationConstraint": "eu-west-1"})
    write_config(f"storage: {storage}\n")
    run = xc("up", "--name", "t1", "--nodes", "1")
    assert run.code == 2, run.err
    assert says in run.error
    assert live_state(ec2, "t1") == {k: [] for k in live_state(ec2, "t1")}
    assert ec2.describe_key_pairs()["KeyPairs"] == []
    assert [b["Name"] for b in s3().list_buckets()["Buckets"]] == ["elsewhere-bucket"]


def test_a_named_bucket_is_used_as_it_is_and_the_role_reaches_only_its_prefix(xc, aws):
    s3().create_bucket(Bucket="team-runs")
    write_config("storage: s3://team-runs/ml/\n")
    assert xc("up", "--name", "t1", "--nodes", "1").code == 0
    assert s3().get_bucket_tagging  # the user's bucket gets no settings of ours:
    with pytest.raises(s3().exceptions.ClientError):
        s3().get_public_access_block(Bucket="team-runs")
    policy = boto3.client("iam").get_role_policy(RoleName=ROLE, PolicyName="xeoncluster-agent")["PolicyDocument"]
    text = json.dumps(policy)
    assert "arn:aws:s3:::team-runs/ml/t1/*" in text and BUCKET not in text


SCOPE = RoleScope("a", REGION, ACCOUNT, "sg-0aaaaaaaaaaaaaaaa", ("subnet-0aaaaaaaaaaaaaaaa",),
                  "ami-0bbbbbbbbbbbbbbbb", "k" * 64, storage=("team-runs", "ml/a"))


def may(method: str, path: str, query: str = "") -> bool:
    return all(allowed([master_policy(SCOPE)], q) for q in s3_questions(method, path, query, {}))


def test_the_role_reads_and_writes_only_its_own_cluster_prefix() -> None:
    assert may("PUT", "/team-runs/ml/a/runs/r1/checkpoints/checkpoint-40/model.safetensors")
    assert may("GET", "/team-runs/ml/a/runs/r1/run.json")
    assert may("DELETE", "/team-runs/ml/a/runs/r1/checkpoints/checkpoint-40/MANIFEST.json")
    assert may("GET", "/team-runs", "list-type=2&prefix=ml/a/runs/r1/checkpoints/")
    assert not may("GET", "/team-runs/ml/b/runs/r1/run.json")            # another cluster's run
    assert not may("PUT", "/team-runs/ml/ab/runs/r1/run.json")           # a name that only starts alike
    assert not may("GET", "/team-runs", "list-type=2&prefix=ml/")        # the whole prefix
    assert not may("GET", "/other-bucket/ml/a/runs/r1/run.json")
    assert not may("DELETE", "/team-runs")


def checkpoint(run_dir: Path, step: int) -> None:
    folder = run_dir / f"checkpoint-{step}"
    folder.mkdir(parents=True)
    (folder / "model.safetensors").write_bytes(bytes([step % 256]) * 4096)
    (folder / "trainer_state.json").write_text(json.dumps({"global_step": step}))


def test_checkpoints_go_to_s3_newest_kept_and_come_back(aws, tmp_path: Path) -> None:
    s3().create_bucket(Bucket="team-runs")
    location = replace(aws_storage.parse_s3_url("s3://team-runs/ml"), owner=ACCOUNT)
    storage = aws_storage.S3Storage(s3(), location)
    run_dir = tmp_path / "run"
    sync = StorageSync(storage, "a", "r1", OnMaster(run_dir), keep=2, logs=[], report=print)
    for step in (40, 80, 120):
        checkpoint(run_dir, step)
        sync.checkpoint(step)
    assert sync.close(60) and sync.failures == 0
    base = location.run_key("a", "r1")
    assert base == "ml/a/runs/r1" and durable_steps(storage, base) == [80, 120]
    back = download_checkpoint(storage, base, 120, tmp_path / "back")
    assert (back / "model.safetensors").read_bytes() == (run_dir / "checkpoint-120/model.safetensors").read_bytes()
    assert not (run_dir / ".xc-storage" / "checkpoint-120").exists()


def test_resolve_without_create_makes_no_bucket(aws) -> None:
    location = aws_storage.resolve(s3(), "auto", ACCOUNT, REGION, aws_storage.Access(create=False), print)
    assert location.url == f"s3://{BUCKET}" and location.owner == ACCOUNT
    assert s3().list_buckets()["Buckets"] == []
    with pytest.raises(ConfigError, match="does not exist"):
        aws_storage.resolve(s3(), "s3://not-here/x", ACCOUNT, REGION, aws_storage.Access(create=False), print)


def test_a_record_rewritten_while_it_uploads_is_stored_whole(aws, tmp_path: Path) -> None:
    """The agent rewrites run.json atomically (a new file renamed over it) while StorageSync uploads
    it. The upload must store one version whole: boto3's upload_file takes the size from the path
    first and opens it later, so a longer version renamed in between was stored cut short, and
    `runs` refused the run's record (not JSON) and `train --resume` picked another run."""
    s3().create_bucket(Bucket="team-runs")
    location = replace(aws_storage.parse_s3_url("s3://team-runs/ml"), owner=ACCOUNT)
    client = s3()
    storage = aws_storage.S3Storage(client, location)
    record = tmp_path / "run.json"
    record.write_text(json.dumps({"step": 1}))
    longer = tmp_path / "run.json.next"
    longer.write_text(json.dumps({"step": 2, "usage": "x" * 500}))

    def rewrite(**_: object) -> None:
        if longer.exists():
            longer.replace(record)

    client.meta.events.register("before-parameter-build.s3.PutObject", rewrite)
    storage.put_file(record, "ml/a/runs/r1/run.json")
    stored = client.get_object(Bucket="team-runs", Key="ml/a/runs/r1/run.json")["Body"].read()
    assert json.loads(stored) in ({"step": 1}, {"step": 2, "usage": "x" * 500})
