"""A token bucket: ``rate`` takes a second on average, ``burst`` at once. What paces a
flood that each unit of would cost the server work (a terminal's frames, a sandbox's new
egress connections): past it, a take is refused, never queued."""

from __future__ import annotations

import time


class TokenBucket:
    def __init__(self, rate: float, burst: float) -> None:
        self.rate, self.burst = rate, burst
        self.tokens, self.at = burst, time.monotonic()

    def take(self) -> bool:
        now = time.monotonic()
        self.tokens = min(self.burst, self.tokens + (now - self.at) * self.rate)
        self.at = now
        if self.tokens < 1:
            return False
        self.tokens -= 1
        return True
