"""`logstore broker` as a process whose disk fails the writes a test names, while it runs.

    LOGSTORE_TEST_DISK_FAULTS=/path/to/control python faulty_disk_broker.py KEY=VALUE ...

The store writes through a `FaultFileSystem`. While the control file exists,
each of its lines `PATTERN ERRNO` makes every pwrite or write to a file
matching PATTERN (fnmatch on the path) put half its bytes in the file and
then raise OSError(ERRNO), as a disk that gives up part-way does. The test
writes the file before the request it wants to fail, so the fault is in place
for it (no race with the broker). The `KEY=VALUE` items are the broker's
`--override`s; otherwise it is `logstore broker`: same ready line, same exit
status.
"""
from __future__ import annotations

import fnmatch
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "storage"))

from fault_fs import FaultFileSystem  # noqa: E402 (found through the path set just above)
from logstore.broker import startup  # noqa: E402

CONTROL = "LOGSTORE_TEST_DISK_FAULTS"


class ControlledDisk(FaultFileSystem):
    """A `FaultFileSystem` whose write faults come from the control file, read at every write."""

    def __init__(self, control: str):
        super().__init__()
        self._control = control

    def _faults(self) -> list[tuple[str, int]]:
        try:
            text = Path(self._control).read_text()
        except FileNotFoundError:
            return []
        return [(pattern, int(number)) for pattern, number in (line.split() for line in text.splitlines() if line)]

    def _arm(self, fd: int, size: int) -> None:
        path = os.readlink(f"/proc/self/fd/{fd}")
        for pattern, error in self._faults():
            if fnmatch.fnmatchcase(path, pattern):
                self.fail_write(path, error=error, written=size // 2)
                return

    def pwrite(self, fd: int, data, position: int) -> int:
        """FaultFileSystem's pwrite, failing as the control file says."""
        self._arm(fd, len(memoryview(data)))
        return super().pwrite(fd, data, position)

    def write(self, fd: int, data) -> int:
        """FaultFileSystem's write, failing as the control file says."""
        self._arm(fd, len(memoryview(data)))
        return super().write(fd, data)


def main(argv: list[str]) -> int:
    """Run the broker until SIGTERM (or until every log dir is offline); its exit status."""
    return startup.run(None, argv, fs=ControlledDisk(os.environ[CONTROL]))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
