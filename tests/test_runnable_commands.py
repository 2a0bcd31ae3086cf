"""Every shell command a page shows in a block marked runnable runs here and exits 0
(tests/README.md: the documentation site and runnable commands): a `<!-- runnable -->` line right
before a ```bash block. Each line of the block is one command, run by bash from the repository root
with the venv's python first on PATH, as a reader whose venv is active runs it. Only cheap and safe
commands carry the mark."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import REPO

BLOCK = re.compile(r"^<!-- runnable -->\n```bash\n(.*?)^```", re.M | re.S)


def marked_commands(text: str) -> list[str]:
    """The commands of text's runnable blocks: each line that is not blank or a comment."""
    return [line.strip() for block in BLOCK.findall(text) for line in block.splitlines()
            if line.strip() and not line.lstrip().startswith("#")]


def pages() -> list[str]:
    out = subprocess.run(["git", "ls-files", "*.md"], cwd=REPO, check=True, capture_output=True,
                         text=True).stdout
    return [line for line in out.splitlines() if (REPO / line).is_file()]


COMMANDS = [(page, command) for page in pages()
            for command in marked_commands((REPO / page).read_text())]


def run(command: str) -> subprocess.CompletedProcess:
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    return subprocess.run(["bash", "-c", command], cwd=REPO, capture_output=True, text=True,
                          timeout=120, env={**os.environ, "PATH": path})


@pytest.mark.parametrize("page, command", COMMANDS, ids=[f"{p}: {c}" for p, c in COMMANDS])
def test_a_runnable_command_runs(page, command):
    done = run(command)
    assert done.returncode == 0, (f"{page}: `{command}` exited {done.returncode}:\n"
                                  f"{done.stderr[-2000:]}")
    assert done.stdout.strip(), f"{page}: `{command}` printed nothing"


def test_the_pages_mark_commands():
    assert {"make help", "python -m pipeline.doctor --help"} <= {c for _, c in COMMANDS}


def test_only_a_marked_block_counts_and_a_failing_command_fails():
    text = ("<!-- runnable -->\n```bash\n# a comment\nfalse\n\ntrue\n```\n\n"
            "```bash\nmake run\n```\n<!-- runnable -->\n\n```bash\nmake test\n```\n")
    assert marked_commands(text) == ["false", "true"]
    assert run("false").returncode != 0
