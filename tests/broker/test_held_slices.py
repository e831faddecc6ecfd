"""A Fetch answer's file ranges (each on a duplicate fd) are given back on every path that does not send
them: slices dropped before the answer was made, an answer that cannot be encoded, a reply dropped with
its connection before or after its handler finished."""
from __future__ import annotations

import asyncio
import errno
import os

import pytest

from logstore.broker import connection
from logstore.broker.api import fetch
from logstore.broker.protocol import SENDFILE_MIN_BYTES, HeldSlice, PreEncoded, hold
from logstore.segment import FileSlice


@pytest.fixture
def segment_fd(tmp_path):
    path = tmp_path / "00000000000000000000.log"
    path.write_bytes(b"x" * 2 * SENDFILE_MIN_BYTES)
    fd = os.open(path, os.O_RDONLY)
    yield fd
    os.close(fd)


def _is_open(fd: int) -> bool:
    try:
        os.fstat(fd)
    except OSError as exc:
        assert exc.errno == errno.EBADF
        return False
    return True


def _rows(fd: int, count: int, *, bad_index: bool = False) -> list:
    """Read rows of one topic, each with a held slice of the segment (the last with an index no encoder
    takes)."""
    rows = [(i, 0, 10, 10, 0, None, HeldSlice(FileSlice(os.dup(fd), 0, 100))) for i in range(count)]
    if bad_index:
        rows[-1] = ("not an index", *rows[-1][1:])
    return [("topic", rows)]


def _dups(held) -> list[int]:
    return [row[6].fd for _, rows in held for row in rows if isinstance(row[6], HeldSlice)]


def test_an_answer_that_cannot_be_encoded_closes_its_duplicates(segment_fd):
    held = _rows(segment_fd, 3, bad_index=True)
    dups = _dups(held)
    assert len(dups) == 3 and all(map(_is_open, dups))
    with pytest.raises(TypeError):
        fetch._encode(1, 12, fetch.FetchAnswer(held))
    assert not any(map(_is_open, dups))


def test_rows_dropped_before_an_answer_was_made_close_their_duplicates(segment_fd):
    rows = _rows(segment_fd, 3)
    dups = _dups(rows)
    assert len(set(dups)) == 3 and all(map(_is_open, dups))
    del rows   # a Fetch that failed before its answer was made: nothing holds the slices
    assert not any(map(_is_open, dups))


def test_a_small_range_is_copied_and_its_duplicate_closed(segment_fd):
    small = FileSlice(os.dup(segment_fd), 10, SENDFILE_MIN_BYTES - 1)
    fd = small.fd
    assert hold(small) == b"x" * (SENDFILE_MIN_BYTES - 1)
    assert not _is_open(fd)


def test_large_ranges_are_held_until_the_process_holds_its_limit_then_copied(segment_fd, monkeypatch):
    monkeypatch.setattr(HeldSlice, "limit", HeldSlice.held + 2)
    parts = [hold(FileSlice(os.dup(segment_fd), 0, SENDFILE_MIN_BYTES)) for _ in range(3)]
    assert [type(p) for p in parts] == [HeldSlice, HeldSlice, bytes]
    assert parts[2] == b"x" * SENDFILE_MIN_BYTES
    parts[0].close()
    assert isinstance(hold(FileSlice(os.dup(segment_fd), 0, SENDFILE_MIN_BYTES)), HeldSlice)


def test_a_reply_dropped_with_its_connection_closes_its_slices(segment_fd):
    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        finished: asyncio.Future[PreEncoded | None] = loop.create_future()
        finished.set_result(PreEncoded([b"head", HeldSlice(FileSlice(os.dup(segment_fd), 0, 10))]))
        pending: asyncio.Future[PreEncoded | None] = loop.create_future()
        first = finished.result().parts[1].fd
        connection._drop(finished)              # the handler was done: released now
        assert not _is_open(first)
        connection._drop(pending)               # still running: released when it finishes
        late = HeldSlice(FileSlice(os.dup(segment_fd), 0, 10))
        pending.set_result(PreEncoded([late]))
        await asyncio.sleep(0)                  # done callbacks run on the next turn of the loop
        assert late.fd == -1
    asyncio.run(scenario())
