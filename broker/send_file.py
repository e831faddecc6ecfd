"""A reply's file range sent from the file by sendfile(2), on asyncio's loop and on uvloop alike.

asyncio's `loop.sendfile` waits until the transport has sent what it
holds, then sendfiles, waiting for room with a writer callback on the
socket's fd. uvloop has no `loop.sendfile` and refuses `add_writer` on a
fd its transport owns, so there the range goes out by `os.sendfile` on
the transport's socket, in the gaps of the transport's own writes:

- sendfile is called only while the transport holds no unsent byte (what
  it took is in the kernel first), so the bytes go out in order;
- when the socket is full (EAGAIN), the next `WAIT_PIECE_BYTES` of the
  range are written through the transport, which waits for the socket
  itself (libuv polls its own fd); once they are in, the socket has room
  (Linux says a TCP socket is writable with a third of its buffer free)
  and sendfile goes on. That copies one piece per full socket.

A range that ends early (its file shrank under the reply) or a socket
error raises OSError: the connection ends, as for any failed reply. TLS
connections never come here (the kernel would send the file unencrypted).
"""
from __future__ import annotations

import asyncio
import os
from typing import IO, cast

from logstore.broker.protocol import HeldSlice

__all__ = ["WAIT_PIECE_BYTES", "send_file", "totals"]

# Written through the transport when the socket is full: its wait for room is the one uvloop offers. Small,
# as it is the copy; a piece per full socket against the megabytes a TCP buffer takes each time.
WAIT_PIECE_BYTES = 16 * 1024

# Bytes of file ranges sent since start: by sendfile, and copied (the pieces above, or no socket). Plain ints,
# bumped on the event loop; the broker logs them when it stops.
_by_sendfile = 0
_copied = 0


def totals() -> tuple[int, int]:
    """(bytes sent by sendfile, bytes copied) of every file range sent by `send_file` in this process."""
    return _by_sendfile, _copied


async def send_file(writer: asyncio.StreamWriter, part: HeldSlice) -> None:
    """Send the range `part` on `writer`'s socket, after what the writer holds, from its file by sendfile."""
    global _by_sendfile
    loop = asyncio.get_running_loop()
    if writer.transport.is_closing():
        raise ConnectionResetError("the connection closed before a file range was sent")
    if isinstance(loop, asyncio.BaseEventLoop):
        # asyncio's own: waits for the transport's buffer to empty, pauses reading meanwhile, never copies.
        try:
            # It needs only the fileno() and seek() a HeldSlice has, not a whole IO.
            sent = await loop.sendfile(writer.transport, cast("IO[bytes]", part), part.position, part.size,
                                       fallback=False)
        except asyncio.SendfileNotAvailableError:
            pass
        else:
            _by_sendfile += sent
            if sent < part.size:
                raise OSError(f"file range ended {part.size - sent} bytes early")
            return
    await _send_on_socket(writer, part)


async def _send_on_socket(writer: asyncio.StreamWriter, part: HeldSlice) -> None:
    """`send_file` by os.sendfile on the transport's socket, whatever the loop."""
    global _by_sendfile, _copied
    transport = writer.transport
    sock = transport.get_extra_info("socket")
    if sock is None:
        writer.write(part.read())
        _copied += part.size
        return
    out = sock.fileno()
    offset, end = part.position, part.position + part.size
    limits: tuple[int, int] | None = None
    try:
        while offset < end:
            if transport.get_write_buffer_size():
                if limits is None:
                    # With no high-water mark the writer's drain waits until every byte is in the kernel.
                    limits = transport.get_write_buffer_limits()
                    transport.set_write_buffer_limits(high=0)
                await writer.drain()
            if transport.is_closing() or transport.get_write_buffer_size():
                # Closed while this waited (only a closing transport drains with bytes left): its fd may be
                # closed, and its number another connection's by now.
                raise ConnectionResetError("the connection closed while a file range was sent")
            try:
                sent = os.sendfile(out, part.fd, offset, end - offset)
            except BlockingIOError:
                piece = part.read(offset - part.position, WAIT_PIECE_BYTES)
                if not piece:
                    raise OSError(f"file range ended {end - offset} bytes early") from None
                writer.write(piece)
                offset += len(piece)
                _copied += len(piece)
                continue
            if sent == 0:
                raise OSError(f"file range ended {end - offset} bytes early")
            offset += sent
            _by_sendfile += sent
    finally:
        if limits is not None and not transport.is_closing():
            low, high = limits
            transport.set_write_buffer_limits(high, low)
