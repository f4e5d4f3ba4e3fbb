"""The authorization questions an IAM request asks, as in AWS's Service Authorization Reference for IAM.

Role calls are asked on `arn:aws:iam::ACCOUNT:role/PATH/NAME` with the role's `aws:ResourceTag/...`
(and `iam:ResourceTag/...`) and `iam:PermissionsBoundary`: the boundary the request sets (CreateRole,
PutRolePermissionsBoundary) or the one the role has (PutRolePolicy, DeleteRolePolicy,
Attach/DetachRolePolicy, DeleteRolePermissionsBoundary). Tags given at creation are also asked as
TagRole / TagInstanceProfile. Instance profile calls carry the profile's tags the same way.
AddRoleToInstanceProfile also needs `iam:PassRole` on the role, with the role's tags.
Policy calls are asked on the policy's ARN, user calls on the user's.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from xeoncluster.standin.iam_lookup import Lookup
from xeoncluster.standin.iam_params import numbered, request_tag_keys, resource_tag_keys, tags
from xeoncluster.standin.iam_policy import Question, Values
from xeoncluster.standin.iam_requests_ec2 import EC2_SERVICE

ROLE_ACTIONS = frozenset({
    "CreateRole", "GetRole", "DeleteRole", "UpdateRole", "UpdateRoleDescription", "UpdateAssumeRolePolicy",
    "PutRolePolicy", "GetRolePolicy", "DeleteRolePolicy", "ListRolePolicies", "AttachRolePolicy",
    "DetachRolePolicy", "ListAttachedRolePolicies", "TagRole", "UntagRole", "ListRoleTags",
    "PutRolePermissionsBoundary", "DeleteRolePermissionsBoundary", "ListInstanceProfilesForRole"})
PROFILE_ACTIONS = frozenset({
    "CreateInstanceProfile", "GetInstanceProfile", "DeleteInstanceProfile", "AddRoleToInstanceProfile",
    "RemoveRoleFromInstanceProfile", "TagInstanceProfile", "UntagInstanceProfile", "ListInstanceProfileTags"})
POLICY_ACTIONS = frozenset({
    "GetPolicy", "GetPolicyVersion", "ListPolicyVersions", "CreatePolicyVersion", "DeletePolicyVersion",
    "SetDefaultPolicyVersion", "DeletePolicy", "TagPolicy", "UntagPolicy", "ListPolicyTags",
    "ListEntitiesForPolicy"})
USER_ACTIONS = frozenset({
    "CreateUser", "GetUser", "DeleteUser", "PutUserPolicy", "GetUserPolicy", "DeleteUserPolicy",
    "ListUserPolicies", "AttachUserPolicy", "DetachUserPolicy", "ListAttachedUserPolicies", "CreateAccessKey",
    "DeleteAccessKey", "ListAccessKeys", "UpdateAccessKey", "TagUser", "UntagUser",
    "PutUserPermissionsBoundary", "DeleteUserPermissionsBoundary"})
BOUNDARY_OF_ROLE = frozenset({"PutRolePolicy", "DeleteRolePolicy", "AttachRolePolicy", "DetachRolePolicy",
                              "DeleteRolePermissionsBoundary"})
BOUNDARY_IN_REQUEST = frozenset({"CreateRole", "PutRolePermissionsBoundary"})
# Tags given with a creating call are authorized as the tagging action too.
TAGGED_AS = {"CreateRole": "TagRole", "CreateInstanceProfile": "TagInstanceProfile", "CreateUser": "TagUser",
             "CreatePolicy": "TagPolicy"}


@dataclass(frozen=True)
class IamRequest:
    action: str
    params: Mapping[str, str]
    account: str
    lookup: Lookup
    principal: str  # the caller's ARN: user calls without a UserName are about the caller

    def arn(self, kind: str, name: str) -> str:
        return f"arn:aws:iam::{self.account}:{kind}{self.params.get('Path', '/')}{name}"

    def asked(self, resource: str, context: Mapping[str, Values]) -> list[Question]:
        """The call itself, with the tags it sets; and tags at creation as the tagging action."""
        request_tags = tags(self.params, "Tags.member")
        removed = numbered(self.params, "TagKeys.member")
        keys = {**context, **request_tag_keys(request_tags), **({"aws:TagKeys": removed} if removed else {})}
        questions = [Question(f"iam:{self.action}", resource, keys)]
        if request_tags and self.action in TAGGED_AS:
            questions.append(Question(f"iam:{TAGGED_AS[self.action]}", resource, request_tag_keys(request_tags)))
        return questions


def iam_questions(action: str, params: Mapping[str, str], account: str, lookup: Lookup,
                  principal: str = "") -> list[Question]:
    request = IamRequest(action, params, account, lookup, principal)
    if action in ROLE_ACTIONS:
        return _role(request)
    if action in PROFILE_ACTIONS:
        return _profile(request)
    if action in POLICY_ACTIONS:
        return request.asked(params.get("PolicyArn", "*"), {})
    if action == "CreatePolicy":
        return request.asked(request.arn("policy", params.get("PolicyName", "")), {})
    if action in USER_ACTIONS:
        user = params.get("UserName")
        return request.asked(request.arn("user", user) if user else principal or "*", {})
    return [Question(f"iam:{action}", "*")]


def _role(request: IamRequest) -> list[Question]:
    action, params = request.action, request.params
    name = params.get("RoleName", "")
    facts = request.lookup.role(name) if action != "CreateRole" else None
    context: dict[str, Values] = dict(resource_tag_keys(facts.tags, "iam")) if facts else {}
    boundary = (params.get("PermissionsBoundary") if action in BOUNDARY_IN_REQUEST
                else facts.boundary if facts and action in BOUNDARY_OF_ROLE else None)
    if boundary:
        context["iam:PermissionsBoundary"] = [boundary]
    if "PolicyArn" in params:
        context["iam:PolicyARN"] = [params["PolicyArn"]]
    return request.asked(facts.arn if facts else request.arn("role", name), context)


def _profile(request: IamRequest) -> list[Question]:
    params = request.params
    name = params.get("InstanceProfileName", "")
    existing = request.lookup.profile_tags(name) if request.action != "CreateInstanceProfile" else {}
    questions = request.asked(request.arn("instance-profile", name), resource_tag_keys(existing, "iam"))
    if request.action == "AddRoleToInstanceProfile":
        role = request.lookup.role(params.get("RoleName", ""))
        role_arn = role.arn if role else f"arn:aws:iam::{request.account}:role/{params.get('RoleName', '')}"
        # AWS documents this call as needing PassRole; an instance profile only ever goes to EC2.
        questions.append(Question("iam:PassRole", role_arn, {
            "iam:PassedToService": [EC2_SERVICE], **resource_tag_keys(role.tags if role else {}, "iam"),
            "iam:AssociatedResourceArn": [f"arn:aws:ec2:*:{request.account}:instance/*"]}))
    return questions
