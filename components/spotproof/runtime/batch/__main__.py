"""``python -m spotproof.runtime.batch MODULE:FUNCTION``: a batch worker serving that work.

``FUNCTION`` is a work factory (:data:`~spotproof.runtime.batch.entry.Work`): given the
worker's environment, it returns the function that computes an item's result. A stack's
default command (``spotproof:batch.command``) names the rehearsal's reference work,
``spotproof.smoke.batch_work:reference_work``, whose results are checkable against a plain
loop; a worker of your own names its own. A missing or wrong reference exits 2
(``BAD_CONFIG``) with one line, like any other bad configuration.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from spotproof.runtime import exit_codes
from spotproof.runtime.batch.entry import load_work, serve
from spotproof.runtime.settings import ConfigError

USAGE = "usage: python -m spotproof.runtime.batch package.module:function"


def main(argv: Sequence[str]) -> int:
    if len(argv) != 1:
        print(f"batch worker: {USAGE}", file=sys.stderr)
        return exit_codes.BAD_CONFIG
    try:
        work = load_work(argv[0])
    except ConfigError as error:
        print(f"batch worker: {error}", file=sys.stderr)
        return exit_codes.BAD_CONFIG
    return serve(work)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
