"""`send_file` on real sockets and files, on uvloop and asyncio's loop: the bytes in order behind what
the transport still holds, a full socket waited for, a peer that resets, a range longer than its file.

The client is a blocking socket with a 4 KiB receive buffer in a thread, so the server's socket fills
whenever the client stops reading; the server is the loop's own `start_server` transport, as the
broker's connections are.
"""
from __future__ import annotations

import asyncio
import os
import socket
import struct
import threading
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
import uvloop

from logstore.broker.protocol import HeldSlice
from logstore.broker.send_file import send_file, totals
from logstore.segment import FileSlice

LOOPS: dict[str, Callable[[], asyncio.AbstractEventLoop]] = {"uvloop": uvloop.new_event_loop,
                                                              "asyncio": asyncio.new_event_loop}
TIMEOUT = 20.0
MIB = 1 << 20


@pytest.fixture(scope="module")
def segment(tmp_path_factory) -> tuple[Path, bytes]:
    """A 9 MiB file of bytes that differ everywhere (a misplaced piece shows)."""
    data = os.urandom(9 * MIB)
    path = tmp_path_factory.mktemp("send_file") / "00000000000000000000.log"
    path.write_bytes(data)
    return path, data


def _held(path: Path, position: int, size: int) -> HeldSlice:
    return HeldSlice(FileSlice(os.open(path, os.O_RDONLY), position, size))


class _Client:
    """A reading thread on a small receive buffer: reads `first` bytes, then waits for `resume`, then to EOF."""

    def __init__(self, port: int, first: int):
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        self.sock.settimeout(TIMEOUT)
        self.sock.connect(("127.0.0.1", port))
        self.first = first
        self.go = threading.Event()
        self.resume = threading.Event()
        self.received = bytearray()
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        try:
            self.go.wait(TIMEOUT)
            while len(self.received) < self.first:
                self.received += self.sock.recv(min(4096, self.first - len(self.received)))
            self.resume.wait(TIMEOUT)
            while chunk := self.sock.recv(4096):
                self.received += chunk
        except OSError as exc:
            self.error = exc

    def join(self) -> bytes:
        self.thread.join(TIMEOUT)
        assert not self.thread.is_alive() and self.error is None, self.error
        return bytes(self.received)


def _serve(loop: str, scenario: Callable[[asyncio.Future[asyncio.StreamWriter], int], Awaitable[None]]) -> None:
    """Run `scenario(accepted, port)` on `loop`: a server on `port`, whose first connection's writer `accepted`
    will be."""
    async def main() -> None:
        accepted: asyncio.Future[asyncio.StreamWriter] = asyncio.get_running_loop().create_future()

        async def on_connect(_: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            accepted.set_result(writer)
        server = await asyncio.start_server(on_connect, "127.0.0.1", 0)
        async with server:
            port = server.sockets[0].getsockname()[1]
            await scenario(accepted, port)
    with asyncio.Runner(loop_factory=LOOPS[loop]) as runner:
        runner.run(main())


async def _until_copied(before: int) -> None:
    """Wait until send_file copied a piece: the server's socket was full (uvloop only copies then)."""
    deadline = asyncio.get_running_loop().time() + TIMEOUT
    while totals()[1] == before:
        assert asyncio.get_running_loop().time() < deadline, "the socket never filled"
        await asyncio.sleep(0.001)


@pytest.mark.parametrize("loop", LOOPS)
def test_ranges_go_out_in_order_behind_buffered_bytes_and_across_full_sockets(segment, loop):
    path, data = segment
    middle, suffix = b"between the ranges", b"the end"
    sendfiled, copied = totals()

    async def scenario(accepted, port):
        client = await asyncio.to_thread(_Client, port, 0)
        writer = await accepted
        # The client reads nothing yet: written until the transport holds bytes the socket did not take,
        # which must go out before the range.
        prefix = b""
        while not writer.transport.get_write_buffer_size():
            assert len(prefix) < 64 * MIB, "the socket takes anything"
            piece = os.urandom(MIB)
            writer.write(piece)
            prefix += piece
        client.first = len(prefix)

        async def send() -> None:
            await send_file(writer, _held(path, 0, 8 * MIB))
            writer.write(middle)
            await send_file(writer, _held(path, 8 * MIB, MIB))
            writer.write(suffix)
            await writer.drain()
            writer.close()
        sending = asyncio.create_task(send())
        client.go.set()
        if loop == "uvloop":
            # The client stops after the prefix: 8 MiB cannot fit the socket, so a piece waits for room.
            await _until_copied(copied)
        client.resume.set()
        await asyncio.wait_for(sending, TIMEOUT)
        assert await asyncio.to_thread(client.join) == prefix + data[:8 * MIB] + middle + data[8 * MIB:] + suffix
        client.sock.close()
    _serve(loop, scenario)
    more_sendfiled, more_copied = totals()[0] - sendfiled, totals()[1] - copied
    assert more_sendfiled + more_copied == 9 * MIB
    if loop == "uvloop":
        assert 0 < more_copied < MIB
    else:
        assert more_copied == 0


@pytest.mark.parametrize("loop", LOOPS)
def test_a_peer_that_resets_mid_range_ends_the_send_with_a_connection_error(segment, loop):
    path, _ = segment
    copied = totals()[1]

    async def scenario(accepted, port):
        client = await asyncio.to_thread(_Client, port, 0)
        writer = await accepted
        sending = asyncio.create_task(send_file(writer, _held(path, 0, 8 * MIB)))
        if loop == "uvloop":
            await _until_copied(copied)   # waiting for room
        else:
            await asyncio.sleep(0)
        # Closed with unread data and no linger: the kernel answers with a reset.
        client.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        client.sock.close()
        client.go.set()
        with pytest.raises(OSError):   # ConnectionResetError, BrokenPipeError
            await asyncio.wait_for(sending, TIMEOUT)
        writer.close()
    _serve(loop, scenario)


@pytest.mark.parametrize("loop", LOOPS)
def test_a_range_longer_than_its_file_fails_instead_of_sending_short(segment, loop):
    path, data = segment

    async def scenario(accepted, port):
        client = await asyncio.to_thread(_Client, port, 0)
        client.go.set()
        client.resume.set()
        writer = await accepted
        with pytest.raises(OSError, match="ended 1024 bytes early"):
            await send_file(writer, _held(path, len(data) - MIB, MIB + 1024))
        writer.close()
        assert await asyncio.to_thread(client.join) == data[-MIB:]
        client.sock.close()
    _serve(loop, scenario)
