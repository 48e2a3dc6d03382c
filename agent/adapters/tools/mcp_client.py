"""One configured MCP server (the `mcp` SDK, over stdio or Streamable HTTP): connected at
start, its tools listed and kept fresh, reconnected with backoff when it goes away.

Everything here runs on the registry's loop (agent/adapters/tools/loop_thread.py); a Tool's `invoke`
hops there. A server that is down costs its tools' calls a clear error, nothing more.
"""

from __future__ import annotations

import asyncio
import json
import logging
import tempfile
from collections.abc import Callable
from contextlib import AsyncExitStack
from typing import IO, Any, TextIO

import anyio
import httpx
from mcp import ClientSession, McpError, StdioServerParameters, types
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client

from agent.adapters.tools.base import Tool, ToolContext
from agent.adapters.tools.loop_thread import LoopThread
from agent.config import NAME_PATTERN, MCPServerSettings
from agent.engines import ToolSpec

log = logging.getLogger(__name__)

# A connected server that has not been heard from for this long is pinged; one that does not
# answer is reconnected. (A stdio server that exits is noticed at once.)
PING_EVERY_S = 30.0
# An HTTP server may keep a response stream open while a tool runs; the tool's own limit
# (Toolbox) ends a call long before this.
HTTP_READ_TIMEOUT_S = 300.0


class MCPToolError(RuntimeError):
    """A call that did not give a result: the server is down, or answered with an error."""


class _WatchedSession(ClientSession):
    """A ClientSession that says when its connection is gone (the transport's stream ended:
    a stdio server exited, an HTTP transport failed). Overrides an SDK internal: mcp is pinned."""

    def __init__(self, *args: Any, on_closed: Callable[[], None], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.closed = False
        self._on_closed = on_closed

    async def _receive_loop(self) -> None:
        try:
            await super()._receive_loop()
        finally:
            self.closed = True
            self._on_closed()


class MCPServerConnection:
    def __init__(
        self,
        settings: MCPServerSettings,
        loop: LoopThread,
        on_change: Callable[[], None],
        backoff_s: tuple[float, float] = (0.5, 30.0),
    ):
        self.settings = settings
        self.tools: dict[str, Tool] = {}  # replaced whole on each listing (read from any thread)
        self.error = "not started"  # "" while connected
        self._loop = loop
        self._on_change = on_change
        self._backoff_s = backoff_s
        self._session: _WatchedSession | None = None
        self._relist = False
        self._wake: asyncio.Event | None = None
        self._task: asyncio.Task[None] | None = None

    @property
    def name(self) -> str:
        return self.settings.name

    async def start(self) -> None:
        """Connect and list the tools; returns once that worked or failed (see `error`). On
        failure it goes on trying in the background."""
        self._wake = asyncio.Event()
        first = asyncio.Event()
        self._task = asyncio.create_task(self._supervise(first), name=f"mcp:{self.name}")
        await first.wait()

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    async def call(self, name: str, arguments: dict[str, Any]) -> str:
        session = self._session
        if session is None or session.closed:
            raise MCPToolError(f"MCP server {self.name!r} is not connected ({self.error})")
        # The id this call's request takes (an SDK internal; mcp is pinned): cancelling the
        # call must tell the server which request to stop.
        request_id = session._request_id
        try:
            result = await session.call_tool(name, arguments)
        except asyncio.CancelledError:
            await self._send_cancelled(session, request_id)
            raise
        except (McpError, anyio.BrokenResourceError, anyio.ClosedResourceError) as e:
            if not isinstance(e, McpError) or _closed(e):  # anyio's errors: closed, too
                raise MCPToolError(
                    f"MCP server {self.name!r} closed the connection during the call"
                ) from e
            raise MCPToolError(f"MCP server {self.name!r}: {e.error.message}") from e
        text = result_text(result)
        if result.isError:
            raise MCPToolError(text or f"{name} reported an error")
        return text

    async def _send_cancelled(self, session: ClientSession, request_id: int) -> None:
        notice = types.CancelledNotification(
            params=types.CancelledNotificationParams(
                requestId=request_id, reason="the caller cancelled the call"
            )
        )
        try:
            with anyio.fail_after(self.settings.timeout_s):
                await session.send_notification(types.ClientNotification(notice))
        except Exception as e:  # the server may be gone; the call is cancelled either way
            log.info("MCP server %r: the cancellation notice was not sent: %s", self.name, e)

    # ---- the connection's life ------------------------------------------------------------

    async def _supervise(self, first: asyncio.Event) -> None:
        delay, connected_once = self._backoff_s[0], False
        while True:
            errlog = tempfile.TemporaryFile("w+", encoding="utf-8", errors="replace")
            try:
                async with AsyncExitStack() as stack:
                    session = await self._connect(stack, errlog)
                    self._session, self.error, connected_once = session, "", True
                    delay = self._backoff_s[0]
                    self._changed(first)
                    log.info(
                        "MCP server %r: %d tool(s): %s",
                        self.name,
                        len(self.tools),
                        ", ".join(self.tools),
                    )
                    await self._watch(session)
                reason = "the connection closed"
            except Exception as e:
                reason = describe_failure(e, errlog, self.settings)
            finally:
                self._session = None
                errlog.close()
            self.error = reason
            self._changed(first)
            if connected_once:
                log.warning(
                    "MCP server %r lost: %s; reconnecting in %.1f s", self.name, reason, delay
                )
            else:
                log.error(
                    "MCP server %r cannot start: %s; retrying in %.1f s", self.name, reason, delay
                )
            await asyncio.sleep(delay)
            delay = min(delay * 2, self._backoff_s[1])

    def _changed(self, first: asyncio.Event) -> None:
        first.set()
        self._on_change()

    async def _connect(self, stack: AsyncExitStack, errlog: TextIO) -> _WatchedSession:
        s = self.settings
        if s.command:
            params = StdioServerParameters(
                command=s.command[0], args=list(s.command[1:]), env=s.env or None, cwd=s.cwd or None
            )
            read, write = await stack.enter_async_context(stdio_client(params, errlog=errlog))
        else:
            client = httpx.AsyncClient(
                headers=s.headers, timeout=httpx.Timeout(s.timeout_s, read=HTTP_READ_TIMEOUT_S)
            )
            await stack.enter_async_context(client)
            read, write, _ = await stack.enter_async_context(
                streamable_http_client(s.url, http_client=client)
            )
        session = await stack.enter_async_context(
            _WatchedSession(read, write, message_handler=self._on_message, on_closed=self._wake_up)
        )
        with anyio.fail_after(s.timeout_s):
            await session.initialize()
            await self._list(session)
        return session

    async def _watch(self, session: _WatchedSession) -> None:
        """Until the connection is gone: relist on a list_changed notice, ping when quiet."""
        assert self._wake is not None
        while not session.closed:
            if self._relist:
                self._relist = False
                with anyio.fail_after(self.settings.timeout_s):
                    await self._list(session)
                self._on_change()
                continue
            try:
                async with asyncio.timeout(PING_EVERY_S):
                    await self._wake.wait()
            except TimeoutError:
                with anyio.fail_after(self.settings.timeout_s):
                    await session.send_ping()
            self._wake.clear()

    async def _on_message(self, message: Any) -> None:
        if isinstance(message, types.ServerNotification) and isinstance(
            message.root, types.ToolListChangedNotification
        ):
            self._relist = True
            self._wake_up()
        elif isinstance(message, Exception):  # e.g. the answer to a call cancelled here
            log.info("MCP server %r: %s", self.name, message)

    def _wake_up(self) -> None:
        if self._wake is not None:
            self._wake.set()

    async def _list(self, session: ClientSession) -> None:
        listed: list[types.Tool] = []
        cursor: str | None = None
        while True:
            page = await session.list_tools(params=types.PaginatedRequestParams(cursor=cursor))
            listed += page.tools
            cursor = page.nextCursor
            if not cursor:
                break
        allow = self.settings.allow
        if allow is not None and (missing := set(allow) - {t.name for t in listed}):
            log.warning(
                "MCP server %r has no tool(s) %s named in its allow list",
                self.name,
                sorted(missing),
            )
        tools = {}
        for t in listed:
            if allow is not None and t.name not in allow:
                continue
            if not NAME_PATTERN.match(t.name):
                log.warning(
                    "MCP server %r: tool %r skipped: a tool's name is letters, digits, '_' or '-'",
                    self.name,
                    t.name,
                )
                continue
            tools[t.name] = self._tool(t)
        self.tools = tools

    def _tool(self, listed: types.Tool) -> Tool:
        name = listed.name

        async def invoke(args: dict[str, Any], _ctx: ToolContext) -> str:
            return await self._loop.call(self.call(name, args))

        hints = listed.annotations
        return Tool(
            spec=ToolSpec(
                name, listed.description or listed.title or name, dict(listed.inputSchema)
            ),
            read_only=bool(hints and hints.readOnlyHint),  # absent: it may act
            timeout_s=self.settings.timeout_s,
            source=self.settings.source,
            invoke=invoke,
        )


def result_text(result: types.CallToolResult) -> str:
    """What the LLM is told of a result: its text parts (other parts named, not included)."""
    parts: list[str] = []
    for item in result.content:
        if isinstance(item, types.TextContent):
            parts.append(item.text)
        elif isinstance(item, types.EmbeddedResource) and isinstance(
            item.resource, types.TextResourceContents
        ):
            parts.append(item.resource.text)
        else:
            parts.append(f"[{item.type} content]")
    if not parts and result.structuredContent is not None:
        parts.append(json.dumps(result.structuredContent, ensure_ascii=False))
    return "\n".join(parts)


def _closed(error: BaseException) -> bool:
    if isinstance(error, McpError):
        return error.error.code == types.CONNECTION_CLOSED
    return isinstance(
        error, anyio.BrokenResourceError | anyio.ClosedResourceError | anyio.EndOfStream
    )


def describe_failure(error: BaseException, errlog: IO[str], settings: MCPServerSettings) -> str:
    """One line on why a connection failed, with the end of a stdio server's stderr."""
    while isinstance(error, BaseExceptionGroup):  # the SDK's task groups wrap what failed
        error = error.exceptions[0]
    if isinstance(error, TimeoutError):
        text = f"no answer within {settings.timeout_s:g} s"
    elif _closed(error):  # whether reading or writing noticed first
        text = "Connection closed"
    elif isinstance(error, McpError):
        text = error.error.message
    elif isinstance(error, OSError) and settings.command:
        text = f"cannot run {list(settings.command)}: {error.strerror or error}"
    elif isinstance(error, httpx.HTTPError):
        text = f"{settings.url}: {type(error).__name__}: {error}"
    else:
        text = f"{type(error).__name__}: {error}"
    errlog.seek(0)
    said = [line.strip() for line in errlog.read().splitlines() if line.strip()]
    if said:
        text += f" (stderr: {said[-1][:300]})"
    return text
