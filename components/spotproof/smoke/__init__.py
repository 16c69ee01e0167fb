"""The smoke test: a deterministic trainer, and a harness that preempts it on purpose."""
