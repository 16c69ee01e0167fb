"""GCS: checkpoint parts uploaded with their CRC32C, for the store to check on arrival.

Cloud Storage "calculates its own checksum, and validates the data by comparing both
checksums after the upload completes", refusing the object when they differ
(https://cloud.google.com/storage/docs/data-validation), but only when the upload carries
the checksum. gcsfs's uploads cannot carry one (its metadata accepts a fixed list of
fields, ``SUPPORTED_FIXED_KEY_METADATA``, without ``crc32c``), so parts go through
google-cloud-storage, which gcsfs itself depends on: ``Blob.crc32c`` set before the upload
is sent in the multipart upload's metadata (``"crc32c": "<base64>"``; the tests read it
off the wire). It reads the same environment as gcsfs (Application Default Credentials,
GKE Workload Identity, ``STORAGE_EMULATOR_HOST``). Reads, listings and the create-only
manifest stay on gcsfs. fake-gcs-server stores a part whose CRC32C is wrong, so the
tests show the checksum is sent, and loading verifies every part regardless.
"""

from __future__ import annotations

import os
import threading
from typing import Any

from spotproof.runtime.checkpointer.integrity import header_value
from spotproof.runtime.storage.contract import confined
from spotproof.runtime.storage.objects import FsspecStore


class GcsStore(FsspecStore):
    def __init__(self, url: str, fs: Any, root: str) -> None:
        super().__init__(url, fs, root)
        self.bucket_name, _, self.prefix = root.partition("/")
        self._bucket: Any = None
        self._lock = threading.Lock()

    @classmethod
    def filesystem_options(cls, url: str) -> dict[str, Any]:
        """gcsfs does not read ``STORAGE_EMULATOR_HOST`` (google-cloud-storage does): an
        emulator is named to it, and signed in to anonymously."""
        if os.environ.get("STORAGE_EMULATOR_HOST"):
            return {"token": "anon", "endpoint_url": os.environ["STORAGE_EMULATOR_HOST"]}
        return {}

    def bucket(self) -> Any:
        """One client for all threads, made on first use."""
        with self._lock:
            if self._bucket is None:
                from google.cloud import storage  # noqa: PLC0415

                self._bucket = storage.Client().bucket(self.bucket_name)
            return self._bucket

    def check_reachable(self, bucket: str) -> None:
        """One listing *within the store's prefix*, as every listing of the store: the
        trainer's and the batch workers' grants admit a listing only when its prefix is
        under theirs (``spotproof.gke.identity``), so a listing of the bucket's root would
        fail the start of every pod on a real project (fake-gcs-server evaluates no IAM).
        A missing bucket answers 404 whatever the prefix."""
        from google.api_core import exceptions  # noqa: PLC0415

        with self.calling("reaching the bucket"):
            blobs = self.bucket().client.list_blobs(
                bucket, prefix=f"{self.prefix}/" if self.prefix else None, max_results=1
            )
            try:
                list(blobs)
            except exceptions.NotFound:
                raise FileNotFoundError(bucket) from None

    def put(self, key: str, data: bytes | memoryview, *, crc32c: str | None = None) -> None:
        with self.calling(f"writing {key}"):
            name = confined(key)
            blob = self.bucket().blob(f"{self.prefix}/{name}" if self.prefix else name)
            if crc32c:
                blob.crc32c = header_value(crc32c)
            # checksum=None: the library would compute its own CRC32C over a copy; ours is
            # already in the metadata, which is what the store checks.
            blob.upload_from_string(bytes(data), checksum=None)
