"""The permissions boundary from the CLI: `up` refuses without it (one line naming the fix, nothing
created), `plan` warns, and `xeoncluster policy` prints both documents for the caller's account."""
from __future__ import annotations

import json

import boto3
from moto.core import DEFAULT_ACCOUNT_ID

from xeoncluster.providers.aws.boundary import BOUNDARY_NAME, boundary_arn, boundary_document
from xeoncluster.providers.aws.policy import policy_document


def remove_boundary() -> None:
    boto3.client("iam", region_name="us-east-1").delete_policy(PolicyArn=boundary_arn(DEFAULT_ACCOUNT_ID))


def test_up_without_the_boundary_refuses_before_creating_anything(xc, aws):
    remove_boundary()
    aws.clear()
    run = xc("up", "--name", "t1", "--nodes", "2")
    assert run.code == 2
    missing = f"the permissions boundary policy {BOUNDARY_NAME} does not exist in account {DEFAULT_ACCOUNT_ID}"
    assert missing in run.error
    assert "xeoncluster policy --boundary" in run.error and "aws iam create-policy" in run.error
    assert aws.mutating("ec2") == [] and aws.mutating("iam") == [] and aws.mutating("s3") == []
    assert boto3.client("iam", region_name="us-east-1").list_roles()["Roles"] == []


def test_plan_without_the_boundary_warns(xc, aws):
    remove_boundary()
    run = xc("plan", "--name", "t1", "--nodes", "2")
    assert run.code == 0
    assert f"warning: the permissions boundary policy {BOUNDARY_NAME} does not exist" in run.out + run.err


def test_a_boundary_that_differs_from_this_version_s_is_a_warning(xc, aws):
    iam = boto3.client("iam", region_name="us-east-1")
    narrower = {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "ec2:Describe*", "Resource": "*"}]}
    iam.create_policy_version(PolicyArn=boundary_arn(DEFAULT_ACCOUNT_ID), PolicyDocument=json.dumps(narrower),
                              SetAsDefault=True)
    run = xc("plan", "--name", "t1", "--nodes", "2")
    assert run.code == 0 and f"the permissions boundary {BOUNDARY_NAME} differs" in run.out + run.err


def test_the_policy_command_prints_both_documents_for_the_caller_s_account(xc, aws):
    user = xc("policy")
    assert user.code == 0 and json.loads(user.out) == policy_document(DEFAULT_ACCOUNT_ID)
    assert "xeoncluster policy --boundary" in user.err
    boundary = xc("policy", "--boundary")
    assert boundary.code == 0 and json.loads(boundary.out) == boundary_document(DEFAULT_ACCOUNT_ID)
    assert (f"aws iam create-policy --policy-name {BOUNDARY_NAME} --policy-document file://{BOUNDARY_NAME}.json"
            in boundary.err)
    aws.clear()
    other = xc("policy", "--account", "111122223333", "--boundary")
    assert json.loads(other.out) == boundary_document("111122223333") and aws.calls == []  # no AWS call needed
    bad = xc("policy", "--account", "1111-2222-3333")
    assert bad.code == 2 and bad.out == "" and "is not an AWS account id" in bad.error
