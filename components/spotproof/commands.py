"""What every ``spotproof`` command shares with the CI systems that run it.

Exit statuses, which CI relies on: ``EXIT_OK`` when every check passes, ``EXIT_FAILED``
when one fails (a policy, the scheduling check, different digests), ``EXIT_BAD_INPUT``
on bad input, always reported as one line on stderr and never a traceback.
"""

EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT = 0, 1, 2

REPORT_FORMATS = ("text", "json", "markdown", "github")
"""The forms ``plan`` and ``check`` report in: text (terminal), json (the report on stdout),
markdown (a PR comment or job summary), github (annotations on the lines at fault)."""
