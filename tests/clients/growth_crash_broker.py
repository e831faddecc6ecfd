"""`logstore broker` whose disk loses power part-way through growing a topic, then the process dies.

    python growth_crash_broker.py KEY=VALUE ...

The power goes right after the third `partition.metadata` of a topic named `grown*` is synced (the
third partition CreatePartitions makes): what was never synced is dropped from the disk, as a power cut
leaves it, and the process SIGKILLs itself. The `KEY=VALUE` items are the broker's `--override`s. Until
then it is `logstore broker`: same ready line, same exit status.
"""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "storage"))

from fault_fs import FaultFileSystem  # noqa: E402 (found through the path set just above)
from logstore.broker import startup  # noqa: E402

NEW_PARTITION_CUT = 3


def main(argv: list[str]) -> int:
    """Run the broker until SIGTERM or the crash point; its exit status."""
    fs = FaultFileSystem(kill_on_power_loss=True)
    # Partitions 0 and 1 of the topic, made by CreateTopics, count too: the cut is in the growth.
    fs.crash_at(2 + NEW_PARTITION_CUT, "fsync", "*/grown*/partition.metadata.tmp", after=True)
    return startup.run(None, argv, fs=fs)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
