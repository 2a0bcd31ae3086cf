"""Puts the config's model name and TF Serving version in every serving file here: rename the
model (or move the server to another release) in one place.

    .venv/bin/python deploy/serving/rename.py [--config configs/pipeline.yaml] [--out DIR]
    make deploy-names [CONFIG=...]

The files in deploy/serving name one model: TF Serving's model name and base path
(/models/<name>, /v1/models/<name>), the Kubernetes objects (tf-serving-<name>, <name>-models,
the app.kubernetes.io/instance label), the Prometheus series and alert summaries, the dashboard.
The name they carry now is read from config/models.config; the new one is the config's
serving.model_name (Kubernetes names get its DNS-1123 form: lower case, '-' for other characters).
Every tensorflow/serving image is tagged with the config's serving.tf_serving_version, and the
canary release (k8s/rollout) takes serving.canary: the Rollout's steps (a weight, then an
analysis, for each of `weights`) and the AnalysisTemplate's thresholds.
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
from typing import Optional

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
# The files that name the model: manifests, server and monitoring configs.
RENAMED = ("*.yaml", "*.yml", "*.config", "*.json")
# TF Serving's image, as the manifests and the compose file name it (a -gpu suffix is kept).
IMAGE = re.compile(r"(tensorflow/serving:)\d+\.\d+\.\d+")


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


# The Rollout's steps before the last (setWeight: 100), and one analysis step of them.
STEPS = re.compile(r"(\n      steps:\n)(.*?)(?=\n        # After the last step)", re.S)
ANALYSIS_STEP = re.compile(r"        - analysis:\n.*?(?=\n        - setWeight|\Z)", re.S)
# serving.canary's keys -> the AnalysisTemplate's arguments.
ANALYSIS_ARGS = {"analysis_window": "window", "min_requests": "min-requests",
                 "max_error_ratio": "max-error-ratio", "p99_slo_ms": "p99-slo-ms",
                 "max_p99_ratio": "max-p99-ratio"}


def with_canary(text: str, canary: dict) -> str:
    """A rollout file with serving.canary's steps, or the analysis template with its
    thresholds; any other file as it is."""
    steps = STEPS.search(text)
    if steps:
        analysis = ANALYSIS_STEP.search(steps.group(2)).group(0)
        text = text[:steps.start(2)] + "\n".join(
            f"        - setWeight: {weight}\n{analysis}" for weight in canary["weights"]
        ) + text[steps.end(2):]
    for key, arg in ANALYSIS_ARGS.items():
        value = canary[key]
        value = f"{value:g}" if isinstance(value, float) else str(value)
        text = re.sub(rf'(- name: {arg}\n\s+value: )"?[^"\n]*"?', rf'\g<1>"{value}"', text)
    return text


def image_tags(folder: Path = HERE) -> set:
    """The TF Serving releases the files' images name."""
    return {match.group(0).split(":")[1] for pattern in RENAMED
            for path in folder.rglob(pattern) for match in IMAGE.finditer(path.read_text())}


def rename(new: str, source: Path = HERE, out: Path = HERE, version: Optional[str] = None,
           canary: Optional[dict] = None) -> list:
    """Renames the model in source's files (into out), tags TF Serving's image with `version`
    and writes the canary settings (serving.canary, a dict) when given; returns the files that
    changed."""
    old = current_name(source)
    if out != source:
        shutil.copytree(source, out, dirs_exist_ok=True,
                        ignore=shutil.ignore_patterns("__pycache__"))
    changed = []
    for pattern in RENAMED:
        for path in sorted(out.rglob(pattern)):
            text = path.read_text()
            renamed = rename_text(text, old, new)
            if version is not None:
                renamed = IMAGE.sub(rf"\g<1>{version}", renamed)
            if canary is not None:
                renamed = with_canary(renamed, canary)
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
        serving = load_config(args.config).serving
    except ConfigError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    new, version, old, tags = serving.model_name, serving.tf_serving_version, current_name(), \
        image_tags()
    changed = rename(new, HERE, (args.out or HERE).resolve(), version,
                     serving.canary.model_dump())
    where = args.out or HERE.relative_to(REPO)
    print(f"{where}: model '{old}' -> '{new}', TF Serving {'/'.join(sorted(tags))} -> "
          f"{version}, in {len(changed)} file(s)" if changed
          else f"{where}: the files already serve '{new}' on TF Serving {version}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
