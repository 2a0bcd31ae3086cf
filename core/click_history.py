"""One definition of a user's click history, for the training data and the online updater (TF-free).

The model reads `features.lists.user_click_history` (configs/recommender.yaml): the item ids a user
clicked, oldest first, `length` of them kept (`keep: last`: the newest; `keep: first`: the oldest),
fewer padded by the model with the reserved id 0 (masked). This module is the one place that turns
click events into that list; the online store (service/history_store.py) keeps the same list in
Redis with the same rules, and tests/core/test_click_history.py replays one event stream through
both.

The rules, and why:
- **Order: oldest first**, by click time (`time_ms`); equal times by the item id's UTF-8 bytes, the
  order Redis gives equal scores in a sorted set, so both paths agree on ties.
- **Repeats are not kept: an item appears once**, at its newest click (`keep: last`; `keep: first`:
  at its first click). scripts/generate_clicks.py draws a history's items without replacement, so
  every bundled history (data/clicks) already holds distinct items: the model was trained on lists
  without repeats, and a re-click moves the item to the newest position rather than spending two
  of the `length` slots on it.
- **Length and keep from the config**: the newest `length` distinct items for `keep: last` (the
  bundled cells of 12 items reach the model as their last 10: models/preprocessing.py truncates
  the same way).
- **Unknown ids are kept as they are**: the model maps an id outside its vocabulary to an OOV
  bucket (features.ids.item_id.oov_buckets); the history is not filtered by the vocabulary, so a
  new item counts online as it would in the next training run. Only ids that cannot be written in
  a cell are refused here (empty, or holding the list separator); the charset and length checks of
  hostile ids belong to whatever takes events from outside (the updater, the endpoint).
- **Event ids make replays harmless**: the history depends only on each item's newest (or first)
  click time, a maximum (minimum), so applying an event twice, or events out of order, gives the
  same list. Nothing per event id has to be remembered (no unbounded set of seen ids): duplicated
  event ids in a log are dropped, and they are what a log line names.

    spec = HistorySpec.from_config(load_config("configs/recommender.yaml"))
    history(events, spec)                 # ['sku1258', 'sku1315', ...], oldest first
    spec.cell(history(events, spec))      # 'sku1258|sku1315|...', as data/clicks writes it
"""
from __future__ import annotations

import dataclasses
from typing import Dict, Iterable, List, Literal

FEATURE = "user_click_history"
# Redis scores are doubles: integer milliseconds are exact below 2**53 (year 287396).
MAX_TIME_MS = 2 ** 53


@dataclasses.dataclass(frozen=True)
class ClickEvent:
    """One click: `event_id` unique per event, `time_ms` milliseconds since the epoch."""
    event_id: str
    user_id: str
    item_id: str
    time_ms: int


@dataclasses.dataclass(frozen=True)
class HistorySpec:
    """features.lists.user_click_history's length and keep, and data.list_separator."""
    length: int = 10
    keep: Literal["last", "first"] = "last"
    separator: str = "|"

    def __post_init__(self):
        if self.length < 1:
            raise ValueError(f"a history's length is at least 1, not {self.length}")
        if self.keep not in ("last", "first"):
            raise ValueError(f"keep is 'last' or 'first', not {self.keep!r}")

    @classmethod
    def from_config(cls, config, feature: str = FEATURE) -> "HistorySpec":
        """From a loaded core.config.PipelineConfig (its list feature must have a fixed length)."""
        lists = config.features.lists
        if feature not in lists:
            raise ValueError(f"the config has no features.lists.{feature}")
        column = lists[feature]
        if column.element != "categorical" or column.length is None:
            raise ValueError(f"features.lists.{feature} must be a categorical list with a "
                             f"fixed length to be a click history")
        return cls(length=column.length, keep=column.keep, separator=config.data.list_separator)

    def cell(self, items: List[str]) -> str:
        """The CSV cell of a history (an empty history: an empty cell)."""
        return self.separator.join(items)


def check_event(event: ClickEvent, spec: HistorySpec) -> None:
    """Refuses what no history can hold; raises ValueError naming the field."""
    for name in ("event_id", "user_id", "item_id"):
        value = getattr(event, name)
        if not isinstance(value, str) or not value:
            raise ValueError(f"{name} must be a non-empty string, not {value!r}")
    if spec.separator in event.item_id:
        raise ValueError(f"item_id {event.item_id!r} holds the list separator "
                         f"{spec.separator!r}")
    if (isinstance(event.time_ms, bool) or not isinstance(event.time_ms, int)
            or not 0 <= event.time_ms < MAX_TIME_MS):
        raise ValueError(f"time_ms must be an integer in [0, 2**53), not {event.time_ms!r}")


def _order(item: str, time_ms: int) -> tuple:
    return (time_ms, item.encode("utf-8"))


class HistoryState:
    """One user's history, updated one event at a time: the online updater's rule in Python, the
    rule service/history_store.py's Lua script applies in Redis. It holds only the kept items, each
    with its newest (keep: last) or first (keep: first) click time."""

    def __init__(self, spec: HistorySpec):
        self.spec = spec
        self.times: Dict[str, int] = {}

    def apply(self, event: ClickEvent) -> bool:
        """Applies one click; True when the history changed (False for a replayed event)."""
        check_event(event, self.spec)
        last, item = self.spec.keep == "last", event.item_id
        known = self.times.get(item)
        if known is not None and (event.time_ms <= known if last else event.time_ms >= known):
            return False
        self.times[item] = event.time_ms
        if len(self.times) > self.spec.length:
            order = min if last else max
            drop = order(self.times, key=lambda i: _order(i, self.times[i]))
            del self.times[drop]
            # Dropped at once (older than every kept item): nothing changed.
            return drop != item
        return True

    def history(self) -> List[str]:
        return sorted(self.times, key=lambda i: _order(i, self.times[i]))


def history(events: Iterable[ClickEvent], spec: HistorySpec) -> List[str]:
    """The model's list for one user's click events (any order; repeated events harmless)."""
    seen, times = set(), {}
    pick = max if spec.keep == "last" else min
    user = None
    for event in events:
        check_event(event, spec)
        if user is None:
            user = event.user_id
        elif event.user_id != user:
            raise ValueError(f"events of two users ({user!r}, {event.user_id!r}): history() "
                             f"takes one user's events (histories() groups them)")
        if event.event_id in seen:
            continue
        seen.add(event.event_id)
        known = times.get(event.item_id)
        times[event.item_id] = event.time_ms if known is None else pick(known, event.time_ms)
    ranked = sorted(times, key=lambda i: _order(i, times[i]))
    return ranked[-spec.length:] if spec.keep == "last" else ranked[:spec.length]


def histories(events: Iterable[ClickEvent], spec: HistorySpec) -> Dict[str, List[str]]:
    """Every user's history, from a log of many users' events."""
    by_user: Dict[str, List[ClickEvent]] = {}
    for event in events:
        by_user.setdefault(event.user_id, []).append(event)
    return {user: history(own, spec) for user, own in by_user.items()}
