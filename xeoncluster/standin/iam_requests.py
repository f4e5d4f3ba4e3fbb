"""The authorization questions a request asks, one per resource, with its condition keys.

EC2 (iam_requests_ec2.py), IAM (iam_requests_iam.py) and S3 (iam_requests_s3.py) have their own
modules; the JSON services the CLI calls are here: SSM's GetParameter on the parameter's ARN (a
public `/aws/service/...` parameter has no account in it), Service Quotas on the quota's ARN, the
Price List on `*`. Any other action is asked on `*`.
"""
from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from xeoncluster.standin.iam_lookup import Lookup
from xeoncluster.standin.iam_params import query_params
from xeoncluster.standin.iam_policy import Question
from xeoncluster.standin.iam_requests_ec2 import ec2_questions
from xeoncluster.standin.iam_requests_iam import iam_questions
from xeoncluster.standin.iam_requests_s3 import s3_questions

__all__ = ["Request", "ec2_questions", "iam_questions", "query_params", "questions", "s3_questions"]


@dataclass(frozen=True)
class Request:
    """What the gate read of an HTTP request: the service and region it was signed for, and its parts."""

    service: str
    region: str
    method: str
    path: str
    query: str
    headers: Mapping[str, str]  # lower-case names
    body: bytes


def questions(request: Request, account: str, lookup: Lookup, principal: str) -> list[Question]:
    if request.service == "s3":
        return s3_questions(request.method, request.path, request.query, request.headers, request.body,
                            lookup, account)
    target = request.headers.get("x-amz-target")
    if target:
        return _json_questions(request, target.rsplit(".", 1)[-1], account)
    params = query_params(request.body, request.query)
    action = params.get("Action", "")
    if request.service == "ec2":
        return ec2_questions(action, params, request.region, account, lookup)
    if request.service == "iam":
        return iam_questions(action, params, account, lookup, principal)
    return [Question(f"{request.service}:{action}", "*")]


def _json_questions(request: Request, action: str, account: str) -> list[Question]:
    body = _json_body(request.body)
    if request.service == "ssm" and action.startswith("GetParameter"):
        names = body.get("Names") or [body.get("Name") or body.get("Path") or ""]
        return [Question(f"ssm:{action}", _parameter_arn(str(n), request.region, account)) for n in names]
    if request.service == "servicequotas" and "QuotaCode" in body:
        return [Question(f"servicequotas:{action}", f"arn:aws:servicequotas:{request.region}:{account}:"
                                                    f"{body.get('ServiceCode', '')}/{body['QuotaCode']}")]
    return [Question(f"{request.service}:{action}", "*")]


def _parameter_arn(name: str, region: str, account: str) -> str:
    path = name if name.startswith("/") else f"/{name}"
    owner = "" if path.startswith("/aws/") else account  # public parameters belong to no account
    return f"arn:aws:ssm:{region}:{owner}:parameter{path}"


def _json_body(body: bytes) -> dict[str, Any]:
    try:
        parsed = json.loads(body or b"{}")
    except ValueError:
        return {}
    return parsed if isinstance(parsed, dict) else {}
