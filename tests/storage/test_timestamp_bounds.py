"""message.timestamp.before/after.max.ms on a partition log (KIP-937, Kafka 4's defaults).

A record stamped far in the future (a producer's clock in nanoseconds)
used to freeze its partition: segment.ms counts from the first batch of a
segment, and retention.ms from its newest record, so a segment starting in
the year 57000 never rolled by time nor expired, and everything appended
after it stayed there. Such a record is now refused with INVALID_TIMESTAMP.
"""
from __future__ import annotations

import time

import pytest

from logstore.config import LogConfig
from logstore.formats.protocol import TimestampValidationError
from logstore.log import Log

HOUR = 3_600_000


def _now() -> int:
    return int(time.time() * 1000)


def test_the_record_that_froze_time_based_roll_and_retention_is_refused(tmp_path):
    config = LogConfig.from_properties({"segment.ms": 1000, "retention.ms": 60_000})
    assert config.message_timestamp_after_max_ms == HOUR   # Kafka 4's default
    with Log.open(str(tmp_path / "t-0"), config) as log:
        start = _now() - HOUR
        log.append_records([b"a"], timestamps=start)
        with pytest.raises(TimestampValidationError) as refused:
            log.append_records([b"nanoseconds"], timestamps=_now() * 1_000_000)
        assert refused.value.code == 32 and [e.batch_index for e in refused.value.record_errors] == [0]
        assert log.log_end_offset == 1
        # Time goes on for the partition: a batch stamped past segment.ms rolls, retention expires the old.
        log.append_records([b"b"], timestamps=start + 2000)
        log.append_records([b"c"], timestamps=start + 4000)
        assert [s.base_offset for s in log.segments] == [0, 1, 2]
        assert log.delete_old_segments(_now()) == 2
        assert log.log_start_offset == 2


def test_the_bounds_are_the_topics_and_a_wider_one_lets_the_record_in(tmp_path):
    config = LogConfig.from_properties({"message.timestamp.after.max.ms": 10 * HOUR,
                                        "log.message.timestamp.before.max.ms": HOUR})
    with Log.open(str(tmp_path / "t-0"), config) as log:
        log.append_records([b"soon"], timestamps=_now() + 5 * HOUR)
        with pytest.raises(TimestampValidationError):
            log.append_records([b"late"], timestamps=_now() - 2 * HOUR)
        # The broker's own clock is never judged (LogAppendTime).
        log.config = config.with_overrides({"message.timestamp.type": "LogAppendTime"})
        log.append_records([b"stamped"], timestamps=_now() - 2 * HOUR)
        assert log.log_end_offset == 2
