"""A WSGI layer in front of moto that authorizes calls made with an instance role's credentials.

Calls signed with any other key (the user's own, as in every moto test) pass through untouched.
A call made with a role session's key is answered the way EC2 and S3 answer it: each resource it
touches must be allowed by the role's policies, conditions included, or it fails with
UnauthorizedOperation (EC2) or AccessDenied (S3, IAM, STS) and moto never sees it.
"""
from __future__ import annotations

import io
import re
import uuid
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any
from xml.sax.saxutils import escape

from .iam_policy import Question, allowed
from .iam_requests import TagsOf, ec2_questions, query_params, s3_questions
from .moto_iam import ACCOUNT, Caller

WsgiApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]
_CREDENTIAL = re.compile(r"Credential=([^/,\s]+)/\d{8}/([^/]+)/([^/]+)/aws4_request")
# Every identity may ask who it is; AWS authorizes no policy for it.
ALWAYS_ALLOWED = {"sts:GetCallerIdentity"}


@dataclass(frozen=True)
class Verdict:
    caller: Caller
    denied: Question | None


class IamGate:
    def __init__(self, app: WsgiApp, find_caller: Callable[[str], Caller | None],
                 tags_of: Callable[[str, str], dict[str, str]]) -> None:
        self.app = app
        self.find_caller = find_caller
        self.tags_of = tags_of
        # What role sessions asked, by "ROLE ACTION": allowed, and denied. `status` shows them.
        self.allowed: Counter[str] = Counter()
        self.denied: Counter[str] = Counter()

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        match = _CREDENTIAL.search(environ.get("HTTP_AUTHORIZATION", ""))
        caller = self.find_caller(match.group(1)) if match else None
        if match is None or caller is None:
            return self.app(environ, start_response)
        region, service = match.group(2), match.group(3)
        questions = self._questions(environ, service, region)
        denied = next((q for q in questions if q.action not in ALWAYS_ALLOWED
                       and not allowed(caller.policies, q)), None)
        role = caller.arn.split("/")[1] if "/" in caller.arn else caller.arn
        action = questions[0].action if questions else f"{service}:?"
        if denied is None:
            self.allowed[f"{role} {action}"] += 1
            return self.app(environ, start_response)
        self.denied[f"{role} {action}"] += 1
        return _refuse(start_response, service, caller, denied)

    def _questions(self, environ: dict[str, Any], service: str, region: str) -> list[Question]:
        method, query = environ.get("REQUEST_METHOD", "GET"), environ.get("QUERY_STRING", "")
        if service == "s3":
            body = _read_body(environ) if method == "POST" else b""
            headers = {k[5:].replace("_", "-").lower(): v for k, v in environ.items() if k.startswith("HTTP_")}
            return s3_questions(method, environ.get("PATH_INFO", "/"), query, headers, body)
        params = query_params(_read_body(environ), query)
        action = params.get("Action", "")
        if service == "ec2":
            tags: TagsOf = lambda resource_id: self.tags_of(region, resource_id)  # noqa: E731 - bound to this call's region
            return ec2_questions(action, params, region, ACCOUNT, tags)
        return [Question(f"{service}:{action}", "*")]


def _read_body(environ: dict[str, Any]) -> bytes:
    """Read the body once and put it back, so moto still finds it."""
    length = int(environ.get("CONTENT_LENGTH") or 0)
    body = environ["wsgi.input"].read(length) if length else b""
    environ["wsgi.input"] = io.BytesIO(body)
    return body


def _refuse(start_response: Callable[..., Any], service: str, caller: Caller, denied: Question) -> Iterable[bytes]:
    message = (f"User: {caller.arn} is not authorized to perform: {denied.action} on resource: {denied.resource} "
               f"because no identity-based policy allows the {denied.action} action")
    request_id = str(uuid.uuid4())
    if service == "ec2":
        body = (f"<Response><Errors><Error><Code>UnauthorizedOperation</Code><Message>{escape(message)}</Message>"
                f"</Error></Errors><RequestID>{request_id}</RequestID></Response>")
    elif service == "s3":
        body = (f"<Error><Code>AccessDenied</Code><Message>{escape(message)}</Message>"
                f"<RequestId>{request_id}</RequestId></Error>")
    else:
        body = (f"<ErrorResponse><Error><Type>Sender</Type><Code>AccessDenied</Code><Message>{escape(message)}"
                f"</Message></Error><RequestId>{request_id}</RequestId></ErrorResponse>")
    data = ('<?xml version="1.0" encoding="UTF-8"?>' + body).encode()
    start_response("403 Forbidden", [("Content-Type", "text/xml"), ("Content-Length", str(len(data)))])
    return [data]
