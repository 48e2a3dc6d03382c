"""A worker's stop: the signals that ask for it, then a drain that lets the conversations
end before the worker closes."""

from __future__ import annotations

import asyncio
import signal
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # livekit-agents loads with the worker's server, not with this module
    from livekit.agents import AgentServer


def stop_on_signals() -> asyncio.Event:
    """An event the running loop sets on Ctrl-C or SIGTERM: time to stop."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    return stop


async def drain(server: AgentServer, stop: asyncio.Event, timeout_s: float) -> None:
    """Take no new jobs and let the active conversations end, for at most `timeout_s`; a
    second signal stops at once."""
    n = len(server.active_jobs)
    print(f"voxroom: draining, {n} active conversation(s), up to {timeout_s:.0f} s", flush=True)
    stop.clear()
    draining = asyncio.create_task(server.drain(timeout=None))
    again = asyncio.create_task(stop.wait())
    done, _ = await asyncio.wait(
        [draining, again], timeout=timeout_s, return_when=asyncio.FIRST_COMPLETED
    )
    for task in (draining, again):
        task.cancel()
    await asyncio.gather(draining, again, return_exceptions=True)
    print("voxroom: drained" if draining in done else "voxroom: stopping now", flush=True)
