"""FaultProxy: a TEST DOUBLE network between a client and a server, for fault injection.

A TCP proxy on loopback (asyncio) that forwards bytes both ways and can, switched at run time:
- `delay_s`: hold every chunk this long before forwarding it (order kept, no throughput cap);
- `blackhole`: swallow everything in both directions (a peer that accepted and went silent,
  or a network that drops every packet): the client waits for its own timeouts;
- `refuse`: reset new connections as soon as they are accepted;
- `cut_after_bytes`: reset a connection once that many bytes went from server to client
  (a stream cut mid-reply); `cut_all()` resets every open connection now.
A reset is a TCP RST (SO_LINGER 0), as a crashed peer or a middlebox produces.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
from dataclasses import dataclass, field


@dataclass(eq=False)  # identity: links live in a set
class _Link:
    client: asyncio.StreamWriter
    server: asyncio.StreamWriter | None = None
    to_client: int = 0  # bytes forwarded server -> client
    tasks: list[asyncio.Task[None]] = field(default_factory=list)


def _reset(writer: asyncio.StreamWriter) -> None:
    sock = writer.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()


class FaultProxy:
    def __init__(self, upstream_host: str, upstream_port: int) -> None:
        self.upstream = (upstream_host, upstream_port)
        self.delay_s = 0.0
        self.blackhole = False
        self.refuse = False
        self.cut_after_bytes: int | None = None
        self.accepted = 0
        self.cuts = 0
        self._links: set[_Link] = set()
        self._handlers: set[asyncio.Task[None]] = set()
        self._server: asyncio.Server | None = None
        self.port = 0

    async def __aenter__(self) -> FaultProxy:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        self.cut_all()
        await asyncio.gather(*self._handlers, return_exceptions=True)
        await self._server.wait_closed()

    def url(self, scheme: str = "http", path: str = "") -> str:
        return f"{scheme}://127.0.0.1:{self.port}{path}"

    def cut_all(self) -> int:
        """Reset every open connection; returns how many."""
        links = list(self._links)
        for link in links:
            self._cut(link)
        return len(links)

    def _cut(self, link: _Link) -> None:
        if link not in self._links:
            return
        self._links.discard(link)
        self.cuts += 1
        _reset(link.client)
        if link.server is not None:
            _reset(link.server)
        for task in link.tasks:
            if task is not asyncio.current_task():
                task.cancel()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._handlers.add(task)
        try:
            await self._serve(reader, writer)
        finally:
            self._handlers.discard(task)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.accepted += 1
        if self.refuse:
            _reset(writer)
            return
        link = _Link(writer)
        self._links.add(link)
        try:
            up_reader, link.server = await asyncio.open_connection(*self.upstream)
        except OSError:
            self._cut(link)
            return
        link.tasks = [
            asyncio.create_task(self._pump(link, reader, link.server, to_client=False)),
            asyncio.create_task(self._pump(link, up_reader, writer, to_client=True)),
        ]
        await asyncio.gather(*link.tasks, return_exceptions=True)
        if link in self._links:
            self._links.discard(link)
            for w in (writer, link.server):
                w.close()

    async def _pump(
        self, link: _Link, src: asyncio.StreamReader, dst: asyncio.StreamWriter, *, to_client: bool
    ) -> None:
        held: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()
        writer = asyncio.create_task(self._deliver(link, held, dst, to_client=to_client))
        loop = asyncio.get_running_loop()
        try:
            while data := await src.read(65536):
                if not self.blackhole:
                    held.put_nowait((loop.time() + self.delay_s, data))
            held.put_nowait((loop.time() + self.delay_s, b""))  # EOF, in order
            await writer
        except (OSError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.cancel()
            await asyncio.gather(writer, return_exceptions=True)

    async def _deliver(
        self,
        link: _Link,
        held: asyncio.Queue[tuple[float, bytes]],
        dst: asyncio.StreamWriter,
        *,
        to_client: bool,
    ) -> None:
        loop = asyncio.get_running_loop()
        while True:
            due, data = await held.get()
            await asyncio.sleep(max(0.0, due - loop.time()))
            if self.blackhole:
                continue
            if not data:
                if dst.can_write_eof():
                    dst.write_eof()
                return
            if to_client and self.cut_after_bytes is not None:
                room = self.cut_after_bytes - link.to_client
                if room < len(data):
                    dst.write(data[: max(0, room)])
                    with contextlib.suppress(OSError):
                        await dst.drain()
                    self._cut(link)
                    return
            dst.write(data)
            await dst.drain()
            if to_client:
                link.to_client += len(data)
