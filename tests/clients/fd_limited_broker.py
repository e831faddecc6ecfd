"""`logstore broker` under a lower open-files limit, set before anything of logstore is imported.

    LOGSTORE_TEST_NOFILE=256 python fd_limited_broker.py KEY=VALUE ...

The `KEY=VALUE` items are the broker's `--override`s; otherwise it is `logstore
broker`: same ready line, same exit status. The limit is set first so the
process starts as it would under `ulimit -n`, sizing what it sizes from it.
"""
from __future__ import annotations

import os
import resource
import sys

LIMIT = "LOGSTORE_TEST_NOFILE"

_, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (int(os.environ[LIMIT]), _hard))

from logstore.broker import startup  # noqa: E402 (imported under the limit just set)

if __name__ == "__main__":
    sys.exit(startup.run(None, sys.argv[1:]))
