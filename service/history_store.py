"""Users' click histories in Redis, kept by core/click_history.py's rule (TF-free).

One sorted set per user, `history:<user_id>`: member the item id, score the click time (ms). The
rule's state is exactly that: each kept item with its newest click time (`keep: last`; `keep:
first`: its first). One Lua script applies an event atomically (Redis runs a script alone):

    ZADD key GT CH time item        -- keep: first uses LT; a new item is added either way
    trim to `length` members         -- drop the oldest (keep: first: the newest)
    PEXPIRE key ttl                  -- only when the history changed

so the stored history is HistoryState's (tests/service/test_history_store.py replays one stream
through both). Reading it is `ZRANGE key 0 -1`: ascending score, equal scores by the member's bytes,
the order the rule defines: oldest first, the model's `user_click_history`.

Idempotent by construction: an event applied again (a redelivery after a restart, the updater
killed between this write and its offset commit) finds its item already at that time or newer
and changes nothing, not even the TTL; events out of order give the same history. No set of seen
event ids has to be kept (it would grow with every click); the event id names the event in logs
and dead letters.

TTL: a history expires `ttl_s` after its last change (a user idle that long has no history: the
endpoint's fallback): configs/recommender_service.yaml's history.ttl_s (service/config.py).

    store = HistoryStore.from_service_config(redis.Redis(...), load_service_config(path))
    # or HistoryStore(client, HistorySpec.from_config(config), ttl_s=30 * 86400)
    store.apply(ClickEvent("e1", "u00001", "sku1019", 1704067200000))   # True: changed
    store.history("u00001")                                              # ['sku1019']
"""
from __future__ import annotations

from typing import List

from core.click_history import ClickEvent, HistorySpec, check_event

KEY_PREFIX = "history:"

# KEYS[1]: the user's history; ARGV: item, time_ms, length, keep, ttl_ms. Returns 1 when the
# history changed, else 0.
APPLY = """
local key, item, time_ms = KEYS[1], ARGV[1], ARGV[2]
local length, keep, ttl_ms = tonumber(ARGV[3]), ARGV[4], tonumber(ARGV[5])
local flag = 'GT'
if keep == 'first' then flag = 'LT' end
local changed = redis.call('ZADD', key, flag, 'CH', time_ms, item)
local size = redis.call('ZCARD', key)
if size > length then
  if keep == 'first' then
    redis.call('ZREMRANGEBYRANK', key, length, -1)
  else
    redis.call('ZREMRANGEBYRANK', key, 0, size - length - 1)
  end
end
-- Added and trimmed at once (older than every kept item): nothing changed.
if changed == 1 and redis.call('ZSCORE', key, item) then
  redis.call('PEXPIRE', key, ttl_ms)
  return 1
end
return 0
"""


def history_key(prefix: str, user_id: str) -> str:
    """The Redis key of a user's history: what the updater writes and the endpoint reads."""
    return f"{prefix}{user_id}"


def _text(value) -> str:
    return value.decode("utf-8") if isinstance(value, bytes) else value


class HistoryStore:
    """Applies click events to, and reads, users' bounded histories in one Redis database."""

    def __init__(self, client, spec: HistorySpec, ttl_s: int, prefix: str = KEY_PREFIX):
        if not isinstance(ttl_s, int) or isinstance(ttl_s, bool) or ttl_s < 1:
            raise ValueError(f"ttl_s must be a whole number of seconds >= 1, not {ttl_s!r}")
        self.client, self.spec, self.ttl_s, self.prefix = client, spec, ttl_s, prefix
        self._apply = client.register_script(APPLY)

    @classmethod
    def from_service_config(cls, client, service) -> "HistoryStore":
        """The spec from the served model's pipeline config, the TTL and key prefix from the
        service config (service/config.py's ServiceConfig)."""
        return cls(client, service.history_spec(), ttl_s=service.history.ttl_s,
                   prefix=service.history.key_prefix)

    def key(self, user_id: str) -> str:
        return history_key(self.prefix, user_id)

    def apply(self, event: ClickEvent) -> bool:
        """Applies one click; True when the history changed (False: a replay or too old)."""
        check_event(event, self.spec)
        changed = self._apply(keys=[self.key(event.user_id)],
                              args=[event.item_id, str(event.time_ms), self.spec.length,
                                    self.spec.keep, self.ttl_s * 1000])
        return int(changed) == 1

    def history(self, user_id: str) -> List[str]:
        """The user's history, oldest first (empty: no clicks, or expired)."""
        return [_text(item) for item in self.client.zrange(self.key(user_id), 0, -1)]

    def cell(self, user_id: str) -> str:
        return self.spec.cell(self.history(user_id))
