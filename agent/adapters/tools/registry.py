"""The worker's tools, from their three sources: the built-ins, the `@tool` functions of the
modules in `tools.python`, and the MCP servers of `[[tools.mcp]]`. A profile's selection of
them is a session's Toolbox.

A source that cannot start is logged and recorded in `status()` (what `voxroom doctor`
shows); the others serve on. Two sources offering one tool name is a configuration error.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass

from agent.adapters.tools.base import Tool
from agent.adapters.tools.builtins import SOURCE as BUILTIN
from agent.adapters.tools.builtins import builtin_tools
from agent.adapters.tools.loop_thread import LoopThread
from agent.adapters.tools.mcp_client import MCPServerConnection
from agent.adapters.tools.python_tools import module_tools
from agent.adapters.tools.toolbox import MAX_RESULT_CHARS, Toolbox
from agent.config import ConfigError, Settings, ToolsSettings, check_profile_tools

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SourceStatus:
    source: str  # "builtin", "python:MODULE" or "mcp:SERVER"
    ok: bool
    detail: str  # why it is not ok ("" when it is)
    tools: tuple[str, ...]


class ToolRegistry:
    def __init__(
        self, settings: ToolsSettings, *, reconnect_backoff_s: tuple[float, float] = (0.5, 30.0)
    ) -> None:
        self.settings = settings
        self._backoff_s = reconnect_backoff_s
        self._fixed: dict[str, list[Tool]] = {}  # builtin and python sources, in order
        self._errors: dict[str, str] = {}  # python sources that failed to import
        self._mcp: list[MCPServerConnection] = []
        self._loop: LoopThread | None = None
        self._changed = threading.Condition()

    # ---- life -----------------------------------------------------------------------------

    def start(self) -> dict[str, SourceStatus]:
        """Load the Python tools and connect the MCP servers (each within its timeout_s).
        Blocking: call it from a thread. ConfigError when two sources offer one name."""
        self._fixed[BUILTIN] = builtin_tools(self.settings.timeout_s)
        for module in self.settings.python:
            source = f"python:{module}"
            try:
                self._fixed[source] = module_tools(
                    module, default_timeout_s=self.settings.timeout_s
                )
            except (ImportError, TypeError) as e:
                self._errors[source] = str(e)
                log.error("tools: %s", e)
        if self.settings.mcp:
            self._loop = LoopThread("voxroom-tools")
            self._mcp = [
                MCPServerConnection(s, self._loop, self._notify, self._backoff_s)
                for s in self.settings.mcp
            ]
            self._loop.run(self._start_servers())
        if clashes := self._merged()[1]:
            self.close()
            raise ConfigError(
                "tools: " + "; ".join(clashes) + " (rename one, or leave it out "
                "of its MCP server's allow list)"
            )
        return self.status()

    async def _start_servers(self) -> None:
        await asyncio.gather(*(server.start() for server in self._mcp))

    def close(self) -> None:
        if self._loop is not None:
            self._loop.run(self._close_servers())
            self._loop.stop()
            self._loop = None

    async def _close_servers(self) -> None:
        await asyncio.gather(*(server.close() for server in self._mcp))

    # ---- what there is --------------------------------------------------------------------

    def status(self) -> dict[str, SourceStatus]:
        status = {
            source: SourceStatus(source, True, "", tuple(t.name for t in tools))
            for source, tools in self._fixed.items()
        }
        status |= {
            source: SourceStatus(source, False, error, ()) for source, error in self._errors.items()
        }
        status |= {
            s.settings.source: SourceStatus(s.settings.source, not s.error, s.error, tuple(s.tools))
            for s in self._mcp
        }
        return status

    def available(self) -> set[str]:
        """The names a profile may give: each tool's, and "mcp:SERVER" for each server."""
        return set(self._merged()[0]) | {s.settings.source for s in self._mcp}

    def check_profiles(self, settings: Settings) -> None:
        """ConfigError when a profile names a tool no source has. While an MCP server is down
        its tools are unknown: then a missing name is only logged."""
        try:
            check_profile_tools(settings, self.available())
        except ConfigError as e:
            if not any(s.error for s in self._mcp):
                raise
            log.warning("%s (an MCP server is down: its tools may be among them)", e)

    def toolbox(self, names: Sequence[str], *, max_result_chars: int = MAX_RESULT_CHARS) -> Toolbox:
        """The tools `names` selects ("mcp:SERVER": all of a server's tools). A name no source
        has now (its server is down) is left out with a warning."""
        tools, clashes = self._merged()
        for clash in clashes:  # a server relisted since start: the first source keeps the name
            log.error("tools: %s; the session gets the first", clash)
        chosen: dict[str, Tool] = {}
        for name in names:
            if name.startswith("mcp:"):
                chosen |= {t.name: t for t in tools.values() if t.source == name}
            elif name in tools:
                chosen[name] = tools[name]
            else:
                log.warning("tools: no source offers %r now; the session goes without it", name)
        return Toolbox(chosen.values(), max_result_chars=max_result_chars)

    def wait_for(self, condition: Callable[[], bool], timeout_s: float) -> bool:
        """Block until `condition()` holds after a source changed (an MCP server connected,
        was lost, relisted its tools), or `timeout_s` passed; whether it holds."""
        with self._changed:
            return self._changed.wait_for(condition, timeout_s)

    def _notify(self) -> None:
        with self._changed:
            self._changed.notify_all()

    def _merged(self) -> tuple[dict[str, Tool], list[str]]:
        """Every tool by name, the first source keeping a name; and each clash."""
        tools: dict[str, Tool] = {}
        clashes: list[str] = []
        sources: list[Collection[Tool]] = [
            *self._fixed.values(),
            *(s.tools.values() for s in self._mcp),
        ]
        for source_tools in sources:
            for tool in source_tools:
                if (first := tools.get(tool.name)) is None:
                    tools[tool.name] = tool
                elif first.source != tool.source:
                    clashes.append(f"{tool.source} and {first.source} both offer {tool.name!r}")
        return tools, clashes
