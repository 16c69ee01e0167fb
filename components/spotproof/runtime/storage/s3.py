"""S3: checkpoint parts through botocore's synchronous client, one request per thread.

s3fs (used for everything else: listing, deleting, the create-only manifest) runs every
request on one asyncio loop thread and joins response chunks into ``bytes``. On a
2-vCPU machine that thread is the bottleneck: moving 512 MiB from the S3 emulator took
5.3 s with ``cat_file`` and 0.4 s with four botocore threads (``benchmarks/checkpoint_io.py``
keeps both in its runs). botocore is what s3fs itself is built on (through aiobotocore),
so this adds no dependency, and it reads the same environment for endpoint, region and
credentials (``AWS_ENDPOINT_URL``, IRSA, EKS Pod Identity's container credentials).

Each part carries ``x-amz-checksum-crc32c``: S3 "validates it with the provided value
before storing the object"
(https://docs.aws.amazon.com/AmazonS3/latest/userguide/checking-object-integrity.html), so
a part damaged on the way is refused (HTTP 400 ``BadDigest``) and retried, never stored.
moto does not validate it (``moto/s3/responses.py``: "TODO: AWS computes the provided
value and verifies it's the same"); the tests say so, and loading verifies every part
regardless.
"""

from __future__ import annotations

import threading
from typing import Any

from spotproof.runtime.checkpointer.integrity import header_value
from spotproof.runtime.storage import deadlines
from spotproof.runtime.storage.contract import confined
from spotproof.runtime.storage.objects import FsspecStore, past_end_reads_nothing

_READ_CHUNK = 1 << 20

IAM_ACTIONS = ("s3:ListBucket", "s3:GetObject", "s3:PutObject", "s3:DeleteObject")
"""Every IAM action a store at ``s3://BUCKET/PREFIX`` needs, and the only ones: listings
(ListObjectsV2, never HeadBucket) always carry a prefix under ``PREFIX/``; parts and
manifests are single PUTs (no multipart upload); pruning deletes under ``PREFIX/``.
``tests/test_s3_permissions.py`` holds this to every request a real trainer run sends."""


def iam_requests(
    bucket: str, prefix: str, partition: str = "aws"
) -> list[tuple[str, str, dict[str, str]]]:
    """The calls of a store at ``s3://bucket/prefix`` as IAM sees them, one of each kind:
    (action, resource ARN, condition keys). A policy that allows these allows the store."""
    bucket_arn = f"arn:{partition}:s3:::{bucket}"
    under = f"{prefix}/" if prefix else ""
    secure = {"aws:SecureTransport": "true"}
    return [
        ("s3:ListBucket", bucket_arn, {**secure, "s3:prefix": under}),
        *((action, f"{bucket_arn}/{under}key", secure) for action in IAM_ACTIONS[1:]),
    ]


class S3Store(FsspecStore):
    def __init__(self, url: str, fs: Any, root: str, connections: int = 32) -> None:
        super().__init__(url, fs, root)
        self.bucket, _, self.prefix = root.partition("/")
        self._connections = connections
        self._client: Any = None
        self._lock = threading.Lock()

    def _s3(self) -> Any:
        """One client for all threads (botocore clients are thread-safe), made on first use."""
        with self._lock:
            if self._client is None:
                import botocore.config  # noqa: PLC0415
                import botocore.session  # noqa: PLC0415

                config = botocore.config.Config(
                    max_pool_connections=self._connections, **deadlines.botocore_config()
                )
                self._client = botocore.session.get_session().create_client(
                    "s3", config=config, **self._settings()
                )
            return self._client

    def _settings(self) -> dict[str, Any]:
        """What the s3fs filesystem was given beyond the environment (endpoint, region,
        keys), so both clients reach the same bucket the same way."""
        given = getattr(self.fs, "client_kwargs", None) or {}
        settings = {k: v for k, v in given.items() if k in ("endpoint_url", "region_name")}
        if getattr(self.fs, "key", None):
            settings["aws_access_key_id"] = self.fs.key
            settings["aws_secret_access_key"] = self.fs.secret
            settings["aws_session_token"] = getattr(self.fs, "token", None)
        return settings

    def _key(self, key: str) -> str:
        key = confined(key)
        return f"{self.prefix}/{key}" if self.prefix else key

    def exists(self, key: str) -> bool:
        """A listing of the key as a prefix, not a HEAD: for a missing object S3 answers a
        HEAD with 403, not 404, unless the caller may ``s3:ListBucket`` (S3 API reference,
        HeadObject), and a grant conditioned on ``s3:prefix`` does not cover a HEAD, which
        carries no prefix. The listing is what the condition admits."""
        full = self._key(key)
        with self.calling(f"checking {key}"):
            answer = self._s3().list_objects_v2(Bucket=self.bucket, Prefix=full, MaxKeys=1)
        return any(entry["Key"] == full for entry in answer.get("Contents", []))

    def check_reachable(self, bucket: str) -> None:
        """One listing *within the store's prefix*: an identity granted ``s3:ListBucket``
        only with an ``s3:prefix`` condition (the trainer's, the batch workers') is refused
        a listing of the bucket's root, so a root listing would fail the start of every
        pod on a real account (moto does not evaluate IAM). A missing bucket answers
        ``NoSuchBucket`` whatever the prefix.

        Both clients bind the endpoint and credentials here, from the environment as it is
        when the store is opened (s3fs would otherwise resolve them at its first call)."""
        with self.calling("reaching the bucket"):
            self.fs.connect()
            client = self._s3()
            try:
                client.list_objects_v2(
                    Bucket=bucket, Prefix=f"{self.prefix}/" if self.prefix else "", MaxKeys=1
                )
            except client.exceptions.NoSuchBucket:
                raise FileNotFoundError(bucket) from None

    def put(self, key: str, data: bytes | memoryview, *, crc32c: str | None = None) -> None:
        checksum = {"ChecksumCRC32C": header_value(crc32c)} if crc32c else {}
        with self.calling(f"writing {key}"):
            # botocore takes bytes, bytearray or a file; one copy of a part is cheaper than
            # the small reads a file-like wrapper would be sent in.
            self._s3().put_object(
                Bucket=self.bucket, Key=self._key(key), Body=bytes(data), **checksum
            )

    def read_into(self, key: str, buffer: memoryview, offset: int = 0) -> int:
        if not len(buffer):
            return 0
        last = offset + len(buffer) - 1
        with self.calling(f"reading {key}"), past_end_reads_nothing():
            client = self._s3()
            try:
                response = client.get_object(
                    Bucket=self.bucket, Key=self._key(key), Range=f"bytes={offset}-{last}"
                )
            except client.exceptions.NoSuchKey:
                raise FileNotFoundError(key) from None
            body, filled = response["Body"], 0
            while filled < len(buffer):
                # urllib3 reads each call into a temporary bytes before copying it in:
                # keep those small, so no large allocation is made and touched per part.
                count = body.readinto(buffer[filled : filled + _READ_CHUNK])
                if not count:
                    break
                filled += count
            body.close()
            return filled
        return 0
