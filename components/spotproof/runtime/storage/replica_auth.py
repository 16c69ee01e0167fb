"""Who may talk to a replica server: the gang's own ranks, each request signed with a
secret only their pods hold.

A replica server (``runtime.storage.replica_server``) holds copies of its peers' newest
checkpoints, and a restart may resume from them: whoever can write there chooses the
weights a gang resumes with, whoever can delete there takes a node's loss back to the
bucket, and whoever can read there has the weights. So every request carries an
HMAC-SHA256 under a key derived from a per-run secret that only the gang's pods mount
(``REPLICA_SECRET_FILE``: the path of a file, a Kubernetes Secret volume; never a value in
the environment, where ``kubectl describe`` and crash reports show it). The server checks
it, in constant time, before it reads a byte of the body, and refuses everything else.

Why a signature per request, and not
------------------------------------
- **a bearer token**: it would travel in every request, so whoever sees one request once
  (a packet capture on a node, a debugging proxy, a log of headers) could send anything,
  for good. A signature never carries the secret, and covers one request only: the
  server's address and port, the method and path, the length, range, checksum and
  create-only headers, a timestamp and a random nonce. The server takes a timestamp
  within :data:`CLOCK_SKEW_SECONDS` of its own clock (cloud nodes keep theirs by NTP to
  well under a second) and each nonce once (:class:`Replays`), so a request seen on the
  way cannot be sent again, to this server or to another.
- **mutual TLS**: it would also hide the bytes from a reader on the path and protect the
  bodies, but needs a certificate authority per run, certificates in every pod and their
  rotation, and costs the ``sendfile`` straight from the node's memory that makes a
  replica restore fast.

Every answer to a signed request is signed too (:meth:`ReplicaKey.sign_answer`: its
status, its length and the request's nonce), so a client never believes whatever else
answers at a holder's address: a pod given a lost holder's IP, say.

What it does not do: bodies are neither signed nor encrypted, as the gang's own gloo and
NCCL traffic is not. Whoever can alter packets on the pod network (not merely reach the
port) could alter a body whose CRC32C still matches; against that, a CNI that encrypts pod
traffic (WireGuard, IPsec) is the remedy, not this module.
"""

from __future__ import annotations

import collections
import hashlib
import hmac
import ipaddress
import os
import re
import secrets
import stat
import threading
import time
from collections.abc import Callable

SECRET_BYTES = (32, 4096)
"""The shortest and longest secret taken: 256 bits (``openssl rand -hex 32`` writes 64
characters), and more than any secret anyone writes by hand."""
CLOCK_SKEW_SECONDS = 30
"""How far a request's timestamp may be from the server's clock."""
MAX_NONCES = 100_000
"""Nonces remembered at once: a gang sends a few hundred requests a second to one holder
at most (parts of 4 MiB or more), remembered for twice the skew; past this the server
answers 503 rather than forget one it may see again."""
TIME, NONCE, SIGNATURE = "X-Replica-Time", "X-Replica-Nonce", "X-Replica-Signature"
SIGNED = ("Content-Length", "Range", "X-Crc32c", "If-None-Match")
"""The headers a signature covers besides its own: whatever decides what a request does."""
_STAMP = re.compile(r"[0-9]{1,12}")
_NONCE = re.compile(r"[0-9a-f]{32}")
_SIGNATURE = re.compile(r"[0-9a-f]{64}")

Header = Callable[[str], "str | None"]
"""A request's or an answer's header by name (``headers.get``)."""


def authority(host: str, port: int) -> str:
    """``host:port`` as both ends sign it: an IP address in its one canonical spelling."""
    try:
        address = ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return f"{host.lower()}:{port}"
    return f"[{address.compressed}]:{port}" if address.version == 6 else f"{address}:{port}"


class ReplicaKey:
    """The key a gang's ranks sign and check with, derived from their shared secret. Its
    ``repr`` and every message about it say nothing of the secret."""

    __slots__ = ("_key",)

    def __init__(self, secret: bytes) -> None:
        low, high = SECRET_BYTES
        if not low <= len(secret) <= high:
            raise ValueError(f"holds {len(secret)} bytes")
        self._key = hmac.new(secret, b"spotproof replica key v1", hashlib.sha256).digest()

    @classmethod
    def from_file(cls, path: str) -> ReplicaKey:
        """The key from the secret in ``path`` (surrounding whitespace, such as the newline
        an editor adds, left out); ValueError says in a few words what is wrong with the
        file, never what it holds."""
        try:
            # O_NONBLOCK: a FIFO fails the regular-file check instead of blocking the open.
            descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        except FileNotFoundError:
            raise ValueError("no such file") from None
        except PermissionError:
            raise ValueError("not readable by this process") from None
        except OSError as error:
            raise ValueError(error.strerror or type(error).__name__) from None
        try:
            if not stat.S_ISREG(os.fstat(descriptor).st_mode):
                raise ValueError("not a regular file")
            with os.fdopen(descriptor, "rb", closefd=False) as file:
                held = file.read(SECRET_BYTES[1] + 64)
        finally:
            os.close(descriptor)
        return cls(held.strip())

    def __repr__(self) -> str:
        return "ReplicaKey(<secret>)"

    def fingerprint(self) -> str:
        """A digest the ranks compare to learn that they share the secret, from which
        nothing of it can be recovered."""
        return self._mac("fingerprint v1")[:16]

    def _mac(self, *fields: str) -> str:
        return hmac.new(self._key, "\n".join(fields).encode(), hashlib.sha256).hexdigest()

    def _request_mac(self, where: str, method: str, target: str, header: Header) -> str:
        signed = (f"{name.lower()}:{header(name) or ''}" for name in SIGNED)
        stamp, nonce = header(TIME) or "", header(NONCE) or ""
        return self._mac("request v1", where, method, target, stamp, nonce, *signed)

    def sign(self, where: str, method: str, target: str, headers: dict[str, str]) -> str:
        """Add the signature of a request for ``target`` at ``where`` (:func:`authority`)
        to ``headers``, which must hold every header of :data:`SIGNED` it sends; returns
        its nonce, which the answer's signature names."""
        nonce = secrets.token_hex(16)
        headers[TIME], headers[NONCE] = str(int(time.time())), nonce
        headers[SIGNATURE] = self._request_mac(where, method, target, headers.get)
        return nonce

    def refusal(self, where: str, method: str, target: str, header: Header) -> str | None:
        """Why a request at ``where`` is refused, in a few words; None when it is signed
        with this key, recently. Replays are :class:`Replays`' to refuse."""
        stamp, nonce, signature = header(TIME), header(NONCE), header(SIGNATURE)
        if stamp is None or nonce is None or signature is None:
            return "not signed"
        if not (
            _STAMP.fullmatch(stamp) and _NONCE.fullmatch(nonce) and _SIGNATURE.fullmatch(signature)
        ):
            return "not signed"
        expected = self._request_mac(where, method, target, header)
        if not hmac.compare_digest(expected.encode(), signature.encode()):
            return "signature does not verify"
        if abs(time.time() - int(stamp)) > CLOCK_SKEW_SECONDS:
            return f"signed more than {CLOCK_SKEW_SECONDS} s from this server's clock"
        return None

    def sign_answer(self, nonce: str, status: int, length: str) -> str:
        """The signature of an answer with ``status`` and Content-Length ``length`` to the
        request whose nonce was ``nonce``."""
        return self._mac("answer v1", nonce, str(status), length)

    def answer_verifies(self, nonce: str, status: int, length: str, signature: str | None) -> bool:
        if signature is None or not _SIGNATURE.fullmatch(signature):
            return False
        expected = self.sign_answer(nonce, status, length)
        return hmac.compare_digest(expected.encode(), signature.encode())


class Replays:
    """The nonces of requests already taken, each for as long as its timestamp could still
    pass the skew check: a request is taken once."""

    def __init__(self, most: int = MAX_NONCES, seconds: float = 2 * CLOCK_SKEW_SECONDS) -> None:
        self.most, self.seconds = most, seconds
        self._seen: collections.OrderedDict[str, float] = collections.OrderedDict()
        self._lock = threading.Lock()

    def first(self, nonce: str) -> bool | None:
        """True the first time ``nonce`` is seen, False again; None when so many are
        remembered that it cannot be (the request is then refused, not forgotten)."""
        now = time.monotonic()
        with self._lock:
            while self._seen and next(iter(self._seen.values())) <= now:
                self._seen.popitem(last=False)
            if nonce in self._seen:
                return False
            if len(self._seen) >= self.most:
                return None
            self._seen[nonce] = now + self.seconds
            return True
