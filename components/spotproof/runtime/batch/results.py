"""Results stored once per item: a create-only object under a key from the item's id.

The key is ``<prefix>/results/<digest of the id>`` (any id is safe as a key, and ids that
differ only in case or punctuation never collide). The first delivery to store a result
wins; a redelivered item whose result exists is acknowledged without recomputing, and a
duplicate computation that finishes second is counted, not written.
"""

from __future__ import annotations

import hashlib

from spotproof.runtime.storage import AlreadyExists, ObjectStore, StorageError


class ResultStore:
    def __init__(self, store: ObjectStore) -> None:
        self.store = store

    @staticmethod
    def key(item_id: str) -> str:
        return f"results/{hashlib.sha256(item_id.encode()).hexdigest()}"

    def exists(self, item_id: str) -> bool:
        return self.store.exists(self.key(item_id))

    def put(self, item_id: str, result: bytes) -> bool:
        """Store ``result`` unless one is there already; whether this call stored it.

        A store may refuse the losing write as a permission error rather than a failed
        precondition: an identity that may create but not delete objects (GCS's
        ``objectCreator``) is denied what would be an overwrite. Refused with the result
        in place, the write lost the race like any duplicate."""
        key = self.key(item_id)
        try:
            self.store.put_if_absent(key, result)
        except AlreadyExists:
            return False
        except StorageError:
            if self.store.exists(key):
                return False
            raise
        return True

    def get(self, item_id: str) -> bytes:
        return self.store.get(self.key(item_id))
