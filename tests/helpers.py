"""Test helpers: configs in temporary folders, and running the real CLI."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Optional

import yaml

REPO = Path(__file__).resolve().parent.parent
DEFAULT_CONFIG = REPO / "configs" / "pipeline.yaml"


def write_config(folder: Path, changes: Optional[dict] = None, name: str = "pipeline.yaml",
                 data_dir: Optional[Path] = None) -> Path:
    """A copy of the bundled config whose outputs land in `folder`; `changes` maps dotted keys to
    values (None deletes the key)."""
    raw = yaml.safe_load(DEFAULT_CONFIG.read_text())
    raw["data"]["input_base"] = str(data_dir or REPO / "data" / "penguins")
    raw["schema_file"] = str(REPO / "configs" / "schema.pbtxt")
    raw["runner"]["output_dir"] = str(folder / "outputs")
    raw["serving"]["serving_dir"] = str(folder / "serving")
    for dotted, value in (changes or {}).items():
        *parents, leaf = dotted.split(".")
        holder = raw
        for key in parents:
            holder = holder.setdefault(key, {})
        if value is None:
            holder.pop(leaf, None)
        else:
            holder[leaf] = value
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path


def run_cli(*args: str, timeout: int = 900, env: Optional[dict] = None
            ) -> subprocess.CompletedProcess:
    """Runs `python -m <args>` from the repo root, as a user would, capturing its output."""
    return subprocess.run([sys.executable, "-m", *args], cwd=REPO, capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, **(env or {})})


def report_path(stdout: str) -> Path:
    """The run report's path, from the CLI's output, whose last line it is."""
    last = stdout.strip().splitlines()[-1]
    assert last.startswith("  report:     "), stdout
    return Path(last.split("report:", 1)[1].strip())


def versions(model_base_path: Path) -> list:
    if not model_base_path.is_dir():
        return []
    return sorted(p.name for p in model_base_path.iterdir() if p.name.isdigit())


def tree_digest(folder: Path) -> dict:
    """Every file under folder with its bytes: equal digests mean byte-identical trees."""
    import hashlib

    if not folder.exists():
        return {}
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def copy_spans(folder: Path) -> Path:
    """A copy of the bundled dated spans in folder/data, to add spans to."""
    import shutil

    data = folder / "data"
    shutil.copytree(REPO / "data" / "penguins", data)
    return data


def add_span(data: Path, span: str, source: str = "span-20091231") -> Path:
    """A new dated span folder holding a copy of another span's rows, e.g. span-20101231."""
    import shutil

    (data / span).mkdir()
    return Path(shutil.copy(data / source / "penguins.csv", data / span / "penguins.csv"))


def kubeflow_local_changes(folder: Path, data: Path) -> dict:
    """write_config changes for a compiled spec that the conformance runner can run here: local
    paths as the pods' paths; the schema stays the image's copy (/opt/pipeline/configs/...),
    which the runner's emulated image provides."""
    return {"kubeflow.output_dir": str(folder / "spec"), "kubeflow.input_base": str(data),
            "kubeflow.serving_dir": str(folder / "serving"), "kubeflow.pipeline_root": None,
            "kubeflow.schema_file": None,
            "kubeflow.image": "tfx-pipeline-template:test", "kubeflow.endpoint": None}


def add_anomalous_span(data: Path, span: str, source: str = "span-20091231") -> Path:
    """A new dated span whose rows name an island the schema does not know: ExampleValidator
    reports ENUM_TYPE_UNEXPECTED_STRING_VALUES and the anomaly gate stops the run."""
    lines = (data / source / "penguins.csv").read_text().splitlines()
    header = lines[0].split(",")
    island = header.index("island")
    rows = [",".join(v if i != island else "Atlantis" for i, v in enumerate(line.split(",")))
            for line in lines[1:]]
    (data / span).mkdir()
    path = data / span / "penguins.csv"
    path.write_text("\n".join([lines[0], *rows]) + "\n")
    return path


def add_drifted_span(data: Path, span: str, source: str = "span-20091231",
                     grams: float = 900.0) -> Path:
    """A new dated span whose penguins weigh `grams` more (still inside the schema's range, so
    the validation gate passes): body_mass_g drifts, every other feature stays as it was."""
    lines = (data / source / "penguins.csv").read_text().splitlines()
    mass = lines[0].split(",").index("body_mass_g")
    rows = []
    for line in lines[1:]:
        cells = line.split(",")
        if cells[mass] not in ("NA", ""):
            cells[mass] = f"{float(cells[mass]) + grams:g}"
        rows.append(",".join(cells))
    (data / span).mkdir()
    path = data / span / "penguins.csv"
    path.write_text("\n".join([lines[0], *rows]) + "\n")
    return path


def without_entrypoint(spec: dict) -> dict:
    """The adapted spec with TFX's own entrypoints back (the fix undone): the negative control
    for pipeline/kubeflow/entrypoint.py."""
    import copy

    spec = copy.deepcopy(spec)
    for executor in spec["deploymentSpec"]["executors"].values():
        command = executor.get("container", {}).get("command", [])
        if command[:3] == ["python", "-m", "pipeline.kubeflow.entrypoint"]:
            executor["container"]["command"] = ["python", "-m", command[3]]
    return spec
