"""The user's IAM policy: exactly the API actions the AWS provider calls, each scoped as tightly as
AWS allows, with no path to admin.

Every mutating EC2 call needs the cluster tag on what it creates or acts on, and the caller as its
owner (`xeoncluster:owner` = `${aws:userid}`, owner.py): a user acts only on the clusters they
made. The IAM actions create `xeoncluster-*` roles only with the permissions boundary
(boundary.py), owned by the caller, and may never remove or change it; S3 reaches only the
account's own `xeoncluster-*` buckets. tests/aws/test_iam_policy.py checks the actions against the
provider's source and every call a full CLI lifecycle makes, asks the stand-in's evaluator what the
policy allows, and checks that docs/aws.md shows the same JSON.
"""
from __future__ import annotations

from xeoncluster.providers.aws.boundary import (
    LAUNCHED,
    STORAGE_OBJECT_ACTIONS,
    boundary_arn,
    image_statements,
    owner_storage_statements,
)
from xeoncluster.providers.aws.iam_doc import (
    CALLER,
    TAG_BASE_IMAGE,
    Document,
    allow,
    deny,
    document,
    ec2_arn,
    ec2_arns,
    made_by_caller,
    requested_by_caller,
)
from xeoncluster.providers.aws.images import BASE_IMAGE_PARAMETER
from xeoncluster.providers.base import TAG_OWNER

ACTIONS: dict[str, tuple[str, ...]] = {
    "ec2": (
        # preflight and plan (read-only)
        "DescribeRegions", "DescribeVpcs", "DescribeSubnets", "DescribeRouteTables", "DescribeAvailabilityZones",
        "DescribeInstanceTypes", "DescribeInstanceTypeOfferings", "DescribeSpotPriceHistory",
        # which calls leave the VPC through an endpoint (endpoints.py: the role's credentials bound to it)
        "DescribeVpcEndpoints",
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
    # The cluster's role and instance profile (role.py), on xeoncluster-* names only, and the
    # permissions boundary every such role carries (boundary.py), which `up` reads first.
    "iam": ("GetRole", "CreateRole", "PutRolePolicy", "ListRolePolicies", "DeleteRolePolicy", "DeleteRole",
            "GetInstanceProfile", "CreateInstanceProfile", "AddRoleToInstanceProfile",
            "RemoveRoleFromInstanceProfile", "DeleteInstanceProfile", "TagRole", "TagInstanceProfile",
            "PutRolePermissionsBoundary", "GetPolicy", "GetPolicyVersion",
            # Not called directly: EC2 authorizes launching a node with the cluster's instance profile as PassRole.
            "PassRole"),
    "sts": ("GetCallerIdentity",),
    "ssm": ("GetParameter",),
    # Run storage: the runs below the caller's own prefix in the account's xeoncluster-* buckets, and the
    # checks that such a bucket is the account's and locked down (bucket.py). Making and locking a bucket
    # is the administrator's (ADMIN_SETUP).
    "s3": ("GetBucketPublicAccessBlock", "GetEncryptionConfiguration", "GetBucketOwnershipControls",
           "GetBucketPolicy", "GetBucketLocation", "ListBucket", "GetObject", "PutObject", "DeleteObject",
           "AbortMultipartUpload"),
    "pricing": ("GetProducts",),
    "servicequotas": ("GetServiceQuota",),
}
# The administrator's one-time step per region (`xeoncluster storage init`): the auto bucket and its
# lock-down. Not in the user's policy: a user could otherwise open the shared bucket to anyone.
ADMIN_SETUP: dict[str, tuple[str, ...]] = {
    "s3": ("CreateBucket", "PutBucketPublicAccessBlock", "PutEncryptionConfiguration", "PutLifecycleConfiguration",
           "PutBucketTagging", "PutBucketOwnershipControls", "PutBucketPolicy"),
}
# Never called by name: EC2 and IAM authorize tags given at creation as CreateTags/TagRole/
# TagInstanceProfile, and an instance profile given to RunInstances as PassRole on its role.
TAG_ON_CREATE_ONLY = frozenset({"ec2:CreateTags", "iam:TagInstanceProfile", "iam:PassRole",
                                # boto3's transfer manager aborts a multipart upload that failed
                                "s3:AbortMultipartUpload"})
# boto3 service name -> IAM prefix, where they differ
IAM_PREFIX = {"service-quotas": "servicequotas"}
# S3 authorizes operations under other names: what each call the provider makes needs.
S3_ACTION = {"HeadBucket": "ListBucket", "ListObjectsV2": "ListBucket", "DeleteObjects": "DeleteObject",
             "CopyObject": "PutObject", "HeadObject": "GetObject", "PutPublicAccessBlock": "PutBucketPublicAccessBlock",
             "PutBucketEncryption": "PutEncryptionConfiguration",
             "PutBucketLifecycleConfiguration": "PutLifecycleConfiguration", "CreateMultipartUpload": "PutObject",
             "UploadPart": "PutObject", "CompleteMultipartUpload": "PutObject",
             "GetPublicAccessBlock": "GetBucketPublicAccessBlock", "GetBucketEncryption": "GetEncryptionConfiguration"}
# The boto3 method the provider calls for each S3 action (their names differ).
S3_CALLED_AS = {"ListBucket": "list_objects_v2", "PutEncryptionConfiguration": "put_bucket_encryption",
                "PutBucketPublicAccessBlock": "put_public_access_block",
                "PutLifecycleConfiguration": "put_bucket_lifecycle_configuration", "PutObject": "put_object",
                "DeleteObject": "delete_objects", "GetBucketPublicAccessBlock": "get_public_access_block",
                "GetEncryptionConfiguration": "get_bucket_encryption"}


def iam_action(service: str, operation: str) -> str:
    """The IAM action a boto3 call (`service`, `operation`) is authorized as."""
    prefix = IAM_PREFIX.get(service, service)
    return f"{prefix}:{S3_ACTION.get(operation, operation) if prefix == 's3' else operation}"


def actions(table: dict[str, tuple[str, ...]] = ACTIONS) -> list[str]:
    """The user's actions; `ADMIN_SETUP`'s with that table."""
    return [f"{prefix}:{name}" for prefix, names in table.items() for name in names]


# docs/aws.md shows both policies for this placeholder account.
DOC_ACCOUNT = "123456789012"
# EC2 calls on what the tool made: the resource must carry the caller as its owner (a tag this policy
# sets only on creation, and only with the cluster tag).
EC2_ON_TAGGED = ("TerminateInstances", "GetConsoleOutput", "CancelSpotInstanceRequests", "ModifyVolume",
                 "DeleteKeyPair", "AuthorizeSecurityGroupIngress", "RevokeSecurityGroupIngress", "DeleteSecurityGroup",
                 "DeletePlacementGroup", "CreateImage", "DeregisterImage", "DeleteSnapshot")
EC2_CREATING = ("ImportKeyPair", "CreateSecurityGroup", "CreatePlacementGroup", "CreateImage")

IAM_CREATING = ("CreateRole", "CreateInstanceProfile", "TagRole", "TagInstanceProfile")
# On any `xeoncluster-*` role or profile: reading, and putting the boundary on a role made before
# there was one (which only narrows it; OnlyWithTheBoundary refuses any other boundary).
IAM_ANY = ("GetRole", "ListRolePolicies", "GetInstanceProfile", "PutRolePermissionsBoundary")
# IAM calls on the cluster's role and profile: the caller must have made them (their owner tag).
IAM_ON_OWN = ("PutRolePolicy", "DeleteRolePolicy", "DeleteRole", "AddRoleToInstanceProfile",
              "RemoveRoleFromInstanceProfile", "DeleteInstanceProfile", "PassRole")


def policy_document(account: str) -> Document:
    return document([*_ec2_statements(account), *_iam_statements(account), *_storage_statements(account),
                     allow("UbuntuImageId", ["ssm:GetParameter"],
                           f"arn:aws:ssm:*::parameter{BASE_IMAGE_PARAMETER}")])  # public: no account


def _ec2_statements(account: str) -> list[Document]:
    every = [ec2_arn(account, "*"), ec2_arn(account, "image"), ec2_arn(account, "snapshot")]
    made = [ec2_arn(account, "key-pair", "xeoncluster-*"), ec2_arn(account, "security-group"),
            ec2_arn(account, "placement-group", "xeoncluster-*")]
    return [
        # Describe* (ACTIONS lists the ones called) and these have no resource-level permissions: "*"
        # is the only resource they take. One wildcard keeps the policy well under IAM's limit of
        # 6,144 characters for a managed policy.
        allow("ReadOnly", ["ec2:Describe*", "sts:GetCallerIdentity", "pricing:GetProducts"], "*"),
        allow("VcpuQuota", ["servicequotas:GetServiceQuota"], f"arn:aws:servicequotas:*:{account}:ec2/*"),
        # Key pair, security group, placement group and image (with its snapshots) are made tagged
        # with the cluster and the caller as their owner.
        allow("CreateOwnTagged", [f"ec2:{a}" for a in EC2_CREATING], made + every[1:], requested_by_caller()),
        allow("SecurityGroupInAccountVpc", ["ec2:CreateSecurityGroup"], ec2_arn(account, "vpc")),
        # Tags only as part of a creating call (ec2:CreateAction is set only then), never afterwards.
        allow("TagOnCreateOnly", ["ec2:CreateTags"], every,
              {**requested_by_caller(cluster=False), "Null": {"ec2:CreateAction": "false"}}),
        allow("LaunchOwnTagged", ["ec2:RunInstances"], ec2_arns(account, LAUNCHED), requested_by_caller()),
        allow("LaunchInAccountNetwork", ["ec2:RunInstances"],
              ec2_arns(account, ("network-interface", "subnet"))),
        # The security group, key pair and placement group a launch uses: the caller's own.
        allow("LaunchWithOwnClusterResources", ["ec2:RunInstances"], every[0], made_by_caller()),
        *image_statements(account),
        allow("OwnResourcesOnly", [f"ec2:{a}" for a in EC2_ON_TAGGED], every, made_by_caller()),
    ]


def _iam_statements(account: str) -> list[Document]:
    roles = f"arn:aws:iam::{account}:role/xeoncluster-*"
    profiles = f"arn:aws:iam::{account}:instance-profile/xeoncluster-*"
    boundary = boundary_arn(account)
    return [
        # Roles and profiles are made tagged with the caller as their owner; tags only on creation
        # (nothing carries an owner tag yet). The boundary is required by OnlyWithTheBoundary below.
        allow("CreateOwnRole", [f"iam:{a}" for a in IAM_CREATING], [roles, profiles],
              {**requested_by_caller(cluster=False), "Null": {f"iam:ResourceTag/{TAG_OWNER}": "true"}}),
        allow("ReadOrAddTheBoundary", [f"iam:{a}" for a in IAM_ANY], [roles, profiles]),
        # The one tag a role's owner changes later: the base image its nodes start from (role.py), which the
        # boundary lets the role launch. It widens nothing: the user may launch that image anyway.
        allow("RetagBaseImage", ["iam:TagRole"], roles,
              {**made_by_caller("iam"), "ForAllValues:StringEquals": {"aws:TagKeys": [TAG_BASE_IMAGE]}}),
        # The role's policy, PassRole (to EC2 only) and the removals: on the caller's own role and profile.
        allow("OwnRolesAndProfiles", [f"iam:{a}" for a in IAM_ON_OWN], [roles, profiles],
              {**made_by_caller("iam"), "StringEqualsIfExists": {"iam:PassedToService": "ec2.amazonaws.com"}}),
        allow("ReadTheBoundary", ["iam:GetPolicy", "iam:GetPolicyVersion"], boundary),
        # The boundary and who may assume a role are fixed once it is made (the trust is EC2's: role.py).
        deny("KeepBoundaryAndTrust",
             ["iam:DeleteRolePermissionsBoundary", "iam:UpdateAssumeRolePolicy"], roles),
        # A role without the boundary (or with another) is never made, given a policy or re-bounded.
        deny("OnlyWithTheBoundary", ["iam:CreateRole", "iam:PutRolePolicy", "iam:PutRolePermissionsBoundary"], roles,
             {"StringNotEquals": {"iam:PermissionsBoundary": boundary}}),
        deny("BoundaryIsFixed", ["iam:CreatePolicyVersion", "iam:DeletePolicy", "iam:DeletePolicyVersion",
                                            "iam:SetDefaultPolicyVersion"], boundary),
    ]


def _storage_statements(account: str) -> list[Document]:
    """Bucket checks on the account's own `xeoncluster-*` buckets; objects and listing only below the
    caller's own prefix (`${aws:userid}/...`), so a colleague's runs are out of reach."""
    own = {"StringEquals": {"s3:ResourceAccount": account}}
    checks = [f"s3:{a}" for a in ACTIONS["s3"] if a.startswith("Get") and a != "GetObject"]
    return [allow("RunBucketChecks", checks, "arn:aws:s3:::xeoncluster-*", own),
            *owner_storage_statements(account, CALLER, list(STORAGE_OBJECT_ACTIONS))]
