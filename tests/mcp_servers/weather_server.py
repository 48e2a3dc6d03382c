"""An MCP server for the tool tests, written with the `mcp` SDK: a weather tool and the bad
and slow tools the client must survive. Over stdio by default; `--http` serves Streamable HTTP
on a free loopback port and prints the port on its first line of stdout.

`--refuse-if PATH`: exit at start, saying why on stderr, while PATH exists (a server that
cannot come back until the test lets it).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import sys
from pathlib import Path

import anyio
from mcp.server.fastmcp import Context, FastMCP, Image
from mcp.types import ToolAnnotations

mcp = FastMCP("weather")
started = asyncio.Event()  # the hanging tool is running
cancelled = asyncio.Event()  # ... and was cancelled by the client's notice


@mcp.tool(annotations=ToolAnnotations(readOnlyHint=True))
def get_weather(city: str) -> str:
    """The weather in a city right now."""
    return f"{city}: 12 degrees, light rain"


@mcp.tool()
def book_table(restaurant: str, people: int) -> str:
    """Book a table (it acts: not read-only)."""
    return f"booked {restaurant} for {people}"


@mcp.tool(annotations=ToolAnnotations(readOnlyHint=False))
def send_email(to: str) -> str:
    """Send an email."""
    return f"sent to {to}"


@mcp.tool()
async def hang() -> str:
    """Never answers, until the client cancels the call."""
    started.set()
    try:
        await anyio.sleep_forever()
    finally:
        cancelled.set()
    return "unreachable"


@mcp.tool()
async def wait_started() -> str:
    async with asyncio.timeout(30):
        await started.wait()
    return "started"


@mcp.tool()
async def wait_cancelled() -> str:
    """Whether the hanging call was cancelled (waits for it a while)."""
    with anyio.move_on_after(30):
        await cancelled.wait()
    return "cancelled" if cancelled.is_set() else "not cancelled"


@mcp.tool()
def pid() -> str:
    return str(os.getpid())


@mcp.tool()
def crash() -> str:
    """Dies in the middle of the call."""
    os._exit(1)


@mcp.tool()
def fail() -> str:
    raise ValueError("the weather service is down")


@mcp.tool()
def megabytes() -> str:
    return "x" * 3_000_000


@mcp.tool()
def chart() -> Image:
    """Answers with a picture, which a voice agent cannot read out."""
    return Image(data=b"\x89PNG\r\n\x1a\n", format="png")


@mcp.tool()
async def add_tool(name: str, ctx: Context) -> str:
    """Adds a tool and tells the client its list changed."""

    def added() -> str:
        return f"{name} ran"

    mcp.add_tool(added, name=name, description=f"the added tool {name}")
    await ctx.session.send_tool_list_changed()
    return f"added {name}"


def serve_http() -> None:
    import uvicorn

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    print(sock.getsockname()[1], flush=True)
    server = uvicorn.Server(uvicorn.Config(mcp.streamable_http_app(), log_level="warning"))
    anyio.run(lambda: server.serve(sockets=[sock]))


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--http", action="store_true")
    parser.add_argument("--refuse-if", type=Path)
    args = parser.parse_args()
    if args.refuse_if and args.refuse_if.exists():
        print(f"refusing to start while {args.refuse_if} exists", file=sys.stderr)
        sys.exit(3)
    if args.http:
        serve_http()
    else:
        mcp.run()
