"""agent.ops.memory_trim: at most one trim per interval, on its own thread, never raising."""

from __future__ import annotations

from agent.ops.memory_trim import PROCESS_TRIMMER, MemoryTrimmer


def test_trims_at_most_once_per_interval() -> None:
    now = [0.0]
    calls: list[float] = []
    trimmer = MemoryTrimmer(lambda: calls.append(now[0]), min_interval_s=20, clock=lambda: now[0])
    for t in (0.0, 5.0, 19.9, 20.0, 30.0, 45.0):
        now[0] = t
        thread = trimmer.trim_soon()
        if thread is not None:
            thread.join()
    assert calls == [0.0, 20.0, 45.0]


def test_a_failing_trim_is_swallowed_and_no_libc_means_no_trim() -> None:
    def boom() -> None:
        raise OSError("no")

    thread = MemoryTrimmer(boom).trim_soon()
    assert thread is not None
    thread.join()
    assert MemoryTrimmer(None).trim_soon() is None


def test_the_process_trimmer_finds_glibc_here() -> None:
    thread = MemoryTrimmer(PROCESS_TRIMMER._trim, min_interval_s=0).trim_soon()
    assert thread is not None  # CI runs on Debian: glibc's malloc_trim exists
    thread.join()
