"""`make help` lists every target a user can call, each with what it does (its `##` comment)."""
from __future__ import annotations

import re
import subprocess

from tests.helpers import REPO


def phony_targets() -> set:
    text = (REPO / "Makefile").read_text().replace("\\\n", " ")
    [line] = [line for line in text.splitlines() if line.startswith(".PHONY:")]
    return set(line.split(":", 1)[1].split())


def test_help_lists_every_target_with_what_it_does():
    shown = subprocess.run(["make", "--no-print-directory", "help"], cwd=REPO, check=True,
                           capture_output=True, text=True).stdout
    listed = dict(re.match(r"(\S+)\s+(.*)", line).groups() for line in shown.splitlines())
    assert set(listed) == phony_targets()
    assert all(len(what) > 10 for what in listed.values()), listed
