"""The documentation site (mkdocs.yml, make docs): `mkdocs build --strict` in a fresh process, the
README as its home page and every Markdown file git knows as a page. A broken link or anchor fails
the build; the controls build a two-page site of their own to show that it does."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.helpers import REPO


def build(config: Path, site: Path) -> subprocess.CompletedProcess:
    # NO_MKDOCS_2_WARNING: Material's banner about MkDocs 2.0, the same in every build.
    return subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(config),
                           "-d", str(site)], cwd=config.parent, capture_output=True, text=True,
                          timeout=120, env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})


def tracked_pages() -> list[str]:
    out = subprocess.run(["git", "ls-files", "*.md"], cwd=REPO, check=True, capture_output=True,
                         text=True).stdout
    return [line for line in out.splitlines() if (REPO / line).is_file()]


def test_the_site_builds_strictly_with_every_page(tmp_path):
    done = build(REPO / "mkdocs.yml", tmp_path / "site")
    assert done.returncode == 0, done.stderr[-4000:]
    home = (tmp_path / "site" / "index.html").read_text()
    assert REPO.joinpath("README.md").read_text().splitlines()[0].lstrip("# ") in home
    for page in tracked_pages():
        html = Path(page).with_suffix("").as_posix()
        html = html[:-len("README")] if html.endswith("README") else html + "/"
        assert (tmp_path / "site" / html / "index.html").is_file(), f"{page} is not on the site"


def small_site(root: Path, home: str) -> Path:
    """A git repository with this project's mkdocs.yml and docs/, its nav two pages of its own."""
    (root / "docs").mkdir(parents=True)
    (root / "docs" / "pages.py").write_text((REPO / "docs" / "pages.py").read_text())
    config = (REPO / "mkdocs.yml").read_text()
    nav = "\nnav:\n  - Home: README.md\n  - Part: part/README.md\n"
    config = config[:config.index("\nnav:")] + nav
    (root / "mkdocs.yml").write_text(config)
    (root / "part").mkdir()
    (root / "part" / "README.md").write_text("# Part\n\n## Where it runs\n\nText.\n")
    (root / "README.md").write_text(f"# Home\n\n{home}\n")
    subprocess.run(["git", "init", "-q"], cwd=root, check=True)
    return root / "mkdocs.yml"


def test_a_good_link_and_anchor_build(tmp_path):
    done = build(small_site(tmp_path, "[it](part/README.md#where-it-runs)"), tmp_path / "site")
    assert done.returncode == 0, done.stderr[-4000:]


def test_a_broken_anchor_fails_the_build(tmp_path):
    home = "[it](part/README.md#where-it-ran), [here](#nowhere)"
    done = build(small_site(tmp_path, home), tmp_path / "site")
    assert done.returncode != 0
    assert "does not contain an anchor '#where-it-ran'" in done.stderr
    assert "'#nowhere', but there is no such anchor on this page" in done.stderr


def test_a_link_to_a_missing_page_fails_the_build(tmp_path):
    done = build(small_site(tmp_path, "[it](parts/README.md)"), tmp_path / "site")
    assert done.returncode != 0
    assert "parts/README.md" in done.stderr
