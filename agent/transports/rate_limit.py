"""A token bucket per client (the web server's join endpoints, the messages a user types)."""

from __future__ import annotations

import time
from collections.abc import Callable


class RateLimiter:
    """A token bucket per client: `per_min` requests a minute, in bursts of up to `burst`
    (by default `per_min`)."""

    def __init__(
        self,
        per_min: float,
        *,
        burst: float | None = None,
        clock: Callable[[], float] = time.monotonic,
        max_clients: int = 10_000,
    ) -> None:
        self.capacity = max(1.0, per_min if burst is None else burst)
        self.refill_per_s = per_min / 60.0
        self._clock = clock
        self._max_clients = max_clients
        self._buckets: dict[str, tuple[float, float]] = {}  # key -> (tokens, at)

    def take(self, key: str) -> float:
        """Spend one token of `key`: 0 when allowed, else the seconds until one is free."""
        now = self._clock()
        tokens, at = self._buckets.get(key, (self.capacity, now))
        tokens = min(self.capacity, tokens + (now - at) * self.refill_per_s)
        if tokens < 1 - 1e-9:  # the epsilon: a refill that is exactly due counts
            self._buckets[key] = (tokens, now)
            return (1 - tokens) / self.refill_per_s
        self._buckets[key] = (tokens - 1, now)
        if len(self._buckets) > self._max_clients:
            self._forget_full(now)
        return 0.0

    def _forget_full(self, now: float) -> None:
        """Drop the buckets that have refilled: they hold nothing a new bucket would not."""
        full_after = self.capacity / self.refill_per_s
        self._buckets = {k: v for k, v in self._buckets.items() if now - v[1] < full_after}
