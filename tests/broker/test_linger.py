"""How a connection the broker ends lets go of its socket (`connection._linger`), on uvloop and asyncio's
loop, with real sockets: a client that reset it first, and one that neither reads nor closes."""
from __future__ import annotations

import asyncio
import socket
import struct

import pytest

from both_loops import LOOPS, run_on
from logstore.broker import connection

TIMEOUT = 10.0


async def _pair() -> tuple[asyncio.StreamReader, asyncio.StreamWriter, asyncio.StreamWriter]:
    """The server side's reader and writer of a fresh loopback connection, and the client's writer."""
    accepted: asyncio.Future[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = \
        asyncio.get_running_loop().create_future()
    server = await asyncio.start_server(lambda r, w: accepted.set_result((r, w)), "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    _, client = await asyncio.open_connection("127.0.0.1", port)
    reader, writer = await asyncio.wait_for(accepted, TIMEOUT)
    server.close()
    return reader, writer, client


@LOOPS
def test_a_connection_the_client_reset_first_ends_quietly(new_loop):
    async def run():
        reader, writer, client = await _pair()
        client.get_extra_info("socket").setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        client.transport.abort()   # a reset
        with pytest.raises(ConnectionResetError):
            await asyncio.wait_for(reader.read(), TIMEOUT)
        assert writer.transport.is_closing()
        await asyncio.wait_for(connection._linger(reader, writer), TIMEOUT)   # returns, raises nothing
        writer.close()

    run_on(new_loop, run)


@LOOPS
def test_a_client_that_neither_reads_nor_closes_is_let_go_after_the_linger(new_loop, monkeypatch):
    monkeypatch.setattr(connection, "LINGER_SECONDS", 0.2)

    async def run():
        reader, writer, client = await _pair()
        client.get_extra_info("socket").setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        writer.write(b"x" * (8 << 20))   # more than the sockets hold: the flush cannot finish
        loop = asyncio.get_running_loop()
        started = loop.time()
        await asyncio.wait_for(connection._linger(reader, writer), TIMEOUT)
        # uvloop's clock counts whole milliseconds (its float difference can fall a hair short of 0.2).
        assert round((loop.time() - started) * 1000) >= 200
        assert writer.transport.get_write_buffer_size() > 0   # let go with the replies still unsent
        writer.close()
        client.close()

    run_on(new_loop, run)
