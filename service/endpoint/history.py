"""A user's click history from Redis (service/history_store.py's sorted set, `ZRANGE key 0 -1`:
oldest first), read within redis.timeout_ms; merged with the request's recent_item_ids by
core/click_history.py's rule.

A failed read (Redis down, refused, timed out) is no error for the caller: read() answers None
and the endpoint falls back to the popular items (counted as recommend_history_reads_total
{result="error"}). The log gets a few lines per outage, not one per request (OutageLog).
"""
from __future__ import annotations

import asyncio
import logging
import time
from typing import Callable, List, Optional

import redis.asyncio as aioredis

from core.click_history import ClickEvent, HistorySpec, history
from service.history_store import history_key
from service.endpoint import errors

log = logging.getLogger("service.endpoint")
MAX_CONNECTIONS = 64
# During an outage, one summary line per this many seconds.
OUTAGE_LOG_INTERVAL_S = 10.0


class OutageLog:
    """The log of failed history reads: the first failure's line (its request id and Redis's
    error), then at most one line per interval_s counting the failures since, and one when a
    read succeeds again. Why not a line per failure: in an outage every request fails its read,
    and a WARNING each is thousands of lines a second written synchronously on the event loop
    (the handler's I/O then slows every request, the fallbacks included) and a user id in the
    log per request; the count is in recommend_history_reads_total{result="error"} anyway."""

    def __init__(self, interval_s: float = OUTAGE_LOG_INTERVAL_S,
                 clock: Callable[[], float] = time.monotonic):
        self.interval_s, self.clock = interval_s, clock
        self.since: Optional[float] = None  # when the outage's first failure was logged
        self.last, self.unlogged = 0.0, 0

    def failed(self, detail: str) -> None:
        now = self.clock()
        if self.since is None:
            self.since, self.last, self.unlogged = now, now, 0
            log.warning("Redis: a history read failed (request %s): %s; further failures are "
                        "counted, one line per %g s", errors.current(), detail, self.interval_s)
            return
        self.unlogged += 1
        if now - self.last >= self.interval_s:
            log.warning("Redis: %d more history reads failed in the last %.0f s (the last, "
                        "request %s: %s)", self.unlogged, now - self.last, errors.current(),
                        detail)
            self.last, self.unlogged = now, 0

    def answered(self) -> None:
        if self.since is not None:
            log.warning("Redis: history reads answered again after %.1f s (%d failures since "
                        "the last line)", self.clock() - self.since, self.unlogged)
            self.since = None


class HistoryReader:
    def __init__(self, url: str, timeout_ms: int, prefix: str, **options):
        self.timeout_s, self.prefix = timeout_ms / 1000, prefix
        # No retries: one read within the budget, else the fallback. A bounded pool: when Redis
        # hangs, requests past MAX_CONNECTIONS fall back at once instead of opening more.
        self.client = aioredis.Redis.from_url(
            url, socket_timeout=self.timeout_s, socket_connect_timeout=self.timeout_s,
            decode_responses=True, retry_on_timeout=False, health_check_interval=0,
            max_connections=MAX_CONNECTIONS, **options)  # options: login, TLS (service/logins.py)
        self.outage = OutageLog()

    async def read(self, user_id: str) -> Optional[List[str]]:
        """The user's history (empty: none or expired), or None when Redis did not answer."""
        try:
            key = history_key(self.prefix, user_id)
            stored = await asyncio.wait_for(self.client.zrange(key, 0, -1),
                                            self.timeout_s)
        except Exception as e:  # noqa: BLE001 (timeout, refused, broken: never a 5xx)
            self.outage.failed(type(e).__name__ + (f": {e}" if str(e) else ""))
            return None
        self.outage.answered()
        return stored

    async def close(self) -> None:
        await self.client.aclose()


def merged(stored: List[str], recent: List[str], spec: HistorySpec) -> List[str]:
    """The stored history, then the session's recent clicks (oldest first), by the one rule:
    an item once, at its newest position (keep: first: its first), `length` of them kept."""
    events = [ClickEvent(f"e{i}", "u", item, i) for i, item in enumerate([*stored, *recent])]
    return history(events, spec)
