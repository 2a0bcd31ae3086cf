"""tests/PROMISES.md names real tests: every `path::test` (and `...::test` / `::test`, in the file
named before it on the row) resolves to a file that exists and defines that test. A renamed or
moved test fails here instead of leaving the map pointing at nothing."""
from __future__ import annotations

import re

from tests.helpers import REPO

PROMISES = REPO / "tests" / "PROMISES.md"
# A backticked test file, optionally with ::name (a parametrized case's [...] is not the name).
REFERENCE = re.compile(r"`((?:tests/[\w/.-]+\.py)|\.\.\.|)(?:::(\w+)(?:::(\w+))?)?(?:\[[^`]*\])?`")


def references(text: str):
    """(line number, file, test name or None) for each reference in the table rows."""
    for number, line in enumerate(text.splitlines(), 1):
        if not line.startswith("|"):
            continue
        last = None
        for path, first, second in REFERENCE.findall(line):
            if path.endswith(".py"):
                last = path
            elif not first:
                continue  # `...` or `` alone, not a reference
            yield number, last, second or first or None

def problems(text: str) -> list:
    found, sources = [], {}
    for number, path, name in references(text):
        if path is None:
            found.append(f"PROMISES.md:{number}: ::{name} with no test file before it on the row")
            continue
        file = REPO / path
        if not file.is_file():
            found.append(f"PROMISES.md:{number}: {path} does not exist")
            continue
        source = sources.setdefault(path, file.read_text())
        if name and not re.search(rf"^\s*(?:async\s+)?(?:def|class)\s+{name}\b", source, re.M):
            found.append(f"PROMISES.md:{number}: {path} has no test {name}")
    return found


def test_every_reference_names_a_test_that_exists():
    text = PROMISES.read_text()
    assert sum(1 for _ in references(text)) > 200  # the parser still reads the table
    assert problems(text) == []


def test_a_renamed_test_or_a_moved_file_is_caught():
    """Negative control: the checker is not blind to the two ways a map goes stale."""
    rows = ("| p | `tests/test_promises.py::test_that_was_renamed` | broke |\n"
            "| p | `tests/no_such_file.py::test_x` | broke |\n"
            "| p | `tests/test_promises.py::test_every_reference_names_a_test_that_exists`, "
            "`...::test_gone` and `::test_a_renamed_test_or_a_moved_file_is_caught` | broke |\n")
    assert problems(rows) == [
        "PROMISES.md:1: tests/test_promises.py has no test test_that_was_renamed",
        "PROMISES.md:2: tests/no_such_file.py does not exist",
        "PROMISES.md:3: tests/test_promises.py has no test test_gone"]
