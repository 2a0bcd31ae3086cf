"""scripts/generate_clicks.py and the click log it wrote (data/clicks): the same bytes for a seed,
the bundled spans exactly what data/README.md's command writes, a planted structure that rewards
reading the history, and the history cells a list column's tests need (empty, longer than 10)."""
from __future__ import annotations

import csv
import json
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import REPO

SCRIPT = REPO / "scripts" / "generate_clicks.py"
BUNDLED = REPO / "data" / "clicks"
SMALL = ["--spans", "2", "--rows", "400", "--items", "40", "--users", "60"]


def generate(out: Path, *args: str) -> dict:
    """Runs the script in a fresh process; its last printed line, parsed."""
    done = subprocess.run([sys.executable, str(SCRIPT), "--out", str(out), *args],
                          capture_output=True, text=True, timeout=120, cwd=REPO)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def files(folder: Path) -> dict:
    return {p.relative_to(folder).as_posix(): p.read_bytes()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def readme_arguments() -> list:
    """The arguments of data/README.md's generation command, --out left out."""
    found = re.findall(r"^python scripts/generate_clicks\.py (.+)$",
                       (REPO / "data" / "README.md").read_text(), re.M)
    assert len(found) == 1, found
    words = shlex.split(found[0])
    at = words.index("--out")
    assert words[at + 1] == "data/clicks"
    return words[:at] + words[at + 2:]


@pytest.fixture(scope="module")
def regenerated(tmp_path_factory):
    out = tmp_path_factory.mktemp("clicks")
    return out, generate(out, *readme_arguments())


def test_the_same_seed_writes_the_same_bytes_another_seed_others(tmp_path):
    first = generate(tmp_path / "a", *SMALL, "--seed", "11")
    second = generate(tmp_path / "b", *SMALL, "--seed", "11")
    other = generate(tmp_path / "c", *SMALL, "--seed", "12")
    a, b, c = (files(tmp_path / name) for name in "abc")
    assert set(a) == {"generation.json", "span-20240101/clicks.csv", "span-20240102/clicks.csv"}
    assert a == b and first == second
    assert set(c) == set(a)
    assert all(c[name] != a[name] for name in a)
    assert other["rows"] == first["rows"] == 800


@pytest.mark.slow
def test_the_bundled_spans_are_what_the_readme_command_writes(regenerated):
    out, printed = regenerated
    assert files(out) == files(BUNDLED)
    assert json.loads((BUNDLED / "generation.json").read_text()) == printed


@pytest.mark.slow
def test_the_history_carries_what_popularity_does_not(regenerated):
    auc = regenerated[1]["auc"]
    assert auc["achievable"] >= auc["popularity"] + 0.1
    assert auc["achievable"] >= auc["popularity_true_bias"] + 0.1
    assert auc["achievable"] - auc["history"] <= 0.03
    assert 0.78 <= auc["achievable"] <= 0.87
    assert 0.2 <= regenerated[1]["positive_rate"] <= 0.4


def test_the_bundled_spans_hold_short_empty_and_long_histories():
    for path in sorted(BUNDLED.glob("span-*/clicks.csv")):
        with open(path, newline="") as handle:
            rows = list(csv.DictReader(handle))
        assert len(rows) >= 30000
        assert list(rows[0]) == ["user_id", "item_id", "user_click_history", "hour", "device",
                                 "clicked"]
        lengths = [len(r["user_click_history"].split("|")) if r["user_click_history"] else 0
                   for r in rows]
        assert min(lengths) == 0 and max(lengths) == 12
        assert sum(0 < n < 10 for n in lengths) > 100 and sum(n > 10 for n in lengths) > 100
        assert all("" not in r["user_click_history"].split("|") for r in rows
                   if r["user_click_history"])
        items = {r["item_id"] for r in rows}
        assert 200 <= len(items) <= 1000 and all(re.fullmatch(r"sku\d+", i) for i in items)
        assert {r["clicked"] for r in rows} == {"0", "1"}
        assert {r["device"] for r in rows} == {"mobile", "desktop", "tablet"}
        assert {int(r["hour"]) for r in rows} == set(range(24))


def test_the_unseen_style_is_one_file_under_other_names(tmp_path):
    printed = generate(tmp_path, "--style", "unseen", "--rows", "6000", "--seed", "5")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["generation.json", "purchases.csv"]
    with open(tmp_path / "purchases.csv", newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert list(rows[0]) == ["visitor", "product", "recent_products", "hour_of_day", "channel",
                             "bought"]
    assert len(rows) == printed["rows"] == 6000
    assert all(re.fullmatch(r"P\d+", r["product"]) for r in rows)
    assert {r["channel"] for r in rows} == {"app", "web", "kiosk"}
    assert printed["auc"]["achievable"] >= printed["auc"]["popularity"] + 0.1
    done = subprocess.run([sys.executable, str(SCRIPT), "--out", str(tmp_path / "x"),
                           "--style", "unseen", "--spans", "2"], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode != 0 and "one file" in done.stderr
