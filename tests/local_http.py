"""HTTP servers of the tests (the web app, test doubles) on a free loopback port."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from aiohttp import web

from agent.testing.ports import loopback_socket, port_of


@asynccontextmanager
async def serve_app(app: web.Application) -> AsyncIterator[str]:
    """`app` on a free loopback port until the block ends; yields its base URL."""
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    sock = loopback_socket()
    await web.SockSite(runner, sock).start()
    try:
        yield f"http://127.0.0.1:{port_of(sock)}"
    finally:
        await runner.cleanup()
