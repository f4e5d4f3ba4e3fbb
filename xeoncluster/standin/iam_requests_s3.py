"""The authorization questions an S3 request asks (path-style, as the stand-in's endpoint gets them).

Objects are asked on `arn:aws:s3:::BUCKET/KEY`, listing on the bucket with `s3:prefix`, bucket
settings under their IAM names (PUT ?encryption is s3:PutEncryptionConfiguration). Every question
carries `s3:ResourceAccount`: the account that owns the bucket (the caller's, for one not made yet).
"""
from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import replace
from html import unescape
from urllib.parse import parse_qs, unquote

from xeoncluster.standin.ec2_errors import ACCOUNT
from xeoncluster.standin.iam_lookup import Lookup
from xeoncluster.standin.iam_policy import Question

LISTING_QUERY = frozenset({"list-type", "prefix", "delimiter", "continuation-token", "max-keys", "start-after",
                           "encoding-type", "fetch-owner"})
# Bucket sub-resources whose IAM action is not simply (Put|Get|Delete)Bucket<Name>.
BUCKET_SETTINGS = {"encryption": "EncryptionConfiguration", "lifecycle": "LifecycleConfiguration",
                   "replication": "ReplicationConfiguration", "website": "BucketWebsite",
                   "publicAccessBlock": "BucketPublicAccessBlock", "ownershipControls": "BucketOwnershipControls",
                   "notification": "BucketNotification", "uploads": "BucketMultipartUploads"}
OBJECT_SETTINGS = {"tagging": "ObjectTagging", "acl": "ObjectAcl", "retention": "ObjectRetention",
                   "legal-hold": "ObjectLegalHold", "attributes": "ObjectAttributes"}


def s3_questions(method: str, path: str, query_string: str, headers: Mapping[str, str], body: bytes = b"",
                 lookup: Lookup | None = None, account: str = ACCOUNT) -> list[Question]:
    bucket, _, key = unquote(path).lstrip("/").partition("/")
    query = parse_qs(query_string, keep_blank_values=True)
    if not bucket:
        return [Question("s3:ListAllMyBuckets", "*")]
    if key:
        questions = _object_questions(method, bucket, key, query, headers)
    elif method == "POST" and "delete" in query:
        # DeleteObjects is authorized as DeleteObject on each key it names.
        keys = re.findall(r"<Key>(.*?)</Key>", body.decode(errors="replace"))
        questions = [Question("s3:DeleteObject", f"arn:aws:s3:::{bucket}/{unescape(k)}") for k in keys]
    else:
        questions = [_bucket_question(method, bucket, query)]
    return [replace(q, context={**q.context, "s3:ResourceAccount": [_owner(q.resource, lookup, account)]})
            for q in questions]


def _owner(resource: str, lookup: Lookup | None, account: str) -> str:
    bucket = resource.removeprefix("arn:aws:s3:::").split("/", 1)[0]
    return (lookup.bucket_account(bucket) if lookup is not None else None) or account


def _object_questions(method: str, bucket: str, key: str, query: Mapping[str, list[str]],
                      headers: Mapping[str, str]) -> list[Question]:
    resource = f"arn:aws:s3:::{bucket}/{key}"
    setting = next((OBJECT_SETTINGS[q] for q in query if q in OBJECT_SETTINGS), None)
    if setting is not None:
        verb = {"PUT": "Put", "DELETE": "Delete"}.get(method, "Get")
        return [Question(f"s3:{verb}{setting}", resource)]
    if method in ("GET", "HEAD"):
        return [Question("s3:ListMultipartUploadParts" if "uploadId" in query else "s3:GetObject", resource)]
    if method == "DELETE":
        return [Question("s3:AbortMultipartUpload" if "uploadId" in query else "s3:DeleteObject", resource)]
    questions = [Question("s3:PutObject", resource)]
    source = headers.get("x-amz-copy-source")
    if method == "PUT" and source:
        questions.append(Question("s3:GetObject", f"arn:aws:s3:::{unquote(source).lstrip('/').split('?')[0]}"))
    return questions


def _bucket_question(method: str, bucket: str, query: Mapping[str, list[str]]) -> Question:
    resource = f"arn:aws:s3:::{bucket}"
    if method in ("GET", "HEAD") and not set(query) - LISTING_QUERY:
        prefix = query.get("prefix", [""])[-1]
        return Question("s3:ListBucket", resource, {"s3:prefix": [prefix]})
    if method == "GET" and "location" in query:
        return Question("s3:GetBucketLocation", resource)
    if not query:
        return Question({"PUT": "s3:CreateBucket", "DELETE": "s3:DeleteBucket"}.get(method, "s3:ListBucket"),
                        resource)
    setting = next(iter(query))
    name = BUCKET_SETTINGS.get(setting, f"Bucket{setting[:1].upper()}{setting[1:]}")
    if setting == "uploads":
        return Question("s3:ListBucketMultipartUploads", resource)
    verb = {"PUT": "Put", "DELETE": "Delete"}.get(method, "Get")
    if setting in ("encryption", "lifecycle", "publicAccessBlock", "ownershipControls") and verb == "Delete":
        verb = "Put"  # S3 authorizes removing these as setting them
    return Question(f"s3:{verb}{name}", resource)
