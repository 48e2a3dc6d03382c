"""The loopback HTTP server the remote-like TEST DOUBLES of agent/testing/ answer on: one
aiohttp route on a port of its own, 127.0.0.1 only; and their base, `LoopbackDouble`, which
serves it for the length of an `async with`."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from types import TracebackType
from typing import Self

from aiohttp import web

from agent.testing.ports import loopback_socket, port_of

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class LoopbackServer:
    """One aiohttp route on a loopback port of its own (bound before it starts: no port race)."""

    def __init__(self) -> None:
        self._runner: web.AppRunner | None = None

    async def start(self, method: str, path: str, handler: Handler) -> str:
        """Serves `handler` at `method path`; returns the address, 127.0.0.1:PORT."""
        app = web.Application()
        app.router.add_route(method, path, handler)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        sock = loopback_socket()
        await web.SockSite(self._runner, sock).start()
        return f"127.0.0.1:{port_of(sock)}"

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()


class LoopbackDouble:
    """Base of a remote-like TEST DOUBLE served on a `LoopbackServer` of its own:
    `async with double:` serves `handler` at `method path` and sets `url`, `url_format`
    filled in with the server's address (127.0.0.1:PORT); leaving it stops the server."""

    def __init__(
        self, method: str, path: str, handler: Handler, url_format: str = "http://{}/v1"
    ) -> None:
        self.url = ""
        self._route = (method, path, handler)
        self._url_format = url_format
        self._server = LoopbackServer()

    async def _open(self) -> None:
        """What the double readies before it serves (a slow load, outside its constructor)."""

    async def _close(self) -> None:
        """What the double ends once its server has stopped."""

    async def __aenter__(self) -> Self:
        await self._open()
        self.url = self._url_format.format(await self._server.start(*self._route))
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self._server.stop()
        await self._close()


def client_gone(request: web.Request) -> bool:
    """Whether the client of `request` has left (aiohttp does not cancel its handler)."""
    transport = request.transport
    return transport is None or transport.is_closing()
