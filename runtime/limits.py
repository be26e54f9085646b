"""Per-user limits (SPEC ACC-5): write requests per minute, as a sans-I/O token bucket.

Rules
-----
1. Each key (tenant, user) has a bucket of ``per_minute`` requests that refills continuously at
   ``per_minute / 60`` per second; a request takes one, or is refused with the seconds until one
   is back (the HTTP ``Retry-After``).
2. ``now`` is passed in (monotonic seconds): the limiter reads no clock.
3. Bounded: at most ``max_keys`` buckets; the least recently used is forgotten first (a
   forgotten user starts again with a full bucket).
4. Per process: several processes behind a load balancer each allow ``per_minute``.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Hashable


class WriteRateLimiter:
    def __init__(self, *, per_minute: int, max_keys: int = 100_000) -> None:
        if per_minute < 1 or max_keys < 1:
            raise ValueError("per_minute and max_keys must be at least 1")
        self.per_minute = per_minute
        self.max_keys = max_keys
        self._rate = per_minute / 60.0
        self._buckets: OrderedDict[Hashable, tuple[float, float]] = OrderedDict()

    def take(self, key: Hashable, now: float) -> int | None:
        """Take one request for ``key``: None when allowed, else whole seconds to wait."""
        tokens, last = self._buckets.pop(key, (float(self.per_minute), now))
        tokens = min(float(self.per_minute), tokens + max(0.0, now - last) * self._rate)
        if tokens >= 1.0:
            tokens -= 1.0
            wait = None
        else:
            wait = max(1, math.ceil((1.0 - tokens) / self._rate))
        self._buckets[key] = (tokens, now)
        while len(self._buckets) > self.max_keys:
            self._buckets.popitem(last=False)
        return wait
