"""The fork check (tests/README.md): rewrites the bundled example in a scratch copy of this
checkout the way a fork does, then runs the template tests (all but tests/example) there.

    .venv/bin/python tests/fork_check.py [pytest arguments]  # default: tests -m "not e2e" -q -n 2

The copy gets new columns, classes and category values in data/ and configs/, the data folder
and file renamed, pipeline_name and model_name "fork" and `make deploy-names` run; its .venv is
this checkout's. Every template test must pass there; tests/example's may fail. The copy is a git
worktree under the system's temporary folder, removed at the end (--keep keeps it)."""
from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
COLUMNS = {"species": "kind", "island": "site", "bill_length_mm": "length_a",
           "bill_depth_mm": "depth_a", "flipper_length_mm": "length_b", "body_mass_g": "mass",
           "sex": "grp", "year": "yr"}
VALUES = {"Adelie": "ka", "Chinstrap": "kc", "Gentoo": "kg", "Biscoe": "sb", "Dream": "sd",
          "Torgersen": "st", "female": "gf", "male": "gm"}
NAMES = {"penguins": "fork"}


def _sub(text: str, *mappings: dict) -> str:
    for mapping in mappings:
        words = re.compile(r"\b(" + "|".join(map(re.escape, mapping)) + r")\b")
        text = words.sub(lambda m, mapping=mapping: mapping[m.group(1)], text)
    return text


def rewrite(root: Path) -> None:
    """The bundled example of the checkout at root, replaced as a fork replaces it."""
    data = root / "data" / "fork"
    shutil.move(root / "data" / "penguins", data)
    for csv in sorted(data.glob("*/penguins.csv")):
        (csv.parent / "rows.csv").write_text(_sub(csv.read_text(), COLUMNS, VALUES))
        csv.unlink()
    for name in ("pipeline.yaml", "schema.pbtxt"):
        path = root / "configs" / name
        path.write_text(_sub(path.read_text(), COLUMNS, VALUES, NAMES))
    subprocess.run([sys.executable, "deploy/serving/rename.py", "--config",
                    "configs/pipeline.yaml"], cwd=root, check=True)


def main(argv: list) -> int:
    keep = "--keep" in argv
    args = [a for a in argv if a != "--keep"] or ["tests", "-m", "not e2e", "-q", "-n", "2"]
    copy = Path(tempfile.mkdtemp(prefix="fork-check-")) / "repo"
    subprocess.run(["git", "worktree", "add", "--detach", str(copy), "HEAD"], cwd=REPO,
                   check=True, capture_output=True)
    try:
        # The working tree's tests, committed or not, on the committed template.
        shutil.rmtree(copy / "tests")
        shutil.copytree(REPO / "tests", copy / "tests",
                        ignore=shutil.ignore_patterns("__pycache__"))
        (copy / ".venv").symlink_to(REPO / ".venv")
        rewrite(copy)
        print(f"fork check in {copy}: pytest --ignore=tests/example {' '.join(args)}",
              flush=True)
        return subprocess.run([str(copy / ".venv" / "bin" / "python"), "-m", "pytest",
                               "--ignore=tests/example", "-p", "no:cacheprovider", *args],
                              cwd=copy).returncode
    finally:
        if not keep:
            subprocess.run(["git", "worktree", "remove", "--force", str(copy)], cwd=REPO,
                           capture_output=True)
            shutil.rmtree(copy.parent, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
