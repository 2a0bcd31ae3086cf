"""A circuit breaker for the endpoint's TF Serving calls (tf_serving.breaker_failures,
tf_serving.breaker_cooldown_s).

closed: every call goes through; `failures` consecutive failed calls open it.
open: no call is made (the endpoint answers the popularity fallback at once, reason
circuit_open), so a dead or frozen TF Serving does not cost each request its whole budget.
half_open: after `cooldown_s` open, the first request is let through as the probe, alone: the
others still get the fallback while it runs. Its success closes the breaker, its failure opens it
again for another cooldown; a probe that ends with neither (the request cancelled) hands the
probe to the next request.

One event loop owns it (the endpoint's), so no lock: allow, success and failure run between
awaits. No library: none is locked (aiobreaker, pybreaker), and this is the whole of it.
"""
from __future__ import annotations

import time
from typing import Callable

CLOSED, HALF_OPEN, OPEN = "closed", "half_open", "open"
# The value of recommend_tf_serving_circuit_state for each state.
STATE_VALUES = {CLOSED: 0, HALF_OPEN: 1, OPEN: 2}


class CircuitBreaker:
    def __init__(self, failures: int, cooldown_s: float,
                 on_change: Callable[[str, str, str], None],
                 clock: Callable[[], float] = time.monotonic):
        """on_change(old, new, why) runs once per change of state (metrics, one log line)."""
        self.failures, self.cooldown_s = failures, cooldown_s
        self.on_change, self.clock = on_change, clock
        self.state, self.consecutive, self.opened_at = CLOSED, 0, 0.0

    def allow(self) -> bool:
        """Whether this request may call TF Serving (the probe, when it is the one let by)."""
        if self.state == CLOSED:
            return True
        if self.state == OPEN and self.clock() - self.opened_at >= self.cooldown_s:
            self._change(HALF_OPEN, f"{self.cooldown_s:g} s open: one probe request")
            return True
        return False

    def success(self) -> None:
        self.consecutive = 0
        if self.state != CLOSED:
            self._change(CLOSED, "the probe request was answered")

    def failure(self, why: str) -> None:
        self.consecutive += 1
        if self.state == HALF_OPEN:
            self._open(f"the probe failed ({why})")
        elif self.state == CLOSED and self.consecutive >= self.failures:
            self._open(f"{self.consecutive} consecutive failures, the last: {why}")

    def abandoned(self) -> None:
        """A call that ended with no verdict (cancelled): its probe goes to the next request."""
        if self.state == HALF_OPEN:
            self.opened_at = self.clock() - self.cooldown_s
            self._change(OPEN, "the probe request was cancelled")

    def _open(self, why: str) -> None:
        self.opened_at = self.clock()
        self._change(OPEN, why)

    def _change(self, new: str, why: str) -> None:
        old, self.state = self.state, new
        self.on_change(old, new, why)
