"""`logstore broker` as a process whose disk loses power at a named point, then the process dies.

    python crashing_broker.py POINT KEY=VALUE ...

POINT is `name` or `name:N` (the N-th time), a cleaner swap step of
`fault_fs.NAMED_POINTS` or a step of the transaction coordinator of
`txn_points.TXN_POINTS`, armed on a `FaultFileSystem` that the store writes
through; when the point is reached, what was never synced is dropped from
the disk and the process SIGKILLs itself, as a power cut stops a machine.
The `KEY=VALUE` items are the broker's `--override`s. Until then it is
`logstore broker`: same ready line, same exit status.
"""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "storage"))

from fault_fs import FaultFileSystem  # noqa: E402 (found through the path set just above)
from logstore.broker import startup  # noqa: E402


def main(argv: list[str]) -> int:
    """Run the broker until SIGTERM or the crash point; its exit status."""
    fs = FaultFileSystem(kill_on_power_loss=True)
    fs.crash_at_named(argv[0])
    return startup.run(None, argv[1:], fs=fs)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
