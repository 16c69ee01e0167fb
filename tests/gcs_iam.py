"""What IAM authorizes for each Cloud Storage JSON API request a proxy saw: the permission,
the ``resource.name`` a condition is evaluated against and, for a listing, its prefix (the
``storage.googleapis.com/objectListPrefix`` API attribute), so a real run's traffic can be
evaluated against a rendered grant.

The mapping follows each method's "Required permissions" in the JSON API reference
(https://cloud.google.com/storage/docs/json_api/v1/objects, .../buckets/get): ``objects.list``
needs ``storage.objects.list`` on the bucket, ``objects.get`` (metadata or ``alt=media``
download) ``storage.objects.get``, ``objects.insert`` ``storage.objects.create`` on the new
object (named in the query or, for a multipart upload, in the body's metadata part),
``objects.delete`` ``storage.objects.delete``, ``buckets.get`` ``storage.buckets.get``; a
batch request is its parts. The resource name of an object is
``projects/_/buckets/BUCKET/objects/NAME``, of a bucket ``projects/_/buckets/BUCKET``
(https://cloud.google.com/iam/docs/conditions-resource-attributes#resource-name).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from urllib.parse import parse_qs, unquote, urlsplit


@dataclass(frozen=True)
class GcsRequest:
    permission: str
    resource_name: str
    list_prefix: str | None = None
    """The listing's ``prefix`` ("" when it names none); None for any other call."""


class UnmappedRequest(ValueError):
    """A request this table does not know: add it, with its source, before trusting a run."""


_OBJECT = re.compile(r"^(?:/download)?/storage/v1/b/([^/]+)/o/([^/]+)$")
_OBJECTS = re.compile(r"^(?:/upload)?/storage/v1/b/([^/]+)/o$")
_BUCKET = re.compile(r"^/storage/v1/b/([^/]+)$")
_BATCH_PART = re.compile(r"^(GET|DELETE|POST|PATCH) (/storage/v1/\S+)", re.MULTILINE)


def requests_of(method: str, target: str, body: str, *, bucket_as: str) -> list[GcsRequest]:
    """The IAM requests behind one HTTP request; its bucket renamed ``bucket_as`` (the
    emulator's bucket stands for the stack's)."""
    parts = urlsplit(target)
    query = parse_qs(parts.query, keep_blank_values=True)
    bucket = f"projects/_/buckets/{bucket_as}"
    if parts.path == "/batch/storage/v1":
        return [
            request
            for part_method, part_target in _BATCH_PART.findall(body)
            for request in requests_of(part_method, part_target, "", bucket_as=bucket_as)
        ]
    if match := _OBJECT.match(parts.path):
        name = f"{bucket}/objects/{unquote(match[2])}"
        permission = {"GET": "storage.objects.get", "DELETE": "storage.objects.delete"}
        if method in permission:
            return [GcsRequest(permission[method], name)]
    if match := _OBJECTS.match(parts.path):
        if method == "GET":
            prefix = unquote(query.get("prefix", [""])[0])
            return [GcsRequest("storage.objects.list", bucket, prefix)]
        if method == "POST" and parts.path.startswith("/upload/"):
            return [GcsRequest("storage.objects.create", f"{bucket}/objects/{_name(query, body)}")]
    if method == "PUT" and parts.path.startswith("/upload/") and "upload_id" in query:
        return []  # the rest of a resumable upload, authorized when it was started
    if _BUCKET.match(parts.path) and method == "GET":
        return [GcsRequest("storage.buckets.get", bucket)]
    raise UnmappedRequest(f"{method} {target}")


def _name(query: dict[str, list[str]], body: str) -> str:
    if "name" in query:
        return unquote(query["name"][0])
    metadata = re.search(r'\{"name": ?"[^"]*"[^}]*\}', body)
    if metadata is None:
        raise UnmappedRequest(f"an upload that names no object: {body[:200]!r}")
    return str(json.loads(metadata[0])["name"])
