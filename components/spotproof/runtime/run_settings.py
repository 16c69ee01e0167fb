"""Everything ``training()`` reads, each checked: what it was given, the rest from the
environment the Job sets (``runtime.settings`` defines each variable, with its default and
range). A setting that is wrong is a :class:`~spotproof.runtime.settings.ConfigError`, one
line naming it and what is allowed, before anything starts."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from spotproof.runtime import group, launcher, settings
from spotproof.runtime.settings import ConfigError


@dataclass(frozen=True)
class RunSettings:
    """Everything :func:`training` reads, each checked (``runtime.settings``)."""

    url: str
    interval: int
    grace_seconds: float
    """What of the pod's grace this process can use (less under torchrun)."""
    keep: int = settings.KEEP_CHECKPOINTS.default
    part_bytes: int | None = None
    peer_wait_seconds: float = settings.PEER_WAIT_SECONDS.default
    emit_steps: bool = False
    state_digests: bool = False
    identity: Mapping[str, Any] = field(default_factory=dict)
    """What makes two runs one run (``training(identity=...)``), kept in every checkpoint."""

    @classmethod
    def from_env(
        cls,
        env: Mapping[str, str],
        *,
        url: str | None = None,
        interval: int | None = None,
        grace_seconds: float | None = None,
        identity: Mapping[str, Any] | None = None,
    ) -> RunSettings:
        """What :func:`training` was given, the rest from ``env``; :class:`ConfigError`
        names the first setting that is wrong and what is allowed."""
        grace = grace_seconds if grace_seconds is not None else settings.GRACE_SECONDS.read(env)
        if not isinstance(grace, int | float) or not math.isfinite(grace) or grace <= 0:
            raise ConfigError(f"grace_seconds={grace!r}: allowed a number of seconds above 0")
        every = interval if interval is not None else settings.CHECKPOINT_INTERVAL.read(env)
        if isinstance(every, bool) or not isinstance(every, int) or every < 1:
            raise ConfigError(f"interval={every!r}: allowed a whole number >= 1")
        group.gang_from(env)
        group.memory_tier(env)
        settings.SPOTPROOF_LOG.read(env)
        settings.RENDEZVOUS_SECONDS.read(env)
        part_kb = settings.CHECKPOINT_PART_KB.read(env)
        return cls(
            url=url or settings.CHECKPOINT_URL.read(env),
            interval=every,
            # Under torchrun the agent, not the pod, may end the grace first.
            grace_seconds=launcher.worker_grace(float(grace), env),
            keep=settings.KEEP_CHECKPOINTS.read(env),
            part_bytes=part_kb * 1024 if part_kb else None,
            peer_wait_seconds=settings.PEER_WAIT_SECONDS.read(env),
            emit_steps=settings.EMIT_STEPS.read(env),
            state_digests=settings.STATE_DIGESTS.read(env),
            identity=_plain(identity or {}),
        )


def _plain(identity: Mapping[str, Any]) -> dict[str, Any]:
    for key, value in identity.items():
        if not isinstance(value, str | int | float | bool) or value is None:
            raise ConfigError(
                f"identity[{key!r}] = {value!r:.60}: allowed a str, int, float or bool"
            )
    return dict(identity)
