"""core/click_history.py: one history definition for the training data and the online updater.

scripts/generate_clicks.py keeps drawing its histories with numpy (a cell is a row's own draw of up
to 12 items, written untruncated so that the model's truncation is tested): writing them through
`history()` would cut the 12-item cells to 10 and change data/clicks' bytes. Instead these tests
hold the function to every bundled history: each cell, replayed as a stream of click events, comes
back as the list the model reads from it (its last `length` items)."""
from __future__ import annotations

import csv
import random

import pytest

from core.click_history import ClickEvent, HistorySpec, HistoryState, histories, history
from core.config import load_config
from tests.helpers import REPO

CONFIG = REPO / "configs" / "recommender.yaml"
BUNDLED = REPO / "data" / "clicks"


def spec() -> HistorySpec:
    return HistorySpec.from_config(load_config(CONFIG))


def online(events, spec: HistorySpec) -> dict:
    """The online updater's path: one HistoryState per user, events applied as they come."""
    states: dict = {}
    for event in events:
        states.setdefault(event.user_id, HistoryState(spec)).apply(event)
    return {user: state.history() for user, state in states.items()}


def stream(seed: int, users: int = 40, events: int = 3000) -> list:
    """Clicks with repeats, unknown ids, equal times and users with few clicks."""
    rng = random.Random(seed)
    items = [f"sku{1000 + i}" for i in range(30)] + ["new-item-1", "ünknown"]
    out = []
    for n in range(events):
        user = f"u{rng.randrange(users):03d}"
        out.append(ClickEvent(f"e{n}", user, rng.choice(items), rng.randrange(0, 500) * 1000))
    return out


def test_the_spec_is_the_recommender_configs():
    assert spec() == HistorySpec(length=10, keep="last", separator="|")


@pytest.mark.slow
def test_every_bundled_history_is_what_the_function_gives_for_its_clicks():
    """Each row's cell as clicks oldest first (one click a second): offline and online give the
    cell's last 10 items, what the model keeps (models/preprocessing.py, keep: last)."""
    s = spec()
    rows = 0
    for path in sorted(BUNDLED.glob("span-*/clicks.csv")):
        with open(path, newline="") as f:
            for line, row in enumerate(csv.DictReader(f), start=2):
                cell = row["user_click_history"]
                items = cell.split(s.separator) if cell else []
                # The generator draws without replacement: no history repeats an item, which is
                # why the function keeps each item once.
                assert len(set(items)) == len(items), (path, line)
                user = f"{path.parent.name}:{line}"
                events = [ClickEvent(f"{user}:{i}", user, item, i * 1000)
                          for i, item in enumerate(items)]
                expected = items[-s.length:]
                assert history(events, s) == expected, (path, line)
                state = HistoryState(s)
                for event in events:
                    state.apply(event)
                assert state.history() == expected, (path, line)
                assert s.cell(history(events, s)) == s.separator.join(expected)
                rows += 1
    assert rows == 90000


def test_the_bundled_data_has_the_cases_the_rule_must_cover():
    lengths = set()
    for path in sorted(BUNDLED.glob("span-*/clicks.csv")):
        with open(path, newline="") as f:
            for row in csv.DictReader(f):
                cell = row["user_click_history"]
                lengths.add(len(cell.split("|")) if cell else 0)
    assert {0, 10, 12} <= lengths   # empty, full, longer than the model keeps


@pytest.mark.parametrize("keep", ["last", "first"])
def test_one_stream_offline_and_online_gives_identical_histories(keep):
    s = HistorySpec(length=10, keep=keep)
    events = stream(seed=1)
    offline = histories(events, s)
    assert online(events, s) == offline
    # Redelivered (every event twice) and out of order: the same histories.
    replayed = events + events[::3]
    random.Random(2).shuffle(replayed)
    assert online(replayed, s) == offline
    assert histories(replayed, s) == offline
    assert all(len(h) == 10 and len(set(h)) == 10 for h in offline.values())


def test_the_rule_itself():
    s = HistorySpec(length=3)
    e = [ClickEvent("1", "u", "a", 1), ClickEvent("2", "u", "b", 2), ClickEvent("3", "u", "c", 3),
         ClickEvent("4", "u", "a", 4), ClickEvent("5", "u", "d", 5)]
    # a re-clicked moves to the newest place; b, the oldest, falls out.
    assert history(e, s) == ["c", "a", "d"]
    assert history(e, HistorySpec(length=3, keep="first")) == ["a", "b", "c"]
    # Equal times: by the id's bytes (Redis's order for equal scores).
    assert history([ClickEvent("1", "u", "z", 7), ClickEvent("2", "u", "y", 7)], s) == ["y", "z"]
    assert history([], s) == []
    # An unknown id is kept: the model maps it to an OOV bucket.
    assert history([ClickEvent("1", "u", "never-seen", 1)], s) == ["never-seen"]


def test_an_applied_event_applied_again_changes_nothing():
    state = HistoryState(HistorySpec(length=2))
    first = ClickEvent("1", "u", "a", 10)
    assert state.apply(first) is True
    assert state.apply(first) is False
    assert state.apply(ClickEvent("0", "u", "a", 5)) is False     # an older click of a
    assert state.apply(ClickEvent("2", "u", "b", 20)) is True
    assert state.apply(ClickEvent("3", "u", "c", 1)) is False     # older than both kept
    assert state.history() == ["a", "b"]


@pytest.mark.parametrize("event, field", [
    (ClickEvent("1", "u", "a|b", 1), "separator"),
    (ClickEvent("1", "u", "", 1), "item_id"),
    (ClickEvent("", "u", "a", 1), "event_id"),
    (ClickEvent("1", "u", "a", -1), "time_ms"),
    (ClickEvent("1", "u", "a", 2 ** 53), "time_ms"),
    (ClickEvent("1", "u", "a", 1.5), "time_ms"),
])
def test_what_no_history_can_hold_is_refused_by_name(event, field):
    with pytest.raises(ValueError, match=field):
        history([event], HistorySpec())
    with pytest.raises(ValueError, match=field):
        HistoryState(HistorySpec()).apply(event)


def test_one_users_events_only():
    with pytest.raises(ValueError, match="two users"):
        history([ClickEvent("1", "u", "a", 1), ClickEvent("2", "v", "a", 1)], HistorySpec())
