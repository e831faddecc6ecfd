"""The real file system's pwrite: small writes through `pwrite_holding_gil`, large ones through `os.pwrite`,
the same bytes on disk and the same errors either way."""
from __future__ import annotations

import array
import errno
import os

import pytest

from logstore.filesystem import OS, PWRITE_HOLDING_GIL_MAX
from logstore.native.file_map import pwrite_holding_gil


@pytest.fixture
def fd(tmp_path):
    fd = os.open(tmp_path / "f", os.O_CREAT | os.O_RDWR, 0o644)
    yield fd
    os.close(fd)


@pytest.mark.parametrize("size", [0, 1, 150, PWRITE_HOLDING_GIL_MAX, PWRITE_HOLDING_GIL_MAX + 1, 1 << 20])
def test_a_write_lands_at_its_position_whatever_its_size(fd, size):
    data = (bytes(range(251)) * (size // 251 + 1))[:size]
    os.pwrite(fd, b"head", 0)
    assert OS.pwrite(fd, data, 7) == size
    # An empty write leaves the file as it was: the gap is only made by bytes after it.
    assert os.pread(fd, size + 16, 0) == (b"head\0\0\0" + data if size else b"head")


@pytest.mark.parametrize("buffer", [bytes, bytearray, lambda b: memoryview(bytearray(b))[2:]])
def test_any_contiguous_buffer_is_written(fd, buffer):
    data = buffer(b"..payload")
    assert pwrite_holding_gil(fd, data, 3) == len(memoryview(data))
    assert os.pread(fd, 64, 3) == bytes(memoryview(data))


def test_a_buffer_of_other_items_or_strides_meets_what_os_pwrite_does(fd):
    words = memoryview(array.array("i", range(8)))
    assert OS.pwrite(fd, words, 0) == words.nbytes
    assert os.pread(fd, 64, 0) == words.tobytes()
    strided = memoryview(bytearray(b"abcdefgh"))[::2]
    with pytest.raises(BufferError):
        os.pwrite(fd, strided, 100)
    with pytest.raises(BufferError):
        OS.pwrite(fd, strided, 100)


def test_a_failed_write_is_the_oserror_os_pwrite_raises(tmp_path):
    path = tmp_path / "ro"
    path.write_bytes(b"")
    fd = os.open(path, os.O_RDONLY)
    try:
        with pytest.raises(OSError) as native:
            OS.pwrite(fd, b"x", 0)
        with pytest.raises(OSError) as stdlib:
            os.pwrite(fd, b"x", 0)
    finally:
        os.close(fd)
    assert native.value.errno == stdlib.value.errno == errno.EBADF
    with pytest.raises(OSError) as closed:
        pwrite_holding_gil(fd, b"x", 0)
    assert closed.value.errno == errno.EBADF
