"""The worker's tool registry: the tools of [tools], started once per process with its
engines (agent/worker/process_engines.py)."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from agent.config import Settings

if TYPE_CHECKING:  # its MCP client libraries load when the registry starts, not on import
    from agent.adapters.tools.registry import ToolRegistry

log = logging.getLogger("voxroom.worker")


def start_tool_registry(settings: Settings) -> ToolRegistry:
    """The tools of [tools], listed (blocking). A source that cannot start, or a profile that
    names a tool nobody offers, is a clear error in the log; the worker serves on with the
    rest (`voxroom doctor` fails on them)."""
    from agent.adapters.tools.registry import ToolRegistry
    from agent.config import ConfigError

    registry = ToolRegistry(settings.tools)
    for status in registry.start().values():
        if status.ok:
            log.info("tools: %s offers %s", status.source, ", ".join(status.tools) or "none")
        else:
            log.error("tools: %s is unavailable: %s", status.source, status.detail)
    try:
        registry.check_profiles(settings)
    except ConfigError as e:
        log.error("%s", e)
    return registry
