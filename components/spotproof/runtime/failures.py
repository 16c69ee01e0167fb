"""What went wrong with a storage call, decided by the exception's type, never its text.

The checkpoint protocol acts on one distinction above all: "the object already exists"
(another writer committed this step first) versus everything else (retry, then fail).
Deciding that by searching the message for ``412`` or ``403`` is wrong: the manifest of
step 412 is ``manifests/000000000412.json``, and a connection error names its URL. So
each SDK's exception is read by type and status code, the way the SDK documents them:

- fsspec backends translate some errors into builtins: ``FileExistsError`` for a refused
  create-only write (s3fs ``PreconditionFailed``, gcsfs HTTP 412, adlfs
  ``ResourceExistsError``), ``FileNotFoundError``, ``PermissionError`` (s3fs 403);
- botocore: ``ClientError`` carries ``Error.Code`` and the HTTP status; connection
  problems are ``EndpointConnectionError``, ``ConnectTimeoutError`` and friends;
- gcsfs: ``HttpError.code``; a 403 is raised as a plain ``OSError("Forbidden: ...")``
  (``gcsfs/retry.py``, ``validate_response``), the one case read from its fixed prefix;
- google-cloud-storage (GCS part uploads): ``google.api_core.exceptions`` carry the HTTP
  status as ``code``; its upload layer raises ``InvalidResponse`` with the response, and
  requests' ``ConnectionError``/``Timeout`` when no answer came;
- azure-core: ``ResourceExistsError``, ``ResourceNotFoundError``,
  ``ClientAuthenticationError``, ``ServiceRequestError`` (the request never got an answer)
  and ``HttpResponseError.status_code``;
- aiohttp and the OS: connection resets, refusals and timeouts.

SDK modules are looked up in ``sys.modules`` only: an exception of a module that was never
imported cannot be raised, and the runtime must not import every cloud's SDK.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from enum import StrEnum
from typing import Any


class Failure(StrEnum):
    EXISTS = "already exists"
    NOT_FOUND = "bucket or path does not exist"
    DENIED = "no usable credentials or permission"
    UNREACHABLE = "endpoint unreachable"
    SERVER = "the store answered with a server error"
    PAST_END = "the requested range starts past the end of the object"
    OTHER = "failed"


_S3_EXISTS = {"PreconditionFailed", "ConditionalRequestConflict"}
_S3_DENIED = {
    "AccessDenied",
    "InvalidAccessKeyId",
    "SignatureDoesNotMatch",
    "ExpiredToken",
    "InvalidToken",
    "AllAccessDisabled",
}
_S3_NOT_FOUND = {"NoSuchBucket", "NoSuchKey", "404"}
_SQS_NOT_FOUND = {"AWS.SimpleQueueService.NonExistentQueue", "QueueDoesNotExist"}
"""SQS's error code for a missing queue: the first in its query protocol, the second in
its JSON protocol (botocore's sqs service model, ``QueueDoesNotExist``'s ``error.code``)."""
_S3_PAST_END = {"InvalidRange"}


def _chain(error: BaseException) -> Iterator[BaseException]:
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


def _by_status(status: int | None) -> Failure | None:
    if status is None:
        return None
    if status == 412:
        return Failure.EXISTS
    if status == 416:
        return Failure.PAST_END
    if status in (401, 403):
        return Failure.DENIED
    if status == 404:
        return Failure.NOT_FOUND
    if status >= 500 or status in (408, 429):
        return Failure.SERVER
    return None


def _module(name: str) -> Any:
    return sys.modules.get(name)


def _botocore(error: BaseException) -> Failure | None:
    exceptions = _module("botocore.exceptions")
    if exceptions is None:
        return None
    if isinstance(error, exceptions.ClientError):
        details = error.response.get("Error", {})
        code = str(details.get("Code", ""))
        status = error.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        if code in _S3_EXISTS:
            return Failure.EXISTS
        if code in _S3_DENIED:
            return Failure.DENIED
        if code in _S3_NOT_FOUND or code in _SQS_NOT_FOUND:
            return Failure.NOT_FOUND
        if code in _S3_PAST_END:
            return Failure.PAST_END
        return _by_status(status if isinstance(status, int) else None) or Failure.OTHER
    if isinstance(error, exceptions.NoCredentialsError | exceptions.PartialCredentialsError):
        return Failure.DENIED
    if isinstance(
        error,
        exceptions.EndpointConnectionError
        | exceptions.ConnectTimeoutError
        | exceptions.ReadTimeoutError
        | exceptions.ConnectionClosedError,
    ):
        return Failure.UNREACHABLE
    return None


def _gcsfs(error: BaseException) -> Failure | None:
    retry = _module("gcsfs.retry")
    if retry is not None and isinstance(error, retry.HttpError):
        return _by_status(getattr(error, "code", None)) or Failure.OTHER
    auth = _module("google.auth.exceptions")
    if auth is not None and isinstance(error, auth.DefaultCredentialsError | auth.RefreshError):
        return Failure.DENIED
    requests = _module("requests.exceptions")
    if requests is not None and isinstance(error, requests.ProxyError):
        return Failure.SERVER  # gcsfs's translation of an HTTP 502
    if type(error) is OSError and str(error).startswith("Forbidden: "):
        return Failure.DENIED
    return None


def _google_cloud(error: BaseException) -> Failure | None:
    api = _module("google.api_core.exceptions")
    if api is not None and isinstance(error, api.GoogleAPICallError):
        code = getattr(error, "code", None)
        return _by_status(code if isinstance(code, int) else None) or Failure.OTHER
    for name in ("google.cloud.storage.exceptions", "google.resumable_media.common"):
        invalid = getattr(_module(name), "InvalidResponse", None)
        if invalid is not None and isinstance(error, invalid):
            status = getattr(getattr(error, "response", None), "status_code", None)
            return _by_status(status) or Failure.OTHER
    requests = _module("requests.exceptions")
    if requests is not None and isinstance(error, requests.ConnectionError | requests.Timeout):
        return Failure.UNREACHABLE
    return None


def _azure(error: BaseException) -> Failure | None:
    exceptions = _module("azure.core.exceptions")
    if exceptions is None:
        return None
    if isinstance(error, exceptions.ResourceExistsError):
        return Failure.EXISTS
    if isinstance(error, exceptions.ResourceNotFoundError):
        return Failure.NOT_FOUND
    if isinstance(error, exceptions.ClientAuthenticationError):
        return Failure.DENIED
    if isinstance(error, exceptions.ServiceRequestError | exceptions.ServiceResponseError):
        return Failure.UNREACHABLE
    if isinstance(error, exceptions.HttpResponseError):
        return _by_status(getattr(error, "status_code", None)) or Failure.OTHER
    identity = _module("azure.identity")
    if identity is not None and isinstance(error, identity.CredentialUnavailableError):
        return Failure.DENIED
    return None


def _builtin(error: BaseException) -> Failure | None:
    if isinstance(error, FileExistsError):
        return Failure.EXISTS
    if isinstance(error, FileNotFoundError):
        return Failure.NOT_FOUND
    if isinstance(error, PermissionError):
        return Failure.DENIED
    if isinstance(error, ConnectionError | TimeoutError):
        return Failure.UNREACHABLE
    aiohttp = _module("aiohttp")
    if aiohttp is not None and isinstance(error, aiohttp.ClientConnectionError):
        return Failure.UNREACHABLE
    return None


def classify(error: BaseException) -> Failure:
    """The kind of failure ``error`` (or the error it was raised from) stands for.

    The outermost verdict wins: an fsspec backend's ``FileExistsError`` raised from a
    botocore ``ClientError`` is judged as the backend translated it.
    """
    for link in _chain(error):
        for judge in (_builtin, _botocore, _gcsfs, _google_cloud, _azure):
            verdict = judge(link)
            if verdict is not None:
                return verdict
    return Failure.OTHER
