"""The tags (AWS, Azure) and labels (Google Cloud) spotproof puts on the cloud resources
it creates, so that what one stack created can be found, and billed, by stack.

Every key is ``spotproof-`` and lowercase words joined by ``-``, which the key rules of
AWS tags, Azure tags and Google Cloud labels all admit. Values are passed on as they
are: a stack's or pool's name is its tag's value on every cloud.
"""

from __future__ import annotations


def stack_tags(
    stack: str,
    *,
    env: str | None = None,
    purpose: str | None = None,
    pool: str | None = None,
    pool_class: str | None = None,
) -> dict[str, str]:
    """``spotproof-stack: <stack>`` and, for each of the others given, its own tag: the
    stack's environment (``spotproof-env``), what the resource is for (``spotproof-purpose``:
    ``checkpoints``, ``batch``), the pool it belongs to (``spotproof-pool``) or its pool
    class (``spotproof-pool-class``)."""
    more = {"env": env, "purpose": purpose, "pool": pool, "pool-class": pool_class}
    return {
        "spotproof-stack": stack,
        **{f"spotproof-{key}": value for key, value in more.items() if value is not None},
    }
