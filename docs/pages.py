"""The site's pages (mkdocs.yml, mkdocs-gen-files): every Markdown file git knows, read where it is,
so that GitHub and the site show the same files, plus the other files those pages link to. MkDocs
is not pointed at the repository itself: it would walk .venv and .git (240,000 files, 25 s)."""

import re
import subprocess
from pathlib import Path

import mkdocs_gen_files

REPO = Path(__file__).resolve().parents[1]
# A relative link's target: ](path) or ](path#anchor); not a URL, not an anchor on the page.
LINK = re.compile(r"\]\((?![a-z]+:|#)([^)#\s]+)")


def tracked(pattern: str) -> list[str]:
    """The files git tracks or would (untracked, not ignored) that match pattern."""
    out = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard", pattern],
                         cwd=REPO, check=True, capture_output=True, text=True).stdout
    return sorted({line for line in out.splitlines() if (REPO / line).is_file()})


def publish(path: str) -> None:
    with mkdocs_gen_files.open(path, "wb") as out:
        out.write((REPO / path).read_bytes())


pages = [page for page in tracked("*.md") if not page.startswith("docs/")]
linked = set()
for page in pages:
    for target in LINK.findall((REPO / page).read_text()):
        path = (REPO / page).parent.joinpath(target).resolve()
        if path.is_file() and path.suffix != ".md" and REPO in path.parents:
            linked.add(str(path.relative_to(REPO)))
for path in pages + sorted(linked):
    publish(path)
