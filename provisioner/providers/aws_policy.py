"""The IAM permissions the AWS provider needs: exactly the API actions it calls.

tests/aws/test_iam_policy.py checks this list against the provider's source and against every call
a full CLI lifecycle makes, and that docs/aws.md shows the same JSON.
"""
from __future__ import annotations

import json
from typing import Any

from .aws_images import BASE_IMAGE_PARAMETER

ACTIONS: dict[str, tuple[str, ...]] = {
    "ec2": (
        # preflight and plan (read-only)
        "DescribeRegions", "DescribeVpcs", "DescribeSubnets", "DescribeRouteTables", "DescribeAvailabilityZones",
        "DescribeInstanceTypes", "DescribeInstanceTypeOfferings", "DescribeSpotPriceHistory",
        # key pair, security group, placement group
        "DescribeKeyPairs", "ImportKeyPair", "DeleteKeyPair",
        "DescribeSecurityGroups", "CreateSecurityGroup", "AuthorizeSecurityGroupIngress",
        "RevokeSecurityGroupIngress", "DeleteSecurityGroup",
        "DescribePlacementGroups", "CreatePlacementGroup", "DeletePlacementGroup",
        # instances (`up` reads each new instance's console output for out-of-band host keys)
        "RunInstances", "DescribeInstances", "GetConsoleOutput", "TerminateInstances",
        "DescribeSpotInstanceRequests", "CancelSpotInstanceRequests",
        # the master's root volume, grown after the bake (images are baked from a small root)
        "DescribeVolumes", "ModifyVolume", "DescribeVolumesModifications",
        # images
        "DescribeImages", "CreateImage", "DeregisterImage", "DescribeSnapshots", "DeleteSnapshot",
        # Not called directly: EC2 authorizes tags passed in TagSpecifications (tag on create) as CreateTags.
        "CreateTags",
    ),
    # The master's role and instance profile (aws_role.py), on xeoncluster-* names only.
    "iam": ("GetRole", "CreateRole", "PutRolePolicy", "ListRolePolicies", "DeleteRolePolicy", "DeleteRole",
            "GetInstanceProfile", "CreateInstanceProfile", "AddRoleToInstanceProfile",
            "RemoveRoleFromInstanceProfile", "DeleteInstanceProfile", "TagRole", "TagInstanceProfile",
            # Not called directly: EC2 authorizes launching the master with its instance profile as PassRole.
            "PassRole"),
    "sts": ("GetCallerIdentity",),
    "ssm": ("GetParameter",),
    # Run storage: the account's xeoncluster-* bucket (made once, locked down) and the runs in it.
    "s3": ("CreateBucket", "PutBucketPublicAccessBlock", "PutEncryptionConfiguration", "PutLifecycleConfiguration",
           "PutBucketTagging", "GetBucketLocation", "ListBucket", "GetObject", "PutObject", "DeleteObject",
           "AbortMultipartUpload"),
    "pricing": ("GetProducts",),
    "servicequotas": ("GetServiceQuota",),
}
# Never called by name: EC2 and IAM authorize tags given at creation as CreateTags/TagRole/
# TagInstanceProfile, and an instance profile given to RunInstances as PassRole on its role.
TAG_ON_CREATE_ONLY = frozenset({"ec2:CreateTags", "iam:TagRole", "iam:TagInstanceProfile", "iam:PassRole",
                                # boto3's transfer manager aborts a multipart upload that failed
                                "s3:AbortMultipartUpload"})
# boto3 service name -> IAM prefix, where they differ
IAM_PREFIX = {"service-quotas": "servicequotas"}
# S3 authorizes operations under other names: what each call the provider makes needs.
S3_ACTION = {"HeadBucket": "ListBucket", "ListObjectsV2": "ListBucket", "DeleteObjects": "DeleteObject",
             "CopyObject": "PutObject", "HeadObject": "GetObject", "PutPublicAccessBlock": "PutBucketPublicAccessBlock",
             "PutBucketEncryption": "PutEncryptionConfiguration",
             "PutBucketLifecycleConfiguration": "PutLifecycleConfiguration", "CreateMultipartUpload": "PutObject",
             "UploadPart": "PutObject", "CompleteMultipartUpload": "PutObject"}
# The boto3 method the provider calls for each S3 action (their names differ).
S3_CALLED_AS = {"ListBucket": "head_bucket", "PutEncryptionConfiguration": "put_bucket_encryption",
                "PutBucketPublicAccessBlock": "put_public_access_block",
                "PutLifecycleConfiguration": "put_bucket_lifecycle_configuration", "PutObject": "upload_file",
                "DeleteObject": "delete_objects"}


def iam_action(service: str, operation: str) -> str:
    """The IAM action a boto3 call (`service`, `operation`) is authorized as."""
    prefix = IAM_PREFIX.get(service, service)
    return f"{prefix}:{S3_ACTION.get(operation, operation) if prefix == 's3' else operation}"


def actions() -> list[str]:
    return [f"{prefix}:{name}" for prefix, names in ACTIONS.items() for name in names]


def policy_document() -> dict[str, Any]:
    ubuntu = f"arn:aws:ssm:*::parameter{BASE_IMAGE_PARAMETER}"  # a public parameter: no account id
    return {
        "Version": "2012-10-17",
        "Statement": [
            {"Sid": "XeonclusterEc2AndEstimates", "Effect": "Allow",
             "Action": [a for a in actions() if not a.startswith(("ssm:", "iam:", "s3:"))], "Resource": "*"},
            {"Sid": "XeonclusterRunStorage", "Effect": "Allow", "Action": [a for a in actions() if a.startswith("s3:")],
             "Resource": ["arn:aws:s3:::xeoncluster-*", "arn:aws:s3:::xeoncluster-*/*"]},
            {"Sid": "XeonclusterMasterRole", "Effect": "Allow",
             "Action": [a for a in actions() if a.startswith("iam:") and a != "iam:PassRole"],
             "Resource": ["arn:aws:iam::*:role/xeoncluster-*", "arn:aws:iam::*:instance-profile/xeoncluster-*"]},
            {"Sid": "XeonclusterPassMasterRoleToEc2", "Effect": "Allow", "Action": ["iam:PassRole"],
             "Resource": "arn:aws:iam::*:role/xeoncluster-*",
             "Condition": {"StringEquals": {"iam:PassedToService": "ec2.amazonaws.com"}}},
            {"Sid": "XeonclusterUbuntuImageId", "Effect": "Allow", "Action": ["ssm:GetParameter"],
             "Resource": ubuntu},
        ],
    }


def policy_json() -> str:
    return json.dumps(policy_document(), indent=2)


if __name__ == "__main__":
    print(policy_json())
