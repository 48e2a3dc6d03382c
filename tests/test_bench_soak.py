"""The soak run's verdict (bench/soak.py): memory flat over the second half of the run,
no growth in tasks, threads or open files."""

from __future__ import annotations

from bench.soak import SoakResult, SoakSample


def run(rss: list[float], tasks: list[int] | None = None) -> SoakResult:
    tasks = tasks or [5] * len(rss)
    return SoakResult(
        30.0,
        [
            SoakSample(t_s=60.0 * i, rss_mb=m, tasks=n, threads=4, open_files=12, turns=10 * i)
            for i, (m, n) in enumerate(zip(rss, tasks, strict=True))
        ],
    )


def test_growth_during_the_warm_up_then_flat_is_flat() -> None:
    v = run([500, 600, 680, 700, 700, 701, 700, 702, 701, 700]).verdict()
    assert v["memory_flat"] and v["no_leak"]
    assert abs(v["rss_slope_mb_per_hour"]) < 20 and v["turns"] == 90


def test_steady_growth_is_reported() -> None:
    v = run([500 + 5 * i for i in range(10)]).verdict()  # 5 MB a minute: 300 MB/h
    assert not v["memory_flat"] and v["rss_slope_mb_per_hour"] > 250


def test_tasks_piling_up_are_a_leak() -> None:
    v = run([700] * 10, tasks=[5, 5, 6, 5, 6, 20, 30, 40, 50, 60]).verdict()
    assert v["memory_flat"] and not v["no_leak"]
    assert v["growth_second_half"]["tasks"] > 8


def test_round_trip_through_json() -> None:
    r = run([700] * 4)
    assert SoakResult.from_json(r.as_json()).verdict() == r.verdict()
