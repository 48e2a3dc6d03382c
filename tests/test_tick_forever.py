"""The engines' timer (agent.pipeline.listener.tick_forever) against a busy event loop, in real
asyncio: frames come from another thread (as LiveKit's do) into a queue that a task reads."""

from __future__ import annotations

import asyncio
import threading
import time

from agent.pipeline.listener import tick_forever


async def test_a_tick_the_loop_runs_late_comes_after_the_frames_held_up_by_the_stall() -> None:
    loop = asyncio.get_running_loop()
    frames: asyncio.Queue[int] = asyncio.Queue()
    order: list[str] = []

    async def read_frames() -> None:
        while True:
            await frames.get()
            order.append("frame")

    tasks = [
        asyncio.create_task(read_frames()),
        asyncio.create_task(tick_forever(0.02, time.monotonic, lambda now: order.append("tick"))),
    ]
    await asyncio.sleep(0.1)

    def send() -> None:
        for i in range(10):
            loop.call_soon_threadsafe(frames.put_nowait, i)
            time.sleep(0.02)

    def stall_while_frames_arrive() -> None:
        # Blocks the event loop (this runs on it) until all ten frames are queued.
        sender = threading.Thread(target=send)
        sender.start()
        sender.join()
        time.sleep(0.05)

    order.clear()
    stall_while_frames_arrive()
    await asyncio.sleep(0.1)
    for t in tasks:
        t.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    # Ticked before them, the stall would have read as the speaker's silence.
    assert order[:10] == ["frame"] * 10
    assert "tick" in order[10:]  # and the timer goes on
