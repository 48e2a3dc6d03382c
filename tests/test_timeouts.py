"""agent.timeouts.finish_within: a time limit that never loses the caller's cancellation."""

from __future__ import annotations

import asyncio
import sys

import pytest

from agent.timeouts import finish_within


async def cancel_as_it_finishes(wait: object) -> asyncio.Task[object]:
    """The waiting task is cancelled in the same loop turn as the awaited future finishes."""
    future: asyncio.Future[int] = asyncio.get_running_loop().create_future()
    task = asyncio.create_task(wait(future))  # type: ignore[operator]
    await asyncio.sleep(0)  # the task is waiting now
    future.set_result(1)
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    return task


async def test_a_cancel_as_the_step_finishes_still_cancels_the_caller() -> None:
    task = await cancel_as_it_finishes(lambda f: finish_within(f, 5.0))
    assert task.cancelled()


@pytest.mark.skipif(sys.version_info >= (3, 12), reason="wait_for was rewritten in 3.12")
async def test_asyncio_wait_for_loses_that_cancel_on_3_11() -> None:
    """Why the module exists: the same race through `asyncio.wait_for`."""
    task = await cancel_as_it_finishes(lambda f: asyncio.wait_for(f, 5.0))
    assert not task.cancelled() and task.result() == 1


async def test_a_step_that_overruns_is_cancelled_and_not_waited_for() -> None:
    release = asyncio.Event()
    cancels = 0

    async def stubborn() -> None:
        nonlocal cancels
        while not release.is_set():
            try:
                await release.wait()
            except asyncio.CancelledError:
                cancels += 1

    step = asyncio.ensure_future(stubborn())
    assert await finish_within(step, 0.05) is False
    await asyncio.sleep(0)
    assert cancels == 1 and not step.done()  # asked to stop; the caller went on regardless
    release.set()
    await step


async def test_a_step_done_in_time_keeps_its_result_or_error() -> None:
    async def fails() -> None:
        raise ValueError("bad frame")

    step = asyncio.ensure_future(fails())
    assert await finish_within(step, 1.0) is True
    assert isinstance(step.exception(), ValueError)
    assert await finish_within(asyncio.sleep(0, "x"), None) is True
