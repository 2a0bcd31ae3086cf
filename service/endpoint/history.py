"""A user's click history from Redis (core/history_store.py's sorted set, `ZRANGE key 0 -1`:
oldest first), read within redis.timeout_ms; merged with the request's recent_item_ids by
core/click_history.py's rule.

A failed read (Redis down, refused, timed out) is no error for the caller: read() answers None
and the endpoint falls back to the popular items (counted as recommend_history_reads_total
{result="error"}).
"""
from __future__ import annotations

import asyncio
import logging
from typing import List, Optional

import redis.asyncio as aioredis

from core.click_history import ClickEvent, HistorySpec, history
from core.history_store import history_key

log = logging.getLogger("service.endpoint")
MAX_CONNECTIONS = 64


class HistoryReader:
    def __init__(self, url: str, timeout_ms: int, prefix: str, **options):
        self.timeout_s, self.prefix = timeout_ms / 1000, prefix
        # No retries: one read within the budget, else the fallback. A bounded pool: when Redis
        # hangs, requests past MAX_CONNECTIONS fall back at once instead of opening more.
        self.client = aioredis.Redis.from_url(
            url, socket_timeout=self.timeout_s, socket_connect_timeout=self.timeout_s,
            decode_responses=True, retry_on_timeout=False, health_check_interval=0,
            max_connections=MAX_CONNECTIONS, **options)  # options: login, TLS (service_access)

    async def read(self, user_id: str) -> Optional[List[str]]:
        """The user's history (empty: none or expired), or None when Redis did not answer."""
        try:
            key = history_key(self.prefix, user_id)
            return await asyncio.wait_for(self.client.zrange(key, 0, -1),
                                          self.timeout_s)
        except Exception as e:  # noqa: BLE001 (timeout, refused, broken: never a 5xx)
            log.warning("history of %r not read from Redis: %s", user_id,
                        type(e).__name__ + (f": {e}" if str(e) else ""))
            return None

    async def close(self) -> None:
        await self.client.aclose()


def merged(stored: List[str], recent: List[str], spec: HistorySpec) -> List[str]:
    """The stored history, then the session's recent clicks (oldest first), by the one rule:
    an item once, at its newest position (keep: first: its first), `length` of them kept."""
    events = [ClickEvent(f"e{i}", "u", item, i) for i, item in enumerate([*stored, *recent])]
    return history(events, spec)
