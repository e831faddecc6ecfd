"""The writer that test_crash.py kills with SIGKILL: appends to `crash-0` until it dies.

    python tests/storage/crash_child.py DIR SEED [--max-seconds S]

Opens the store in DIR with `CONFIG` (small segments, so they roll often;
a dense offset index), creating topic `crash` if it is not there, and
appends batches of 1-50 records for ever. Record n (its offset) is
`record_for(n)`: a key, a value naming n, and timestamp `BASE_TIMESTAMP + n`,
so the parent can check every byte of what survives without being told
what was written. The child counts n itself from the log end offset it
opened with; it never reads offsets back from the log, so a log that gives
out wrong offsets shows up as values that do not match their offsets.

Some appends are durable, some are followed by an explicit flush, some by a
checkpoint; some buffers hold several batches, some are compressed. Lines on
stdout (flushed one by one):

    start <log end offset> <log start offset>   once, after the open
    <n>                                         every offset below n is durable

An acknowledgement is written only after the append or flush that made it
durable returned. The child exits by itself after --max-seconds or when its
stdout is closed, so a dead test run leaves no writer behind.
"""
from __future__ import annotations

import argparse
import random
import sys
import time
from collections.abc import Iterator

import logstore
import logstore.formats.kafka as K
from killing import print_acks

TOPIC = "crash"
# retention.ms=-1: the timestamps are synthetic and must never age a segment out.
CONFIG = {
    "segment.bytes": 64 * 1024,
    "index.interval.bytes": 512,
    "segment.index.bytes": 4096,
    "retention.ms": -1,
}
BASE_TIMESTAMP = 1_600_000_000_000
CODECS = (K.GZIP, K.SNAPPY, K.LZ4, K.ZSTD)


def record_for(n: int) -> tuple[bytes | None, bytes, int]:
    """(key, value, timestamp) of the record at offset n."""
    key = None if n % 5 == 0 else b"k%d" % (n % 7)
    filler = bytes([n % 251]) * ((n * 2654435761) % 97)
    return key, b"%d:" % n + filler, BASE_TIMESTAMP + n


def records_buffer(first: int, count: int, rng: random.Random) -> bytearray:
    """Records first..first+count-1 as one to three v2 batches, maybe compressed."""
    cuts = sorted(rng.sample(range(1, count), min(count - 1, rng.choice((0, 0, 0, 1, 2)))))
    buf = bytearray()
    for start, stop in zip([0] + cuts, cuts + [count]):
        keys, values, timestamps = zip(*(record_for(first + i) for i in range(start, stop)))
        codec = rng.choice(CODECS) if rng.random() < 0.15 else 0
        buf += K.encode_batch(list(keys), list(values), timestamps=list(timestamps), compression=codec)
    return buf


def _append(store, log, rng: random.Random, deadline: float) -> Iterator[int]:
    """Append from the log end until `deadline`; yields n when every offset below n is durable."""
    n = log.log_end_offset
    while time.monotonic() < deadline:
        count = rng.randint(1, 50)
        durable = rng.random() < 0.3
        log.append(records_buffer(n, count, rng), durable=durable)
        n += count
        if not durable and rng.random() < 0.1:
            log.flush()
            durable = True
        if durable:
            yield n
        if rng.random() < 0.05:
            store.checkpoint()


def main(argv=None) -> int:
    """Append until killed (or until --max-seconds, or until stdout closes)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("directory")
    parser.add_argument("seed", type=int)
    parser.add_argument("--max-seconds", type=float, default=120.0)
    args = parser.parse_args(argv)
    rng = random.Random(args.seed)
    deadline = time.monotonic() + args.max_seconds
    store = logstore.open(args.directory, CONFIG)
    if TOPIC not in store.topics():
        store.create_topic(TOPIC)
    log = store.log(TOPIC, 0)
    return print_acks(store, (log.log_end_offset, log.log_start_offset), _append(store, log, rng, deadline))


if __name__ == "__main__":
    sys.exit(main())
