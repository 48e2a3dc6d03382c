"""The loopback HTTP server the remote-like TEST DOUBLES of agent/testing/ answer on: one
aiohttp route on a port of its own, 127.0.0.1 only."""

from __future__ import annotations

import socket
from collections.abc import Awaitable, Callable

from aiohttp import web


def _loopback_socket() -> socket.socket:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    return sock


class LoopbackServer:
    """One aiohttp route on a loopback port of its own (bound before it starts: no port race)."""

    def __init__(self) -> None:
        self._runner: web.AppRunner | None = None

    async def start(
        self,
        method: str,
        path: str,
        handler: Callable[[web.Request], Awaitable[web.StreamResponse]],
    ) -> str:
        """Serves `handler` at `method path`; returns the address, 127.0.0.1:PORT."""
        app = web.Application()
        app.router.add_route(method, path, handler)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        sock = _loopback_socket()
        await web.SockSite(self._runner, sock).start()
        return f"127.0.0.1:{sock.getsockname()[1]}"

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()


def client_gone(request: web.Request) -> bool:
    """Whether the client of `request` has left (aiohttp does not cancel its handler)."""
    transport = request.transport
    return transport is None or transport.is_closing()
