"""A WSGI layer in front of moto that authorizes calls made by an IAM identity: a role's session (the
master's credentials from IMDS) or an IAM user's access key.

Calls signed with any other key (the admin's `testing` key, as in every moto test) pass through
untouched. A call made by an identity is answered the way AWS answers it: each resource it touches
must be allowed by the identity's policies and by its permissions boundary, conditions included, and
no statement of either may deny it; otherwise it fails with UnauthorizedOperation (EC2) or
AccessDenied (S3, IAM, STS, SSM...) and moto never sees it.
"""
from __future__ import annotations

import io
import json
import re
import uuid
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from typing import Any
from xml.sax.saxutils import escape

from xeoncluster.standin.ec2_errors import ACCOUNT
from xeoncluster.standin.iam_lookup import Lookup
from xeoncluster.standin.iam_policy import Question, refusal
from xeoncluster.standin.iam_requests import Request, questions
from xeoncluster.standin.moto_iam import Caller

WsgiApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]
_CREDENTIAL = re.compile(r"Credential=([^/,\s]+)/\d{8}/([^/]+)/([^/]+)/aws4_request")
# Every identity may ask who it is; AWS authorizes no policy for it.
ALWAYS_ALLOWED = {"sts:GetCallerIdentity"}
# Access keys IAM and STS issue; one that belongs to nobody (deleted, or its session's role gone) is
# refused, as AWS refuses it. Any other key (the admin's `testing`) passes as in moto.
ISSUED_KEY = re.compile(r"(AKIA|ASIA)[A-Z0-9]{12,}")


@dataclass(frozen=True)
class Verdict:
    action: str                     # what the call was asked as (its first question), or what was refused
    denied: Question | None = None
    why: str | None = None          # in the words of AWS's AccessDenied message


class IamGate:
    def __init__(self, app: WsgiApp, find_caller: Callable[[str], Caller | None],
                 lookup_for: Callable[[str], Lookup]) -> None:
        self.app = app
        self.find_caller = find_caller
        self.lookup_for = lookup_for  # by region
        # What identities asked, by "NAME ACTION": allowed, and denied. `status` shows them.
        self.allowed: Counter[str] = Counter()
        self.denied: Counter[str] = Counter()

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        match = _CREDENTIAL.search(environ.get("HTTP_AUTHORIZATION", ""))
        caller = self.find_caller(match.group(1)) if match else None
        if match is None or caller is None:
            if match is not None and ISSUED_KEY.fullmatch(match.group(1)):
                return _unknown_key(start_response, match.group(3))
            return self.app(environ, start_response)
        request = _request(environ, service=match.group(3), region=match.group(2))
        verdict = self.judge(caller, request)
        if verdict.denied is None:
            self.allowed[f"{caller.name} {verdict.action}"] += 1
            return self.app(environ, start_response)
        self.denied[f"{caller.name} {verdict.action}"] += 1
        return _refuse(start_response, request, caller, verdict)

    def judge(self, caller: Caller, request: Request) -> Verdict:
        asked = self._questions(caller, request)
        for question in asked:
            if question.action in ALWAYS_ALLOWED:
                continue
            why = refusal(caller.policies, caller.boundary, question)
            if why is not None:
                return Verdict(question.action, question, why)
        return Verdict(asked[0].action if asked else f"{request.service}:?")

    def _questions(self, caller: Caller, request: Request) -> list[Question]:
        asked = questions(request, ACCOUNT, self.lookup_for(request.region), caller.principal or caller.arn)
        common = {"aws:PrincipalArn": [caller.principal or caller.arn], "aws:PrincipalAccount": [ACCOUNT],
                  "aws:RequestedRegion": [request.region]}
        if caller.user_id:  # what `${aws:userid}` in a policy becomes
            common["aws:userid"] = [caller.user_id]
        common.update(caller.context())
        return [replace(q, context={**common, **q.context}) for q in asked]


def _request(environ: dict[str, Any], service: str, region: str) -> Request:
    method = environ.get("REQUEST_METHOD", "GET")
    headers = {k[5:].replace("_", "-").lower(): v for k, v in environ.items() if k.startswith("HTTP_")}
    # S3 bodies are objects: only a POST (DeleteObjects) says what it is about in its body.
    body = _read_body(environ) if service != "s3" or method == "POST" else b""
    return Request(service, region, method, environ.get("PATH_INFO", "/"), environ.get("QUERY_STRING", ""),
                   headers, body)


def _read_body(environ: dict[str, Any]) -> bytes:
    """Read the body once and put it back, so moto still finds it."""
    length = int(environ.get("CONTENT_LENGTH") or 0)
    body = environ["wsgi.input"].read(length) if length else b""
    environ["wsgi.input"] = io.BytesIO(body)
    return body


def _unknown_key(start_response: Callable[..., Any], service: str) -> Iterable[bytes]:
    code = "AuthFailure" if service == "ec2" else "InvalidClientTokenId"
    message = "The security token included in the request is invalid."
    body = (f"<Response><Errors><Error><Code>{code}</Code><Message>{message}</Message></Error></Errors></Response>"
            if service == "ec2" else f"<ErrorResponse><Error><Type>Sender</Type><Code>{code}</Code>"
                                     f"<Message>{message}</Message></Error></ErrorResponse>")
    data = body.encode()
    start_response("403 Forbidden", [("Content-Type", "text/xml"), ("Content-Length", str(len(data)))])
    return [data]


def _refuse(start_response: Callable[..., Any], request: Request, caller: Caller,
            verdict: Verdict) -> Iterable[bytes]:
    denied = verdict.denied or Question(verdict.action, "*")
    message = (f"User: {caller.arn} is not authorized to perform: {denied.action} on resource: {denied.resource} "
               f"{verdict.why}")
    request_id = str(uuid.uuid4())
    content_type, body = "text/xml", ""
    if "x-amz-target" in request.headers:
        content_type = "application/x-amz-json-1.1"
        body = json.dumps({"__type": "AccessDeniedException", "message": message})
    elif request.service == "ec2":
        body = (f"<Response><Errors><Error><Code>UnauthorizedOperation</Code><Message>{escape(message)}</Message>"
                f"</Error></Errors><RequestID>{request_id}</RequestID></Response>")
    elif request.service == "s3":
        body = (f"<Error><Code>AccessDenied</Code><Message>{escape(message)}</Message>"
                f"<RequestId>{request_id}</RequestId></Error>")
    else:
        body = (f"<ErrorResponse><Error><Type>Sender</Type><Code>AccessDenied</Code><Message>{escape(message)}"
                f"</Message></Error><RequestId>{request_id}</RequestId></ErrorResponse>")
    data = (body if content_type != "text/xml" else '<?xml version="1.0" encoding="UTF-8"?>' + body).encode()
    start_response("403 Forbidden", [("Content-Type", content_type), ("Content-Length", str(len(data))),
                                     ("x-amzn-RequestId", request_id)])
    return [data]
