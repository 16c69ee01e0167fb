"""The smoke test: a deterministic trainer, and rehearsals that preempt it on purpose.

Here, the command (``command``) and the workloads that manifests name by module (``train``,
``batch_work``, with ``data_parallel``); below, by concern: ``emulation`` (what a rehearsal
stands in for), ``processes`` (the trainers it starts), ``runs`` (a rehearsal of the
reference trainer per kind), ``user`` (a user's own trainer rehearsed), ``reports`` (what
it records and tells)."""

BATCH_ROWS = 16
"""Rows of every step's batch; each rank of a gang takes ``WORLD_SIZE``-th of them. Here,
free of torch, so that the CLI can check ``--nodes`` against it."""
DEFAULT_STEPS = 240
"""``TOTAL_STEPS`` of a rehearsal not given ``--steps`` nor a stack."""
MAX_NODES = 8
"""The largest gang ``spotproof smoke --nodes`` starts on one machine."""
GANG_SIZES = tuple(n for n in range(1, MAX_NODES + 1) if BATCH_ROWS % n == 0)
"""What ``--nodes`` may be: up to ``MAX_NODES`` ranks that split the trainer's batch
evenly (1, 2, 4 or 8)."""
