"""HTTP servers of the tests (the web app, test doubles) on a free loopback port."""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from aiohttp import web


def free_port() -> int:
    """A loopback port nothing listens on (once this returns, the probe socket is closed)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@asynccontextmanager
async def serve_app(app: web.Application) -> AsyncIterator[str]:
    """`app` on a free loopback port until the block ends; yields its base URL."""
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        await runner.cleanup()
