"""The trainer's exit codes: a contract between the trainer and the Job that runs it.

The smoke-test Job's ``podFailurePolicy`` is written against these values, so a
preemption retries for free, a configuration mistake fails the Job at once, and only
genuine crashes spend ``backoffLimit``.
"""

COMPLETED = 0
"""Training reached TOTAL_STEPS; the Job is complete."""
STORAGE_UNAVAILABLE = 1
"""The checkpoint store could not be reached: a retry on another node may succeed."""
BAD_CONFIG = 2
"""The environment was unusable (missing or malformed variable): retrying cannot help."""
PEER_LOST = 3
"""Another rank of the gang died without warning and this one stopped with it: the gang
restarts from its last checkpoint; nothing is wrong with this rank."""
PREEMPTED = 143
"""SIGTERM arrived and the final checkpoint committed; resume on a new node.
128 + SIGTERM, what a shell reports for a process terminated by SIGTERM."""
