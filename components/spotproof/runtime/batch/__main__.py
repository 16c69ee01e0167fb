"""``python -m spotproof.runtime.batch``: a batch worker serving the reference work.

The default command of a stack's batch workers (``spotproof:batch``) and the worker
``spotproof smoke --batch`` rehearses: :func:`~spotproof.runtime.batch.entry.serve` with the
rehearsal's reference work (``spotproof.smoke.batch_work``), whose results are checkable
against a plain loop. A worker of your own calls ``serve`` with its own work.
"""

from __future__ import annotations

import sys

from spotproof.runtime.batch.entry import serve
from spotproof.smoke.batch_work import reference_work

if __name__ == "__main__":
    sys.exit(serve(reference_work))
