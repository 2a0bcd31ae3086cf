"""Puts the config's model name in every serving file here: rename the model in one place.

    .venv/bin/python deploy/serving/rename.py [--config configs/pipeline.yaml] [--out DIR]
    make deploy-names [CONFIG=...]

The files in deploy/serving name one model: TF Serving's model name and base path
(/models/<name>, /v1/models/<name>), the Kubernetes objects (tf-serving-<name>, <name>-models,
the app.kubernetes.io/instance label), the Prometheus series and alert summaries, the dashboard.
The name they carry now is read from config/models.config; the new one is the config's
serving.model_name (Kubernetes names get its DNS-1123 form: lower case, '-' for other characters).
Without --out the files are rewritten in place; with it, a renamed copy of the folder is written
there. tests/deploy checks that the files carry the config's name and that a renamed copy passes
the same tools (kubernetes-validate, promtool, docker compose) as the originals.
READMEs and code are left as they are: they describe the bundled example.
"""
from __future__ import annotations

import argparse
import re
import shutil
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
# The files that name the model: manifests, server and monitoring configs.
RENAMED = ("*.yaml", "*.yml", "*.config", "*.json")


def current_name(folder: Path = HERE) -> str:
    """The model the files serve now: the first model in config/models.config."""
    text = (folder / "config" / "models.config").read_text()
    found = re.search(r'^\s*name:\s*"([^"]+)"', text, re.M)
    if not found:
        raise SystemExit(f"error: {folder / 'config' / 'models.config'} names no model")
    return found.group(1)


def kubernetes_name(name: str) -> str:
    """A model name as part of a Kubernetes object name or label value (DNS-1123)."""
    return re.sub(r"[^a-z0-9-]+", "-", name.lower()).strip("-")


def rename_text(text: str, old: str, new: str) -> str:
    word = rf"(?<![\w.]){re.escape(old)}(?![\w])"
    # Parts of Kubernetes names (tf-serving-<name>, <name>-models) and the instance label.
    text = re.sub(rf"(?<=-){word}|{word}(?=-)", kubernetes_name(new), text)
    text = re.sub(rf"(app\.kubernetes\.io/instance:\s*){word}", rf"\g<1>{kubernetes_name(new)}",
                  text)
    # Everywhere else it is TF Serving's model name: paths, quoted names, series labels, prose.
    return re.sub(word, new.replace("\\", "\\\\"), text)


def rename(new: str, source: Path = HERE, out: Path = HERE) -> list:
    """Renames the model in source's files (into out); returns the files that changed."""
    old = current_name(source)
    if out != source:
        shutil.copytree(source, out, dirs_exist_ok=True,
                        ignore=shutil.ignore_patterns("__pycache__"))
    changed = []
    for pattern in RENAMED:
        for path in sorted(out.rglob(pattern)):
            text = path.read_text()
            renamed = rename_text(text, old, new)
            if renamed != text:
                path.write_text(renamed)
                changed.append(path)
    return changed


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", type=Path, default=REPO / "configs" / "pipeline.yaml")
    parser.add_argument("--out", type=Path, help="write a renamed copy here (default: in place)")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(REPO))
    from core.config import ConfigError, load_config

    try:
        new = load_config(args.config).serving.model_name
    except ConfigError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    old = current_name()
    changed = rename(new, HERE, (args.out or HERE).resolve())
    where = args.out or HERE.relative_to(REPO)
    print(f"{where}: model '{old}' -> '{new}' in {len(changed)} file(s)" if old != new
          else f"{where}: the files already serve '{new}'")
    return 0


if __name__ == "__main__":
    sys.exit(main())
