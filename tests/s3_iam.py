"""What IAM authorizes for each S3 REST request a proxy saw: the action, the resource ARN
and the condition keys, so a real run's traffic can be evaluated against a rendered policy.

The mapping follows the S3 API reference (each operation's "Permissions") and "Actions,
resources, and condition keys for Amazon S3"
(https://docs.aws.amazon.com/service-authorization/latest/reference/list_amazons3.html):
ListObjects(V2) and HeadBucket need ``s3:ListBucket`` on the bucket, with ``s3:prefix``
the request's ``prefix`` parameter; GetObject and HeadObject need ``s3:GetObject``;
PutObject, CreateMultipartUpload, UploadPart and CompleteMultipartUpload need
``s3:PutObject``; DeleteObject and each key of DeleteObjects need ``s3:DeleteObject``;
AbortMultipartUpload and ListParts have actions of their own. Requests are path-style
(``/bucket/key``), as the SDKs send them to an endpoint given by address.
"""

from __future__ import annotations

import re
from urllib.parse import parse_qs, unquote, urlsplit

from spotproof.policy.aws_iam import Request

SECURE = {"aws:SecureTransport": "true"}
"""Every real request goes over TLS; the proxy in front of the emulator is plain HTTP."""


class UnmappedRequest(ValueError):
    """A request this table does not know: add it, with its source, before trusting a run."""


def requests_of(method: str, target: str, body: str, *, bucket_as: str) -> list[Request]:
    """The IAM requests behind one HTTP request; its bucket renamed ``bucket_as`` (the
    emulator's bucket stands for the stack's)."""
    parts = urlsplit(target)
    query = parse_qs(parts.query, keep_blank_values=True)
    _emulated_bucket, _, key = unquote(parts.path).lstrip("/").partition("/")
    bucket_arn = f"arn:aws:s3:::{bucket_as}"

    def on_object(action: str, name: str = key) -> Request:
        return Request(action, f"{bucket_arn}/{name}", SECURE)

    if not key:
        if method in ("GET", "HEAD") and not (set(query) & {"uploads", "versions", "location"}):
            prefix = query.get("prefix", [""])[0]
            return [Request("s3:ListBucket", bucket_arn, {**SECURE, "s3:prefix": prefix})]
        if method == "POST" and "delete" in query:
            keys = re.findall(r"<Key>(.*?)</Key>", body)
            return [on_object("s3:DeleteObject", unquote(k)) for k in keys]
        raise UnmappedRequest(f"{method} {target}")
    if "uploadId" in query:
        if method == "DELETE":
            return [on_object("s3:AbortMultipartUpload")]
        if method == "GET":
            return [on_object("s3:ListMultipartUploadParts")]
        return [on_object("s3:PutObject")]  # UploadPart, CompleteMultipartUpload
    action = {
        "GET": "s3:GetObject",
        "HEAD": "s3:GetObject",
        "PUT": "s3:PutObject",
        "POST": "s3:PutObject",  # CreateMultipartUpload (?uploads)
        "DELETE": "s3:DeleteObject",
    }.get(method)
    if action is None:
        raise UnmappedRequest(f"{method} {target}")
    return [on_object(action)]
